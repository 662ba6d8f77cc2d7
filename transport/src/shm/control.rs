//! Layout of a rank's control segment, the only shm structure peers write besides registered
//! regions:
//!
//! ```text
//! 0      header: magic, version, rank, size, pid, ring geometry, incarnation
//! 64     doorbell (futex word, own cache line)      128  waiters (own cache line)
//! 192    closed flag                                256  may-sleep flag
//! 4096   registration table: TABLE_ENTRIES x {key, addr, len, access}
//! ...    one inbound SPSC ring per source rank: head line, then slots of
//!        {seq word, SlotHeader, payload}
//! ```
//!
//! All shared words are atomics. A slot is published by storing its sequence number + 1 into
//! its own seq word, after the body: the consumer polls the slot it expects next, one cache
//! line, instead of a shared tail and then the slot.
//!
//! Seq words and the ring head carry the producer's incarnation in their top bits (an epoch),
//! so a respawned producer never aliases its dead predecessor: the consumer expects slots
//! stamped with the incarnation it accepted, and the producer writes only once the head it
//! reads carries its own incarnation (the consumer's "accept", stored at reconnect).

use std::any::Any;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{Result, TransportError};

pub const MAGIC: u64 = 0x5245_5645_5242_5348; // "REVERBSH"
pub const VERSION: u32 = 3;
const HEADER_LEN: usize = 4096;
const DOORBELL_OFF: usize = 64;
const WAITERS_OFF: usize = 128;
const CLOSED_OFF: usize = 192;
const MAY_SLEEP_OFF: usize = 256;
pub const TABLE_ENTRIES: usize = 4096;
const ENTRY_LEN: usize = 32;
const RING_HEAD_LEN: usize = 64;
/// The seq word in front of each slot's header.
const SLOT_SEQ_LEN: usize = 8;
pub use crate::msg::{EAGER_WIRE_LEN, SLOT_HEADER_LEN};

/// Marks a table entry that is being filled; its low 16 bits never name a valid index.
pub const KEY_RESERVED: u64 = u64::MAX;
pub const KEY_INDEX_MASK: u64 = 0xffff;

/// Low bits of seq and head words: the count; the bits above: the producer's incarnation.
const EPOCH_SHIFT: u32 = 40;
const COUNT_MASK: u64 = (1 << EPOCH_SHIFT) - 1;
const EPOCH_MASK: u64 = (1 << (64 - EPOCH_SHIFT)) - 1;
/// Largest incarnation a ring can carry; the all-ones epoch means "accepts no producer".
pub const MAX_INCARNATION: u32 = EPOCH_MASK as u32 - 1;
pub const NO_EPOCH: u32 = EPOCH_MASK as u32;

/// A seq or head word: `count` stamped with `epoch`.
fn stamp(epoch: u32, count: u64) -> u64 {
    ((epoch as u64 & EPOCH_MASK) << EPOCH_SHIFT) | (count & COUNT_MASK)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub size: u32,
    pub ring_slots: u32,
    pub slot_size: u32,
}

impl Layout {
    pub fn new(size: u32, ring_slots: usize, payload: usize) -> Layout {
        let slot = (SLOT_SEQ_LEN + SLOT_HEADER_LEN + payload).next_multiple_of(64);
        Layout { size, ring_slots: ring_slots as u32, slot_size: slot as u32 }
    }

    pub fn max_payload(&self) -> usize {
        self.slot_size as usize - SLOT_SEQ_LEN - SLOT_HEADER_LEN
    }

    fn table_offset(&self) -> usize {
        HEADER_LEN
    }

    fn ring_stride(&self) -> usize {
        RING_HEAD_LEN + self.ring_slots as usize * self.slot_size as usize
    }

    fn ring_offset(&self, source: u32) -> usize {
        HEADER_LEN + TABLE_ENTRIES * ENTRY_LEN + source as usize * self.ring_stride()
    }

    pub fn total_len(&self) -> usize {
        self.ring_offset(self.size)
    }
}

/// One registration: peers validate `key` (acquire) before trusting the other fields.
#[repr(C)]
pub struct TableEntry {
    pub key: AtomicU64,
    pub addr: AtomicU64,
    pub len: AtomicU64,
    pub access: AtomicU32,
    _pad: AtomicU32,
}

pub use crate::msg::{kind, SlotHeader};

/// A mapped control segment (ours or a peer's). Cheap to clone; keeps the mapping alive.
#[derive(Clone)]
pub struct ControlView {
    base: *mut u8,
    pub layout: Layout,
    /// `layout.ring_offset(0)` and the distance between rings, kept: `ring` is on every poll.
    rings: usize,
    stride: usize,
    _mapping: Arc<dyn Any + Send + Sync>,
}

