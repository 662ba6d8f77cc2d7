//! Layout of a rank's control segment, the only shm structure peers write besides registered
//! regions:
//!
//! ```text
//! 0      header: magic, version, rank, size, pid, FIFO geometry, incarnation
//! 64     doorbell (futex word, own cache line)      128  waiters (own cache line)
//! 192    closed flag                                256  may-sleep flag
//! 320    the owner's own address of this segment (cross-memory attach probes, `cma`)
//! 4096   registration table: TABLE_ENTRIES x {key, addr, len, access}
//! ...    accept words: one u32 per source rank (the incarnation it accepts, + 1; 0: none)
//! ...    lent words: one u32 per source rank (the incarnation whose memory the owner can read
//!        by cross-memory attach, + 1; 0: none)
//! ...    lent slots: LENT_SLOTS x 64 B, where the owner and the receiver of one of its lent
//!        sends share its copy (`share`)
//! ...    the receive FIFO: head line, then fifo_slots slots (see `fifo`)
//! ```
//!
//! All shared words are atomics. Every source publishes into the one receive FIFO, so the
//! segment's size grows by 8 bytes per peer only (its accept and lent words).
//!
//! Each message carries its sender's incarnation, so a respawned producer never aliases its
//! dead predecessor: the consumer takes in only messages stamped with the incarnation it
//! accepted for that source, and a producer writes only once the accept word carries its own
//! incarnation (the consumer stores it at attach / reconnect).

use std::any::Any;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use super::fifo::{Fifo, HEAD_LEN, SLOT_PREFIX_LEN};
use crate::error::{Result, TransportError};

pub const MAGIC: u64 = 0x5245_5645_5242_5348; // "REVERBSH"
pub const VERSION: u32 = 6;
const HEADER_LEN: usize = 4096;
const DOORBELL_OFF: usize = 64;
const WAITERS_OFF: usize = 128;
const CLOSED_OFF: usize = 192;
const MAY_SLEEP_OFF: usize = 256;
const BASE_ADDR_OFF: usize = 320;
/// The header bytes a cross-memory probe compares: magic through incarnation.
pub const PROBE_LEN: usize = 40;
pub const TABLE_ENTRIES: usize = 4096;
const ENTRY_LEN: usize = 32;
pub use crate::msg::{EAGER_WIRE_LEN, SLOT_HEADER_LEN};

/// Marks a table entry that is being filled; its index bits never name a valid index.
pub const KEY_RESERVED: u64 = u64::MAX;

/// The table index a region key names. Keys share one layout across providers, so a
/// descriptor works whichever provider carries the peer (the `auto` provider registers a
/// region with shm and a network provider under one key): incarnation (bits 48..63), this
/// table's index (32..47), then 32 bits of the network provider's key (a verbs rkey) or random.
#[inline(always)]
pub fn key_index(key: u64) -> usize {
    ((key >> 32) & 0xffff) as usize
}

/// A key for table entry `index` of `incarnation`, with `low` in its low 32 bits.
pub fn make_key(incarnation: u32, index: usize, low: u32) -> u64 {
    (u64::from(incarnation as u16) << 48) | ((index as u64 & 0xffff) << 32) | u64::from(low)
}

/// Largest incarnation the accept words can carry (they hold incarnation + 1, 0 = none).
pub const MAX_INCARNATION: u32 = u32::MAX - 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub size: u32,
    pub fifo_slots: u32,
    pub slot_size: u32,
}

impl Layout {
    pub fn new(size: u32, fifo_slots: usize, payload: usize) -> Layout {
        let slot = (SLOT_PREFIX_LEN + SLOT_HEADER_LEN + payload).next_multiple_of(64);
        Layout { size, fifo_slots: fifo_slots as u32, slot_size: slot as u32 }
    }

    pub fn max_payload(&self) -> usize {
        self.slot_size as usize - SLOT_PREFIX_LEN - SLOT_HEADER_LEN
    }

    fn table_offset(&self) -> usize {
        HEADER_LEN
    }

    fn accept_offset(&self) -> usize {
        HEADER_LEN + TABLE_ENTRIES * ENTRY_LEN
    }

    fn lent_offset(&self) -> usize {
        self.accept_offset() + self.size as usize * 4
    }

    fn lent_slots_offset(&self) -> usize {
        (self.lent_offset() + self.size as usize * 4).next_multiple_of(64)
    }

    fn fifo_offset(&self) -> usize {
        self.lent_slots_offset() + LENT_SLOTS * LENT_SLOT_LEN
    }

    pub fn total_len(&self) -> usize {
        self.fifo_offset() + HEAD_LEN + self.fifo_slots as usize * self.slot_size as usize
    }
}

/// Lent-send slots per segment: lent sends beyond them in flight are copied by the receiver
/// alone.
pub const LENT_SLOTS: usize = 64;
const LENT_SLOT_LEN: usize = 64;

/// Where the two ends of one lent send share its copy in chunks (`share`). The sender fills
/// `cookie` and clears the rest before announcing; the receiver then sets `dst` and `total`
/// and opens `claim`; each side takes chunks from `claim` and counts them in `done`.
#[repr(C)]
pub struct LentSlot {
    /// The send's operation id (its RTS cookie).
    pub cookie: AtomicU64,
    /// The receive buffer's address in the receiver.
    pub dst: AtomicU64,
    /// State (high 32 bits: `share::ANNOUNCED`, `OPEN`, `CLOSED`) and next chunk (low 32).
    pub claim: AtomicU64,
    /// Chunks in the message.
    pub total: AtomicU32,
    /// Chunks copied, by either side.
    pub done: AtomicU32,
    /// Nonzero once a chunk the sender took failed.
    pub failed: AtomicU32,
    _pad: [AtomicU32; 7],
}

