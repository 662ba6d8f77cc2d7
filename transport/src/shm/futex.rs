//! Futex wait/wake on a word in shared memory (not FUTEX_PRIVATE: waiters and wakers are in
//! different processes).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use rustix::thread::futex;

/// Sleeps while `*word == expected`, at most `timeout`. Spurious returns are fine: callers loop.
pub fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = futex::Timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as i64,
        tv_nsec: i64::from(timeout.subsec_nanos()),
    };
    // Errors (EAGAIN, ETIMEDOUT, EINTR) are all "return and re-check".
    let _ = futex::wait(word, futex::Flags::empty(), expected, Some(&ts));
}

/// Wakes every process sleeping on `word`.
pub fn wake_all(word: &AtomicU32) {
    let _ = futex::wake(word, futex::Flags::empty(), i32::MAX as u32);
}

/// Arms a doorbell for a sleep: its value made odd ("a sleeper wants a ring"). The value to
/// sleep on, or None when a producer rang it meanwhile (do not sleep: look again).
pub fn arm(doorbell: &AtomicU32) -> Option<u32> {
    let seen = doorbell.load(Ordering::Acquire);
    if seen & 1 == 1 {
        return Some(seen);
    }
    let armed = seen.wrapping_add(1);
    doorbell.compare_exchange(seen, armed, Ordering::SeqCst, Ordering::Acquire).ok().map(|_| armed)
}

/// Rings an armed doorbell (odd to even); true for the one caller that did and so must wake
/// the sleeper, false when it was not armed or another producer rang it first.
pub fn ring(doorbell: &AtomicU32) -> bool {
    let value = doorbell.load(Ordering::Relaxed);
    value & 1 == 1
        && doorbell
            .compare_exchange(value, value.wrapping_add(1), Ordering::Release, Ordering::Relaxed)
            .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One ring per arming: the first producer after a sleeper armed wakes it, later ones
    /// (until it arms again) make no wake.
    #[test]
    fn an_armed_doorbell_rings_once() {
        let bell = AtomicU32::new(0);
        assert!(!ring(&bell), "nobody armed it");
        let armed = arm(&bell).expect("armed");
        assert_eq!(armed & 1, 1);
        assert_eq!(arm(&bell), Some(armed), "arming twice keeps the value to sleep on");
        assert!(ring(&bell), "the first producer wakes");
        assert!(!ring(&bell), "the next ones do not");
        let again = arm(&bell).expect("armed again");
        assert_ne!(again, armed);
        assert!(ring(&bell));
        bell.store(u32::MAX, Ordering::Relaxed);
        assert!(ring(&bell), "wraps");
        assert_eq!(bell.load(Ordering::Relaxed), 0);
    }
}
