//! A node lost after the other ranks had finished (`reverb run --respawn`, 8 ranks of
//! `reverb app stencil` in 4 nodes, real SIGKILLs): rank 2 kills itself once its `finalize`
//! has returned (`REVERB_FAULT_FINALIZED`), when the survivors have left or are leaving the
//! job. The launcher respawns node 1; its restarted ranks cannot replay (the survivors' logs
//! ended with them), and the job stops with one report saying so, not after the rejoin
//! timeout.

use std::sync::Mutex;
use std::time::{Duration, Instant};

mod common;

/// Jobs of 8 processes each: one at a time, so a loaded machine stays responsive.
static SERIAL: Mutex<()> = Mutex::new(());

/// Far above what the restarted ranks should take: a run that waits it out fails.
const REJOIN_TIMEOUT: Duration = Duration::from_secs(60);

const STENCIL: &[&str] = &["--iters", "30", "--size", "64", "--ckpt-every", "10"];

/// Runs the stencil with rank 2 killed `after_ms` after its finalize; asserts the one report.
fn node_lost_after_the_others_finished(name: &str, after_ms: u32) {
    let fault = format!("2:{after_ms}");
    let rejoin_ms = REJOIN_TIMEOUT.as_millis().to_string();
    let env = [
        ("REVERB_LOG", "causal"),
        ("REVERB_CKPT", "buddy"),
        ("REVERB_FAULT_FINALIZED", fault.as_str()),
        ("REVERB_REJOIN_TIMEOUT_MS", rejoin_ms.as_str()),
    ];
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let started = Instant::now();
    let out = common::job("finished", name, "stencil", STENCIL, &env, 1);
    let took = started.elapsed();
    eprintln!("{name}: job ended after {took:?}; rank 0's answer before the loss: {:?}", out.checksum);
    eprintln!("{}", out.output);
    assert!(!out.success, "a node lost after the others finished cannot recover:\n{}", out.output);
    assert_eq!(out.respawned_nodes(), vec![vec![1]], "node 1 respawned once:\n{}", out.output);
    let said: Vec<&str> = out.output.lines().filter(|l| l.contains("unrecoverable failure:")).collect();
    assert_eq!(said.len(), 1, "one report for the job:\n{}", out.output);
    let report = said[0];
    assert!(report.starts_with("reverb run: unrecoverable failure: node 1 ("), "{}", out.output);
    // Which survivors had left when the restarted ranks looked depends on timing.
    assert!(report.contains(") was lost after rank"), "names the finished ranks:\n{}", out.output);
    assert!(report.contains("had finished; their logs ended with them"), "{}", out.output);
    assert!(
        out.launch["unrecoverable"].as_str().is_some_and(|c| c.contains("had finished")),
        "{}",
        out.launch
    );
    // Said as soon as the restarted ranks looked, not once a wait for the peers ran out.
    assert!(took < REJOIN_TIMEOUT, "the job waited {took:?}:\n{}", out.output);
    let _ = std::fs::remove_dir_all(&out.dir);
}

/// Rank 2 dies a second after its finalize: the other ranks have exited by then (the
/// launcher reaped them before it respawned node 1, as a loaded machine allows).
#[test]
fn a_node_lost_after_the_others_exited_is_reported_unrecoverable() {
    node_lost_after_the_others_finished("after-exit", 1000);
}

/// Rank 2 dies as its finalize returns: the survivors are past the final barrier and leave
/// while node 1 restarts, so the restarted ranks find them gone part-way through their init.
#[test]
fn a_node_lost_as_the_others_finish_is_reported_unrecoverable() {
    node_lost_after_the_others_finished("as-they-exit", 0);
}
