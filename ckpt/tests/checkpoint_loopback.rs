//! Checkpoint logic on the loopback provider: 4 ranks as threads of this process, one per node,
//! so each case runs in milliseconds. Buddies: 0<->1, 2<->3. One Reed-Solomon group
//! {0, 1, 2, 3} with 2 parity blocks, kept by ranks 2 and 3 (2 encodes).
//!
//! A rank "fails" by returning from its thread: its provider is dropped and the others see it
//! dead, as they would a killed process. The multi-process SIGKILL versions of these cases are
//! in `checkpoint_procs.rs`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use reverb_ckpt::{
    team, Checkpointer, CkptConfig, CkptError, Epoch, ProtectSet, RestoreSource, RsLayout, Stage,
};
use reverb_transport::testkit::{pattern, run_threads};
use reverb_transport::{Bootstrap, PeerState, Provider, Rank};

const RANKS: u32 = 4;
const WAIT: Duration = Duration::from_secs(10);

fn config() -> CkptConfig {
    CkptConfig {
        slot_len: 64 << 10,
        // Several chunks and transfers per image, so torn and partial copies are real cases.
        chunk_len: 4 << 10,
        transfer_len: 4 << 10,
        buddy: true,
        parity: Some(RsLayout { group_nodes: 4, parity_shards: 2 }),
        timeout: WAIT,
        team: None,
    }
}

/// Rank `rank`'s protected array at `epoch`: sizes differ per rank so shards need padding.
fn data(rank: Rank, epoch: Epoch) -> Vec<u8> {
    pattern(u64::from(rank) * 1000 + epoch, 20_000 + rank as usize * 7919)
}

fn state(rank: Rank, epoch: Epoch) -> Vec<u8> {
    format!("rank {rank} epoch {epoch}").into_bytes()
}

fn checkpoint(ckpt: &mut Checkpointer, p: &mut dyn Provider, epoch: Epoch) -> Result<Epoch, CkptError> {
    let me = p.rank();
    let (array, small) = (data(me, epoch), state(me, epoch));
    let mut set = ProtectSet::new();
    set.protect(1, &array)?.protect(2, &small)?;
    ckpt.checkpoint(p, &set)
}

/// Restores `rank`'s `epoch`, checks both entries byte for byte and returns where it came from.
fn check_restored(ckpt: &mut Checkpointer, p: &mut dyn Provider, rank: Rank, epoch: Epoch) -> RestoreSource {
    let me = p.rank();
    let restored =
        ckpt.restore(p, rank, epoch).unwrap_or_else(|e| panic!("rank {me}: restore {rank}@{epoch}: {e}"));
    assert!(restored.image.entry(1) == Some(data(rank, epoch).as_slice()), "{rank}@{epoch}: array differs");
    assert_eq!(restored.image.entry(2), Some(state(rank, epoch).as_slice()), "{rank}@{epoch}: state");
    restored.source
}

fn new_checkpointer(boot: &mut dyn Bootstrap, p: &mut dyn Provider) -> Checkpointer {
    Checkpointer::new(p, boot, config()).expect("checkpointer")
}

/// Polls until every rank of `ranks` is seen dead; bounded by `WAIT`.
fn wait_dead(p: &mut dyn Provider, ranks: &[Rank]) {
    let start = Instant::now();
    while ranks.iter().any(|&r| p.peer_state(r) != PeerState::Dead) {
        assert!(start.elapsed() < WAIT, "ranks {ranks:?} not seen dead within {WAIT:?}");
        p.block(Duration::from_millis(5)).expect("block");
    }
}

fn survivors(victims: &[Rank]) -> Vec<Rank> {
    (0..RANKS).filter(|r| !victims.contains(r)).collect()
}

/// Everyone agrees (a survivor leads, so the victims' vote is their last message), then the
/// victims leave; returns whether this rank survives, once it has seen the victims dead.
fn kill(p: &mut dyn Provider, victims: &[Rank]) -> bool {
    let mut all = survivors(victims);
    all.extend_from_slice(victims);
    assert!(team::agree(p, &all, 1, true, WAIT).expect("agree before the failure"));
    if victims.contains(&p.rank()) {
        return false;
    }
    wait_dead(p, victims);
    true
}

/// Survivors leave together: nobody frees slots another survivor may still read.
fn finish(p: &mut dyn Provider, victims: &[Rank]) {
    assert!(team::agree(p, &survivors(victims), 2, true, WAIT).expect("survivors agree"));
}

