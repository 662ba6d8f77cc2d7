//! The loopback provider's registered memory: heap blocks that ranks (threads) read and write
//! through raw copies, as a NIC would. The only `unsafe` of the provider lives here.

use std::sync::Arc;

use crate::region::Region;

/// One registered block. Shared (`Arc`) between the owner's `Region` and its registration
/// table entry, so a peer's copy in progress keeps it alive even if the owner drops it.
pub(crate) struct Memory {
    ptr: *mut u8,
    len: usize,
    /// Memory registered elsewhere first (the `auto` provider's shm segments, registered with
    /// tcp too): kept mapped by this handle, never freed here. None for a heap block.
    borrowed: Option<Region>,
}

// SAFETY: the block is owned by this value and freed only in `Drop`; every access goes through
// raw copies (never references), concurrent ones having RDMA's semantics (unordered bytes).
unsafe impl Send for Memory {}
// SAFETY: as above.
unsafe impl Sync for Memory {}

impl Memory {
    /// A zeroed block of `len` (> 0) bytes.
    pub(crate) fn zeroed(len: usize) -> Arc<Memory> {
        let block: Box<[u8]> = vec![0u8; len].into_boxed_slice();
        let ptr = Box::into_raw(block) as *mut u8;
        Arc::new(Memory { ptr, len, borrowed: None })
    }

    /// The memory of `region`, which this handle keeps alive.
    pub(crate) fn of_region(region: &Region) -> Arc<Memory> {
        Arc::new(Memory { ptr: region.as_ptr(), len: region.len(), borrowed: Some(region.clone()) })
    }

    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Copies `len` bytes from `offset` of `self` to `dst`.
    ///
    /// # Safety
    /// `offset + len <= self.len()` and `dst` is valid for `len` bytes of writes.
    pub(crate) unsafe fn read_into(&self, offset: usize, dst: *mut u8, len: usize) {
        debug_assert!(offset + len <= self.len);
        // SAFETY: the caller's contract; ptr::copy tolerates overlap (a rank reading itself).
        unsafe { std::ptr::copy(self.ptr.add(offset), dst, len) }
    }

    /// Copies `len` bytes from `src` to `offset` of `self`.
    ///
    /// # Safety
    /// `offset + len <= self.len()` and `src` is valid for `len` bytes of reads.
    pub(crate) unsafe fn write_from(&self, offset: usize, src: *const u8, len: usize) {
        debug_assert!(offset + len <= self.len);
        // SAFETY: the caller's contract; ptr::copy tolerates overlap (a rank writing itself).
        unsafe { std::ptr::copy(src, self.ptr.add(offset), len) }
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        if self.borrowed.is_some() {
            return; // the region's own backing frees it
        }
        // SAFETY: `ptr` and `len` came from `Box::into_raw` of a boxed slice in `zeroed` (not
        // borrowed, checked above), and this is the only place that frees it.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.ptr, self.len)) });
    }
}
