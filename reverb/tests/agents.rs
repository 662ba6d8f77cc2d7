//! `reverb run --hosts` and its per-host agents, with "hosts" that are loopback addresses of
//! this machine (localhost, 127.0.0.2, ...) and a remote shell that runs the agent here: the
//! first host's agent hosts the rendezvous and the controller, the others heartbeat to it. A
//! host's agent SIGKILLed (`REVERB_FAULT_AGENT`; its ranks die with it) is a lost host: its
//! ranks start again on the spare and the stencil's checksum equals a failure-free run's. With
//! no spare, or with the controller's host lost, the job stops with a report within its bound.
//! Real processes throughout (ci/hosts-suite.sh runs the same on namespace hosts).
//!
//! With logger cores (`--logger shared-unpinned`) each host's agent starts its own nodes'
//! loggers, which meet at the first host's loggers' rendezvous: the answer equals a
//! one-launcher run's, also with a rank killed on another host (its node and logger respawned
//! there) and with a host lost (the spare starts its loggers at the taken-over incarnation).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_reverb");
/// Long enough for an agent to be killed mid-run (`agent_kill`): about 2.5 s for 6 ranks on 2
/// cores in the `ci` profile, several times that unoptimized.
const APP: [&str; 8] = ["app", "stencil", "--iters", "40000", "--size", "64", "--ckpt-every", "1000"];
const HOSTS: &str = "localhost:2,127.0.0.2:2,127.0.0.3:2";

fn work_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("reverb-agents-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("work dir");
    dir
}

/// A remote shell for tests: drops the host name and runs the command here.
fn local_rsh(dir: &Path) -> PathBuf {
    let path = dir.join("rsh");
    std::fs::write(&path, "#!/bin/sh\nshift\nexec \"$@\"\n").expect("rsh script");
    let mut perms = std::fs::metadata(&path).expect("rsh").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&path, perms).expect("chmod rsh");
    path
}

fn checksum(out: &Path) -> String {
    std::fs::read_to_string(out.join("checksum")).map(|s| s.trim().to_string()).unwrap_or_default()
}

/// `reverb run -n 6 --ranks-per-node 2 --respawn 1 [--hosts ...] -- reverb APP`, causal logs
/// and buddy checkpoints on shm; (exit code, stderr, wall time).
fn stencil(out: &Path, hosts: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, Duration) {
    let shape: Vec<&str> = ["-n", "6"].iter().chain(hosts).copied().collect();
    stencil_shaped(out, &shape, env)
}

/// As `stencil`, with `shape` giving the ranks and their hosts.
fn stencil_shaped(out: &Path, shape: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, Duration) {
    let mut cmd = Command::new(BIN);
    cmd.args(["run", "--ranks-per-node", "2", "--respawn", "1", "--timeout", "120"]);
    cmd.args(shape).arg("--").arg(BIN).args(APP);
    cmd.env("REVERB_RSH", local_rsh(out))
        .env("REVERB_RUNTIME_REPORT", out)
        .env("REVERB_PROVIDER", "shm")
        .env("REVERB_LOG", "causal")
        .env("REVERB_LOG_UNIT", "node")
        .env("REVERB_CKPT", "buddy")
        .env("REVERB_AGENT_HEARTBEAT_MS", "200")
        .env("REVERB_AGENT_TIMEOUT_S", "5")
        .env_remove("REVERB_FAULT")
        .env_remove("REVERB_FAULT_AGENT");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let t0 = Instant::now();
    let out = cmd.output().expect("reverb run");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code(), text, t0.elapsed())
}

/// The failure-free answer of `stencil` and its wall time.
fn reference() -> &'static (String, Duration) {
    static REFERENCE: OnceLock<(String, Duration)> = OnceLock::new();
    REFERENCE.get_or_init(|| {
        let dir = work_dir("reference");
        let (code, err, took) = stencil(&dir, &[], &[]);
        assert_eq!(code, Some(0), "{err}");
        (checksum(&dir), took)
    })
}

fn failure_free() -> String {
    reference().0.clone()
}

