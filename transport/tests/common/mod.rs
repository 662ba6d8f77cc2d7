//! Multi-process test harness: a test re-executes its own test binary once per rank (real OS
//! processes), wired together by a real bootstrap server, and checks every rank's exit.

#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reverb_transport::bootstrap::{BootServer, TcpBootstrap};
use reverb_transport::{Bootstrap, JobInfo, Provider, TransportConfig};

const CHILD_VAR: &str = "REVERB_TEST_CHILD";

/// How a rank process ended.
#[derive(Debug)]
pub struct RankExit {
    pub rank: u32,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub output: String,
}

/// Inside a rank process: the job, its bootstrap and the opened provider. None in the parent.
pub fn child() -> Option<(JobInfo, TcpBootstrap, Box<dyn Provider>)> {
    std::env::var_os(CHILD_VAR)?;
    let mut boot = TcpBootstrap::connect_from_env().expect("bootstrap");
    let config = TransportConfig::from_env().expect("config");
    let provider = reverb_transport::open(&config, &mut boot).expect("open provider");
    Some((boot.job().clone(), boot, provider))
}

/// Whether this process is a rank of a test job.
pub fn is_child() -> bool {
    std::env::var_os(CHILD_VAR).is_some()
}

pub fn job_id(test: &str) -> String {
    format!("t{}{}", std::process::id(), test.replace('_', ""))
}

/// Runs `test` as `ranks` processes and returns how each ended (killing all on timeout).
pub fn run_ranks(test: &str, ranks: u32, env: &[(&str, &str)], timeout: Duration) -> Vec<RankExit> {
    let token = format!("token-{}-{test}", std::process::id());
    let server = BootServer::start("127.0.0.1:0", ranks, &token).expect("boot server");
    let root = server.local_addr().to_string();
    let exe = std::env::current_exe().expect("current exe");
    let mut children: Vec<Child> = (0..ranks)
        .map(|rank| {
            let mut cmd = Command::new(&exe);
            cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
                .env(CHILD_VAR, "1")
                .env("REVERB_RANK", rank.to_string())
                .env("REVERB_SIZE", ranks.to_string())
                .env("REVERB_NODE", rank.to_string())
                .env("REVERB_LOCAL_RANK", "0")
                .env("REVERB_RANKS_PER_NODE", "1")
                .env("REVERB_JOB_ID", job_id(test))
                .env("REVERB_INCARNATION", "0")
                .env("REVERB_ROOT", &root)
                .env("REVERB_JOB_TOKEN", &token)
                .env("REVERB_BOOT_SERVER", "external")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            for (k, v) in env {
                cmd.env(k, v);
            }
            cmd.spawn().expect("spawn rank")
        })
        .collect();
    let deadline = Instant::now() + timeout;
    let mut statuses = vec![None; children.len()];
    while statuses.iter().any(Option::is_none) {
        for (i, child) in children.iter_mut().enumerate() {
            if statuses[i].is_none() {
                statuses[i] = child.try_wait().expect("wait");
            }
        }
        if Instant::now() > deadline {
            for c in children.iter_mut() {
                let _ = c.kill();
            }
            panic!("test job {test} hung: killed after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    use std::os::unix::process::ExitStatusExt;
    children
        .into_iter()
        .zip(statuses)
        .enumerate()
        .map(|(rank, (child, status))| {
            let out = child.wait_with_output().expect("output");
            let status = status.expect("status");
            RankExit {
                rank: rank as u32,
                code: status.code(),
                signal: status.signal(),
                output: format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                ),
            }
        })
        .collect()
}

/// Runs the job and asserts every rank exited 0.
pub fn run_ok(test: &str, ranks: u32, env: &[(&str, &str)]) {
    for exit in run_ranks(test, ranks, env, Duration::from_secs(120)) {
        assert_eq!(exit.code, Some(0), "rank {} failed:\n{}", exit.rank, exit.output);
    }
}

/// A deterministic byte pattern for size `len`, distinct per (seed, offset).
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

pub const WAIT: Duration = Duration::from_secs(30);

/// The provider the suite runs on (`REVERB_PROVIDER`, default shm).
pub fn provider_name() -> String {
    std::env::var("REVERB_PROVIDER").unwrap_or_else(|_| "shm".into())
}

/// Skips (with the reason) a test that only means something on `provider`.
pub fn only_on(provider: &str, why: &str) -> bool {
    if provider_name() == provider {
        return true;
    }
    eprintln!("skipped: {why} (needs the {provider} provider, running {})", provider_name());
    false
}
