//! Point-to-point: sends go out at once through the runtime (which logs them); receives are
//! requests matched in the order they were posted, each against the runtime's arrived
//! messages, so MPI's non-overtaking order holds per (source, tag, communicator).

use std::borrow::Cow;
use std::ffi::c_int;
use std::time::Duration;

use reverb_runtime::Received;
use reverb_transport::{OpId, Source, TagMatch};
use smallvec::SmallVec;

use crate::abi::*;
use crate::comm::Comm;
use crate::datatype::Datatype;
use crate::errors::{MpiError, MpiResult};
use crate::ffi::UserBuf;
use crate::frag;
use crate::request::{PendingRecv, PendingSync, Posted, RecvFrom, RecvType, Request, Status};
use crate::state::State;
use crate::tags;

/// Largest tag (MPI_TAG_UB): tags are the low 31 bits of the runtime's.
pub const TAG_UB: c_int = i32::MAX;

fn count_of(count: i64) -> MpiResult<usize> {
    usize::try_from(count).map_err(|_| count_error(count))
}

fn count_error(count: i64) -> MpiError {
    MpiError::new(MPI_ERR_COUNT, format!("count {count}"))
}

fn proc_null() -> Request {
    Request::Done(Status::proc_null())
}

fn check_send_tag(tag: c_int) -> MpiResult<()> {
    if tag < 0 {
        return Err(MpiError::new(MPI_ERR_TAG, format!("tag {tag} (a send's tag is 0..=MPI_TAG_UB)")));
    }
    Ok(())
}

fn check_recv_tag(tag: c_int) -> MpiResult<()> {
    if tag < 0 && tag != MPI_ANY_TAG {
        return Err(MpiError::new(MPI_ERR_TAG, format!("tag {tag}")));
    }
    Ok(())
}

/// Where a receive on `c` from `source` under `tag` matches: the runtime's source and tag
/// match, or None for MPI_PROC_NULL (complete at once).
pub(crate) fn recv_match(c: &Comm, source: c_int, tag: c_int) -> MpiResult<Option<(Source, TagMatch)>> {
    check_recv_tag(tag)?;
    if source == MPI_PROC_NULL {
        return Ok(None);
    }
    let from = match source {
        MPI_ANY_SOURCE => Source::Any,
        r => Source::Rank(c.world_of(r)?),
    };
    Ok(Some((from, tags::p2p_match(c.context, tag))))
}

/// The buffer a receive's payload may land in straight from the transport: the `len` bytes
/// at `buf` of a contiguous datatype (None for other layouts, which are unpacked from the
/// message). An empty one takes empty messages (a longer one is truncated as unpacked).
///
/// # Safety
/// `buf` is a receive's buffer of `len` bytes, not yet complete (MPI's rule: writable and the
/// program's hands off it until then).
#[allow(clippy::mut_from_ref)] // The memory is the program's, not the `UserBuf`'s.
unsafe fn landing_of(buf: &UserBuf, len: Option<usize>) -> MpiResult<Option<&mut [u8]>> {
    // SAFETY: the caller's promise.
    len.map(|len| unsafe { buf.bytes_mut(len) }).transpose()
}

/// Which messages land in a receive's buffer: all but the first piece of a large message,
/// which carries the whole length before its bytes (`frag`).
fn lands(tag: u64, _len: usize) -> bool {
    tags::split(tag).1 & tags::BIG == 0
}

/// What a send names.
pub struct SendArgs {
    pub buf: UserBuf,
    /// Elements (MPI_Count wide: the `_c` calls pass large counts).
    pub count: i64,
    pub datatype: c_int,
    pub dest: c_int,
    pub tag: c_int,
    pub comm: c_int,
}

/// Longest sleep of an MPI wait between two looks: what completes a request without an
/// arrival (MPI_Grequest_complete on another thread) wakes no one.
const WAIT_NAP: Duration = Duration::from_millis(1);

