//! The fault-tolerant runtime end to end: `reverb run` jobs of `reverb app ...` on shm, 8 ranks
//! in 4 nodes, with a node SIGKILLed (`REVERB_FAULT`) and respawned (`--respawn`). Each
//! recovered run's checksum must equal the failure-free run's; unsurvivable failures must end
//! the job with a non-zero exit and a report of what was lost, within the job's timeout.

use std::sync::Mutex;

/// Jobs of 8 processes each: one at a time, so a loaded machine stays responsive.
static SERIAL: Mutex<()> = Mutex::new(());

mod common;
use common::Outcome;

fn job(name: &str, app: &str, app_args: &[&str], env: &[(&str, &str)], respawn: u32) -> Outcome {
    common::job("runtime", name, app, app_args, env, respawn)
}

/// Runs `app` failure-free and with `fault` under `mode`; asserts both finish with one checksum
/// and that the restarted ranks really restarted.
fn killed_matches_failure_free(name: &str, app: &str, app_args: &[&str], mode: &str, fault: &str) {
    killed_by_matches_failure_free(name, app, app_args, mode, ("REVERB_FAULT", fault));
}

fn killed_by_matches_failure_free(name: &str, app: &str, app_args: &[&str], mode: &str, fault: (&str, &str)) {
    nodes_killed_match_failure_free(name, app, app_args, mode, fault, 1);
}

/// As `killed_by_matches_failure_free`, with `nodes` nodes (2 ranks each) killed and respawned.
fn nodes_killed_match_failure_free(
    name: &str,
    app: &str,
    app_args: &[&str],
    mode: &str,
    fault: (&str, &str),
    nodes: u32,
) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = [("REVERB_LOG", mode), ("REVERB_CKPT", "rs")];
    let clean = job(&format!("{name}-clean"), app, app_args, &env, 0);
    assert!(clean.success, "failure-free run failed:\n{}", clean.output);
    let mut faulty_env = env.to_vec();
    faulty_env.push(fault);
    let faulty = job(&format!("{name}-killed"), app, app_args, &faulty_env, nodes);
    assert!(faulty.success, "run with a node killed failed:\n{}", faulty.output);
    assert_eq!(faulty.respawned_nodes().len(), nodes as usize, "nodes killed:\n{}", faulty.output);
    let restarted = std::fs::read_dir(&faulty.dir)
        .expect("reports")
        .filter(|e| e.as_ref().is_ok_and(|e| e.file_name().to_string_lossy().contains("-inc-1")))
        .count();
    assert_eq!(
        restarted,
        2 * nodes as usize,
        "both ranks of the killed node report as restarted:\n{}",
        faulty.output
    );
    assert!(clean.checksum.is_some(), "no checksum:\n{}", clean.output);
    assert_eq!(faulty.checksum, clean.checksum, "recovered run's answer differs:\n{}", faulty.output);
    let _ = std::fs::remove_dir_all(&clean.dir);
    let _ = std::fs::remove_dir_all(&faulty.dir);
}

const STENCIL: &[&str] = &["--iters", "60", "--size", "64", "--ckpt-every", "10"];
/// Rank 3 sends two halos per iteration: dies in iteration ~35, after epoch 3.
const STENCIL_FAULT: &str = "3:71";
/// 20 rounds: a worker sends at least one request per round however few tasks it wins, so
/// its 20th send (the faults below) always comes.
const MASTER_WORKER: &[&str] = &["--iters", "20", "--size", "2000", "--ckpt-every", "3"];
/// Rank 1 is a worker on the master's node: node 0 (master included) dies mid-run.
const MASTER_WORKER_FAULT: &str = "1:20";
const RING: &[&str] = &["--iters", "40", "--size", "256", "--ckpt-every", "8"];
/// Rank 5 sends 8 messages per iteration: dies in iteration ~20.
const RING_FAULT: &str = "5:161";

#[test]
fn stencil_causal_node_killed_matches_failure_free() {
    killed_matches_failure_free("stencil-causal", "stencil", STENCIL, "causal", STENCIL_FAULT);
}

