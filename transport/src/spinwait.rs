//! The clock and the spin-or-sleep choice of a wait that polls: [`Provider::wait_until`]'s,
//! and a caller's own polling loop (a receive that claims arrivals) with the same behaviour.
//!
//! [`Provider::wait_until`]: crate::Provider::wait_until

use std::time::{Duration, Instant};

use crate::config::{TransportConfig, WaitMode};
use crate::error::{Result, TransportError};

/// Spin rounds per clock read while spinning: a read costs ~18 ns on the 2-core machine, more
/// than a round of polling.
const CLOCK_EVERY: u32 = 32;
/// Longest sleep in one `block`, so liveness checks keep running while asleep.
const SLEEP_SLICE: Duration = Duration::from_millis(10);

/// One wait's state: when it started, its bound and how it waits (`REVERB_WAIT_MODE`).
pub struct SpinWait {
    /// Set at the first clock read: a wait answered before it never reads the clock.
    start: Option<Instant>,
    timeout: Duration,
    mode: WaitMode,
    spin: Duration,
    rounds: u32,
    /// Slept once: read the clock every round from here.
    slept: bool,
}

/// What a wait does after a round that found nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idle {
    /// Poll again.
    Spin,
    /// Sleep (`Provider::block`) at most this long, then poll again.
    Sleep(Duration),
}

impl SpinWait {
    /// A wait bounded by `timeout`, counted from its first clock read (see `idle`).
    pub fn new(config: &TransportConfig, timeout: Duration) -> SpinWait {
        SpinWait { start: None, timeout, mode: config.wait_mode, spin: config.spin, rounds: 0, slept: false }
    }

    /// After a round that found nothing: spin or sleep, or `Timeout` once the bound passed.
    /// A zero timeout ends on the first round. Spinning reads the clock every `CLOCK_EVERY`th
    /// round, its start included (a receive answered within a few rounds never reads it: the
    /// bound then counts from that read, a microsecond late); an event wait, or one that
    /// slept already, every round.
    #[inline]
    pub fn idle(&mut self) -> Result<Idle> {
        if self.timeout.is_zero() {
            return Err(TransportError::Timeout(self.timeout));
        }
        self.rounds = self.rounds.wrapping_add(1);
        if !self.rounds.is_multiple_of(CLOCK_EVERY) && !self.slept && self.mode != WaitMode::Event {
            // no pause: a polling round is long enough, and a pause (~140 cycles) delays noticing an arrival
            return Ok(Idle::Spin);
        }
        let elapsed = self.start.get_or_insert_with(Instant::now).elapsed();
        if elapsed >= self.timeout {
            return Err(TransportError::Timeout(self.timeout));
        }
        let spinning = match self.mode {
            WaitMode::Poll => true,
            WaitMode::Event => false,
            WaitMode::Hybrid => elapsed < self.spin,
        };
        if spinning {
            std::hint::spin_loop();
            return Ok(Idle::Spin);
        }
        self.slept = true;
        Ok(Idle::Sleep((self.timeout - elapsed).min(SLEEP_SLICE)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(wait_mode: WaitMode) -> TransportConfig {
        TransportConfig { wait_mode, spin: Duration::from_secs(3600), ..TransportConfig::default() }
    }

    #[test]
    fn a_zero_timeout_ends_on_the_first_round() {
        let mut wait = SpinWait::new(&config(WaitMode::Poll), Duration::ZERO);
        assert!(matches!(wait.idle(), Err(TransportError::Timeout(_))));
    }

    #[test]
    fn polling_spins_until_the_bound_and_never_sleeps() {
        let mut wait = SpinWait::new(&config(WaitMode::Poll), Duration::from_millis(20));
        let start = Instant::now();
        loop {
            match wait.idle() {
                Ok(Idle::Spin) => {}
                Ok(Idle::Sleep(_)) => panic!("poll mode slept"),
                Err(_) => break,
            }
        }
        assert!(start.elapsed() >= Duration::from_millis(20));
    }

    /// Spinning reads the clock only every `CLOCK_EVERY`th round; once asleep, every round.
    #[test]
    fn hybrid_spins_a_clock_period_then_sleeps_every_round() {
        let cfg = TransportConfig {
            wait_mode: WaitMode::Hybrid,
            spin: Duration::ZERO,
            ..TransportConfig::default()
        };
        let mut wait = SpinWait::new(&cfg, Duration::from_secs(5));
        for round in 1..CLOCK_EVERY {
            assert_eq!(wait.idle().unwrap(), Idle::Spin, "round {round} read no clock");
        }
        for _ in 0..3 {
            assert!(matches!(wait.idle(), Ok(Idle::Sleep(_))));
        }
    }

    #[test]
    fn event_mode_sleeps_in_slices_within_the_bound() {
        let mut wait = SpinWait::new(&config(WaitMode::Event), Duration::from_secs(5));
        for _ in 0..3 {
            let Ok(Idle::Sleep(d)) = wait.idle() else { panic!("event mode spun") };
            assert!(d <= SLEEP_SLICE && d > Duration::ZERO);
        }
    }
}