/// The smallest send whose bytes are lent (`SendMode::Lent`): a blocking one waits until its
/// receiver has read them. Above what Debian's MPICH buffers (two ranks sending each other
/// 8 KiB then receiving finish there, 9000 bytes wait forever; Open MPI waits from 4 KiB), so
/// a program that relies on MPICH buffering its sends is buffered here too; and where reading
/// in place beats the staged copy (IMB PingPong on shm: 32 KiB 2.5-3.1 us against 5.6 staged,
/// 64 KiB 3.8 against 8.1, Open MPI 2.8 and 3.6).
const LENT_MIN: usize = 16 << 10;

/// How a send hands its bytes over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendMode {
    /// Copied at once, the request complete: for calls that give the buffer back on return
    /// (buffered sends, sendrecv, persistent starts).
    Copied,
    /// Copied; the request waits for the receiver's acknowledgement.
    Sync,
    /// Lent until the request completes (standard and ready sends): a large contiguous
    /// message may be read by the receiver where it is.
    Lent,
}

impl SendMode {
    /// `Sync` for a synchronous send, else `Copied`.
    pub fn copied_or_sync(sync: bool) -> SendMode {
        if sync {
            SendMode::Sync
        } else {
            SendMode::Copied
        }
    }
}

impl State {
    /// Sends now, copied; a synchronous send's request waits for the receiver's
    /// acknowledgement.
    pub fn start_send(&mut self, a: &SendArgs, sync: bool) -> MpiResult<Request> {
        self.start_send_as(a, SendMode::copied_or_sync(sync))
    }

    /// Sends now, handing the bytes over as `mode` says.
    pub fn start_send_as(&mut self, a: &SendArgs, mode: SendMode) -> MpiResult<Request> {
        // A predefined contiguous type: its bytes are the buffer, no datatype is built.
        if let Some(size) = Datatype::plain_size(a.datatype) {
            let Some((dest, context, count)) = self.send_target(a)? else { return Ok(proc_null()) };
            let len = count.checked_mul(size).ok_or_else(|| count_error(a.count))?;
            // SAFETY: MPI's rule for a send's buffer: `count` elements of the datatype, readable
            // until the call returns or (Lent) its request completes.
            let bytes = unsafe { a.buf.bytes(len) }?;
            return self.send_bytes(dest, context, a.tag, Cow::Borrowed(bytes), mode);
        }
        let dt = self.datatype(a.datatype)?;
        self.start_send_typed(a, &dt, mode)
    }

    /// `start_send_as` with the datatype resolved already.
    pub fn start_send_typed(&mut self, a: &SendArgs, dt: &Datatype, mode: SendMode) -> MpiResult<Request> {
        let Some((dest, context, count)) = self.send_target(a)? else { return Ok(proc_null()) };
        // SAFETY: MPI's rule for a send's buffer: `count` elements of `dt`, readable now.
        let bytes = unsafe { dt.pack(&a.buf, count) }?;
        self.send_bytes(dest, context, a.tag, bytes, mode)
    }

    /// A send's checked target: (world rank, context, element count); None for MPI_PROC_NULL.
    fn send_target(&self, a: &SendArgs) -> MpiResult<Option<(u32, u32, usize)>> {
        check_send_tag(a.tag)?;
        let count = count_of(a.count)?;
        let comm = self.comm(a.comm)?;
        if a.dest == MPI_PROC_NULL {
            return Ok(None);
        }
        Ok(Some((comm.world_of(a.dest)?, comm.context, count)))
    }

