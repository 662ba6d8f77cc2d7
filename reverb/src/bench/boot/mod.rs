//! `reverb bench boot`: bootstrap time and controller memory against job size (issue 16). For
//! each job size N the driver launches N ranks (itself the launcher, so it hosts the
//! rendezvous server); each rank stamps when it started, connected to the rendezvous, had its
//! provider open and passed the first barrier. The driver reports, from the launch, when the
//! last rank reached each step, its own peak RSS over the job (the controller's), and what the
//! server wrote (per collective round and in all).
//!
//! `--hosts H` gives the ranks H host names in blocks, so the default `auto` provider takes
//! shm inside a simulated host and tcp between them (every cross-host pair connected at open).
//!
//! Files: `rank` (a rank's run), `timed` (stamps around its collectives), `report`
//! (reduction and output).

mod rank;
mod report;
mod timed;

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use reverb_transport::{JobInfo, ProviderKind, WaitMode};

pub use rank::RankTimes;
pub use report::Row;

use crate::bench::mem;
use crate::launcher::LaunchSpec;

/// Names the directory the ranks write their reports to (set by the driver for its ranks).
pub const DIR_VAR: &str = "REVERB_BENCH_BOOT_DIR";

/// What `reverb bench boot` runs.
#[derive(Debug, Clone)]
pub struct BootParams {
    pub ranks: Vec<u32>,
    /// Simulated hosts (host names in blocks); 1: one host.
    pub hosts: u32,
    pub provider: Option<ProviderKind>,
    pub wait: WaitMode,
    pub job_timeout: Duration,
    pub json: bool,
    pub progress: bool,
    pub verbose: bool,
    /// Refuse a job projected not to fit the host's memory.
    pub guard: bool,
}

/// A rank inside a job, or the driver outside one.
pub fn main(params: &BootParams) -> Result<()> {
    if let Some(job) = JobInfo::from_env().context("reading the launcher's job environment")? {
        let dir = std::env::var_os(DIR_VAR).ok_or_else(|| {
            anyhow!("reverb bench boot launches its own jobs: run it directly, not under reverb run")
        })?;
        return rank::main(params, &job, Path::new(&dir));
    }
    if params.ranks.is_empty() || params.ranks.iter().any(|&n| n < 2) || params.hosts == 0 {
        bail!("--ranks takes job sizes of at least 2 ranks, --hosts at least 1");
    }
    let largest = params.ranks.iter().copied().max().unwrap_or(2);
    let nofile = mem::host::raise_limits(largest)?;
    let provider = params.provider.map_or_else(
        || std::env::var("REVERB_PROVIDER").unwrap_or_else(|_| "auto".to_string()),
        |k| k.to_string(),
    );
    if !params.json {
        report::print_header(&provider, params, nofile);
    }
    let mut per_rank: Vec<(u32, f64)> = Vec::new();
    for &n in &params.ranks {
        if params.guard {
            if let Some(why) = over_budget(&per_rank, n, params.hosts) {
                report::print_skipped(params.json, n, params.hosts, &why);
                continue;
            }
        }
        let row = run_job(params, n).with_context(|| format!("the job of {n} ranks"))?;
        report::print_row(params.json, &provider, &row);
        per_rank.push((n, row.rank_mem_kib as f64 * 1024.0));
    }
    Ok(())
}

/// Kernel memory taken per tcp connection end (socket, file, buffers of an idle connection),
/// a conservative guess for the guard: the ranks' PSS does not show it.
const SOCKET_BYTES: f64 = 16.0 * 1024.0;

