//! One job run by two launchers (`reverb run --local-ranks`), as on two hosts: one hosts the
//! rendezvous (`--serve-root`), the other's ranks connect to it; a rank SIGKILLed under the
//! launcher that does not host the rendezvous is respawned by its own launcher, and the
//! stencil's checksum equals a one-launcher failure-free run. Real processes throughout; the
//! two "hosts" share this machine here (ci/two-vm.sh runs the same over two VMs and rxe).
//! `reverb run --hosts` (agents and their controller) is tested in `agents.rs`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_reverb");
/// The stencil's run: long enough (a few seconds) for a kill mid-run.
const APP: [&str; 8] = ["app", "stencil", "--iters", "5000", "--size", "256", "--ckpt-every", "500"];

fn work_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("reverb-parts-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("work dir");
    dir
}

/// A free port on the loopback (bound then released: the server binds it right after).
fn free_root() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").to_string()
}

/// `reverb run -n 4 --ranks-per-node 1 [EXTRA] -- reverb APP` with the job's logging and
/// checkpoint settings, its rank reports in `out`, stdout+stderr to `out/launcher.log`.
fn launcher(out: &Path, extra: &[&str], env: &[(&str, &str)]) -> Child {
    let log = std::fs::File::create(out.join("launcher.log")).expect("log");
    let mut cmd = Command::new(BIN);
    cmd.args(["run", "-n", "4", "--ranks-per-node", "1", "--timeout", "120"])
        .args(extra)
        .arg("--")
        .arg(BIN)
        .args(APP)
        .env("REVERB_RUNTIME_REPORT", out)
        .env("REVERB_PROVIDER", "shm")
        .env("REVERB_LOG", "causal")
        .env("REVERB_LOG_UNIT", "node")
        .env("REVERB_CKPT", "buddy")
        .env_remove("REVERB_FAULT")
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("reverb run")
}

/// Waits (bounded) for a launcher; its exit code.
fn finish(mut child: Child, out: &Path) -> i32 {
    let until = Instant::now() + Duration::from_secs(150);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status.code().unwrap_or(-1);
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            panic!("launcher still running after 150 s:\n{}", log(out));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn log(out: &Path) -> String {
    std::fs::read_to_string(out.join("launcher.log")).unwrap_or_default()
}

fn checksum(out: &Path) -> String {
    std::fs::read_to_string(out.join("checksum")).map(|s| s.trim().to_string()).unwrap_or_default()
}

/// The pid of `rank` among the launcher's children (ranks are its direct children).
fn rank_pid(launcher: u32, rank: u32) -> Option<u32> {
    let children = std::fs::read_to_string(format!("/proc/{launcher}/task/{launcher}/children")).ok()?;
    let want = format!("REVERB_RANK={rank}");
    children.split_whitespace().filter_map(|p| p.parse::<u32>().ok()).find(|pid| {
        std::fs::read(format!("/proc/{pid}/environ"))
            .is_ok_and(|env| env.split(|&b| b == 0).any(|kv| kv == want.as_bytes()))
    })
}

/// Two launchers of one job, the second's rank 3 SIGKILLed `kill_after` after the second
/// started, when given; with how long the second ran.
fn two_launchers(name: &str, kill_after: Option<Duration>) -> (PathBuf, PathBuf, i32, i32, Duration) {
    let (a, b) = (work_dir(&format!("{name}-a")), work_dir(&format!("{name}-b")));
    let root = free_root();
    let job = [("REVERB_ROOT", root.as_str()), ("REVERB_JOB_ID", name), ("REVERB_JOB_TOKEN", "parts-token")];
    let serving = launcher(&a, &["--local-ranks", "0-1", "--serve-root", "--respawn", "1"], &job);
    std::thread::sleep(Duration::from_millis(300));
    let joining = launcher(&b, &["--local-ranks", "2-3", "--respawn", "1"], &job);
    let started = Instant::now();
    if let Some(after) = kill_after {
        std::thread::sleep(after);
        let pid = rank_pid(joining.id(), 3).expect("rank 3 under the second launcher");
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_raw(pid as i32).expect("pid"),
            rustix::process::Signal::KILL,
        );
    }
    let code_b = finish(joining, &b);
    let took = started.elapsed();
    let code_a = finish(serving, &a);
    (a, b, code_a, code_b, took)
}

#[test]
fn a_job_split_over_two_launchers_survives_a_kill_under_the_joining_one() {
    let whole = work_dir("whole");
    let code = finish(launcher(&whole, &[], &[]), &whole);
    assert_eq!(code, 0, "{}", log(&whole));
    let expected = checksum(&whole);
    assert!(!expected.is_empty(), "no checksum:\n{}", log(&whole));

    let (a, b, code_a, code_b, took) = two_launchers("split", None);
    assert_eq!((code_a, code_b), (0, 0), "{}\n{}", log(&a), log(&b));
    assert_eq!(checksum(&a), expected, "rank 0 runs under the serving launcher");

    // Mid-run: a fixed delay came after the whole job had ended on a quick machine.
    let (a, b, code_a, code_b, _) = two_launchers("killed", Some(took / 2));
    assert_eq!((code_a, code_b), (0, 0), "{}\n{}", log(&a), log(&b));
    assert!(log(&b).contains("node 3 respawned"), "the joining launcher respawned rank 3:\n{}", log(&b));
    assert!(log(&a).contains("rank 3 rejoined at incarnation 1"), "{}", log(&a));
    assert_eq!(checksum(&a), expected, "{}\n{}", log(&a), log(&b));
}

#[test]
fn a_part_must_be_whole_nodes_and_name_its_job() {
    let out = Command::new(BIN)
        .args(["run", "-n", "4", "--ranks-per-node", "2", "--local-ranks", "1-2", "--", "true"])
        .env("REVERB_ROOT", "127.0.0.1:1")
        .env("REVERB_JOB_ID", "x")
        .env("REVERB_JOB_TOKEN", "t")
        .output()
        .expect("reverb run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("not whole nodes"), "{err}");

    let out = Command::new(BIN)
        .args(["run", "-n", "4", "--local-ranks", "0-3", "--", "true"])
        .env("REVERB_ROOT", "127.0.0.1:1")
        .env("REVERB_JOB_ID", "x")
        .env_remove("REVERB_JOB_TOKEN")
        .output()
        .expect("reverb run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("REVERB_JOB_TOKEN must be set"), "{err}");

    let out = Command::new(BIN)
        .args(["run", "-n", "4", "--local-ranks", "3-9", "--", "true"])
        .env("REVERB_ROOT", "127.0.0.1:1")
        .env("REVERB_JOB_ID", "x")
        .env("REVERB_JOB_TOKEN", "t")
        .output()
        .expect("reverb run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("not inside the job"), "{err}");
}
