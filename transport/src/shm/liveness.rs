//! Process liveness, the one place reverb asks whether a process lives. A pidfd becomes
//! readable when its process exits (even before it is reaped), so a SIGKILLed peer is seen at
//! once; `kill(pid, 0)` is the fallback. [`pid_exists`] counts a zombie as existing (its pid is
//! still taken); [`pid_running`] does not (it has exited, whoever reaps it).

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Whether process `pid` exists (a zombie counts; so does one owned by another user).
pub fn pid_exists(pid: u32) -> bool {
    // SAFETY: signal 0 performs only the existence and permission check.
    let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
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
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        let pidfd = if fd >= 0 {
            // SAFETY: the syscall returned a fresh fd that nothing else owns.
            Some(unsafe { OwnedFd::from_raw_fd(fd as i32) })
        } else {
            None
        };
        ProcessWatch { pid, pidfd }
    }

    /// False once the process has exited.
    pub fn alive(&self) -> bool {
        match &self.pidfd {
            Some(fd) => {
                let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
                // SAFETY: one valid pollfd on our stack, zero timeout.
                let rc = unsafe { libc::poll(&mut pfd, 1, 0) };
                !(rc > 0 && pfd.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0)
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
