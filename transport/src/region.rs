//! Registered memory. A `Region` is a cheap, clonable handle to bytes that a provider has
//! registered; pending operations hold a clone so the memory outlives them.
//!
//! The bytes may be written by peers at any time (that is what RDMA is), so this module never
//! hands out plain references without an `unsafe` contract; reads and writes copy.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use crate::api::{Access, RemoteRegion};
use crate::error::{Result, TransportError};

struct RegionInner {
    ptr: *mut u8,
    len: usize,
    access: Access,
    remote: RemoteRegion,
    /// The provider's local key (verbs lkey); 0 where unused.
    #[cfg_attr(not(feature = "verbs"), allow(dead_code))]
    local_key: u32,
    /// Keeps the mapping or memory registration alive; its `Drop` deregisters.
    _backing: Box<dyn Any + Send + Sync>,
}

// SAFETY: the pointer refers to memory owned by `_backing`, which is Send + Sync and lives as
// long as the inner value; all access through it goes through raw copies, never references.
unsafe impl Send for RegionInner {}
// SAFETY: as above; concurrent copies into shared memory are the intended (RDMA) semantics.
unsafe impl Sync for RegionInner {}

/// A handle to registered memory: clone it freely, the registration lasts until the last clone
/// drops. Created by [`crate::Provider::alloc_region`]. Reads and writes copy and are bounds
/// checked ([`TransportError::OutOfBounds`]).
#[derive(Clone)]
pub struct Region {
    inner: Arc<RegionInner>,
}

impl fmt::Debug for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Region")
            .field("addr", &format_args!("{:#x}", self.inner.remote.addr))
            .field("len", &self.inner.len)
            .field("access", &self.inner.access)
            .finish()
    }
}

impl Region {
    /// # Safety
    /// `ptr..ptr+len` must be valid for reads and writes for as long as `backing` lives.
    pub(crate) unsafe fn new(
        ptr: *mut u8,
        len: usize,
        access: Access,
        remote: RemoteRegion,
        local_key: u32,
        backing: Box<dyn Any + Send + Sync>,
    ) -> Region {
        Region { inner: Arc::new(RegionInner { ptr, len, access, remote, local_key, _backing: backing }) }
    }

    /// Memory the caller owns, not yet registered with any provider (its descriptor's key is
    /// 0): what [`crate::Provider::register_memory`] registers.
    ///
    /// # Safety
    /// `ptr..ptr+len` must be valid for reads and writes for as long as the region lives.
    pub(crate) unsafe fn borrowed(ptr: *mut u8, len: usize, access: Access, owner: u32) -> Region {
        let remote = RemoteRegion { owner, addr: ptr as u64, len: len as u64, key: 0 };
        // SAFETY: the caller's promise.
        unsafe { Region::new(ptr, len, access, remote, 0, Box::new(())) }
    }

    /// The same memory, registered with a second provider too: `extra` is that registration
    /// (dropped first, while the memory is still mapped), `local_key` its local key, `key` the
    /// descriptor's key both providers accept.
    pub(crate) fn also_registered(
        &self,
        extra: Box<dyn Any + Send + Sync>,
        local_key: u32,
        key: u64,
    ) -> Region {
        let inner = &self.inner;
        let remote = RemoteRegion { key, ..inner.remote };
        let backing: Box<dyn Any + Send + Sync> = Box::new((extra, self.clone()));
        // SAFETY: the clone of `self` inside `backing` keeps ptr..ptr+len valid.
        unsafe { Region::new(inner.ptr, inner.len, inner.access, remote, local_key, backing) }
    }

    #[cfg_attr(not(feature = "verbs"), allow(dead_code))]
    pub(crate) fn local_key(&self) -> u32 {
        self.inner.local_key
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// True for a zero-length region (providers do not create them).
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// What peers may do to it.
    pub fn access(&self) -> Access {
        self.inner.access
    }

    /// The descriptor to hand to peers.
    pub fn remote(&self) -> RemoteRegion {
        self.inner.remote
    }

    /// The base address. Dereferencing it is up to the caller: peers may write the bytes at
    /// any time (see [`Region::as_slice`]).
    pub fn as_ptr(&self) -> *mut u8 {
        self.inner.ptr
    }

    /// Checks that `[offset, offset + len)` lies inside this region.
    pub fn check_bounds(&self, op: &'static str, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.inner.len => Ok(()),
            _ => Err(TransportError::OutOfBounds {
                op,
                offset: offset as u64,
                len: len as u64,
                region_len: self.inner.len as u64,
            }),
        }
    }

