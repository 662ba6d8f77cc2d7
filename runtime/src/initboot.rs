//! Telling `Runtime::init`'s first-attempt collectives, and the log GC after a checkpoint,
//! apart from a recovery's first collective.
//!
//! The rendezvous aborts the round in progress when a rank is lost and resumes it once the
//! rank has rejoined. A rank of incarnation 0 that was still busy between two of init's
//! collectives (allocating slots, say) never saw the abort: its next contribution lands in
//! the resumed round, which the others use for the recovery's first collective. So in init
//! every rank of incarnation 0 frames its contributions ([`FirstAttempt`]): a round that is
//! not framed throughout tells it that a recovery started (it joins it), and ranks of a
//! recovery ([`Recovering`]) repeat a round that holds framed contributions, as that rank
//! joins them at the next one (the final barrier's mark works the same way).
//!
//! Mid-run, the log GC after a checkpoint (`LoggedEndpoint::checkpoint_taken`) is the one
//! collective outside recovery a survivor may enter without having seen a failure: a rank
//! that died after the checkpoint's commit is found by the others in the GC round (aborted),
//! but a survivor still busy before it (flushing its log, waiting for its sends) contributes
//! only once the failed rank is back, into the round the others use for the recovery. So the
//! GC round is framed too ([`GcRound`]), and a recovery's collectives repeat a round that
//! holds a GC contribution.

use std::time::Duration;

use reverb_transport::bootstrap::{PeerAddress, Rejoin};
use reverb_transport::{Bootstrap, JobInfo, Rank, Result, TransportError};

/// Prefix of a first-attempt init contribution.
const FRAME: &[u8] = b"reverb:init-first-attempt:";
/// Prefix of a contribution to the log GC after a checkpoint.
const GC_FRAME: &[u8] = b"reverb:log-gc:";

/// Rounds a recovery collective repeats while first-attempt contributions arrive: each
/// repeated round moves every such rank into the recovery, so one is enough in practice.
const RETRIES: usize = 64;

/// A contribution a recovery collective must not take as its own.
fn framed(part: &[u8]) -> bool {
    part.starts_with(FRAME) || part.starts_with(GC_FRAME)
}

/// An all-gather whose contributions carry `frame`: the contributions unframed when every
/// rank was in it, else `PeerDead` of a rank the rendezvous shows failed since `known`
/// (incarnations this rank knows, indexed by rank; empty: all 0), whose recovery this rank
/// must join; `what` names the collective in the message.
fn framed_allgather(
    boot: &mut dyn Bootstrap,
    frame: &[u8],
    data: &[u8],
    known: &[u32],
    what: &str,
) -> Result<Vec<Vec<u8>>> {
    let mut mine = Vec::with_capacity(frame.len() + data.len());
    mine.extend_from_slice(frame);
    mine.extend_from_slice(data);
    let parts = boot.allgather(&mine)?;
    // An empty part is a retired rank's (partial redundancy): it stays empty.
    if parts.iter().all(|p| p.is_empty() || p.starts_with(frame)) {
        return Ok(parts
            .into_iter()
            .map(|mut p| if p.is_empty() { p } else { p.split_off(frame.len()) })
            .collect());
    }
    let me = boot.job().rank;
    let known_of = |r: Rank| known.get(r as usize).copied().unwrap_or(0);
    // A retired rank (a masked copy) has no address for good and no recovery to join.
    let failed = boot
        .lookup()?
        .into_iter()
        .find(|a| a.rank != me && !a.retired && (a.address.is_none() || a.incarnation > known_of(a.rank)))
        .map(|a| a.rank);
    match failed {
        Some(rank) => {
            tracing::info!(
                "reverb: rank {me}: {what} met the recovery of a failure this rank had missed (rank \
                 {rank} restarted): joining it"
            );
            Err(TransportError::PeerDead(rank))
        }
        None => Err(TransportError::Bootstrap(format!(
            "rank {me}: {what} met other ranks' recovery collective, yet no rank has failed"
        ))),
    }
}

/// Collectives of a rank's first attempt at init (incarnation 0, no failure seen yet).
pub(crate) struct FirstAttempt<'a>(pub(crate) &'a mut dyn Bootstrap);

/// Collectives of a recovery inside init: restarted ranks, and survivors redoing init.
pub(crate) struct Recovering<'a>(pub(crate) &'a mut dyn Bootstrap);

