//! Collective-aware logging (`REVERB_LOG_CAML=1`, logger/src/multicast.rs): the collectives
//! app (every rank multicasts its cell to all, then an all-reduce; 8 ranks in 4 nodes of 2)
//! logs each multicast once, at its root, instead of at every inter-node tree send; a rank
//! SIGKILLed inside a collective is recovered with the failure-free checksum, its peers'
//! stubs resolved from the roots' copies. A force contribution that does not go to the
//! all-reduce's root (nor to its node) leaves the sender log once the sum is known; a rank
//! replaying that all-reduce gets a tombstone in its place and still the same answer.

mod common;

use std::sync::Mutex;

use common::Outcome;
use serde_json::Value;

/// Jobs of 8 processes each: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// 4 KiB cells: a force contribution has a buffer of its own in the sender log, which CAML
/// frees once the all-reduce completed.
const ARGS: [&str; 6] = ["--iters", "12", "--size", "4096", "--ckpt-every", "4"];

fn job(name: &str, env: &[(&str, &str)], respawn: u32) -> Outcome {
    common::job("caml", name, "collectives", &ARGS, env, respawn)
}

/// `field` of every rank report, with the report's file name (`rank-R-inc-I.json`).
fn per_report(out: &Outcome, field: &str) -> Vec<(String, u64)> {
    let mut values = Vec::new();
    for entry in std::fs::read_dir(&out.dir).expect("report dir").flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if name.starts_with("rank-") && name.ends_with(".json") {
            let text = std::fs::read_to_string(entry.path()).expect("report");
            let v: Value = serde_json::from_str(&text).expect("report JSON");
            values.push((name, v[field].as_u64().unwrap_or(0)));
        }
    }
    values.sort();
    values
}

/// Sum over the rank reports of `field`.
fn total(out: &Outcome, field: &str) -> u64 {
    per_report(out, field).iter().map(|(_, v)| v).sum()
}

#[test]
fn caml_logs_each_multicast_once_and_keeps_the_answer() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let plain = job("plain", &[("REVERB_LOG", "causal")], 0);
    assert!(plain.success, "{}", plain.output);
    let caml = job("caml", &[("REVERB_LOG", "causal"), ("REVERB_LOG_CAML", "1")], 0);
    assert!(caml.success, "{}", caml.output);
    assert_eq!(caml.checksum, plain.checksum);
    let (before, after) = (total(&plain, "payload_bytes_logged"), total(&caml, "payload_bytes_logged"));
    assert!(total(&caml, "multicast_stubs_logged") > 0, "no stubs:\n{}", caml.output);
    assert_eq!(total(&plain, "multicast_stubs_logged"), 0);
    // A binomial broadcast over 8 ranks in 4 nodes sends 4 of its 7 tree messages across
    // nodes: all logged without CAML, one copy at the root with it.
    assert!(after * 2 < before, "logged {after} bytes with CAML, {before} without");
}

/// A rank dies inside a collective; the job's survivors resend stubs with their roots'
/// payloads (not under pessimistic-rb, whose buddy ring gives the restarted rank back what
/// it had received: the senders resend only what was in flight).
fn killed_inside_a_collective(mode: &str, fault: &str) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let clean = job(&format!("{mode}-clean"), &[("REVERB_LOG", mode), ("REVERB_CKPT", "buddy")], 0);
    assert!(clean.success, "{}", clean.output);
    let env =
        [("REVERB_LOG", mode), ("REVERB_CKPT", "buddy"), ("REVERB_LOG_CAML", "1"), ("REVERB_FAULT", fault)];
    let killed = job(&format!("{mode}-killed"), &env, 1);
    assert!(killed.success, "{}", killed.output);
    assert_eq!(killed.respawned_nodes().len(), 1, "{}", killed.output);
    assert_eq!(killed.checksum, clean.checksum, "{}", killed.output);
    if mode != "pessimistic-rb" {
        assert!(total(&killed, "multicast_stubs_resent") > 0, "no stub resent:\n{}", killed.output);
    }
}

#[test]
fn causal_rank_killed_inside_a_collective_recovers_bit_identical() {
    killed_inside_a_collective("causal", "3:60");
}

#[test]
fn pessimistic_sb_rank_killed_inside_a_collective_recovers_bit_identical() {
    killed_inside_a_collective("pessimistic-sb", "6:45");
}

#[test]
fn pessimistic_rb_rank_killed_inside_a_collective_recovers_bit_identical() {
    killed_inside_a_collective("pessimistic-rb", "1:80");
}

/// The all-reduce's tree over 8 ranks in nodes {0,1} {2,3} {4,5} {6,7}: rank 6's contribution
/// goes to rank 4, on another node than the root's, so it leaves rank 6's log once the sum is
/// known. Rank 4 sends 10 messages an iteration (7 forwarding cells, its contribution, 2
/// forwarding the sum) and the app checkpoints after iteration 4: killed at its 55th send,
/// rank 4 replays iteration 5's all-reduce, which completed, from rank 6's tombstone.
#[test]
fn a_completed_all_reduce_replays_from_tombstones_bit_identical() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let clean = job("tomb-clean", &[("REVERB_LOG", "causal"), ("REVERB_CKPT", "buddy")], 0);
    assert!(clean.success, "{}", clean.output);
    let caml = [("REVERB_LOG", "causal"), ("REVERB_CKPT", "buddy"), ("REVERB_LOG_CAML", "1")];
    let free = job("tomb-free", &caml, 0);
    assert!(free.success && free.checksum == clean.checksum, "{}", free.output);
    // Only rank 6's contribution crosses nodes to a parent that is not the root.
    let dropping: Vec<String> = per_report(&free, "contribution_bytes_dropped")
        .into_iter()
        .filter(|(_, v)| *v > 0)
        .map(|(n, _)| n)
        .collect();
    assert_eq!(dropping, ["rank-6-inc-0.json"], "{}", free.output);
    assert!(
        total(&free, "send_log_peak_bytes") < total(&clean, "send_log_peak_bytes"),
        "the peak sender log did not shrink:\n{}",
        free.output
    );
    let killed = job("tomb-killed", &[caml.as_slice(), &[("REVERB_FAULT", "4:55")]].concat(), 1);
    assert!(killed.success, "{}", killed.output);
    assert_eq!(killed.respawned_nodes().len(), 1, "{}", killed.output);
    assert_eq!(killed.checksum, clean.checksum, "{}", killed.output);
    assert!(
        total(&killed, "reductions_replayed_from_tombstones") > 0,
        "no tombstone replayed:\n{}",
        killed.output
    );
}

/// The price of dropping (docs/design.md, collective-aware logging): after rank 4 replayed
/// from a tombstone, its own log holds a tombstone for the root. Rank 0 (10 sends an
/// iteration) killed at its 75th send, before the next checkpoint, replays that all-reduce
/// and needs the value: every rank stops with a clear report, no answer is written.
#[test]
fn a_root_needing_a_dropped_contribution_stops_unrecoverable() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let env = [
        ("REVERB_LOG", "causal"),
        ("REVERB_CKPT", "buddy"),
        ("REVERB_LOG_CAML", "1"),
        ("REVERB_FAULT", "4:55,0:75"),
    ];
    let twice = job("tomb-twice", &env, 2);
    assert!(!twice.success, "{}", twice.output);
    assert!(twice.checksum.is_none(), "{}", twice.output);
    assert!(twice.output.contains("unrecoverable failure:"), "{}", twice.output);
    assert!(twice.output.contains("dropped once the reduction completed"), "{}", twice.output);
}