// SAFETY: the view points into a shared mapping kept alive by `_mapping`; every access to
// shared words is atomic and slot bodies are only touched under the ring protocol.
unsafe impl Send for ControlView {}
// SAFETY: as above.
unsafe impl Sync for ControlView {}

impl ControlView {
    /// # Safety
    /// `base` must point to at least `layout.total_len()` mapped bytes, page aligned, that stay
    /// mapped while `mapping` lives.
    pub unsafe fn new(base: *mut u8, layout: Layout, mapping: Arc<dyn Any + Send + Sync>) -> Self {
        ControlView {
            base,
            layout,
            rings: layout.ring_offset(0),
            stride: layout.ring_stride(),
            _mapping: mapping,
        }
    }

    fn u32_at(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off + 4 <= self.layout.total_len() && off.is_multiple_of(4));
        // SAFETY: in bounds and 4-aligned (page-aligned base, aligned offsets); shared words are
        // only ever accessed atomically.
        unsafe { &*(self.base.add(off) as *const AtomicU32) }
    }

    fn u64_at(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off + 8 <= self.layout.total_len() && off.is_multiple_of(8));
        // SAFETY: as in `u32_at`, 8-aligned.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    /// Writes the header of a fresh segment (before any peer can see it).
    pub fn init_header(&self, rank: u32, pid: u32, incarnation: u32) {
        self.u32_at(32).store(incarnation, Ordering::Relaxed);
        self.u64_at(0).store(MAGIC, Ordering::Relaxed);
        self.u32_at(8).store(VERSION, Ordering::Relaxed);
        self.u32_at(12).store(rank, Ordering::Relaxed);
        self.u32_at(16).store(self.layout.size, Ordering::Relaxed);
        self.u32_at(20).store(pid, Ordering::Relaxed);
        self.u32_at(24).store(self.layout.ring_slots, Ordering::Relaxed);
        self.u32_at(28).store(self.layout.slot_size, Ordering::Release);
    }

    /// Checks a peer's header against what the bootstrap told us.
    pub fn validate_header(&self, rank: u32, pid: u32, incarnation: u32) -> Result<()> {
        let bad = |detail: String| Err(TransportError::Malformed { what: "peer control segment", detail });
        if self.u64_at(0).load(Ordering::Acquire) != MAGIC {
            return bad(format!("rank {rank}: bad magic"));
        }
        if self.u32_at(8).load(Ordering::Relaxed) != VERSION {
            return bad(format!("rank {rank}: version {}", self.u32_at(8).load(Ordering::Relaxed)));
        }
        let seen = (
            self.u32_at(12).load(Ordering::Relaxed),
            self.u32_at(16).load(Ordering::Relaxed),
            self.u32_at(20).load(Ordering::Relaxed),
            self.u32_at(24).load(Ordering::Relaxed),
            self.u32_at(28).load(Ordering::Relaxed),
            self.u32_at(32).load(Ordering::Relaxed),
        );
        let want = (rank, self.layout.size, pid, self.layout.ring_slots, self.layout.slot_size, incarnation);
        if seen != want {
            return bad(format!("rank {rank}: header {seen:?}, expected {want:?}"));
        }
        Ok(())
    }

    pub fn doorbell(&self) -> &AtomicU32 {
        self.u32_at(DOORBELL_OFF)
    }

    pub fn waiters(&self) -> &AtomicU32 {
        self.u32_at(WAITERS_OFF)
    }

    /// Set on orderly close, so peers stop addressing this rank.
    pub fn closed(&self) -> &AtomicU32 {
        self.u32_at(CLOSED_OFF)
    }

    /// Set when this rank may sleep on its doorbell; producers skip the wakeup handshake
    /// (a full fence per message) for ranks that only busy-poll.
    pub fn may_sleep(&self) -> &AtomicU32 {
        self.u32_at(MAY_SLEEP_OFF)
    }

    pub fn entry(&self, index: usize) -> Option<&TableEntry> {
        if index >= TABLE_ENTRIES {
            return None;
        }
        let off = self.layout.table_offset() + index * ENTRY_LEN;
        // SAFETY: index < TABLE_ENTRIES keeps the entry inside the table; 32-byte entries at a
        // page-aligned base are 8-aligned; all fields are atomics.
        Some(unsafe { &*(self.base.add(off) as *const TableEntry) })
    }

    /// Claims a free table entry, returning its index.
    pub fn claim_entry(&self) -> Option<usize> {
        (0..TABLE_ENTRIES).find(|&i| {
            self.entry(i).is_some_and(|e| {
                e.key.compare_exchange(0, KEY_RESERVED, Ordering::AcqRel, Ordering::Relaxed).is_ok()
            })
        })
    }

    pub fn ring(&self, source: u32) -> Ring<'_> {
        let off = self.rings + source.min(self.layout.size - 1) as usize * self.stride;
        Ring { view: self, off }
    }
}

