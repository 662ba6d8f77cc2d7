//! A communicator's members as a collective sees them, and its messages: on the
//! communicator's collective context under the collective's sequence number (`icoll`),
//! matched by source in each sender's order.

use std::ffi::c_int;

use reverb_runtime::{Message, Received};
use reverb_transport::{OpId, Source, TagMatch};

use crate::abi::*;
use crate::coro;
use crate::errors::{MpiError, MpiResult};
use crate::ffi::UserBuf;
use crate::frag;
use crate::state::State;
use crate::tags;

/// The smallest exchange (`shift`) whose send is lent: below it the copy through shared
/// memory is as quick, and a rank does not wait for its receiver to be scheduled (more ranks
/// than cores); as MPI's point-to-point sends (`p2p::LENT_MIN`).
const EXCHANGE_LENT_MIN: usize = 256 << 10;

/// The smallest exchange lent between separate buffers of the program (`shift_apart`): from
/// where a point-to-point send is lent. IMB Alltoall, 2 ranks on shm, 64 KiB: 5.1 us lent,
/// 9.0 staged (Open MPI 5.5); an all-gather, sending from and receiving into one buffer, was
/// slower lent (12.8 against 8.9), so the other exchanges keep `EXCHANGE_LENT_MIN`.
const APART_LENT_MIN: usize = 16 << 10;

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

    /// The next collective message from `from`, into `buf`, which it must fill exactly.
    pub(crate) fn recv_into(&self, s: &mut State, from: usize, buf: &mut [u8]) -> MpiResult<()> {
        let tag = tags::coll_match(self.context, self.seq, 0);
        coll_recv_into(s, Source::Rank(self.ranks[from]), tag, buf)
    }

    /// Sends `bytes` to `to`, then takes the next message from `from` (the send is posted
    /// before the receive, so two ranks may exchange this way). A large one is lent (see
    /// `send_lent`) and waited for after the receive.
    pub(crate) fn shift(&self, s: &mut State, to: usize, from: usize, bytes: &[u8]) -> MpiResult<Vec<u8>> {
        self.exchange(s, to, bytes, EXCHANGE_LENT_MIN, |s| self.recv(s, from))
    }

    /// `shift` whose message lands in `into`, which it must fill exactly.
    pub(crate) fn shift_into(
        &self,
        s: &mut State,
        to: usize,
        from: usize,
        bytes: &[u8],
        into: &mut [u8],
    ) -> MpiResult<()> {
        self.exchange(s, to, bytes, EXCHANGE_LENT_MIN, |s| self.recv_into(s, from, into))
    }

    /// `shift_into` from and into separate buffers of the program (lent from
    /// `APART_LENT_MIN`).
    pub(crate) fn shift_apart(
        &self,
        s: &mut State,
        to: usize,
        from: usize,
        bytes: &[u8],
        into: &mut [u8],
    ) -> MpiResult<()> {
        self.exchange(s, to, bytes, APART_LENT_MIN, |s| self.recv_into(s, from, into))
    }

    /// `shift_into` between two runs of the program's buffers, (rank, (address, bytes)) each:
    /// `out` sent to its rank, `into` filled from its own. MPI_ERR_BUFFER if they overlap.
    pub(crate) fn shift_into_buffers(
        &self,
        s: &mut State,
        (to, out): (usize, (UserBuf, usize)),
        (from, into): (usize, (UserBuf, usize)),
    ) -> MpiResult<()> {
        if out.0.overlaps(out.1, into.0, into.1) {
            return Err(super::api::aliased());
        }
        // SAFETY: MPI's buffer rule: the program's buffers span these runs, `out` readable and
        // `into` writable and left alone until the call returns; they do not overlap (above).
        let (bytes, landing) = unsafe { (out.0.bytes(out.1)?, into.0.bytes_mut(into.1)?) };
        self.shift_into(s, to, from, bytes, landing)
    }

    /// Sends `bytes` to `to` (lent from `min` bytes), then `receive`s, then waits for a lent
    /// send to have left: even when the receive failed, `bytes` is lent until then.
    fn exchange<T>(
        &self,
        s: &mut State,
        to: usize,
        bytes: &[u8],
        min: usize,
        receive: impl FnOnce(&mut State) -> MpiResult<T>,
    ) -> MpiResult<T> {
        let lent = self.send_lent(s, to, bytes, min)?;
        let got = receive(s);
        match lent {
            Some(op) => {
                let sent = self.wait_lent(s, op);
                let got = got?;
                sent.map(|()| got)
            }
            None => got,
        }
    }

    /// A block of `len` bytes where only `room` fit.
    pub(crate) fn too_long(&self, len: usize, room: usize) -> MpiError {
        MpiError::new(MPI_ERR_TRUNCATE, format!("a block of {len} bytes where {room} fit"))
    }

    /// Sends `bytes` to `to` and waits until it has left, for a tree's sends (whose receiver
    /// is in its receive of it, or comes to it without waiting for this rank). A large one
    /// is lent: one copy in all, and the sender cannot run ahead of its receiver by more
    /// frames than the pool holds, then stage each in fresh memory.
    pub(crate) fn send_synchronous(&self, s: &mut State, to: usize, bytes: &[u8]) -> MpiResult<()> {
        match self.send_lent(s, to, bytes, 0)? {
            Some(op) => self.wait_lent(s, op),
            None => Ok(()),
        }
    }

    /// `send`, or where the runtime lends (logging off, shared memory, above the rendezvous
    /// threshold; not inside a nonblocking collective's task) `min` bytes or more, the
    /// receiver reads `bytes` in place: Some(op), which the caller must wait for
    /// (`wait_lent`) while `bytes` lives.
    fn send_lent(&self, s: &mut State, to: usize, bytes: &[u8], min: usize) -> MpiResult<Option<OpId>> {
        let dest = self.ranks[to];
        if coro::in_task() || bytes.len() < min || !s.rt.lends(dest, bytes.len()) {
            self.send(s, to, bytes)?;
            return Ok(None);
        }
        // SAFETY: every caller waits for the op (`wait_lent`) before `bytes` goes or changes.
        Ok(unsafe { s.rt.send_lent(dest, self.tag(), bytes) }?)
    }

    /// Waits until lent send `op` has left: the runtime's own wait (it sleeps until the
    /// completion wakes it) when nothing else is outstanding, else progressing everything
    /// meanwhile (a synchronous send's acknowledgement this rank owes its receiver, say).
    fn wait_lent(&self, s: &mut State, op: OpId) -> MpiResult<()> {
        if !s.p2p_outstanding() {
            return Ok(s.rt.wait_lent(op)?);
        }
        s.wait_until("a collective's send", |s| Ok(s.rt.lent_sent(op)?))
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

/// `coll_recv` into `buf`, which the message must fill exactly: with nothing else
/// outstanding (the runtime's own receive), its one copy on this side lands there where the
/// transport can (logging off, shared memory); else it is copied there.
pub(crate) fn coll_recv_into(s: &mut State, source: Source, tag: TagMatch, buf: &mut [u8]) -> MpiResult<()> {
    if coro::in_task() || s.p2p_outstanding() {
        let m = coll_recv(s, source, tag)?;
        return fill(buf, &m.payload, m.source);
    }
    s.tick_once()?;
    // As `coll_recv`'s last case: its order needs no determinant.
    s.rt.set_order_logged(false);
    let got = s.rt.recv_matching_into(source, tag, buf, &|tag, _| tags::split(tag).1 & tags::BIG == 0);
    s.rt.set_order_logged(true);
    let got = match got? {
        Received::Message(m) => frag::complete_into(&mut s.rt, m, Some(&mut *buf))?,
        landed => landed,
    };
    match got {
        Received::Landed { len, source, .. } if len != buf.len() => Err(short(len, buf.len(), source)),
        Received::Landed { .. } => Ok(()),
        Received::Message(m) => fill(buf, &m.payload, m.source),
    }
}

/// `payload` into `buf`, which it must fill exactly.
fn fill(buf: &mut [u8], payload: &[u8], source: u32) -> MpiResult<()> {
    if payload.len() != buf.len() {
        return Err(short(payload.len(), buf.len(), source));
    }
    buf.copy_from_slice(payload);
    Ok(())
}

fn short(len: usize, expected: usize, source: u32) -> MpiError {
    let why =
        format!("a collective message of {len} bytes from rank {source} where {expected} were expected");
    MpiError::new(MPI_ERR_TRUNCATE, why)
}

/// Dissemination barrier: round k, each rank signals the one 2^k ahead and waits for the one
/// 2^k behind; ceil(log2 n) rounds. On a few ranks (`tuning::flat`), one round.
pub(crate) fn barrier(s: &mut State, g: &Group) -> MpiResult<()> {
    let n = g.size();
    if super::tuning::flat(n) {
        for k in 1..n {
            g.send(s, (g.me + k) % n, &[])?;
        }
        for k in 1..n {
            g.recv(s, (g.me + n - k) % n)?;
        }
        return Ok(());
    }
    let mut k = 1;
    while k < n {
        g.shift(s, (g.me + k) % n, (g.me + n - k) % n, &[])?;
        k <<= 1;
    }
    Ok(())
}
