//! `MPI_Alloc_mem` / `MPI_Free_mem`, address arithmetic (`MPI_Aint_add`, `_diff`) and
//! `MPI_Pcontrol`. reverb's runtime offers no memory-registration hook to MPI (the verbs
//! provider registers its own buffers), so `MPI_Alloc_mem` gives page-aligned memory: what a
//! later registration would want, and what MPICH gives for large sizes.

use std::collections::BTreeSet;
use std::ffi::{c_int, c_long, c_void};
use std::sync::Mutex;

use crate::abi::*;
use crate::errors::MpiError;
use crate::ffi;
use crate::ffi::Out;
use crate::state::call;

/// The addresses `MPI_Alloc_mem` gave and `MPI_Free_mem` has not taken back.
static ALLOCATED: Mutex<BTreeSet<usize>> = Mutex::new(BTreeSet::new());

fn page_size() -> usize {
    // SAFETY: sysconf reads a system constant; no pointers.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|n| n.is_power_of_two()).unwrap_or(4096)
}

pub(crate) unsafe fn mpi_alloc_mem(size: c_long, _info: c_int, baseptr: Out<'_, *mut c_void>) -> c_int {
    call("MPI_Alloc_mem", MPI_COMM_WORLD, |_| {
        let bytes = usize::try_from(size).map_err(|_| MpiError::new(MPI_ERR_SIZE, format!("size {size}")))?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: `p` is a valid out-pointer; the alignment is a power of two, a multiple of
        // the pointer size. A zero size still gets a unique address (freed like any other).
        let rc = unsafe { libc::posix_memalign(&mut p, page_size(), bytes.max(1)) };
        if rc != 0 || p.is_null() {
            return Err(MpiError::new(MPI_ERR_NO_MEM, format!("{bytes} bytes: error {rc}")));
        }
        ALLOCATED.lock().unwrap_or_else(|e| e.into_inner()).insert(p as usize);
        ffi::out(baseptr, p, "baseptr")
    })
}

pub(crate) unsafe fn mpi_free_mem(base: *mut c_void) -> c_int {
    call("MPI_Free_mem", MPI_COMM_WORLD, |_| {
        if !ALLOCATED.lock().unwrap_or_else(|e| e.into_inner()).remove(&(base as usize)) {
            return Err(MpiError::new(MPI_ERR_ARG, format!("{base:p} was not given by MPI_Alloc_mem")));
        }
        // SAFETY: `base` came from posix_memalign in MPI_Alloc_mem and is freed once (it left
        // the set above).
        unsafe { libc::free(base) };
        Ok(())
    })
}

pub(crate) fn mpi_aint_add(base: c_long, disp: c_long) -> c_long {
    base.wrapping_add(disp)
}

pub(crate) fn mpi_aint_diff(addr1: c_long, addr2: c_long) -> c_long {
    addr1.wrapping_sub(addr2)
}

/// Profiling control: reverb's library has no profiling levels, so any level is accepted and
/// ignored (a profiling library loaded first defines its own `MPI_Pcontrol`). MPI declares
/// it variadic; the extra arguments, if any, are never read.
pub(crate) fn mpi_pcontrol(_level: c_int) -> c_int {
    MPI_SUCCESS
}
