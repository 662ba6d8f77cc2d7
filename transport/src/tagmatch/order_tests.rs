//! The indexed matcher against a reference model (the linear scans it replaced), on random
//! posts and arrivals, and the ordering corner cases one by one.

use std::collections::VecDeque;

use proptest::prelude::*;

use super::indexed::EMPTY_KEYS_KEPT;
use super::{Arrival, Matcher, PostedRecv, SCAN_LIMIT};
use crate::api::{OpId, Rank, RecvBuffer, Source, Tag, TagMatch};

/// A message: sender, tag and an id to tell equal-looking messages apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Msg(Rank, Tag, u64);

impl Arrival for Msg {
    fn source(&self) -> Rank {
        self.0
    }
    fn tag(&self) -> Tag {
        self.1
    }
}

/// The old matcher: one list per side, scanned front to back.
#[derive(Default)]
struct Linear {
    posted: VecDeque<(u64, Source, TagMatch)>,
    unexpected: VecDeque<Msg>,
}

impl Linear {
    fn take_posted(&mut self, source: Rank, tag: Tag) -> Option<u64> {
        let i = self.posted.iter().position(|(_, s, t)| s.matches(source) && t.matches(tag))?;
        self.posted.remove(i).map(|(op, _, _)| op)
    }
    fn take_unexpected(&mut self, source: Source, tag: TagMatch) -> Option<Msg> {
        let i = self.unexpected.iter().position(|m| source.matches(m.0) && tag.matches(m.1))?;
        self.unexpected.remove(i)
    }
    fn drain_posted_from(&mut self, rank: Rank) -> Vec<u64> {
        let dead = self.posted.iter().filter(|(_, s, _)| *s == Source::Rank(rank)).map(|p| p.0).collect();
        self.posted.retain(|(_, s, _)| *s != Source::Rank(rank));
        dead
    }
    fn cancel(&mut self, op: u64) -> Option<u64> {
        let i = self.posted.iter().position(|(id, _, _)| *id == op)?;
        self.posted.remove(i).map(|(id, _, _)| id)
    }
    fn drop_unexpected_from(&mut self, rank: Rank) -> usize {
        let before = self.unexpected.len();
        self.unexpected.retain(|m| m.0 != rank);
        before - self.unexpected.len()
    }
}

fn recv(op: u64, source: Source, tag: TagMatch) -> PostedRecv {
    PostedRecv { op: OpId(op), source, tag, buffer: RecvBuffer::Owned { capacity: 8 } }
}

/// A receive as the provider handles it: the earliest arrival it accepts, else posted.
fn post(m: &mut Matcher<Msg>, op: u64, source: Source, tag: TagMatch) -> Option<Msg> {
    let hit = m.take_unexpected(source, tag);
    if hit.is_none() {
        m.push_posted(recv(op, source, tag));
    }
    hit
}

/// A message as the provider handles it: the earliest receive that accepts it, else kept.
fn arrive(m: &mut Matcher<Msg>, msg: Msg) -> Option<u64> {
    let hit = m.take_posted(msg.0, msg.1).map(|p| p.op.0);
    if hit.is_none() {
        m.push_unexpected(msg);
    }
    hit
}

#[derive(Debug, Clone)]
enum Step {
    Post { source: Option<Rank>, tag: Tag, mask: Tag },
    Arrive { source: Rank, tag: Tag },
    DrainPosted(Rank),
    DropUnexpected(Rank),
    Cancel(prop::sample::Index),
}

/// Few ranks and `tags` tags so keys collide; masks: full, low bits free, one bit, any tag.
fn step(tags: u64) -> impl Strategy<Value = Step> {
    let mask = prop::sample::select(vec![Tag::MAX, Tag::MAX, !0x3, 0x1, 0]);
    prop_oneof![
        8 => (prop::option::weighted(0.7, 0..4u32), 0..tags, mask)
            .prop_map(|(source, tag, mask)| Step::Post { source, tag, mask }),
        8 => (0..4u32, 0..tags).prop_map(|(source, tag)| Step::Arrive { source, tag }),
        1 => (0..4u32).prop_map(Step::DrainPosted),
        1 => (0..4u32).prop_map(Step::DropUnexpected),
        2 => any::<prop::sample::Index>().prop_map(Step::Cancel),
    ]
}

