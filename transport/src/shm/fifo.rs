//! A rank's receive FIFO: one bounded multi-producer single-consumer queue of fixed-size slots
//! in its control segment, shared by every source (Vyukov's bounded MPMC queue, specialised),
//! so eager receive memory does not grow with the number of peers.
//!
//! ```text
//! head line: the next position to claim (a hint producers move along, never authoritative)
//! slot:      seq word | incarnation u32 | 0 u32 | header (compact eager or full) | payload
//! ```
//!
//! Position `pos` lives in slot `pos % slots`; its seq word holds `pos`'s lap (`pos / slots`),
//! a state and, once claimed, the owner (source rank and the low bits of its incarnation):
//!
//! - FREE(lap): producers may claim it for that lap. A zero-filled segment is all FREE(0).
//! - CLAIMED(lap, owner): the owner claimed it by CAS from FREE and is writing the body. The
//!   claim names its owner in the same atomic step, so the consumer always knows whom an
//!   unpublished claim waits on.
//! - PUBLISHED(lap, owner): the owner published it with a release store (only the owner
//!   changes its claim while it lives, so publishing needs no CAS).
//!
//! The consumer reads the seq word of the position it expects next (one cache line per poll)
//! and, once done with a published slot, frees it for the next lap with one release store. A
//! claim whose owner is dead (a process killed between claim and publish) is freed by the
//! consumer, which then reads on: a dead process writes nothing more. A producer that finds
//! the slot at its position still holding the previous lap sees the FIFO full and backs off
//! (the caller's backlog); every loop here is bounded.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::control::{copy_small, payload_offset, SlotHeader, EAGER_WIRE_LEN, SLOT_HEADER_LEN};
use crate::msg::kind;

/// Seq word, then the sender's incarnation (and 4 reserved bytes), then the header.
pub const SLOT_PREFIX_LEN: usize = 16;
const INCARNATION_OFF: usize = 8;
/// The head hint's line, before the slots.
pub const HEAD_LEN: usize = 64;

const LAP_MASK: u64 = (1 << 30) - 1;
const STATE_SHIFT: u32 = 30;
const OWNER_SHIFT: u32 = 32;
const FREE: u64 = 0;
const CLAIMED: u64 = 1;
const PUBLISHED: u64 = 2;
/// Bits of an owner: the source rank above the low 8 bits of its incarnation.
const OWNER_INC_BITS: u32 = 8;
/// Ranks a FIFO can name as sources.
pub const MAX_SOURCES: u32 = 1 << (32 - OWNER_INC_BITS);
/// Claim attempts before a producer reports the FIFO busy (it then backlogs and retries later).
const CLAIM_TRIES: usize = 64;

/// A producer's identity as its claims carry it: source rank and incarnation (low bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner(u64);

impl Owner {
    pub fn new(source: u32, incarnation: u32) -> Owner {
        let inc = incarnation as u64 & ((1 << OWNER_INC_BITS) - 1);
        Owner(((source as u64) << OWNER_INC_BITS | inc) << OWNER_SHIFT)
    }

    pub fn source(self) -> u32 {
        (self.0 >> (OWNER_SHIFT + OWNER_INC_BITS)) as u32
    }

    /// Whether this owner is incarnation `incarnation` of its source (low bits compared: a
    /// claim outlives at most a few incarnations, see `Slot::Claimed`).
    pub fn is_incarnation(self, incarnation: u32) -> bool {
        self == Owner::new(self.source(), incarnation)
    }
}

/// What the consumer finds at the position it expects next. A word no protocol step writes
/// there (a faulty peer) reads as Empty: never read, waited on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// Nothing claimed there yet.
    Empty,
    /// Claimed by `Owner`, not yet published: the owner is writing (or died writing).
    Claimed(Owner),
    /// Published by the owner: the body may be read, then the slot released.
    Published(Owner),
}