/// The restarted ranks resume from their own checkpoint (fetched from the buddy), not from the
/// start, and the report accounts for detection, recovery and replay.
#[test]
fn restarted_ranks_resume_from_their_buddy_checkpoint() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = [("REVERB_LOG", "causal"), ("REVERB_CKPT", "rs"), ("REVERB_FAULT", STENCIL_FAULT)];
    let out = job("resume", "stencil", STENCIL, &env, 1);
    assert!(out.success, "{}", out.output);
    for rank in [2, 3] {
        let path = out.dir.join(format!("rank-{rank}-inc-1.json"));
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("report")).expect("json");
        // Killed in iteration ~35 with a checkpoint every 10: epoch 3 covers iteration 30.
        assert_eq!(report["restored_epoch"], 3, "rank {rank}: {report}");
        assert!(
            report["restored_from"].as_str().is_some_and(|s| s.contains("buddy")),
            "rank {rank}: {report}"
        );
        assert!(report["replay_end_ns"].as_u64().is_some_and(|ns| ns > 0), "replay finished: {report}");
    }
    let survivor: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.dir.join("rank-0-inc-0.json")).expect("report"))
            .expect("json");
    assert_eq!(survivor["recovery_ms"].as_array().map(Vec::len), Some(1), "{survivor}");
    let _ = std::fs::remove_dir_all(&out.dir);
}

#[test]
fn stencil_pessimistic_sb_node_killed_matches_failure_free() {
    killed_matches_failure_free("stencil-sb", "stencil", STENCIL, "pessimistic-sb", STENCIL_FAULT);
}

#[test]
fn stencil_node_killed_before_any_checkpoint_reexecutes_from_the_start() {
    killed_matches_failure_free("stencil-early", "stencil", STENCIL, "causal", "3:7");
}

#[test]
fn master_worker_causal_master_node_killed_matches_failure_free() {
    killed_matches_failure_free("mw-causal", "master-worker", MASTER_WORKER, "causal", MASTER_WORKER_FAULT);
}

#[test]
fn master_worker_pessimistic_sb_master_node_killed_matches_failure_free() {
    killed_matches_failure_free(
        "mw-sb",
        "master-worker",
        MASTER_WORKER,
        "pessimistic-sb",
        MASTER_WORKER_FAULT,
    );
}

#[test]
fn ring_causal_node_killed_matches_failure_free() {
    killed_matches_failure_free("ring-causal", "ring", RING, "causal", RING_FAULT);
}

#[test]
fn ring_pessimistic_sb_node_killed_matches_failure_free() {
    killed_matches_failure_free("ring-sb", "ring", RING, "pessimistic-sb", RING_FAULT);
}

/// Rank 3 dies right after its last send (its checksum to rank 0): survivors meet the failure
/// in `finalize`, recover there, and the restarted ranks re-execute to the end.
#[test]
fn stencil_node_killed_at_the_end_matches_failure_free() {
    killed_matches_failure_free("stencil-end", "stencil", STENCIL, "causal", "3:121");
}

/// Node 1 dies inside checkpoint 3: before its buddy copy is written, and during the epoch
/// flip. The epoch is committed nowhere; the restarted ranks restore epoch 2 and the survivors
/// take checkpoint 3 again with them.
#[test]
fn stencil_node_killed_while_writing_a_checkpoint_matches_failure_free() {
    killed_by_matches_failure_free(
        "stencil-ckpt-local",
        "stencil",
        STENCIL,
        "causal",
        ("REVERB_FAULT_CKPT", "3:3:local-written"),
    );
}

#[test]
fn stencil_node_killed_during_the_epoch_flip_matches_failure_free() {
    killed_by_matches_failure_free(
        "stencil-ckpt-flip",
        "stencil",
        STENCIL,
        "pessimistic-sb",
        ("REVERB_FAULT_CKPT", "3:3:buddy-flipped"),
    );
}

/// The restarted node dies again during its replay (4 sends after its restart); the second
/// restart recovers from the same checkpoint.
#[test]
fn stencil_node_killed_again_during_replay_matches_failure_free() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = [("REVERB_LOG", "causal"), ("REVERB_CKPT", "rs")];
    let clean = job("replay-clean", "stencil", STENCIL, &env, 0);
    assert!(clean.success, "{}", clean.output);
    let mut faulty_env = env.to_vec();
    let twice = format!("{STENCIL_FAULT},3:4@1");
    faulty_env.push(("REVERB_FAULT", &twice));
    let faulty = job("replay-killed", "stencil", STENCIL, &faulty_env, 2);
    assert!(faulty.success, "{}", faulty.output);
    assert!(faulty.dir.join("rank-3-inc-2.json").exists(), "rank 3 restarted twice:\n{}", faulty.output);
    assert_eq!(faulty.checksum, clean.checksum, "{}", faulty.output);
    let _ = std::fs::remove_dir_all(&clean.dir);
    let _ = std::fs::remove_dir_all(&faulty.dir);
}