/// Runs `steps` through the matcher and the model; every outcome and count must agree.
fn check_against_model(steps: Vec<Step>) -> Result<(), TestCaseError> {
    let (mut m, mut model) = (Matcher::<Msg>::default(), Linear::default());
    for (id, step) in (0u64..).zip(steps) {
        match step {
            Step::Post { source, tag, mask } => {
                let source = source.map_or(Source::Any, Source::Rank);
                let tag = TagMatch { tag, mask };
                let want = model.take_unexpected(source, tag);
                if want.is_none() {
                    model.posted.push_back((id, source, tag));
                }
                prop_assert_eq!(post(&mut m, id, source, tag), want);
            }
            Step::Arrive { source, tag } => {
                let msg = Msg(source, tag, id);
                let want = model.take_posted(source, tag);
                if want.is_none() {
                    model.unexpected.push_back(msg);
                }
                prop_assert_eq!(arrive(&mut m, msg), want);
            }
            Step::DrainPosted(rank) => {
                let got: Vec<u64> = m.drain_posted_from(rank).iter().map(|p| p.op.0).collect();
                prop_assert_eq!(got, model.drain_posted_from(rank));
            }
            Step::DropUnexpected(rank) => {
                prop_assert_eq!(m.drop_unexpected_from(rank), model.drop_unexpected_from(rank));
            }
            Step::Cancel(at) => {
                // The receive at that index of the model's list; with none, an op never posted.
                let op = match model.posted.len() {
                    0 => u64::MAX,
                    n => model.posted[at.index(n)].0,
                };
                let got = m.remove_posted(OpId(op)).map(|p| p.op.0);
                prop_assert_eq!(got, model.cancel(op));
            }
        }
        prop_assert_eq!(m.posted_len(), model.posted.len());
        prop_assert_eq!(m.unexpected_len(), model.unexpected.len());
    }
    Ok(())
}

proptest! {
    #[test]
    fn indexed_matcher_matches_like_the_linear_scans(steps in prop::collection::vec(step(8), 0..300)) {
        check_against_model(steps)?;
    }

    /// Hundreds of keys, so emptied keys outnumber the kept bound and get swept.
    #[test]
    fn many_keys_match_like_the_linear_scans(steps in prop::collection::vec(step(128), 0..1500)) {
        check_against_model(steps)?;
    }
}

#[test]
fn wildcard_posted_before_an_exact_receive_wins() {
    let mut m = Matcher::default();
    post(&mut m, 1, Source::Any, TagMatch::exact(5));
    post(&mut m, 2, Source::Rank(3), TagMatch::exact(5));
    assert_eq!(arrive(&mut m, Msg(3, 5, 0)), Some(1));
    assert_eq!(arrive(&mut m, Msg(3, 5, 1)), Some(2));
    assert_eq!(m.posted_len(), 0);
}

#[test]
fn exact_receive_posted_before_a_wildcard_wins() {
    let mut m = Matcher::default();
    post(&mut m, 1, Source::Rank(3), TagMatch::exact(5));
    post(&mut m, 2, Source::Any, TagMatch::any());
    assert_eq!(arrive(&mut m, Msg(3, 5, 0)), Some(1));
    assert_eq!(arrive(&mut m, Msg(3, 5, 1)), Some(2));
}

#[test]
fn a_wildcard_that_does_not_accept_the_message_is_skipped() {
    let mut m = Matcher::default();
    post(&mut m, 1, Source::Rank(4), TagMatch::any());
    post(&mut m, 2, Source::Any, TagMatch::exact(6));
    post(&mut m, 3, Source::Rank(3), TagMatch::exact(5));
    assert_eq!(arrive(&mut m, Msg(3, 5, 0)), Some(3));
    assert_eq!(m.posted_len(), 2);
}

