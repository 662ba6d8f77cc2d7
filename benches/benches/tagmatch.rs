//! Tag matching alone: the transport's `Matcher` ("indexed": scanned lists, indexed once scans
//! pass 16 entries) against the linear scans it replaced ("linear", copied here), with 1, 64
//! and 1024 outstanding keys.
//!
//! One iteration is one message through both sides of the matcher:
//! - `expected/exact`: n receives (one source, full tag) are posted; a message arrives for one of
//!   them, chosen at random, and that receive is posted again (it misses the unexpected side).
//! - `unexpected/exact`: n messages wait; a receive for one of them is posted, and the message
//!   arrives again (it misses the posted side).
//! - `expected/any-source` and `unexpected/any-source`: the same with `Source::Any` receives,
//!   which both matchers scan (the indexed one scans its wildcard list, or one entry per key).
//!
//! Key k is (source k % 16, tag k). `cargo bench -p reverb-benches --bench tagmatch`; for
//! instruction counts of one case, see `iterations_only`.

use std::collections::VecDeque;
use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, BenchmarkId, Criterion};
use reverb_transport::tagmatch::{Arrival, Matcher, PostedRecv};
use reverb_transport::{OpId, Rank, RecvBuffer, Source, Tag, TagMatch};

const OUTSTANDING: [usize; 3] = [1, 64, 1024];
/// Pre-drawn keys, so the random draw costs nothing inside the timing.
const DRAWS: usize = 4096;

struct Msg(Rank, Tag);

impl Arrival for Msg {
    fn source(&self) -> Rank {
        self.0
    }
    fn tag(&self) -> Tag {
        self.1
    }
}

/// Both sides of a matcher, as `TaggedState` calls them (inlined into the loop for both
/// matchers, as into `TaggedState`'s paths).
trait TagMatcher: Default {
    fn take_posted(&mut self, source: Rank, tag: Tag) -> Option<PostedRecv>;
    fn take_unexpected(&mut self, source: Source, tag: TagMatch) -> Option<Msg>;
    fn push_posted(&mut self, recv: PostedRecv);
    fn push_unexpected(&mut self, msg: Msg);
}

impl TagMatcher for Matcher<Msg> {
    #[inline(always)]
    fn take_posted(&mut self, source: Rank, tag: Tag) -> Option<PostedRecv> {
        Matcher::take_posted(self, source, tag)
    }
    #[inline(always)]
    fn take_unexpected(&mut self, source: Source, tag: TagMatch) -> Option<Msg> {
        Matcher::take_unexpected(self, source, tag)
    }
    #[inline(always)]
    fn push_posted(&mut self, recv: PostedRecv) {
        Matcher::push_posted(self, recv)
    }
    #[inline(always)]
    fn push_unexpected(&mut self, msg: Msg) {
        Matcher::push_unexpected(self, msg)
    }
}

/// The matcher before the index: one list per side, scanned from the front.
#[derive(Default)]
struct Linear {
    posted: VecDeque<PostedRecv>,
    unexpected: VecDeque<Msg>,
}

impl TagMatcher for Linear {
    #[inline(always)]
    fn take_posted(&mut self, source: Rank, tag: Tag) -> Option<PostedRecv> {
        let i = self.posted.iter().position(|p| p.source.matches(source) && p.tag.matches(tag))?;
        self.posted.remove(i)
    }
    #[inline(always)]
    fn take_unexpected(&mut self, source: Source, tag: TagMatch) -> Option<Msg> {
        let i = self.unexpected.iter().position(|a| source.matches(a.0) && tag.matches(a.1))?;
        self.unexpected.remove(i)
    }
    #[inline(always)]
    fn push_posted(&mut self, recv: PostedRecv) {
        self.posted.push_back(recv);
    }
    #[inline(always)]
    fn push_unexpected(&mut self, msg: Msg) {
        self.unexpected.push_back(msg);
    }
}

fn key(k: usize) -> (Rank, Tag) {
    ((k % 16) as Rank, k as Tag)
}

fn source_of(k: usize, any: bool) -> Source {
    if any {
        Source::Any
    } else {
        Source::Rank(key(k).0)
    }
}

fn recv(k: usize, any: bool) -> PostedRecv {
    let buffer = RecvBuffer::Owned { capacity: 8 };
    PostedRecv { op: OpId(k as u64), source: source_of(k, any), tag: TagMatch::exact(key(k).1), buffer }
}

fn draws(n: usize) -> Vec<usize> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..DRAWS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % n as u64) as usize
        })
        .collect()
}

