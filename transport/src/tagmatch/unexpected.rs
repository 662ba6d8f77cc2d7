//! The unexpected side of the matcher: arrivals no receive has claimed yet. While scans stay
//! short the side is one list in arrival order, scanned from the front as the matcher always did
//! (the entries are the arrivals themselves). Once a receive for one key has to scan past
//! `SCAN_LIMIT` arrivals, the side moves to the index until it empties. A wildcard receive never
//! moves it: it walks the arrivals in order either way.

use std::collections::VecDeque;

use super::indexed::Indexed;
use super::key::Seq;
use super::{exact_key, Arrival, SCAN_LIMIT};
use crate::api::{Rank, Source, TagMatch};

#[derive(Debug)]
pub(super) struct Unexpected<A> {
    /// Every arrival, in arrival order, while the side is scanned (the index is empty).
    scan: VecDeque<A>,
    /// Arrivals by key, while the side is indexed (`scan` is empty).
    indexed: Indexed<A>,
    next: Seq,
}

impl<A> Default for Unexpected<A> {
    fn default() -> Self {
        Unexpected { scan: VecDeque::new(), indexed: Indexed::default(), next: 0 }
    }
}

impl<A: Arrival> Unexpected<A> {
    /// Arrivals waiting for a receive.
    pub(super) fn len(&self) -> usize {
        self.scan.len() + self.indexed.len()
    }

    /// Keys in the index, the kept empty ones included.
    #[cfg(test)]
    pub(super) fn key_count(&self) -> usize {
        self.indexed.key_count()
    }

    /// Whether the side is on the index.
    #[cfg(test)]
    pub(super) fn is_indexed(&self) -> bool {
        self.indexed.len() > 0
    }

    /// The oldest arrival a receive for (`source`, `tag`) accepts, left in place.
    #[inline(always)]
    pub(super) fn peek(&self, source: Source, tag: TagMatch) -> Option<&A> {
        if !self.scan.is_empty() {
            return self.scan.iter().find(|a| source.matches(a.source()) && tag.matches(a.tag()));
        }
        if self.indexed.len() == 0 {
            return None;
        }
        self.peek_indexed(source, tag)
    }

    fn peek_indexed(&self, source: Source, tag: TagMatch) -> Option<&A> {
        let key = match exact_key(source, tag) {
            Some(key) => key,
            None => self.indexed.oldest_key(|(r, t)| source.matches(r) && tag.matches(t))?,
        };
        self.indexed.front(key)
    }

    /// Takes the oldest arrival a receive for (`source`, `tag`) accepts.
    /// Always inlined, as `push`: the scanned path is a few instructions, about what the call
    /// and its register saves cost (LLVM left it out of line in `TaggedState::post`).
    #[inline(always)]
    pub(super) fn take(&mut self, source: Source, tag: TagMatch) -> Option<A> {
        if self.scan.is_empty() {
            // Nothing waits, or the side is on the index (a non-empty scan list is the mode).
            return if self.indexed.len() > 0 { self.take_indexed(source, tag) } else { None };
        }
        let found = self.scan.iter().position(|a| source.matches(a.source()) && tag.matches(a.tag()));
        match found {
            // The front is where a ping-pong's match sits; `remove` would shift-copy.
            Some(0) => self.scan.pop_front(),
            Some(i) if i <= SCAN_LIMIT => self.scan.remove(i),
            None if self.scan.len() <= SCAN_LIMIT => None,
            _ => self.take_after_long_scan(found, exact_key(source, tag).is_some()),
        }
    }

    /// The end of a scan that passed `SCAN_LIMIT` arrivals: takes what it `found`, then moves
    /// the side to the index if the receive was for one key.
    #[cold]
    fn take_after_long_scan(&mut self, found: Option<usize>, exact: bool) -> Option<A> {
        let arrival = found.and_then(|i| self.scan.remove(i));
        if exact {
            while let Some(arrival) = self.scan.pop_front() {
                self.push_indexed(arrival);
            }
        }
        arrival
    }

    /// Keeps an arrival, after the older ones.
    #[inline(always)]
    pub(super) fn push(&mut self, arrival: A) {
        if self.indexed.len() > 0 {
            self.push_indexed(arrival);
        } else {
            self.scan.push_back(arrival);
        }
    }

    /// Drops the arrivals from `rank`; returns how many.
    pub(super) fn drop_from(&mut self, rank: Rank) -> usize {
        let before = self.scan.len();
        self.scan.retain(|a| a.source() != rank);
        before - self.scan.len() + self.indexed.remove_keys(|(r, _)| r == rank).len()
    }

    /// `take` on the index: the key's oldest arrival, or a wildcard's walk in arrival order.
    fn take_indexed(&mut self, source: Source, tag: TagMatch) -> Option<A> {
        let key = match exact_key(source, tag) {
            Some(key) => key,
            None => self.indexed.oldest_key(|(r, t)| source.matches(r) && tag.matches(t))?,
        };
        self.indexed.pop(key)
    }

    /// `push` on the index: stamped, on its key's queue.
    fn push_indexed(&mut self, arrival: A) {
        let seq = self.next;
        self.next += 1;
        self.indexed.push((arrival.source(), arrival.tag()), seq, arrival);
    }
}
