//! Registered buffers that large enveloped messages are framed in and sent from
//! (`Provider::send_region`).
//!
//! A plain `send` of a frame above the provider's rendezvous threshold costs two copies (the
//! envelope and payload into one buffer, then the provider's copy into its staging region),
//! and once more frames are in flight than the provider pools staging regions for, a fresh
//! registration per message (a new shm file and its page faults). Here the frame is written
//! once, into a registered region that stays with the endpoint and is reused once the
//! provider reported the send complete and the send log (`lease`, sender-based modes) no
//! longer keeps the payload there. The pool is bounded; past the bound the caller falls back
//! to the provider's copying `send`, so a send never waits for a buffer.
//!
//! `RecvPool` is the receive side: registered regions the endpoint posts its receives into,
//! and `FrameBytes`, a received frame read where it landed.

use std::sync::Arc;

use reverb_transport::{Access, OpId, Provider, Region};

use crate::error::Result;

/// Region sizes are rounded up to this, so frames whose piggyback varies reuse one buffer.
const GRANULE: usize = 64 << 10;

#[derive(Debug)]
struct Slot {
    /// Other holders (send-log entries) keep the region from reuse.
    region: Arc<Region>,
    /// The send reading this region, until its completion.
    busy: Option<OpId>,
}

impl Slot {
    fn is_free(&self) -> bool {
        self.busy.is_none() && Arc::strong_count(&self.region) == 1
    }
}

/// Bounded set of registered send buffers; see the module doc.
#[derive(Debug)]
pub(crate) struct FramePool {
    slots: Vec<Slot>,
    registered: usize,
    limit: usize,
}

impl FramePool {
    /// A pool registering at most `limit` bytes.
    pub(crate) fn new(limit: usize) -> Self {
        FramePool { slots: Vec::new(), registered: 0, limit }
    }

    /// Index of a free region of at least `len` bytes: the smallest free one that fits, else
    /// a new registration within the bound (free regions too small are given back to make
    /// room). `None` when in-flight sends hold the whole bound.
    pub(crate) fn acquire(&mut self, provider: &mut dyn Provider, len: usize) -> Result<Option<usize>> {
        let fit = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_free() && s.region.len() >= len)
            .min_by_key(|(_, s)| s.region.len())
            .map(|(i, _)| i);
        if fit.is_some() {
            return Ok(fit);
        }
        let size = len.div_ceil(GRANULE).max(1) * GRANULE;
        if size > self.limit {
            return Ok(None);
        }
        if self.registered + size > self.limit {
            let registered = &mut self.registered;
            self.slots.retain(|s| {
                let keep = !s.is_free();
                if !keep {
                    *registered -= s.region.len();
                }
                keep
            });
            if self.registered + size > self.limit {
                return Ok(None);
            }
        }
        let region = provider.alloc_region(size, Access::REMOTE_READ)?;
        self.registered += region.len();
        self.slots.push(Slot { region: Arc::new(region), busy: None });
        Ok(Some(self.slots.len() - 1))
    }

    pub(crate) fn region(&self, index: usize) -> Option<&Region> {
        self.slots.get(index).map(|s| &*s.region)
    }

    /// Region `index` for a holder outside the pool (a send-log entry): not reused until
    /// the holder drops it.
    pub(crate) fn lease(&self, index: usize) -> Option<Arc<Region>> {
        self.slots.get(index).map(|s| Arc::clone(&s.region))
    }

    /// The send `op` reads region `index` until its completion (`release`).
    pub(crate) fn mark_busy(&mut self, index: usize, op: OpId) {
        if let Some(s) = self.slots.get_mut(index) {
            s.busy = Some(op);
        }
    }

    /// Frees the region of send `op` (completed, failed or not), if one of ours.
    pub(crate) fn release(&mut self, op: OpId) {
        if let Some(s) = self.slots.iter_mut().find(|s| s.busy == Some(op)) {
            s.busy = None;
        }
    }
}

/// The send log keeps a payload in its send buffer (a lease) only above this size; smaller
/// ones it copies. A leased buffer is out of the pool until the log is trimmed (a checkpoint),
/// so a stream of leased 8 KiB halos registered a fresh 64 KiB region per message: a shm file,
/// its mapping at the receiver and its page faults on both sides, where the copy is ~1 µs.
pub(crate) const LEASE_MIN: usize = 64 << 10;

/// Frames up to this many bytes are copied out of a pooled receive region (cheap), so the
/// region is posted again at once; larger ones stay where they landed until delivered.
pub(crate) const COPY_OUT_MAX: usize = 64 << 10;
/// Receives stay in regions for this many frames after the last large one (above
/// `COPY_OUT_MAX`); then small-message traffic goes back to owned receives.
const LARGE_FRAME_MEMORY: u32 = 64;

/// A received frame's bytes: its own `Vec` (an owned receive, a replayed frame), or the
/// pooled receive region it landed in, kept from reuse while this lives.
#[derive(Debug, Clone)]
pub(crate) enum FrameBytes {
    Owned(Vec<u8>),
    Pooled { region: Arc<Region>, len: usize },
}

