//! Tag matching shared by providers (as libfabric's util layer): posted receives and
//! unexpected arrivals, both kept in order so messages from one source are never overtaken:
//! scanned while few are outstanding, indexed by (source, tag) once scans grow long.

mod indexed;
mod key;
#[cfg(test)]
mod order_tests;
mod posted;
mod unexpected;

use crate::api::{OpId, Rank, RecvBuffer, Source, Tag, TagMatch};
use key::Key;
use posted::Posted;
use unexpected::Unexpected;

/// The longest scan of a side's list before it moves to the index: past the crossover of a
/// short scan and a hash lookup plus slab upkeep (`benches/benches/tagmatch.rs`). Small under
/// test, so the random tests cross it often.
const SCAN_LIMIT: usize = if cfg!(test) { 2 } else { 16 };

/// A receive the application posted and no message has matched yet.
#[derive(Debug)]
pub struct PostedRecv {
    /// The id its post returned.
    pub op: OpId,
    /// Which senders it accepts.
    pub source: Source,
    /// Which tags it accepts.
    pub tag: TagMatch,
    /// Where the message goes.
    pub buffer: RecvBuffer,
}

/// Something that arrived and can be matched: it names its sender and tag.
pub trait Arrival {
    /// The sender.
    fn source(&self) -> Rank;
    /// The message tag.
    fn tag(&self) -> Tag;
}

/// Posted receives and unexpected arrivals of one provider, matched as MPI does: a message
/// takes the earliest posted receive that accepts it, a receive takes the earliest arrival it
/// accepts, and messages from one sender are taken in the order they arrived.
///
/// Each side starts as one list scanned from the front: with a few entries outstanding (a
/// ping-pong, a window of receives for one key) the entry sought is at or near the front and
/// nothing is cheaper. A side whose scans pass `SCAN_LIMIT` entries moves to an index until it
/// empties, where the common case (a receive naming its source and the full tag, as the logger
/// and MPI point-to-point post) is O(1): receives and arrivals sit in FIFO queues keyed by
/// (source, tag), as in UCX's tag-matching hash and MPICH's ch4 queues. There, receives that
/// take any source or mask tag bits wait in one list in posting order, and a message compares
/// the oldest receive of its key with the older wildcard receives by posting sequence number;
/// a wildcard receive walks the arrivals in arrival order and stops at the first it accepts.
#[derive(Debug)]
pub struct Matcher<A: Arrival> {
    posted: Posted,
    unexpected: Unexpected<A>,
}

impl<A: Arrival> Default for Matcher<A> {
    fn default() -> Self {
        Matcher { posted: Posted::default(), unexpected: Unexpected::default() }
    }
}

/// The queue key of a receive that accepts exactly one (source, tag); None for a wildcard.
#[inline]
fn exact_key(source: Source, tag: TagMatch) -> Option<Key> {
    match source {
        Source::Rank(r) if tag.mask == Tag::MAX => Some((r, tag.tag)),
        _ => None,
    }
}

impl<A: Arrival> Matcher<A> {
    /// The oldest posted receive that accepts a message from `source` with `tag`.
    #[inline]
    pub fn take_posted(&mut self, source: Rank, tag: Tag) -> Option<PostedRecv> {
        self.posted.take(source, tag)
    }

    /// The oldest unexpected arrival that a new receive for (`source`, `tag`) accepts.
    #[inline]
    pub fn take_unexpected(&mut self, source: Source, tag: TagMatch) -> Option<A> {
        self.unexpected.take(source, tag)
    }

    /// The arrival `take_unexpected` would take, left in place.
    #[inline]
    pub fn peek_unexpected(&self, source: Source, tag: TagMatch) -> Option<&A> {
        self.unexpected.peek(source, tag)
    }

    /// The oldest posted receive that accepts a message from `source` with `tag`, if `pred`
    /// accepts it; else nothing is taken.
    pub fn take_posted_if(
        &mut self,
        source: Rank,
        tag: Tag,
        pred: impl FnOnce(&PostedRecv) -> bool,
    ) -> Option<PostedRecv> {
        self.posted.take_if(source, tag, pred)
    }

