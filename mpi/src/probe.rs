//! `MPI_Iprobe` and `MPI_Probe` under a logging protocol. Whether an `MPI_Iprobe` finds a
//! message, and which one a wildcard probe names, follow arrival timing: the finding is logged
//! at the call's tick ("seen" determinant), and a replay finds the same message in the same
//! call (awaited, bounded), or nothing where the first run found nothing.

use std::ffi::c_int;

use reverb_runtime::LoggedProbe;
use reverb_transport::Rank;

use crate::abi::*;
use crate::errors::MpiResult;
use crate::p2p::recv_match;
use crate::request::Status;
use crate::state::State;
use crate::tags;

/// A probe's outcome in one try.
pub(crate) enum Probed {
    Found(Status),
    Nothing,
    /// Replaying: the first run found a message in this call that has not arrived yet.
    NotYet,
}

impl State {
    /// One try of a probe for (`source`, `tag`) on `comm`; the call ticks first (ticks on).
    pub(crate) fn probe_once(&mut self, source: c_int, tag: c_int, comm: c_int) -> MpiResult<Probed> {
        if !self.ticks_on {
            return Ok(self.probe_now(source, tag, comm)?.map_or(Probed::Nothing, Probed::Found));
        }
        self.tick_once()?;
        let c = self.comm(comm)?;
        let Some((from, matching)) = recv_match(c, source, tag)? else {
            return Ok(Probed::Found(Status::proc_null()));
        };
        Ok(match self.rt.probe_logged(from, matching)? {
            LoggedProbe::Found(src, t, len) => Probed::Found(self.probe_status(comm, src, t, len)?),
            LoggedProbe::Nothing => Probed::Nothing,
            LoggedProbe::NotYet => Probed::NotYet,
        })
    }

    /// `MPI_Iprobe`'s finding: a replay waits (bounded) for the message the first run found.
    pub(crate) fn iprobe(&mut self, source: c_int, tag: c_int, comm: c_int) -> MpiResult<Option<Status>> {
        self.progress()?;
        if !self.ticks_on {
            return self.probe_now(source, tag, comm);
        }
        let mut found = None;
        self.wait_until("MPI_Iprobe: the message the log says it found", |s| {
            Ok(match s.probe_once(source, tag, comm)? {
                Probed::Found(st) => {
                    found = Some(st);
                    true
                }
                Probed::Nothing => true,
                Probed::NotYet => false,
            })
        })?;
        Ok(found)
    }

    /// `MPI_Probe`'s finding, waited for (bounded).
    pub(crate) fn probe_blocking(&mut self, source: c_int, tag: c_int, comm: c_int) -> MpiResult<Status> {
        let mut found = None;
        self.wait_until("MPI_Probe", |s| {
            if let Probed::Found(st) = s.probe_once(source, tag, comm)? {
                found = Some(st);
            }
            Ok(found.is_some())
        })?;
        Ok(found.unwrap_or_else(Status::empty))
    }

    /// The status of a probe's finding: a large message's first piece (BIG) gives the whole
    /// message's length (`frag`), in the first bytes the probe saw.
    pub(crate) fn probe_status(&self, comm: c_int, src: Rank, tag: u64, len: usize) -> MpiResult<Status> {
        let c = self.comm(comm)?;
        let (mpi_tag, flags) = tags::split(tag);
        let bytes = match (flags & tags::BIG, self.rt.probed_head()) {
            (0, _) | (_, None) => len,
            (_, Some(head)) => usize::try_from(u64::from_le_bytes(head)).unwrap_or(len),
        };
        Ok(Status { source: c.rank_of_world(src), tag: mpi_tag, bytes, error: MPI_SUCCESS, cancelled: false })
    }
}