/// No buddy copies, Reed-Solomon 4+2 only: the restarted ranks rebuild their checkpoint from
/// the other nodes' shards and parity.
#[test]
fn stencil_node_killed_restores_from_reed_solomon() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let clean = job("rs-clean", "stencil", STENCIL, &[("REVERB_LOG", "causal"), ("REVERB_CKPT", "off")], 0);
    assert!(clean.success, "{}", clean.output);
    let env = [("REVERB_LOG", "causal"), ("REVERB_CKPT", "parity"), ("REVERB_FAULT", STENCIL_FAULT)];
    let faulty = job("rs-killed", "stencil", STENCIL, &env, 1);
    assert!(faulty.success, "{}", faulty.output);
    let report: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(faulty.dir.join("rank-3-inc-1.json")).expect("rank 3's report"),
    )
    .expect("json");
    assert!(report["restored_from"].as_str().is_some_and(|s| s.contains("Reed-Solomon")), "{report}");
    assert_eq!(faulty.checksum, clean.checksum, "{}", faulty.output);
    let _ = std::fs::remove_dir_all(&clean.dir);
    let _ = std::fs::remove_dir_all(&faulty.dir);
}

/// Checkpoints kept only on the rank's own node (no buddy, no parity): the killed node's
/// checkpoint is gone, and every rank says so instead of computing a wrong answer.
#[test]
fn lost_checkpoint_is_reported_unrecoverable() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = [("REVERB_LOG", "causal"), ("REVERB_CKPT", "local"), ("REVERB_FAULT", STENCIL_FAULT)];
    let out = job("lost-ckpt", "stencil", STENCIL, &env, 1);
    assert!(!out.success, "a job that lost a checkpoint must fail:\n{}", out.output);
    out.assert_failed_by_a_rank();
    // The error says what was lost (a user-facing guarantee): the checkpoint, at every level.
    assert!(out.output.contains("lost at every level"), "no clear report:\n{}", out.output);
    assert!(out.checksum.is_none(), "no answer from a failed job");
    let _ = std::fs::remove_dir_all(&out.dir);
}

#[test]
fn stencil_pessimistic_rb_node_killed_matches_failure_free() {
    killed_matches_failure_free("stencil-rb", "stencil", STENCIL, "pessimistic-rb", STENCIL_FAULT);
}

/// The master's node dies: its any-source receives replay in the order its buddy's ring
/// logged, from the frames in that ring plus what the workers resend from their send logs.
#[test]
fn master_worker_pessimistic_rb_master_node_killed_matches_failure_free() {
    killed_matches_failure_free(
        "mw-rb",
        "master-worker",
        MASTER_WORKER,
        "pessimistic-rb",
        MASTER_WORKER_FAULT,
    );
}

/// Receiver-based recovery really replays from the receiver's log: the restarted ranks take
/// frames back from their buddy's ring (the survivors resend only what it lacks).
#[test]
fn pessimistic_rb_restarted_ranks_replay_frames_from_their_buddys_ring() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = [("REVERB_LOG", "pessimistic-rb"), ("REVERB_CKPT", "rs"), ("REVERB_FAULT", STENCIL_FAULT)];
    let out = job("rb-frames", "stencil", STENCIL, &env, 1);
    assert!(out.success, "{}", out.output);
    for rank in [2, 3] {
        let path = out.dir.join(format!("rank-{rank}-inc-1.json"));
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("report")).expect("json");
        assert_eq!(report["restored_epoch"], 3, "rank {rank}: {report}");
        // Killed ~5 iterations after checkpoint 3; rank 2's upper and rank 3's lower halo
        // come from other nodes, one per iteration.
        assert!(report["ring_frames_replayed"].as_u64().is_some_and(|n| n > 0), "rank {rank}: {report}");
        assert!(report["replay_end_ns"].as_u64().is_some_and(|ns| ns > 0), "replay finished: {report}");
    }
    let _ = std::fs::remove_dir_all(&out.dir);
}

/// Logging off: nothing to replay from, so a node failure ends the job with a clear error.
#[test]
fn failure_without_logging_is_reported_unrecoverable() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = [("REVERB_LOG", "none"), ("REVERB_CKPT", "rs"), ("REVERB_FAULT", STENCIL_FAULT)];
    let out = job("no-log", "stencil", STENCIL, &env, 1);
    assert!(!out.success, "{}", out.output);
    out.assert_failed_by_a_rank();
    assert!(out.output.contains("REVERB_LOG=none"), "the error names the setting:\n{}", out.output);
    assert!(out.checksum.is_none());
    let _ = std::fs::remove_dir_all(&out.dir);
}