#[test]
fn partial_masks_match_on_the_masked_bits_only() {
    let mut m = Matcher::default();
    let high = TagMatch { tag: 0x120, mask: !0xff };
    post(&mut m, 1, Source::Rank(2), high);
    assert_eq!(arrive(&mut m, Msg(2, 0x200, 0)), None, "different masked bits");
    assert_eq!(arrive(&mut m, Msg(1, 0x1ff, 1)), None, "other source");
    assert_eq!(arrive(&mut m, Msg(2, 0x1ff, 2)), Some(1));
    // The unexpected side: bits 8-11 decide; the rest of the tag is free.
    assert_eq!(post(&mut m, 3, Source::Any, TagMatch { tag: 0, mask: 0xf00 }), None);
    assert_eq!(post(&mut m, 4, Source::Any, TagMatch { tag: 0x1aa, mask: 0xf00 }), Some(Msg(1, 0x1ff, 1)));
    assert_eq!(
        post(&mut m, 5, Source::Rank(2), TagMatch { tag: 0x2bb, mask: 0xf00 }),
        Some(Msg(2, 0x200, 0))
    );
}

#[test]
fn a_wildcard_receive_takes_the_earliest_arrival_across_keys() {
    let mut m = Matcher::default();
    for (i, (source, tag)) in [(1, 7), (2, 3), (1, 3), (2, 7)].into_iter().enumerate() {
        arrive(&mut m, Msg(source, tag, i as u64));
    }
    assert_eq!(post(&mut m, 10, Source::Any, TagMatch::exact(3)), Some(Msg(2, 3, 1)));
    assert_eq!(post(&mut m, 11, Source::Rank(1), TagMatch::any()), Some(Msg(1, 7, 0)));
    assert_eq!(post(&mut m, 12, Source::Any, TagMatch::any()), Some(Msg(1, 3, 2)));
    assert_eq!(post(&mut m, 13, Source::Rank(2), TagMatch::exact(7)), Some(Msg(2, 7, 3)));
    assert_eq!(m.unexpected_len(), 0);
}

#[test]
fn many_keys_each_keep_their_own_fifo() {
    let mut m = Matcher::default();
    let keys = |round: u64| (0..1024u64).map(move |k| (k as Rank % 16, k / 16, round * 1024 + k));
    for round in 0..3 {
        for (source, tag, id) in keys(round) {
            assert_eq!(arrive(&mut m, Msg(source, tag, id)), None);
        }
    }
    for round in 0..3 {
        for (source, tag, id) in keys(round).collect::<Vec<_>>().into_iter().rev() {
            let got = post(&mut m, id, Source::Rank(source), TagMatch::exact(tag));
            assert_eq!(got, Some(Msg(source, tag, id)));
        }
    }
    assert_eq!(m.unexpected_len(), 0);
    assert!(m.unexpected.key_count() <= EMPTY_KEYS_KEPT, "emptied keys do not pile up");
}

#[test]
fn dead_sources_lose_their_receives_and_arrivals_in_order() {
    let mut m = Matcher::default();
    post(&mut m, 1, Source::Rank(4), TagMatch::exact(1));
    post(&mut m, 2, Source::Rank(4), TagMatch::any());
    post(&mut m, 3, Source::Any, TagMatch::exact(9));
    post(&mut m, 4, Source::Rank(4), TagMatch::exact(2));
    let dead: Vec<u64> = m.drain_posted_from(4).iter().map(|p| p.op.0).collect();
    assert_eq!(dead, [1, 2, 4]);
    assert_eq!(m.posted_len(), 1);
    arrive(&mut m, Msg(5, 1, 0));
    arrive(&mut m, Msg(5, 2, 1));
    arrive(&mut m, Msg(6, 1, 2));
    assert_eq!(m.drop_unexpected_from(5), 2);
    assert_eq!(m.unexpected_len(), 1);
}

