//! Collective-aware logging (`REVERB_LOG_CAML=1`, logger/src/multicast.rs): the collectives
//! app (every rank multicasts its cell to all, then an all-reduce; 8 ranks in 4 nodes of 2)
//! logs each multicast once, at its root, instead of at every inter-node tree send; a rank
//! SIGKILLed inside a collective is recovered with the failure-free checksum, its peers'
//! stubs resolved from the roots' copies.

mod common;

use std::sync::Mutex;

use common::Outcome;
use serde_json::Value;

/// Jobs of 8 processes each: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const ARGS: [&str; 6] = ["--iters", "12", "--size", "512", "--ckpt-every", "4"];

fn job(name: &str, env: &[(&str, &str)], respawn: u32) -> Outcome {
    common::job("caml", name, "collectives", &ARGS, env, respawn)
}

/// Sum over the rank reports of `field`.
fn total(out: &Outcome, field: &str) -> u64 {
    let mut sum = 0;
    for entry in std::fs::read_dir(&out.dir).expect("report dir").flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if name.starts_with("rank-") && name.ends_with(".json") {
            let text = std::fs::read_to_string(entry.path()).expect("report");
            let v: Value = serde_json::from_str(&text).expect("report JSON");
            sum += v[field].as_u64().unwrap_or(0);
        }
    }
    sum
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