impl FrameBytes {
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            FrameBytes::Owned(bytes) => bytes,
            FrameBytes::Pooled { region, len } => {
                // SAFETY: a pooled region is written only by the receive posted into it, and
                // `RecvPool` posts it again only once no `FrameBytes` holds it (Arc count 1);
                // `len` is bounds-checked by `slice`.
                unsafe { region.slice(0, *len) }.unwrap_or_default()
            }
        }
    }

    /// The bytes from `offset` on, owned: an owned frame gives up its buffer (the head cut
    /// off in place), a pooled one is copied out.
    pub(crate) fn into_vec_from(self, offset: usize) -> Vec<u8> {
        match self {
            FrameBytes::Owned(mut bytes) => {
                bytes.drain(..offset.min(bytes.len()));
                bytes
            }
            pooled => pooled.as_slice().get(offset..).unwrap_or_default().to_vec(),
        }
    }
}

#[derive(Debug)]
struct RecvSlot {
    /// Held outside the pool by the frames delivered from it, until they drop.
    region: Arc<Region>,
    /// The receive posted into this region, until its completion.
    posted: Option<OpId>,
}

impl RecvSlot {
    fn is_free(&self) -> bool {
        self.posted.is_none() && Arc::strong_count(&self.region) == 1
    }
}

/// Bounded set of registered regions the endpoint posts its receives into, so a large
/// message's rendezvous read lands once, in memory that stays registered and mapped (no fresh
/// pages per message; on verbs no bounce through the provider's scratch buffer). Past the
/// bound (the application holds many large deliveries) the caller posts an owned receive.
#[derive(Debug)]
pub(crate) struct RecvPool {
    slots: Vec<RecvSlot>,
    registered: usize,
    limit: usize,
    /// Frames left before receives go back to owned buffers (see `note_frame`).
    large_recently: u32,
}

impl RecvPool {
    /// A pool registering at most `limit` bytes.
    pub(crate) fn new(limit: usize) -> Self {
        RecvPool { slots: Vec::new(), registered: 0, limit, large_recently: 0 }
    }

    /// A frame of `len` bytes arrived. Regions pay off for large frames only: a small one in
    /// a region costs its bookkeeping and a copy out (~30 ns per 8-byte message on shm), so
    /// receives go into regions only while large frames come in.
    #[inline]
    pub(crate) fn note_frame(&mut self, len: usize) {
        self.large_recently =
            if len > COPY_OUT_MAX { LARGE_FRAME_MEMORY } else { self.large_recently.saturating_sub(1) };
    }

    /// A free region of at least `capacity` bytes to post a receive into: `(index, region)`,
    /// registered now if none is free and the bound allows; `None` past the bound, or while
    /// no large frame came in recently (`note_frame`).
    /// The small-message case (no region) is inlined into the endpoint's receive path.
    #[inline]
    pub(crate) fn acquire(
        &mut self,
        provider: &mut dyn Provider,
        capacity: usize,
    ) -> Result<Option<(usize, Region)>> {
        if self.large_recently == 0 {
            return Ok(None);
        }
        self.acquire_region(provider, capacity)
    }

    fn acquire_region(
        &mut self,
        provider: &mut dyn Provider,
        capacity: usize,
    ) -> Result<Option<(usize, Region)>> {
        if let Some(i) = self.slots.iter().position(|s| s.is_free() && s.region.len() >= capacity) {
            return Ok(Some((i, Region::clone(&self.slots[i].region))));
        }
        if capacity > self.limit {
            return Ok(None);
        }
        if self.registered + capacity > self.limit {
            // Free regions too small for this capacity are given back to make room.
            let registered = &mut self.registered;
            self.slots.retain(|s| {
                let keep = !s.is_free();
                if !keep {
                    *registered -= s.region.len();
                }
                keep
            });
            if self.registered + capacity > self.limit {
                return Ok(None);
            }
        }
        let region = provider.alloc_region(capacity, Access::LOCAL)?;
        self.registered += region.len();
        let posted = Region::clone(&region);
        self.slots.push(RecvSlot { region: Arc::new(region), posted: None });
        Ok(Some((self.slots.len() - 1, posted)))
    }

    /// Receive `op` was posted into region `index`.
    pub(crate) fn mark_posted(&mut self, index: usize, op: OpId) {
        if let Some(s) = self.slots.get_mut(index) {
            s.posted = Some(op);
        }
    }

    /// Receive `op` completed (or failed): its region, if it was one of ours. The region is
    /// reused once the returned handle and its clones are dropped.
    #[inline]
    pub(crate) fn complete(&mut self, op: OpId) -> Option<Arc<Region>> {
        let slot = self.slots.iter_mut().find(|s| s.posted == Some(op))?;
        slot.posted = None;
        Some(Arc::clone(&slot.region))
    }
}