    /// Copies `data` into the region at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check_bounds("region write", offset, data.len())?;
        // SAFETY: bounds checked above; the backing keeps the memory valid; `data` is a
        // separate allocation or another region, so a nonoverlapping copy is sound.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.inner.ptr.add(offset), data.len()) };
        Ok(())
    }

    /// Copies `out.len()` bytes at `offset` out of the region.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check_bounds("region read", offset, out.len())?;
        // SAFETY: bounds checked above; `out` is caller memory distinct from the region.
        unsafe { std::ptr::copy_nonoverlapping(self.inner.ptr.add(offset), out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// A copy of `len` bytes at `offset`, written once (no zeroing pass first: verbs' owned
    /// rendezvous receives come through here).
    pub fn to_vec(&self, offset: usize, len: usize) -> Result<Vec<u8>> {
        self.check_bounds("region read", offset, len)?;
        let mut out = Vec::with_capacity(len);
        // SAFETY: bounds checked above; `out` owns `len` bytes of fresh capacity, distinct from
        // the region, all of which the copy initialises before `set_len`.
        unsafe {
            std::ptr::copy_nonoverlapping(self.inner.ptr.add(offset), out.as_mut_ptr(), len);
            out.set_len(len);
        }
        Ok(out)
    }

    /// Sets `len` bytes at `offset` to `byte`.
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<()> {
        self.check_bounds("region fill", offset, len)?;
        // SAFETY: bounds checked above.
        unsafe { std::ptr::write_bytes(self.inner.ptr.add(offset), byte, len) };
        Ok(())
    }

    /// Maps every page of the region now, writable, leaving its bytes as they are: so that
    /// first touches later (a checkpoint, a logged delivery) take no page faults. One
    /// `madvise(MADV_POPULATE_WRITE)` (Linux 5.14+) where a zeroing pass faulted each page from
    /// user space (a 4 MiB slot: 1024 faults); where the kernel refuses it, each page is read
    /// and written back once, which only a region nobody else writes yet may do: call it
    /// right after allocating.
    pub fn fault_in(&self) -> Result<()> {
        let len = self.inner.len;
        if len == 0 {
            return Ok(());
        }
        let page = crate::sys::page_size();
        let start = self.inner.ptr as usize & !(page - 1);
        let span = self.inner.ptr as usize + len - start;
        // SAFETY: madvise reads and changes no byte; the range is the region's pages (its
        // first rounded down to the page start), mapped, or the call fails and we touch them.
        let rc = unsafe { libc::madvise(start as *mut libc::c_void, span, libc::MADV_POPULATE_WRITE) };
        if rc == 0 {
            return Ok(());
        }
        for offset in (0..len).step_by(page) {
            // SAFETY: offset < len, inside the region; the byte is written back unchanged, and
            // the caller guarantees no other writer yet.
            unsafe {
                let p = self.inner.ptr.add(offset);
                std::ptr::write_volatile(p, std::ptr::read_volatile(p));
            }
        }
        Ok(())
    }

    /// Reads one byte without letting the compiler cache it: for polling on data that a peer
    /// writes (perftest-style latency loops).
    pub fn load_volatile(&self, offset: usize) -> Result<u8> {
        self.check_bounds("region load", offset, 1)?;
        // SAFETY: bounds checked above; a byte read has no alignment requirement.
        Ok(unsafe { std::ptr::read_volatile(self.inner.ptr.add(offset)) })
    }

    /// Writes one byte without letting the compiler elide or reorder it away (the writer side
    /// of [`Region::load_volatile`]).
    pub fn store_volatile(&self, offset: usize, byte: u8) -> Result<()> {
        self.check_bounds("region store", offset, 1)?;
        // SAFETY: bounds checked above.
        unsafe { std::ptr::write_volatile(self.inner.ptr.add(offset), byte) };
        Ok(())
    }

    /// Borrows the bytes.
    ///
    /// # Safety
    /// No peer or local operation may write the region while the slice lives.
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: the caller upholds the no-concurrent-writer contract; memory is valid.
        unsafe { std::slice::from_raw_parts(self.inner.ptr, self.inner.len) }
    }

    /// Borrows `len` bytes at `offset`, bounds-checked.
    ///
    /// # Safety
    /// Nothing may write that range while the slice lives.
    pub unsafe fn slice(&self, offset: usize, len: usize) -> Result<&[u8]> {
        self.check_bounds("region slice", offset, len)?;
        // SAFETY: in bounds (checked above); the caller guarantees no writer to the range.
        Ok(unsafe { std::slice::from_raw_parts(self.inner.ptr.add(offset), len) })
    }

    /// Mutably borrows the bytes.
    ///
    /// # Safety
    /// No other access (local or remote) to the region may happen while the slice lives.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn as_mut_slice(&self) -> &mut [u8] {
        // SAFETY: the caller guarantees exclusive access; memory is valid.
        unsafe { std::slice::from_raw_parts_mut(self.inner.ptr, self.inner.len) }
    }
}

