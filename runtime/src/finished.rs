//! A restarted rank whose peers had already finished. A rank that passed the job's final
//! barrier and left the rendezvous keeps no log and joins no recovery: a node lost after
//! that (killed while its ranks were exiting) cannot replay, so its restarted ranks say so
//! at once instead of waiting for those peers until a timeout.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use reverb_transport::bootstrap::PeerAddress;
use reverb_transport::{Bootstrap, Rank};

use super::error::{Result, RuntimeError};

/// How long a rank restarted in some recovery (incarnation > 0) may stay live without an
/// address before it counts as finished: between its rejoin and its publish it has none.
const SETTLE: Duration = Duration::from_secs(3);

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
/// without an address. A survivor of incarnation 0 published in its init, long before any
/// restart, so it has left; a rank restarted earlier may be between its rejoin and its
/// publish, so it counts once it stayed so for `SETTLE`.
#[derive(Default)]
pub(super) struct FinishedPeers {
    unpublished_since: BTreeMap<Rank, Instant>,
}

impl FinishedPeers {
    /// The ranks of `table` (other than `me`) that finished, by the rule above.
    pub(super) fn in_table(&mut self, table: &[PeerAddress], me: Rank) -> Vec<Rank> {
        let now = Instant::now();
        let mut finished = Vec::new();
        for a in table.iter().filter(|a| a.rank != me) {
            if a.lost || a.retired || a.address.is_some() {
                self.unpublished_since.remove(&a.rank);
                continue;
            }
            let since = *self.unpublished_since.entry(a.rank).or_insert(now);
            if a.incarnation == 0 || now.duration_since(since) >= SETTLE {
                finished.push(a.rank);
            }
        }
        finished
    }

    /// `Err` with the report when `table` shows finished ranks.
    pub(super) fn check(&mut self, table: &[PeerAddress], me: Rank, unit: &LostUnit) -> Result<()> {
        match self.in_table(table, me).as_slice() {
            [] => Ok(()),
            finished => Err(unit.report(finished)),
        }
    }
}

/// `cause` (an error of a restarted rank's recovery), or the finished-peers report when the
/// rendezvous shows ranks that finished: those explain it.
pub(super) fn explain(boot: &mut dyn Bootstrap, unit: &LostUnit, cause: RuntimeError) -> RuntimeError {
    let me = boot.job().rank;
    match boot.lookup() {
        Ok(table) => FinishedPeers::default().check(&table, me, unit).err().unwrap_or(cause),
        Err(_) => cause,
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
    fn survivors_gone_from_the_rendezvous_are_finished_and_named_in_ranges() {
        let table = [entry(0, 0, false, false), entry(1, 0, false, false), entry(2, 1, true, false)];
        let table = [&table[..], &[entry(3, 1, false, true), entry(4, 0, true, false)]].concat();
        let unit = LostUnit { nodes: vec![1], ranks: vec![2, 3] };
        let mut peers = FinishedPeers::default();
        assert_eq!(peers.in_table(&table, 2), vec![0, 1]);
        let report = peers.check(&table, 2, &unit).unwrap_err().to_string();
        assert!(report.contains("node 1 (ranks 2-3) was lost after ranks 0-1 had finished"), "{report}");
        assert_eq!(ranges(&[0, 1, 4, 6, 7]), "0-1, 4, 6-7");
    }

    #[test]
    fn a_rejoined_rank_not_yet_published_is_not_finished_at_once() {
        let table = [entry(5, 2, false, false)];
        assert!(FinishedPeers::default().in_table(&table, 2).is_empty());
    }
}