/// `REVERB_FAULT_AGENT` for `host`: a sixth of the failure-free run in (at least 0.5 s), so the
/// kill lands early in an optimized build as in a debug one (a fixed 1.5 s outlasted a whole
/// 6-rank job in the `ci` profile), with room for a reference slowed by the tests beside it.
fn agent_kill(host: &str) -> String {
    format!("{host}@{}", (reference().1.as_millis() / 6).max(500))
}

#[test]
fn a_host_whose_agent_dies_moves_to_the_spare_with_the_failure_free_answer() {
    let expected = failure_free();
    let dir = work_dir("spare");
    let hosts = ["--hosts", HOSTS, "--spares", "127.0.0.4"];
    let (code, err, _) = stencil(&dir, &hosts, &[("REVERB_FAULT_AGENT", agent_kill("127.0.0.3").as_str())]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("host 127.0.0.3 lost"), "{err}");
    assert!(err.contains("ranks 4-5 start again on spare 127.0.0.4 at incarnation 2"), "{err}");
    assert_eq!(checksum(&dir), expected, "{err}");
}

#[test]
fn a_failure_free_job_across_hosts_leaves_its_spare_idle() {
    let expected = failure_free();
    let dir = work_dir("free");
    let (code, err, _) = stencil(&dir, &["--hosts", HOSTS, "--spares", "127.0.0.4"], &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("job ended (code 0): every host's ranks are done"), "{err}");
    assert!(!err.contains("start again on spare"), "{err}");
    assert_eq!(checksum(&dir), expected, "{err}");
}

#[test]
fn a_lost_host_with_no_spare_stops_the_job_with_a_report() {
    let dir = work_dir("no-spare");
    let (code, err, took) =
        stencil(&dir, &["--hosts", HOSTS], &[("REVERB_FAULT_AGENT", agent_kill("127.0.0.2").as_str())]);
    assert_ne!(code, Some(0), "{err}");
    assert!(err.contains("host 127.0.0.2 lost, and no spare host is left"), "{err}");
    assert!(checksum(&dir).is_empty(), "an answer was written: {err}");
    assert!(took < Duration::from_secs(60), "took {took:?}: {err}");
}

#[test]
fn losing_the_controllers_host_stops_every_host() {
    let dir = work_dir("controller");
    let hosts = ["--hosts", HOSTS, "--spares", "127.0.0.4"];
    let (code, err, took) =
        stencil(&dir, &hosts, &[("REVERB_FAULT_AGENT", agent_kill("localhost").as_str())]);
    assert_ne!(code, Some(0), "{err}");
    assert!(err.contains("host localhost lost"), "{err}");
    assert!(err.contains("and it served the rendezvous"), "{err}");
    assert!(checksum(&dir).is_empty(), "an answer was written: {err}");
    assert!(took < Duration::from_secs(60), "took {took:?}: {err}");
}

#[test]
fn a_failing_host_stops_the_others() {
    let dir = work_dir("fail");
    let t0 = Instant::now();
    // Rank 1 fails at once; rank 0, on the other host, would sleep for a minute.
    let out = Command::new(BIN)
        .args(["run", "-n", "2", "--hosts", "localhost:1,127.0.0.2:1", "--", "/bin/sh", "-c"])
        .arg("[ \"$REVERB_RANK\" = 1 ] && exit 3; exec sleep 60")
        .env("REVERB_RSH", local_rsh(&dir))
        .output()
        .expect("reverb run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("host 127.0.0.2's ranks 1-1 ended with code 3"), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(30), "the other host was not stopped: {err}");
    let bad = Command::new(BIN)
        .args(["run", "-n", "3", "--hosts", "a:1,b:1", "--", "true"])
        .env("REVERB_RSH", local_rsh(&dir))
        .output()
        .expect("reverb run");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--hosts names 2 rank(s), -n 3"));
}

#[test]
fn an_agent_outside_the_job_is_refused() {
    let dir = work_dir("stranger");
    let out = Command::new(BIN)
        .args(["agent", "--host", "elsewhere", "--hosts", "localhost:1", "--", "true"])
        .env("REVERB_ROOT", "127.0.0.1:1")
        .env("REVERB_JOB_ID", "x")
        .env("REVERB_JOB_TOKEN", "y")
        .current_dir(&dir)
        .output()
        .expect("reverb agent");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("host 'elsewhere' is neither in the job's hosts nor a spare"), "{err}");
}

