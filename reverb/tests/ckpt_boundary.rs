//! A node killed at every phase around a checkpoint: the last iteration before it, inside it
//! (before level 1, after the local copy, with the buddy copy landed and flipped, before the
//! vote, just after the commit), in the log GC that follows (before its collective and in the
//! trim) and just after it; with halos below, at and above the rendezvous threshold and above
//! the largest message (in pieces).
//! Every case recovers with the failure-free checksum (under `none`, which keeps no log, it may
//! instead stop with the launcher's clear report, never a timeout). Logging protocols and checkpoint levels
//! rotate over the cases so each phase meets several of each, and each size meets all of them.
//!
//! The job: `reverb app stencil` on 8 ranks in 4 nodes of 2, checkpoints every 10 iterations;
//! rank 3 (node 1) dies around checkpoint 1. Runs on the provider named by `REVERB_PROVIDER`
//! (shm by default); ci/test.sh runs it on tcp too.

mod common;

use std::sync::OnceLock;

/// The rendezvous threshold and the largest message of every job here (bytes): small, so
/// messages cross them cheaply.
const THRESH: &str = "1024";
const MAX_MESSAGE: &str = "8192";
const ITERS: &str = "30";
const CKPT_EVERY: u64 = 10;

/// Halo messages (`reverb app --msg-bytes`: the row, then checked filler): eager, exactly the
/// threshold (the logger's frame, envelope included, goes by rendezvous), above it, and above
/// the largest message (the app sends it in three pieces).
const SIZES: [(&str, &str); 4] =
    [("eager", "256"), ("at-threshold", "1024"), ("rendezvous", "4096"), ("fragmented", "20000")];

const PROTOCOLS: [&str; 4] = ["causal", "pessimistic-sb", "pessimistic-rb", "none"];
/// The launcher's report when `none` cannot recover (it has no log to replay from).
const NO_LOG_REPORT: &str = "unrecoverable failure: REVERB_LOG=none keeps no message log";
const LEVELS: [&str; 3] = ["rs", "buddy", "parity"];

/// Where rank 3 dies: the fault variable and its value. Rank 3 sends two rows an iteration.
fn phases() -> Vec<(&'static str, &'static str, String)> {
    let last = 2 * CKPT_EVERY;
    vec![
        ("first row of the last iteration", "REVERB_FAULT", format!("3:{}", last - 1)),
        ("after the last iteration's rows", "REVERB_FAULT", format!("3:{last}")),
        ("before level 1", "REVERB_FAULT_CKPT", "3:1:entered".into()),
        ("local copy written", "REVERB_FAULT_CKPT", "3:1:local-written".into()),
        ("buddy body landed", "REVERB_FAULT_CKPT", "3:1:buddy-body-landed".into()),
        ("buddy copy flipped", "REVERB_FAULT_CKPT", "3:1:buddy-flipped".into()),
        ("before the vote", "REVERB_FAULT_CKPT", "3:1:voting".into()),
        ("just committed", "REVERB_FAULT_CKPT", "3:1:committed".into()),
        ("before the log GC", "REVERB_FAULT_GC", "3:1".into()),
        ("in the log trim", "REVERB_FAULT_GC", "3:1:trim".into()),
        ("first row after the checkpoint", "REVERB_FAULT", format!("3:{}", last + 1)),
    ]
}

fn stencil_args(msg_bytes: &str) -> Vec<&str> {
    vec!["--iters", ITERS, "--size", "32", "--ckpt-every", "10", "--msg-bytes", msg_bytes]
}

/// The failure-free checksum (logging and checkpoints off; the message size does not change
/// the answer), run once.
fn failure_free() -> &'static str {
    static SUM: OnceLock<String> = OnceLock::new();
    SUM.get_or_init(|| {
        let env = [("REVERB_LOG", "none"), ("REVERB_CKPT", "off"), ("REVERB_RNDV_THRESH", THRESH)];
        let out = common::job("ckpt-boundary", "base", "stencil", &stencil_args("256"), &env, 0);
        assert!(out.success, "failure-free run:\n{}", out.output);
        out.checksum.expect("a checksum")
    })
}

/// Kills rank 3 at phase `p` (index into `phases()`) under every size class.
fn phase_recovers(p: usize) {
    let (what, var, value) = phases().swap_remove(p);
    for (s, (class, msg_bytes)) in SIZES.iter().enumerate() {
        let protocol = PROTOCOLS[(p + s) % PROTOCOLS.len()];
        // The buddy stages happen only at levels with a buddy copy.
        let levels = if value.contains(":buddy-") { &LEVELS[..2] } else { &LEVELS[..] };
        let level = levels[(p + 2 * s) % levels.len()];
        let expected = failure_free();
        let env = [
            ("REVERB_LOG", protocol),
            ("REVERB_CKPT", level),
            ("REVERB_RNDV_THRESH", THRESH),
            ("REVERB_LOG_MAX_MESSAGE", MAX_MESSAGE),
            (var, value.as_str()),
        ];
        let name = format!("p{p}-{class}");
        let out = common::job("ckpt-boundary", &name, "stencil", &stencil_args(msg_bytes), &env, 1);
        let case = format!("rank 3 killed {what} ({var}={value}), {class} rows, {protocol}, {level}");
        if protocol == "none" && !out.success {
            // No message log: a node lost after messages it cannot replay is refused, clearly.
            assert!(out.output.contains(NO_LOG_REPORT), "{case}: no clear report\n{}", out.output);
            continue;
        }
        assert!(out.success, "{case}: the job failed\n{}", out.output);
        assert_eq!(out.respawned_nodes(), vec![vec![1]], "{case}: node 1 respawned once\n{}", out.output);
        assert_eq!(out.checksum.as_deref(), Some(expected), "{case}: the checksum\n{}", out.output);
    }
}

#[test]
fn killed_in_the_last_iteration_before_a_checkpoint() {
    phase_recovers(0);
    phase_recovers(1);
}

#[test]
fn killed_before_level_1_and_after_the_local_copy() {
    phase_recovers(2);
    phase_recovers(3);
}

#[test]
fn killed_while_the_buddy_copy_lands_and_flips() {
    phase_recovers(4);
    phase_recovers(5);
}

#[test]
fn killed_before_the_vote_and_just_after_the_commit() {
    phase_recovers(6);
    phase_recovers(7);
}

#[test]
fn killed_in_the_log_gc_before_and_during_its_trim() {
    phase_recovers(8);
    phase_recovers(9);
}

#[test]
fn killed_on_the_first_row_after_a_checkpoint() {
    phase_recovers(10);
}
