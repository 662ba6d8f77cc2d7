//! One rank of a `reverb bench boot` job: timestamps at each step of its bootstrap, written to
//! the report directory the driver named.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use reverb_transport::bootstrap::TcpBootstrap;
use reverb_transport::{Bootstrap, JobInfo, TransportConfig};
use serde::{Deserialize, Serialize};

use super::timed::Timed;
use super::BootParams;
use crate::bench::mem::Snapshot;

/// What one rank writes: `rank-<r>.json`. Times are Unix nanoseconds (one machine, one clock).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RankTimes {
    pub rank: u32,
    pub host: u32,
    /// The rank's main started.
    pub started: u64,
    /// Connected to the rendezvous (admitted).
    pub connected: u64,
    /// Its provider open (every peer's address gathered, connections made).
    pub opened: u64,
    /// Passed the first barrier after the open.
    pub barrier: u64,
    /// The provider `open` chose (auto: its name).
    pub provider: String,
    /// (entered, left) of each collective from the open through the first barrier.
    pub rounds: Vec<(u64, u64)>,
    /// PSS + page tables after the barrier, KiB: for the driver's memory guard.
    pub mem_kib: u64,
}

/// Nanoseconds since the Unix epoch.
pub fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// The simulated host of `rank` when `hosts` hosts share `size` ranks in blocks.
pub fn host_of(rank: u32, size: u32, hosts: u32) -> u32 {
    (u64::from(rank) * u64::from(hosts.max(1)) / u64::from(size.max(1))) as u32
}

pub fn main(params: &BootParams, job: &JobInfo, dir: &Path) -> Result<()> {
    let started = now_ns();
    let mut boot = TcpBootstrap::connect_from_env().context("connecting to the job's bootstrap")?;
    let connected = now_ns();
    let mut config = TransportConfig::from_env().context("reading REVERB_* configuration")?;
    if let Some(kind) = params.provider {
        config.provider = kind;
    }
    config.wait_mode = params.wait;
    let host = host_of(job.rank, job.size, params.hosts);
    if params.hosts > 1 {
        // Distinct host names: the auto provider takes tcp between them, shm within one.
        config.host_name = Some(format!("boot-host-{host}"));
    }
    config.validate().context("checking the effective configuration")?;
    let mut timed = Timed { inner: &mut boot, rounds: Vec::new() };
    let provider = reverb_transport::open(&config, &mut timed)
        .with_context(|| format!("opening the {} provider", config.provider))?;
    let opened = now_ns();
    timed.barrier().context("the first barrier")?;
    let barrier = now_ns();
    let rounds = timed.rounds;
    let mem = Snapshot::take(job.rank).context("memory snapshot")?;
    let report = RankTimes {
        rank: job.rank,
        host,
        started,
        connected,
        opened,
        barrier,
        provider: provider.kind().to_string(),
        rounds,
        mem_kib: mem.pss_kib + mem.pte_kib,
    };
    let path = dir.join(format!("rank-{}.json", job.rank));
    std::fs::write(&path, serde_json::to_string(&report)?)
        .with_context(|| format!("writing {}", path.display()))?;
    // Nobody leaves (closing its connections) before every rank has written its times.
    boot.barrier().context("the last barrier")?;
    drop(provider);
    Ok(())
}
