//! SIGINT/SIGTERM while a launch runs: recorded (the launch loop stops the job), and the
//! previous handlers restored when the last concurrent launch ends.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;

/// Last SIGINT/SIGTERM received while a launch was running (0: none).
pub(super) static SIGNALLED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    SIGNALLED.store(sig, Ordering::SeqCst);
}

/// Handlers are process-wide: installed by the first concurrent launch, restored by the last.
static HANDLERS: Mutex<(usize, Vec<(libc::c_int, libc::sigaction)>)> = Mutex::new((0, Vec::new()));

pub(super) struct SignalGuard;

impl SignalGuard {
    pub(super) fn install() -> SignalGuard {
        let mut g = HANDLERS.lock().unwrap_or_else(|p| p.into_inner());
        if g.0 == 0 {
            SIGNALLED.store(0, Ordering::SeqCst);
            for sig in [libc::SIGINT, libc::SIGTERM] {
                // SAFETY: sigaction with a zeroed struct plus a handler that only stores an
                // atomic; the old action is saved to be restored.
                unsafe {
                    let mut new: libc::sigaction = std::mem::zeroed();
                    new.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
                    new.sa_flags = libc::SA_RESTART;
                    libc::sigemptyset(&mut new.sa_mask);
                    let mut old: libc::sigaction = std::mem::zeroed();
                    if libc::sigaction(sig, &new, &mut old) == 0 {
                        g.1.push((sig, old));
                    }
                }
            }
        }
        g.0 += 1;
        SignalGuard
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        let mut g = HANDLERS.lock().unwrap_or_else(|p| p.into_inner());
        g.0 -= 1;
        if g.0 == 0 {
            for (sig, old) in g.1.drain(..) {
                // SAFETY: restores the action saved by `install`.
                unsafe {
                    libc::sigaction(sig, &old, std::ptr::null_mut());
                }
            }
        }
    }
}

pub(super) fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}
