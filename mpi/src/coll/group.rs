//! A communicator's members as a collective sees them, and its messages: on the
//! communicator's collective context under the collective's sequence number (`icoll`),
//! matched by source in each sender's order.

use std::ffi::c_int;

use reverb_runtime::Message;
use reverb_transport::{Source, TagMatch};

use crate::abi::*;
use crate::coro;
use crate::errors::{MpiError, MpiResult};
use crate::frag;
use crate::state::State;
use crate::tags;

/// The part of a communicator a collective needs, copied out of the state.
pub(crate) struct Group {
    pub(crate) context: u32,
    pub(crate) ranks: Vec<u32>,
    pub(crate) me: usize,
    /// The collective's tag sequence number (0: a blocking one).
    pub(crate) seq: u32,
}

impl Group {
    pub(crate) fn of(s: &State, comm: c_int) -> MpiResult<Group> {
        let c = s.comm(comm)?;
        Ok(Group { context: c.context, ranks: c.ranks.clone(), me: c.me as usize, seq: s.coll_seq })
    }

    pub(crate) fn size(&self) -> usize {
        self.ranks.len()
    }

    pub(crate) fn tag(&self) -> u64 {
        tags::coll(self.context, self.seq, 0)
    }

    pub(crate) fn send(&self, s: &mut State, to: usize, bytes: &[u8]) -> MpiResult<()> {
        frag::send(&mut s.rt, self.ranks[to], self.tag(), bytes)
    }

    /// The next collective message from `from`.
    pub(crate) fn recv(&self, s: &mut State, from: usize) -> MpiResult<Vec<u8>> {
        let tag = tags::coll_match(self.context, self.seq, 0);
        Ok(coll_recv(s, Source::Rank(self.ranks[from]), tag)?.payload.into_vec())
    }

    /// Sends `bytes` to `to`, then takes the next message from `from` (sends do not wait for
    /// their receiver, so two ranks may exchange this way).
    pub(crate) fn shift(&self, s: &mut State, to: usize, from: usize, bytes: &[u8]) -> MpiResult<Vec<u8>> {
        self.send(s, to, bytes)?;
        self.recv(s, from)
    }

    pub(crate) fn check_root(&self, root: c_int) -> MpiResult<usize> {
        usize::try_from(root).ok().filter(|&r| r < self.size()).ok_or_else(|| {
            MpiError::new(MPI_ERR_ROOT, format!("root {root} outside a communicator of {}", self.size()))
        })
    }
}

/// The next collective message from `source` matching `tag`, whole. Inside a nonblocking
/// collective it suspends until one came (progress resumes it). With point-to-point
/// operations or nonblocking collectives outstanding it waits by progressing them too: a
/// receive posted before the collective must still match (and acknowledge a synchronous
/// send), and a started collective go on, while this rank waits here.
pub(crate) fn coll_recv(s: &mut State, source: Source, tag: TagMatch) -> MpiResult<Message> {
    s.tick_once()?;
    let m = if coro::in_task() {
        loop {
            if s.may_take(source, tag)? {
                if let Some(m) = s.rt.take_collected(source, tag)? {
                    coro::advanced();
                    break m;
                }
            }
            coro::suspend(s)?;
        }
    } else if s.p2p_outstanding() {
        let mut got = None;
        s.wait_until("a collective", |s| {
            if s.may_take(source, tag)? {
                got = s.rt.take_collected(source, tag)?;
            }
            Ok(got.is_some())
        })?;
        got.ok_or_else(|| MpiError::new(MPI_ERR_INTERN, "a collective message vanished"))?
    } else {
        // Nothing else outstanding: as `State::receive`, its order needs no determinant.
        s.rt.set_order_logged(false);
        let m = s.rt.recv_matching(source, tag);
        s.rt.set_order_logged(true);
        m?
    };
    frag::complete(&mut s.rt, m)
}

/// Dissemination barrier: round k, each rank signals the one 2^k ahead and waits for the one
/// 2^k behind; ceil(log2 n) rounds.
pub(crate) fn barrier(s: &mut State, g: &Group) -> MpiResult<()> {
    let n = g.size();
    let mut k = 1;
    while k < n {
        g.shift(s, (g.me + k) % n, (g.me + n - k) % n, &[])?;
        k <<= 1;
    }
    Ok(())
}