/// Nodes 1 and 2 (ranks 2-5) die together; they are not each other's buddies, and ranks 3 and 4
/// exchange halos: what one restarted rank needs from the other is regenerated by the other's
/// re-execution, not resent from a log.
#[test]
fn stencil_two_nodes_killed_at_once_match_failure_free() {
    nodes_killed_match_failure_free(
        "stencil-two",
        "stencil",
        STENCIL,
        "causal",
        ("REVERB_FAULT", "3:71,4:71"),
        2,
    );
}

#[test]
fn ring_two_nodes_killed_at_once_match_failure_free() {
    nodes_killed_match_failure_free(
        "ring-two",
        "ring",
        RING,
        "pessimistic-sb",
        ("REVERB_FAULT", "3:161,5:161"),
        2,
    );
}

/// Nodes 0 and 1 are each other's checkpoint and log buddies: Reed-Solomon could rebuild their
/// checkpoints, but their determinants are gone with both copies of the log, so the job stops
/// with that said instead of risking a replay in another receive order (master-worker's
/// any-source receives gave wrong answers in this case before the runtime checked for it).
#[test]
fn two_log_buddy_nodes_lost_are_reported_unrecoverable() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // With parity the checkpoints would survive, without it they are lost too; the logs are
    // lost either way. (Ranks 1 and 3 die in the same iteration, before the next checkpoint:
    // together, or one while the other's recovery has cut its log.)
    for ckpt in ["rs", "buddy"] {
        let env = [("REVERB_LOG", "pessimistic-sb"), ("REVERB_CKPT", ckpt), ("REVERB_FAULT", "1:71,3:71")];
        let started = std::time::Instant::now();
        let out = job(&format!("two-log-buddies-{ckpt}"), "stencil", STENCIL, &env, 2);
        eprintln!("REVERB_CKPT={ckpt}: two buddy nodes lost, job ended after {:?}", started.elapsed());
        assert!(!out.success, "{}", out.output);
        out.assert_failed_by_a_rank();
        // Said once, by the launcher, in plain words naming the ranks; not by every rank.
        let said: Vec<&str> = out.output.lines().filter(|l| l.contains("unrecoverable failure:")).collect();
        assert_eq!(said.len(), 1, "one report for the job:\n{}", out.output);
        assert!(said[0].starts_with("reverb run: unrecoverable failure: "), "{}", out.output);
        assert!(said[0].contains("message logs lost"), "the report names the lost logs:\n{}", out.output);
        assert!(
            said[0].contains("rank 1 and its log buddy rank 3 were lost together")
                || said[0].contains("ranks ["),
            "the report names the ranks:\n{}",
            out.output
        );
        assert!(
            out.launch["unrecoverable"].as_str().is_some_and(|c| c.contains("message logs lost")),
            "{}",
            out.launch
        );
        assert!(out.checksum.is_none());
        let _ = std::fs::remove_dir_all(&out.dir);
    }
}

/// Node 2 dies (rank 4, at its first send after the recovery) while node 1's restarted ranks
/// still replay and a survivor waits in checkpoint 4's agreement: a second recovery round.
#[test]
fn stencil_second_node_killed_after_the_first_matches_failure_free() {
    nodes_killed_match_failure_free(
        "stencil-second",
        "stencil",
        STENCIL,
        "causal",
        ("REVERB_FAULT", "3:71,4:73"),
        2,
    );
}

/// The master's node and a worker node die together: the master's any-source receives replay
/// in determinant order, including the results the restarted worker regenerates.
#[test]
fn master_worker_master_and_worker_nodes_killed_at_once_match_failure_free() {
    nodes_killed_match_failure_free(
        "mw-two",
        "master-worker",
        MASTER_WORKER,
        "causal",
        ("REVERB_FAULT", "1:20,5:20"),
        2,
    );
}

/// Under pessimistic-rb, the master's node and a worker node die together: the master's ring
/// holds results from the restarted worker too; those frames are skipped (the worker's
/// re-execution regenerates them) and the any-source receives still follow the ring's order.
#[test]
fn master_worker_pessimistic_rb_master_and_worker_nodes_killed_at_once_match_failure_free() {
    nodes_killed_match_failure_free(
        "mw-rb-two",
        "master-worker",
        MASTER_WORKER,
        "pessimistic-rb",
        ("REVERB_FAULT", "1:20,5:20"),
        2,
    );
}

