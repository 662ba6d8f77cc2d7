//! A survivor's recovery from a failure inside `Runtime::init` (before any rank has sent
//! anything), and the rendezvous waits init needs.

use std::time::{Duration, Instant};

use reverb_transport::bootstrap::TcpBootstrap;
use reverb_transport::recovery::await_rejoin;
use reverb_transport::{Bootstrap, Rank};

use super::error::{Result, RuntimeError};
use super::finished::{self, FinishedPeers, LostUnit};
use super::report::unix_ns;
use super::{Runtime, RuntimeConfig};

/// A survivor's recovery from a failure inside [`Runtime::init`]: no epoch is committed and
/// no rank has sent anything yet, so the failed units' respawned ranks start from the
/// initial state and everyone redoes init's collectives with them.
#[derive(Debug, Default)]
pub(super) struct EarlyRecovery {
    /// The ranks that failed and rejoined (whole failure units), sorted.
    pub(super) failed: Vec<Rank>,
    /// When the failure was seen (unix ns) and when the recovery began.
    pub(super) detected: Option<(u64, Instant)>,
}

impl EarlyRecovery {
    pub(super) fn happened(&self) -> bool {
        self.detected.is_some()
    }

    /// After `cause` ended one of init's collectives: when a peer's death explains it and
    /// this rank is at incarnation 0 and saw no failure before, waits (bounded) until every
    /// failed unit has rejoined and reconnects `provider` to it. Anything else is returned as
    /// the error (a second failure as `Unrecoverable`).
    pub(super) fn recover(
        &mut self,
        provider: &mut dyn reverb_transport::Provider,
        boot: &mut TcpBootstrap,
        config: &RuntimeConfig,
        unit_of: &[u32],
        cause: RuntimeError,
        restarted: bool,
    ) -> Result<()> {
        let Some(first) = cause.dead_peer() else { return Err(cause) };
        let job = boot.job().clone();
        let node_of: Vec<u32> = (0..job.size).map(|r| job.node_of(r)).collect();
        if restarted {
            // The peer may have finished the job: then that is what went wrong.
            let unit = LostUnit::of(job.rank, unit_of, &node_of);
            return Err(finished::explain(boot, &unit, cause, config.rejoin_timeout));
        }
        if self.happened() {
            return Err(cause.during_recovery());
        }
        let detected = unix_ns();
        let start = Instant::now();
        Runtime::check_recoverable(&config.log, &node_of)?;
        let widen = |ranks: &[Rank]| -> Vec<Rank> {
            let units: Vec<u32> = ranks.iter().filter_map(|&r| unit_of.get(r as usize).copied()).collect();
            (0..job.size).filter(|&r| r != job.rank && units.contains(&unit_of[r as usize])).collect()
        };
        // Nodes failing together are recovered together: let the others show up first.
        std::thread::sleep(config.detect_interval);
        let mut seen = failed_at_rendezvous(boot, job.rank)?;
        seen.push(first);
        let mut dead = widen(&seen);
        let mut awaited: Vec<Rank> = Vec::new();
        while let Some(r) = dead.iter().copied().find(|r| !awaited.contains(r)) {
            let timeout = config.rejoin_timeout;
            await_rejoin(provider, boot, r, Some(0), timeout).map_err(|e| {
                RuntimeError::Unrecoverable(format!(
                    "rank {r} failed inside init ({cause}) and did not come back within {timeout:?}: {e}"
                ))
            })?;
            awaited.push(r);
            if awaited.len() == dead.len() {
                // Another unit may have failed meanwhile: all are recovered in one round.
                let more = widen(&failed_at_rendezvous(boot, job.rank)?);
                dead.extend(more);
                dead.sort_unstable();
                dead.dedup();
            }
        }
        dead.sort_unstable();
        tracing::info!(
            "reverb: rank {}: ranks {dead:?} failed inside init ({cause}); they rejoined, init's \
             collectives start over",
            job.rank
        );
        self.failed = dead;
        self.detected = Some((detected, start));
        Ok(())
    }
}

/// Ranks the rendezvous shows failed since the job started: lost, or at an incarnation above
/// 0. Only for incarnation 0 inside init. A live rank that has not published yet (still in
/// the transport's open, which a failure may have slowed) is no failure.
fn failed_at_rendezvous(boot: &mut TcpBootstrap, me: Rank) -> Result<Vec<Rank>> {
    Ok(boot
        .lookup()?
        .iter()
        .filter(|a| a.rank != me && (a.lost || a.incarnation > 0))
        .map(|a| a.rank)
        .collect())
}

/// Waits (bounded) until the rendezvous has an address for every rank not retired; a rank
/// that finished the job (see `finished`) ends the wait with the report for `unit`.
pub(super) fn wait_none_lost(boot: &mut TcpBootstrap, timeout: Duration, unit: &LostUnit) -> Result<()> {
    let start = Instant::now();
    let me = boot.job().rank;
    let mut finished = FinishedPeers::with_restarted(timeout);
    loop {
        let table = boot.lookup()?;
        finished.check(&table, me, unit)?;
        // A retired rank (a masked copy under partial redundancy) never comes back.
        let lost: Vec<Rank> =
            table.iter().filter(|a| a.address.is_none() && !a.retired).map(|a| a.rank).collect();
        if lost.is_empty() {
            return Ok(());
        }
        if start.elapsed() > timeout {
            return Err(RuntimeError::Unrecoverable(format!(
                "ranks {lost:?} failed and did not come back within {timeout:?}"
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
