//! FIFO queues keyed by (source, tag) over one slab of entries, as UCX keeps its unexpected
//! tags: every entry is on its key's list (so the exact key's oldest entry is one hash away) and
//! on one list of all entries in push order (so the oldest entry any wildcard accepts is found
//! by walking from the oldest, stopping at the first it accepts).

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use super::key::{Key, KeyHasher, Seq};

/// No slot: the end of a list.
const NIL: usize = usize::MAX;

/// Keys whose lists emptied are kept (a key that comes and goes costs no map insert and
/// removal) while there are at most this many of them, or as many as live keys. Small under
/// test, so the random tests sweep often.
pub(super) const EMPTY_KEYS_KEPT: usize = if cfg!(test) { 4 } else { 64 };

#[derive(Debug)]
struct Slot<T> {
    /// None while the slot is on the free list.
    item: Option<T>,
    key: Key,
    seq: Seq,
    /// The next entry of the same key, or (free) the next free slot.
    next_in_key: usize,
    /// Neighbours in push order.
    older: usize,
    newer: usize,
}

/// The first and last entry of one key (both NIL while the key is kept empty).
#[derive(Debug, Clone, Copy)]
struct Ends {
    head: usize,
    tail: usize,
}

/// Per-key FIFO queues plus one push-order list, over a slab reused through a free list: no
/// allocation per entry once the slab and the map have grown to the peak.
#[derive(Debug)]
pub(super) struct Indexed<T> {
    slots: Vec<Slot<T>>,
    free: usize,
    oldest: usize,
    newest: usize,
    keys: HashMap<Key, Ends, BuildHasherDefault<KeyHasher>>,
    empty_keys: usize,
    len: usize,
}

impl<T> Default for Indexed<T> {
    fn default() -> Self {
        Indexed {
            slots: Vec::new(),
            free: NIL,
            oldest: NIL,
            newest: NIL,
            keys: HashMap::default(),
            empty_keys: 0,
            len: 0,
        }
    }
}

impl<T> Indexed<T> {
    /// Entries in all queues.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Keys in the map, the kept empty ones included.
    #[cfg(test)]
    pub(super) fn key_count(&self) -> usize {
        self.keys.len()
    }