    /// Sends `bytes` under MPI tag `tag` of `context` to world rank `dest`.
    fn send_bytes(
        &mut self,
        dest: u32,
        context: u32,
        tag: c_int,
        bytes: Cow<'_, [u8]>,
        mode: SendMode,
    ) -> MpiResult<Request> {
        let sync = mode == SendMode::Sync;
        if let (SendMode::Lent, Cow::Borrowed(lent)) = (mode, &bytes) {
            // Above the runtime's largest message, only where it is lent whole (else it goes
            // in pieces, each copied).
            let whole = lent.len() <= self.rt.config().log.max_message || self.rt.lends(dest, lent.len());
            if lent.len() >= LENT_MIN && whole {
                // SAFETY: MPI leaves a send's buffer alone until its request completes, and a
                // LentSend request completes only once the runtime says the bytes left.
                let op = unsafe { self.rt.send_lent(dest, tags::tag(context, 0, tag), lent) }?;
                let Some(op) = op else { return Ok(Request::Done(Status::empty())) };
                self.lent_sends += 1;
                return Ok(Request::LentSend(op));
            }
        }
        let flags = if sync { tags::SYNC } else { 0 };
        frag::send(&mut self.rt, dest, tags::tag(context, flags, tag), &bytes)?;
        if sync {
            self.sync_sends += 1;
            self.syncs_started += 1;
            let ack = tags::tag(context, tags::ACK, tag);
            return Ok(Request::SyncSend(PendingSync { dest, ack, started: self.syncs_started }));
        }
        Ok(Request::Done(Status::empty()))
    }

    /// Posts a receive; its request is matched by `progress`.
    pub fn post_recv(
        &mut self,
        buf: UserBuf,
        count: i64,
        datatype: c_int,
        source: c_int,
        tag: c_int,
        comm: c_int,
    ) -> MpiResult<c_int> {
        let datatype = match Datatype::plain_size(datatype) {
            Some(size) => RecvType::Plain { handle: datatype, size },
            None => RecvType::Typed(Box::new(self.datatype(datatype)?)),
        };
        self.post_recv_as(buf, count, datatype, source, tag, comm)
    }

    /// `post_recv` with the datatype resolved already.
    pub fn post_recv_typed(
        &mut self,
        buf: UserBuf,
        count: i64,
        datatype: Datatype,
        source: c_int,
        tag: c_int,
        comm: c_int,
    ) -> MpiResult<c_int> {
        self.post_recv_as(buf, count, RecvType::Typed(Box::new(datatype)), source, tag, comm)
    }

    fn post_recv_as(
        &mut self,
        buf: UserBuf,
        count: i64,
        datatype: RecvType,
        source: c_int,
        tag: c_int,
        comm: c_int,
    ) -> MpiResult<c_int> {
        let count = count_of(count)?;
        let c = self.comm(comm)?;
        let Some((from, tag)) = recv_match(c, source, tag)? else {
            return self.requests.insert(Request::Done(Status::proc_null()));
        };
        let recv_from = match from {
            Source::Any => RecvFrom::Any(c.peers().to_vec()),
            Source::Rank(_) => RecvFrom::Named(source),
        };
        let pending =
            PendingRecv { context: c.context, from: recv_from, source: from, tag, buf, count, datatype };
        let h = self.requests.insert(Request::Recv(pending))?;
        self.pending_recvs.push_back(Posted { h, source: from, tag });
        Ok(h)
    }

