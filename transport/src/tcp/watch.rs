//! Readiness without a system call per poll, for the `auto` provider, which progresses tcp
//! beside shm on every call: reading each socket to find it empty costs a microsecond, ten
//! times a shared-memory poll. The helper thread waits on an edge-triggered epoll set of the
//! listener and every connection (bytes in, room to write again, hang-ups) and raises a flag;
//! [`super::TcpProvider::progress_when_ready`] takes the sockets only when it is up, while
//! traffic flows ([`HOT_CALLS`]: waking the helper costs a ping-pong several microseconds), or
//! every [`FULL_EVERY`] calls (timers, and anything an edge cannot say).

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rustix::event::{epoll, Timespec};

use crate::error::{Result, TransportError};

/// A full progress at least this often, whatever the flag says.
pub const FULL_EVERY: u32 = 128;
/// Calls after one that read bytes during which every call progresses (traffic is flowing).
pub const HOT_CALLS: u32 = 512;

/// The epoll set and the flag the helper thread raises.
pub(crate) struct Watch {
    epoll: OwnedFd,
    ready: AtomicBool,
    /// Whether the application relies on the flag now (`auto`, no traffic lately): only then
    /// does the helper thread wait on the set, since every edge wakes it (a provider opened
    /// alone, or one with traffic flowing, polls the sockets itself).
    armed: AtomicBool,
}

impl Watch {
    pub fn new() -> Result<Watch> {
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)
            .map_err(|e| TransportError::io("tcp: epoll_create", e.into()))?;
        Ok(Watch { epoll, ready: AtomicBool::new(true), armed: AtomicBool::new(false) })
    }

    /// Watches `fd` (a connection or the listener) until it is closed.
    pub fn add(&self, fd: impl AsFd) {
        let flags =
            epoll::EventFlags::IN | epoll::EventFlags::OUT | epoll::EventFlags::RDHUP | epoll::EventFlags::ET;
        if let Err(e) = epoll::add(&self.epoll, fd, epoll::EventData::new_u64(0), flags) {
            // Unwatched, a socket is still read by every FULL_EVERY-th progress.
            tracing::debug!("tcp: epoll_ctl add: {e}");
        }
        self.ready.store(true, Ordering::Release);
    }

    /// Whether the helper thread should wait on the set (see `armed`).
    #[inline(always)]
    pub fn arm(&self, armed: bool) {
        if self.armed.load(Ordering::Relaxed) != armed {
            self.armed.store(armed, Ordering::Relaxed);
        }
    }

    /// Waits up to `timeout`: for an edge on any watched descriptor while armed (raising the
    /// flag if one came), else simply sleeping.
    pub fn wait(&self, timeout: Duration) {
        if !self.armed.load(Ordering::Relaxed) {
            return std::thread::sleep(timeout);
        }
        let mut events = [std::mem::MaybeUninit::<epoll::Event>::uninit(); 16];
        let timeout = Timespec { tv_sec: timeout.as_secs() as _, tv_nsec: timeout.subsec_nanos() as _ };
        if let Ok((ready, _)) = epoll::wait(&self.epoll, &mut events[..], Some(&timeout)) {
            if !ready.is_empty() {
                self.ready.store(true, Ordering::Release);
            }
        }
    }

    /// Whether something may have happened since the last call (and lowers the flag).
    #[inline(always)]
    pub fn take(&self) -> bool {
        self.ready.load(Ordering::Relaxed) && self.ready.swap(false, Ordering::AcqRel)
    }
}
