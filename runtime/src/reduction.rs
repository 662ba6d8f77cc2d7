//! A reduction's contributions under collective-aware logging ([`reverb_logger::reduction`]):
//! the kind byte in front of each partial result, a tombstone passed on while replaying a
//! reduction that already completed, and the contribution's payload dropped from the send
//! log once this rank holds the result. The runtime's `allreduce_sum` and the MPI library's
//! `MPI_Allreduce` both go through it.

use std::ops::RangeInclusive;

use reverb_logger::protocol::LoggedEndpoint;
use reverb_logger::reduction::{self, Contribution};
use reverb_transport::Rank;

use super::error::{Result, RuntimeError};
use super::Runtime;

/// One reduction at this rank, from its first receive to holding the result.
#[derive(Debug)]
pub struct Contributions {
    /// Contributions carry their kind byte (CAML on, alike at every rank).
    keyed: bool,
    root: Rank,
    me: Rank,
    /// A child whose contribution came as a tombstone: this rank replays a reduction that
    /// completed, and passes a tombstone on in place of its partial result.
    dropped_from: Option<Rank>,
    /// The messages that carried this rank's contribution, and to whom.
    sent: Option<(Rank, RangeInclusive<u64>)>,
}

impl Contributions {
    /// The bytes of `payload`, received from child `from`, to combine into the partial
    /// result; None for a tombstone. At the root a tombstone means the value is lost.
    pub fn take<'a>(&mut self, from: Rank, payload: &'a [u8]) -> Result<Option<&'a [u8]>> {
        if !self.keyed {
            return Ok(Some(payload));
        }
        match reduction::parse(payload)? {
            Contribution::Value(bytes) => Ok(Some(bytes)),
            Contribution::Dropped if self.me == self.root => Err(RuntimeError::Unrecoverable(format!(
                "collective-aware logging: rank {from}'s contribution to a reduction rooted at rank {} \
                 was dropped once the reduction completed, and replaying it at the root needs its value \
                 (a second failure before the next checkpoint)",
                self.root
            ))),
            Contribution::Dropped => {
                self.dropped_from.get_or_insert(from);
                Ok(None)
            }
        }
    }

    /// The payload that carries partial result `acc` to the parent.
    pub fn payload(&self, acc: &[u8]) -> Vec<u8> {
        match (self.keyed, self.dropped_from) {
            (false, _) => acc.to_vec(),
            (true, Some(_)) => reduction::tombstone(),
            (true, None) => reduction::value(acc),
        }
    }
}

impl Runtime {
    /// Starts a reduction to `root` at this rank.
    pub fn begin_reduction(&self, root: Rank) -> Contributions {
        let keyed =
            self.spheres.is_none() && self.endpoint.as_ref().is_some_and(LoggedEndpoint::caml_reductions);
        Contributions { keyed, root, me: self.rank(), dropped_from: None, sent: None }
    }

    /// Sends this rank's contribution, `send` doing the sending (the MPI library fragments
    /// large ones): the messages it takes are remembered for `end_reduction`.
    pub fn send_contribution<E>(
        &mut self,
        c: &mut Contributions,
        parent: Rank,
        send: impl FnOnce(&mut Runtime) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let before = self.last_ssn_sent(parent);
        send(self)?;
        let after = self.last_ssn_sent(parent);
        if after > before {
            c.sent = Some((parent, before + 1..=after));
        }
        Ok(())
    }

    /// Once this rank holds the reduction's result: its contribution's payload leaves the
    /// send log unless the root needs it kept. Returns the bytes freed.
    pub fn end_reduction(&mut self, c: Contributions) -> Result<u64> {
        if c.dropped_from.is_some() {
            self.report.reductions_replayed_from_tombstones += 1;
        }
        match (c.keyed, c.sent) {
            (true, Some((parent, ssns))) => Ok(self.endpoint()?.drop_contribution(parent, c.root, ssns)?),
            _ => Ok(0),
        }
    }

    fn last_ssn_sent(&self, dest: Rank) -> u64 {
        self.endpoint.as_ref().and_then(|e| e.last_ssn_sent(dest)).unwrap_or(0)
    }
}
