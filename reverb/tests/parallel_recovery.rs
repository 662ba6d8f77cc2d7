//! Over-decomposition and parallel recovery (`reverb run --objects V --parallel-recovery P`,
//! reverb/src/launcher/objects.rs, runtime/src/objects.rs): each process hosts V ranks as
//! threads; a SIGKILLed process's objects restart spread over P processes (its own core and
//! helpers' cores), replay there, and move home after their next checkpoint. Every answer is
//! the failure-free checksum of the same program run one rank per process.

mod common;

use std::collections::BTreeSet;
use std::sync::Mutex;

use common::Outcome;
use serde_json::Value;

/// Jobs of 16 ranks each: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const ARGS: [&str; 6] = ["--iters", "60", "--size", "256", "--ckpt-every", "20"];

fn job(name: &str, shape: &[&str], fault: Option<&str>, respawn: u32) -> Outcome {
    let mut env = vec![("REVERB_LOG", "causal"), ("REVERB_CKPT", "buddy")];
    if let Some(f) = fault {
        env.push(("REVERB_FAULT", f));
    }
    common::job_with("objects", name, shape, "stencil", &ARGS, &env, respawn)
}

/// The rank reports of incarnation `inc`.
fn reports(out: &Outcome, inc: u32) -> Vec<Value> {
    let suffix = format!("-inc-{inc}.json");
    let mut all = Vec::new();
    for entry in std::fs::read_dir(&out.dir).expect("report dir").flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if name.starts_with("rank-") && name.ends_with(&suffix) {
            let text = std::fs::read_to_string(entry.path()).expect("report");
            all.push(serde_json::from_str(&text).expect("report JSON"));
        }
    }
    all
}

fn pids(reports: &[Value]) -> BTreeSet<u64> {
    reports.iter().filter_map(|r| r["pid"].as_u64()).collect()
}

/// The failure-free answer, one rank per process.
fn plain() -> Outcome {
    let out = job("plain", &["-n", "16", "--ranks-per-node", "4"], None, 0);
    assert!(out.success, "{}", out.output);
    out
}

#[test]
fn objects_run_the_same_program_in_fewer_processes_with_the_same_answer() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let plain = plain();
    let objects = job("objects", &["-n", "16", "--objects", "4"], None, 0);
    assert!(objects.success, "{}", objects.output);
    assert_eq!(objects.checksum, plain.checksum);
    let reports = reports(&objects, 0);
    assert_eq!(reports.len(), 16, "{}", objects.output);
    assert_eq!(pids(&reports).len(), 4, "16 objects in 4 processes");
}

/// 16 ranks as 4 processes of 4 objects under `--parallel-recovery 2` with `fault`: it ends
/// well with the failure-free checksum.
fn parallel_job(name: &str, fault: &str, respawn: u32) -> Outcome {
    let plain = plain();
    let shape = ["-n", "16", "--objects", "4", "--parallel-recovery", "2"];
    let out = job(name, &shape, Some(fault), respawn);
    assert!(out.success, "{}", out.output);
    assert_eq!(out.checksum, plain.checksum, "{}", out.output);
    out
}

#[test]
fn a_killed_process_recovers_its_objects_in_parallel_bit_identical() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Rank 4, the first object of process 1, dies at about iteration 30 (two sends each).
    let out = parallel_job("parallel", "4:60", 1);
    assert_eq!(out.respawned_nodes(), vec![vec![1]], "{}", out.output);
    assert!(out.output.contains("parallel recovery: ranks [5, 7] replay on cpu"), "{}", out.output);
    let restarted = reports(&out, 1);
    assert_eq!(restarted.len(), 4, "{}", out.output);
    assert_eq!(pids(&restarted).len(), 2, "node 1's objects restart in 2 processes");
    // The helper's objects (5 and 7) went home at the checkpoint after the failure.
    let home: Vec<u64> = restarted
        .iter()
        .filter(|r| r["went_home_ns"].as_u64().is_some_and(|ns| ns > 0))
        .filter_map(|r| r["rank"].as_u64())
        .collect();
    assert_eq!(BTreeSet::from_iter(home), BTreeSet::from([5, 7]), "{}", out.output);
}

#[test]
fn a_helper_killed_during_the_replay_recovers_again_bit_identical() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Rank 5 replays on the helper; it dies after 3 sends of its replay, taking its helper
    // process: node 1 fails again and restarts from the same checkpoint.
    let out = parallel_job("helper-killed", "4:60,5:3@1", 2);
    assert_eq!(out.respawned_nodes(), vec![vec![1], vec![1]], "{}", out.output);
    assert_eq!(reports(&out, 2).len(), 4, "{}", out.output);
}

#[test]
fn objects_that_do_not_divide_the_ranks_are_refused() {
    let out = job("refused", &["-n", "16", "--objects", "3"], None, 0);
    assert!(!out.success);
    assert!(out.output.contains("must be whole processes of 3"), "{}", out.output);
}
