//! `reverb bench mem`: memory per process against job size (issue 14). For each job size N
//! the driver launches N ranks on one simulated node (shm's case); each rank snapshots its
//! memory when started, once its provider has attached every peer, and after each pass of an
//! all-to-all (one eager message to and from every other rank, so every receive resource a
//! peer can touch is touched); the driver reduces the snapshots to per-process median / max
//! and the node's sum of PSS.
//!
//! Files: `stat` (reading /proc/self), `rank` (a rank's run), `report` (reduction, table,
//! JSON, CSV, plot), `host` (descriptor and process limits, /dev/shm).

pub(in crate::bench) mod host;
mod rank;
mod report;
mod stat;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use reverb_transport::{JobInfo, ProviderKind, WaitMode};

pub use rank::RankReport;
pub use report::{Row, Spread};
pub use stat::{Maps, Snapshot};

use crate::launcher::LaunchSpec;
pub use report::Format;

/// Names the directory the ranks write their reports to (set by the driver for its ranks).
pub const DIR_VAR: &str = "REVERB_BENCH_MEM_DIR";

/// What `reverb bench mem` runs.
#[derive(Debug, Clone)]
pub struct MemParams {
    /// Job sizes, in ranks (peers + 1).
    pub ranks: Vec<u32>,
    /// One all-to-all pass per size, in order.
    pub sizes: Vec<usize>,
    pub provider: Option<ProviderKind>,
    pub wait: WaitMode,
    /// Default: all ranks on one node.
    pub ranks_per_node: Option<u32>,
    /// Bound of any wait for a completion.
    pub timeout: Duration,
    /// Bound of each job.
    pub job_timeout: Duration,
    pub format: Format,
    pub plot: Option<PathBuf>,
    pub progress: bool,
    pub verbose: bool,
    /// Refuse a job projected not to fit the host's memory.
    pub guard: bool,
}

impl MemParams {
    pub fn check(&self) -> Result<()> {
        if self.ranks.is_empty() || self.ranks.iter().any(|&n| n < 2) {
            bail!("--ranks takes job sizes of at least 2 ranks (one peer)");
        }
        if self.sizes.is_empty() {
            bail!("--sizes names no message size");
        }
        if let Some(path) = &self.plot {
            crate::model::check_plot_path(path)?;
        }
        Ok(())
    }
}

/// Parses `17,65,257,1025`: each job size in 2..=65536.
pub fn parse_ranks(s: &str) -> Result<Vec<u32>> {
    let max = u64::from(super::MAX_JOB_RANKS);
    s.split(',')
        .map(|x| crate::usage::int::<u32>(2, max)(x).map_err(|e| anyhow!("--ranks {s}: {x:?}: {e}")))
        .collect()
}

/// A rank inside a job, or the driver outside one.
pub fn main(params: &MemParams) -> Result<()> {
    if let Some(job) = JobInfo::from_env().context("reading the launcher's job environment")? {
        let dir = std::env::var_os(DIR_VAR).ok_or_else(|| {
            anyhow!("reverb bench mem launches its own jobs: run it directly, not under reverb run")
        })?;
        return rank::main(params, &job, Path::new(&dir));
    }
    params.check()?;
    let largest = params.ranks.iter().copied().max().unwrap_or(2);
    let nofile = host::raise_limits(largest)?;
    let provider = params.provider.map_or_else(
        || std::env::var("REVERB_PROVIDER").unwrap_or_else(|_| "auto".to_string()),
        |k| k.to_string(),
    );
    if params.format == Format::Table {
        let sizes: Vec<String> = params.sizes.iter().map(|&s| report::human_bytes(s)).collect();
        println!("reverb receive memory against job size");
        println!(
            "  provider: {provider}   wait: {:?}   passes: all-to-all of one message per ordered pair, {}",
            params.wait,
            sizes.join(", then ")
        );
        println!("  per process: RSS and PSS (/proc/self/smaps_rollup), page tables (VmPTE), reverb shm");
        println!(
            "  segments mapped (own: its control segment and regions; peers': theirs), median over ranks"
        );
        println!("  node PSS = sum of PSS over the node's ranks; {}; ulimit -n {nofile}", host::describe());
    }
    report::print_header(params.format, &provider);
    let mut rows = Vec::new();
    let mut per_rank: Vec<(u32, f64)> = Vec::new();
    for &n in &params.ranks {
        if params.guard {
            calibrate(params, &mut per_rank, n)?;
            if let Some(why) = over_budget(&per_rank, n) {
                report::print_skipped(params.format, &provider, n, &why);
                continue;
            }
        }
        let job_rows = run_job(params, n).with_context(|| format!("the job of {n} ranks"))?;
        report::print_rows(params.format, &provider, &job_rows);
        per_rank.push((n, worst_bytes(&job_rows)));
        rows.extend(job_rows);
    }
    if let Some(path) = &params.plot {
        crate::model::write_plot(path, &report::plot(&provider, &rows))?;
        if params.format == Format::Table {
            println!("plot written to {}", path.display());
        }
    }
    Ok(())
}

/// Why a job must not run: its memory, projected from the jobs before it, would not fit the
/// host. Per-rank memory (PSS + page tables, the worst rank and phase) is taken as linear in
/// the job size through the last two jobs (proportional to it after one), times the ranks.
/// Running the host out of memory would have the kernel kill processes that are not ours.
fn over_budget(per_rank: &[(u32, f64)], n: u32) -> Option<String> {
    let need = projected_bytes(per_rank, n)?;
    let available = host::mem_available_bytes()? as f64;
    let gib = |b: f64| b / (1u64 << 30) as f64;
    (need > 0.8 * available).then(|| {
        format!(
            "skipped: about {:.1} GiB projected (PSS + page tables), over 80 % of the {:.1} GiB \
             available (--no-guard runs it anyway)",
            gib(need),
            gib(available)
        )
    })
}