impl Bootstrap for FirstAttempt<'_> {
    fn job(&self) -> &JobInfo {
        self.0.job()
    }

    /// `PeerDead` (a rank that failed and rejoined) when the round was a recovery's.
    fn allgather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        framed_allgather(self.0, FRAME, data, &[], "an init collective")
    }

    fn publish(&mut self, address: &[u8]) -> Result<()> {
        self.0.publish(address)
    }

    fn lookup(&mut self) -> Result<Vec<PeerAddress>> {
        self.0.lookup()
    }

    fn poll_rejoins(&mut self) -> Result<Vec<Rejoin>> {
        self.0.poll_rejoins()
    }

    fn wait_rejoin(&mut self, rank: Rank, timeout: Duration) -> Result<Rejoin> {
        self.0.wait_rejoin(rank, timeout)
    }
}

/// The log GC's all-gather after a checkpoint (mid-run); `known` holds the incarnation this
/// rank knows of each rank.
pub(crate) struct GcRound<'a> {
    pub(crate) boot: &'a mut dyn Bootstrap,
    pub(crate) known: &'a [u32],
}

impl Bootstrap for GcRound<'_> {
    fn job(&self) -> &JobInfo {
        self.boot.job()
    }

    /// `PeerDead` (a rank that failed and rejoined) when the round was a recovery's.
    fn allgather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        framed_allgather(self.boot, GC_FRAME, data, self.known, "the log GC after a checkpoint")
    }

    fn publish(&mut self, address: &[u8]) -> Result<()> {
        self.boot.publish(address)
    }

    fn lookup(&mut self) -> Result<Vec<PeerAddress>> {
        self.boot.lookup()
    }

    fn poll_rejoins(&mut self) -> Result<Vec<Rejoin>> {
        self.boot.poll_rejoins()
    }

    fn wait_rejoin(&mut self, rank: Rank, timeout: Duration) -> Result<Rejoin> {
        self.boot.wait_rejoin(rank, timeout)
    }
}

