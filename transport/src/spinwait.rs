//! The clock and the spin-or-sleep choice of a wait that polls: [`Provider::wait_until`]'s,
//! and a caller's own polling loop (a receive that claims arrivals, the logged endpoint's
//! waits, MPI_Wait) with the same behaviour.
//!
//! [`Provider::wait_until`]: crate::Provider::wait_until

use std::time::{Duration, Instant};

use crate::bootstrap::JobInfo;
use crate::config::{TransportConfig, WaitMode};
use crate::error::{Result, TransportError};

/// Spin rounds per clock read while spinning: a read costs ~18 ns on the 2-core machine, more
/// than a round of polling.
const CLOCK_EVERY: u32 = 32;
/// Longest sleep in one `block`, so liveness checks keep running while asleep.
const SLEEP_SLICE: Duration = Duration::from_millis(10);
/// A sleep that came back sooner than this did not sleep: the provider had something queued
/// (for another owner, say) and returned at once.
const FUTILE_SLEEP: Duration = Duration::from_micros(2);

/// One wait's state: when it started, its bound and how it waits (`REVERB_WAIT_MODE`).
pub struct SpinWait {
    /// Set at the first clock read: a wait answered before it never reads the clock.
    start: Option<Instant>,
    timeout: Duration,
    mode: WaitMode,
    spin: Duration,
    /// More ranks on this node than CPUs: spinning takes a core a peer needs.
    oversubscribed: bool,
    /// Rounds left before the next clock read.
    unclocked: u32,
    /// `busy` rounds left before its next clock read (its own count: it leaves the idle
    /// rounds' cadence alone).
    busy_unclocked: u32,
    /// When the last `Sleep` was handed out (time since `start`), until the clock is read.
    asleep_at: Option<Duration>,
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
        let oversubscribed = config.oversubscribed;
        let sleeps_first = config.wait_mode == WaitMode::Event;
        SpinWait {
            start: None,
            timeout,
            mode: config.wait_mode,
            spin: config.spin,
            oversubscribed,
            unclocked: if sleeps_first { 0 } else { CLOCK_EVERY - 1 },
            busy_unclocked: CLOCK_EVERY - 1,
            asleep_at: None,
        }
    }

    /// After a round that found nothing: spin or sleep, or `Timeout` once the bound passed.
    /// A zero timeout ends on the first round. The clock is read every `CLOCK_EVERY`th
    /// round while spinning (a receive answered within a few rounds never reads it: the bound
    /// then counts from that read, a microsecond late), and after each sleep. A sleep that
    /// returned at once counts as spinning, so a provider whose `block` keeps returning
    /// (completions queued for another owner) costs one clock read per `CLOCK_EVERY` rounds,
    /// not one per round. Oversubscribed, spinning yields the core every `CLOCK_EVERY / 2`
    /// rounds: yielding at every round made IMB's 8-byte Allreduce on 4 ranks on 2 cores
    /// about 2x slower (each rank switched in only to find nothing and switch out again);
    /// hybrid still spins (yielding) through its budget before it sleeps.
    #[inline]
    pub fn idle(&mut self) -> Result<Idle> {
        if self.timeout.is_zero() {
            return Err(TransportError::Timeout(self.timeout));
        }
        if self.unclocked > 0 {
            self.unclocked -= 1;
            // Oversubscribed, a yield at the clock read and halfway between: a yield costs a
            // context switch, and the peer running on another core mostly answers sooner.
            if self.oversubscribed && self.unclocked == CLOCK_EVERY / 2 {
                std::thread::yield_now();
            }
            // no pause otherwise: a polling round is long enough, and a pause (~140 cycles)
            // delays noticing an arrival
            return Ok(Idle::Spin);
        }
        let elapsed = self.start.get_or_insert_with(Instant::now).elapsed();
        if elapsed >= self.timeout {
            return Err(TransportError::Timeout(self.timeout));
        }
        let futile = self.asleep_at.take().is_some_and(|at| elapsed.saturating_sub(at) < FUTILE_SLEEP);
        if futile || self.spinning(elapsed) {
            self.unclocked = CLOCK_EVERY - 1;
            if self.oversubscribed || futile {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
            return Ok(Idle::Spin);
        }
        self.asleep_at = Some(elapsed);
        Ok(Idle::Sleep((self.timeout - elapsed).min(SLEEP_SLICE)))
    }

    /// After a round that found something, but not what the wait is for (an arrival for
    /// another receive): no sleep, but the bound still counts, checked every `CLOCK_EVERY`th
    /// such round. A zero timeout ends here.
    #[inline]
    pub fn busy(&mut self) -> Result<()> {
        if self.timeout.is_zero() {
            return Err(TransportError::Timeout(self.timeout));
        }
        if self.busy_unclocked > 0 {
            self.busy_unclocked -= 1;
            return Ok(());
        }
        self.busy_unclocked = CLOCK_EVERY - 1;
        let elapsed = self.start.get_or_insert_with(Instant::now).elapsed();
        if elapsed >= self.timeout {
            return Err(TransportError::Timeout(self.timeout));
        }
        Ok(())
    }

    /// Whether a wait `elapsed` into its bound spins rather than sleeps.
    fn spinning(&self, elapsed: Duration) -> bool {
        match self.mode {
            WaitMode::Poll => true,
            WaitMode::Event => false,
            WaitMode::Hybrid => elapsed < self.spin,
        }
    }
}