const _: () = assert!(std::mem::size_of::<LentSlot>() == LENT_SLOT_LEN);

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
    /// The FIFO's geometry, computed once: it is on every send and poll.
    fifo: Fifo<'static>,
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
        // SAFETY: the FIFO lies inside the mapping (total_len counts it), 64-aligned; the copy
        // handed out by `fifo` borrows the view, which keeps the mapping alive. The geometry is
        // the layout's, validated by the config (power-of-two slot count, 64-multiple slots).
        let fifo = unsafe {
            Fifo::new(base.add(layout.fifo_offset()), layout.fifo_slots, layout.slot_size as usize)
        };
        ControlView { base, layout, fifo, _mapping: mapping }
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
        self.u32_at(24).store(self.layout.fifo_slots, Ordering::Relaxed);
        self.u64_at(BASE_ADDR_OFF).store(self.base as u64, Ordering::Relaxed);
        self.u32_at(28).store(self.layout.slot_size, Ordering::Release);
    }

    /// Where the segment's owner maps it (its header says so), for cross-memory probes.
    pub fn owner_address(&self) -> u64 {
        self.u64_at(BASE_ADDR_OFF).load(Ordering::Acquire)
    }

    /// The header bytes a cross-memory probe expects to read through the owner's mapping.
    pub fn probe_bytes(&self) -> [u8; PROBE_LEN] {
        let mut out = [0u8; PROBE_LEN];
        for (i, chunk) in out.chunks_exact_mut(8).enumerate() {
            chunk.copy_from_slice(&self.u64_at(i * 8).load(Ordering::Acquire).to_ne_bytes());
        }
        out
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
        let want = (rank, self.layout.size, pid, self.layout.fifo_slots, self.layout.slot_size, incarnation);
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

    /// The word saying which incarnation of `source` may write into the FIFO (+ 1; 0: none).
    fn accept_word(&self, source: u32) -> &AtomicU32 {
        let source = source.min(self.layout.size - 1) as usize;
        self.u32_at(self.layout.accept_offset() + source * 4)
    }

    /// Consumer: lets incarnation `incarnation` of `source` write (None: nobody). Messages
    /// stamped with any other incarnation are dropped unread.
    pub fn accept(&self, source: u32, incarnation: Option<u32>) {
        self.accept_word(source).store(incarnation.map_or(0, |i| i + 1), Ordering::Release);
    }

    /// Producer: whether the consumer accepts incarnation `incarnation` of `source`.
    pub fn accepts(&self, source: u32, incarnation: u32) -> bool {
        incarnation <= MAX_INCARNATION && self.accept_word(source).load(Ordering::Acquire) == incarnation + 1
    }

    fn lent_word(&self, source: u32) -> &AtomicU32 {
        let source = source.min(self.layout.size - 1) as usize;
        self.u32_at(self.layout.lent_offset() + source * 4)
    }

    /// Owner: whether it can read incarnation `incarnation` of `source` by cross-memory attach
    /// (None: it cannot, or does not know yet).
    pub fn set_reads_lent(&self, source: u32, incarnation: Option<u32>) {
        self.lent_word(source).store(incarnation.map_or(0, |i| i + 1), Ordering::Release);
    }

    /// Sender: whether the owner reads lent sends of incarnation `incarnation` of `source`.
    pub fn reads_lent(&self, source: u32, incarnation: u32) -> bool {
        incarnation <= MAX_INCARNATION && self.lent_word(source).load(Ordering::Acquire) == incarnation + 1
    }

    /// Lent slot `index`, if there is one.
    pub fn lent_slot(&self, index: usize) -> Option<&LentSlot> {
        if index >= LENT_SLOTS {
            return None;
        }
        let off = self.layout.lent_slots_offset() + index * LENT_SLOT_LEN;
        // SAFETY: index < LENT_SLOTS keeps the slot inside its table (total_len counts it);
        // 64-byte slots at a 64-aligned offset of a page-aligned base; all fields are atomics.
        Some(unsafe { &*(self.base.add(off) as *const LentSlot) })
    }

    /// The receive FIFO.
    #[inline(always)]
    pub fn fifo(&self) -> Fifo<'_> {
        self.fifo
    }
}

/// Where the payload starts after the header of a message of `kind`.
pub fn payload_offset(kind: u32) -> usize {
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
    fn accept_words_name_one_incarnation_per_source() {
        let v = view(Layout::new(3, 4, 64));
        assert!(!v.accepts(1, 0), "a fresh segment accepts nobody");
        v.accept(1, Some(0));
        assert!(v.accepts(1, 0) && !v.accepts(1, 1) && !v.accepts(2, 0));
        v.accept(1, Some(1));
        assert!(!v.accepts(1, 0), "the dead incarnation is shut out");
        assert!(v.accepts(1, 1));
        v.accept(1, None);
        assert!(!v.accepts(1, 1) && !v.accepts(1, u32::MAX));
    }

    /// The segment's size grows by 4 bytes per source, not by a ring per source.
    #[test]
    fn segment_size_does_not_grow_with_the_job() {
        let small = Layout::new(2, 256, 8192).total_len();
        let large = Layout::new(1024, 256, 8192).total_len();
        assert!(large - small <= 1024 * 8 + 64, "{small} -> {large}");
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

    #[test]
    fn header_carries_the_incarnation() {
        let v = view(Layout::new(2, 4, 64));
        v.init_header(1, 42, 3);
        assert!(v.validate_header(1, 42, 3).is_ok());
        let e = v.validate_header(1, 42, 2).unwrap_err();
        assert!(e.to_string().contains("expected"), "{e}");
    }
}
