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

    #[cfg_attr(not(feature = "verbs"), allow(dead_code))]
    pub(crate) fn local_key(&self) -> u32 {
        self.inner.local_key
    }

    pub fn len(&self) -> usize {
        self.inner.len
    }

    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    pub fn access(&self) -> Access {
        self.inner.access
    }

    /// The descriptor to hand to peers.
    pub fn remote(&self) -> RemoteRegion {
        self.inner.remote
    }

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

    pub fn to_vec(&self, offset: usize, len: usize) -> Result<Vec<u8>> {
        let mut out = vec![0u8; len];
        self.read(offset, &mut out)?;
        Ok(out)
    }

    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<()> {
        self.check_bounds("region fill", offset, len)?;
        // SAFETY: bounds checked above.
        unsafe { std::ptr::write_bytes(self.inner.ptr.add(offset), byte, len) };
        Ok(())
    }

    /// Reads one byte without letting the compiler cache it: for polling on data that a peer
    /// writes (perftest-style latency loops).
    pub fn load_volatile(&self, offset: usize) -> Result<u8> {
        self.check_bounds("region load", offset, 1)?;
        // SAFETY: bounds checked above; a byte read has no alignment requirement.
        Ok(unsafe { std::ptr::read_volatile(self.inner.ptr.add(offset)) })
    }

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