impl Bootstrap for Recovering<'_> {
    fn job(&self) -> &JobInfo {
        self.0.job()
    }

    fn allgather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        for _ in 0..RETRIES {
            let parts = self.0.allgather(data)?;
            if !parts.iter().any(|p| framed(p)) {
                return Ok(parts);
            }
        }
        Err(TransportError::Bootstrap(format!(
            "ranks stayed in their first attempt at init or in a log GC for {RETRIES} rounds of a recovery \
             collective"
        )))
    }

    fn publish(&mut self, address: &[u8]) -> Result<()> {
        self.0.publish(address)
    }

    fn lookup(&mut self) -> Result<Vec<PeerAddress>> {
        self.0.lookup()
    }

    fn poll_rejoins(&mut self) -> Result<Vec<Rejoin>> {
        self.0.poll_rejoins()
    }

    fn wait_rejoin(&mut self, rank: Rank, timeout: Duration) -> Result<Rejoin> {
        self.0.wait_rejoin(rank, timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// A scripted rendezvous: each allgather returns the next prepared round.
    struct Script {
        job: JobInfo,
        rounds: VecDeque<Vec<Vec<u8>>>,
        sent: Vec<Vec<u8>>,
        table: Vec<PeerAddress>,
    }

    impl Bootstrap for Script {
        fn job(&self) -> &JobInfo {
            &self.job
        }
        fn allgather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
            self.sent.push(data.to_vec());
            self.rounds.pop_front().ok_or_else(|| TransportError::Bootstrap("no more rounds".into()))
        }
        fn lookup(&mut self) -> Result<Vec<PeerAddress>> {
            Ok(self.table.clone())
        }
    }

    fn script(rounds: Vec<Vec<Vec<u8>>>, incarnations: &[u32]) -> Script {
        let job = JobInfo {
            rank: 0,
            size: incarnations.len() as u32,
            node: 0,
            local_rank: 0,
            ranks_per_node: 1,
            job_id: "initboot-test".into(),
            incarnation: 0,
        };
        let table = incarnations
            .iter()
            .enumerate()
            .map(|(r, &i)| PeerAddress {
                rank: r as Rank,
                incarnation: i,
                address: Some(vec![1]),
                lost: false,
                retired: false,
            })
            .collect();
        Script { job, rounds: rounds.into(), sent: Vec::new(), table }
    }

    fn frame(data: &[u8]) -> Vec<u8> {
        [FRAME, data].concat()
    }

    fn gc(data: &[u8]) -> Vec<u8> {
        [GC_FRAME, data].concat()
    }

    #[test]
    fn a_first_attempt_round_is_unframed_for_the_caller() {
        let mut s = script(vec![vec![frame(b"a"), frame(b"bc")]], &[0, 0]);
        let parts = FirstAttempt(&mut s).allgather(b"a").expect("round");
        assert_eq!(parts, vec![b"a".to_vec(), b"bc".to_vec()]);
        assert_eq!(s.sent, vec![frame(b"a")]);
    }

    #[test]
    fn a_first_attempt_meeting_a_recovery_round_names_the_restarted_rank() {
        let mut s = script(vec![vec![frame(b"slots"), vec![1, 0, 0, 0], vec![1, 0, 0, 0]]], &[0, 0, 1]);
        match FirstAttempt(&mut s).allgather(b"slots") {
            Err(TransportError::PeerDead(2)) => {}
            other => panic!("expected PeerDead(2), got {other:?}"),
        }
    }

    #[test]
    fn a_mixed_round_without_a_failed_rank_is_an_error_not_data() {
        let mut s = script(vec![vec![frame(b"x"), b"y".to_vec()]], &[0, 0]);
        assert!(matches!(FirstAttempt(&mut s).allgather(b"x"), Err(TransportError::Bootstrap(_))));
    }

    #[test]
    fn a_recovery_round_with_first_attempt_contributions_is_repeated() {
        let ids = vec![0u8, 0, 0, 0];
        let mut s = script(vec![vec![ids.clone(), frame(b"slots")], vec![ids.clone(), ids.clone()]], &[0, 1]);
        let parts = Recovering(&mut s).allgather(&ids).expect("second round");
        assert_eq!(parts, vec![ids.clone(), ids.clone()]);
        assert_eq!(s.sent, vec![ids.clone(), ids]);
    }

    #[test]
    fn a_gc_round_is_unframed_for_the_caller() {
        let mut s = script(vec![vec![gc(b"w0"), gc(b"w1")]], &[0, 2]);
        let parts = GcRound { boot: &mut s, known: &[0, 2] }.allgather(b"w0").expect("round");
        assert_eq!(parts, vec![b"w0".to_vec(), b"w1".to_vec()]);
        assert_eq!(s.sent, vec![gc(b"w0")]);
    }

    #[test]
    fn a_gc_round_meeting_a_recovery_names_the_rank_newer_than_known() {
        // Rank 1 restarted earlier (known at 1); rank 2 is back at 1 (known at 0).
        let round = vec![gc(b"w"), vec![2, 0, 0, 0], vec![2, 0, 0, 0]];
        let mut s = script(vec![round.clone()], &[0, 1, 1]);
        match (GcRound { boot: &mut s, known: &[0, 1, 0] }).allgather(b"w") {
            Err(TransportError::PeerDead(2)) => {}
            other => panic!("expected PeerDead(2), got {other:?}"),
        }
        let mut s = script(vec![round], &[0, 1, 1]);
        let known_all = GcRound { boot: &mut s, known: &[0, 1, 1] }.allgather(b"w");
        assert!(matches!(known_all, Err(TransportError::Bootstrap(_))), "{known_all:?}");
    }

    #[test]
    fn a_gc_round_meeting_a_recovery_skips_a_retired_rank() {
        // Rank 1 was retired (a masked copy: no address for good); rank 3 is back at 1.
        let round = vec![gc(b"w"), Vec::new(), vec![3, 0, 0, 0], vec![3, 0, 0, 0]];
        let mut s = script(vec![round], &[0, 0, 0, 1]);
        s.table[1] = PeerAddress { rank: 1, incarnation: 0, address: None, lost: true, retired: true };
        match (GcRound { boot: &mut s, known: &[0, 0, 0, 0] }).allgather(b"w") {
            Err(TransportError::PeerDead(3)) => {}
            other => panic!("expected PeerDead(3), got {other:?}"),
        }
    }

    #[test]
    fn a_recovery_round_with_a_gc_contribution_is_repeated() {
        let ids = vec![1u8, 0, 0, 0];
        let mut s = script(vec![vec![gc(b"w"), ids.clone()], vec![ids.clone(), ids.clone()]], &[0, 1]);
        let parts = Recovering(&mut s).allgather(&ids).expect("second round");
        assert_eq!(parts, vec![ids.clone(), ids.clone()]);
        assert_eq!(s.sent.len(), 2);
    }

    #[test]
    fn a_recovery_round_gives_up_after_its_retries() {
        let rounds = (0..RETRIES).map(|_| vec![frame(b"x")]).collect();
        let mut s = script(rounds, &[0]);
        assert!(matches!(Recovering(&mut s).allgather(b"y"), Err(TransportError::Bootstrap(_))));
    }
}
