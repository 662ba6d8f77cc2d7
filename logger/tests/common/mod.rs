//! Multi-process test harness (the transport suite's pattern): a test re-executes its own
//! binary once per rank, wired by a real bootstrap server, and checks every rank's exit.

#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reverb_transport::bootstrap::{BootServer, TcpBootstrap};
use reverb_transport::{Bootstrap, JobInfo, Provider, TransportConfig};

const CHILD_VAR: &str = "REVERB_TEST_CHILD";

/// Inside a rank process: the job, its bootstrap and the opened provider. None in the parent.
pub fn child() -> Option<(JobInfo, TcpBootstrap, Box<dyn Provider>)> {
    std::env::var_os(CHILD_VAR)?;
    let mut boot = TcpBootstrap::connect_from_env().expect("bootstrap");
    let config = TransportConfig::from_env().expect("config");
    let provider = reverb_transport::open(&config, &mut boot).expect("open provider");
    Some((boot.job().clone(), boot, provider))
}

/// Runs `test` as `ranks` processes (one per simulated node) and asserts every rank exited 0.
pub fn run_ok(test: &str, ranks: u32) {
    run_job(test, &Job { ranks, ranks_per_node: 1, env: Vec::new(), ignored: false });
}

/// How to launch a multi-process test.
pub struct Job {
    pub ranks: u32,
    /// Ranks per simulated node, in blocks: rank r is on node r / ranks_per_node.
    pub ranks_per_node: u32,
    /// Extra environment for every rank.
    pub env: Vec<(String, String)>,
    /// The test is `#[ignore]`d, so ranks must run ignored tests.
    pub ignored: bool,
}

/// Runs `test` as `job.ranks` processes, asserts every rank exited 0 and returns each rank's
/// stdout.
pub fn run_job(test: &str, job: &Job) -> Vec<String> {
    let ranks = job.ranks;
    let per_node = job.ranks_per_node.max(1);
    let token = format!("token-{}-{test}", std::process::id());
    let server = BootServer::start("127.0.0.1:0", ranks, &token).expect("boot server");
    let root = server.local_addr().to_string();
    let exe = std::env::current_exe().expect("current exe");
    let mut args = vec![test, "--exact", "--nocapture", "--test-threads=1"];
    if job.ignored {
        args.push("--ignored");
    }
    let mut children: Vec<Child> = (0..ranks)
        .map(|rank| {
            Command::new(&exe)
                .args(&args)
                .env(CHILD_VAR, "1")
                .env("REVERB_RANK", rank.to_string())
                .env("REVERB_SIZE", ranks.to_string())
                .env("REVERB_NODE", (rank / per_node).to_string())
                .env("REVERB_LOCAL_RANK", (rank % per_node).to_string())
                .env("REVERB_RANKS_PER_NODE", per_node.to_string())
                .env("REVERB_JOB_ID", format!("l{}{}", std::process::id(), test.replace('_', "")))
                .env("REVERB_INCARNATION", "0")
                .env("REVERB_ROOT", &root)
                .env("REVERB_JOB_TOKEN", &token)
                .env("REVERB_BOOT_SERVER", "external")
                .envs(job.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn rank")
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut done = vec![false; children.len()];
    while done.iter().any(|d| !d) {
        for (i, child) in children.iter_mut().enumerate() {
            done[i] = done[i] || child.try_wait().expect("wait").is_some();
        }
        if Instant::now() > deadline {
            for c in children.iter_mut() {
                let _ = c.kill();
            }
            panic!("test job {test} hung: killed");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut outputs = Vec::new();
    for (rank, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().expect("output");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        // "1 passed" guards against a rank that matched no test and exited 0 having done nothing.
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "rank {rank} failed ({}):\n{}{}",
            out.status,
            stdout,
            String::from_utf8_lossy(&out.stderr)
        );
        outputs.push(stdout);
    }
    outputs
}

/// A deterministic byte pattern, distinct per seed.
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
