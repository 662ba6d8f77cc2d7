//! Completion queue with an optional completion channel, so `block` can sleep on an fd
//! instead of spinning (two busy-polling ranks starve each other on small machines).

use std::sync::Arc;
use std::time::Duration;

use ibverbs_sys as ffi;

use super::device::Context;
use crate::error::{Result, TransportError};

// `ibv_wc` is written by hand in ibverbs-sys (not generated from verbs.h), and the driver
// writes whole arrays of it in `poll`: a layout drift would corrupt the heap silently.
const _: () = assert!(std::mem::size_of::<ffi::ibv_wc>() == 48 && std::mem::align_of::<ffi::ibv_wc>() == 8);

pub struct CompletionQueue {
    pub(crate) raw: *mut ffi::ibv_cq,
    channel: *mut ffi::ibv_comp_channel,
    /// Events taken from the channel and not yet acknowledged (acked in batches).
    unacked: u32,
    armed: bool,
    _ctx: Arc<Context>,
}

// SAFETY: the CQ is used by one thread at a time (the provider is &mut); verbs objects may be
// moved between threads.
unsafe impl Send for CompletionQueue {}

impl CompletionQueue {
    pub fn new(ctx: &Arc<Context>, entries: u32, with_channel: bool) -> Result<CompletionQueue> {
        let channel = if with_channel {
            // SAFETY: the context is open.
            let ch = unsafe { ffi::ibv_create_comp_channel(ctx.raw) };
            if ch.is_null() {
                return Err(TransportError::io("ibv_create_comp_channel", std::io::Error::last_os_error()));
            }
            // The channel fd is polled with a timeout; reads must never block.
            // SAFETY: ch is valid; fcntl on its fd only changes flags.
            unsafe {
                let fd = (*ch).fd;
                let flags = libc::fcntl(fd, libc::F_GETFL);
                libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK);
            }
            ch
        } else {
            std::ptr::null_mut()
        };
        // SAFETY: the context is open; channel is null or valid.
        let raw = unsafe { ffi::ibv_create_cq(ctx.raw, entries as i32, std::ptr::null_mut(), channel, 0) };
        if raw.is_null() {
            let err = std::io::Error::last_os_error();
            if !channel.is_null() {
                // SAFETY: created above, no CQ uses it.
                unsafe { ffi::ibv_destroy_comp_channel(channel) };
            }
            return Err(TransportError::io(format!("ibv_create_cq({entries})"), err));
        }
        Ok(CompletionQueue { raw, channel, unacked: 0, armed: false, _ctx: ctx.clone() })
    }

    /// Polls up to `out.len()` completions; returns how many were written.
    pub fn poll(&mut self, out: &mut [ffi::ibv_wc]) -> Result<usize> {
        // SAFETY: poll_cq is static inline in verbs.h, so it is reached through the context's
        // op table; the CQ is valid and `out` has room for out.len() entries.
        let n = unsafe {
            let ctx = (*self.raw).context;
            let poll = (*ctx)
                .ops
                .poll_cq
                .ok_or_else(|| TransportError::Unavailable("verbs", "no poll_cq op".into()))?;
            poll(self.raw, out.len() as i32, out.as_mut_ptr())
        };
        if n < 0 {
            return Err(TransportError::io("ibv_poll_cq", std::io::Error::from_raw_os_error(-n)));
        }
        Ok(n as usize)
    }

    pub fn has_channel(&self) -> bool {
        !self.channel.is_null()
    }

    /// Arms the CQ for the next completion event.
    pub fn arm(&mut self) -> Result<()> {
        if self.armed || self.channel.is_null() {
            return Ok(());
        }
        // SAFETY: as for poll_cq, through the op table; solicited_only = 0.
        let rc = unsafe {
            let ctx = (*self.raw).context;
            let notify = (*ctx)
                .ops
                .req_notify_cq
                .ok_or_else(|| TransportError::Unavailable("verbs", "no req_notify_cq op".into()))?;
            notify(self.raw, 0)
        };
        if rc != 0 {
            return Err(TransportError::io("ibv_req_notify_cq", std::io::Error::from_raw_os_error(rc)));
        }
        self.armed = true;
        Ok(())
    }

    /// Sleeps until the armed CQ raises an event or `timeout` passes. Callers must arm, then
    /// poll once more (a completion may have raced the arming), then wait.
    pub fn wait_event(&mut self, timeout: Duration) -> Result<bool> {
        if self.channel.is_null() {
            std::thread::sleep(timeout.min(Duration::from_micros(100)));
            return Ok(false);
        }
        // SAFETY: channel is valid while the CQ lives.
        let fd = unsafe { (*self.channel).fd };
        let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: one pollfd on our stack.
        let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
        if rc <= 0 {
            return Ok(false);
        }
        let mut cq = std::ptr::null_mut();
        let mut ctx = std::ptr::null_mut();
        // SAFETY: the fd is readable and non-blocking; outputs live on our stack.
        let got = unsafe { ffi::ibv_get_cq_event(self.channel, &mut cq, &mut ctx) };
        if got == 0 {
            self.armed = false;
            self.unacked += 1;
            if self.unacked >= 64 {
                self.ack();
            }
        }
        Ok(got == 0)
    }

    fn ack(&mut self) {
        if self.unacked > 0 {
            // SAFETY: acknowledges events we took from this CQ's channel.
            unsafe { ffi::ibv_ack_cq_events(self.raw, self.unacked) };
            self.unacked = 0;
        }
    }
}

impl Drop for CompletionQueue {
    fn drop(&mut self) {
        self.ack();
        // SAFETY: QPs using this CQ are destroyed first (the provider drops them before the
        // CQ); every event was acknowledged above.
        unsafe {
            ffi::ibv_destroy_cq(self.raw);
            if !self.channel.is_null() {
                ffi::ibv_destroy_comp_channel(self.channel);
            }
        }
    }
}