#[test]
fn a_cancelled_receive_leaves_the_next_one_to_match_on_both_sides() {
    for indexed in [false, true] {
        let mut m = Matcher::default();
        // Enough receives of other keys first that the posted side is on the index.
        let fill = if indexed { SCAN_LIMIT as u64 + 2 } else { 0 };
        for k in 0..fill {
            post(&mut m, 100 + k, Source::Rank(1), TagMatch::exact(100 + k));
        }
        if indexed {
            assert_eq!(arrive(&mut m, Msg(1, 100 + fill - 1, 0)), Some(100 + fill - 1));
            assert!(m.posted.is_indexed());
        }
        post(&mut m, 1, Source::Rank(3), TagMatch::exact(5));
        post(&mut m, 2, Source::Rank(3), TagMatch::exact(5));
        post(&mut m, 3, Source::Any, TagMatch::exact(5));
        post(&mut m, 4, Source::Rank(3), TagMatch::exact(5));
        assert_eq!(m.remove_posted(OpId(2)).map(|p| p.op), Some(OpId(2)), "the middle of a key's queue");
        assert!(m.remove_posted(OpId(2)).is_none(), "gone once");
        assert!(m.remove_posted(OpId(77)).is_none(), "never posted");
        assert_eq!(arrive(&mut m, Msg(3, 5, 1)), Some(1));
        assert_eq!(m.remove_posted(OpId(4)).map(|p| p.op), Some(OpId(4)), "the tail of a key's queue");
        assert_eq!(arrive(&mut m, Msg(3, 5, 2)), Some(3));
        assert_eq!(arrive(&mut m, Msg(3, 5, 3)), None, "kept as unexpected");
        assert_eq!(post(&mut m, 5, Source::Rank(3), TagMatch::exact(5)), Some(Msg(3, 5, 3)));
        assert_eq!(post(&mut m, 6, Source::Rank(3), TagMatch::exact(5)), None, "after a re-post");
        assert_eq!(m.remove_posted(OpId(6)).map(|p| p.op), Some(OpId(6)), "the head of a key's queue");
        assert_eq!(m.posted_len(), fill.saturating_sub(1) as usize);
    }
}

#[test]
fn a_long_scan_moves_a_side_to_the_index_until_it_empties() {
    let mut m = Matcher::default();
    let n = SCAN_LIMIT as u64 + 2;
    for k in 0..n {
        post(&mut m, k, Source::Rank(1), TagMatch::exact(k));
    }
    assert!(!m.posted.is_indexed(), "a few receives stay one scanned list");
    assert_eq!(arrive(&mut m, Msg(1, n - 1, 0)), Some(n - 1));
    assert!(m.posted.is_indexed(), "a scan past the limit moves the side");
    for k in 0..n - 1 {
        assert_eq!(arrive(&mut m, Msg(1, k, k)), Some(k));
    }
    assert!(!m.posted.is_indexed(), "an emptied side scans again");

    for k in 0..=n {
        arrive(&mut m, Msg(2, k, k));
    }
    assert_eq!(post(&mut m, 100, Source::Any, TagMatch::exact(n)), Some(Msg(2, n, n)));
    assert!(!m.unexpected.is_indexed(), "a wildcard's scan does not move the side");
    assert_eq!(post(&mut m, 101, Source::Rank(2), TagMatch::exact(n - 1)), Some(Msg(2, n - 1, n - 1)));
    assert!(m.unexpected.is_indexed(), "a long scan for one key does");
    for k in 0..n - 1 {
        assert_eq!(post(&mut m, 102 + k, Source::Any, TagMatch::any()), Some(Msg(2, k, k)));
    }
    assert!(!m.unexpected.is_indexed(), "an emptied side scans again");
}
