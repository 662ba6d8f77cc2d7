//! One rank of a `reverb bench mem` job: memory snapshots around an all-to-all of one eager
//! message per ordered pair and size, written to the report directory the driver named.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use reverb_transport::bootstrap::TcpBootstrap;
use reverb_transport::{
    Bootstrap, CompletionKind, JobInfo, Provider, RecvBuffer, Source, Tag, TagMatch, TransportConfig,
    TransportError,
};
use serde::{Deserialize, Serialize};

use super::stat::Snapshot;
use super::MemParams;
use crate::bench::engine::TAG_DATA;

/// Where this rank stood when a snapshot was taken.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Phase {
    /// `start` (bootstrap connected, provider not open), `opened` (every peer attached), or
    /// `after` a pass.
    pub name: String,
    /// The message size of the pass, for `after`.
    pub size: Option<usize>,
    pub mem: Snapshot,
}

/// What one rank writes: `rank-<r>.json` in the report directory.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RankReport {
    pub rank: u32,
    pub node: u32,
    pub pid: u32,
    pub provider: String,
    pub phases: Vec<Phase>,
}

/// The rank's whole run. Every snapshot sits between two barriers, so all ranks measure the
/// same state (no peer touches new pages meanwhile, none has exited and unmapped).
pub fn main(params: &MemParams, job: &JobInfo, dir: &Path) -> Result<()> {
    let mut boot = TcpBootstrap::connect_from_env().context("connecting to the job's bootstrap")?;
    let mut config = TransportConfig::from_env().context("reading REVERB_* configuration")?;
    if let Some(kind) = params.provider {
        config.provider = kind;
    }
    config.wait_mode = params.wait;
    config.validate().context("checking the effective configuration")?;
    if params.verbose && job.rank == 0 {
        eprintln!("{config}");
    }
    let mut phases = vec![snapshot(&mut boot, job.rank, "start", None)?];
    let mut provider = reverb_transport::open(&config, &mut boot)
        .with_context(|| format!("opening the {} provider", config.provider))?;
    phases.push(snapshot(&mut boot, job.rank, "opened", None)?);
    for (pass, &size) in params.sizes.iter().enumerate() {
        let tag = TAG_DATA + ((pass as Tag + 1) << 16);
        exchange(provider.as_mut(), &mut boot, size, tag, params.timeout)
            .with_context(|| format!("rank {}: all-to-all of {size} B messages", job.rank))?;
        phases.push(snapshot(&mut boot, job.rank, "after", Some(size))?);
    }
    let report = RankReport {
        rank: job.rank,
        node: job.node,
        pid: std::process::id(),
        provider: provider.kind().to_string(),
        phases,
    };
    let path = dir.join(format!("rank-{}.json", job.rank));
    let text = serde_json::to_string(&report)?;
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// Measures this process once every rank has arrived, and lets none go on before all did.
fn snapshot(boot: &mut dyn Bootstrap, rank: u32, name: &str, size: Option<usize>) -> Result<Phase> {
    boot.barrier().with_context(|| format!("barrier before the {name} snapshot"))?;
    let mem = Snapshot::take(rank).with_context(|| format!("{name} snapshot"))?;
    boot.barrier().with_context(|| format!("barrier after the {name} snapshot"))?;
    Ok(Phase { name: name.to_string(), size, mem })
}

/// Test hook (fault-injection builds): the rank named by `REVERB_BENCH_MEM_MUTE` posts its
/// receives but sends nothing, so its peers' waits must time out and fail the bench.
#[cfg(feature = "fault-injection")]
fn muted(rank: u32) -> bool {
    std::env::var("REVERB_BENCH_MEM_MUTE").is_ok_and(|v| v.trim().parse() == Ok(rank))
}

#[cfg(not(feature = "fault-injection"))]
fn muted(_rank: u32) -> bool {
    false
}

/// The byte every message from `rank` carries, so a receive from the wrong peer cannot pass.
fn marker(rank: u32) -> u8 {
    (rank % 251) as u8 + 1
}

/// One message of `size` bytes to every other rank and one from each: all receives posted
/// first, a barrier (so none arrives unexpected), then the sends in shifted order (rank r
/// starts with r+1) so no rank is everyone's first target. Eager sends never block; every
/// wait is bounded by `stall` without a completion.
fn exchange(
    provider: &mut dyn Provider,
    boot: &mut dyn Bootstrap,
    size: usize,
    tag: Tag,
    stall: Duration,
) -> Result<()> {
    let (me, n) = (provider.rank(), provider.size());
    for k in 1..n {
        let source = (me + n - k) % n;
        provider
            .post_recv(Source::Rank(source), TagMatch::exact(tag), RecvBuffer::Owned { capacity: size })
            .with_context(|| format!("posting the receive from rank {source}"))?;
    }
    boot.barrier().context("barrier between receives and sends")?;
    let payload = vec![marker(me); size];
    let sending = if muted(me) { 0 } else { n };
    for k in 1..sending {
        let dest = (me + k) % n;
        provider.send(dest, tag, &payload).with_context(|| format!("sending to rank {dest}"))?;
    }
    let (mut sends, mut recvs) = (sending.saturating_sub(1), n - 1);
    let mut heard = vec![false; n as usize];
    heard[me as usize] = true;
    let mut got = Vec::new();
    while sends + recvs > 0 {
        got.clear();
        match provider.wait(&mut got, stall) {
            Ok(_) => {}
            Err(TransportError::Timeout(_)) => {
                let silent: Vec<String> =
                    (0..n).filter(|&r| !heard[r as usize]).take(8).map(|r| r.to_string()).collect();
                bail!(
                    "no completion within {stall:?}: {recvs} receives (from ranks {}{}) and {sends} sends still pending",
                    silent.join(", "),
                    if recvs as usize > silent.len() { ", ..." } else { "" }
                )
            }
            Err(e) => return Err(e).context("waiting for completions"),
        }
        for c in got.drain(..) {
            match c.into_result().context("a failed completion")?.kind {
                CompletionKind::Send { .. } => sends = sends.saturating_sub(1),
                CompletionKind::Recv { source, len, data, .. } => {
                    let ok = len == size && data.is_some_and(|d| d.iter().all(|&b| b == marker(source)));
                    if !ok {
                        bail!(
                            "the message from rank {source} is not its {size} bytes of {:#04x}",
                            marker(source)
                        );
                    }
                    if let Some(h) = heard.get_mut(source as usize) {
                        *h = true;
                    }
                    recvs = recvs.saturating_sub(1);
                }
                other => bail!("unexpected completion {other:?}"),
            }
        }
    }
    Ok(())
}
