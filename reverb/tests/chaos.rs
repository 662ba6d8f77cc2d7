//! A short `reverb chaos` campaign with a fixed seed: 12 real jobs covering every fault kind
//! (none, rank, node, checkpoint, replay, two nodes at once, inside init, at the log GC, a copy
//! of a replicated rank, a copy then a rank of another node), each checked against the app's
//! failure-free checksum. No wrong answer, no hang and no other failure (a runtime bug) is
//! allowed; the test reads the campaign's JSON report, not its human output. Its counts by
//! message size class and by kill phase add up to the trials. The apps' answer does not depend
//! on the size of their messages, in pieces or not.

// The suites' shared job; this one takes its checksum only.
#[allow(dead_code)]
mod common;

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
    for (group, key) in [("by_size_class", "size_class"), ("by_phase", "phase")] {
        let rows = report[group].as_array().unwrap_or_else(|| panic!("no {group}: {stdout}"));
        let trials: u64 = rows.iter().filter_map(|k| k["trials"].as_u64()).sum();
        assert_eq!(trials, 12, "{group} covers every trial once: {stdout}");
        for k in rows {
            assert!(k[key].is_string(), "{group} row without its {key}: {k}");
            let parts: u64 = outcomes.iter().filter_map(|f| k[*f].as_u64()).sum();
            assert_eq!(parts, k["trials"].as_u64().unwrap_or(0), "{group}: outcomes add up: {k}");
        }
    }
    let total: u64 = outcomes.iter().filter_map(|k| report[*k].as_u64()).sum();
    assert_eq!(total, 12, "every trial is classified once: {stdout}");
    // The no-fault trials survive under every protocol.
    assert!(report["survived"].as_u64().unwrap_or(0) >= 2, "{stdout}");
    assert!(report["faults_fired"].as_u64().unwrap_or(0) >= 6, "the faults were injected: {stdout}");
}

/// Every app, its main messages padded across the rendezvous threshold and past the largest
/// message (32 KiB here: in three pieces), gives the answer of its own sizes.
#[test]
fn apps_answer_the_same_at_every_message_size() {
    let apps: [(&str, &[&str]); 4] = [
        ("stencil", &["--iters", "12", "--size", "64", "--ckpt-every", "4"]),
        ("ring", &["--iters", "12", "--size", "256", "--ckpt-every", "4"]),
        ("master-worker", &["--iters", "4", "--size", "200", "--ckpt-every", "2"]),
        ("collectives", &["--iters", "4", "--size", "512", "--ckpt-every", "2"]),
    ];
    let env = [("REVERB_LOG", "causal"), ("REVERB_CKPT", "rs"), ("REVERB_LOG_MAX_MESSAGE", "32768")];
    for (app, args) in apps {
        let mut sums = Vec::new();
        for bytes in ["0", "8193", "98303"] {
            let mut a = args.to_vec();
            a.extend(["--msg-bytes", bytes]);
            let out = common::job("chaos-sizes", &format!("{app}-{bytes}"), app, &a, &env, 0);
            assert!(out.success, "{app} at {bytes} bytes failed:\n{}", out.output);
            sums.push(out.checksum.unwrap_or_else(|| panic!("{app} at {bytes}: no checksum")));
            let _ = std::fs::remove_dir_all(&out.dir);
        }
        assert!(sums.iter().all(|s| *s == sums[0]), "{app}: {sums:?}");
    }
}