/// A single-producer single-consumer ring: producer = the source rank, consumer = the owner.
pub struct Ring<'a> {
    view: &'a ControlView,
    off: usize,
}

impl Ring<'_> {
    fn head(&self) -> &AtomicU64 {
        self.view.u64_at(self.off)
    }

    /// Consumer: lets the producer of incarnation `epoch` write, from slot 0. Slots stamped
    /// with any other incarnation are never read again.
    pub fn accept(&self, epoch: u32) {
        self.head().store(stamp(epoch, 0), Ordering::Release);
    }

    /// Consumer: releases every slot before `head` to the producer of incarnation `epoch`.
    pub fn release(&self, epoch: u32, head: u64) {
        self.head().store(stamp(epoch, head), Ordering::Release);
    }

    /// Producer of incarnation `epoch`: the consumer's head, or None while the consumer has
    /// not accepted this incarnation.
    pub fn head_for(&self, epoch: u32) -> Option<u64> {
        let word = self.head().load(Ordering::Acquire);
        (word >> EPOCH_SHIFT == epoch as u64 & EPOCH_MASK).then_some(word & COUNT_MASK)
    }

    fn slot_ptr(&self, seq: u64) -> *mut u8 {
        let layout = &self.view.layout;
        // Ring sizes are powers of two (checked by the config, equal across the job): a mask,
        // not a division, on every poll.
        debug_assert!(layout.ring_slots.is_power_of_two());
        let idx = (seq & (layout.ring_slots as u64 - 1)) as usize;
        // SAFETY: idx < ring_slots keeps the slot inside this ring, inside the mapping.
        unsafe { self.view.base.add(self.off + RING_HEAD_LEN + idx * layout.slot_size as usize) }
    }

    fn slot_seq(&self, seq: u64) -> &AtomicU64 {
        // SAFETY: the seq word is the first 8 bytes of a 64-byte-aligned slot inside the
        // mapping, only ever accessed atomically.
        unsafe { &*(self.slot_ptr(seq) as *const AtomicU64) }
    }

    /// Consumer: whether slot `seq` has been published by incarnation `epoch` (and not yet
    /// reused).
    pub fn published(&self, epoch: u32, seq: u64) -> bool {
        self.slot_seq(seq).load(Ordering::Acquire) == stamp(epoch, seq + 1)
    }

    /// Producer: writes slot `seq` (which the caller knows is free) and publishes it. Eager
    /// data gets the compact 16-byte header (kind, len, tag), so a small message and its seq
    /// word share one cache line; control messages get the full header.
    pub fn publish(&self, epoch: u32, seq: u64, header: &SlotHeader, payload: &[u8]) {
        debug_assert!(payload.len() <= self.view.layout.max_payload());
        let body = self.slot_ptr(seq).wrapping_add(SLOT_SEQ_LEN);
        // SAFETY: the slot is free (seq - head < ring_slots, checked by the caller), so the
        // consumer does not read it until the release store below; header and payload fit the
        // slot (the payload is at most max_payload, computed with the full header).
        unsafe {
            // Through the codec, which folds to the same stores as field-by-field copies
            // (measured: docs/benchmarks.md, "The shm slot header through the codec").
            if header.kind == kind::EAGER {
                let compact = header.to_eager_slot();
                std::ptr::copy_nonoverlapping(compact.as_ptr(), body, compact.len());
            } else {
                let full = header.to_bytes();
                std::ptr::copy_nonoverlapping(full.as_ptr(), body, full.len());
            }
            let at = body.add(payload_offset(header.kind));
            std::ptr::copy_nonoverlapping(payload.as_ptr(), at, payload.len());
        }
        self.slot_seq(seq).store(stamp(epoch, seq + 1), Ordering::Release);
    }

    /// Producer: [`Ring::publish`] of eager data: the compact header (through the codec, which
    /// folds to two stores) and the payload by inline moves, so a small message is one cache
    /// line of plain stores and one release store, with no call into `memcpy`.
    #[inline(always)]
    pub fn publish_eager(&self, epoch: u32, seq: u64, tag: u64, payload: &[u8]) {
        debug_assert!(payload.len() <= self.view.layout.max_payload());
        let body = self.slot_ptr(seq).wrapping_add(SLOT_SEQ_LEN);
        let compact = SlotHeader::eager(tag, payload.len()).to_eager_slot();
        // SAFETY: as in `publish`: the slot is free and the header and payload fit it.
        unsafe {
            std::ptr::copy_nonoverlapping(compact.as_ptr(), body, EAGER_WIRE_LEN);
            copy_small(payload.as_ptr(), body.add(EAGER_WIRE_LEN), payload.len());
        }
        self.slot_seq(seq).store(stamp(epoch, seq + 1), Ordering::Release);
    }

    /// Consumer: the tag and claimed length of published slot `seq` if it holds eager data
    /// (only the 16-byte compact header is decoded); None for any other kind. The length is
    /// whatever the peer wrote and must still be validated.
    #[inline(always)]
    pub fn eager(&self, seq: u64) -> Option<(u64, usize)> {
        let body = self.slot_ptr(seq).wrapping_add(SLOT_SEQ_LEN);
        // SAFETY: the caller saw `published(seq)`, so the producer finished the slot; the
        // compact header lies inside it.
        let compact = unsafe { std::ptr::read_unaligned(body as *const [u8; EAGER_WIRE_LEN]) };
        SlotHeader::eager_from_slot(&compact).map(|h| (h.tag, h.len as usize))
    }

    /// Consumer: the payload of published eager slot `seq`.
    ///
    /// # Safety
    /// `seq` must be published and not yet released, and `len <= max_payload`.
    #[inline(always)]
    pub unsafe fn eager_payload(&self, seq: u64, len: usize) -> &[u8] {
        // SAFETY: upheld by the caller as documented.
        unsafe { std::slice::from_raw_parts(self.slot_ptr(seq).add(SLOT_SEQ_LEN + EAGER_WIRE_LEN), len) }
    }

    /// Consumer: copies the header of published slot `seq` (eager: rebuilt from the compact
    /// form, so `len` is whatever the peer wrote and must still be validated).
    pub fn read_header(&self, seq: u64) -> SlotHeader {
        let body = self.slot_ptr(seq).wrapping_add(SLOT_SEQ_LEN);
        // SAFETY: the caller saw `published(seq)`, so the producer finished this slot and will
        // not touch it until head moves past it; every read stays inside the slot.
        unsafe {
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

/// Where the payload starts after the header of a message of `kind`.
fn payload_offset(kind: u32) -> usize {
    if kind == kind::EAGER {
        EAGER_WIRE_LEN
    } else {
        SLOT_HEADER_LEN
    }
}

/// Copies `len` bytes with a few inline moves when `len` is at most 64 (overlapping first and
/// last words), else with `copy_nonoverlapping`: an 8-byte message must not pay a `memcpy`
/// call, which costs more than the copy.
///
/// # Safety
/// `src..src+len` must be readable and `dst..dst+len` writable, and the two must not overlap.
#[inline(always)]
pub unsafe fn copy_small(src: *const u8, dst: *mut u8, len: usize) {
    use std::ptr::{read_unaligned as rd, write_unaligned as wr};
    // SAFETY: every access below stays inside src..src+len and dst..dst+len (each pair of
    // words starts at 0 and ends at len, and len is at least the word size in its branch).
    unsafe {
        if len > 64 {
            std::ptr::copy_nonoverlapping(src, dst, len);
        } else if len > 32 {
            let (a, b) = (rd(src as *const [u64; 4]), rd(src.add(len - 32) as *const [u64; 4]));
            wr(dst as *mut [u64; 4], a);
            wr(dst.add(len - 32) as *mut [u64; 4], b);
        } else if len > 16 {
            let (a, b) = (rd(src as *const [u64; 2]), rd(src.add(len - 16) as *const [u64; 2]));
            wr(dst as *mut [u64; 2], a);
            wr(dst.add(len - 16) as *mut [u64; 2], b);
        } else if len >= 8 {
            let (a, b) = (rd(src as *const u64), rd(src.add(len - 8) as *const u64));
            wr(dst as *mut u64, a);
            wr(dst.add(len - 8) as *mut u64, b);
        } else if len >= 4 {
            let (a, b) = (rd(src as *const u32), rd(src.add(len - 4) as *const u32));
            wr(dst as *mut u32, a);
            wr(dst.add(len - 4) as *mut u32, b);
        } else {
            for i in 0..len {
                *dst.add(i) = *src.add(i);
            }
        }
    }
}

/// Bytes a peer put straight into one of our mapped regions: raw pointer copies.
///
/// # Safety
/// `dst..dst+len` and `src..src+len` must be valid mapped memory.
pub unsafe fn copy_bytes(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: upheld by the caller; different mappings may alias the same pages, so use the
    // overlap-tolerant copy.
    unsafe { std::ptr::copy(src, dst, len) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(layout: Layout) -> ControlView {
        let mut map = memmap2::MmapMut::map_anon(layout.total_len()).unwrap();
        let base = map.as_mut_ptr();
        // SAFETY: an anonymous mapping of total_len bytes, page aligned, kept by the Arc.
        unsafe { ControlView::new(base, layout, Arc::new(map)) }
    }

    #[test]
    fn a_new_incarnation_never_reads_or_overwrites_the_old_ones_slots() {
        let layout = Layout::new(2, 4, 64);
        let v = view(layout);
        let ring = v.ring(1);
        ring.accept(NO_EPOCH);
        assert_eq!(ring.head_for(0), None, "a closed ring accepts nobody");
        ring.accept(0);
        assert_eq!(ring.head_for(0), Some(0));
        assert_eq!(ring.head_for(1), None, "incarnation 1 must wait for its own accept");
        let h = SlotHeader::eager(7, 3);
        ring.publish(0, 0, &h, b"old");
        ring.publish(0, 1, &h, b"old");
        assert!(ring.published(0, 0) && ring.published(0, 1));
        // The consumer reconnects to incarnation 1: the old slots are not the new one's.
        ring.accept(1);
        assert!(!ring.published(1, 0) && !ring.published(1, 1));
        assert_eq!(ring.head_for(0), None, "the dead incarnation is shut out");
        assert_eq!(ring.head_for(1), Some(0));
        ring.publish(1, 0, &h, b"new");
        assert!(ring.published(1, 0) && !ring.published(0, 0));
        assert_eq!(ring.eager(0), Some((7, 3)));
        assert_eq!(ring.read_header(0), h);
        // SAFETY: slot 0 is published and not released; 3 <= max_payload.
        assert_eq!(unsafe { ring.eager_payload(0, 3) }, b"new");
        ring.release(1, 1);
        assert_eq!(ring.head_for(1), Some(1));
    }

    /// Every length a slot may carry, at every alignment of source and destination, lands
    /// whole and touches nothing around it.
    #[test]
    fn copy_small_copies_exactly_len_bytes() {
        for len in 0..=130usize {
            for (s_off, d_off) in [(0, 0), (1, 3), (7, 0), (0, 5)] {
                let src: Vec<u8> = (0..len + 8).map(|i| (i * 7 + len) as u8 | 1).collect();
                let mut dst = vec![0u8; len + 16];
                // SAFETY: src has s_off + len bytes, dst has d_off + len; separate Vecs.
                unsafe { copy_small(src.as_ptr().add(s_off), dst.as_mut_ptr().add(d_off), len) };
                assert_eq!(&dst[d_off..d_off + len], &src[s_off..s_off + len], "len {len}");
                assert!(dst[..d_off].iter().chain(&dst[d_off + len..]).all(|&b| b == 0), "len {len}");
            }
        }
    }

    /// The in-place eager write is the codec's compact form, byte for byte: producers and
    /// consumers built either way agree.
    #[test]
    fn publish_eager_writes_the_compact_header() {
        let v = view(Layout::new(2, 4, 64));
        let ring = v.ring(0);
        ring.accept(0);
        let payload: Vec<u8> = (1..=40).collect();
        ring.publish_eager(0, 2, 0x0102_0304_0506_0708, &payload);
        assert!(ring.published(0, 2));
        let want = SlotHeader::eager(0x0102_0304_0506_0708, 40);
        assert_eq!(ring.read_header(2), want);
        assert_eq!(ring.eager(2), Some((want.tag, 40)));
        // SAFETY: slot 2 is published and not released; 40 <= max_payload.
        assert_eq!(unsafe { ring.eager_payload(2, 40) }, &payload[..]);
        ring.publish(0, 3, &SlotHeader::fin(&want, 0), &[]);
        assert_eq!(ring.eager(3), None, "a control slot is not eager data");
    }

    #[test]
    fn header_carries_the_incarnation() {
        let v = view(Layout::new(2, 4, 64));
        v.init_header(1, 42, 3);
        assert!(v.validate_header(1, 42, 3).is_ok());
        let e = v.validate_header(1, 42, 2).unwrap_err();
        assert!(e.to_string().contains("expected"), "{e}");
    }
}