/// Node 1 dies inside `Runtime::init` (rank 3 killed just before the logger's ring exchange,
/// `REVERB_FAULT_INIT`): the survivors, waiting in that collective, wait for node 1 to rejoin
/// and set their endpoints up again with it; nothing was committed or sent, so the restarted
/// ranks start from the initial state.
#[test]
fn stencil_node_killed_inside_init_before_the_log_ring_exchange_matches_failure_free() {
    killed_by_matches_failure_free(
        "stencil-init-rings",
        "stencil",
        STENCIL,
        "causal",
        ("REVERB_FAULT_INIT", "3:log-rings"),
    );
}

/// The master's node dies while the others exchange checkpoint slot descriptors (the last of
/// init's collectives): the survivors keep their endpoints (rejoin), set up their
/// checkpointers again with the restarted ranks, and the any-source receives are logged as
/// usual from then on.
#[test]
fn master_worker_node_killed_inside_init_during_the_checkpoint_slot_exchange_matches_failure_free() {
    killed_by_matches_failure_free(
        "mw-init-slots",
        "master-worker",
        MASTER_WORKER,
        "pessimistic-sb",
        ("REVERB_FAULT_INIT", "1:ckpt-slots"),
    );
}

#[test]
fn ring_pessimistic_rb_node_killed_inside_init_matches_failure_free() {
    killed_by_matches_failure_free(
        "ring-rb-init",
        "ring",
        RING,
        "pessimistic-rb",
        ("REVERB_FAULT_INIT", "5:ckpt-slots"),
    );
}

/// What an init failure's recovery looks like in the reports: the restarted ranks restored
/// nothing (no epoch was committed) and then ran the job from its start; every survivor
/// recovered once, inside init.
#[test]
fn an_init_failure_restarts_the_node_from_the_initial_state_and_counts_one_recovery() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = [("REVERB_LOG", "causal"), ("REVERB_CKPT", "rs"), ("REVERB_FAULT_INIT", "2:ckpt-slots")];
    let out = job("init-reports", "stencil", STENCIL, &env, 1);
    assert!(out.success, "{}", out.output);
    assert_eq!(out.respawned_nodes(), vec![vec![1]], "node 1 (rank 2) failed:\n{}", out.output);
    let read = |name: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(out.dir.join(name)).expect("report")).expect("json")
    };
    for rank in [2, 3] {
        let report = read(&format!("rank-{rank}-inc-1.json"));
        assert_eq!(report["restored_epoch"], 0, "rank {rank}: {report}");
        assert!(
            report["restored_from"].as_str().is_some_and(|s| s.contains("initial state")),
            "rank {rank}: {report}"
        );
        // All 60 iterations from the start: a checkpoint after every 10 but the last.
        assert_eq!(report["checkpoints"], 5, "rank {rank}: {report}");
    }
    for rank in [0, 1, 4, 5, 6, 7] {
        let report = read(&format!("rank-{rank}-inc-0.json"));
        assert_eq!(report["recovery_ms"].as_array().map(Vec::len), Some(1), "rank {rank}: {report}");
        assert_eq!(report["checkpoints"], 5, "rank {rank}: {report}");
    }
    let _ = std::fs::remove_dir_all(&out.dir);
}

/// Node 2 dies while everyone redoes init's collectives after node 1's failure inside init:
/// a second failure during a recovery, reported as such by every rank, never a hang.
#[test]
fn a_second_failure_while_init_is_redone_is_reported_unrecoverable() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = [
        ("REVERB_LOG", "causal"),
        ("REVERB_CKPT", "rs"),
        ("REVERB_FAULT_INIT", "3:ckpt-slots,5:ckpt-slots@retry"),
    ];
    let out = job("init-second", "stencil", STENCIL, &env, 2);
    assert!(!out.success, "{}", out.output);
    out.assert_failed_by_a_rank();
    // Node 1 failed first (node 2 may be respawned too before a rank gives up).
    assert_eq!(out.respawned_nodes().first(), Some(&vec![1]), "{}\n{}", out.launch, out.output);
    assert!(out.output.contains("a second failure"), "the report names the second failure:\n{}", out.output);
    assert!(out.checksum.is_none());
    let _ = std::fs::remove_dir_all(&out.dir);
}

