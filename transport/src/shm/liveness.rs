//! Peer process liveness. A pidfd becomes readable when its process exits (even before it is
//! reaped), so a SIGKILLed peer is seen at once; `kill(pid, 0)` is the fallback.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Whether process `pid` exists (a zombie counts; so does one owned by another user).
pub fn pid_exists(pid: u32) -> bool {
    // SAFETY: signal 0 performs only the existence and permission check.
    let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
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