#[test]
fn slots_flip_and_a_buddy_restores_a_lost_rank() {
    run_threads("ckpt_lb_flip", RANKS, |_, boot, p| {
        let mut ckpt = new_checkpointer(boot, p);
        for epoch in 1..=2 {
            assert_eq!(checkpoint(&mut ckpt, p, epoch).expect("checkpoint"), epoch);
        }
        // Both slots hold a committed epoch; a live rank's copy is read where it lies.
        let peer = (p.rank() + 1) % RANKS;
        assert_eq!(check_restored(&mut ckpt, p, peer, 1), RestoreSource::Local);
        assert_eq!(check_restored(&mut ckpt, p, peer, 2), RestoreSource::Local);
        // Epoch 3 overwrites epoch 1's slot, never epoch 2's (once every rank has read it).
        boot.barrier().expect("reads done");
        assert_eq!(checkpoint(&mut ckpt, p, 3).expect("epoch 3"), 3);
        assert_eq!(ckpt.committed_epoch(), Some(3));
        let err = ckpt.restore(p, peer, 1).expect_err("epoch 1's slot was reused");
        assert!(matches!(err, CkptError::Unrecoverable { epoch: 1, .. }), "{err}");
        assert_eq!(check_restored(&mut ckpt, p, peer, 2), RestoreSource::Local);
        let never = ckpt.restore(p, peer, 4).expect_err("epoch 4 was never written");
        assert!(matches!(never, CkptError::Unrecoverable { epoch: 4, .. }), "{never}");
        if !kill(p, &[0]) {
            return;
        }
        assert_eq!(ckpt.recovery_epoch(p, &survivors(&[0]), 1).expect("recovery line"), 3);
        match p.rank() {
            // The buddy reads its own copy; others read it by one-sided gets.
            1 => assert_eq!(check_restored(&mut ckpt, p, 0, 3), RestoreSource::Buddy(1)),
            2 => assert_eq!(check_restored(&mut ckpt, p, 0, 2), RestoreSource::Buddy(1)),
            _ => assert_eq!(check_restored(&mut ckpt, p, 0, 3), RestoreSource::Buddy(1)),
        }
        finish(p, &[0]);
    });
}

#[test]
fn parity_rebuilds_a_rank_and_its_buddy() {
    let victims = [0, 1];
    run_threads("ckpt_lb_parity", RANKS, |_, boot, p| {
        let mut ckpt = new_checkpointer(boot, p);
        for epoch in 1..=2 {
            assert_eq!(checkpoint(&mut ckpt, p, epoch).expect("checkpoint"), epoch);
        }
        if !kill(p, &victims) {
            return;
        }
        // Both copies of ranks 0 and 1 are gone: 2 lost of 4 data members, 2 parity blocks.
        let (lost, other) = if p.rank() == 2 { (0, 1) } else { (1, 0) };
        for (rank, epoch) in [(lost, 2), (other, 1)] {
            let source = check_restored(&mut ckpt, p, rank, epoch);
            let expected = RestoreSource::Parity { members: vec![2, 3], parity_hosts: vec![2, 3] };
            assert_eq!(source, expected, "rank {rank} epoch {epoch}");
        }
        finish(p, &victims);
    });
}

/// A masked copy's death under partial redundancy: rank 1 leaves after epoch 1 and is retired.
/// Rank 0, whose buddy it was, keeps no remote copy of epoch 2, but the group encodes rank 1's
/// shard as zeros, so rank 0 lost with its own copy is rebuilt from one parity block (rank 1's
/// shard is known, not a second erasure).
#[test]
fn parity_covers_a_rank_whose_buddy_was_retired() {
    run_threads("ckpt_lb_retired", RANKS, |_, boot, p| {
        let one_parity =
            CkptConfig { parity: Some(RsLayout { group_nodes: 4, parity_shards: 1 }), ..config() };
        let mut ckpt = Checkpointer::new(p, boot, one_parity).expect("checkpointer");
        assert_eq!(checkpoint(&mut ckpt, p, 1).expect("epoch 1"), 1);
        if !kill(p, &[1]) {
            return;
        }
        ckpt.retire(&[1]);
        assert_eq!(checkpoint(&mut ckpt, p, 2).expect("epoch 2 without rank 1"), 2);
        assert!(team::agree(p, &[2, 3, 0], 3, true, WAIT).expect("agree before losing rank 0"));
        if p.rank() == 0 {
            return;
        }
        wait_dead(p, &[0]);
        let source = check_restored(&mut ckpt, p, 0, 2);
        assert!(matches!(&source, RestoreSource::Parity { members, .. } if *members == [2, 3]), "{source:?}");
        assert!(team::agree(p, &[2, 3], 4, true, WAIT).expect("survivors agree"));
    });
}

