//! The team failure unit end to end (issue 6): `reverb run --respawn` jobs of `reverb app ...`
//! on shm, 8 ranks in 4 nodes of 2, teams `0-3,4-7` (two teams of two whole nodes). A rank of
//! team 0 is SIGKILLed (`REVERB_FAULT`): the launcher fails both nodes of team 0, they restart
//! together and recover, and team 1's ranks never restart, under causal, pessimistic-sb and
//! pessimistic-rb. Each recovered run's checksum must equal the failure-free run's.

use std::sync::Mutex;

/// Jobs of 8 processes each: one at a time, so a loaded machine stays responsive.
static SERIAL: Mutex<()> = Mutex::new(());

const TEAMS: &str = "0-3,4-7";
const STENCIL: &[&str] = &["--iters", "60", "--size", "64", "--ckpt-every", "10"];
/// Rank 3 (node 1, team 0) sends two halos per iteration: dies in iteration ~35, after epoch 3.
const STENCIL_FAULT: &str = "3:71";
/// 20 rounds: a worker sends at least one request per round however few tasks it wins, so
/// its 20th send (the faults below) always comes.
const MASTER_WORKER: &[&str] = &["--iters", "20", "--size", "2000", "--ckpt-every", "3"];
/// Rank 1 is a worker on the master's node (node 0, team 0): the master's team dies mid-run.
const MASTER_WORKER_FAULT: &str = "1:20";

mod common;
use common::Outcome;

fn job(name: &str, app: &str, app_args: &[&str], env: &[(&str, &str)], respawn: u32) -> Outcome {
    common::job("team", name, app, app_args, env, respawn)
}

/// The ranks that wrote a report as incarnation `incarnation`, ascending.
fn ranks_at(dir: &std::path::Path, incarnation: u32) -> Vec<u32> {
    let suffix = format!("-inc-{incarnation}.json");
    let mut ranks: Vec<u32> = std::fs::read_dir(dir)
        .expect("reports")
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix("rank-")?.strip_suffix(&suffix)?.parse().ok()
        })
        .collect();
    ranks.sort_unstable();
    ranks
}

/// Runs `app` failure-free and with `fault` under `mode` with teams `0-3,4-7`; asserts one
/// checksum, team 0 (ranks 0-3) restarted as one respawn, team 1 (ranks 4-7) never restarted.
fn team_killed_matches_failure_free(name: &str, app: &str, app_args: &[&str], mode: &str, fault: &str) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = [("REVERB_LOG", mode), ("REVERB_CKPT", "rs"), ("REVERB_LOG_TEAMS", TEAMS)];
    let clean = job(&format!("{name}-clean"), app, app_args, &env, 0);
    assert!(clean.success, "failure-free run failed:\n{}", clean.output);
    assert!(clean.checksum.is_some(), "no checksum:\n{}", clean.output);
    let mut faulty_env = env.to_vec();
    faulty_env.push(("REVERB_FAULT", fault));
    // One respawn allowed: the team's two nodes must count as one.
    let faulty = job(&format!("{name}-killed"), app, app_args, &faulty_env, 1);
    assert!(faulty.success, "run with a team killed failed:\n{}", faulty.output);
    // The launcher failed the whole team, in one respawn.
    let respawns = &faulty.launch["respawns"];
    assert_eq!(respawns.as_array().map(Vec::len), Some(1), "one respawn: {}", faulty.launch);
    assert_eq!(respawns[0]["nodes"], serde_json::json!([0, 1]), "{}", faulty.launch);
    assert_eq!(respawns[0]["ranks"], serde_json::json!([0, 1, 2, 3]), "{}", faulty.launch);
    assert_eq!(respawns[0]["incarnation"], 1, "{}", faulty.launch);
    assert_eq!(ranks_at(&faulty.dir, 1), [0, 1, 2, 3], "team 0 restarted:\n{}", faulty.output);
    assert_eq!(ranks_at(&faulty.dir, 0), [4, 5, 6, 7], "team 1 never restarted:\n{}", faulty.output);
    // Survivors recovered once and did not roll back: they finished as incarnation 0.
    for rank in 4..8 {
        let path = faulty.dir.join(format!("rank-{rank}-inc-0.json"));
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("report")).expect("json");
        assert_eq!(report["recovery_ms"].as_array().map(Vec::len), Some(1), "rank {rank}: {report}");
        assert_eq!(report["restored_epoch"], 0, "rank {rank} restored nothing: {report}");
    }
    assert_eq!(faulty.checksum, clean.checksum, "recovered run's answer differs:\n{}", faulty.output);
    let _ = std::fs::remove_dir_all(&clean.dir);
    let _ = std::fs::remove_dir_all(&faulty.dir);
}

#[test]
fn stencil_causal_team_killed_matches_failure_free() {
    team_killed_matches_failure_free("stencil-causal", "stencil", STENCIL, "causal", STENCIL_FAULT);
}

#[test]
fn stencil_pessimistic_sb_team_killed_matches_failure_free() {
    team_killed_matches_failure_free("stencil-sb", "stencil", STENCIL, "pessimistic-sb", STENCIL_FAULT);
}