    /// Matches what can be matched now: posted receives in order, then synchronous sends'
    /// acknowledgements. True if anything completed.
    pub fn progress(&mut self) -> MpiResult<bool> {
        self.tick_once()?;
        let mut any = false;
        // One poll, then every posted receive in order: the first one posted gets the first
        // matching message. Arrivals may still come in meanwhile (a provider's progress
        // thread), so once a receive is left pending, a later one takes a message only if
        // none of those left pending matches it: that message is theirs, next time.
        self.rt.poll()?;
        let mut left: SmallVec<[(Source, TagMatch); 4]> = SmallVec::new();
        let mut i = 0;
        while let Some(Posted { h, source, tag }) = self.pending_recvs.get(i) {
            // A receive like one left pending cannot take what that one did not: skip it
            // unprobed and unread; and once every kind posted is left pending, so is the
            // rest of the queue (a window of receives from one peer under one tag).
            if left.contains(&(source, tag)) {
                if self.pending_recvs.all_kinds_in(&left) {
                    break;
                }
                i += 1;
                continue;
            }
            let Some(Request::Recv(p)) = self.requests.get(h) else {
                self.pending_recvs.remove(i);
                continue;
            };
            // The landing slice borrows the program's buffer, not the request.
            let buf = p.buf;
            // SAFETY: a posted receive not yet complete: MPI keeps its buffer ours until then.
            let landing = unsafe { landing_of(&buf, p.datatype.contiguous_len(p.count)) }?;
            let blocked = if self.replaying() {
                !self.may_take(source, tag)?
            } else {
                !left.is_empty() && !self.arrival_is_for(source, tag, &left)?
            };
            if blocked {
                left.push((source, tag));
                i += 1;
                continue;
            }
            let taken = match landing {
                Some(slice) => self.rt.take_collected_into(source, tag, slice, &lands)?,
                None => self.rt.take_collected(source, tag)?.map(Received::Message),
            };
            match taken {
                Some(received) => {
                    self.pending_recvs.remove(i);
                    let status = self.deliver(h, received)?;
                    if let Some(r) = self.requests.get_mut(h) {
                        *r = Request::Done(status);
                    }
                    any = true;
                }
                None => {
                    left.push((source, tag));
                    i += 1;
                }
            }
        }
        any |= self.finish_sync_sends()?;
        any |= self.finish_lent_sends()?;
        // Under logging a window's message is served alone in its pass (`serve_all`).
        let serve = !self.wins.items.is_empty() && (!any || !self.rt.logging());
        if serve && crate::rma::serve_all(self)? {
            if self.rt.logging() {
                return Ok(true);
            }
            any = true;
        }
        any |= self.progress_colls()?;
        Ok(any)
    }

    /// Completes the synchronous sends whose acknowledgement came; true if any did.
    fn finish_sync_sends(&mut self) -> MpiResult<bool> {
        if self.sync_sends == 0 {
            return Ok(false);
        }
        let mut syncs: Vec<(u64, c_int, u32, u64)> = self
            .requests
            .iter()
            .filter_map(|(h, r)| match r {
                Request::SyncSend(p) => Some((p.started, h, p.dest, p.ack)),
                _ => None,
            })
            .collect();
        syncs.sort_unstable_by_key(|s| s.0);
        self.sync_sends = syncs.len();
        let mut any = false;
        for (_, h, dest, ack) in syncs {
            if self.rt.take_collected(Source::Rank(dest), TagMatch::exact(ack))?.is_some() {
                if let Some(r) = self.requests.get_mut(h) {
                    *r = Request::Done(Status::empty());
                }
                self.sync_sends -= 1;
                any = true;
            }
        }
        Ok(any)
    }

    /// Whether the message a receive for (`source`, `tag`) would take now is one no receive
    /// `left` pending earlier matches (false with nothing here: what comes next may be theirs).
    fn arrival_is_for(
        &mut self,
        source: Source,
        tag: TagMatch,
        left: &[(Source, TagMatch)],
    ) -> MpiResult<bool> {
        let Some((sender, arrived, _)) = self.rt.probe(source, tag)? else { return Ok(false) };
        Ok(!left.iter().any(|(s, t)| s.matches(sender) && t.matches(arrived)))
    }

    /// Completes the lent sends whose bytes left; true if any did.
    fn finish_lent_sends(&mut self) -> MpiResult<bool> {
        if self.lent_sends == 0 {
            return Ok(false);
        }
        let lent: Vec<(c_int, OpId)> = self
            .requests
            .iter()
            .filter_map(|(h, r)| match r {
                Request::LentSend(op) => Some((h, *op)),
                _ => None,
            })
            .collect();
        let mut any = false;
        let freed = std::mem::take(&mut self.freed_lent);
        for op in freed {
            match self.rt.lent_sent(op)? {
                true => self.lent_sends -= 1,
                false => self.freed_lent.push(op),
            }
        }
        for (h, op) in lent {
            if self.rt.lent_sent(op)? {
                if let Some(r) = self.requests.get_mut(h) {
                    *r = Request::Done(Status::empty());
                }
                self.lent_sends -= 1;
                any = true;
            }
        }
        Ok(any)
    }

