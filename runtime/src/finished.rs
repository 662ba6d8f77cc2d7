//! A restarted rank whose peers had already finished. A rank that passed the job's final
//! barrier and left the rendezvous keeps no log and joins no recovery: a node lost after
//! that (killed while its ranks were exiting) cannot replay, so its restarted ranks say so
//! within seconds instead of waiting for those peers until a timeout.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use reverb_transport::bootstrap::PeerAddress;
use reverb_transport::recovery::await_rejoin;
use reverb_transport::{Bootstrap, Provider, Rank, TransportError};

use super::error::{Result, RuntimeError};

/// How long a rank of incarnation 0 stays without an address before it counts as finished:
/// as long as the transport's rejoin waits for ranks still in the job's first open (10 s), as
/// the rendezvous shows a survivor slow to start (a node lost at start-up on a loaded host)
/// the same way until it publishes. A rank that left with an error said goodbye too, but it
/// ended non-zero, and its launcher stops the job (this rank with it) well within this time.
const CONFIRM: Duration = Duration::from_secs(10);

/// Between two looks at the rendezvous while candidates settle.
const POLL: Duration = Duration::from_millis(20);

/// The restarted rank's failure unit, for the report.
pub(super) struct LostUnit {
    /// Its nodes, sorted.
    pub nodes: Vec<u32>,
    /// Its ranks, sorted.
    pub ranks: Vec<Rank>,
}

impl LostUnit {
    /// The unit of `rank`, from every rank's unit and node.
    pub(super) fn of(rank: Rank, unit_of: &[u32], node_of: &[u32]) -> LostUnit {
        let unit = unit_of.get(rank as usize).copied();
        let ranks: Vec<Rank> =
            (0..unit_of.len() as Rank).filter(|&r| unit_of.get(r as usize).copied() == unit).collect();
        let mut nodes: Vec<u32> = ranks.iter().filter_map(|&r| node_of.get(r as usize).copied()).collect();
        nodes.dedup();
        LostUnit { nodes, ranks }
    }

    /// "node 1 (ranks 2-3) was lost after ranks 0-1, 4-7 had finished; ...".
    fn report(&self, finished: &[Rank]) -> RuntimeError {
        let nodes = match self.nodes.as_slice() {
            [n] => format!("node {n}"),
            more => format!("nodes {}", ranges(more)),
        };
        RuntimeError::Unrecoverable(format!(
            "{nodes} ({}) was lost after {} had finished; their logs ended with them, so the \
             restarted ranks cannot replay",
            ranks(&self.ranks),
            ranks(finished)
        ))
    }
}

/// Watches the rendezvous for ranks that left the job: live there (not lost, not retired)
/// without an address, for `CONFIRM` (incarnation 0) or `settle` (a rank restarted too may
/// not have published yet).
#[derive(Default)]
pub(super) struct FinishedPeers {
    /// The candidates, and since when each was seen so.
    gone_since: BTreeMap<Rank, (u32, Instant)>,
    /// How long a rank of incarnation > 0 stays without an address before it counts, or
    /// `None` when such ranks are no candidates (before this rank has published, as ranks
    /// restarted with it may wait for that before they publish). The wait for restarted ranks
    /// to come back (the rejoin timeout): between its rejoin and its publish a restarted rank
    /// has no address either, for as long as its start takes (under the VM's emulated CPU,
    /// seconds more than its unit mate's).
    settle: Option<Duration>,
}

impl FinishedPeers {
    /// Ranks of every incarnation are candidates (once this rank has published); a restarted
    /// one counts after `settle`.
    pub(super) fn with_restarted(settle: Duration) -> FinishedPeers {
        FinishedPeers { settle: Some(settle), ..FinishedPeers::default() }
    }

    /// Records the candidates of `table` (other than `me`) seen at `now`; returns them.
    fn candidates(&mut self, table: &[PeerAddress], me: Rank, now: Instant) -> Vec<Rank> {
        for a in table.iter().filter(|a| a.rank != me) {
            let counted = self.settle.is_some() || a.incarnation == 0;
            if a.lost || a.retired || a.address.is_some() || !counted {
                self.gone_since.remove(&a.rank);
            } else {
                self.gone_since.entry(a.rank).or_insert((a.incarnation, now));
            }
        }
        self.gone_since.keys().copied().collect()
    }

    /// The candidates gone long enough at `now` to count as finished.
    fn finished_at(&self, now: Instant) -> Vec<Rank> {
        let bound = |incarnation: u32| match (incarnation, self.settle) {
            (0, _) | (_, None) => CONFIRM,
            (_, Some(settle)) => settle,
        };
        self.gone_since
            .iter()
            .filter(|(_, &(incarnation, since))| now.duration_since(since) >= bound(incarnation))
            .map(|(&r, _)| r)
            .collect()
    }

    /// `Err` with the report when `table`'s candidates have been gone long enough.
    pub(super) fn check(&mut self, table: &[PeerAddress], me: Rank, unit: &LostUnit) -> Result<()> {
        let now = Instant::now();
        self.candidates(table, me, now);
        match self.finished_at(now).as_slice() {
            [] => Ok(()),
            finished => Err(unit.report(finished)),
        }
    }

