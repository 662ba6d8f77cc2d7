//! FIFO queues keyed by (source, tag), each entry stamped with a sequence number, so the
//! matcher finds the exact key's oldest entry in O(1) and the oldest of several keys by
//! comparing queue fronts.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use crate::api::{Rank, Tag};

/// What an entry is indexed by: its sender and its full tag.
pub(super) type Key = (Rank, Tag);

/// Position in posting (or arrival) order; smaller is earlier.
pub(super) type Seq = u64;

type Queue<T> = VecDeque<(Seq, T)>;

/// Emptied queues kept for reuse, so a key that comes and goes allocates nothing.
const SPARE_QUEUES: usize = 64;

/// Per-key FIFO queues. A key is removed when its queue empties, so keys never pile up.
#[derive(Debug)]
pub(super) struct KeyedQueues<T> {
    queues: HashMap<Key, Queue<T>, BuildHasherDefault<KeyHasher>>,
    spare: Vec<Queue<T>>,
    len: usize,
}

impl<T> Default for KeyedQueues<T> {
    fn default() -> Self {
        KeyedQueues { queues: HashMap::default(), spare: Vec::new(), len: 0 }
    }
}

impl<T> KeyedQueues<T> {
    /// Entries in all queues.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Keys with a queue (each holds at least one entry).
    #[cfg(test)]
    pub(super) fn key_count(&self) -> usize {
        self.queues.len()
    }

    /// Appends `item` (stamped `seq`, which must exceed every earlier stamp) to `key`'s queue.
    pub(super) fn push(&mut self, key: Key, seq: Seq, item: T) {
        let spare = &mut self.spare;
        self.queues.entry(key).or_insert_with(|| spare.pop().unwrap_or_default()).push_back((seq, item));
        self.len += 1;
    }

    /// The stamp of `key`'s oldest entry.
    pub(super) fn front_seq(&self, key: Key) -> Option<Seq> {
        if self.len == 0 {
            return None; // skips the hash on the common idle path
        }
        self.queues.get(&key).and_then(|q| q.front()).map(|(seq, _)| *seq)
    }

    /// Takes `key`'s oldest entry, removing the key when that empties its queue (one hash).
    pub(super) fn pop(&mut self, key: Key) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let Entry::Occupied(mut entry) = self.queues.entry(key) else {
            return None;
        };
        let (_, item) = entry.get_mut().pop_front()?;
        if entry.get().is_empty() {
            let queue = entry.remove();
            self.keep_spare(queue);
        }
        self.len -= 1;
        Some(item)
    }

    /// The key whose oldest entry is the oldest of all keys `accept` takes (a scan of the
    /// keys, not of the entries: a queue's front is the oldest entry of its key).
    pub(super) fn oldest_key(&self, accept: impl Fn(Key) -> bool) -> Option<Key> {
        if self.len == 0 {
            return None;
        }
        self.queues
            .iter()
            .filter(|(key, _)| accept(**key))
            .filter_map(|(key, q)| q.front().map(|(seq, _)| (*seq, *key)))
            .min_by_key(|(seq, _)| *seq)
            .map(|(_, key)| key)
    }

    /// Removes every key `remove` takes; returns their entries with stamps, in no set order.
    pub(super) fn remove_keys(&mut self, remove: impl Fn(Key) -> bool) -> Vec<(Seq, T)> {
        let keys: Vec<Key> = self.queues.keys().copied().filter(|k| remove(*k)).collect();
        let mut out = Vec::new();
        for key in keys {
            if let Some(mut queue) = self.queues.remove(&key) {
                out.extend(queue.drain(..));
                self.keep_spare(queue);
            }
        }
        self.len -= out.len();
        out
    }

    fn keep_spare(&mut self, queue: Queue<T>) {
        if self.spare.len() < SPARE_QUEUES && queue.capacity() > 0 {
            self.spare.push(queue);
        }
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
