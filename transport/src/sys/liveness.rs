//! Process liveness, the one place reverb asks whether a process lives. A pidfd becomes
//! readable when its process exits (even before it is reaped), so a SIGKILLed peer is seen at
//! once; `kill(pid, 0)` is the fallback. [`pid_exists`] counts a zombie as existing (its pid is
//! still taken); [`pid_running`] does not (it has exited, whoever reaps it).

use std::os::fd::OwnedFd;

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::process::{pidfd_open, test_kill_process, Pid, PidfdFlags};

/// Whether process `pid` exists (a zombie counts; so does one owned by another user).
pub fn pid_exists(pid: u32) -> bool {
    // Pid 0 and pids past i32::MAX name process groups to kill(2), never one process.
    let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else { return false };
    // Signal 0: only the existence and permission check.
    matches!(test_kill_process(pid), Ok(()) | Err(Errno::PERM))
}

/// Whether process `pid` exists and has not exited: a zombie (exited, not reaped yet) is not
/// running. Read from `/proc/PID/stat`; no signal is sent.
pub fn pid_running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state letter follows the parenthesized command name, which may hold spaces.
        Ok(stat) => match stat.rsplit_once(')') {
            Some((_, rest)) => !matches!(rest.trim_start().chars().next(), Some('Z' | 'X')),
            None => true,
        },
        Err(_) => false,
    }
}

/// Watches one peer process.
pub struct ProcessWatch {
    pid: u32,
    pidfd: Option<OwnedFd>,
}

impl ProcessWatch {
    /// Starts watching `pid` (through a pidfd when the kernel has them).
    pub fn new(pid: u32) -> ProcessWatch {
        let pidfd = i32::try_from(pid)
            .ok()
            .and_then(Pid::from_raw)
            .and_then(|p| pidfd_open(p, PidfdFlags::empty()).ok());
        ProcessWatch { pid, pidfd }
    }

    /// False once the process has exited.
    pub fn alive(&self) -> bool {
        match &self.pidfd {
            Some(fd) => {
                let mut pfd = [PollFd::new(fd, PollFlags::IN)];
                // Zero timeout: a readable pidfd means the process has exited.
                let ready = poll(&mut pfd, Some(&Timespec { tv_sec: 0, tv_nsec: 0 }));
                let exited = PollFlags::IN | PollFlags::HUP | PollFlags::ERR;
                !(ready.is_ok_and(|n| n > 0) && pfd[0].revents().intersects(exited))
            }
            None => pid_exists(self.pid),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_runs_and_a_free_pid_does_not() {
        assert!(pid_exists(std::process::id()) && pid_running(std::process::id()));
        assert!(!pid_running(u32::MAX - 1));
    }

    #[test]
    fn a_zombie_exists_but_does_not_run() {
        let child = std::process::Command::new("true").spawn().expect("spawn true");
        let pid = child.id();
        // Not reaped yet: once it has exited it is a zombie.
        let start = std::time::Instant::now();
        while pid_running(pid) && start.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!pid_running(pid), "exited");
        assert!(pid_exists(pid), "a zombie keeps its pid");
        let mut child = child;
        child.wait().expect("reap");
    }
}