/// Malformed fault-injection and durability settings stop every rank with a message naming
/// the variable.
#[test]
fn bad_init_fault_and_durable_timeout_settings_are_refused_clearly() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for (var, value) in [
        ("REVERB_FAULT_INIT", "3:allgather"),
        ("REVERB_FAULT_INIT", "3:ckpt-slots@later"),
        ("REVERB_FAULT_GC", "3"),
        ("REVERB_FAULT_GC", "3:2:early"),
        ("REVERB_LOG_DURABLE_TIMEOUT_MS", "0"),
        ("REVERB_LOG_DURABLE_TIMEOUT_MS", "ten"),
    ] {
        let env = [("REVERB_LOG", "causal"), (var, value)];
        let out = job("bad-settings", "ring", RING, &env, 0);
        assert!(!out.success, "{var}={value}:\n{}", out.output);
        out.assert_failed_by_a_rank();
        assert!(out.output.contains(var), "{var}={value}: the error names it:\n{}", out.output);
        let _ = std::fs::remove_dir_all(&out.dir);
    }
}

/// A survivor still busy between two of init's collectives misses the abort: it joins the
/// next one only once node 1 is back (`:late`), so its first-attempt contribution lands in
/// the round the others use for the recovery. It learns of the recovery from that round and
/// joins it; the others repeat the round; the answer is unchanged.
#[test]
fn a_rank_that_missed_the_abort_joins_the_init_recovery_from_the_resumed_round() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = [("REVERB_LOG", "causal"), ("REVERB_CKPT", "rs")];
    let clean = job("late-clean", "stencil", STENCIL, &env, 0);
    assert!(clean.success, "{}", clean.output);
    assert!(clean.checksum.is_some(), "no checksum:\n{}", clean.output);
    for (faults, late) in [("3:ckpt-slots,6:ckpt-slots:late", 6), ("3:log-rings,0:log-rings:late", 0)] {
        let mut faulty_env = env.to_vec();
        faulty_env.push(("REVERB_FAULT_INIT", faults));
        let out = job("late-killed", "stencil", STENCIL, &faulty_env, 1);
        assert!(out.success, "{faults}:\n{}", out.output);
        let missed =
            format!("rank {late}: an init collective met the recovery of a failure this rank had missed");
        assert!(out.output.contains(&missed), "{faults}: rank {late} joined late:\n{}", out.output);
        assert_eq!(out.checksum, clean.checksum, "{faults}:\n{}", out.output);
        let _ = std::fs::remove_dir_all(&out.dir);
    }
    let _ = std::fs::remove_dir_all(&clean.dir);
}

/// Mid-run, node 1 dies right at the log GC after checkpoint 2 (its commit done), and a
/// survivor (rank 6) still busy before that GC's collective joins it only once node 1 is back
/// (`REVERB_FAULT_GC=..:late`): its GC contribution lands in the round the others use for the
/// recovery's first collective. Its GC round says so (framed), it joins the recovery, the others
/// repeat the round; the answer is unchanged. Also the plain kill at the GC.
#[test]
fn a_survivor_that_missed_a_failure_at_the_log_gc_joins_the_recovery() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = [("REVERB_LOG", "causal"), ("REVERB_CKPT", "rs")];
    let clean = job("gc-clean", "stencil", STENCIL, &env, 0);
    assert!(clean.success, "{}", clean.output);
    assert!(clean.checksum.is_some(), "no checksum:\n{}", clean.output);
    for (faults, late) in [("3:2,6:2:late", Some(6)), ("2:3", None)] {
        let mut faulty_env = env.to_vec();
        faulty_env.push(("REVERB_FAULT_GC", faults));
        let out = job("gc-killed", "stencil", STENCIL, &faulty_env, 1);
        assert!(out.success, "{faults}:\n{}", out.output);
        assert_eq!(out.respawned_nodes(), vec![vec![1]], "{faults}: node 1 was killed:\n{}", out.output);
        if let Some(late) = late {
            let joined = format!("rank {late} joins the log GC of epoch 2 late");
            assert!(out.output.contains(&joined), "{faults}: rank {late} joined late:\n{}", out.output);
            let missed = format!(
                "rank {late}: the log GC after a checkpoint met the recovery of a failure this rank had missed"
            );
            assert!(out.output.contains(&missed), "{faults}: rank {late} met the recovery:\n{}", out.output);
        }
        assert_eq!(out.checksum, clean.checksum, "{faults}:\n{}", out.output);
        let _ = std::fs::remove_dir_all(&out.dir);
    }
    let _ = std::fs::remove_dir_all(&clean.dir);
}
