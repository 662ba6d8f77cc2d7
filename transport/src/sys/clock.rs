//! A coarse monotonic clock (`CLOCK_MONOTONIC_COARSE`: the kernel's tick, a few milliseconds)
//! for checks due every tens of milliseconds but asked about on every progress pass (the shm
//! provider's liveness check, the runtime's failure check after each poll). A read is the
//! tick the kernel last stored, no time-stamp counter: 26 ns against `Instant::now`'s 126 ns
//! on the 2-core VM while it was loaded. Also the CPU time a process or thread has used,
//! through glibc (whose vDSO lookup Valgrind follows, unlike rustix's own).

use std::time::Duration;

/// A reading of the coarse clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct CoarseInstant(Duration);

impl CoarseInstant {
    /// Now, to the kernel's last tick. Linux's clocks do not fail on a valid pointer; were it to,
    /// the fine clock (the same origin) is read instead.
    pub fn now() -> CoarseInstant {
        CoarseInstant(
            read(libc::CLOCK_MONOTONIC_COARSE).or_else(|| read(libc::CLOCK_MONOTONIC)).unwrap_or_default(),
        )
    }

    /// Time since `self`, to the tick (zero if the clock reads earlier).
    pub fn elapsed(&self) -> Duration {
        CoarseInstant::now().0.saturating_sub(self.0)
    }
}

/// Whose CPU time [`cpu_time`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuClock {
    /// Every thread of this process.
    Process,
    /// The calling thread.
    Thread,
}

/// CPU time used so far by this process or thread (zero should the clock fail).
pub fn cpu_time(whose: CpuClock) -> Duration {
    let clock = match whose {
        CpuClock::Process => libc::CLOCK_PROCESS_CPUTIME_ID,
        CpuClock::Thread => libc::CLOCK_THREAD_CPUTIME_ID,
    };
    read(clock).unwrap_or_default()
}

fn read(clock: libc::clockid_t) -> Option<Duration> {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a live timespec the call writes; `clock` is one of Linux's clock ids.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    (rc == 0).then(|| Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_coarse_clock_keeps_up_with_the_fine_one_to_a_tick() {
        // Both readings are truncated to a tick: the interval is off by less than one (4 ms
        // at the usual 250 Hz, 10 ms at 100 Hz).
        let tick = Duration::from_millis(10);
        let (coarse, fine) = (CoarseInstant::now(), std::time::Instant::now());
        std::thread::sleep(Duration::from_millis(30));
        let (c, f) = (coarse.elapsed(), fine.elapsed());
        assert!(c <= f + tick && c + tick >= f, "coarse {c:?}, fine {f:?}");
        assert!(c >= Duration::from_millis(30) - tick, "coarse {c:?} after a 30 ms sleep");
    }

    #[test]
    fn cpu_time_counts_work_not_sleep() {
        let (process, thread) = (cpu_time(CpuClock::Process), cpu_time(CpuClock::Thread));
        std::thread::sleep(Duration::from_millis(30));
        let slept = cpu_time(CpuClock::Thread) - thread;
        assert!(slept < Duration::from_millis(20), "a 30 ms sleep cost {slept:?} of CPU");
        // Spin until the thread clock shows 30 ms of work; a loaded machine only makes that
        // take longer, so the bound is on wall time, generously.
        let (start, mut x) = (std::time::Instant::now(), 0u64);
        let mut spun = Duration::ZERO;
        while spun < Duration::from_millis(30) && start.elapsed() < Duration::from_secs(20) {
            for _ in 0..10_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            spun = cpu_time(CpuClock::Thread) - thread;
        }
        assert!(spun >= Duration::from_millis(30), "20 s of spinning counted {spun:?}");
        assert!(cpu_time(CpuClock::Process) >= process + spun, "the process counts its threads");
    }
}
