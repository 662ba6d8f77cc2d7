//! Reduces the ranks' timestamps and the driver's view of a job to one row; the table and
//! JSON output.

use anyhow::{bail, Result};
use serde::Serialize;

use super::{BootParams, JobSide, RankTimes};

/// One job size's result. Times are seconds from the launch until the last rank reached the
/// step.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub ranks: u32,
    pub hosts: u32,
    /// The provider the ranks opened (auto: the one auto reports).
    pub provider: String,
    pub started_s: f64,
    pub connected_s: f64,
    pub opened_s: f64,
    pub barrier_s: f64,
    /// The rendezvous's own part of the open and first barrier: summed over their collectives,
    /// from the last rank entering one until the last rank left it (the rest of a rank's wait
    /// in a collective is waiting for the slowest rank to arrive).
    pub rendezvous_s: f64,
    /// The largest of those per-collective times.
    pub max_collective_s: f64,
    /// Each collective's time, in order (the open's, then the first barrier).
    pub collectives_s: Vec<f64>,
    /// The launch from start to the last exit.
    pub wall_s: f64,
    pub controller_peak_rss_kib: u64,
    pub rounds: u64,
    pub round_bytes: u64,
    pub max_round_bytes: u64,
    pub server_bytes: u64,
    /// The largest PSS + page tables of a rank after its barrier, KiB.
    pub rank_mem_kib: u64,
}

pub fn reduce(n: u32, hosts: u32, ranks: &[RankTimes], job: &JobSide) -> Result<Row> {
    let Some(first) = ranks.first() else { bail!("no rank reported") };
    let last = |f: fn(&RankTimes) -> u64| {
        let t = ranks.iter().map(f).max().unwrap_or(0);
        t.saturating_sub(job.launched) as f64 / 1e9
    };
    Ok(Row {
        ranks: n,
        hosts,
        provider: first.provider.clone(),
        started_s: last(|r| r.started),
        connected_s: last(|r| r.connected),
        opened_s: last(|r| r.opened),
        barrier_s: last(|r| r.barrier),
        rendezvous_s: collectives(ranks).iter().sum(),
        max_collective_s: collectives(ranks).into_iter().fold(0.0, f64::max),
        collectives_s: collectives(ranks),
        wall_s: job.wall.as_secs_f64(),
        controller_peak_rss_kib: job.peak_rss_kib,
        rounds: job.traffic.rounds,
        round_bytes: job.traffic.round_bytes,
        max_round_bytes: job.traffic.max_round_bytes,
        server_bytes: job.traffic.bytes,
        rank_mem_kib: ranks.iter().map(|r| r.mem_kib).max().unwrap_or(0),
    })
}

/// Seconds from the last rank entering each collective until the last rank left it; over the
/// collectives every rank stamped.
fn collectives(ranks: &[RankTimes]) -> Vec<f64> {
    let count = ranks.iter().map(|r| r.rounds.len()).min().unwrap_or(0);
    (0..count)
        .map(|k| {
            let entered = ranks.iter().map(|r| r.rounds[k].0).max().unwrap_or(0);
            let left = ranks.iter().map(|r| r.rounds[k].1).max().unwrap_or(0);
            left.saturating_sub(entered) as f64 / 1e9
        })
        .collect()
}

pub fn print_header(provider: &str, params: &BootParams, nofile: u64) {
    println!("reverb bootstrap against job size");
    println!(
        "  provider: {provider}   simulated hosts: {}   wait: {:?}   ulimit -n {nofile}",
        params.hosts, params.wait
    );
    println!("  seconds from the launch until the last rank had started, connected to the rendezvous,");
    println!("  its provider open, and passed the first barrier; the controller's peak RSS; what the");
    println!(
        "  rendezvous server wrote: collective rounds, their bytes (all, and the largest round), all bytes."
    );
    println!("  rdv: of the open and barrier, from the last rank entering each collective until the last");
    println!("  left it, summed (max: the longest one); the rest is waiting for the slowest rank");
    println!(
        "{:>6} {:>5} {:>8} {:>8} {:>9} {:>8} {:>8} {:>7} {:>7} {:>8} {:>9} {:>7} {:>10} {:>10} {:>10}",
        "ranks",
        "hosts",
        "provider",
        "started",
        "connected",
        "opened",
        "barrier",
        "rdv",
        "max",
        "wall",
        "ctl RSS",
        "rounds",
        "round MiB",
        "max round",
        "sent MiB"
    );
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 20) as f64
}

pub fn print_row(json: bool, provider: &str, row: &Row) {
    if json {
        if let Ok(line) = serde_json::to_string(row) {
            println!("{line}");
        }
        return;
    }
    let shown =
        if row.provider == provider { row.provider.clone() } else { format!("{provider}:{}", row.provider) };
    println!(
        "{:>6} {:>5} {:>8} {:>8.3} {:>9.3} {:>8.3} {:>8.3} {:>7.3} {:>7.3} {:>8.3} {:>5.1} MiB {:>7} {:>10.2} {:>10.3} {:>10.2}",
        row.ranks,
        row.hosts,
        shown,
        row.started_s,
        row.connected_s,
        row.opened_s,
        row.barrier_s,
        row.rendezvous_s,
        row.max_collective_s,
        row.wall_s,
        row.controller_peak_rss_kib as f64 / 1024.0,
        row.rounds,
        mib(row.round_bytes),
        mib(row.max_round_bytes),
        mib(row.server_bytes)
    );
}

pub fn print_skipped(json: bool, n: u32, hosts: u32, why: &str) {
    if json {
        println!("{}", serde_json::json!({ "ranks": n, "hosts": hosts, "skipped": why }));
    } else {
        println!("{n:>6} {hosts:>5} {why}");
    }
}