/// The FIFO inside a mapped control segment; borrows the view that keeps it mapped.
#[derive(Clone, Copy)]
pub struct Fifo<'a> {
    /// The head line; slots follow it.
    base: *mut u8,
    mask: u64,
    shift: u32,
    slot_size: usize,
    _view: PhantomData<&'a ()>,
}

fn word(lap: u64, state: u64, owner: Owner) -> u64 {
    owner.0 | state << STATE_SHIFT | (lap & LAP_MASK)
}

impl<'a> Fifo<'a> {
    /// # Safety
    /// `base` must be 64-aligned and point to `HEAD_LEN + slots * slot_size` mapped bytes that
    /// stay mapped for `'a` and are only accessed through this protocol; `slots` a power of two,
    /// `slot_size` a multiple of 64 of at least `SLOT_PREFIX_LEN + SLOT_HEADER_LEN`.
    pub unsafe fn new(base: *mut u8, slots: u32, slot_size: usize) -> Fifo<'a> {
        debug_assert!(slots.is_power_of_two() && slot_size.is_multiple_of(64));
        Fifo { base, mask: slots as u64 - 1, shift: slots.trailing_zeros(), slot_size, _view: PhantomData }
    }

    fn head(&self) -> &AtomicU64 {
        // SAFETY: the head word is the first 8 bytes of the 64-aligned FIFO, only accessed
        // atomically.
        unsafe { &*(self.base as *const AtomicU64) }
    }

    #[inline(always)]
    fn slot_ptr(&self, pos: u64) -> *mut u8 {
        let idx = (pos & self.mask) as usize;
        // SAFETY: idx < slots keeps the slot inside the FIFO, inside the mapping.
        unsafe { self.base.add(HEAD_LEN + idx * self.slot_size) }
    }

    #[inline(always)]
    fn seq(&self, pos: u64) -> &AtomicU64 {
        // SAFETY: the seq word is the first 8 bytes of a 64-aligned slot, only accessed
        // atomically.
        unsafe { &*(self.slot_ptr(pos) as *const AtomicU64) }
    }

    #[inline(always)]
    fn lap(&self, pos: u64) -> u64 {
        (pos >> self.shift) & LAP_MASK
    }

    fn free(&self, pos: u64) -> u64 {
        word(self.lap(pos), FREE, Owner(0))
    }

    /// Producer: claims the next free position for `owner`; None when the FIFO is full (the
    /// slot at the head still holds the previous lap) or stayed contended for `CLAIM_TRIES`.
    #[inline(always)]
    pub fn claim(&self, owner: Owner) -> Option<u64> {
        let mut pos = self.head().load(Ordering::Relaxed);
        for _ in 0..CLAIM_TRIES {
            let lap = self.lap(pos);
            // Straight to the CAS, no load first: a load would fetch the line (last written by
            // the consumer) shared and the CAS upgrade it, two transfers instead of one.
            // Acquire: the consumer's reads of this slot's last lap happen before our writes.
            let seen = match self.seq(pos).compare_exchange(
                word(lap, FREE, Owner(0)),
                word(lap, CLAIMED, owner),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    // Move the hint on with a plain store (no locked op on the fast path): it
                    // may lag or step back a little when producers race; claims check the slot.
                    self.head().store(pos + 1, Ordering::Relaxed);
                    return Some(pos);
                }
                Err(seen) => seen,
            };
            let seen_lap = seen & LAP_MASK;
            if seen_lap == lap.wrapping_sub(1) & LAP_MASK {
                // The previous lap is still there: full.
                return None;
            }
            // Taken in this lap, or consumed already (a hint left behind): move the hint past
            // it (monotonic here, off the fast path) and try the next position.
            let ahead = self.head().fetch_max(pos + 1, Ordering::Relaxed);
            pos = if seen_lap == lap { pos + 1 } else { ahead.max(pos + 1) };
        }
        None
    }

    /// Producer: writes a message into claimed position `pos`. Eager data gets the compact
    /// 16-byte header (kind, len, tag), control messages the full one.
    pub fn write(&self, pos: u64, incarnation: u32, header: &SlotHeader, payload: &[u8]) {
        debug_assert!(payload.len() <= self.max_payload());
        let slot = self.slot_ptr(pos);
        self.incarnation_word(pos).store(incarnation, Ordering::Relaxed);
        // SAFETY: the slot is claimed by us, so no one else writes it and the consumer does not
        // read it before the publish; header and payload fit (payload <= max_payload, computed
        // with the full header).
        unsafe {
            let body = slot.add(SLOT_PREFIX_LEN);
            // Through the codec, which folds to the same stores as field-by-field copies.
            if header.kind == kind::EAGER {
                let compact = header.to_eager_slot();
                std::ptr::copy_nonoverlapping(compact.as_ptr(), body, compact.len());
            } else {
                let full = header.to_bytes();
                std::ptr::copy_nonoverlapping(full.as_ptr(), body, full.len());
            }
            std::ptr::copy_nonoverlapping(
                payload.as_ptr(),
                body.add(payload_offset(header.kind)),
                payload.len(),
            );
        }
    }

    /// Producer: [`Fifo::write`] of eager data with inline moves, so a small message is one
    /// cache line of plain stores, with no call into `memcpy`.
    #[inline(always)]
    pub fn write_eager(&self, pos: u64, incarnation: u32, tag: u64, payload: &[u8]) {
        debug_assert!(payload.len() <= self.max_payload());
        let slot = self.slot_ptr(pos);
        self.incarnation_word(pos).store(incarnation, Ordering::Relaxed);
        let compact = SlotHeader::eager(tag, payload.len()).to_eager_slot();
        // SAFETY: as in `write`.
        unsafe {
            let body = slot.add(SLOT_PREFIX_LEN);
            std::ptr::copy_nonoverlapping(compact.as_ptr(), body, EAGER_WIRE_LEN);
            copy_small(payload.as_ptr(), body.add(EAGER_WIRE_LEN), payload.len());
        }
    }

    /// Producer: publishes claimed position `pos`: one release store after the body.
    #[inline(always)]
    pub fn publish(&self, pos: u64, owner: Owner) {
        self.seq(pos).store(word(self.lap(pos), PUBLISHED, owner), Ordering::Release);
    }

    /// Consumer: what position `pos` holds.
    #[inline(always)]
    pub fn peek(&self, pos: u64) -> Slot {
        let seen = self.seq(pos).load(Ordering::Acquire);
        let owner = Owner(seen & !((1 << OWNER_SHIFT) - 1));
        if seen & LAP_MASK != self.lap(pos) {
            return Slot::Empty;
        }
        match (seen >> STATE_SHIFT) & 3 {
            PUBLISHED => Slot::Published(owner),
            CLAIMED => Slot::Claimed(owner),
            _ => Slot::Empty,
        }
    }

    /// Consumer: frees published position `pos` for the next lap.
    #[inline(always)]
    pub fn release(&self, pos: u64) {
        self.seq(pos).store(self.free(pos + self.mask + 1), Ordering::Release);
    }

    /// Consumer: frees `owner`'s unpublished claim of `pos` for the next lap, once the caller
    /// knows the owner is dead (it writes nothing more). False when the slot holds anything
    /// else by now.
    pub fn free_dead_claim(&self, pos: u64, owner: Owner) -> bool {
        let claimed = word(self.lap(pos), CLAIMED, owner);
        let next = self.free(pos + self.mask + 1);
        self.seq(pos).compare_exchange(claimed, next, Ordering::AcqRel, Ordering::Relaxed).is_ok()
    }

    fn incarnation_word(&self, pos: u64) -> &AtomicU32 {
        // SAFETY: bytes 8..12 of a 64-aligned slot; accessed atomically (the consumer reads it
        // after the publish, which orders the producer's store before it).
        unsafe { &*(self.slot_ptr(pos).add(INCARNATION_OFF) as *const AtomicU32) }
    }

    /// Consumer: the full incarnation the sender stamped on published position `pos`.
    #[inline(always)]
    pub fn incarnation(&self, pos: u64) -> u32 {
        self.incarnation_word(pos).load(Ordering::Relaxed)
    }

    pub fn max_payload(&self) -> usize {
        self.slot_size - SLOT_PREFIX_LEN - SLOT_HEADER_LEN
    }

    /// Consumer: the tag and claimed length of published position `pos` if it holds eager
    /// data (only the compact header is decoded); None for any other kind. The length is
    /// whatever the peer wrote and must still be validated.
    #[inline(always)]
    pub fn eager(&self, pos: u64) -> Option<(u64, usize)> {
        // SAFETY: the caller saw `pos` published, so the producer finished the slot; the
        // compact header lies inside it.
        let compact = unsafe {
            std::ptr::read_unaligned(self.slot_ptr(pos).add(SLOT_PREFIX_LEN) as *const [u8; EAGER_WIRE_LEN])
        };
        SlotHeader::eager_from_slot(&compact).map(|h| (h.tag, h.len as usize))
    }

    /// Consumer: the payload of published eager position `pos`.
    ///
    /// # Safety
    /// `pos` must be published and not yet released, and `len <= max_payload`.
    #[inline(always)]
    pub unsafe fn eager_payload(&self, pos: u64, len: usize) -> &[u8] {
        // SAFETY: upheld by the caller as documented.
        unsafe { std::slice::from_raw_parts(self.slot_ptr(pos).add(SLOT_PREFIX_LEN + EAGER_WIRE_LEN), len) }
    }

    /// Consumer: the header of published position `pos` (eager: rebuilt from the compact form,
    /// so `len` is whatever the peer wrote and must still be validated).
    pub fn read_header(&self, pos: u64) -> SlotHeader {
        // SAFETY: the caller saw `pos` published, so the producer finished this slot and does
        // not touch it until it is released; every read stays inside the slot.
        unsafe {
            let body = self.slot_ptr(pos).add(SLOT_PREFIX_LEN);
            let compact = std::ptr::read_unaligned(body as *const [u8; EAGER_WIRE_LEN]);
            match SlotHeader::eager_from_slot(&compact) {
                Some(eager) => eager,
                None => {
                    SlotHeader::from_array(&std::ptr::read_unaligned(body as *const [u8; SLOT_HEADER_LEN]))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// An anonymous mapping holding a FIFO of `slots` slots with `payload` bytes of room each.
    struct Mem {
        map: memmap2::MmapMut,
        slots: u32,
        slot_size: usize,
    }

    impl Mem {
        fn new(slots: u32, payload: usize) -> Mem {
            let slot_size = (SLOT_PREFIX_LEN + SLOT_HEADER_LEN + payload).next_multiple_of(64);
            let map = memmap2::MmapMut::map_anon(HEAD_LEN + slots as usize * slot_size).unwrap();
            Mem { map, slots, slot_size }
        }

        fn fifo(&self) -> Fifo<'_> {
            // SAFETY: the mapping is page aligned, holds the whole FIFO and outlives the borrow;
            // it is only accessed through the FIFO protocol.
            unsafe { Fifo::new(self.map.as_ptr() as *mut u8, self.slots, self.slot_size) }
        }
    }

    fn send(f: &Fifo<'_>, owner: Owner, inc: u32, tag: u64, payload: &[u8]) -> Option<u64> {
        let pos = f.claim(owner)?;
        f.write_eager(pos, inc, tag, payload);
        f.publish(pos, owner);
        Some(pos)
    }

    /// Reads the next message, if published: (source, incarnation, tag, payload).
    fn recv(f: &Fifo<'_>, tail: &mut u64) -> Option<(u32, u32, u64, Vec<u8>)> {
        let Slot::Published(owner) = f.peek(*tail) else { return None };
        let (tag, len) = f.eager(*tail).unwrap();
        // SAFETY: published and not released; len was written by the test itself.
        let data = unsafe { f.eager_payload(*tail, len) }.to_vec();
        let got = (owner.source(), f.incarnation(*tail), tag, data);
        f.release(*tail);
        *tail += 1;
        Some(got)
    }

    #[test]
    fn owners_round_trip() {
        for (src, inc) in [(0, 0), (1, 3), (MAX_SOURCES - 1, 255), (77, 256 + 5)] {
            let o = Owner::new(src, inc);
            assert_eq!(o.source(), src);
            assert!(o.is_incarnation(inc) && !o.is_incarnation(inc + 1));
        }
    }

    /// Messages of several sources come out in claim order, with their source, incarnation and
    /// bytes; a full FIFO refuses claims until the consumer frees a slot, lap after lap.
    #[test]
    fn fills_refuses_and_wraps_in_order() {
        let mem = Mem::new(4, 64);
        let f = mem.fifo();
        let (a, b) = (Owner::new(1, 0), Owner::new(2, 7));
        let mut tail = 0;
        assert_eq!(f.peek(0), Slot::Empty, "a zero-filled FIFO is empty");
        for lap in 0..5u64 {
            for i in 0..4u64 {
                let (o, inc) = if i % 2 == 0 { (a, 0) } else { (b, 7) };
                let payload: Vec<u8> = (0..(i * 9 + lap) as u8).collect();
                assert_eq!(send(&f, o, inc, lap * 4 + i, &payload), Some(lap * 4 + i));
            }
            assert_eq!(f.claim(a), None, "full");
            for i in 0..4u64 {
                let (src, inc, tag, data) = recv(&f, &mut tail).unwrap();
                assert_eq!(
                    (src, inc, tag),
                    (if i % 2 == 0 { (1, 0) } else { (2, 7) }).into_tuple(lap * 4 + i)
                );
                assert_eq!(data, (0..(i * 9 + lap) as u8).collect::<Vec<u8>>());
            }
            assert_eq!(f.peek(tail), Slot::Empty);
        }
    }

    trait IntoTuple {
        fn into_tuple(self, tag: u64) -> (u32, u32, u64);
    }
    impl IntoTuple for (u32, u32) {
        fn into_tuple(self, tag: u64) -> (u32, u32, u64) {
            (self.0, self.1, tag)
        }
    }

    /// Control headers and payloads up to the slot's room survive the full-header path.
    #[test]
    fn control_messages_carry_the_full_header() {
        let mem = Mem::new(2, 128);
        let f = mem.fifo();
        let o = Owner::new(3, 1);
        let h = SlotHeader { kind: kind::IMM, imm: 9, len: 5, cookie: 11, ..Default::default() };
        let pos = f.claim(o).unwrap();
        f.write(pos, 1, &h, &[]);
        f.publish(pos, o);
        assert_eq!(f.eager(pos), None);
        assert_eq!(f.read_header(pos), h);
        let e = SlotHeader::eager(5, f.max_payload());
        let pos = f.claim(o).unwrap();
        f.write(pos, 1, &e, &vec![0xAB; f.max_payload()]);
        f.publish(pos, o);
        assert_eq!(f.read_header(pos), e);
        // SAFETY: published, not released, len = max_payload.
        assert!(unsafe { f.eager_payload(pos, f.max_payload()) }.iter().all(|&b| b == 0xAB));
    }

    /// A claim not yet published holds the consumer at that position while its owner lives
    /// (later claims are read in order once it publishes); a dead owner's claim is freed and
    /// the consumer reads on, and the slot serves the next lap.
    #[test]
    fn an_unpublished_claim_waits_while_its_owner_lives_and_is_freed_once_it_died() {
        let mem = Mem::new(4, 64);
        let f = mem.fifo();
        let (slow, other, dead) = (Owner::new(1, 0), Owner::new(2, 0), Owner::new(3, 0));
        let mut tail = 0;
        // A live owner's claim: the consumer waits; nothing behind it is read first.
        let pos = f.claim(slow).unwrap();
        f.write_eager(pos, 0, 1, b"slow");
        assert_eq!(send(&f, other, 0, 2, b"x"), Some(1));
        assert_eq!(f.peek(tail), Slot::Claimed(slow));
        assert!(recv(&f, &mut tail).is_none());
        f.publish(pos, slow);
        assert_eq!(recv(&f, &mut tail).map(|m| m.2), Some(1));
        assert_eq!(recv(&f, &mut tail).map(|m| m.2), Some(2));
        // A claim left by a process that died before publishing: freed, then read past.
        let pos = f.claim(dead).unwrap();
        f.write_eager(pos, 0, 99, b"half");
        for i in 0..3 {
            assert!(send(&f, other, 0, 10 + i, b"y").is_some(), "message {i}");
        }
        assert_eq!(f.claim(other), None, "full: the dead claim still holds its slot");
        assert_eq!(f.peek(tail), Slot::Claimed(dead));
        assert!(!f.free_dead_claim(tail, other), "only the claim's own owner is freed");
        assert!(f.free_dead_claim(tail, dead));
        tail += 1;
        for i in 0..3 {
            assert_eq!(recv(&f, &mut tail).map(|m| m.2), Some(10 + i));
        }
        // The freed slot serves the next lap like any other.
        for i in 0..4 {
            assert!(send(&f, other, 0, 20 + i, b"z").is_some(), "message {i}");
        }
        for i in 0..4 {
            assert_eq!(recv(&f, &mut tail).map(|m| m.2), Some(20 + i));
        }
        // A published claim is no longer freed as dead.
        let pos = f.claim(dead).unwrap();
        f.publish(pos, dead);
        assert!(!f.free_dead_claim(pos, dead));
    }

    /// A producer that died between its claim and moving the head hint leaves the hint
    /// behind: later producers move it along and the FIFO keeps going.
    #[test]
    fn a_head_hint_left_behind_is_moved_along() {
        let mem = Mem::new(4, 64);
        let f = mem.fifo();
        let o = Owner::new(1, 0);
        let mut tail = 0;
        for round in 0..20u64 {
            let pos = send(&f, o, 0, round, b"m").unwrap();
            assert_eq!(pos, round);
            assert!(recv(&f, &mut tail).is_some());
            // Rewind the hint as if the claimer of `pos` never moved it.
            f.head().store(pos, Ordering::Relaxed);
        }
    }

    /// Many producer threads into one consumer: every message arrives once, in per-source order.
    #[test]
    fn many_producers_one_consumer() {
        const PRODUCERS: u32 = 6;
        const EACH: u64 = 5_000;
        let mem = Arc::new(Mem::new(16, 64));
        let threads: Vec<_> = (1..=PRODUCERS)
            .map(|src| {
                let mem = Arc::clone(&mem);
                std::thread::spawn(move || {
                    let f = mem.fifo();
                    let o = Owner::new(src, src);
                    let mut seq = 0;
                    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
                    while seq < EACH {
                        assert!(std::time::Instant::now() < deadline, "producer {src} starved");
                        if send(&f, o, src, seq, &seq.to_le_bytes()).is_some() {
                            seq += 1;
                        } else {
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let f = mem.fifo();
        let mut next = vec![0u64; PRODUCERS as usize + 1];
        let mut tail = 0;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while next.iter().sum::<u64>() < EACH * PRODUCERS as u64 {
            assert!(std::time::Instant::now() < deadline, "consumer stuck at {next:?}");
            match recv(&f, &mut tail) {
                Some((src, inc, tag, data)) => {
                    assert_eq!(inc, src);
                    assert_eq!(tag, next[src as usize], "source {src} out of order");
                    assert_eq!(data, tag.to_le_bytes());
                    next[src as usize] += 1;
                }
                None => std::hint::spin_loop(),
            }
        }
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(f.peek(tail), Slot::Empty);
    }
}
