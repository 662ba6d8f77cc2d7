//! What a run measures: the operation, the roles, the wait style, [`Params`] and the size list.

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use reverb_transport::config::parse_size;
use reverb_transport::{ProviderKind, WaitMode};

/// The operation a test measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Op {
    Put,
    #[value(name = "put_imm", alias = "put-imm")]
    PutImm,
    Get,
    Send,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Put => "put",
            Op::PutImm => "put_imm",
            Op::Get => "get",
            Op::Send => "send",
        }
    }
}

/// Who does what in a two-rank test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Rank 0: posts first, times, prints.
    Initiator,
    /// Rank 1: answers.
    Responder,
}

/// How loops wait for completions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitStyle {
    /// `poll()` in a spin loop: lowest latency, one busy core per side.
    BusyPoll,
    /// The provider's `wait()` in its configured mode (poll, event or hybrid).
    Provider(WaitMode),
}

/// Everything a measured test needs to know.
#[derive(Clone, Debug)]
pub struct Params {
    pub op: Op,
    pub sizes: Vec<usize>,
    pub iters: Option<u64>,
    pub warmup: Option<u64>,
    /// Bandwidth: operations kept outstanding.
    pub window: usize,
    /// Signal every M-th RMA operation (the others are `Signal::No`).
    pub cq_mod: usize,
    pub wait: WaitStyle,
    /// Bound of every single wait.
    pub timeout: Duration,
    pub json: bool,
    pub progress: bool,
    pub verbose: bool,
    /// `--provider`, overriding `REVERB_PROVIDER`.
    pub provider: Option<ProviderKind>,
    /// Ranks per simulated node of the self-launched job (default: 2 for shm, 1 for verbs).
    pub ranks_per_node: Option<u32>,
    /// Bound of the whole self-launched job.
    pub job_timeout: Duration,
    /// Core of rank 0 and of rank 1 (`--cores 0,1`); empty: not pinned.
    pub cores: Vec<usize>,
    /// `--pair A,B`: the ranks that measure (A initiates); others stand by.
    pub pair: (u32, u32),
    /// `--log P`: measure send through a `LoggedEndpoint` under protocol P (see `logged`).
    pub log: Option<reverb_logger::LogMode>,
    /// `--logger PLACEMENT`: node logger cores for the `--log` job.
    pub logger: reverb_logger::core::Placement,
    /// `--recv`: named or wildcard receives in the `--log` loops.
    pub recv: crate::bench::logged::RecvKind,
    /// `--runtime`: measure send through the runtime (see `runtime`).
    pub runtime: bool,
}

impl Params {
    pub fn max_size(&self) -> usize {
        self.sizes.iter().copied().max().unwrap_or(0)
    }

    /// (measured, warm-up) iterations of a latency test: at most about 1 GiB moved per size.
    pub fn lat_counts(&self, size: usize) -> (u64, u64) {
        let iters = self.iters.unwrap_or_else(|| ((1u64 << 30) / size as u64).clamp(100, 10_000));
        (iters, self.warmup.unwrap_or_else(|| (iters / 10).clamp(10, 1000)))
    }

    /// (measured, warm-up) operations of a bandwidth test: about 2 GiB moved per size.
    pub fn bw_counts(&self, size: usize) -> (u64, u64) {
        let iters = self.iters.unwrap_or_else(|| ((2u64 << 30) / size as u64).clamp(200, 100_000));
        (iters, self.warmup.unwrap_or_else(|| (iters / 10).clamp(self.window as u64, 10_000)))
    }
}

/// Parses `2-8M` (every power of two from 2 to 8 MiB) or a list `8,4k,64k,1M`.
pub fn parse_sizes(spec: &str) -> Result<Vec<usize>> {
    let spec = spec.trim();
    let sizes = if spec.contains(',') || !spec.contains('-') {
        spec.split(',')
            .map(|s| parse_size(s).with_context(|| format!("--sizes {spec:?}")))
            .collect::<Result<Vec<_>>>()?
    } else {
        let (lo, hi) =
            spec.split_once('-').ok_or_else(|| anyhow!("--sizes {spec:?}: expected LO-HI or a list"))?;
        let lo = parse_size(lo).with_context(|| format!("--sizes {spec:?}"))?;
        let hi = parse_size(hi).with_context(|| format!("--sizes {spec:?}"))?;
        if lo == 0 || lo > hi {
            bail!("--sizes {spec:?}: the range must satisfy 1 <= LO <= HI");
        }
        let mut sizes = vec![lo];
        let mut next = lo.next_power_of_two();
        if next == lo {
            next = lo.saturating_mul(2);
        }
        while next <= hi {
            sizes.push(next);
            next = next.saturating_mul(2);
        }
        sizes
    };
    if let Some(bad) = sizes.iter().find(|&&s| s == 0 || s > 1 << 30) {
        bail!("--sizes {spec:?}: size {bad} is outside 1..=1G");
    }
    Ok(sizes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_ranges_are_powers_of_two() {
        assert_eq!(parse_sizes("2-16").unwrap(), vec![2, 4, 8, 16]);
        assert_eq!(parse_sizes("2-8M").unwrap().len(), 23);
        assert_eq!(parse_sizes("3-16").unwrap(), vec![3, 4, 8, 16]);
        assert_eq!(parse_sizes("8,4k,64k,1M").unwrap(), vec![8, 4096, 65536, 1 << 20]);
        assert_eq!(parse_sizes("4k").unwrap(), vec![4096]);
    }

    #[test]
    fn bad_sizes_are_errors() {
        for bad in ["", "0-8", "8-2", "2-x", "8,,4", "2g", "1-2-3"] {
            assert!(parse_sizes(bad).is_err(), "{bad:?} should fail");
        }
    }
}
