//! Requests and statuses: what a nonblocking call returns, what completes it, and how its
//! status reaches the program's `MPI_Status`.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::ffi::{c_int, c_void};

use reverb_transport::{Source, TagMatch};
use smallvec::SmallVec;

use crate::abi::*;
use crate::datatype::Datatype;
use crate::errors::{MpiError, MpiResult};
use crate::ffi::{StatusOut, UserBuf};

/// MPI's view of a completed operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    pub source: c_int,
    pub tag: c_int,
    pub bytes: usize,
    pub error: c_int,
    pub cancelled: bool,
}

impl Status {
    /// A send's, or one with nothing to say (MPI_PROC_NULL: any source, any tag, no bytes).
    pub fn empty() -> Status {
        Status { source: MPI_ANY_SOURCE, tag: MPI_ANY_TAG, bytes: 0, error: MPI_SUCCESS, cancelled: false }
    }

    pub fn proc_null() -> Status {
        Status { source: MPI_PROC_NULL, ..Status::empty() }
    }
}

/// mpi.h's `MPI_Status`: count in bytes split in two, the high part shifted past the
/// cancelled bit.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CStatus {
    pub count_lo: c_int,
    pub count_hi_and_cancelled: c_int,
    pub source: c_int,
    pub tag: c_int,
    pub error: c_int,
}

impl From<Status> for CStatus {
    fn from(s: Status) -> CStatus {
        let bytes = s.bytes as u64;
        CStatus {
            count_lo: bytes as u32 as c_int,
            count_hi_and_cancelled: (((bytes >> 32) << 1) as c_int) | c_int::from(s.cancelled),
            source: s.source,
            tag: s.tag,
            error: s.error,
        }
    }
}

impl CStatus {
    pub fn bytes(&self) -> usize {
        (self.count_lo as u32 as usize) | (((self.count_hi_and_cancelled as u32 >> 1) as usize) << 32)
    }
}

/// Writes `status` unless the program passed `MPI_STATUS_IGNORE`. A single completion leaves
/// the MPI_ERROR field as it was (MPI sets it only for the multiple-completion calls).
pub fn write_status(p: StatusOut<'_>, status: Status) -> MpiResult<()> {
    // An empty status (a null or inactive request's) is empty in MPI_ERROR too; a
    // MPI_PROC_NULL one leaves it alone like any other.
    let empty = status == Status::empty();
    p.write(status.into(), empty);
    Ok(())
}

/// Writes entry `i` of a status array, MPI_ERROR included, unless it is `MPI_STATUSES_IGNORE`.
///
/// # Safety
/// The array has more than `i` entries (MPI's rule: one per request of the call).
pub unsafe fn write_status_at(p: StatusOut<'_>, i: usize, status: Status) -> MpiResult<()> {
    // SAFETY: entry `i` exists (the caller's promise).
    unsafe { p.write_at(i, status.into(), true) };
    Ok(())
}

/// A receive posted and not yet matched.
#[derive(Debug)]
pub struct PendingRecv {
    /// The communicator's context, kept: it may be freed while this is pending.
    pub context: u32,
    /// The sender's rank in the communicator: the program's own for a named source; for
    /// MPI_ANY_SOURCE found among the communicator's peers (world ranks, copied: only
    /// wildcard receives pay that allocation).
    pub from: RecvFrom,
    pub source: Source,
    pub tag: TagMatch,
    pub buf: UserBuf,
    pub count: usize,
    pub datatype: RecvType,
}

/// A pending receive's datatype: a predefined contiguous one by its handle and size (no type
/// built, copied and dropped per receive: the small-message path), else the type, boxed.
#[derive(Debug)]
pub enum RecvType {
    Plain { handle: c_int, size: usize },
    Typed(Box<Datatype>),
}

impl RecvType {
    /// The bytes of `count` elements where they are one contiguous run, else None.
    pub fn contiguous_len(&self, count: usize) -> Option<usize> {
        match self {
            RecvType::Plain { size, .. } => size.checked_mul(count),
            RecvType::Typed(t) => t.contiguous_len(count),
        }
    }