#[test]
fn corrupt_and_torn_copies_are_refused() {
    let victims = [0];
    run_threads("ckpt_lb_corrupt", RANKS, |_, boot, p| {
        let mut ckpt = new_checkpointer(boot, p);
        for epoch in 1..=2 {
            assert_eq!(checkpoint(&mut ckpt, p, epoch).expect("checkpoint"), epoch);
        }
        match p.rank() {
            1 => {
                // Rank 0's epoch-2 copy torn (zero from the middle of its second chunk on), and
                // bytes flipped inside a chunk of its epoch-1 copy.
                ckpt.damage_hosted_copy(0, 2, 6_000, 0, true).expect("tear");
                ckpt.damage_hosted_copy(0, 1, 10_000, 16, false).expect("flip");
            }
            // Epoch 1's parity blocks are corrupt too: nothing valid is left of it.
            2 | 3 => ckpt.damage_parity_block(1, 5_000, 8).expect("flip parity"),
            _ => {}
        }
        if !kill(p, &victims) {
            return;
        }
        let restored = ckpt.restore(p, 0, 2).expect("epoch 2 falls back to parity");
        assert!(matches!(restored.source, RestoreSource::Parity { .. }), "{:?}", restored.source);
        assert!(restored.image.entry(1) == Some(data(0, 2).as_slice()), "restored bytes differ");
        let (level, why) = restored.skipped.last().expect("the torn buddy copy was skipped");
        assert!(level.starts_with("level 2"), "{level}");
        assert!(matches!(why, CkptError::ChunkCorrupt { chunk: 1, .. }), "{why:?}");

        let err = ckpt.restore(p, 0, 1).expect_err("no valid copy of epoch 1");
        let CkptError::Unrecoverable { rank: 0, epoch: 1, attempts } = &err else { panic!("{err}") };
        // The reasons name each level that was tried.
        for level in ["level 1", "level 2", "level 3"] {
            assert!(attempts.contains(level), "{level} missing: {attempts}");
        }
        finish(p, &victims);
    });
}

fn die_before_flip(epoch: Epoch, stage: Stage) {
    if epoch == 2 && stage == Stage::BuddyBodyLanded {
        panic!("rank killed at the buddy flip (on purpose)");
    }
}

#[test]
fn a_rank_lost_during_the_flip_leaves_the_previous_epoch() {
    // Rank 3 fails in epoch 2 after its body puts landed at its buddy (rank 2), before the
    // header flip: the buddy holds a body with no header.
    run_threads("ckpt_lb_torn_flip", RANKS, |_, boot, p| {
        let mut ckpt = new_checkpointer(boot, p);
        assert_eq!(checkpoint(&mut ckpt, p, 1).expect("epoch 1"), 1);
        if p.rank() == 3 {
            ckpt.set_fault_hook(Some(die_before_flip));
            let outcome = catch_unwind(AssertUnwindSafe(|| checkpoint(&mut ckpt, p, 2)));
            assert!(outcome.is_err(), "the hook stops rank 3 mid-checkpoint");
            return;
        }
        let err = checkpoint(&mut ckpt, p, 2).expect_err("epoch 2 cannot commit");
        assert!(matches!(err, CkptError::NotCommitted { epoch: 2, .. }), "{err}");
        assert_eq!(ckpt.committed_epoch(), Some(1), "the previous epoch stays committed");
        wait_dead(p, &[3]);
        assert_eq!(ckpt.recovery_epoch(p, &survivors(&[3]), 1).expect("recovery line"), 1);
        if p.rank() == 2 {
            assert_eq!(check_restored(&mut ckpt, p, 3, 1), RestoreSource::Buddy(2));
            let err = ckpt.restore(p, 3, 2).expect_err("epoch 2 never flipped");
            assert!(matches!(err, CkptError::Unrecoverable { rank: 3, epoch: 2, .. }), "{err}");
        }
        // Each survivor's own epoch-1 copy is intact.
        let me = p.rank();
        assert_eq!(check_restored(&mut ckpt, p, me, 1), RestoreSource::Local);
        finish(p, &[3]);
    });
}
