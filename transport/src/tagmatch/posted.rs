//! The posted side of the matcher: receives no message has matched yet. While scans stay short
//! the side is one list in posting order, scanned from the front as the matcher always did (the
//! entries are the receives themselves: no stamps, no key copies). Once a message's scan has to
//! pass `SCAN_LIMIT` receives, the side moves to the index until it empties: exact receives on
//! per-key queues, wildcards on one list, both stamped with their posting sequence.

use std::collections::VecDeque;

use super::indexed::Indexed;
use super::key::Seq;
use super::{exact_key, PostedRecv, SCAN_LIMIT};
use crate::api::{OpId, Rank, Source, Tag};

#[derive(Debug, Default)]
pub(super) struct Posted {
    /// Every receive, in posting order, while the side is scanned.
    scan: VecDeque<PostedRecv>,
    /// Indexed: receives for one source and a full tag.
    exact: Indexed<PostedRecv>,
    /// Indexed: the other receives, in posting order.
    wild: VecDeque<(Seq, PostedRecv)>,
    /// Whether the side is indexed (`scan` empty) rather than scanned (`exact`, `wild` empty).
    indexed: bool,
    next: Seq,
}

impl Posted {
    /// Receives waiting for a message.
    pub(super) fn len(&self) -> usize {
        self.scan.len() + self.exact.len() + self.wild.len()
    }

    /// Whether the side is on the index.
    #[cfg(test)]
    pub(super) fn is_indexed(&self) -> bool {
        self.indexed
    }

    /// Takes the oldest receive that accepts a message from `source` with `tag`.
    /// Always inlined, as `push`: the scanned path is a few instructions, about what the call
    /// and its register saves cost (LLVM left it out of line in `TaggedState::post`).
    #[inline(always)]
    pub(super) fn take(&mut self, source: Rank, tag: Tag) -> Option<PostedRecv> {
        if self.scan.is_empty() {
            // Nothing posted, or the side is on the index (a non-empty scan list is the mode).
            return if self.indexed { self.take_indexed(source, tag) } else { None };
        }
        let found = self.scan.iter().position(|p| p.source.matches(source) && p.tag.matches(tag));
        match found {
            // The front is where a ping-pong's match sits; `remove` would shift-copy.
            Some(0) => self.scan.pop_front(),
            Some(i) if i <= SCAN_LIMIT => self.scan.remove(i),
            None if self.scan.len() <= SCAN_LIMIT => None,
            _ => self.take_after_long_scan(found),
        }
    }

    /// The end of a scan that passed `SCAN_LIMIT` receives: takes what it `found`, then moves
    /// the side to the index.
    #[cold]
    fn take_after_long_scan(&mut self, found: Option<usize>) -> Option<PostedRecv> {
        let recv = found.and_then(|i| self.scan.remove(i));
        self.indexed = true;
        while let Some(recv) = self.scan.pop_front() {
            self.push_indexed(recv);
        }
        recv
    }

    /// Keeps a receive, after the older ones.
    #[inline(always)]
    pub(super) fn push(&mut self, recv: PostedRecv) {
        if !self.indexed {
            self.scan.push_back(recv);
        } else {
            self.push_indexed(recv);
        }
    }

    /// Removes the receives that can only be satisfied by `rank`, in posting order.
    pub(super) fn drain_from(&mut self, rank: Rank) -> Vec<PostedRecv> {
        let only_rank = |p: &PostedRecv| p.source == Source::Rank(rank);
        if !self.indexed {
            let (dead, keep): (Vec<_>, Vec<_>) =
                std::mem::take(&mut self.scan).into_iter().partition(only_rank);
            self.scan = keep.into();
            return dead;
        }
        let mut dead = self.exact.remove_keys(|(r, _)| r == rank);
        let wild = std::mem::take(&mut self.wild);
        for (seq, p) in wild {
            if only_rank(&p) {
                dead.push((seq, p));
            } else {
                self.wild.push_back((seq, p));
            }
        }
        self.leave_index_if_empty();
        dead.sort_unstable_by_key(|(seq, _)| *seq);
        dead.into_iter().map(|(_, p)| p).collect()
    }