/// `reverb agent --host NAME ...` with the job's identity in the environment, as a user (or a
/// resource manager) starts it on each host; stdout+stderr to `out/NAME.log`.
fn agent(out: &Path, root: &str, name: &str, extra: &[&str], env: &[(&str, &str)]) -> std::process::Child {
    let log = std::fs::File::create(out.join(format!("{name}.log"))).expect("log");
    let mut cmd = Command::new(BIN);
    cmd.args(["agent", "--host", name, "--hosts", "localhost:2,127.0.0.2:2", "--ranks-per-node", "2"]);
    cmd.args(["--respawn", "1", "--timeout", "120"]).args(extra).arg("--").arg(BIN).args(APP);
    cmd.env("REVERB_ROOT", root)
        .env("REVERB_JOB_ID", "agents-comeback")
        .env("REVERB_JOB_TOKEN", "comeback-token")
        .env("REVERB_RUNTIME_REPORT", out)
        .env("REVERB_PROVIDER", "shm")
        .env("REVERB_LOG", "causal")
        .env("REVERB_LOG_UNIT", "node")
        .env("REVERB_CKPT", "buddy")
        .env("REVERB_AGENT_HEARTBEAT_MS", "200")
        .env("REVERB_AGENT_TIMEOUT_S", "8")
        .env_remove("REVERB_FAULT")
        .env_remove("REVERB_FAULT_AGENT")
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("reverb agent")
}

