//! `reverb bench`: perftest-style latency and bandwidth tests over a provider, memcpy as the
//! physical reference, and memory per process against job size ([`mem`]).
//!
//! One shared engine ([`engine`]: parameters, the two-rank job, registered resources, the
//! measured loops, statistics, output) and thin mains per test ([`lat`], [`bw`], [`memcpy`]).

pub mod boot;
pub mod bw;
pub mod ckpt;
mod clock;
pub mod engine;
pub mod lat;
pub mod logged;
pub mod mem;
pub mod memcpy;
pub mod runtime;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use reverb_transport::{ProviderKind, WaitMode};

pub use engine::{Op, Params, Session, WaitStyle};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Test {
    /// Ping-pong latency (half the round trip; get: one full get).
    Lat,
    /// Windowed bandwidth and message rate.
    Bw,
    /// memcpy bandwidth, hot and cold buffers: the physical reference.
    Memcpy,
    /// Checkpoint throughput: buddy copy by one-sided writes, next to put bandwidth.
    Ckpt,
    /// Memory per process against job size: N ranks, an all-to-all, RSS / PSS / shm mapped.
    Mem,
    /// Bootstrap time and controller memory against job size (`--hosts` simulates hosts).
    Boot,
}

#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// Which test.
    #[arg(value_enum)]
    pub test: Test,
    /// Operation measured (lat, bw).
    #[arg(long, value_enum, default_value = "put")]
    pub op: Op,
    /// Message sizes: a range of powers of two `2-8M`, or a list `8,4k,64k,1M` (default:
    /// 2-8M; mem: 8, one all-to-all pass per size).
    #[arg(long)]
    pub sizes: Option<String>,
    /// mem, boot: job sizes in ranks, one job each (default: mem 17,65,257,1025 = peers + 1;
    /// boot 8,64,256,1024).
    #[arg(long)]
    pub ranks: Option<String>,
    /// boot: simulated hosts (distinct host names, ranks in blocks): auto takes tcp between
    /// them. 1..=1024.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub hosts: u32,
    /// Measured iterations per size, 1..=10000000 (default: scaled to the size).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=MAX_ITERS))]
    pub iters: Option<u64>,
    /// Warm-up iterations per size, not measured, 0..=10000000 (default: a tenth of the
    /// iterations).
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=MAX_ITERS))]
    pub warmup: Option<u64>,
    /// Bandwidth: operations kept outstanding, 1..=4096.
    #[arg(long, default_value_t = 64, value_parser = crate::usage::int::<usize>(1, MAX_WINDOW))]
    pub window: usize,
    /// Signal every M-th RMA operation; the others post `Signal::No`. 1..=--window.
    #[arg(long, default_value_t = 16, value_parser = crate::usage::int::<usize>(1, MAX_WINDOW))]
    pub cq_mod: usize,
    /// Provider (overrides REVERB_PROVIDER).
    #[arg(long, value_parser = parse_provider)]
    pub provider: Option<ProviderKind>,
    /// Wait through the provider's `wait` in this mode (poll, event, hybrid) instead of the
    /// default busy `poll()` loop. Put latency always spins on memory, as perftest does.
    #[arg(long, value_parser = parse_wait_mode)]
    pub wait_mode: Option<WaitMode>,
    /// Pin rank 0 and rank 1 to these two different cores (`--cores 0,1`; sched_setaffinity,
    /// as taskset), each in 0..=1023.
    #[arg(long, value_delimiter = ',', value_parser = crate::usage::int::<usize>(0, MAX_CPU))]
    pub cores: Vec<usize>,
    /// Ranks per simulated node of the self-launched job, 1..=2 (mem, boot: 1..=65536; default:
    /// 2 for shm, 1 for verbs).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=MAX_JOB_RANKS as i64))]
    pub ranks_per_node: Option<u32>,
    /// In a launched job of more than two ranks: the two that measure (`--pair 0,2`); the
    /// others open the provider with them and stand by. Default 0,1; each in 0..=65535.
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(0..MAX_JOB_RANKS as i64))]
    pub pair: Vec<u32>,
    /// Bound of any single wait, in milliseconds, 1..=3600000.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    pub timeout_ms: u64,
    /// Bound of the whole self-launched job, in seconds, 1..=604800 (a week).
    #[arg(long, default_value_t = 900, value_parser = clap::value_parser!(u64).range(1..=604_800))]
    pub job_timeout_s: u64,
    /// One JSON object per size on stdout instead of the table (mem: per job size and phase).
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// mem: CSV (a header, then a line per job size and phase) instead of the table.
    #[arg(long)]
    pub csv: bool,
    /// mem: also plot per-process PSS and the node's total against peers to this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// mem: run a job size even when its memory, projected from the smaller ones, exceeds 80 %
    /// of MemAvailable.
    #[arg(long)]
    pub no_guard: bool,
    /// Per-size progress on stderr (default: when stderr is a terminal).
    #[arg(long)]
    pub progress: bool,
    /// Measure `--op send` through the message-logging layer under this protocol
    /// (none, pessimistic-rb, pessimistic-sb, causal): two ranks on two simulated nodes.
    #[arg(long, value_parser = parse_log_mode)]
    pub log: Option<reverb_logger::LogMode>,
    /// Node logger cores for `--log` (dedicated, shared-pinned, shared-unpinned, off).
    #[arg(long, value_parser = parse_placement, default_value = "off")]
    pub logger: reverb_logger::core::Placement,
    /// Receives of the `--log` loops: from the named peer, or any source (a determinant each).
    #[arg(long, value_enum, default_value = "named")]
    pub recv: logged::RecvKind,
    /// bw --op send: measure through the runtime (the path MPI takes: failure checks, the
    /// logging layer as REVERB_LOG says) instead of the raw provider.
    #[arg(long, conflicts_with = "log")]
    pub runtime: bool,
}