/// Whether `ranks_on_host` ranks outnumber the host's CPUs for the job (`host_cpus`, see
/// [`TransportConfig::host_cpus`]; None: the CPUs this process may run on, its affinity and
/// cgroup quota): waits then yield or sleep instead of spinning
/// ([`TransportConfig::oversubscribed`]).
pub fn oversubscribed(ranks_on_host: u32, host_cpus: Option<u32>) -> bool {
    let cpus = match host_cpus {
        Some(n) => n as usize,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    ranks_on_host as usize > cpus
}

/// How many of `job`'s ranks share this host, as far as a provider that has not met its peers
/// knows: all of them on shm and loopback, else the launcher's ranks per node.
pub fn ranks_on_host(job: &JobInfo, single_host: bool) -> u32 {
    if single_host {
        job.size
    } else {
        job.ranks_per_node.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(wait_mode: WaitMode, spin: Duration, oversubscribed: bool) -> TransportConfig {
        TransportConfig { wait_mode, spin, oversubscribed, ..TransportConfig::default() }
    }

    /// Rounds until `idle` first asks for a sleep (`None` if it times out first).
    fn rounds_to_sleep(wait: &mut SpinWait) -> Option<u32> {
        for round in 1.. {
            match wait.idle() {
                Ok(Idle::Spin) => {}
                Ok(Idle::Sleep(_)) => return Some(round),
                Err(_) => return None,
            }
        }
        None
    }

    #[test]
    fn a_zero_timeout_ends_on_the_first_round() {
        for mode in [WaitMode::Poll, WaitMode::Event, WaitMode::Hybrid] {
            let mut wait = SpinWait::new(&config(mode, Duration::ZERO, false), Duration::ZERO);
            assert!(matches!(wait.idle(), Err(TransportError::Timeout(_))), "{mode:?}");
        }
    }

    #[test]
    fn polling_spins_until_the_bound_and_never_sleeps() {
        for oversubscribed in [false, true] {
            let cfg = config(WaitMode::Poll, Duration::from_secs(3600), oversubscribed);
            let mut wait = SpinWait::new(&cfg, Duration::from_millis(20));
            let start = Instant::now();
            loop {
                match wait.idle() {
                    Ok(Idle::Spin) => {}
                    Ok(Idle::Sleep(_)) => panic!("poll mode slept"),
                    Err(_) => break,
                }
            }
            let took = start.elapsed();
            // The deadline is checked every CLOCK_EVERY rounds: it fires, and soon after.
            assert!(took >= Duration::from_millis(20), "{took:?}");
            assert!(took < Duration::from_secs(5), "{took:?}");
        }
    }

    /// Spinning reads the clock only every `CLOCK_EVERY`th round; a real sleep is followed by
    /// a clock read (and another sleep) at once.
    #[test]
    fn hybrid_spins_a_clock_period_then_sleeps_after_each_real_sleep() {
        let mut wait =
            SpinWait::new(&config(WaitMode::Hybrid, Duration::ZERO, false), Duration::from_secs(5));
        assert_eq!(rounds_to_sleep(&mut wait), Some(CLOCK_EVERY));
        for _ in 0..3 {
            std::thread::sleep(FUTILE_SLEEP * 4);
            assert!(matches!(wait.idle(), Ok(Idle::Sleep(_))));
        }
    }

    /// A provider whose `block` returns at once must not turn the wait into a loop that reads
    /// the clock every round: it spins a clock period again before the next sleep.
    #[test]
    fn a_sleep_that_returned_at_once_counts_as_spinning() {
        // Tried a few times: a test thread descheduled between two rounds did sleep.
        let futile = (0..100).any(|_| {
            let cfg = config(WaitMode::Event, Duration::ZERO, false);
            let mut wait = SpinWait::new(&cfg, Duration::from_secs(5));
            assert_eq!(rounds_to_sleep(&mut wait), Some(1), "event mode sleeps at once");
            // This round reads the clock and spins, the next CLOCK_EVERY - 1 spin unclocked.
            rounds_to_sleep(&mut wait) == Some(CLOCK_EVERY + 1)
        });
        assert!(futile, "a sleep that took no time was followed by a sleep, not a spin");
    }

    #[test]
    fn event_mode_sleeps_in_slices_within_the_bound() {
        let mut wait = SpinWait::new(&config(WaitMode::Event, Duration::ZERO, false), Duration::from_secs(5));
        for _ in 0..3 {
            let Ok(Idle::Sleep(d)) = wait.idle() else { panic!("event mode spun") };
            assert!(d <= SLEEP_SLICE && d > Duration::ZERO);
            std::thread::sleep(FUTILE_SLEEP * 4);
        }
    }

    /// Oversubscribed, hybrid spins its budget too (yielding), then sleeps; alone, it spins.
    #[test]
    fn oversubscribed_hybrid_yields_through_its_budget_then_sleeps() {
        let spin = Duration::from_secs(3600);
        let mut alone = SpinWait::new(&config(WaitMode::Hybrid, spin, false), Duration::from_millis(5));
        assert_eq!(rounds_to_sleep(&mut alone), None, "spins its whole budget, up to the bound");
        let mut shared = SpinWait::new(&config(WaitMode::Hybrid, spin, true), Duration::from_millis(5));
        assert_eq!(rounds_to_sleep(&mut shared), None, "yields its whole budget, up to the bound");
        let brief = Duration::from_millis(2);
        let mut shared = SpinWait::new(&config(WaitMode::Hybrid, brief, true), Duration::from_secs(5));
        let start = Instant::now();
        assert!(rounds_to_sleep(&mut shared).is_some_and(|r| r > CLOCK_EVERY));
        assert!(start.elapsed() >= brief, "slept before its budget: {:?}", start.elapsed());
    }

    /// Every mode's bound fires even when `block` never sleeps (the caller ignores `Sleep`).
    #[test]
    fn the_bound_fires_when_sleeps_return_at_once() {
        for mode in [WaitMode::Poll, WaitMode::Event, WaitMode::Hybrid] {
            let mut wait = SpinWait::new(&config(mode, Duration::ZERO, false), Duration::from_millis(10));
            let start = Instant::now();
            while wait.idle().is_ok() {}
            let took = start.elapsed();
            assert!(took >= Duration::from_millis(10) && took < Duration::from_secs(5), "{mode:?}: {took:?}");
        }
    }

    /// Rounds that find only other arrivals never sleep, and still end at the bound.
    #[test]
    fn busy_rounds_end_at_the_bound() {
        let mut wait =
            SpinWait::new(&config(WaitMode::Hybrid, Duration::ZERO, false), Duration::from_millis(10));
        let start = Instant::now();
        while wait.busy().is_ok() {}
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(10) && took < Duration::from_secs(5), "{took:?}");
        let mut zero = SpinWait::new(&config(WaitMode::Poll, Duration::ZERO, false), Duration::ZERO);
        assert!(zero.busy().is_err());
        // Event mode still sleeps at its first idle round after busy ones.
        let mut event =
            SpinWait::new(&config(WaitMode::Event, Duration::ZERO, false), Duration::from_secs(5));
        for _ in 0..CLOCK_EVERY * 2 {
            event.busy().unwrap();
        }
        assert!(matches!(event.idle(), Ok(Idle::Sleep(_))));
    }

    #[test]
    fn more_ranks_on_a_node_than_cpus_is_oversubscribed() {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
        assert!(!oversubscribed(1, None));
        assert!(!oversubscribed(cpus, None));
        assert!(oversubscribed(cpus + 1, None));
        // The host's count, not this process's: a rank pinned to one of 16 cores is not
        // oversubscribed with 8 ranks on the host, and 3 ranks on 2 CPUs are.
        assert!(!oversubscribed(8, Some(16)));
        assert!(oversubscribed(3, Some(2)));
        let job = JobInfo {
            rank: 0,
            size: 8,
            node: 0,
            local_rank: 0,
            ranks_per_node: 2,
            job_id: String::new(),
            incarnation: 0,
        };
        assert_eq!(ranks_on_host(&job, true), 8, "simulated nodes on one host share its CPUs");
        assert_eq!(ranks_on_host(&job, false), 2);
    }
}
