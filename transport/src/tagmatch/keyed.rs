//! FIFO queues keyed by (source, tag), each entry stamped with a sequence number. A side starts
//! with one list scanned from the front: nothing beats it while the entry sought sits near the
//! front, as in a ping-pong or a window of receives for one key. Once a scan for a key has to
//! pass `SCAN_LIMIT` entries the side moves to the indexed slab (`indexed.rs`), where a key's
//! oldest entry is one hash away, and stays there until it empties.

use std::collections::VecDeque;
use std::hash::Hasher;

use super::indexed::Indexed;
use crate::api::{Rank, Tag};

/// What an entry is indexed by: its sender and its full tag.
pub(super) type Key = (Rank, Tag);

/// Position in posting (or arrival) order; smaller is earlier.
pub(super) type Seq = u64;

/// The longest scan for a key before the side switches to the index: past the crossover of a
/// short scan and a hash lookup plus slab upkeep (`benches/benches/tagmatch.rs`). Small under
/// test, so the random tests cross it often.
const SCAN_LIMIT: usize = if cfg!(test) { 2 } else { 16 };

/// Per-key FIFO queues: the scanned list `few`, else `indexed` (never both in use).
#[derive(Debug)]
pub(super) struct KeyedQueues<T> {
    few: VecDeque<(Seq, Key, T)>,
    indexed: Indexed<T>,
}

impl<T> Default for KeyedQueues<T> {
    fn default() -> Self {
        KeyedQueues { few: VecDeque::new(), indexed: Indexed::default() }
    }
}

impl<T> KeyedQueues<T> {
    /// Entries in all queues.
    pub(super) fn len(&self) -> usize {
        self.few.len() + self.indexed.len()
    }

    /// Keys in the index, the kept empty ones included.
    #[cfg(test)]
    pub(super) fn key_count(&self) -> usize {
        self.indexed.key_count()
    }

    /// Appends `item` (stamped `seq`, which must exceed every earlier stamp) to `key`'s queue.
    pub(super) fn push(&mut self, key: Key, seq: Seq, item: T) {
        if self.indexed.len() > 0 {
            self.indexed.push(key, seq, item);
        } else {
            self.few.push_back((seq, key, item));
        }
    }

    /// The stamp of `key`'s oldest entry.
    pub(super) fn front_seq(&self, key: Key) -> Option<Seq> {
        if self.indexed.len() > 0 {
            return self.indexed.front_seq(key);
        }
        self.few.iter().find(|(_, k, _)| *k == key).map(|(seq, _, _)| *seq)
    }

    /// Takes `key`'s oldest entry; a long scan moves the side to the index.
    pub(super) fn pop(&mut self, key: Key) -> Option<T> {
        if self.indexed.len() > 0 {
            return self.indexed.pop(key);
        }
        let found = self.few.iter().position(|(_, k, _)| *k == key);
        let item = found.and_then(|i| self.few.remove(i)).map(|(_, _, item)| item);
        if found.unwrap_or(self.few.len()) > SCAN_LIMIT {
            for (seq, key, item) in self.few.drain(..) {
                self.indexed.push(key, seq, item);
            }
        }
        item
    }

    /// Takes the oldest entry whose key `accept` takes (a wildcard: never moves the side).
    pub(super) fn take_oldest(&mut self, accept: impl Fn(Key) -> bool) -> Option<T> {
        if self.indexed.len() > 0 {
            let key = self.indexed.oldest_key(accept)?;
            return self.indexed.pop(key);
        }
        let i = self.few.iter().position(|(_, k, _)| accept(*k))?;
        self.few.remove(i).map(|(_, _, item)| item)
    }

    /// Removes every key `remove` takes; returns their entries with stamps, in push order.
    pub(super) fn remove_keys(&mut self, remove: impl Fn(Key) -> bool) -> Vec<(Seq, T)> {
        let mut out = self.indexed.remove_keys(&remove);
        let few = std::mem::take(&mut self.few);
        for (seq, key, item) in few {
            if remove(key) {
                out.push((seq, item));
            } else {
                self.few.push_back((seq, key, item));
            }
        }
        out
    }
}

/// A multiply-rotate hash (rustc's FxHash, as `rustc-hash` 2 finishes it) for the two integers
/// of a key: a few cycles instead of SipHash's tens. It is not DoS-resistant, which is fine for
/// the tags of ranks of one job.
#[derive(Default)]
pub(super) struct KeyHasher(u64);

const SEED: u64 = 0xf135_7aea_2e62_a9c5;

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = self.0.wrapping_add(i).wrapping_mul(SEED);
    }
    fn finish(&self) -> u64 {
        // The product's good bits are the high ones; hashbrown indexes with the low ones.
        self.0.rotate_left(26)
    }
}
