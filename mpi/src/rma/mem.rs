//! The window memory's reads and writes at a target, and the memory `MPI_Win_allocate`
//! allocates: the module's `unsafe`. Runs were bounds-checked against the window (`serve`)
//! before they get here.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ffi::c_void;

use crate::abi::MPI_ERR_NO_MEM;
use crate::errors::{MpiError, MpiResult};
use crate::ffi::UserBuf;

/// The window's exposed memory at `base` (0 for a dynamic window: runs are addresses).
fn at(base: usize, off: u64) -> UserBuf {
    // SAFETY: an address inside the window (checked by the caller), which the program
    // exposes for the window's lifetime (MPI 4.0, 12.2); only copied from or into.
    unsafe { UserBuf::from_raw(base.wrapping_add(off as usize) as *mut c_void) }
}

/// The bytes of `runs`, in order.
pub fn gather(base: usize, runs: &[(u64, u64)]) -> MpiResult<Vec<u8>> {
    let mut out = Vec::with_capacity(runs.iter().map(|r| r.1 as usize).sum());
    for &(off, len) in runs {
        // SAFETY: a checked run of the exposed window (above); the target is inside an MPI
        // call, so the program does not write it meanwhile (MPI's rule for local access).
        out.extend_from_slice(unsafe { at(base, off).bytes(len as usize) }?);
    }
    Ok(out)
}

/// Copies `len` bytes between the program's buffer `buf` and the window's bytes at `off`:
/// into the window when `to_window`, out of it otherwise (memmove: a rank's put into its own
/// window may name overlapping bytes).
///
/// # Safety
/// `buf` holds `len` bytes, readable when `to_window`, writable otherwise, for the call; the
/// run was checked against the window.
pub unsafe fn copy_run(base: usize, off: u64, buf: UserBuf, len: usize, to_window: bool) -> MpiResult<()> {
    if len == 0 {
        return Ok(());
    }
    let window = at(base, off).ptr();
    if buf.ptr().is_null() {
        return Err(MpiError::new(crate::abi::MPI_ERR_BUFFER, format!("a null buffer of {len} bytes")));
    }
    let (from, to) = if to_window { (buf.ptr(), window) } else { (window, buf.ptr()) };
    // SAFETY: both hold `len` bytes (the caller's promise and the window check); `copy` allows
    // them to overlap.
    unsafe { std::ptr::copy(from.cast_const(), to, len) };
    Ok(())
}

/// Writes `data` over `runs`, in order (`data` holds exactly their bytes).
pub fn scatter(base: usize, runs: &[(u64, u64)], data: &[u8]) -> MpiResult<()> {
    let mut from = 0;
    for &(off, len) in runs {
        let len = len as usize;
        // SAFETY: as in `gather`; the window is ours to write while we serve a request.
        unsafe { at(base, off).bytes_mut(len) }?.copy_from_slice(&data[from..from + len]);
        from += len;
    }
    Ok(())
}

/// Page-aligned, zeroed memory for `MPI_Win_allocate`, freed on drop.
pub struct Allocated {
    ptr: *mut u8,
    layout: Layout,
}

const PAGE: usize = 4096;

impl Allocated {
    /// `len` bytes (at least one page-aligned byte, so the base is never null).
    pub fn new(len: usize) -> MpiResult<Allocated> {
        let nomem = || MpiError::new(MPI_ERR_NO_MEM, format!("cannot allocate a window of {len} bytes"));
        let layout = Layout::from_size_align(len.max(1), PAGE).map_err(|_| nomem())?;
        // SAFETY: the layout's size is non-zero.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(nomem());
        }
        Ok(Allocated { ptr, layout })
    }

    pub fn addr(&self) -> usize {
        self.ptr as usize
    }
}

impl Drop for Allocated {
    fn drop(&mut self) {
        // SAFETY: allocated by `new` with this layout, freed once.
        unsafe { dealloc(self.ptr, self.layout) }
    }
}
