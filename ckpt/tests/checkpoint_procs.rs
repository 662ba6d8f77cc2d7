//! Checkpoints end to end: 8 real processes on 4 simulated nodes (2 ranks each) over the
//! provider of `REVERB_PROVIDER` (shm by default; verbs unchanged). Buddies: 0<->2, 1<->3,
//! 4<->6, 5<->7. Reed-Solomon groups (4 data + 2 parity): {0,2,4,6} with parity on 4 and 6,
//! {1,3,5,7} with parity on 5 and 7.
//!
//! Failures are real: the victims SIGKILL themselves (a whole node, or a node and its buddy
//! node), and survivors restore the dead ranks' data and compare it byte for byte.

mod common;

use std::time::{Duration, Instant};

use reverb_ckpt::{
    team, Checkpointer, CkptConfig, CkptError, Epoch, ProtectSet, RestoreSource, RsLayout, Stage,
};
use reverb_transport::{PeerState, Provider, Rank};

const RANKS: u32 = 8;
const RANKS_PER_NODE: u32 = 2;
/// The bound of one wait, times `REVERB_TEST_TIME_SCALE` (the rxe VM's suite sets it: TCG is slow).
fn wait() -> Duration {
    Duration::from_secs(30) * common::time_scale()
}

fn config() -> CkptConfig {
    CkptConfig {
        slot_len: 1 << 20,
        // Several chunks and transfers per image, so torn and partial copies are real cases.
        chunk_len: 64 << 10,
        transfer_len: 64 << 10,
        buddy: true,
        parity: Some(RsLayout { group_nodes: 4, parity_shards: 2 }),
        timeout: wait(),
        team: None,
    }
}

/// Rank `rank`'s protected array at `epoch`: sizes differ per rank so shards need padding.
fn data(rank: Rank, epoch: Epoch) -> Vec<u8> {
    common::pattern(u64::from(rank) * 1000 + epoch, 200_000 + rank as usize * 7919)
}

fn state(rank: Rank, epoch: Epoch) -> Vec<u8> {
    format!("rank {rank} epoch {epoch}").into_bytes()
}

fn checkpoint(
    ckpt: &mut Checkpointer,
    provider: &mut dyn Provider,
    epoch: Epoch,
) -> Result<Epoch, CkptError> {
    let me = provider.rank();
    let (array, small) = (data(me, epoch), state(me, epoch));
    let mut set = ProtectSet::new();
    set.protect(1, &array)?.protect(2, &small)?;
    ckpt.checkpoint(provider, &set)
}

fn check_restored(
    ckpt: &mut Checkpointer,
    provider: &mut dyn Provider,
    rank: Rank,
    epoch: Epoch,
) -> RestoreSource {
    let restored = ckpt
        .restore(provider, rank, epoch)
        .unwrap_or_else(|e| panic!("rank {}: restore of rank {rank} epoch {epoch}: {e}", provider.rank()));
    let mut array = vec![0u8; data(rank, epoch).len()];
    restored.image.restore_into(1, &mut array).expect("entry 1");
    assert!(array == data(rank, epoch), "rank {rank} epoch {epoch}: restored array differs");
    assert_eq!(restored.image.entry(2), Some(state(rank, epoch).as_slice()));
    println!(
        "restored rank {rank} epoch {epoch} from {:?} (skipped {:?})",
        restored.source, restored.skipped
    );
    restored.source
}

fn die() -> ! {
    // SIGKILL to our own pid ends the process at once, as a node failure would.
    let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    unreachable!("SIGKILL returned")
}

