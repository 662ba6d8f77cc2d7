//! System utilities every part of reverb shares, as UCX keeps them in UCS: the shared files in
//! /dev/shm ([`shmfile`]), whether a process lives ([`liveness`]), a coarse clock for
//! checks asked about every progress pass and CPU time ([`clock`]), the page size. No provider's internals:
//! the shm provider, the verbs provider, the logger and the launcher all use them from here.

pub mod clock;
pub mod liveness;
pub mod shmfile;

/// The size of a memory page (4 KiB when the system does not say).
pub fn page_size() -> usize {
    // SAFETY: sysconf reads a system constant; no memory is involved.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).ok().filter(|s| s.is_power_of_two()).unwrap_or(4096)
}
