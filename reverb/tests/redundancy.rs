//! Partial redundancy, failure-free (`REVERB_REDUNDANCY`, runtime/src/redundant.rs): the
//! job's processes are copies of fewer virtual ranks; every copy of virtual rank 0 prints the
//! answer of a plain run of the virtual ranks. The stencil's messages are named; the
//! master-worker's requests are wildcard receives, matched by the master's leader copy and
//! followed by its mates.

use std::process::Command;
use std::sync::Mutex;

/// Jobs of up to 12 processes: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `app` as `processes` processes, `env` added; the `checksum:` lines printed, sorted.
fn checksums(app: &str, processes: u32, env: &[(&str, &str)]) -> Vec<String> {
    checksums_on(app, processes, processes, env)
}

/// `checksums` with `per_node` processes per node.
fn checksums_on(app: &str, processes: u32, per_node: u32, env: &[(&str, &str)]) -> Vec<String> {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let exe = env!("CARGO_BIN_EXE_reverb");
    let mut cmd = Command::new(exe);
    cmd.args(["run", "-n", &processes.to_string(), "--ranks-per-node", &per_node.to_string()])
        .args(["--timeout", "120", "--", exe, "app", app])
        .args(["--iters", "200", "--size", "32"]);
    for var in ["REVERB_LOG", "REVERB_CKPT", "REVERB_FAULT", "REVERB_REDUNDANCY", "REVERB_VIRTUAL_RANKS"] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    let out = cmd.output().expect("reverb run");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{app} on {processes} processes {env:?} failed:\n{text}");
    let mut sums: Vec<String> =
        text.lines().filter_map(|l| l.split("checksum: ").nth(1)).map(|s| s.trim().to_string()).collect();
    sums.sort();
    sums
}

/// Every copy of rank 0 prints the plain run's checksum, at each degree.
fn copies_agree_with_the_plain_run(app: &str, virtual_ranks: u32) {
    let plain = checksums(app, virtual_ranks, &[]);
    assert_eq!(plain.len(), 1, "{plain:?}");
    for degree in ["1.5", "2", "3"] {
        let map = reverb_runtime::replicas::ReplicaMap::new(virtual_ranks, degree.parse().unwrap()).unwrap();
        let n = virtual_ranks.to_string();
        let env = [("REVERB_REDUNDANCY", degree), ("REVERB_VIRTUAL_RANKS", n.as_str())];
        let sums = checksums(app, map.physical_ranks(), &env);
        assert_eq!(sums, vec![plain[0].clone(); map.sphere(0).len()], "{app} at {degree}x");
    }
}

#[test]
fn stencil_copies_give_the_plain_answer() {
    copies_agree_with_the_plain_run("stencil", 4);
}

/// The copies are ordinary ranks to the logger and the checkpointer underneath.
#[test]
fn stencil_copies_under_causal_logging_and_buddy_checkpoints() {
    let logged = [("REVERB_LOG", "causal"), ("REVERB_CKPT", "buddy")];
    let plain = checksums_on("stencil", 4, 2, &logged);
    let env = [logged[0], logged[1], ("REVERB_REDUNDANCY", "2"), ("REVERB_VIRTUAL_RANKS", "4")];
    assert_eq!(checksums_on("stencil", 8, 2, &env), vec![plain[0].clone(); 2]);
}

#[test]
fn master_worker_copies_agree_on_wildcard_matches() {
    copies_agree_with_the_plain_run("master-worker", 4);
}

#[test]
fn a_job_of_the_wrong_size_is_refused() {
    let exe = env!("CARGO_BIN_EXE_reverb");
    let out = Command::new(exe)
        .args(["run", "-n", "5", "--timeout", "60", "--", exe, "app", "stencil", "--iters", "10"])
        .env("REVERB_REDUNDANCY", "2")
        .env("REVERB_VIRTUAL_RANKS", "4")
        .output()
        .expect("reverb run");
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(text.contains("4 virtual ranks at redundancy 2 need 8 processes, the job has 5"), "{text}");
}