    /// Puts a matched message into receive `h`'s buffer; its status. Acknowledges a
    /// synchronous send.
    fn deliver(&mut self, h: c_int, received: Received) -> MpiResult<Status> {
        let Some(Request::Recv(p)) = self.requests.get(h) else {
            return Err(MpiError::new(MPI_ERR_INTERN, "a matched receive vanished"));
        };
        let msg = match received {
            Received::Landed { source: world, tag, len } => {
                let (source, context) = (p.from.rank_of(world), p.context);
                return self.landed_status((world, source), tag, len, context);
            }
            Received::Message(msg) => msg,
        };
        let (world, source) = (msg.source, p.from.rank_of(msg.source));
        let (context, buf, count) = (p.context, p.buf, p.count);
        // SAFETY: a posted receive not yet complete: MPI keeps its buffer ours until then.
        let landing = unsafe { landing_of(&buf, p.datatype.contiguous_len(count)) }?;
        match frag::complete_into(&mut self.rt, msg, landing)? {
            Received::Landed { tag, len, .. } => self.landed_status((world, source), tag, len, context),
            Received::Message(msg) => {
                let dt = p.datatype.resolve()?.into_owned();
                self.finish_recv(&msg, context, source, buf, count, &dt)
            }
        }
    }

    /// The runtime's blocking receive, into `landing` where the message can land there. It
    /// runs with nothing else outstanding, so a named receive's order needs no determinant:
    /// every delivery before it is replayed first, and no other receive waits beside it.
    fn receive(&mut self, source: Source, tag: TagMatch, landing: Option<&mut [u8]>) -> MpiResult<Received> {
        self.tick_once()?;
        self.rt.set_order_logged(false);
        let received = match landing {
            Some(slice) => self.rt.recv_matching_into(source, tag, slice, &lands).map_err(MpiError::from),
            None => self.rt.recv_matching(source, tag).map(Received::Message).map_err(MpiError::from),
        };
        self.rt.set_order_logged(true);
        received
    }

    /// The status of a message of `len` bytes under runtime tag `tag` that landed in the
    /// receive's buffer, from (world rank, rank in the communicator) `from`; acknowledges a
    /// synchronous send.
    fn landed_status(&mut self, from: (u32, c_int), tag: u64, len: usize, context: u32) -> MpiResult<Status> {
        let (mpi_tag, flags) = tags::split(tag);
        self.acknowledge(flags, context, mpi_tag, from.0)?;
        Ok(Status { source: from.1, tag: mpi_tag, bytes: len, error: MPI_SUCCESS, cancelled: false })
    }

    /// Tells the sender of a synchronous send (`flags` has SYNC), world rank `to`, that its
    /// message was received.
    fn acknowledge(&mut self, flags: u32, context: u32, mpi_tag: c_int, to: u32) -> MpiResult<()> {
        if flags & tags::SYNC != 0 {
            self.rt.send(to, tags::tag(context, tags::ACK, mpi_tag), &[])?;
        }
        Ok(())
    }

    /// A whole message `msg` (from `source`, its rank in the communicator) into `count`
    /// elements of `dt` at `buf`: its status, truncation included. Acknowledges a synchronous
    /// send.
    fn finish_recv(
        &mut self,
        msg: &reverb_runtime::Message,
        context: u32,
        source: c_int,
        buf: UserBuf,
        count: usize,
        dt: &Datatype,
    ) -> MpiResult<Status> {
        let (mpi_tag, flags) = tags::split(msg.tag);
        let capacity = dt.bytes_for(count);
        let fits = msg.payload.len() <= capacity;
        let kept = msg.payload.len().min(capacity);
        // SAFETY: the receive's buffer, `count` elements of `dt`, not yet complete (MPI's rule).
        unsafe { dt.unpack(&msg.payload[..kept], buf, count) }?;
        self.acknowledge(flags, context, mpi_tag, msg.source)?;
        Ok(Status {
            source,
            tag: mpi_tag,
            bytes: kept,
            error: if fits { MPI_SUCCESS } else { MPI_ERR_TRUNCATE },
            cancelled: false,
        })
    }

