//! The endpoints a CQ or a counter reports for. Progress is manual: reading either progresses
//! them, and a blocking read sleeps in one of their providers a bounded slice at a time, up
//! to the consumer's timeout.

use std::cell::RefCell;
use std::ffi::c_int;
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

use crate::core::EpCore;

/// Longest a blocked read sleeps before it looks again.
pub const SLICE: Duration = Duration::from_millis(1);

/// Weak links to the endpoints (closing an endpoint drops it from here).
#[derive(Default)]
pub(crate) struct Bound(Vec<Weak<RefCell<EpCore>>>);

impl Bound {
    pub(crate) fn add(&mut self, ep: &Rc<RefCell<EpCore>>) {
        self.0.push(Rc::downgrade(ep));
    }

    /// Progresses every live endpoint not busy in a call further up the stack.
    pub(crate) fn progress(&mut self) {
        self.0.retain(|ep| ep.strong_count() > 0);
        for ep in self.0.iter().filter_map(Weak::upgrade) {
            if let Ok(mut ep) = ep.try_borrow_mut() {
                ep.progress();
            }
        }
    }

    /// Sleeps at most `slice` in the first live endpoint's provider (an arrival wakes it).
    pub(crate) fn block(&self, slice: Duration) {
        match self.0.iter().find_map(Weak::upgrade) {
            Some(ep) => match ep.try_borrow_mut() {
                Ok(mut ep) => ep.block(slice),
                Err(_) => std::thread::sleep(slice),
            },
            None => std::thread::sleep(slice),
        }
    }
}

/// The end of a wait of `timeout` ms; None for a negative timeout (no end).
pub(crate) fn deadline(timeout: c_int) -> Option<Instant> {
    u64::try_from(timeout).ok().map(|ms| Instant::now() + Duration::from_millis(ms))
}

/// The next slice to sleep before `deadline`; None once it has passed.
pub(crate) fn next_slice(deadline: Option<Instant>) -> Option<Duration> {
    match deadline.map(|d| d.saturating_duration_since(Instant::now())) {
        Some(Duration::ZERO) => None,
        Some(left) => Some(left.min(SLICE)),
        None => Some(SLICE),
    }
}
