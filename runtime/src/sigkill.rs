//! SIGKILL for fault injection: the one `unsafe` call of the fault hooks.

/// Sends SIGKILL to `pid` (this process, or the node's logger core whose pid it published).
pub(super) fn sigkill(pid: libc::pid_t) {
    // SAFETY: kill(2) takes no pointers; the caller names a process of this job (its own pid
    // or its node's logger core) and SIGKILL is the failure being injected.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

/// This process's pid.
pub(super) fn own_pid() -> libc::pid_t {
    std::process::id() as libc::pid_t
}