fn wait_dead(provider: &mut dyn Provider, ranks: &[Rank]) {
    let start = Instant::now();
    while ranks.iter().any(|&r| provider.peer_state(r) != PeerState::Dead) {
        assert!(start.elapsed() < wait(), "ranks {ranks:?} not seen dead within {:?}", wait());
        provider.progress().expect("progress");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The ranks that outlive `victims`, in rank order.
fn survivors(victims: &[Rank]) -> Vec<Rank> {
    (0..RANKS).filter(|r| !victims.contains(r)).collect()
}

/// Launches the test as the job; `victims` must die by SIGKILL, every other rank pass.
fn run_parent(test: &str, victims: &[Rank]) {
    let job = common::Job { ranks_per_node: RANKS_PER_NODE, ..common::Job::new(RANKS) };
    for exit in common::run_job(test, &job) {
        if victims.contains(&exit.rank) {
            assert_eq!(
                exit.signal,
                Some(libc::SIGKILL),
                "victim rank {} did not die by SIGKILL:\n{}",
                exit.rank,
                exit.output()
            );
        } else {
            assert!(
                exit.code == Some(0) && exit.stdout.contains("1 passed"),
                "rank {} failed ({:?}, signal {:?}):\n{}",
                exit.rank,
                exit.code,
                exit.signal,
                exit.output()
            );
        }
    }
}

/// Two committed epochs, then `victims` die; returns the survivor's provider and checkpointer.
fn two_epochs_then_kill(
    victims: &[Rank],
    before_kill: impl FnOnce(&mut Checkpointer, &mut dyn Provider),
) -> Option<(Box<dyn Provider>, Checkpointer)> {
    let (_job, mut boot, mut provider) = common::child()?;
    let mut ckpt = Checkpointer::new(provider.as_mut(), &mut boot, config()).expect("checkpointer");
    for epoch in 1..=2 {
        assert_eq!(checkpoint(&mut ckpt, provider.as_mut(), epoch).expect("checkpoint"), epoch);
    }
    assert_eq!(ckpt.committed_epoch(), Some(2));
    before_kill(&mut ckpt, provider.as_mut());
    // Everyone is done before anyone dies. A survivor leads: the victims' last message is
    // their vote, which the leader has taken before it releases them.
    let mut all = survivors(victims);
    all.extend_from_slice(victims);
    assert!(team::agree(provider.as_mut(), &all, 1, true, wait()).expect("agree before the kill"));
    let me = provider.rank();
    if victims.contains(&me) {
        die();
    }
    wait_dead(provider.as_mut(), victims);
    Some((provider, ckpt))
}

/// Survivors leave together: nobody frees slots another survivor may still read.
fn finish(provider: &mut dyn Provider, victims: &[Rank]) {
    assert!(team::agree(provider, &survivors(victims), 2, true, wait()).expect("survivors agree"));
}

#[test]
fn node_loss_restored_from_buddy() {
    let test = "node_loss_restored_from_buddy";
    let victims = [0, 1];
    if !common::is_child() {
        return run_parent(test, &victims);
    }
    let Some((mut provider, mut ckpt)) = two_epochs_then_kill(&victims, |_, _| {}) else { return };
    let p = provider.as_mut();
    assert_eq!(ckpt.recovery_epoch(p, &survivors(&victims), 1).expect("recovery line"), 2);
    match p.rank() {
        // Remote buddies, read by one-sided gets.
        4 => assert_eq!(check_restored(&mut ckpt, p, 0, 2), RestoreSource::Buddy(2)),
        5 => assert_eq!(check_restored(&mut ckpt, p, 1, 2), RestoreSource::Buddy(3)),
        // The previous epoch is still there, in the other slot.
        6 => assert_eq!(check_restored(&mut ckpt, p, 0, 1), RestoreSource::Buddy(2)),
        // The buddy reads its own copy.
        2 => assert_eq!(check_restored(&mut ckpt, p, 0, 2), RestoreSource::Buddy(2)),
        7 => {
            // An epoch that was never written is a clear error, not garbage.
            let err = ckpt.restore(p, 1, 3).expect_err("epoch 3 was never checkpointed");
            assert!(matches!(err, CkptError::Unrecoverable { rank: 1, epoch: 3, .. }), "{err}");
            // A live rank restores from its own level-1 copy.
            assert_eq!(check_restored(&mut ckpt, p, 7, 2), RestoreSource::Local);
        }
        _ => {}
    }
    finish(p, &victims);
}

#[test]
fn node_and_buddy_loss_restored_from_parity() {
    let test = "node_and_buddy_loss_restored_from_parity";
    let victims = [0, 1, 2, 3];
    if !common::is_child() {
        return run_parent(test, &victims);
    }
    let Some((mut provider, mut ckpt)) = two_epochs_then_kill(&victims, |_, _| {}) else { return };
    let p = provider.as_mut();
    let lost = p.rank() - 4; // 4 restores 0, 5 restores 1, 6 restores 2, 7 restores 3
    let source = check_restored(&mut ckpt, p, lost, 2);
    assert!(matches!(source, RestoreSource::Parity { .. }), "rank {lost} restored from {source:?}");
    if p.rank() == 4 {
        check_restored(&mut ckpt, p, 2, 1);
    }
    finish(p, &victims);
}

#[test]
fn corrupted_copies_are_detected() {
    let test = "corrupted_copies_are_detected";
    let victims = [0, 1];
    if !common::is_child() {
        return run_parent(test, &victims);
    }
    let damage = |ckpt: &mut Checkpointer, p: &mut dyn Provider| match p.rank() {
        // Flipped bytes in the middle of rank 0's buddy copy, and in the header of its
        // previous epoch's copy.
        2 => {
            ckpt.damage_hosted_copy(0, 2, 100_000, 16, false).expect("flip");
            ckpt.damage_hosted_copy(0, 1, 20, 1, false).expect("flip header");
        }
        // Rank 1's buddy copy truncated (zeroed from its middle to the slot end), and both
        // parity blocks of its group corrupted: nothing can rebuild it.
        3 => ckpt.damage_hosted_copy(1, 2, 100_000, 0, true).expect("truncate"),
        5 | 7 => ckpt.damage_parity_block(2, 5_000, 8).expect("flip parity"),
        _ => {}
    };
    let Some((mut provider, mut ckpt)) = two_epochs_then_kill(&victims, damage) else { return };
    let p = provider.as_mut();
    match p.rank() {
        4 | 6 => {
            let epoch = if p.rank() == 4 { 2 } else { 1 };
            let restored = ckpt.restore(p, 0, epoch).expect("rank 0 falls back to parity");
            assert!(matches!(restored.source, RestoreSource::Parity { .. }), "{:?}", restored.source);
            let (level, why) = restored.skipped.last().expect("the buddy copy was skipped");
            assert!(level.contains("buddy"), "{level}");
            let expected = if epoch == 2 { "ChunkCorrupt" } else { "HeaderCorrupt" };
            assert!(format!("{why:?}").starts_with(expected), "epoch {epoch}: {why:?}");
            assert!(restored.image.entry(1) == Some(data(0, epoch).as_slice()), "restored bytes differ");
        }
        5 => {
            let err = ckpt.restore(p, 1, 2).expect_err("rank 1 cannot be rebuilt");
            let text = err.to_string();
            assert!(matches!(err, CkptError::Unrecoverable { rank: 1, epoch: 2, .. }), "{text}");
            assert!(text.contains("CRC32C"), "the reasons name the failed checks: {text}");
            // The previous epoch's copies are intact.
            assert_eq!(check_restored(&mut ckpt, p, 1, 1), RestoreSource::Buddy(3));
        }
        _ => {}
    }
    finish(p, &victims);
}

fn die_before_flip(epoch: Epoch, stage: Stage) {
    if epoch == 2 && stage == Stage::BuddyBodyLanded {
        die();
    }
}

#[test]
fn killed_during_epoch_flip_keeps_the_previous_epoch() {
    let test = "killed_during_epoch_flip_keeps_the_previous_epoch";
    // Node 1 (ranks 2, 3) dies in epoch 2 after its body puts landed, before the header flip.
    // It is also node 0's buddy, so node 0's epoch-2 copies die with it mid-checkpoint.
    let victims = [2, 3];
    if !common::is_child() {
        return run_parent(test, &victims);
    }
    let Some((_job, mut boot, mut provider)) = common::child() else { return };
    let p = provider.as_mut();
    let mut ckpt = Checkpointer::new(p, &mut boot, config()).expect("checkpointer");
    assert_eq!(checkpoint(&mut ckpt, p, 1).expect("epoch 1"), 1);
    if victims.contains(&p.rank()) {
        ckpt.set_fault_hook(Some(die_before_flip));
    }
    let err = checkpoint(&mut ckpt, p, 2).expect_err("epoch 2 cannot commit");
    assert!(matches!(err, CkptError::NotCommitted { epoch: 2, .. }), "{err}");
    assert_eq!(ckpt.committed_epoch(), Some(1), "the previous epoch stays committed");
    wait_dead(p, &victims);
    assert_eq!(ckpt.recovery_epoch(p, &survivors(&victims), 1).expect("recovery line"), 1);
    match p.rank() {
        // Node 0 keeps node 1's copies: epoch 2's slot has its body but no header.
        0 => {
            assert_eq!(check_restored(&mut ckpt, p, 2, 1), RestoreSource::Buddy(0));
            let err = ckpt.restore(p, 2, 2).expect_err("epoch 2 never flipped");
            assert!(matches!(err, CkptError::Unrecoverable { rank: 2, epoch: 2, .. }), "{err}");
        }
        4 => {
            assert_eq!(check_restored(&mut ckpt, p, 3, 1), RestoreSource::Buddy(1));
            // Rank 0's own buddy died: its level-1 copy still has epoch 1.
            assert_eq!(check_restored(&mut ckpt, p, 0, 1), RestoreSource::Local);
        }
        _ => {}
    }
    finish(p, &victims);
}

#[test]
fn teams_checkpoint_independently() {
    let test = "teams_checkpoint_independently";
    // Two teams of two nodes each (L1 clusters): ranks 0-3 and 4-7, with 2-node groups and one
    // parity block each, so groups stay inside teams. Buddies pair nodes inside each team here.
    let victims = [0, 1];
    if !common::is_child() {
        return run_parent(test, &victims);
    }
    let Some((_job, mut boot, mut provider)) = common::child() else { return };
    let p = provider.as_mut();
    let me = p.rank();
    let team: Vec<Rank> = if me < 4 { (0..4).collect() } else { (4..8).collect() };
    let parity = Some(RsLayout { group_nodes: 2, parity_shards: 1 });
    let config = CkptConfig { team: Some(team.clone()), parity, ..config() };
    let mut ckpt = Checkpointer::new(p, &mut boot, config).expect("checkpointer");
    // Team 0-3 commits three epochs while team 4-7 commits one: no cross-team waiting.
    let epochs = if me < 4 { 3 } else { 1 };
    for epoch in 1..=epochs {
        assert_eq!(checkpoint(&mut ckpt, p, epoch).expect("checkpoint"), epoch);
    }
    let mut all = survivors(&victims);
    all.extend_from_slice(&victims);
    assert!(team::agree(p, &all, 1, true, wait()).expect("agree before the kill"));
    if victims.contains(&me) {
        die();
    }
    wait_dead(p, &victims);
    match me {
        2 => {
            // Node 0 died: its team's survivors agree on epoch 3, and rank 2 (buddy) restores.
            assert_eq!(ckpt.recovery_epoch(p, &[2, 3], 1).expect("recovery line"), 3);
            assert_eq!(check_restored(&mut ckpt, p, 0, 3), RestoreSource::Buddy(2));
        }
        3 => {
            assert_eq!(ckpt.recovery_epoch(p, &[2, 3], 1).expect("recovery line"), 3);
            // The epoch before the recovery line is kept too (the other slot).
            let restored = ckpt.restore(p, 1, 2).expect("restore rank 1 epoch 2");
            assert_eq!(restored.image.entry(1), Some(data(1, 2).as_slice()));
        }
        // Another team reads a dead rank's copy too: one-sided gets need no team.
        4 => assert_eq!(check_restored(&mut ckpt, p, 1, 3), RestoreSource::Buddy(3)),
        _ => {}
    }
    finish(p, &victims);
}

#[test]
fn one_rank_failing_aborts_the_epoch_everywhere() {
    let test = "one_rank_failing_aborts_the_epoch_everywhere";
    if !common::is_child() {
        return run_parent(test, &[]);
    }
    let Some((_job, mut boot, mut provider)) = common::child() else { return };
    let p = provider.as_mut();
    let mut ckpt = Checkpointer::new(p, &mut boot, config()).expect("checkpointer");
    assert_eq!(checkpoint(&mut ckpt, p, 1).expect("epoch 1"), 1);
    // Rank 5's data outgrows its slot: it votes no, and nobody commits epoch 2.
    let big = vec![7u8; if p.rank() == 5 { 2 << 20 } else { 10 }];
    let mut set = ProtectSet::new();
    set.protect(1, &big).expect("protect");
    let err = ckpt.checkpoint(p, &set).expect_err("epoch 2 must fail everywhere");
    match &err {
        CkptError::NotCommitted { epoch: 2, reason } if p.rank() == 5 => {
            assert!(reason.contains("exceeds the slot"), "{reason}")
        }
        CkptError::NotCommitted { epoch: 2, .. } => {}
        other => panic!("rank {}: {other}", p.rank()),
    }
    assert_eq!(ckpt.committed_epoch(), Some(1));
    // The next epoch commits, into the slot epoch 2 had started to fill.
    assert_eq!(checkpoint(&mut ckpt, p, 3).expect("epoch 3"), 3);
    let peer = (p.rank() + 3) % RANKS;
    check_restored(&mut ckpt, p, peer, 3);
    check_restored(&mut ckpt, p, peer, 1);
    finish(p, &[]);
}