fn wait_bounded(child: &mut std::process::Child, bound: Duration) -> Option<i32> {
    let until = Instant::now() + bound;
    while Instant::now() < until {
        if let Some(st) = child.try_wait().expect("wait") {
            return Some(st.code().unwrap_or(-1));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[test]
fn a_lost_host_that_comes_back_as_a_spare_takes_its_ranks_again() {
    let reference = work_dir("comeback-reference");
    let mut cmd = Command::new(BIN);
    cmd.args(["run", "-n", "4", "--ranks-per-node", "2", "--timeout", "120", "--"]).arg(BIN).args(APP);
    let took = Instant::now();
    let out = cmd
        .env("REVERB_RUNTIME_REPORT", &reference)
        .env("REVERB_PROVIDER", "shm")
        .env("REVERB_LOG", "causal")
        .env("REVERB_LOG_UNIT", "node")
        .env("REVERB_CKPT", "buddy")
        .env_remove("REVERB_FAULT")
        .output()
        .expect("reverb run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Early in this job's own run (a quarter of its failure-free wall time): a host lost once
    // the survivors have finished cannot be recovered from their logs, and the job says so.
    // On a loaded machine the agents' job can run that far ahead of the reference's pace:
    // then the kill comes earlier, twice at most.
    let mut kill_ms = (took.elapsed().as_millis() / 4).max(500);
    for attempt in 0..3 {
        let dir = work_dir(&format!("comeback-{attempt}"));
        let (code, log) = lose_and_bring_back(&dir, kill_ms);
        let too_late = std::fs::read_to_string(dir.join("127.0.0.2.log"))
            .is_ok_and(|l| l.contains("was lost after ranks 0-1 had finished"));
        if too_late && attempt < 2 {
            kill_ms = (kill_ms / 2).max(100);
            continue;
        }
        assert_eq!(code, Some(0), "{log}");
        assert!(log.contains("ranks 2-3 start again on spare 127.0.0.2"), "{log}");
        assert_eq!(checksum(&dir), checksum(&reference), "{log}");
        return;
    }
}

/// Two agents, the second's host killed `kill_ms` into the job, then back as a spare: the
/// first agent's exit code and its log.
fn lose_and_bring_back(dir: &Path, kill_ms: u128) -> (Option<i32>, String) {
    let kill_at = format!("127.0.0.2@{kill_ms}");
    let root = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        format!("localhost:{}", l.local_addr().expect("addr").port())
    };
    let mut first = agent(dir, &root, "localhost", &[], &[]);
    let mut second = agent(dir, &root, "127.0.0.2", &[], &[("REVERB_FAULT_AGENT", kill_at.as_str())]);
    assert_eq!(wait_bounded(&mut second, Duration::from_secs(30)), Some(-1), "the agent was not killed");
    // The host comes back: its agent joins as a spare and is given its old ranks anew.
    let mut back = agent(dir, &root, "127.0.0.2", &["--spare"], &[]);
    let code = wait_bounded(&mut first, Duration::from_secs(150));
    let log = std::fs::read_to_string(dir.join("localhost.log")).unwrap_or_default();
    let back_code = wait_bounded(&mut back, Duration::from_secs(30));
    if code == Some(0) {
        assert_eq!(back_code, Some(0), "{log}");
    }
    (code, log)
}

const LOGGED: [&str; 2] = ["--logger", "shared-unpinned"];

/// As `stencil`, with logger cores; the loggers' death bounds are generous (a loaded machine
/// must not fake a death: the deaths under test are seen by the launchers first).
fn logged(out: &Path, hosts: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, Duration) {
    let args: Vec<&str> = LOGGED.iter().chain(hosts).copied().collect();
    let mut all = vec![("REVERB_HEARTBEAT_MS", "5000"), ("REVERB_LOGGER_STALL_MS", "20000")];
    all.extend_from_slice(env);
    stencil(out, &args, &all)
}

/// A one-launcher run's answer with logger cores (computed once for every test here).
fn logged_one_launcher() -> &'static str {
    static ANSWER: OnceLock<String> = OnceLock::new();
    ANSWER.get_or_init(|| {
        let dir = work_dir("logged-reference");
        let (code, err, _) = logged(&dir, &[], &[]);
        assert_eq!(code, Some(0), "{err}");
        let sum = checksum(&dir);
        assert!(!sum.is_empty(), "no checksum: {err}");
        sum
    })
}

#[test]
fn logger_cores_across_hosts_give_the_one_launcher_answer() {
    let expected = logged_one_launcher();
    let dir = work_dir("logged-free");
    let (code, err, _) = logged(&dir, &["--hosts", HOSTS, "--spares", "127.0.0.4"], &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("job ended (code 0): every host's ranks are done"), "{err}");
    // Each host's agent placed its own node's logger over its own ranks.
    let plans = err.matches("logger cores: shared-unpinned: 1 logger core(s) and 2 rank(s)").count();
    assert_eq!(plans, 3, "{err}");
    assert_eq!(checksum(&dir), expected, "{err}");
}

#[test]
fn a_rank_killed_on_another_host_respawns_its_node_and_logger_there() {
    let expected = logged_one_launcher();
    let dir = work_dir("logged-rank");
    let hosts = ["--hosts", HOSTS, "--spares", "127.0.0.4"];
    // Rank 3: node 1, on 127.0.0.2.
    let (code, err, _) = logged(&dir, &hosts, &[("REVERB_FAULT", "3:1500")]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("node 1: logger core started again at incarnation 1"), "{err}");
    assert!(err.contains("[logger 1] reverb logger-core node 1: incarnation 1 rejoined"), "{err}");
    assert!(!err.contains("start again on spare"), "{err}");
    assert_eq!(checksum(&dir), expected, "{err}");
}

#[test]
fn a_lost_host_moves_to_the_spare_with_its_logger_cores() {
    let expected = logged_one_launcher();
    let dir = work_dir("logged-host");
    let hosts = ["--hosts", HOSTS, "--spares", "127.0.0.4"];
    let (code, err, _) = logged(&dir, &hosts, &[("REVERB_FAULT_AGENT", agent_kill("127.0.0.3").as_str())]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("ranks 4-5 start again on spare 127.0.0.4 at incarnation 2"), "{err}");
    assert!(err.contains("[logger 2] reverb logger-core node 2: incarnation 2 rejoined"), "{err}");
    assert_eq!(checksum(&dir), expected, "{err}");
}

/// `reverb run -n 4 --redundancy 1.5 --hosts HOSTS` (6 processes: ranks 0-3, then the second
/// copies 4 of 0 and 5 of 2, so the third host holds copies only); (exit code, stderr).
fn redundant_stencil(out: &Path, hosts: &str, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let (code, err, _) = stencil_shaped(out, &["-n", "4", "--redundancy", "1.5", "--hosts", hosts], env);
    (code, err)
}

/// The 4-rank stencil's answer, one process per rank on one host.
fn four_rank_answer() -> String {
    static ANSWER: OnceLock<String> = OnceLock::new();
    ANSWER
        .get_or_init(|| {
            let dir = work_dir("reference-4");
            let out = Command::new(BIN)
                .args(["run", "-n", "4", "--ranks-per-node", "2", "--timeout", "120", "--"])
                .arg(BIN)
                .args(APP)
                .env("REVERB_RUNTIME_REPORT", &dir)
                .env("REVERB_PROVIDER", "shm")
                .env("REVERB_LOG", "causal")
                .env("REVERB_CKPT", "buddy")
                .env_remove("REVERB_FAULT")
                .output()
                .expect("reverb run");
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            checksum(&dir)
        })
        .clone()
}

/// The redundant stencil with `fault`: it ends well with the one-host answer, its log saying
/// `says` and never `never` (nothing restarted).
fn masked_run(name: &str, fault: (&str, &str), says: &str, never: &str) {
    let expected = four_rank_answer();
    let dir = work_dir(name);
    let (code, err) = redundant_stencil(&dir, HOSTS, &[fault]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains(says), "{err}");
    assert!(!err.contains(never), "{err}");
    assert_eq!(checksum(&dir), expected, "{err}");
}

#[test]
fn a_copy_killed_on_another_host_is_masked_by_the_controller() {
    // Rank 4, the copy of rank 0 on the third host, dies early; rank 0 runs on the first.
    masked_run("mask-copy", ("REVERB_FAULT", "4:2000"), "a copy of virtual rank 0: masked", "respawning");
}

#[test]
fn a_lost_host_of_copies_is_masked_whole_with_no_spare_and_no_rollback() {
    let says = "its ranks 4-5 are copies with live mates on other hosts: masked";
    masked_run(
        "mask-host",
        ("REVERB_FAULT_AGENT", agent_kill("127.0.0.3").as_str()),
        says,
        "start again on spare",
    );
}

#[test]
fn redundancy_across_hosts_refuses_copies_on_one_host_and_miscounted_hosts() {
    let dir = work_dir("mask-refused");
    let (code, err) = redundant_stencil(&dir, "localhost:5,127.0.0.2:1", &[]);
    assert_ne!(code, Some(0));
    assert!(err.contains("copies of a rank must be on different hosts"), "{err}");
    let (code, err) = redundant_stencil(&dir, "localhost:4,127.0.0.2:4", &[]);
    assert_ne!(code, Some(0));
    assert!(err.contains("--hosts names 8 rank(s); -n 4 at --redundancy 1.5 runs 6"), "{err}");
}

/// Under Slurm the nodes of the allocation are the hosts: 6 processes (4 ranks at 1.5x) on one
/// node would put copies of a rank together, refused before srun starts anything.
#[test]
fn redundancy_under_slurm_refuses_copies_on_one_node() {
    let out = Command::new(BIN)
        .args(["run", "-n", "4", "--redundancy", "1.5", "--slurm", "--timeout", "60", "--", "true"])
        .env("SLURM_JOB_NUM_NODES", "1")
        .output()
        .expect("reverb run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("copies of a rank must be on different hosts"), "{err}");
    assert!(!err.contains("srun"), "srun was started: {err}");
}