/// The most measured (or warm-up) iterations per size: latency keeps a sample of each.
pub const MAX_ITERS: u64 = 10_000_000;
/// The most operations in flight (`--window`, `--cq-mod`).
pub const MAX_WINDOW: u64 = 4096;
/// The highest cpu an affinity mask holds (glibc's CPU_SETSIZE - 1).
pub const MAX_CPU: u64 = 1023;
/// The largest job `bench mem` and `bench boot` launch (`--ranks`, `--ranks-per-node`).
pub const MAX_JOB_RANKS: u32 = 65536;

fn parse_log_mode(s: &str) -> Result<reverb_logger::LogMode, String> {
    s.parse().map_err(|e| format!("{e}"))
}

fn parse_placement(s: &str) -> Result<reverb_logger::core::Placement, String> {
    s.parse().map_err(|e| format!("{e}"))
}

fn parse_provider(s: &str) -> Result<ProviderKind, String> {
    s.parse().map_err(|e| format!("{e}"))
}

fn parse_wait_mode(s: &str) -> Result<WaitMode, String> {
    s.parse().map_err(|e| format!("{e}"))
}

impl BenchArgs {
    pub fn params(&self, verbose: bool) -> Result<Params> {
        if self.window == 0 || self.cq_mod == 0 {
            bail!("--window and --cq-mod must be at least 1");
        }
        if self.cq_mod > self.window {
            bail!("--cq-mod {} exceeds --window {}: the window could never drain", self.cq_mod, self.window);
        }
        if self.iters == Some(0) {
            bail!("--iters must be at least 1");
        }
        if self.cores.len() == 1 || self.cores.len() > 2 {
            bail!("--cores takes two cores: one for rank 0, one for rank 1");
        }
        if let [a, b] = self.cores[..] {
            if a == b {
                bail!("--cores {a},{b}: the two ranks need two different cores");
            }
        }
        if matches!(self.test, Test::Lat | Test::Bw | Test::Memcpy | Test::Ckpt) {
            if let Some(r) = self.ranks_per_node.filter(|&r| r > 2) {
                bail!("--ranks-per-node {r}: the benchmark job has 2 ranks, so 1..=2");
            }
        }
        let pair = match self.pair.as_slice() {
            [] => (0, 1),
            &[a, b] if a != b => (a, b),
            _ => bail!("--pair takes two different ranks (--pair 0,2)"),
        };
        if self.log.is_some() && self.op != Op::Send {
            bail!("--log measures --op send (the logging layer has no one-sided operations)");
        }
        if self.log.is_none() && self.logger != reverb_logger::core::Placement::Off {
            bail!("--logger needs --log P");
        }
        if self.log.is_some() && !matches!(self.test, Test::Lat | Test::Bw) {
            bail!("--log applies to bench lat and bw");
        }
        if self.runtime && (self.test != Test::Bw || self.op != Op::Send) {
            bail!("--runtime measures bench bw --op send");
        }
        use std::io::IsTerminal;
        Ok(Params {
            op: self.op,
            sizes: engine::parse_sizes(self.sizes.as_deref().unwrap_or("2-8M"))?,
            iters: self.iters,
            warmup: self.warmup,
            window: self.window,
            cq_mod: self.cq_mod,
            wait: self.wait_mode.map_or(WaitStyle::BusyPoll, WaitStyle::Provider),
            timeout: Duration::from_millis(self.timeout_ms.max(1)),
            json: self.json,
            progress: self.progress || std::io::stderr().is_terminal(),
            verbose,
            provider: self.provider,
            ranks_per_node: self.ranks_per_node,
            job_timeout: Duration::from_secs(self.job_timeout_s.max(1)),
            cores: self.cores.clone(),
            pair,
            log: self.log,
            logger: self.logger,
            recv: self.recv,
            runtime: self.runtime,
        })
    }

