//! Matched probes (MPI_Mprobe, MPI_Improbe) and their receives (MPI_Mrecv, MPI_Imrecv): the
//! probe takes the message (a logged receive: a replay takes the same one in the same call),
//! and the receive only unpacks it.

use std::ffi::c_int;

use reverb_runtime::Message;
use reverb_transport::{Source, TagMatch};

use crate::abi::*;
use crate::errors::{MpiError, MpiResult};
use crate::ffi;
use crate::ffi::{Out, StatusOut, UserBuf};
use crate::frag;
use crate::request::{write_status, Request, Status};
use crate::state::{call, State};
use crate::tags;

/// A message taken by a matched probe: the bytes and where it came from, in its communicator.
pub struct Taken {
    pub msg: Message,
    pub source: c_int,
}

impl State {
    /// Takes the message a receive from `source` under `tag` would match, if one has arrived
    /// (posted receives match first, in their order).
    fn take_matching(&mut self, source: c_int, tag: c_int, comm: c_int) -> MpiResult<Option<c_int>> {
        if source == MPI_PROC_NULL {
            return Ok(Some(MPI_MESSAGE_NO_PROC));
        }
        self.progress()?;
        let c = self.comm(comm)?;
        let from = match source {
            MPI_ANY_SOURCE => Source::Any,
            r => Source::Rank(c.world_of(r)?),
        };
        let (context, ranks) = (c.context, c.peers().to_vec());
        let matching = tags::p2p_match(context, tag);
        if self.replaying() && !self.replay_lets_probe_take(from, matching)? {
            return Ok(None);
        }
        let Some(msg) = self.rt.take_collected(from, matching)? else { return Ok(None) };
        let msg = frag::complete(&mut self.rt, msg)?;
        let (mpi_tag, flags) = tags::split(msg.tag);
        if flags & tags::SYNC != 0 {
            self.rt.send(msg.source, tags::tag(context, tags::ACK, mpi_tag), &[])?;
        }
        let source = ranks.iter().position(|&w| w == msg.source).map_or(MPI_ANY_SOURCE, |i| i as c_int);
        Ok(Some(self.messages.insert(Taken { msg, source })))
    }

    /// During a replay: whether this matched probe takes a message, as it did the first time.
    /// A delivery the log names next was taken in this call the first time (the next call's
    /// tick would come before it otherwise), so it is awaited: the probe takes it if it matches,
    /// a posted receive otherwise. With none named the first run's probe found nothing.
    fn replay_lets_probe_take(&mut self, from: Source, matching: TagMatch) -> MpiResult<bool> {
        while let Some(named) = self.rt.replay_next() {
            if self.may_take(from, matching)? {
                return Ok(true);
            }
            self.wait_until("a delivery the log names for this matched probe", |s| {
                Ok(s.rt.replay_next() != Some(named) || s.rt.probe(Source::Any, TagMatch::any())?.is_some())
            })?;
            if self.rt.replay_next() == Some(named) {
                if self.may_take(from, matching)? {
                    return Ok(true);
                }
                // Here and not this probe's: a posted receive's, which progress gives it.
                self.progress()?;
                if self.rt.replay_next() == Some(named) {
                    return Ok(false);
                }
            }
        }
        Ok(false)
    }

    fn status_of(&self, message: c_int) -> Status {
        match self.messages.get(message) {
            Some(t) => Status {
                source: t.source,
                tag: tags::split(t.msg.tag).0,
                bytes: t.msg.payload.len(),
                error: MPI_SUCCESS,
                cancelled: false,
            },
            None => Status::proc_null(),
        }
    }

    /// Unpacks a taken message into `buf`; its status.
    fn receive_taken(
        &mut self,
        buf: UserBuf,
        count: c_int,
        datatype: c_int,
        message: c_int,
    ) -> MpiResult<Status> {
        if message == MPI_MESSAGE_NO_PROC {
            return Ok(Status::proc_null());
        }
        let status = self.status_of(message);
        let taken = self
            .messages
            .remove(message)
            .ok_or_else(|| MpiError::new(MPI_ERR_REQUEST, format!("invalid message {message:#x}")))?;
        let count =
            usize::try_from(count).map_err(|_| MpiError::new(MPI_ERR_COUNT, format!("count {count}")))?;
        let dt = self.datatype(datatype)?;
        let capacity = dt.bytes_for(count);
        let kept = taken.msg.payload.len().min(capacity);
        // SAFETY: MPI's buffer rule: the program's receive buffer spans these elements of this datatype, writable and left alone until the call returns or its request completes.
        unsafe { dt.unpack(&taken.msg.payload[..kept], buf, count) }?;
        let error = if taken.msg.payload.len() > capacity { MPI_ERR_TRUNCATE } else { MPI_SUCCESS };
        Ok(Status { bytes: kept, error, ..status })
    }
}

pub(crate) unsafe fn mpi_mprobe(
    source: c_int,
    tag: c_int,
    comm: c_int,
    message: Out<'_, c_int>,
    status: StatusOut<'_>,
) -> c_int {
    call("MPI_Mprobe", comm, |s| {
        let mut found = None;
        s.wait_until("MPI_Mprobe", |s| {
            found = s.take_matching(source, tag, comm)?;
            Ok(found.is_some())
        })?;
        let m = found.unwrap_or(MPI_MESSAGE_NO_PROC);
        write_status(status, s.status_of(m))?;
        ffi::out(message, m, "message")
    })
}

pub(crate) unsafe fn mpi_improbe(
    source: c_int,
    tag: c_int,
    comm: c_int,
    flag: Out<'_, c_int>,
    message: Out<'_, c_int>,
    status: StatusOut<'_>,
) -> c_int {
    call("MPI_Improbe", comm, |s| match s.take_matching(source, tag, comm)? {
        Some(m) => {
            ffi::out(flag, 1, "flag")?;
            write_status(status, s.status_of(m))?;
            ffi::out(message, m, "message")
        }
        None => ffi::out(flag, 0, "flag"),
    })
}

pub(crate) unsafe fn mpi_mrecv(
    buf: UserBuf,
    count: c_int,
    datatype: c_int,
    message: Out<'_, c_int>,
    status: StatusOut<'_>,
) -> c_int {
    call("MPI_Mrecv", MPI_COMM_WORLD, |s| {
        let m = ffi::read(message, "message")?;
        let st = s.receive_taken(buf, count, datatype, m)?;
        ffi::out(message, MPI_MESSAGE_NULL, "message")?;
        write_status(status, st)?;
        if st.error == MPI_ERR_TRUNCATE {
            return Err(MpiError::new(MPI_ERR_TRUNCATE, "the message is longer than the receive buffer"));
        }
        Ok(())
    })
}

pub(crate) unsafe fn mpi_imrecv(
    buf: UserBuf,
    count: c_int,
    datatype: c_int,
    message: Out<'_, c_int>,
    request: Out<'_, c_int>,
) -> c_int {
    call("MPI_Imrecv", MPI_COMM_WORLD, |s| {
        let m = ffi::read(message, "message")?;
        let st = s.receive_taken(buf, count, datatype, m)?;
        ffi::out(message, MPI_MESSAGE_NULL, "message")?;
        let h = s.requests.insert(Request::Done(st))?;
        ffi::out(request, h, "request")
    })
}