    /// A blocking receive with no receive posted before it: straight from the runtime, no
    /// request (the common case of MPI_Recv; with others posted, it must queue behind them).
    pub fn recv_direct(
        &mut self,
        buf: UserBuf,
        count: i64,
        datatype: c_int,
        source: c_int,
        tag: c_int,
        comm: c_int,
    ) -> MpiResult<Status> {
        let elements = count_of(count)?;
        // A predefined contiguous type lands by its size alone: no datatype is built for it.
        let landing = match Datatype::plain_size(datatype) {
            Some(size) => {
                let len = elements.checked_mul(size).ok_or_else(|| count_error(count))?;
                // SAFETY: MPI_Recv's buffer: `count` elements of a contiguous type, writable
                // until the call returns.
                Some(unsafe { buf.bytes_mut(len) }?)
            }
            // SAFETY: as above, for the call.
            None => unsafe { landing_of(&buf, self.datatype(datatype)?.contiguous_len(elements)) }?,
        };
        let c = self.comm(comm)?;
        let Some((from, matching)) = recv_match(c, source, tag)? else { return Ok(Status::proc_null()) };
        let context = c.context;
        let mut landing = landing;
        let received = match self.receive(from, matching, landing.as_deref_mut())? {
            Received::Message(msg) => frag::complete_into(&mut self.rt, msg, landing)?,
            landed => landed,
        };
        let rank_of = |s: &State, w: u32| match source {
            MPI_ANY_SOURCE => s.comm(comm).map(|c| c.rank_of_world(w)),
            r => Ok(r),
        };
        match received {
            Received::Landed { source: world, tag, len } => {
                let from = (world, rank_of(self, world)?);
                self.landed_status(from, tag, len, context)
            }
            Received::Message(msg) => {
                let source = rank_of(self, msg.source)?;
                let dt = self.datatype(datatype)?;
                self.finish_recv(&msg, context, source, buf, elements, &dt)
            }
        }
    }

    /// Whether this rank is a restarted one replaying its log: it must take messages in the
    /// logged order, which concurrent receives (nonblocking collectives beside point-to-point
    /// ones) would otherwise take in their arrival order.
    pub fn replaying(&self) -> bool {
        self.rt.restarted() && self.rt.report().replay_end_ns == 0
    }

    /// Before the call's first delivery, once per call: its tick (`Runtime::tick`), so that
    /// the log says in which call each delivery came. During a replay a delivery the log names
    /// first (one the previous call took after its last tick) is let in before.
    pub fn tick_once(&mut self) -> MpiResult<()> {
        if !self.ticks_on || self.ticked {
            return Ok(());
        }
        self.ticked = true;
        if !self.rt.tick() {
            self.wait_until("a delivery the log names before this call", |s| Ok(s.rt.tick()))?;
        }
        Ok(())
    }

    /// At the end of a call that ticked, during a replay: the deliveries the log names next
    /// came in this call the first time (the next call's tick would come first otherwise), so
    /// they are taken before it returns.
    #[inline]
    pub fn settle_call(&mut self) -> MpiResult<()> {
        if !self.ticked || !self.replaying() {
            return Ok(());
        }
        self.settle_replayed_call()
    }

    #[inline(never)]
    fn settle_replayed_call(&mut self) -> MpiResult<()> {
        self.wait_until("a delivery the log names for this call", |s| Ok(s.rt.replay_next().is_none()))
    }

