//! System utilities every part of reverb shares, as UCX keeps them in UCS: the shared files in
//! /dev/shm ([`shmfile`]), whether a process lives ([`liveness`]), a coarse clock for
//! checks asked about every progress pass and CPU time ([`clock`]), the page size. No provider's internals:
//! the shm provider, the verbs provider, the logger and the launcher all use them from here.

pub mod clock;
pub mod liveness;
pub mod shmfile;

/// Largest allocation glibc's malloc serves from its heap once `keep_freed_memory` ran
/// (its own most, `DEFAULT_MMAP_THRESHOLD_MAX` on 64-bit).
pub const MALLOC_MMAP_THRESHOLD: usize = 32 << 20;
/// Free memory at the heap's top that malloc keeps before it gives it back, likewise.
pub const MALLOC_TRIM_THRESHOLD: usize = 64 << 20;

/// Has glibc's malloc serve allocations up to `MALLOC_MMAP_THRESHOLD` from its heap and keep
/// up to `MALLOC_TRIM_THRESHOLD` freed, as MVAPICH and Open MPI's leave-pinned mode set it: a
/// buffer of a few MiB allocated and freed per call (an MPI collective's) then comes back
/// without a fresh mapping and a page fault per page. False if malloc refused.
pub fn keep_freed_memory() -> bool {
    // SAFETY: mallopt only changes malloc's tuning parameters; no memory is touched. The
    // values fit in a c_int.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MALLOC_MMAP_THRESHOLD as libc::c_int) == 1
            && libc::mallopt(libc::M_TRIM_THRESHOLD, MALLOC_TRIM_THRESHOLD as libc::c_int) == 1
    }
}

/// The size of a memory page (4 KiB when the system does not say).
pub fn page_size() -> usize {
    // SAFETY: sysconf reads a system constant; no memory is involved.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).ok().filter(|s| s.is_power_of_two()).unwrap_or(4096)
}
