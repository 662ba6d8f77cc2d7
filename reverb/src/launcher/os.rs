//! The launcher's system calls on its children, in one place (signals apart: `signals`).

use std::os::unix::process::CommandExt;
use std::process::Command;

use rustix::process::{getpid, getppid, kill_process, kill_process_group, Pid, Signal};
use rustix::thread::{sched_setaffinity, CpuSet};

/// Makes the child die with the launcher: SIGKILL on parent death, and at once if the parent
/// is already gone by the time it runs. The kernel sends it when the *thread* that forked
/// ends: every rank and logger core is spawned by the thread running the launch, which
/// outlives them (it reaps them before it returns). What a killed child leaves in /dev/shm
/// goes at the next launch's sweep (`hygiene`).
pub(super) fn die_with_launcher(cmd: &mut Command) {
    let parent = getpid();
    // SAFETY: the closure runs between fork and exec and makes only raw system calls
    // (prctl, getppid, getpid, kill) through rustix: no allocation, no locks.
    unsafe {
        cmd.pre_exec(move || {
            let _ = rustix::process::set_parent_process_death_signal(Some(Signal::KILL));
            if getppid() != Some(parent) {
                let _ = kill_process(getpid(), Signal::KILL);
            }
            Ok(())
        });
    }
}

/// SIGKILLs process group `pgid`. The caller guarantees the group leader is its unreaped
/// child, so the pgid cannot have been reused.
pub(super) fn kill_group(pgid: libc::pid_t) {
    // Pid 0 would be our own group: never a child's.
    if let Some(pgid) = Pid::from_raw(pgid.max(0)) {
        let _ = kill_process_group(pgid, Signal::KILL);
    }
}

/// Pins thread `tid` to `cpu` (below CPU_SETSIZE: it comes from the host's cpu list).
pub(super) fn pin_thread(tid: libc::pid_t, cpu: usize) -> std::io::Result<()> {
    if tid < 0 {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("thread id {tid}")));
    }
    let mut set = CpuSet::new();
    set.set(cpu);
    // Tid 0 (no Pid) is the calling thread, as for sched_setaffinity(2).
    sched_setaffinity(Pid::from_raw(tid), &set).map_err(std::io::Error::from)
}