    /// The datatype itself, built for a predefined one.
    pub fn resolve(&self) -> MpiResult<Cow<'_, Datatype>> {
        match self {
            RecvType::Plain { handle, .. } => Datatype::builtin(*handle)
                .map(Cow::Owned)
                .ok_or_else(|| MpiError::new(MPI_ERR_TYPE, format!("invalid datatype {handle:#x}"))),
            RecvType::Typed(t) => Ok(Cow::Borrowed(t)),
        }
    }
}

/// Who a pending receive's status names as its source.
#[derive(Debug)]
pub enum RecvFrom {
    /// A named source: this rank of the communicator.
    Named(c_int),
    /// MPI_ANY_SOURCE: the communicator's peers, to find the sender's rank among.
    Any(Vec<u32>),
}

impl RecvFrom {
    /// The rank in the communicator of world rank `w` (MPI_ANY_SOURCE if none).
    pub fn rank_of(&self, w: u32) -> c_int {
        match self {
            RecvFrom::Named(r) => *r,
            RecvFrom::Any(peers) => peers.iter().position(|&x| x == w).map_or(MPI_ANY_SOURCE, |i| i as c_int),
        }
    }
}

/// A receive in the queue of those posted and not matched: its request, and what it matches
/// (progress walks the queue without looking each request up).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Posted {
    pub h: c_int,
    pub source: Source,
    pub tag: TagMatch,
}

/// The posted receives not yet matched, in the order posted (MPI's matching order), and how
/// many of them match each (source, tag): once every kind is left pending in a progress pass
/// the rest of the queue is too, and the pass ends there instead of walking a window.
#[derive(Debug, Default)]
pub struct PostedQueue {
    queue: VecDeque<Posted>,
    /// (source, tag, receives), while there are at most `KINDS_TRACKED` kinds.
    kinds: SmallVec<[(Source, TagMatch, usize); KINDS_TRACKED]>,
    /// More kinds than tracked were posted since the queue was last empty.
    untracked: bool,
}

const KINDS_TRACKED: usize = 8;

impl PostedQueue {
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    pub fn get(&self, i: usize) -> Option<Posted> {
        self.queue.get(i).copied()
    }

    pub fn front(&self) -> Option<Posted> {
        self.queue.front().copied()
    }

    pub fn push_back(&mut self, p: Posted) {
        self.queue.push_back(p);
        if self.untracked {
            return;
        }
        match self.kinds.iter().position(|k| (k.0, k.1) == (p.source, p.tag)) {
            Some(at) => self.kinds[at].2 += 1,
            None if self.kinds.len() < KINDS_TRACKED => self.kinds.push((p.source, p.tag, 1)),
            None => {
                self.untracked = true;
                self.kinds.clear();
            }
        }
    }

    /// Removes entry `i`.
    pub fn remove(&mut self, i: usize) -> Option<Posted> {
        let p = self.queue.remove(i)?;
        self.forget(p);
        Some(p)
    }

    /// Removes request `h`'s entry, if it has one.
    pub fn remove_request(&mut self, h: c_int) {
        if let Some(i) = self.queue.iter().position(|p| p.h == h) {
            self.remove(i);
        }
    }

    fn forget(&mut self, p: Posted) {
        if self.queue.is_empty() {
            self.kinds.clear();
            self.untracked = false;
            return;
        }
        if let Some(at) = self.kinds.iter().position(|k| (k.0, k.1) == (p.source, p.tag)) {
            self.kinds[at].2 -= 1;
            if self.kinds[at].2 == 0 {
                self.kinds.swap_remove(at);
            }
        }
    }

    /// Whether `left`, distinct kinds each left pending by a progress pass, are every kind
    /// posted: then no later receive in the queue can take anything in this pass.
    pub fn all_kinds_in(&self, left: &[(Source, TagMatch)]) -> bool {
        !self.untracked && left.len() >= self.kinds.len()
    }
}

/// A synchronous send waiting for the receiver's acknowledgement.
#[derive(Debug)]
pub struct PendingSync {
    pub dest: u32,
    pub ack: u64,
    /// Its place among this rank's synchronous sends: acknowledgements are looked for in the
    /// order the sends started, as a replay looks for them (slots are reused in any order).
    pub started: u64,
}

