//! Telling `Runtime::init`'s first-attempt collectives apart from a recovery's.
//!
//! The rendezvous aborts the round in progress when a rank is lost and resumes it once the
//! rank has rejoined. A rank of incarnation 0 that was still busy between two of init's
//! collectives (allocating slots, say) never saw the abort: its next contribution lands in
//! the resumed round, which the others use for the recovery's first collective. So in init
//! every rank of incarnation 0 frames its contributions ([`FirstAttempt`]): a round that is
//! not framed throughout tells it that a recovery started (it joins it), and ranks of a
//! recovery ([`Recovering`]) repeat a round that holds framed contributions, as that rank
//! joins them at the next one (the final barrier's mark works the same way).

use std::time::Duration;

use reverb_transport::bootstrap::{PeerAddress, Rejoin};
use reverb_transport::{Bootstrap, JobInfo, Rank, Result, TransportError};

/// Prefix of a first-attempt init contribution.
const FRAME: &[u8] = b"reverb:init-first-attempt:";

/// Rounds a recovery collective repeats while first-attempt contributions arrive: each
/// repeated round moves every such rank into the recovery, so one is enough in practice.
const RETRIES: usize = 64;

fn framed(part: &[u8]) -> bool {
    part.starts_with(FRAME)
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
        let mut mine = Vec::with_capacity(FRAME.len() + data.len());
        mine.extend_from_slice(FRAME);
        mine.extend_from_slice(data);
        let parts = self.0.allgather(&mine)?;
        if parts.iter().all(|p| framed(p)) {
            return Ok(parts.into_iter().map(|mut p| p.split_off(FRAME.len())).collect());
        }
        let me = self.0.job().rank;
        let failed = self
            .0
            .lookup()?
            .into_iter()
            .find(|a| a.rank != me && (a.address.is_none() || a.incarnation > 0))
            .map(|a| a.rank);
        match failed {
            Some(rank) => {
                eprintln!(
                    "reverb: rank {me}: an init collective met the recovery of a failure this rank had \
                     missed (rank {rank} restarted): joining it"
                );
                Err(TransportError::PeerDead(rank))
            }
            None => Err(TransportError::Bootstrap(format!(
                "rank {me}: an init collective met other ranks' recovery collective, yet no rank has failed"
            ))),
        }
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
            "ranks stayed in their first attempt at init for {RETRIES} rounds of a recovery collective"
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
            .map(|(r, &i)| PeerAddress { rank: r as Rank, incarnation: i, address: Some(vec![1]) })
            .collect();
        Script { job, rounds: rounds.into(), sent: Vec::new(), table }
    }

    fn frame(data: &[u8]) -> Vec<u8> {
        [FRAME, data].concat()
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
    fn a_recovery_round_gives_up_after_its_retries() {
        let rounds = (0..RETRIES).map(|_| vec![frame(b"x")]).collect();
        let mut s = script(rounds, &[0]);
        assert!(matches!(Recovering(&mut s).allgather(b"y"), Err(TransportError::Bootstrap(_))));
    }
}
