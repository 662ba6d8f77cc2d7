//! Tag matching shared by providers (as libfabric's util layer): posted receives and
//! unexpected arrivals, both kept in order so messages from one source are never overtaken,
//! and indexed by (source, tag) so the common match is a hash lookup, not a scan.

mod indexed;
mod keyed;
#[cfg(test)]
mod order_tests;

use std::collections::VecDeque;

use crate::api::{OpId, Rank, RecvBuffer, Source, Tag, TagMatch};
use keyed::{Key, KeyedQueues, Seq};

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
/// The common case (a receive naming its source and the full tag, as the logger and MPI
/// point-to-point post) is O(1) on both sides: receives and arrivals sit in FIFO queues keyed
/// by (source, tag), as in UCX's tag-matching hash and MPICH's ch4 queues (a side whose scans
/// stay short keeps one scanned list instead; see `keyed`). Receives that take
/// any source or mask tag bits wait in one list in posting order; a message compares the
/// oldest receive of its key with the older wildcard receives by posting sequence number. A
/// wildcard receive walks the arrivals in arrival order and stops at the first it accepts.
#[derive(Debug)]
pub struct Matcher<A: Arrival> {
    /// Receives for one source and a full tag.
    posted: KeyedQueues<PostedRecv>,
    /// The other receives, in posting order.
    posted_wild: VecDeque<(Seq, PostedRecv)>,
    /// Arrivals, by their source and tag.
    unexpected: KeyedQueues<A>,
    next_post: Seq,
    next_arrival: Seq,
}

impl<A: Arrival> Default for Matcher<A> {
    fn default() -> Self {
        Matcher {
            posted: KeyedQueues::default(),
            posted_wild: VecDeque::new(),
            unexpected: KeyedQueues::default(),
            next_post: 0,
            next_arrival: 0,
        }
    }
}

/// The queue key of a receive that accepts exactly one (source, tag); None for a wildcard.
fn exact_key(source: Source, tag: TagMatch) -> Option<Key> {
    match source {
        Source::Rank(r) if tag.mask == Tag::MAX => Some((r, tag.tag)),
        _ => None,
    }
}

impl<A: Arrival> Matcher<A> {
    /// The oldest posted receive that accepts a message from `source` with `tag`.
    pub fn take_posted(&mut self, source: Rank, tag: Tag) -> Option<PostedRecv> {
        if self.posted_wild.is_empty() {
            return self.posted.pop((source, tag));
        }
        let exact = self.posted.front_seq((source, tag));
        // Only wildcard receives posted before the exact one can take the message from it.
        let wild = self
            .posted_wild
            .iter()
            .take_while(|(seq, _)| exact.is_none_or(|e| *seq < e))
            .position(|(_, p)| p.source.matches(source) && p.tag.matches(tag));
        match wild {
            Some(i) => self.posted_wild.remove(i).map(|(_, p)| p),
            None => self.posted.pop((source, tag)),
        }
    }

    /// The oldest unexpected arrival that a new receive for (`source`, `tag`) accepts.
    pub fn take_unexpected(&mut self, source: Source, tag: TagMatch) -> Option<A> {
        match exact_key(source, tag) {
            Some(key) => self.unexpected.pop(key),
            None => self.unexpected.take_oldest(|(r, t)| source.matches(r) && tag.matches(t)),
        }
    }

    /// Keeps a receive that matched nothing that had arrived (call `take_unexpected` first).
    pub fn push_posted(&mut self, recv: PostedRecv) {
        let seq = self.next_post;
        self.next_post += 1;
        match exact_key(recv.source, recv.tag) {
            Some(key) => self.posted.push(key, seq, recv),
            None => self.posted_wild.push_back((seq, recv)),
        }
    }

    /// Keeps an arrival that matched no posted receive (call `take_posted` first).
    pub fn push_unexpected(&mut self, arrival: A) {
        let seq = self.next_arrival;
        self.next_arrival += 1;
        self.unexpected.push((arrival.source(), arrival.tag()), seq, arrival);
    }

    /// Removes the receives that can only be satisfied by `rank` (after it died), in posting
    /// order.
    pub fn drain_posted_from(&mut self, rank: Rank) -> Vec<PostedRecv> {
        let mut dead = self.posted.remove_keys(|(r, _)| r == rank);
        let wild = std::mem::take(&mut self.posted_wild);
        for (seq, p) in wild {
            if p.source == Source::Rank(rank) {
                dead.push((seq, p));
            } else {
                self.posted_wild.push_back((seq, p));
            }
        }
        dead.sort_unstable_by_key(|(seq, _)| *seq);
        dead.into_iter().map(|(_, p)| p).collect()
    }

    /// Drops the arrivals from `rank` no receive has claimed; returns how many.
    pub fn drop_unexpected_from(&mut self, rank: Rank) -> usize {
        self.unexpected.remove_keys(|(r, _)| r == rank).len()
    }

    /// Receives waiting for a message.
    pub fn posted_len(&self) -> usize {
        self.posted.len() + self.posted_wild.len()
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