/// What a persistent request does each time it is started (its datatype kept: the program
/// may free the handle meanwhile).
#[derive(Debug, Clone)]
pub enum PersistentOp {
    Send {
        buf: UserBuf,
        count: c_int,
        datatype: Datatype,
        dest: c_int,
        tag: c_int,
        comm: c_int,
        sync: bool,
    },
    Recv {
        buf: UserBuf,
        count: c_int,
        datatype: Datatype,
        source: c_int,
        tag: c_int,
        comm: c_int,
    },
    /// A persistent collective (pcoll.rs): the blocking collective its start runs.
    Coll(CollRun),
}

/// The blocking collective a persistent collective's start runs as a nonblocking one
/// (`icoll`; it is an MPI call itself, returning its MPI return code), and the tag sequence
/// number its runs use.
#[derive(Clone)]
pub struct CollRun {
    pub run: std::rc::Rc<dyn Fn() -> c_int>,
    pub seq: u32,
}

impl std::fmt::Debug for CollRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CollRun")
    }
}

/// A persistent request: its operation, and the request of the run started last (None while
/// inactive).
#[derive(Debug)]
pub struct Persistent {
    /// Boxed: every request's slot is as large as the largest kind.
    pub op: Box<PersistentOp>,
    pub active: Option<c_int>,
}

/// `MPI_Grequest_query_function`, `_free_function`, `_cancel_function`.
pub type QueryFn = unsafe extern "C" fn(*mut c_void, *mut CStatus) -> c_int;
pub type FreeFn = unsafe extern "C" fn(*mut c_void) -> c_int;
pub type CancelFn = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;

/// A generalized request: the program completes it (MPI_Grequest_complete).
#[derive(Debug)]
pub struct Generalized {
    pub query: Option<QueryFn>,
    pub free: Option<FreeFn>,
    pub cancel: Option<CancelFn>,
    pub extra_state: *mut c_void,
    pub complete: bool,
}

#[derive(Debug)]
pub enum Request {
    /// Complete; its status waits for MPI_Wait / MPI_Test.
    Done(Status),
    Recv(PendingRecv),
    SyncSend(PendingSync),
    /// A send whose bytes the runtime holds lent until it says they left.
    LentSend(reverb_transport::OpId),
    Persistent(Persistent),
    Generalized(Generalized),
    /// A nonblocking collective still running (its coroutine is in `State::colls`).
    Coll,
}

impl Request {
    pub fn done(&self) -> Option<Status> {
        match self {
            Request::Done(s) => Some(*s),
            _ => None,
        }
    }
}

/// The request table. A handle is `REQUEST_BASE` plus its slot, so a lookup is an index (a
/// window of MPI_Waitall looks every request up each round), and a freed slot is given out
/// again, last freed first, as MPICH does: once the table has grown to the most requests the
/// program keeps live, starting one allocates nothing.
pub struct Requests {
    base: u32,
    slots: Vec<Option<Request>>,
    free: Vec<u32>,
}

/// Slots a table may have: the handles of the next kind up start there.
const MAX_SLOTS: usize = (crate::state::MESSAGE_BASE - crate::state::REQUEST_BASE) as usize;

impl Requests {
    pub fn new(base: u32) -> Requests {
        Requests { base, slots: Vec::new(), free: Vec::new() }
    }

    /// The slot of handle `h` (None for a handle not of this table, MPI_REQUEST_NULL too).
    fn slot(&self, h: c_int) -> Option<usize> {
        let i = (h as u32).wrapping_sub(self.base) as usize;
        (i < self.slots.len()).then_some(i)
    }

    fn handle(&self, slot: usize) -> c_int {
        self.base.wrapping_add(slot as u32) as c_int
    }

    /// Stores `r`; its new handle.
    pub fn insert(&mut self, r: Request) -> MpiResult<c_int> {
        if let Some(slot) = self.free.pop() {
            self.slots[slot as usize] = Some(r);
            return Ok(self.handle(slot as usize));
        }
        if self.slots.len() >= MAX_SLOTS {
            let why = format!("more than {MAX_SLOTS} requests live at once");
            return Err(crate::errors::MpiError::new(MPI_ERR_NO_MEM, why));
        }
        self.slots.push(Some(r));
        Ok(self.handle(self.slots.len() - 1))
    }

