//! perftest-style latency and bandwidth statistics.

use std::time::Duration;

use anyhow::{bail, Result};

pub const MIB: f64 = 1024.0 * 1024.0;

/// perftest-style latency statistics in microseconds.
#[derive(Clone, Debug)]
pub struct LatStats {
    pub size: usize,
    pub iters: usize,
    pub min_us: f64,
    pub typical_us: f64,
    pub avg_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

impl LatStats {
    /// `halve`: the samples are round trips and the report is half of each (ping-pong).
    pub fn from_samples(size: usize, samples: &[Duration], halve: bool) -> Result<LatStats> {
        if samples.is_empty() {
            bail!("no latency samples for {size} bytes");
        }
        let scale = if halve { 0.5e6 } else { 1e6 };
        let mut us: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * scale).collect();
        us.sort_by(f64::total_cmp);
        let n = us.len();
        let p99 = ((n as f64 * 0.99).ceil() as usize).clamp(1, n) - 1;
        Ok(LatStats {
            size,
            iters: n,
            min_us: us[0],
            typical_us: us[n / 2],
            avg_us: us.iter().sum::<f64>() / n as f64,
            p99_us: us[p99],
            max_us: us[n - 1],
        })
    }
}

#[derive(Clone, Debug)]
pub struct BwStats {
    pub size: usize,
    pub iters: u64,
    pub window: usize,
    pub cq_mod: usize,
    pub avg_mib_s: f64,
    /// Best of `PEAK_SLICES` equal slices of the run (arrivals at the target for send,
    /// completions at the initiator for put, put_imm and get).
    pub peak_mib_s: f64,
    pub msg_rate_mps: f64,
    pub elapsed: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_statistics() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        let s = LatStats::from_samples(8, &samples, true).unwrap();
        assert_eq!(s.min_us, 0.5);
        assert_eq!(s.max_us, 50.0);
        assert_eq!(s.p99_us, 49.5);
        assert!((s.avg_us - 25.25).abs() < 1e-9);
        assert!(LatStats::from_samples(8, &[], false).is_err());
    }
}
