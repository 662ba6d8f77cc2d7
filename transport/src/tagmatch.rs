//! Tag matching shared by providers (as libfabric's util layer): posted receives and
//! unexpected arrivals, both kept in order so messages from one source are never overtaken.

use std::collections::VecDeque;

use crate::api::{OpId, Rank, RecvBuffer, Source, Tag, TagMatch};

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

/// Posted receives and unexpected arrivals of one provider, each in posting/arrival order.
#[derive(Debug)]
pub struct Matcher<A: Arrival> {
    posted: VecDeque<PostedRecv>,
    unexpected: VecDeque<A>,
}

impl<A: Arrival> Default for Matcher<A> {
    fn default() -> Self {
        Matcher { posted: VecDeque::new(), unexpected: VecDeque::new() }
    }
}

impl<A: Arrival> Matcher<A> {
    /// The oldest posted receive that accepts a message from `source` with `tag`.
    pub fn take_posted(&mut self, source: Rank, tag: Tag) -> Option<PostedRecv> {
        let i = self.posted.iter().position(|p| p.source.matches(source) && p.tag.matches(tag))?;
        self.posted.remove(i)
    }

    /// The oldest unexpected arrival that a new receive for (`source`, `tag`) accepts.
    pub fn take_unexpected(&mut self, source: Source, tag: TagMatch) -> Option<A> {
        let i = self.unexpected.iter().position(|a| source.matches(a.source()) && tag.matches(a.tag()))?;
        self.unexpected.remove(i)
    }

    /// Keeps a receive that matched nothing that had arrived (call `take_unexpected` first).
    pub fn push_posted(&mut self, recv: PostedRecv) {
        self.posted.push_back(recv);
    }

    /// Keeps an arrival that matched no posted receive (call `take_posted` first).
    pub fn push_unexpected(&mut self, arrival: A) {
        self.unexpected.push_back(arrival);
    }

    /// Removes the receives that can only be satisfied by `rank` (after it died).
    pub fn drain_posted_from(&mut self, rank: Rank) -> Vec<PostedRecv> {
        let (dead, keep): (VecDeque<_>, VecDeque<_>) =
            self.posted.drain(..).partition(|p| p.source == Source::Rank(rank));
        self.posted = keep;
        dead.into()
    }

    /// Drops the arrivals from `rank` no receive has claimed; returns how many.
    pub fn drop_unexpected_from(&mut self, rank: Rank) -> usize {
        let before = self.unexpected.len();
        self.unexpected.retain(|a| a.source() != rank);
        before - self.unexpected.len()
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