    /// Looks at the rendezvous until no candidate is left (`Ok`) or they count as finished
    /// (`Err` with the report): at most `settle` and a look.
    pub(super) fn settle(&mut self, boot: &mut dyn Bootstrap, unit: &LostUnit) -> Result<()> {
        let me = boot.job().rank;
        loop {
            self.check(&boot.lookup()?, me, unit)?;
            if self.gone_since.is_empty() {
                return Ok(());
            }
            std::thread::sleep(POLL);
        }
    }
}

/// `e` (an error of a restarted rank's recovery) as `during_recovery` says it, or the
/// finished-peers report when the peer whose loss caused it had left the job and stays gone
/// (a restarted one for `settle`).
pub(super) fn explain(
    boot: &mut dyn Bootstrap,
    unit: &LostUnit,
    e: RuntimeError,
    settle: Duration,
) -> RuntimeError {
    let me = boot.job().rank;
    let mut peers = FinishedPeers::with_restarted(settle);
    let left = match (e.dead_peer(), boot.lookup()) {
        (Some(dead), Ok(table)) => peers.candidates(&table, me, Instant::now()).contains(&dead),
        _ => false,
    };
    if !left {
        return e.during_recovery();
    }
    match peers.settle(boot, unit) {
        Err(report @ RuntimeError::Unrecoverable(_)) => report,
        _ => e.during_recovery(),
    }
}

/// How long one wait for a unit mate's rejoin lasts before the rendezvous is looked at again.
const MATE_SLICE: Duration = Duration::from_millis(100);

/// Waits (bounded by `timeout`) for unit mate `mate` to rejoin and reconnects to it, looking
/// at the rendezvous between slices of the wait: a mate that exited before the node was lost
/// is not restarted, and the peers that finished then say why the wait would be in vain.
pub(super) fn await_mate(
    provider: &mut dyn Provider,
    boot: &mut dyn Bootstrap,
    mate: Rank,
    timeout: Duration,
    unit: &LostUnit,
) -> Result<()> {
    let me = boot.job().rank;
    let start = Instant::now();
    let mut finished = FinishedPeers::with_restarted(timeout);
    loop {
        let slice = MATE_SLICE.min(timeout.saturating_sub(start.elapsed()));
        match await_rejoin(provider, boot, mate, None, slice) {
            Ok(_) => return Ok(()),
            Err(TransportError::Timeout(_)) if start.elapsed() < timeout => {}
            Err(TransportError::Timeout(_)) => return Err(TransportError::Timeout(timeout).into()),
            Err(e) => return Err(e.into()),
        }
        finished.check(&boot.lookup()?, me, unit)?;
    }
}

/// "rank 3", "ranks 0-1, 4".
fn ranks(sorted: &[u32]) -> String {
    match sorted {
        [one] => format!("rank {one}"),
        more => format!("ranks {}", ranges(more)),
    }
}

/// "0-1, 4, 6-7".
fn ranges(sorted: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        out.push(if i == j { sorted[i].to_string() } else { format!("{}-{}", sorted[i], sorted[j]) });
        i = j + 1;
    }
    out.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(rank: Rank, incarnation: u32, address: bool, lost: bool) -> PeerAddress {
        PeerAddress { rank, incarnation, address: address.then(|| vec![1]), lost, retired: false }
    }

    #[test]
    fn survivors_gone_from_the_rendezvous_a_while_are_finished_and_named_in_ranges() {
        let table = [entry(0, 0, false, false), entry(1, 0, false, false), entry(2, 1, true, false)];
        let table = [&table[..], &[entry(3, 1, false, true), entry(4, 0, true, false)]].concat();
        let mut peers = FinishedPeers::default();
        let seen = Instant::now();
        assert_eq!(peers.candidates(&table, 2, seen), vec![0, 1]);
        assert!(peers.finished_at(seen).is_empty(), "not at once: a failed rank's exit looks the same");
        assert_eq!(peers.finished_at(seen + CONFIRM), vec![0, 1]);
        let unit = LostUnit { nodes: vec![1], ranks: vec![2, 3] };
        let report = unit.report(&[0, 1, 4, 6, 7]).to_string();
        assert!(
            report.contains("node 1 (ranks 2-3) was lost after ranks 0-1, 4, 6-7 had finished"),
            "{report}"
        );
    }

    #[test]
    fn a_rejoined_rank_not_yet_published_counts_only_after_the_settle_time() {
        assert!(FinishedPeers::default()
            .candidates(&[entry(5, 2, false, false)], 2, Instant::now())
            .is_empty());
        let settle = Duration::from_secs(30);
        let mut peers = FinishedPeers::with_restarted(settle);
        let seen = Instant::now();
        assert_eq!(peers.candidates(&[entry(5, 2, false, false)], 2, seen), vec![5]);
        assert!(peers.finished_at(seen + CONFIRM).is_empty());
        assert_eq!(peers.finished_at(seen + settle), vec![5]);
        assert!(peers.candidates(&[entry(5, 2, true, false)], 2, seen + CONFIRM).is_empty(), "published");
    }
}