/// Small jobs, not printed, measured before a larger job that has no two jobs before it to
/// be projected from.
const CALIBRATION: [u32; 2] = [17, 65];

fn calibrate(params: &MemParams, per_rank: &mut Vec<(u32, f64)>, n: u32) -> Result<()> {
    if per_rank.len() >= 2 || n <= CALIBRATION[1] {
        return Ok(());
    }
    for m in CALIBRATION {
        if !per_rank.iter().any(|&(k, _)| k == m) {
            let rows = run_job(params, m).with_context(|| format!("the calibration job of {m} ranks"))?;
            per_rank.push((m, worst_bytes(&rows)));
        }
    }
    per_rank.sort_by_key(|&(k, _)| k);
    Ok(())
}

/// Bytes per rank of a job for the projection: PSS + page tables, the worst rank and phase.
fn worst_bytes(rows: &[Row]) -> f64 {
    rows.iter().map(|r| (r.pss.max + r.pte.max) as f64 * 1024.0).fold(0.0, f64::max)
}

/// Projected bytes of a job of `n` ranks from earlier jobs' (ranks, bytes per rank).
fn projected_bytes(per_rank: &[(u32, f64)], n: u32) -> Option<f64> {
    let n = f64::from(n);
    let per = match per_rank {
        [] => return None,
        [(m, b)] => b * n / f64::from(*m),
        [.., (m0, b0), (m1, b1)] if m1 != m0 => {
            let slope = ((b1 - b0) / (f64::from(*m1) - f64::from(*m0))).max(0.0);
            b1 + slope * (n - f64::from(*m1))
        }
        [.., (m, b)] => b * n / f64::from(*m),
    };
    Some(per.max(0.0) * n)
}

/// Launches one job of `n` ranks and reduces what they reported.
fn run_job(params: &MemParams, n: u32) -> Result<Vec<Row>> {
    let dir = std::env::temp_dir().join(format!("reverb-bench-mem-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let result = launch(params, n, &dir).and_then(|wall| {
        let reports = read_reports(&dir, n)?;
        report::aggregate(n, &reports, wall.as_secs_f64())
    });
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn launch(params: &MemParams, n: u32, dir: &Path) -> Result<Duration> {
    let program = std::env::current_exe().context("finding the reverb executable")?;
    let mut env = vec![(DIR_VAR.to_string(), dir.display().to_string())];
    // Every collective waits for the slowest rank to start: scale the bound with the job.
    if std::env::var_os("REVERB_BOOT_TIMEOUT_S").is_none() {
        env.push(("REVERB_BOOT_TIMEOUT_S".to_string(), (60 + n / 8).to_string()));
    }
    let spec = LaunchSpec {
        ranks: n,
        ranks_per_node: params.ranks_per_node.unwrap_or(n),
        program,
        args: std::env::args().skip(1).collect(),
        env,
        timeout: Some(params.job_timeout),
        prefix_output: true,
    };
    if params.progress {
        eprintln!("bench mem: {n} ranks ({})", host::describe());
    }
    let start = Instant::now();
    let status = crate::launcher::launch_with(&spec, params.verbose).context("launching the ranks")?;
    if status != 0 {
        bail!("the ranks failed (exit status {status}; {})", host::describe());
    }
    Ok(start.elapsed())
}

/// Every rank's JSON report (`rank-R.json` in `dir`); an error naming the ranks that wrote
/// none. Shared with `bench boot`.
pub(in crate::bench) fn read_reports<T: serde::de::DeserializeOwned>(dir: &Path, n: u32) -> Result<Vec<T>> {
    let mut reports = Vec::with_capacity(n as usize);
    let mut missing = Vec::new();
    for rank in 0..n {
        let path = dir.join(format!("rank-{rank}.json"));
        match std::fs::read_to_string(&path) {
            Ok(text) => reports.push(
                serde_json::from_str::<T>(&text).with_context(|| format!("parsing {}", path.display()))?,
            ),
            Err(_) => missing.push(rank),
        }
    }
    if !missing.is_empty() {
        let mut shown: Vec<String> = missing.iter().take(10).map(u32::to_string).collect();
        if missing.len() > shown.len() {
            shown.push("...".into());
        }
        bail!("{} of {n} ranks wrote no report (ranks {})", missing.len(), shown.join(", "));
    }
    Ok(reports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn projections_follow_the_last_two_jobs() {
        assert_eq!(projected_bytes(&[], 10), None);
        // One job: per-rank memory proportional to the job size.
        assert_eq!(projected_bytes(&[(10, 100.0)], 20), Some(200.0 * 20.0));
        // Two: the line through them (here flat: 50 per rank whatever the size).
        assert_eq!(projected_bytes(&[(5, 9.0), (10, 50.0), (20, 50.0)], 40), Some(50.0 * 40.0));
        assert_eq!(projected_bytes(&[(10, 10.0), (20, 20.0)], 40), Some(40.0 * 40.0));
    }

    #[test]
    fn rank_lists_parse() {
        assert_eq!(parse_ranks("17, 65,257").unwrap(), vec![17, 65, 257]);
        assert!(parse_ranks("17,x").is_err());
    }
}
