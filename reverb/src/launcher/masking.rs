//! Partial redundancy at the launcher (`reverb run --redundancy R`): a copy of a virtual rank
//! killed by a signal while another copy of it runs is masked, not failed. Nothing is
//! respawned and nothing rolls back: the rendezvous retires its slot (collectives go on
//! without it), and the other ranks forget it once they find it dead and retired. The
//! death of a sphere's last copy is an ordinary failure: its node is respawned and recovered
//! from checkpoints and logs, the retired copies staying retired.
//!
//! A launcher that runs part of a job (one host's agent) cannot see the other hosts' copies:
//! it asks the job's controller ([`Masker`]), which retires the copy at the rendezvous if a
//! mate is alive there, all in one step.

use reverb_runtime::replicas::ReplicaMap;

use super::spawn::{RankProc, RankStatus};

/// A copy's death the job went on without.
#[derive(Debug, Clone)]
pub(super) struct Masked {
    pub(super) rank: u32,
    pub(super) virtual_rank: u32,
    pub(super) signal: i32,
    /// The copies of its virtual rank still running then.
    pub(super) live_mates: Vec<u32>,
    pub(super) at: std::time::Duration,
}

/// `(rank, incarnation, mates, reason)` -> whether the copy was retired.
pub type MaskFn = dyn Fn(u32, u32, &[u32], &str) -> anyhow::Result<bool> + Send + Sync;

/// Asks the job's controller to mask a copy's death: whether it retired the copy (a mate was
/// alive at the rendezvous).
#[derive(Clone)]
pub struct Masker(pub std::sync::Arc<MaskFn>);

impl std::fmt::Debug for Masker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Masker")
    }
}

/// The job's spheres, as the launcher sees them.
pub(super) struct Masking {
    map: ReplicaMap,
    /// A part of a job: who decides.
    masker: Option<Masker>,
}

impl Masking {
    pub(super) fn new(map: ReplicaMap, masker: Option<Masker>) -> Masking {
        Masking { map, masker }
    }

    /// A part of a job: asks the controller to mask `rank`'s death; its virtual rank and
    /// the mates it named when masked.
    pub(super) fn ask_controller(
        &self,
        rank: u32,
        incarnation: u32,
        reason: &str,
    ) -> Option<(u32, Vec<u32>)> {
        let (v, _) = self.map.of_physical(rank)?;
        let mates: Vec<u32> = self.map.sphere(v).iter().copied().filter(|&p| p != rank).collect();
        let masker = self.masker.as_ref().filter(|_| !mates.is_empty())?;
        match (masker.0)(rank, incarnation, &mates, reason) {
            Ok(true) => Some((v, mates)),
            Ok(false) => None,
            Err(e) => {
                eprintln!(
                    "reverb run: rank {rank}: asking the controller to mask its death: {e:#}; failing it"
                );
                None
            }
        }
    }

    /// The copies of `rank`'s virtual rank other than it that run (or finished: they passed
    /// the job's final barrier, which this copy was in too), if there are any: then its death
    /// is masked. `procs` are this launcher's ranks from `first` on (the whole job: a part of a
    /// job asks its controller instead, `ask_controller`).
    pub(super) fn live_mates(&self, rank: u32, procs: &[RankProc], first: u32) -> Option<(u32, Vec<u32>)> {
        let (v, _) = self.map.of_physical(rank)?;
        let running = |p: u32| {
            p.checked_sub(first)
                .and_then(|i| procs.get(i as usize))
                .is_some_and(|proc| matches!(proc.status, RankStatus::Running | RankStatus::Exited(0)))
        };
        let mates: Vec<u32> =
            self.map.sphere(v).iter().copied().filter(|&p| p != rank && running(p)).collect();
        (!mates.is_empty()).then_some((v, mates))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_copy_with_a_running_mate_is_masked() {
        // 2 virtual ranks at 2x: spheres {0, 2} and {1, 3}.
        let masking = Masking::new(ReplicaMap::new(2, 2.0).unwrap(), None);
        let mut procs: Vec<RankProc> = (0..4).map(RankProc::for_test).collect();
        assert_eq!(masking.live_mates(2, &procs, 0), Some((0, vec![0])));
        procs[0].status = RankStatus::Exited(0);
        assert_eq!(masking.live_mates(2, &procs, 0), Some((0, vec![0])), "a mate that finished");
        procs[0].status = RankStatus::Signaled(9);
        assert_eq!(masking.live_mates(2, &procs, 0), None, "its sphere's last copy");
        assert_eq!(masking.live_mates(1, &procs, 0), Some((1, vec![3])));
        assert_eq!(masking.live_mates(7, &procs, 0), None, "no such rank");
    }
}