    /// `reverb bench mem`'s parameters: by default 8 B messages, the provider's event wait
    /// (a thousand ranks on a few cores must sleep, not spin).
    pub fn mem_params(&self, verbose: bool) -> Result<mem::MemParams> {
        if self.log.is_some() || !self.cores.is_empty() {
            bail!("--log and --cores do not apply to bench mem");
        }
        let format = match (self.json, self.csv) {
            (true, _) => mem::Format::Json,
            (_, true) => mem::Format::Csv,
            _ => mem::Format::Table,
        };
        use std::io::IsTerminal;
        let params = mem::MemParams {
            ranks: mem::parse_ranks(self.ranks.as_deref().unwrap_or("17,65,257,1025"))?,
            sizes: engine::parse_sizes(self.sizes.as_deref().unwrap_or("8"))?,
            provider: self.provider,
            wait: self.wait_mode.unwrap_or(WaitMode::Event),
            ranks_per_node: self.ranks_per_node,
            timeout: Duration::from_millis(self.timeout_ms.max(1)),
            job_timeout: Duration::from_secs(self.job_timeout_s.max(1)),
            format,
            plot: self.plot.clone(),
            progress: self.progress || std::io::stderr().is_terminal(),
            verbose,
            guard: !self.no_guard,
        };
        Ok(params)
    }

    /// `reverb bench boot`'s parameters: the provider's event wait, as `bench mem`.
    pub fn boot_params(&self, verbose: bool) -> Result<boot::BootParams> {
        if self.log.is_some() || !self.cores.is_empty() || self.csv || self.plot.is_some() {
            bail!("--log, --cores, --csv and --plot do not apply to bench boot");
        }
        let mut ranks = mem::parse_ranks(self.ranks.as_deref().unwrap_or("8,64,256,1024"))?;
        // Smallest first: the memory guard projects from the jobs before.
        ranks.sort_unstable();
        use std::io::IsTerminal;
        Ok(boot::BootParams {
            ranks,
            hosts: self.hosts,
            provider: self.provider,
            wait: self.wait_mode.unwrap_or(WaitMode::Event),
            job_timeout: Duration::from_secs(self.job_timeout_s.max(1)),
            json: self.json,
            progress: self.progress || std::io::stderr().is_terminal(),
            verbose,
            guard: !self.no_guard,
        })
    }
}

pub fn main(args: BenchArgs, verbose: bool) -> Result<()> {
    if args.test != Test::Mem && (args.csv || args.plot.is_some()) {
        return Err(crate::usage::usage("--csv and --plot apply to bench mem"));
    }
    if !matches!(args.test, Test::Mem | Test::Boot) && args.no_guard {
        return Err(crate::usage::usage("--no-guard applies to bench mem and boot"));
    }
    let params = crate::usage::as_usage(args.params(verbose).context("reverb bench"))?;
    match args.test {
        Test::Lat => lat::main(&params),
        Test::Bw => bw::main(&params),
        Test::Memcpy => memcpy::main(&params),
        Test::Ckpt => ckpt::main(&params),
        Test::Mem => {
            mem::main(&crate::usage::as_usage(args.mem_params(verbose).context("reverb bench mem"))?)
        }
        Test::Boot => {
            boot::main(&crate::usage::as_usage(args.boot_params(verbose).context("reverb bench boot"))?)
        }
    }
}