    /// Whether a receive for (`source`, `tag`) may take a message now: during a replay only if
    /// the logged next message is one it matches (a wildcard probe names that one); always
    /// outside.
    pub fn may_take(&mut self, source: Source, tag: TagMatch) -> MpiResult<bool> {
        if !self.replaying() {
            return Ok(true);
        }
        if self.rt.replay_next().is_none() {
            // An open rsn is a call's tick or a lone blocking receive's (neither comes here),
            // and past the log's last one the first run took nothing more here before the
            // sends the survivors hold (those would have carried its determinant).
            return Ok(false);
        }
        Ok(match self.rt.probe(Source::Any, TagMatch::any())? {
            Some((sender, arrived, _)) => source.matches(sender) && tag.matches(arrived),
            None => false,
        })
    }

    /// Receives posted and not matched, synchronous sends not acknowledged, or nonblocking
    /// collectives started and not finished: what a blocking call must progress while it waits.
    pub fn p2p_outstanding(&self) -> bool {
        !self.pending_recvs.is_empty()
            || !self.colls.is_empty()
            || self.lent_sends > 0
            || !self.wins.items.is_empty()
            || self.requests.iter().any(|(_, r)| matches!(r, Request::SyncSend(_)))
    }

    /// Waits (bounded) until `done(self)` holds, progressing; the bound counts from the last
    /// progress made.
    pub fn wait_until(
        &mut self,
        what: &str,
        mut done: impl FnMut(&mut State) -> MpiResult<bool>,
    ) -> MpiResult<()> {
        if done(self)? {
            return Ok(());
        }
        let bound = self.rt.config().recv_timeout;
        // Spins, yields or sleeps as REVERB_WAIT_MODE says; a fresh wait (no clock read) at
        // each progress made.
        let mut wait = self.rt.spin_wait(bound)?;
        loop {
            if done(self)? {
                return Ok(());
            }
            if self.progress()? {
                wait = self.rt.spin_wait(bound)?;
                continue;
            }
            if !self.rt.idle(&mut wait, WAIT_NAP)? {
                return Err(MpiError::new(
                    MPI_ERR_OTHER,
                    format!("{what}: nothing arrived within {bound:?}"),
                ));
            }
        }
    }

    /// What the program's handle becomes once request `h` completed: MPI_REQUEST_NULL, or
    /// `h` itself for a persistent request (inactive until started again).
    pub fn after_completion(&self, h: c_int) -> c_int {
        match self.requests.get(h) {
            Some(Request::Persistent(_)) => h,
            _ => MPI_REQUEST_NULL,
        }
    }

    /// The status of request `h` once complete (it is freed; a persistent one goes inactive).
    pub fn wait_request(&mut self, h: c_int) -> MpiResult<Status> {
        if h == MPI_REQUEST_NULL {
            return Ok(Status::empty());
        }
        match self.requests.get(h) {
            None => return Err(MpiError::new(MPI_ERR_REQUEST, format!("invalid request {h:#x}"))),
            Some(Request::Persistent(p)) => {
                let Some(inner) = p.active else { return Ok(Status::empty()) };
                let st = self.wait_request(inner)?;
                self.deactivate(h);
                return Ok(st);
            }
            Some(Request::Generalized(_)) => {
                self.wait_until("MPI_Wait", |s| Ok(s.generalized_complete(h)))?;
                return self.finish_generalized(h);
            }
            // With receives posted, windows open or collectives started the wait below
            // progresses (matching and serving them) until it is sent: a peer's lent send
            // to a posted receive completes only once this rank matches it.
            Some(&Request::LentSend(op))
                if self.pending_recvs.is_empty() && self.wins.items.is_empty() && self.colls.is_empty() =>
            {
                // The runtime's own wait: it spins, then sleeps until a completion comes.
                self.rt.wait_lent(op)?;
                self.requests.remove(h);
                self.lent_sends -= 1;
                return Ok(Status::empty());
            }
            _ => {}
        }
        // Alone and first in line: the runtime's own blocking receive (no polling), unless
        // windows or started collectives need serving meanwhile.
        if self.pending_recvs.front().map(|p| p.h) == Some(h)
            && self.pending_recvs.len() == 1
            && self.wins.items.is_empty()
            && self.colls.is_empty()
        {
            if let Some(Request::Recv(p)) = self.requests.get(h) {
                let buf = p.buf;
                // SAFETY: a posted receive not yet complete: MPI keeps its buffer ours until then.
                let landing = unsafe { landing_of(&buf, p.datatype.contiguous_len(p.count)) }?;
                let received = self.receive(p.source, p.tag, landing)?;
                self.pending_recvs.remove(0);
                let status = self.deliver(h, received)?;
                self.requests.remove(h);
                return Ok(status);
            }
        }
        self.wait_until("MPI_Wait", |s| Ok(s.requests.get(h).and_then(Request::done).is_some()))?;
        let status = self.requests.take_done(h).unwrap_or_else(Status::empty);
        Ok(status)
    }