/// Why a job must not run: its ranks' memory projected from the jobs before it (per rank,
/// proportional to the job size: tcp and shm both hold per-peer state) plus the kernel's
/// sockets for the cross-host pairs, over 80 % of MemAvailable.
fn over_budget(per_rank: &[(u32, f64)], n: u32, hosts: u32) -> Option<String> {
    let ranks = f64::from(n);
    let ranks_mem = per_rank.last().map_or(0.0, |&(m, b)| b * ranks / f64::from(m).max(1.0) * ranks);
    let per_host = ranks / f64::from(hosts.max(1));
    let cross_pairs = (ranks * ranks - f64::from(hosts) * per_host * per_host) / 2.0;
    let need = ranks_mem + 2.0 * cross_pairs * SOCKET_BYTES;
    let available = mem::host::mem_available_bytes()? as f64;
    let gib = |b: f64| b / (1u64 << 30) as f64;
    (need > 0.8 * available).then(|| {
        format!(
            "skipped: about {:.1} GiB projected (ranks' PSS and page tables, {:.0} tcp connections), \
             over 80 % of the {:.1} GiB available (--no-guard runs it anyway)",
            gib(need),
            cross_pairs,
            gib(available)
        )
    })
}

/// Launches one job of `n` ranks and reduces what they reported.
fn run_job(params: &BootParams, n: u32) -> Result<Row> {
    let dir = std::env::temp_dir().join(format!("reverb-bench-boot-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let result = launch(params, n, &dir).and_then(|job| {
        let ranks: Vec<RankTimes> = mem::read_reports(&dir, n)?;
        report::reduce(n, params.hosts, &ranks, &job)
    });
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// What the driver itself saw of a job.
pub struct JobSide {
    /// Unix nanoseconds just before the launch.
    pub launched: u64,
    pub wall: Duration,
    /// The controller's peak RSS over the job, KiB.
    pub peak_rss_kib: u64,
    pub traffic: reverb_transport::bootstrap::Traffic,
}

fn launch(params: &BootParams, n: u32, dir: &Path) -> Result<JobSide> {
    let program = std::env::current_exe().context("finding the reverb executable")?;
    let mut env = vec![(DIR_VAR.to_string(), dir.display().to_string())];
    // Every collective waits for the slowest rank to start: scale the bound with the job.
    if std::env::var_os("REVERB_BOOT_TIMEOUT_S").is_none() {
        env.push(("REVERB_BOOT_TIMEOUT_S".to_string(), (60 + n / 8).to_string()));
    }
    let spec = LaunchSpec {
        ranks: n,
        ranks_per_node: n,
        program,
        args: std::env::args().skip(1).collect(),
        env,
        timeout: Some(params.job_timeout),
        prefix_output: true,
    };
    if params.progress {
        eprintln!("bench boot: {n} ranks on {} simulated hosts ({})", params.hosts, mem::host::describe());
    }
    reset_peak_rss();
    let before = reverb_transport::bootstrap::traffic();
    let launched = rank::now_ns();
    let start = Instant::now();
    let status = crate::launcher::launch_with(&spec, params.verbose).context("launching the ranks")?;
    let wall = start.elapsed();
    if status != 0 {
        bail!("the ranks failed (exit status {status}; {})", mem::host::describe());
    }
    let after = reverb_transport::bootstrap::traffic();
    let traffic = reverb_transport::bootstrap::Traffic {
        rounds: after.rounds - before.rounds,
        round_bytes: after.round_bytes - before.round_bytes,
        // A maximum over the process's life: the jobs run smallest first, so it is this job's.
        max_round_bytes: after.max_round_bytes,
        bytes: after.bytes - before.bytes,
    };
    Ok(JobSide { launched, wall, peak_rss_kib: peak_rss_kib().unwrap_or(0), traffic })
}

/// Resets this process's peak RSS (VmHWM) to its current RSS: `5` to clear_refs (Linux 4.0+).
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// VmHWM of /proc/self/status, KiB.
fn peak_rss_kib() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = text.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::rank::host_of;

    #[test]
    fn hosts_take_ranks_in_blocks() {
        let hosts: Vec<u32> = (0..8).map(|r| host_of(r, 8, 4)).collect();
        assert_eq!(hosts, vec![0, 0, 1, 1, 2, 2, 3, 3]);
        assert!((0..10).all(|r| host_of(r, 10, 1) == 0));
        assert_eq!(host_of(9, 10, 3), 2);
    }
}