/// A message for a posted receive, then the receive again.
fn expected<M: TagMatcher>(any: bool) -> impl FnMut(&mut M, usize) {
    move |m, k| {
        let (source, tag) = key(k);
        let hit = m.take_posted(source, tag).expect("a posted receive");
        black_box(&hit);
        let again = recv(k, any);
        assert!(m.take_unexpected(again.source, again.tag).is_none());
        m.push_posted(again);
    }
}

/// A receive for a waiting message, then the message again.
fn unexpected<M: TagMatcher>(any: bool) -> impl FnMut(&mut M, usize) {
    move |m, k| {
        let (source, tag) = key(k);
        let hit = m.take_unexpected(source_of(k, any), TagMatch::exact(tag)).expect("a waiting message");
        black_box(&hit);
        assert!(m.take_posted(source, tag).is_none());
        m.push_unexpected(Msg(source, tag));
    }
}

/// A matcher holding `n` posted receives (`expected_side`) or `n` waiting messages, one per key.
fn filled<M: TagMatcher>(n: usize, any: bool, expected_side: bool) -> M {
    let mut m = M::default();
    for k in 0..n {
        if expected_side {
            m.push_posted(recv(k, any));
        } else {
            m.push_unexpected(Msg(key(k).0, key(k).1));
        }
    }
    m
}

/// One iteration per call: the next drawn key through both sides of `m`.
fn stepper<M: TagMatcher>(n: usize, any: bool, expected_side: bool) -> impl FnMut(&mut M) {
    let keys = draws(n);
    let mut i = 0;
    let (mut hit_posted, mut hit_waiting) = (expected::<M>(any), unexpected::<M>(any));
    move |m| {
        let k = keys[i % DRAWS];
        i += 1;
        if expected_side {
            hit_posted(m, k);
        } else {
            hit_waiting(m, k);
        }
    }
}

fn side_name(expected_side: bool) -> &'static str {
    if expected_side {
        "expected"
    } else {
        "unexpected"
    }
}

fn kind_name(any: bool) -> &'static str {
    if any {
        "any-source"
    } else {
        "exact"
    }
}

/// Times one iteration on a matcher that holds `n` posted receives or waiting messages.
fn run<M: TagMatcher>(c: &mut Criterion, name: &str, n: usize, any: bool, expected_side: bool) {
    let mut m = filled::<M>(n, any, expected_side);
    let mut step = stepper::<M>(n, any, expected_side);
    let mut group = c.benchmark_group(format!("tagmatch/{}/{}", side_name(expected_side), kind_name(any)));
    group.warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(2));
    group.bench_function(BenchmarkId::new(name, n), |b| b.iter(|| step(&mut m)));
    group.finish();
}

fn bench(c: &mut Criterion) {
    for expected_side in [true, false] {
        for any in [false, true] {
            for n in OUTSTANDING {
                run::<Linear>(c, "linear", n, any, expected_side);
                run::<Matcher<Msg>>(c, "indexed", n, any, expected_side);
            }
        }
    }
}

criterion_group!(benches, bench);

/// `iters` iterations of one case, untimed.
fn iterate<M: TagMatcher>(n: usize, any: bool, expected_side: bool, iters: u64) {
    let mut m = filled::<M>(n, any, expected_side);
    let mut step = stepper::<M>(n, any, expected_side);
    for _ in 0..iters {
        step(&mut m);
    }
    black_box(&mut m);
}

/// `TAGMATCH_ITERS=N TAGMATCH_CASE=expected/exact/indexed/64`: N iterations of one case (named
/// as criterion names it) and nothing else, for instruction counts (`valgrind --tool=callgrind`
/// at two N; the difference over the difference in N is the cost of one iteration).
fn iterations_only() -> bool {
    let Some(iters) = std::env::var("TAGMATCH_ITERS").ok().and_then(|v| v.parse::<u64>().ok()) else {
        return false;
    };
    let case = std::env::var("TAGMATCH_CASE").unwrap_or_else(|_| "expected/exact/indexed/1".into());
    let parsed = match case.split('/').collect::<Vec<_>>()[..] {
        [side, kind, name, n] => {
            n.parse::<usize>().ok().map(|n| (side == "expected", kind == "any-source", name, n))
        }
        _ => None,
    };
    match parsed {
        Some((expected_side, any, "linear", n)) => iterate::<Linear>(n, any, expected_side, iters),
        Some((expected_side, any, "indexed", n)) => iterate::<Matcher<Msg>>(n, any, expected_side, iters),
        _ => {
            eprintln!("TAGMATCH_CASE={case}: not side/kind/linear|indexed/outstanding");
            std::process::exit(2);
        }
    }
    true
}

fn main() {
    if !iterations_only() {
        benches();
        Criterion::default().configure_from_args().final_summary();
    }
}