    /// Completes request `h` if it can now: Some(status) (freed; a persistent one goes
    /// inactive), or None.
    pub fn test_request(&mut self, h: c_int) -> MpiResult<Option<Status>> {
        self.test_request_as(h, true)
    }

    /// `test_request` for `MPI_Test`: during a replay the deliveries the log names for this
    /// call (a synchronous send's acknowledgement, a receive's message) are taken before the
    /// outcome is read, as the first run's progress took them before it read it.
    pub fn test_request_settled(&mut self, h: c_int) -> MpiResult<Option<Status>> {
        let first = self.test_request(h)?;
        if first.is_some() || !self.ticked || !self.replaying() {
            return Ok(first);
        }
        self.settle_call()?;
        self.test_request_now(h)
    }

    /// `progress`, then during a replay the deliveries the log names for this call: what a
    /// test reads after it is what the first run's progress left (`MPI_Testany` and kin, which
    /// then read their requests without progressing again).
    pub fn progress_settled(&mut self) -> MpiResult<bool> {
        let any = self.progress()?;
        if self.ticked && self.replaying() {
            self.settle_call()?;
        }
        Ok(any)
    }

    /// `test_request` without progressing: for a loop that progresses once per pass over
    /// many requests (MPI_Waitall), not once per request.
    pub fn test_request_now(&mut self, h: c_int) -> MpiResult<Option<Status>> {
        self.test_request_as(h, false)
    }

    fn test_request_as(&mut self, h: c_int, progress: bool) -> MpiResult<Option<Status>> {
        if h == MPI_REQUEST_NULL {
            return Ok(Some(Status::empty()));
        }
        match self.requests.get(h) {
            None => return Err(MpiError::new(MPI_ERR_REQUEST, format!("invalid request {h:#x}"))),
            Some(Request::Persistent(p)) => {
                let Some(inner) = p.active else { return Ok(Some(Status::empty())) };
                let st = self.test_request_as(inner, progress)?;
                if st.is_some() {
                    self.deactivate(h);
                }
                return Ok(st);
            }
            Some(Request::Generalized(_)) => {
                if !self.generalized_complete(h) {
                    return Ok(None);
                }
                return self.finish_generalized(h).map(Some);
            }
            _ => {}
        }
        if progress && self.requests.get(h).and_then(Request::done).is_none() {
            self.progress()?;
        }
        Ok(self.requests.take_done(h))
    }

    /// The message a receive would match now: (source rank in `comm`, tag, bytes).
    pub fn probe_now(&mut self, source: c_int, tag: c_int, comm: c_int) -> MpiResult<Option<Status>> {
        let c = self.comm(comm)?;
        let Some((from, matching)) = recv_match(c, source, tag)? else {
            return Ok(Some(Status::proc_null()));
        };
        match self.rt.probe(from, matching)? {
            Some((src, t, len)) => self.probe_status(comm, src, t, len).map(Some),
            None => Ok(None),
        }
    }
}