/// Reusable registered regions for a provider's own staging (slice sends above the rendezvous
/// threshold): registering a fresh region per message costs a file or a memory registration
/// each time. Regions come in power-of-two size classes; a pooled region is free again when
/// no pending operation holds a clone of it. Bounded: at most `PER_CLASS` regions per class
/// and `max_bytes` in all; past that a staging region is allocated for the one message and
/// freed after it. Everything pooled is freed when the pool drops.
pub(crate) struct RegionPool {
    classes: Vec<Vec<Region>>,
    pooled_bytes: usize,
    max_bytes: usize,
}

impl RegionPool {
    /// Regions kept per size class: enough for a window of in-flight large sends.
    const PER_CLASS: usize = 8;
    /// The smallest class (4 KiB): smaller staging rounds up to it.
    const MIN_CLASS_SHIFT: u32 = 12;

    pub(crate) fn new(max_bytes: usize) -> RegionPool {
        RegionPool { classes: Vec::new(), pooled_bytes: 0, max_bytes }
    }

    fn class_of(len: usize) -> (usize, usize) {
        let size = len.max(1 << Self::MIN_CLASS_SHIFT).next_power_of_two();
        ((size.trailing_zeros() - Self::MIN_CLASS_SHIFT) as usize, size)
    }

    /// A region of at least `len` bytes that no operation uses: a pooled one if free, else a
    /// new one from `alloc` (kept in the pool while the bounds allow).
    pub(crate) fn take(&mut self, len: usize, alloc: impl FnOnce(usize) -> Result<Region>) -> Result<Region> {
        let (class, size) = Self::class_of(len);
        if size > self.max_bytes {
            return alloc(len);
        }
        if self.classes.len() <= class {
            self.classes.resize_with(class + 1, Vec::new);
        }
        let regions = &mut self.classes[class];
        if let Some(free) = regions.iter().find(|r| Arc::strong_count(&r.inner) == 1) {
            return Ok(free.clone());
        }
        if regions.len() >= Self::PER_CLASS || self.pooled_bytes + size > self.max_bytes {
            return alloc(len);
        }
        let region = alloc(size)?;
        self.pooled_bytes += size;
        regions.push(region.clone());
        Ok(region)
    }

    /// Bytes registered for the pool (free or in use).
    #[cfg(test)]
    pub(crate) fn pooled_bytes(&self) -> usize {
        self.pooled_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn heap_region(len: usize) -> Result<Region> {
        let mut buf = vec![0u8; len].into_boxed_slice();
        let ptr = buf.as_mut_ptr();
        let remote = RemoteRegion { owner: 0, addr: ptr as u64, len: len as u64, key: 1 };
        // SAFETY: the boxed slice is the backing: it keeps ptr..ptr+len valid.
        Ok(unsafe { Region::new(ptr, len, Access::LOCAL, remote, 0, Box::new(buf)) })
    }

    #[test]
    fn fault_in_keeps_every_byte() {
        // Unaligned lengths and a heap start inside a page: the pages around it are mapped.
        for len in [1, 4095, 4097, 3 * 4096 + 17] {
            let region = heap_region(len).unwrap();
            let pattern: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            region.write(0, &pattern).unwrap();
            region.fault_in().unwrap();
            let mut back = vec![0u8; len];
            region.read(0, &mut back).unwrap();
            assert_eq!(back, pattern, "{len} bytes");
        }
    }

    #[test]
    fn pool_reuses_a_region_once_no_operation_holds_it() {
        let mut pool = RegionPool::new(1 << 30);
        let first = pool.take(100_000, heap_region).unwrap();
        assert_eq!(first.len(), 128 * 1024);
        let addr = first.as_ptr();
        // Still held: a second take gets another region.
        let second = pool.take(70_000, heap_region).unwrap();
        assert_ne!(second.as_ptr(), addr);
        drop(first);
        let again = pool.take(128 * 1024, heap_region).unwrap();
        assert_eq!(again.as_ptr(), addr);
        assert_eq!(pool.pooled_bytes(), 2 * 128 * 1024);
    }

    #[test]
    fn pool_stays_within_its_bounds() {
        let mut pool = RegionPool::new(1 << 20);
        let held: Vec<Region> = (0..20).map(|_| pool.take(64 * 1024, heap_region).unwrap()).collect();
        assert!(held.iter().all(|r| r.len() >= 64 * 1024));
        assert!(pool.pooled_bytes() <= (1 << 20));
        assert_eq!(pool.pooled_bytes(), RegionPool::PER_CLASS * 64 * 1024);
        // Larger than the whole pool: allocated for the message alone, exact size.
        let big = pool.take(3 << 20, heap_region).unwrap();
        assert_eq!(big.len(), 3 << 20);
        assert_eq!(pool.pooled_bytes(), RegionPool::PER_CLASS * 64 * 1024);
    }
}
