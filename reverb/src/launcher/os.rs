//! The launcher's system calls on its children, in one place (signals apart: `signals`).

use std::os::unix::process::CommandExt;
use std::process::Command;

/// Makes the child die with the launcher: SIGKILL on parent death, and at once if the parent
/// is already gone by the time it runs.
pub(super) fn die_with_launcher(cmd: &mut Command) {
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs between fork and exec and calls only async-signal-safe
    // functions (prctl, getppid, raise).
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            if libc::getppid() != parent {
                libc::raise(libc::SIGKILL);
            }
            Ok(())
        });
    }
}

/// SIGKILLs process group `pgid`. The caller guarantees the group leader is its unreaped
/// child, so the pgid cannot have been reused.
pub(super) fn kill_group(pgid: libc::pid_t) {
    // SAFETY: plain syscall on a group the caller owns (see above).
    unsafe {
        libc::killpg(pgid, libc::SIGKILL);
    }
}

/// Pins thread `tid` to `cpu` (below CPU_SETSIZE: it comes from the host's cpu list).
pub(super) fn pin_thread(tid: libc::pid_t, cpu: usize) -> std::io::Result<()> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET indexes inside it;
    // sched_setaffinity only reads it.
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