    /// Appends `item` (stamped `seq`, which must exceed every earlier stamp) to `key`'s queue.
    pub(super) fn push(&mut self, key: Key, seq: Seq, item: T) {
        let slot = Slot { item: Some(item), key, seq, next_in_key: NIL, older: self.newest, newer: NIL };
        let i = self.alloc(slot);
        match self.newest {
            NIL => self.oldest = i,
            newest => self.slots[newest].newer = i,
        }
        self.newest = i;
        let ends = match self.keys.entry(key) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(v) => {
                self.empty_keys += 1; // counted as kept-empty until the line below fills it
                v.insert(Ends { head: NIL, tail: NIL })
            }
        };
        match ends.tail {
            NIL => {
                ends.head = i;
                self.empty_keys -= 1;
            }
            tail => self.slots[tail].next_in_key = i,
        }
        ends.tail = i;
        self.len += 1;
    }

    /// The stamp of `key`'s oldest entry.
    pub(super) fn front_seq(&self, key: Key) -> Option<Seq> {
        if self.len == 0 {
            return None; // skips the hash on the common idle path
        }
        let head = self.keys.get(&key)?.head;
        self.slots.get(head).map(|s| s.seq)
    }

    /// `key`'s oldest entry, left in place.
    pub(super) fn front(&self, key: Key) -> Option<&T> {
        if self.len == 0 {
            return None;
        }
        let head = self.keys.get(&key)?.head;
        self.slots.get(head)?.item.as_ref()
    }

    /// Every entry with its stamp, in push order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (Seq, &T)> {
        let mut i = self.oldest;
        std::iter::from_fn(move || {
            let slot = self.slots.get(i)?;
            i = slot.newer;
            Some((slot.seq, slot.item.as_ref()?))
        })
    }

    /// Takes `key`'s oldest entry.
    pub(super) fn pop(&mut self, key: Key) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let ends = self.keys.get_mut(&key)?;
        let i = ends.head;
        let next = self.slots.get(i)?.next_in_key;
        ends.head = next;
        if next == NIL {
            ends.tail = NIL;
            self.empty_keys += 1;
        }
        let item = self.release(i);
        self.sweep_empty_keys();
        item
    }

    /// The key of the oldest entry `accept` takes: a walk in push order, stopping at the first.
    pub(super) fn oldest_key(&self, accept: impl Fn(Key) -> bool) -> Option<Key> {
        let mut i = self.oldest;
        while let Some(slot) = self.slots.get(i) {
            if accept(slot.key) {
                return Some(slot.key);
            }
            i = slot.newer;
        }
        None
    }

    /// Removes every key `remove` takes; returns their entries with stamps, in push order.
    pub(super) fn remove_keys(&mut self, remove: impl Fn(Key) -> bool) -> Vec<(Seq, T)> {
        let mut out = Vec::new();
        let mut i = self.oldest;
        while let Some(slot) = self.slots.get(i) {
            let (next, seq) = (slot.newer, slot.seq);
            if remove(slot.key) {
                out.extend(self.release(i).map(|item| (seq, item)));
            }
            i = next;
        }
        self.keys.retain(|key, _| !remove(*key));
        self.empty_keys = self.keys.values().filter(|e| e.head == NIL).count();
        out
    }

    /// Takes the oldest entry `accept` takes, whatever its key: a walk in push order (a
    /// cancelled receive; rare, so the walk's cost does not matter).
    pub(super) fn remove_first(&mut self, accept: impl Fn(&T) -> bool) -> Option<T> {
        let mut i = self.oldest;
        while let Some(slot) = self.slots.get(i) {
            if slot.item.as_ref().is_some_and(&accept) {
                break;
            }
            i = slot.newer;
        }
        let key = self.slots.get(i)?.key;
        self.unlink_from_key(key, i);
        let item = self.release(i);
        self.sweep_empty_keys();
        item
    }

    /// Takes slot `i` off `key`'s list (singly linked: its predecessor is found from the head).
    fn unlink_from_key(&mut self, key: Key, i: usize) {
        let next = self.slots[i].next_in_key;
        let Some(ends) = self.keys.get_mut(&key) else { return };
        let mut prev = NIL;
        if ends.head == i {
            ends.head = next;
        } else {
            prev = ends.head;
            while let Some(slot) = self.slots.get(prev) {
                if slot.next_in_key == i {
                    break;
                }
                prev = slot.next_in_key;
            }
            if let Some(slot) = self.slots.get_mut(prev) {
                slot.next_in_key = next;
            }
        }
        if ends.tail == i {
            ends.tail = prev;
        }
        if ends.head == NIL {
            self.empty_keys += 1;
        }
    }

    /// Puts `slot` in a free slot, or a new one.
    fn alloc(&mut self, slot: Slot<T>) -> usize {
        match self.slots.get_mut(self.free) {
            Some(free) => {
                let i = self.free;
                self.free = free.next_in_key;
                *free = slot;
                i
            }
            None => {
                self.slots.push(slot);
                self.slots.len() - 1
            }
        }
    }

    /// Unlinks slot `i` from the push-order list (its key's list is the caller's) and frees it.
    fn release(&mut self, i: usize) -> Option<T> {
        let slot = self.slots.get_mut(i)?;
        let (older, newer) = (slot.older, slot.newer);
        let item = slot.item.take();
        slot.next_in_key = self.free;
        self.free = i;
        match older {
            NIL => self.oldest = newer,
            o => self.slots[o].newer = newer,
        }
        match newer {
            NIL => self.newest = older,
            n => self.slots[n].older = older,
        }
        self.len -= 1;
        item
    }

    /// Drops the kept empty keys once they outnumber both the bound and the live keys, so a
    /// sweep's cost is paid for by the pops that emptied them.
    fn sweep_empty_keys(&mut self) {
        let live = self.keys.len() - self.empty_keys;
        if self.empty_keys > EMPTY_KEYS_KEPT.max(live) {
            self.keys.retain(|_, e| e.head != NIL);
            self.empty_keys = 0;
        }
    }
}
