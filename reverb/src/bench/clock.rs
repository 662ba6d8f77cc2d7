//! Cheap per-iteration timestamps for latency loops. `Instant::now()` costs about 24 ns here,
//! which would be a third of a shared-memory hop; the TSC costs a few ns. Ticks are converted
//! with a rate measured against `Instant` over the same loop (perftest does the same with
//! cycles).

use std::time::{Duration, Instant};

/// A raw timestamp: TSC ticks on x86_64, nanoseconds since an anchor elsewhere.
#[inline(always)]
pub fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC has no preconditions on x86_64 and only reads the counter.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        use std::sync::OnceLock;
        static ANCHOR: OnceLock<Instant> = OnceLock::new();
        ANCHOR.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// Measures the tick rate over a span of work: `start` before it, `to_durations` after it.
pub struct Calibration {
    instant: Instant,
    ticks: u64,
}

impl Calibration {
    pub fn start() -> Calibration {
        Calibration { instant: Instant::now(), ticks: ticks() }
    }

    /// Converts tick deltas taken during the span into durations.
    pub fn to_durations(&self, deltas: &[u64]) -> Vec<Duration> {
        let elapsed = self.instant.elapsed().as_secs_f64();
        let ticks = ticks().saturating_sub(self.ticks).max(1) as f64;
        let secs_per_tick = elapsed / ticks;
        deltas.iter().map(|&d| Duration::from_secs_f64(d as f64 * secs_per_tick)).collect()
    }
}