    /// How many posted receives `f` accepts.
    pub fn count_posted(&self, f: impl Fn(&PostedRecv) -> bool) -> usize {
        self.posted.count(f)
    }

    /// The posted receives, oldest first.
    pub fn posted_in_order(&self) -> Vec<&PostedRecv> {
        self.posted.in_order()
    }

    /// Keeps a receive that matched nothing that had arrived (call `take_unexpected` first).
    #[inline]
    pub fn push_posted(&mut self, recv: PostedRecv) {
        self.posted.push(recv)
    }

    /// Keeps an arrival that matched no posted receive (call `take_posted` first).
    #[inline]
    pub fn push_unexpected(&mut self, arrival: A) {
        self.unexpected.push(arrival)
    }

    /// Removes the receives that can only be satisfied by `rank` (after it died), in posting
    /// order.
    pub fn drain_posted_from(&mut self, rank: Rank) -> Vec<PostedRecv> {
        self.posted.drain_from(rank)
    }

    /// Takes back the posted receive `op` (a cancel); None when a message matched it already
    /// or it was never posted.
    pub fn remove_posted(&mut self, op: OpId) -> Option<PostedRecv> {
        self.posted.remove(op)
    }

    /// Drops the arrivals from `rank` no receive has claimed; returns how many.
    pub fn drop_unexpected_from(&mut self, rank: Rank) -> usize {
        self.unexpected.drop_from(rank)
    }

    /// Receives waiting for a message.
    pub fn posted_len(&self) -> usize {
        self.posted.len()
    }

    /// Arrivals waiting for a receive.
    pub fn unexpected_len(&self) -> usize {
        self.unexpected.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Msg(Rank, Tag);
    impl Arrival for Msg {
        fn source(&self) -> Rank {
            self.0
        }
        fn tag(&self) -> Tag {
            self.1
        }
    }

    fn posted(op: u64, source: Source, tag: TagMatch) -> PostedRecv {
        PostedRecv { op: OpId(op), source, tag, buffer: RecvBuffer::Owned { capacity: 8 } }
    }

    #[test]
    fn posted_receives_match_in_order() {
        let mut m: Matcher<Msg> = Matcher::default();
        m.push_posted(posted(1, Source::Any, TagMatch::exact(7)));
        m.push_posted(posted(2, Source::Rank(3), TagMatch::any()));
        assert_eq!(m.take_posted(3, 9).map(|p| p.op), Some(OpId(2)));
        assert_eq!(m.take_posted(3, 7).map(|p| p.op), Some(OpId(1)));
        assert!(m.take_posted(3, 7).is_none());
    }

    #[test]
    fn unexpected_keeps_per_source_order_and_masks() {
        let mut m: Matcher<Msg> = Matcher::default();
        m.push_unexpected(Msg(1, 0x10));
        m.push_unexpected(Msg(2, 0x11));
        m.push_unexpected(Msg(1, 0x12));
        let masked = TagMatch { tag: 0x10, mask: !0xf };
        assert_eq!(m.take_unexpected(Source::Rank(1), masked).map(|a| a.1), Some(0x10));
        assert_eq!(m.take_unexpected(Source::Rank(1), masked).map(|a| a.1), Some(0x12));
        assert_eq!(m.take_unexpected(Source::Any, TagMatch::any()).map(|a| a.0), Some(2));
    }

    #[test]
    fn dead_source_receives_are_drained() {
        let mut m: Matcher<Msg> = Matcher::default();
        m.push_posted(posted(1, Source::Rank(4), TagMatch::any()));
        m.push_posted(posted(2, Source::Any, TagMatch::any()));
        let dead = m.drain_posted_from(4);
        assert_eq!(dead.len(), 1);
        assert_eq!(m.posted_len(), 1);
    }
}
