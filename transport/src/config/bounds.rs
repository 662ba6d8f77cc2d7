//! The allowed range of every numeric `REVERB_*` variable (forms `int`, `size`, `us`, `ms`,
//! `s`), next to the registry: `reverb info --config` prints them, [`super::registry::Var::check`]
//! enforces them, and the `reverb` binary refuses an out-of-range value before it starts.
//!
//! The readers keep their own finer checks (powers of two, multiples of 8, cross-variable
//! rules); a bound here only keeps every value inside what can be allocated and waited for.

use std::time::Duration;

/// An inclusive range in the variable's unit: a count for `int`, bytes for `size`,
/// microseconds for the durations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    /// The least value allowed.
    pub min: u64,
    /// The greatest value allowed.
    pub max: u64,
}

const fn b(min: u64, max: u64) -> Bound {
    Bound { min, max }
}

const K: u64 = 1 << 10;
const M: u64 = 1 << 20;
const G: u64 = 1 << 30;
/// Microseconds.
const MS: u64 = 1_000;
const SEC: u64 = 1_000_000;
const HOUR: u64 = 3600 * SEC;
const DAY: u64 = 24 * HOUR;
/// The most ranks a job may have (`REVERB_SIZE`, ranks per node, virtual ranks).
pub const MAX_RANKS: u64 = 1 << 20;
/// The most cpus an affinity mask holds (glibc's CPU_SETSIZE).
pub const MAX_CPU: u64 = 1023;

/// `(name, bound)` for every numeric variable; `registry`'s test checks that none is missing.
#[rustfmt::skip]
pub static BOUNDS: &[(&str, Bound)] = &[
    ("REVERB_RNDV_THRESH", b(64, M)),
    ("REVERB_RING_SLOTS", b(2, 64 * K)),
    ("REVERB_SHM_FIFO_SLOTS", b(2, 64 * K)),
    ("REVERB_WAIT_SPIN_US", b(0, 10 * SEC)),
    ("REVERB_HOST_CPUS", b(1, MAX_CPU + 1)),
    ("REVERB_PEER_TIMEOUT_MS", b(MS, HOUR)),
    ("REVERB_VERBS_PORT", b(1, 255)),
    ("REVERB_VERBS_GID_INDEX", b(0, 255)),
    ("REVERB_VERBS_TIMEOUT", b(0, 31)),
    ("REVERB_VERBS_RETRY", b(0, 6)),
    ("REVERB_VERBS_SRQ_DEPTH", b(1, M)),
    ("REVERB_VERBS_CONNECT_TIMEOUT_MS", b(MS, HOUR)),
    ("REVERB_RANK", b(0, MAX_RANKS - 1)),
    ("REVERB_SIZE", b(1, MAX_RANKS)),
    ("REVERB_NODE", b(0, MAX_RANKS - 1)),
    ("REVERB_LOCAL_RANK", b(0, MAX_RANKS - 1)),
    ("REVERB_RANKS_PER_NODE", b(1, MAX_RANKS)),
    ("REVERB_INCARNATION", b(0, u32::MAX as u64)),
    ("REVERB_BOOT_TIMEOUT_S", b(MS, DAY)),
    ("REVERB_LOG_RING_BYTES", b(64, 64 * G)),
    ("REVERB_LOG_REORDER_WINDOW", b(1, 16 * M)),
    ("REVERB_LOG_MAX_MESSAGE", b(1, 16 * G)),
    ("REVERB_LOG_SEND_LOG_BYTES", b(1, 1024 * G)),
    ("REVERB_LOG_DET_LOG_ENTRIES", b(1, 4 * G)),
    ("REVERB_LOG_MAX_UNSTABLE", b(1, 4 * G)),
    ("REVERB_LOG_DURABLE_TIMEOUT_MS", b(MS, HOUR)),
    ("REVERB_LOGGER_LANES", b(1, MAX_RANKS)),
    ("REVERB_LOGGER_LANE_BYTES", b(64, 4 * G)),
    ("REVERB_LOGGER_DETQ_ENTRIES", b(2, 64 * M)),
    ("REVERB_LOGGER_RING_BYTES", b(128, 64 * G)),
    ("REVERB_HEARTBEAT_MS", b(20 * MS, HOUR)),
    ("REVERB_LOGGER_CPU", b(0, MAX_CPU)),
    ("REVERB_LOGGER_STALL_MS", b(MS, DAY)),
    ("REVERB_LOGGER_ATTACH_TIMEOUT_S", b(MS, DAY)),
    ("REVERB_LOGGER_RESPAWN", b(0, u32::MAX as u64)),
    ("REVERB_LOGGER_REJOIN_TIMEOUT_S", b(MS, DAY)),
    ("REVERB_AGENT_HEARTBEAT_MS", b(MS, HOUR)),
    ("REVERB_AGENT_TIMEOUT_S", b(MS, DAY)),
    ("REVERB_LOGGER_FAULT_STARTUP", b(0, MAX_RANKS - 1)),
    ("REVERB_VIRTUAL_RANKS", b(1, MAX_RANKS)),
    ("REVERB_OBJECT_CPU", b(0, MAX_CPU)),
    ("REVERB_OBJECT_HOME_CPU", b(0, MAX_CPU)),
    ("REVERB_CKPT_SLOT_BYTES", b(64, 64 * G)),
    ("REVERB_DETECT_MS", b(MS / 1000, HOUR)),
    ("REVERB_DETECT_GRACE_MS", b(MS / 1000, HOUR)),
    ("REVERB_REJOIN_TIMEOUT_MS", b(MS / 1000, DAY)),
    ("REVERB_RECV_TIMEOUT_MS", b(MS / 1000, 30 * DAY)),
    ("REVERB_BENCH_MEM_MUTE", b(0, MAX_RANKS - 1)),
    ("REVERB_TEST_TIME_SCALE", b(1, 1000)),
    ("REVERB_TEST_SEED", b(0, u64::MAX)),
    ("REVERB_CHAOS_TRIALS", b(1, 1_000_000)),
    ("REVERB_CHAOS_SEED", b(0, u64::MAX)),
    ("REVERB_CHAOS_JOBS", b(1, 64)),
    ("REVERB_MPICH_SHARDS", b(1, 99)),
    ("REVERB_CHAOS_TIMEOUT", b(1, 86_400)),
    ("REVERB_SLURM_CPUS", b(1, 4096)),
    ("REVERB_SLURM_TIMEOUT", b(1, 86_400)),
];

