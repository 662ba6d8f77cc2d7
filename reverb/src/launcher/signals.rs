//! SIGINT/SIGTERM while a launch runs: recorded (the launch loop stops the job); outside
//! launches they keep their default action (terminate).
//!
//! The handlers are signal-hook's, registered once at the first launch and kept: signal-hook
//! cannot put back the handler it replaced, so when no launch runs its handler performs the
//! default action itself. A handler the host program installed before the first launch is
//! chained by signal-hook instead of replaced: it runs first, during launches too, and outside
//! launches the default action follows it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::flag;

/// Last SIGINT/SIGTERM received while a launch was running (0: none).
static SIGNALLED: LazyLock<Arc<AtomicUsize>> = LazyLock::new(|| Arc::new(AtomicUsize::new(0)));
/// No launch runs: a signal takes its default action.
static IDLE: LazyLock<Arc<AtomicBool>> = LazyLock::new(|| Arc::new(AtomicBool::new(true)));
/// Registered once per process (signal-hook's handlers stay installed).
static REGISTERED: OnceLock<()> = OnceLock::new();
/// Launches running now: the first clears `IDLE`, the last sets it again.
static ACTIVE: Mutex<usize> = Mutex::new(0);

/// Sticky: a SIGINT/SIGTERM came during a launch, or [`request_cancel`] was called. An
/// agent's rendezvous then closes at once instead of lingering for ranks that are gone.
static CANCELLED: LazyLock<Arc<AtomicBool>> = LazyLock::new(|| Arc::new(AtomicBool::new(false)));

/// Set by [`request_stop`]; unlike a signal it is not cleared when a launch starts, so a stop
/// asked for just before the launch is not lost.
static STOP_REQUESTED: AtomicBool = AtomicBool::new(false);

/// Takes the signal recorded since the last call (0: none); a requested stop reads as SIGTERM.
pub(super) fn take_signal() -> i32 {
    if STOP_REQUESTED.swap(false, Ordering::SeqCst) {
        return SIGTERM;
    }
    SIGNALLED.swap(0, Ordering::SeqCst) as i32
}

/// Stops the running (or the next) launch as SIGTERM would: an agent whose job ended or whose
/// controller was lost stops its ranks this way.
pub(super) fn request_stop() {
    STOP_REQUESTED.store(true, Ordering::SeqCst);
}

/// As [`request_stop`], and this process is being cancelled (its front end is gone).
pub(super) fn request_cancel() {
    CANCELLED.store(true, Ordering::SeqCst);
    request_stop();
}

/// Whether this process was cancelled: SIGINT/SIGTERM during a launch, or [`request_cancel`].
pub(super) fn cancelled() -> bool {
    CANCELLED.load(Ordering::SeqCst)
}

fn register() {
    for sig in [SIGINT, SIGTERM] {
        // Registration fails only for forbidden signals; these two are not. Without a
        // handler the signal keeps its default action, which is no worse than before.
        let _ = flag::register_conditional_default(sig, Arc::clone(&IDLE));
        let _ = flag::register_usize(sig, Arc::clone(&SIGNALLED), sig as usize);
        let _ = flag::register(sig, Arc::clone(&CANCELLED));
    }
}

pub(super) struct SignalGuard;

impl SignalGuard {
    pub(super) fn install() -> SignalGuard {
        let mut active = ACTIVE.lock().unwrap_or_else(|p| p.into_inner());
        if *active == 0 {
            SIGNALLED.store(0, Ordering::SeqCst);
            REGISTERED.get_or_init(register);
            IDLE.store(false, Ordering::SeqCst);
        }
        *active += 1;
        SignalGuard
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        let mut active = ACTIVE.lock().unwrap_or_else(|p| p.into_inner());
        *active -= 1;
        if *active == 0 {
            IDLE.store(true, Ordering::SeqCst);
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