    pub fn get(&self, h: c_int) -> Option<&Request> {
        self.slots[self.slot(h)?].as_ref()
    }

    pub fn get_mut(&mut self, h: c_int) -> Option<&mut Request> {
        let i = self.slot(h)?;
        self.slots[i].as_mut()
    }

    pub fn remove(&mut self, h: c_int) -> Option<Request> {
        let i = self.slot(h)?;
        let r = self.slots[i].take()?;
        self.free.push(i as u32);
        Some(r)
    }

    /// Frees request `h` if it is complete: its status. The request is dropped where it lies
    /// (`remove` would copy it out first, all of a pending receive's size).
    pub fn take_done(&mut self, h: c_int) -> Option<Status> {
        let i = self.slot(h)?;
        let status = self.slots[i].as_ref()?.done()?;
        self.slots[i] = None;
        self.free.push(i as u32);
        Some(status)
    }

    /// Every live request with its handle, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (c_int, &Request)> + '_ {
        self.slots.iter().enumerate().filter_map(|(i, r)| Some((self.handle(i), r.as_ref()?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::REQUEST_BASE;

    #[test]
    fn a_freed_slot_is_given_out_again_and_its_old_handle_finds_nothing_meanwhile() {
        let mut t = Requests::new(REQUEST_BASE);
        let a = t.insert(Request::Done(Status::empty())).expect("a slot");
        let b = t.insert(Request::Coll).expect("a slot");
        assert_eq!((a as u32, b as u32), (REQUEST_BASE, REQUEST_BASE + 1));
        assert!(matches!(t.remove(a), Some(Request::Done(_))));
        assert!(t.get(a).is_none() && t.remove(a).is_none());
        assert!(t.get(MPI_REQUEST_NULL).is_none() && t.get(b + 1).is_none());
        let c = t.insert(Request::Done(Status::proc_null())).expect("a slot");
        assert_eq!(c, a, "last freed, first given out");
        let live: Vec<c_int> = t.iter().map(|(h, _)| h).collect();
        assert_eq!(live, vec![a, b]);
        assert_eq!(t.take_done(b), None, "a running collective's request stays");
        assert_eq!(t.take_done(c), Some(Status::proc_null()));
        assert!(t.get(c).is_none() && t.get(b).is_some());
    }

    fn posted(h: c_int, rank: u32, tag: u64) -> Posted {
        Posted { h, source: Source::Rank(rank), tag: TagMatch::exact(tag) }
    }

    fn kind(p: Posted) -> (Source, TagMatch) {
        (p.source, p.tag)
    }

    #[test]
    fn the_queue_knows_when_every_kind_posted_is_left_pending() {
        let mut q = PostedQueue::default();
        for h in 0..4 {
            q.push_back(posted(h, 1, 7));
        }
        q.push_back(posted(4, 2, 7));
        let (a, b) = (kind(posted(0, 1, 7)), kind(posted(0, 2, 7)));
        assert!(!q.all_kinds_in(&[a]));
        assert!(q.all_kinds_in(&[a, b]));
        q.remove_request(4);
        assert!(q.all_kinds_in(&[a]));
        assert_eq!(q.remove(0).map(|p| p.h), Some(0));
        assert_eq!((q.len(), q.front().map(|p| p.h)), (3, Some(1)));
    }

    #[test]
    fn past_the_kinds_it_tracks_the_queue_never_ends_a_pass_early_until_emptied() {
        let mut q = PostedQueue::default();
        let n = KINDS_TRACKED as c_int + 1;
        for h in 0..n {
            q.push_back(posted(h, 1, h as u64));
        }
        let all: Vec<_> = (0..n).map(|h| kind(posted(h, 1, h as u64))).collect();
        assert!(!q.all_kinds_in(&all));
        for h in 0..n {
            q.remove_request(h);
        }
        assert!(q.is_empty());
        q.push_back(posted(0, 1, 0));
        assert!(q.all_kinds_in(&all[..1]));
    }
}