/// The bound of variable `name`, if it is numeric.
pub fn bound_of(name: &str) -> Option<Bound> {
    BOUNDS.iter().find(|(n, _)| *n == name).map(|&(_, bound)| bound)
}

impl Bound {
    /// Whether `value` (in the variable's unit) is inside.
    pub fn contains(self, value: u64) -> bool {
        (self.min..=self.max).contains(&value)
    }

    /// A duration inside (the durations' bounds are in microseconds; sub-microsecond parts
    /// round up, so `0.5us` is not taken for zero).
    pub fn contains_duration(self, d: Duration) -> bool {
        let micros = d.as_nanos().div_ceil(1000);
        micros >= self.min as u128 && micros <= self.max as u128
    }

    /// `64..=1m`, `1ms..=1h`: the range in the grammar of `form`.
    pub fn describe(self, form: &str) -> String {
        let show = |v: u64| match form {
            "size" => show_size(v),
            "us" | "ms" | "s" => show_micros(v),
            _ => v.to_string(),
        };
        format!("{}..={}", show(self.min), show(self.max))
    }
}

fn show_size(v: u64) -> String {
    for (shift, suffix) in [(30, "g"), (20, "m"), (10, "k")] {
        if v != 0 && v.is_multiple_of(1 << shift) {
            return format!("{}{suffix}", v >> shift);
        }
    }
    v.to_string()
}

fn show_micros(v: u64) -> String {
    for (unit, suffix) in [(HOUR, "h"), (60 * SEC, "min"), (SEC, "s"), (MS, "ms")] {
        if v != 0 && v.is_multiple_of(unit) {
            return format!("{}{suffix}", v / unit);
        }
    }
    format!("{v}us")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_read_in_the_grammar() {
        assert_eq!(b(64, M).describe("size"), "64..=1m");
        assert_eq!(b(MS, HOUR).describe("ms"), "1ms..=1h");
        assert_eq!(b(1, DAY).describe("s"), "1us..=24h");
        assert_eq!(b(0, 31).describe("int"), "0..=31");
        assert!(b(MS, HOUR).contains_duration(Duration::from_millis(1)));
        assert!(!b(MS, HOUR).contains_duration(Duration::from_micros(999)));
        assert!(b(1, 2).contains_duration(Duration::from_nanos(1)));
    }
}
