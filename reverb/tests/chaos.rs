//! A short `reverb chaos` campaign with a fixed seed: 12 real jobs covering every fault kind
//! (none, rank, node, checkpoint, replay, two nodes at once, inside init, at the log GC, a copy
//! of a replicated rank, a copy then a rank of another node), each checked against the app's
//! failure-free checksum. No wrong answer, no hang and no other failure (a runtime bug) is
//! allowed; the test reads the campaign's JSON report, not its human output.

use std::process::Command;

#[test]
fn short_campaign_has_no_wrong_answers_no_hangs_and_no_other_failures() {
    let out = Command::new(env!("CARGO_BIN_EXE_reverb"))
        .args(["chaos", "--trials", "12", "--seed", "7", "--timeout", "150", "--json"])
        .env_remove("REVERB_FAULT")
        .env_remove("REVERB_FAULT_CKPT")
        .env_remove("REVERB_FAULT_INIT")
        .env_remove("REVERB_FAULT_GC")
        .env_remove("REVERB_LOG")
        .env_remove("REVERB_CKPT")
        .output()
        .expect("reverb chaos");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stderr}");
    let report: serde_json::Value =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("no JSON report ({e}):\n{stdout}\n{stderr}"));
    assert_eq!(report["trials"], 12, "{stdout}");
    assert_eq!(report["wrong_answers"], 0, "{stdout}");
    assert_eq!(report["hangs"], 0, "{stdout}");
    assert_eq!(report["other_failures"], 0, "other failures (runtime bugs): {}", report["failures"]);
    assert_eq!(report["failures"].as_array().map(Vec::len), Some(0), "{stdout}");
    assert!(out.status.success(), "chaos exited {}:\n{stdout}", out.status);
    let kinds: Vec<&str> =
        report["by_fault"].as_array().expect("by_fault").iter().filter_map(|k| k["fault"].as_str()).collect();
    for kind in reverb::chaos::FAULT_KINDS {
        assert!(kinds.contains(&kind), "no {kind} fault in the campaign: {kinds:?}");
    }
    for k in report["by_fault"].as_array().expect("by_fault") {
        let n = k["trials"].as_u64().unwrap_or(0);
        let parts: u64 =
            ["survived", "reported_unrecoverable", "failed"].iter().filter_map(|f| k[*f].as_u64()).sum();
        assert_eq!(parts, n, "a kind's outcomes add up to its trials: {k}");
    }
    let outcomes = ["survived", "reported_unrecoverable", "wrong_answers", "hangs", "other_failures"];
    let total: u64 = outcomes.iter().filter_map(|k| report[*k].as_u64()).sum();
    assert_eq!(total, 12, "every trial is classified once: {stdout}");
    // The no-fault trials survive under every protocol.
    assert!(report["survived"].as_u64().unwrap_or(0) >= 2, "{stdout}");
    assert!(report["faults_fired"].as_u64().unwrap_or(0) >= 6, "the faults were injected: {stdout}");
}
