//! `reverb demo` end to end with small sizes: three real jobs (logging off, causal, a node
//! SIGKILLed and respawned); the demo itself asserts the recovered checksum. On the provider
//! `REVERB_PROVIDER` names (default shm): ci/verbs-suite.sh runs it over verbs in the rxe VM.

use std::process::Command;

#[test]
fn demo_recovers_a_killed_node_with_an_identical_checksum() {
    let provider = std::env::var("REVERB_PROVIDER").unwrap_or_else(|_| "shm".into());
    let out = Command::new(env!("CARGO_BIN_EXE_reverb"))
        .args([
            "demo",
            "--provider",
            &provider,
            "--iters",
            "40",
            "--size",
            "64",
            "--ckpt-every",
            "10",
            "--repeat",
            "1",
            "--timeout",
            "180",
        ])
        .env_remove("REVERB_FAULT")
        .output()
        .expect("reverb demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Exit 0 is the demo's verdict: the recovered checksum equals the failure-free one (it
    // exits 1 when they differ, non-zero on any error).
    assert_eq!(out.status.code(), Some(0), "demo failed:\n{stdout}\n{stderr}");
    // The report a person reads has each of its sections.
    for line in ["overhead", "detection time", "recovery time", "replay:", "memory:", "restored epoch"] {
        assert!(stdout.contains(line), "report lacks {line:?}:\n{stdout}");
    }
}