#[test]
fn master_worker_causal_team_killed_matches_failure_free() {
    team_killed_matches_failure_free(
        "mw-causal",
        "master-worker",
        MASTER_WORKER,
        "causal",
        MASTER_WORKER_FAULT,
    );
}

#[test]
fn master_worker_pessimistic_sb_team_killed_matches_failure_free() {
    team_killed_matches_failure_free(
        "mw-sb",
        "master-worker",
        MASTER_WORKER,
        "pessimistic-sb",
        MASTER_WORKER_FAULT,
    );
}

/// Restarted team ranks restore their checkpoint from a buddy copy in the other team (their
/// own copies and any copy inside the team died with it).
#[test]
fn restarted_team_restores_from_buddies_in_the_other_team() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = [
        ("REVERB_LOG", "causal"),
        ("REVERB_CKPT", "buddy"),
        ("REVERB_LOG_TEAMS", TEAMS),
        ("REVERB_FAULT", STENCIL_FAULT),
    ];
    let out = job("buddy", "stencil", STENCIL, &env, 1);
    assert!(out.success, "{}", out.output);
    for rank in 0..4u32 {
        let path = out.dir.join(format!("rank-{rank}-inc-1.json"));
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("report")).expect("json");
        assert_eq!(report["restored_epoch"], 3, "rank {rank}: {report}");
        let from = report["restored_from"].as_str().unwrap_or_default();
        assert_eq!(from, format!("buddy copy at rank {}", rank + 4), "rank {rank}: {report}");
    }
    let _ = std::fs::remove_dir_all(&out.dir);
}

/// A team that splits a node cannot fail as a unit: `reverb run --respawn` refuses to start.
#[test]
fn teams_splitting_a_node_are_refused_at_launch() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = [("REVERB_LOG", "causal"), ("REVERB_LOG_TEAMS", "0-2,3-7")];
    let out = job("split", "stencil", STENCIL, &env, 1);
    assert!(!out.success, "{}", out.output);
    assert!(out.output.contains("node 1 is split between teams 0"), "{}", out.output);
    assert!(out.output.contains("union of whole nodes"), "{}", out.output);
    assert!(out.checksum.is_none());
    let _ = std::fs::remove_dir_all(&out.dir);
}

/// Uneven teams (`0-1,2-7`: one node, three nodes): a node of the big team fails all three of
/// its nodes in one respawn; buddies of the big team wrap around the small one.
#[test]
fn uneven_teams_big_team_killed_matches_failure_free() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = [("REVERB_LOG", "causal"), ("REVERB_CKPT", "rs"), ("REVERB_LOG_TEAMS", "0-1,2-7")];
    let clean = job("uneven-clean", "stencil", STENCIL, &env, 0);
    assert!(clean.success, "failure-free run failed:\n{}", clean.output);
    let mut faulty_env = env.to_vec();
    faulty_env.push(("REVERB_FAULT", "5:71"));
    let faulty = job("uneven-killed", "stencil", STENCIL, &faulty_env, 1);
    assert!(faulty.success, "{}", faulty.output);
    assert_eq!(faulty.respawned_nodes(), vec![vec![1, 2, 3]], "{}", faulty.launch);
    assert_eq!(faulty.launch["respawns"][0]["ranks"], serde_json::json!([2, 3, 4, 5, 6, 7]));
    assert_eq!(ranks_at(&faulty.dir, 1), [2, 3, 4, 5, 6, 7], "{}", faulty.output);
    assert_eq!(ranks_at(&faulty.dir, 0), [0, 1], "{}", faulty.output);
    assert!(clean.checksum.is_some(), "no checksum:\n{}", clean.output);
    assert_eq!(faulty.checksum, clean.checksum, "{}", faulty.output);
    let _ = std::fs::remove_dir_all(&clean.dir);
    let _ = std::fs::remove_dir_all(&faulty.dir);
}

/// Logger cores pair nodes, so a team's log could stay inside the team: refused with teams
/// under `--respawn` rather than run unrecoverable.
#[test]
fn logger_cores_with_teams_are_refused_at_launch() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = [("REVERB_LOG", "causal"), ("REVERB_LOG_TEAMS", TEAMS), ("REVERB_LOGGER", "dedicated")];
    let out = job("logger-cores", "stencil", STENCIL, &env, 1);
    assert!(!out.success, "{}", out.output);
    assert!(out.output.contains("logger cores pair nodes"), "{}", out.output);
    assert!(out.checksum.is_none());
    let _ = std::fs::remove_dir_all(&out.dir);
}

#[test]
fn stencil_pessimistic_rb_team_killed_matches_failure_free() {
    team_killed_matches_failure_free("stencil-rb", "stencil", STENCIL, "pessimistic-rb", STENCIL_FAULT);
}

#[test]
fn master_worker_pessimistic_rb_team_killed_matches_failure_free() {
    team_killed_matches_failure_free(
        "mw-rb",
        "master-worker",
        MASTER_WORKER,
        "pessimistic-rb",
        MASTER_WORKER_FAULT,
    );
}
