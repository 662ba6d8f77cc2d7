//! Open MPI's `mpirun` as a plain launcher: it starts the ranks (reverb reads
//! `OMPI_COMM_WORLD_RANK`/`_SIZE`/`_LOCAL_RANK`/`_LOCAL_SIZE`), rank 0 hosts the rendezvous at
//! `REVERB_ROOT`, and the stencil's checksum equals a `reverb run` job's. No respawn: mpirun
//! ends the job when a rank dies. All ranks share this host, which mpirun calls one node, so
//! message logging (which needs two nodes) is refused with a clear error.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_reverb");
const APP: [&str; 8] = ["app", "stencil", "--iters", "200", "--size", "64", "--ckpt-every", "100"];

fn mpirun() -> Option<&'static str> {
    let found = Command::new("mpirun").arg("--version").output().is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("skipped: mpirun (Debian's openmpi-bin, which ci/deps.sh installs) is not on PATH");
    }
    found.then_some("mpirun")
}

fn free_root() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").to_string()
}

/// `mpirun -n 4 reverb APP` with `env`; (exit success, stdout+stderr).
fn under_mpirun(mpirun: &str, job: &str, env: &[(&str, &str)]) -> (bool, String) {
    let mut cmd = Command::new(mpirun);
    cmd.args(["--allow-run-as-root", "--oversubscribe", "-n", "4"]);
    let root = free_root();
    let fixed = [("REVERB_ROOT", root.as_str()), ("REVERB_JOB_TOKEN", "mpirun-test"), ("REVERB_JOB_ID", job)];
    for (k, v) in fixed.iter().chain(env) {
        cmd.args(["-x", &format!("{k}={v}")]);
    }
    let out = cmd.arg(BIN).args(APP).output().expect("run mpirun");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

fn checksum(text: &str) -> Option<String> {
    text.lines().find_map(|l| l.split("checksum: ").nth(1)).map(|c| c.trim().to_string())
}

#[test]
fn mpirun_launches_a_job_with_the_reverb_run_checksum() {
    let Some(mpirun) = mpirun() else { return };
    let reference = Command::new(BIN)
        .args(["run", "-n", "4", "--ranks-per-node", "4", "--timeout", "60", "--no-prefix", "--", BIN])
        .args(APP)
        .output()
        .expect("reverb run");
    let reference = checksum(&String::from_utf8_lossy(&reference.stdout)).expect("reference checksum");
    let (ok, text) = under_mpirun(mpirun, &format!("mpi{}", std::process::id()), &[]);
    assert!(ok, "the job under mpirun failed:\n{text}");
    assert_eq!(checksum(&text).as_deref(), Some(reference.as_str()), "{text}");
}

#[test]
fn mpirun_on_one_node_refuses_message_logging_clearly() {
    let Some(mpirun) = mpirun() else { return };
    let (ok, text) =
        under_mpirun(mpirun, &format!("mpilog{}", std::process::id()), &[("REVERB_LOG", "causal")]);
    assert!(!ok, "logging on one node should be refused:\n{text}");
    assert!(text.contains("message logging needs at least two nodes"), "{text}");
}
