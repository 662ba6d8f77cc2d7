//! A survivor's recovery from a failure inside `Runtime::init` (before any rank has sent
//! anything), and the rendezvous waits init needs.

use std::time::{Duration, Instant};

use reverb_transport::bootstrap::{PeerAddress, TcpBootstrap};
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
    /// The incarnation this rank knows of each rank it recovered (the others: 0).
    known: Vec<(Rank, u32)>,
}

impl EarlyRecovery {
    pub(super) fn happened(&self) -> bool {
        self.detected.is_some()
    }

    /// After `cause` ended one of init's collectives: when a peer's death explains it and
    /// this rank is at incarnation 0 and saw no failure before, waits (bounded) until every
    /// failed unit has rejoined and reconnects `provider` to it. Anything else is returned as
    /// the error (a second failure as `Unrecoverable`).
    ///
    /// A cause that names no dead peer (a malformed contribution) is also a failure when the
    /// rendezvous shows one this rank has not recovered: a survivor busy between two of
    /// init's collectives while a unit failed and rejoined never saw the round aborted, and
    /// met the restarted ranks' first collective in its next one.
    pub(super) fn recover(
        &mut self,
        provider: &mut dyn reverb_transport::Provider,
        boot: &mut TcpBootstrap,
        config: &RuntimeConfig,
        unit_of: &[u32],
        cause: RuntimeError,
        restarted: bool,
    ) -> Result<()> {
        let job = boot.job().clone();
        let first = match cause.dead_peer() {
            Some(rank) => rank,
            None if !restarted => match self.missed_failure(boot, job.rank)? {
                Some(rank) => rank,
                None => return Err(cause),
            },
            None => return Err(cause),
        };
        let node_of: Vec<u32> = (0..job.size).map(|r| job.node_of(r)).collect();
        if restarted {
            // The peer may have finished the job: then that is what went wrong.
            let unit = LostUnit::of(job.rank, unit_of, &node_of);
            return Err(finished::explain(boot, &unit, cause, config.rejoin_timeout));
        }
        if self.happened() {
            return Err(RuntimeError::Unrecoverable(format!(
                "rank {first} failed while a recovery was under way (a second failure, inside \
                 init): {cause}"
            )));
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
            let incarnation = await_rejoin(provider, boot, r, Some(0), timeout).map_err(|e| {
                RuntimeError::Unrecoverable(format!(
                    "rank {r} failed inside init ({cause}) and did not come back within {timeout:?}: {e}"
                ))
            })?;
            self.known.push((r, incarnation));
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

    /// A rank the rendezvous shows lost, or at an incarnation this rank has not recovered.
    fn missed_failure(&self, boot: &mut TcpBootstrap, me: Rank) -> Result<Option<Rank>> {
        let missed = missed_in(&boot.lookup()?, me, &self.known);
        if let Some(rank) = missed {
            tracing::info!(
                "reverb: rank {me}: one of init's collectives met a failure this rank had missed \
                 (rank {rank} lost or restarted)"
            );
        }
        Ok(missed)
    }
}

/// In the rendezvous's `table`, a rank other than `me` lost, or at an incarnation above the
/// one `known` gives it (0 when absent); a retired rank (a masked copy) is no failure.
fn missed_in(table: &[PeerAddress], me: Rank, known: &[(Rank, u32)]) -> Option<Rank> {
    let known_of = |r: Rank| known.iter().find(|(k, _)| *k == r).map_or(0, |&(_, i)| i);
    table
        .iter()
        .find(|a| a.rank != me && !a.retired && (a.lost || a.incarnation > known_of(a.rank)))
        .map(|a| a.rank)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn table(incarnations: &[u32], lost: &[Rank]) -> Vec<PeerAddress> {
        (0..incarnations.len() as Rank)
            .map(|rank| PeerAddress {
                rank,
                incarnation: incarnations[rank as usize],
                address: (!lost.contains(&rank)).then(|| vec![1]),
                lost: lost.contains(&rank),
                retired: false,
            })
            .collect()
    }

    /// A survivor that recovered ranks 2 and 3 (now at incarnation 1) misses nothing until
    /// another rank restarts or is lost; a rank not yet published is no failure.
    #[test]
    fn a_failure_is_missed_only_beyond_the_incarnations_recovered() {
        let known = [(2, 1), (3, 1)];
        assert_eq!(missed_in(&table(&[0, 0, 1, 1, 0, 0], &[]), 0, &known), None);
        assert_eq!(missed_in(&table(&[0, 0, 1, 1, 1, 1], &[]), 0, &known), Some(4));
        assert_eq!(missed_in(&table(&[0, 0, 1, 1, 0, 0], &[5]), 0, &known), Some(5));
        assert_eq!(missed_in(&table(&[0, 0, 2, 1, 0, 0], &[]), 0, &known), Some(2));
        let mut unpublished = table(&[0, 0, 1, 1, 0, 0], &[]);
        unpublished[4].address = None;
        assert_eq!(missed_in(&unpublished, 0, &known), None);
        // Before any recovery every restarted rank is missed; this rank itself never is.
        assert_eq!(missed_in(&table(&[0, 1, 0], &[]), 0, &[]), Some(1));
        assert_eq!(missed_in(&table(&[0, 1, 0], &[]), 1, &[]), None);
        let mut retired = table(&[0, 0, 1], &[2]);
        retired[2].retired = true;
        assert_eq!(missed_in(&retired, 0, &[]), None);
    }
}