    /// Takes the receive whose post returned `op`, wherever it waits (a cancel).
    pub(super) fn remove(&mut self, op: OpId) -> Option<PostedRecv> {
        if !self.indexed {
            let i = self.scan.iter().position(|p| p.op == op)?;
            return self.scan.remove(i);
        }
        let recv = match self.wild.iter().position(|(_, p)| p.op == op) {
            Some(i) => self.wild.remove(i).map(|(_, p)| p),
            None => self.exact.remove_first(|p| p.op == op),
        };
        self.leave_index_if_empty();
        recv
    }

    /// How many receives `f` accepts.
    pub(super) fn count(&self, f: impl Fn(&PostedRecv) -> bool) -> usize {
        let exact = self.exact.iter().filter(|(_, p)| f(p)).count();
        self.scan.iter().filter(|p| f(p)).count() + exact + self.wild.iter().filter(|(_, p)| f(p)).count()
    }

    /// Every receive, in posting order.
    pub(super) fn in_order(&self) -> Vec<&PostedRecv> {
        if !self.indexed {
            return self.scan.iter().collect();
        }
        let mut all: Vec<(Seq, &PostedRecv)> =
            self.exact.iter().chain(self.wild.iter().map(|(seq, p)| (*seq, p))).collect();
        all.sort_unstable_by_key(|(seq, _)| *seq);
        all.into_iter().map(|(_, p)| p).collect()
    }

    /// `take`, but only if `pred` accepts the receive it would take (else nothing moves).
    pub(super) fn take_if(
        &mut self,
        source: Rank,
        tag: Tag,
        pred: impl FnOnce(&PostedRecv) -> bool,
    ) -> Option<PostedRecv> {
        let accepts = |p: &PostedRecv| p.source.matches(source) && p.tag.matches(tag);
        if !self.indexed {
            let i = self.scan.iter().position(accepts)?;
            return match i {
                _ if !pred(&self.scan[i]) => None,
                // The front is where an advertised receive sits; `remove` would shift-copy.
                0 => self.scan.pop_front(),
                _ => self.scan.remove(i),
            };
        }
        let key = (source, tag);
        let exact = self.exact.front_seq(key);
        let wild = self
            .wild
            .iter()
            .take_while(|(seq, _)| exact.is_none_or(|e| *seq < e))
            .position(|(_, p)| accepts(p));
        let chosen = match wild {
            Some(i) => self.wild.get(i).map(|(_, p)| p),
            None => self.exact.front(key),
        };
        if !chosen.is_some_and(pred) {
            return None;
        }
        let recv = match wild {
            Some(i) => self.wild.remove(i).map(|(_, p)| p),
            None => self.exact.pop(key),
        };
        self.leave_index_if_empty();
        recv
    }

    /// `take` on the index: the oldest exact receive for the key, unless a wildcard posted
    /// before it accepts the message.
    fn take_indexed(&mut self, source: Rank, tag: Tag) -> Option<PostedRecv> {
        let key = (source, tag);
        let recv = if self.wild.is_empty() {
            self.exact.pop(key)
        } else {
            let exact = self.exact.front_seq(key);
            let wild = self
                .wild
                .iter()
                .take_while(|(seq, _)| exact.is_none_or(|e| *seq < e))
                .position(|(_, p)| p.source.matches(source) && p.tag.matches(tag));
            match wild {
                Some(i) => self.wild.remove(i).map(|(_, p)| p),
                None => self.exact.pop(key),
            }
        };
        self.leave_index_if_empty();
        recv
    }

    /// `push` on the index: stamped, on its key's queue or the wildcard list.
    fn push_indexed(&mut self, recv: PostedRecv) {
        let seq = self.next;
        self.next += 1;
        match exact_key(recv.source, recv.tag) {
            Some(key) => self.exact.push(key, seq, recv),
            None => self.wild.push_back((seq, recv)),
        }
    }

    /// An emptied index goes back to the scanned list.
    fn leave_index_if_empty(&mut self) {
        if self.exact.len() == 0 && self.wild.is_empty() {
            self.indexed = false;
        }
    }
}
