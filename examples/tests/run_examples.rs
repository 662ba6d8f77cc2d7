//! Every example rank program, run under the `reverb` launcher as the README shows it:
//! exit codes and printed checks, and `stencil_ft`'s checksum with a node killed and respawned
//! equal to its failure-free checksum.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// One job at a time, so a loaded machine stays responsive.
static SERIAL: Mutex<()> = Mutex::new(());

/// The `reverb` binary: `REVERB_BIN` if set, else the workspace's in this
/// test's profile directory. The launcher is the CLI package's binary, which `cargo test` of
/// this package does not build: under the dev and release profiles it is built here (cargo
/// makes that a no-op when it is up to date); under another profile (CI's `ci`, whose feature
/// set only `cargo ci-build` knows) it must have been built already.
fn reverb_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("REVERB_BIN") {
            return PathBuf::from(bin);
        }
        let exe = std::env::current_exe().expect("test executable");
        // target/<profile>/deps/<this test>
        let profile_dir = exe.parent().and_then(Path::parent).expect("target profile directory");
        let target_dir = profile_dir.parent().expect("target directory");
        let bin = profile_dir.join("reverb");
        let profile = profile_dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let profile_flag = match profile {
            "debug" => None,
            "release" => Some("--release"),
            _ => {
                assert!(
                    bin.exists(),
                    "no {} (build it with `cargo ci-build`, or set REVERB_BIN)",
                    bin.display()
                );
                return bin;
            }
        };
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut build = Command::new(cargo);
        build.args(["build", "-p", "reverb", "--bin", "reverb", "--features", "reverb/fault-injection"]);
        build.arg("--quiet").arg("--target-dir").arg(target_dir).args(profile_flag);
        let status = build.status().expect("running cargo build for the reverb binary");
        assert!(status.success(), "cargo build -p reverb --bin reverb failed");
        bin
    })
}

struct Outcome {
    success: bool,
    stdout: String,
    output: String,
}

/// `reverb run -n RANKS --ranks-per-node PER_NODE [--respawn N] -- PROGRAM ARGS`, with the
/// caller's logging and fault settings cleared so they cannot leak in.
fn launch(
    ranks: u32,
    per_node: u32,
    respawn: u32,
    program: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> Outcome {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut cmd = Command::new(reverb_bin());
    cmd.args(["run", "-n", &ranks.to_string(), "--ranks-per-node", &per_node.to_string()])
        .args(["--respawn", &respawn.to_string(), "--timeout", "120", "--", program])
        .args(args);
    for var in [
        "REVERB_FAULT",
        "REVERB_FAULT_CKPT",
        "REVERB_FAULT_INIT",
        "REVERB_FAULT_GC",
        "REVERB_LOG",
        "REVERB_CKPT",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    let out = cmd.output().expect("reverb run");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let output = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    Outcome { success: out.status.success(), stdout, output }
}

/// The hex value after `checksum: ` in the job's output.
fn checksum(out: &Outcome) -> Option<String> {
    let at = out.stdout.find("checksum: ")? + "checksum: ".len();
    Some(out.stdout[at..].chars().take_while(char::is_ascii_hexdigit).collect())
}

#[test]
fn hello_ring_passes_the_token_round() {
    let out = launch(4, 2, 0, env!("CARGO_BIN_EXE_hello_ring"), &["3"], &[]);
    assert!(out.success, "hello_ring failed:\n{}", out.output);
    // 3 laps of 1 + 2 + 3 + 4.
    assert!(out.stdout.contains("hello_ring: 4 ranks, 3 laps, token 30"), "{}", out.output);
}

#[test]
fn put_get_checks_what_it_moved() {
    let out = launch(2, 1, 0, env!("CARGO_BIN_EXE_put_get"), &[], &[]);
    assert!(out.success, "put_get failed:\n{}", out.output);
    assert!(out.stdout.contains("put_get: 1 pairs, 65536 bytes each way, checked"), "{}", out.output);
    assert!(checksum(&out).is_some_and(|c| c.len() == 16), "no checksum:\n{}", out.output);
}

#[test]
fn put_get_refuses_an_odd_job() {
    let out = launch(3, 3, 0, env!("CARGO_BIN_EXE_put_get"), &[], &[]);
    assert!(!out.success, "put_get ran on 3 ranks:\n{}", out.output);
    assert!(out.output.contains("is odd"), "{}", out.output);
}

#[test]
fn stencil_ft_recovers_a_killed_node_with_the_same_checksum() {
    let prog = env!("CARGO_BIN_EXE_stencil_ft");
    let args = ["100", "10"];
    let env = [("REVERB_LOG", "causal"), ("REVERB_CKPT", "buddy")];
    let clean = launch(4, 2, 0, prog, &args, &env);
    assert!(clean.success, "failure-free run failed:\n{}", clean.output);
    let expected = checksum(&clean).expect("a checksum");
    // Rank 3 (node 1) sends one halo per iteration: it dies in iteration 45, after epoch 4.
    let reports = std::env::temp_dir().join(format!("reverb-examples-stencil-ft-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&reports);
    std::fs::create_dir_all(&reports).expect("report directory");
    let dir = reports.to_str().expect("utf-8 temp path");
    let faulty_env = [env[0], env[1], ("REVERB_FAULT", "3:45"), ("REVERB_RUNTIME_REPORT", dir)];
    let faulty = launch(4, 2, 1, prog, &args, &faulty_env);
    assert!(faulty.success, "run with node 1 killed failed:\n{}", faulty.output);
    // Node 1's ranks came back (incarnation 1) from epoch 4, iteration 40: their runtime reports.
    for rank in [2, 3] {
        let path = reports.join(format!("rank-{rank}-inc-1.json"));
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("rank {rank} did not restart ({e}):\n{}", faulty.output));
        let report: serde_json::Value = serde_json::from_str(&text).expect("a JSON report");
        assert_eq!(report["restored_epoch"], 4, "rank {rank}: {report}");
    }
    let _ = std::fs::remove_dir_all(&reports);
    assert_eq!(checksum(&faulty), Some(expected), "recovered answer differs:\n{}", faulty.output);
}
