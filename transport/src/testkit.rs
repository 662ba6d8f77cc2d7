//! Test support for every crate's multi-process tests: a test re-executes its own test binary
//! once per rank (real OS processes), wired together by a real bootstrap server, and checks how
//! each rank ended. Test code: failures panic, which is how a test fails.

#![doc(hidden)]

mod hosts;

use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::bootstrap::{BootServer, TcpBootstrap};
use crate::loopback::InProcBootstrap;
use crate::{Bootstrap, JobInfo, Provider, ProviderKind, TransportConfig};

const CHILD_VAR: &str = "REVERB_TEST_CHILD";

/// The bound of one wait inside a test.
pub const WAIT: Duration = Duration::from_secs(30);

/// Scale for the tests' time bounds: `REVERB_TEST_TIME_SCALE` (a whole number, default 1), set
/// where everything runs slower (the emulated rxe VM). Bad values fall back to 1: test code.
pub fn time_scale() -> u32 {
    std::env::var("REVERB_TEST_TIME_SCALE")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|&s| s > 0)
        .unwrap_or(1)
}

/// `bound` times [`time_scale`].
pub fn scaled(bound: Duration) -> Duration {
    bound * time_scale()
}

/// How to launch a multi-process test.
#[derive(Debug, Clone)]
pub struct Job {
    pub ranks: u32,
    /// Ranks per simulated node, in blocks: rank r is on node r / ranks_per_node.
    pub ranks_per_node: u32,
    /// Extra environment for every rank.
    pub env: Vec<(String, String)>,
    /// The test is `#[ignore]`d, so the ranks must run ignored tests.
    pub ignored: bool,
    /// The whole job is killed (and the test fails) after this (already scaled by
    /// [`time_scale`] in [`Job::new`]).
    pub timeout: Duration,
    /// Node respawns allowed, as `reverb run --respawn`: a rank killed by a signal fails its
    /// node; the node's other ranks are SIGKILLed, the boot server is told, and the node's
    /// ranks start again at incarnation + 1.
    pub respawn: u32,
}

impl Job {
    /// `ranks` processes, one per simulated node.
    pub fn new(ranks: u32) -> Job {
        Job {
            ranks,
            ranks_per_node: 1,
            env: Vec::new(),
            ignored: false,
            timeout: scaled(Duration::from_secs(120)),
            respawn: 0,
        }
    }

    pub fn env(mut self, env: &[(&str, &str)]) -> Job {
        self.env.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        self
    }
}

/// How a rank process ended.
#[derive(Debug)]
pub struct RankExit {
    pub rank: u32,
    /// The incarnation that ended last; the output of earlier ones comes first in the streams.
    pub incarnation: u32,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl RankExit {
    /// Both streams, for failure messages.
    pub fn output(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// Whether this process is a rank of a test job.
pub fn is_child() -> bool {
    std::env::var_os(CHILD_VAR).is_some()
}

/// Inside a rank process: the job, its bootstrap and the opened provider. None in the parent.
pub fn child() -> Option<(JobInfo, TcpBootstrap, Box<dyn Provider>)> {
    if !is_child() {
        return None;
    }
    let mut boot = TcpBootstrap::connect_from_env().expect("bootstrap");
    let config = TransportConfig::from_env().expect("config");
    let provider = crate::open(&config, &mut boot).expect("open provider");
    Some((boot.job().clone(), boot, provider))
}

/// The job id a test's ranks use (it names their shared-memory segments); a module path's
/// colons become dots (the bootstrap refuses colons).
pub fn job_id(test: &str) -> String {
    format!("t{}{}", std::process::id(), test.replace('_', "").replace("::", "."))
}

/// Runs `test` as `job.ranks` processes and returns how each ended; kills all on timeout.
/// With `REVERB_TEST_HOSTS` set the ranks run on those simulated hosts (`testkit/hosts.rs`).
pub fn run_job(test: &str, job: &Job) -> Vec<RankExit> {
    let ranks = job.ranks;
    let per_node = job.ranks_per_node.max(1);
    let token = format!("token-{}-{test}", std::process::id());
    let placement = hosts::Placement::from_env();
    let server = BootServer::start(placement.boot_bind(), ranks, &token).expect("boot server");
    let root = placement.root(server.local_addr());
    let exe = std::env::current_exe().expect("current exe");
    let mut args = vec![test, "--exact", "--nocapture", "--test-threads=1"];
    if job.ignored {
        args.push("--ignored");
    }
    let spawn = |rank: u32, incarnation: u32| -> Child {
        let child = placement
            .command(&exe, rank, ranks)
            .args(&args)
            .env(CHILD_VAR, "1")
            .env("REVERB_RANK", rank.to_string())
            .env("REVERB_SIZE", ranks.to_string())
            .env("REVERB_NODE", (rank / per_node).to_string())
            .env("REVERB_LOCAL_RANK", (rank % per_node).to_string())
            .env("REVERB_RANKS_PER_NODE", per_node.to_string())
            .env("REVERB_JOB_ID", job_id(test))
            .env("REVERB_INCARNATION", incarnation.to_string())
            .env("REVERB_ROOT", &root)
            .env("REVERB_JOB_TOKEN", &token)
            .env("REVERB_BOOT_SERVER", "external")
            .envs(job.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn rank");
        placement.spawned(&child, &exe);
        child
    };
    let mut children: Vec<Child> = (0..ranks).map(|rank| spawn(rank, 0)).collect();
    let mut incarnations = vec![0u32; ranks as usize];
    // Output of incarnations that were replaced, per rank.
    let mut earlier = vec![(String::new(), String::new()); ranks as usize];
    let mut respawns = 0;
    let deadline = Instant::now() + job.timeout;
    let mut statuses = vec![None; children.len()];
    while statuses.iter().any(Option::is_none) {
        for i in 0..children.len() {
            if statuses[i].is_some() {
                continue;
            }
            statuses[i] = children[i].try_wait().expect("wait");
            let signalled = statuses[i].is_some_and(|s| s.signal().is_some());
            if !(signalled && respawns < job.respawn) {
                continue;
            }
            // The node failed: kill and reap its other ranks, then start them all again.
            respawns += 1;
            let node = i as u32 / per_node;
            let members = node * per_node..((node + 1) * per_node).min(ranks);
            for r in members.clone() {
                let r = r as usize;
                if statuses[r].is_some_and(|s| s.success()) {
                    continue; // done before the failure: stays done (as the launcher does)
                }
                let _ = children[r].kill();
                let _ = children[r].wait();
                server.mark_failed(r as u32, incarnations[r], "node failed (test)").expect("mark_failed");
                incarnations[r] += 1;
                let old = std::mem::replace(&mut children[r], spawn(r as u32, incarnations[r]));
                let out = old.wait_with_output().expect("output");
                earlier[r].0.push_str(&String::from_utf8_lossy(&out.stdout));
                earlier[r].1.push_str(&String::from_utf8_lossy(&out.stderr));
                statuses[r] = None;
            }
        }
        if Instant::now() > deadline {
            for c in children.iter_mut() {
                let _ = c.kill();
            }
            panic!("test job {test} hung: killed after {:?}", job.timeout);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    children
        .into_iter()
        .zip(statuses)
        .zip(earlier)
        .enumerate()
        .map(|(rank, ((child, status), (out0, err0)))| {
            let out = child.wait_with_output().expect("output");
            let status = status.expect("status");
            RankExit {
                rank: rank as u32,
                incarnation: incarnations[rank],
                code: status.code(),
                signal: status.signal(),
                stdout: out0 + &String::from_utf8_lossy(&out.stdout),
                stderr: err0 + &String::from_utf8_lossy(&out.stderr),
            }
        })
        .collect()
}

/// Runs the job and asserts every rank exited 0 having run its one test (a rank that matched
/// no test would exit 0 having done nothing). Returns each rank's stdout.
/// Every failed rank is reported, not only the first: a rank failing after its peer often
/// holds the cause.
pub fn run_job_ok(test: &str, job: &Job) -> Vec<String> {
    let exits = run_job(test, job);
    let failed: Vec<String> = exits
        .iter()
        .filter(|exit| !(exit.code == Some(0) && exit.stdout.contains("1 passed")))
        .map(|exit| {
            format!(
                "rank {} failed ({:?}, signal {:?}):\n{}",
                exit.rank,
                exit.code,
                exit.signal,
                exit.output()
            )
        })
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    exits.into_iter().map(|exit| exit.stdout).collect()
}

/// `ranks` processes, one per node, with extra environment; every rank must succeed.
pub fn run_ok(test: &str, ranks: u32, env: &[(&str, &str)]) {
    run_job_ok(test, &Job::new(ranks).env(env));
}

/// Runs `body` as `ranks` ranks of an in-process job on the loopback provider, one thread
/// each; the test fails if any rank panicked. The body is what a multi-process test's rank
/// runs, so one body can serve both harnesses.
pub fn run_threads<F>(test: &str, ranks: u32, body: F)
where
    F: Fn(&JobInfo, &mut dyn Bootstrap, &mut dyn Provider) + Sync,
{
    let config = TransportConfig { provider: ProviderKind::LOOPBACK, ..TransportConfig::default() };
    let boots = InProcBootstrap::job(&job_id(test), ranks);
    let body = &body;
    let failed: Vec<u32> = std::thread::scope(|scope| {
        let handles: Vec<_> = boots
            .into_iter()
            .map(|mut boot| {
                let config = config.clone();
                scope.spawn(move || {
                    let mut provider = crate::open(&config, &mut boot).expect("open loopback");
                    let job = boot.job().clone();
                    body(&job, &mut boot, provider.as_mut());
                })
            })
            .collect();
        handles.into_iter().zip(0..).filter_map(|(h, rank)| h.join().is_err().then_some(rank)).collect()
    });
    assert!(failed.is_empty(), "{test}: loopback ranks {failed:?} panicked");
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

/// The provider a suite runs on (`REVERB_PROVIDER`, default auto).
pub fn provider_name() -> String {
    std::env::var("REVERB_PROVIDER").unwrap_or_else(|_| "auto".into())
}

/// The provider that carries the suite's traffic: `auto` on one host is shm (it opens
/// nothing else), so shm's own tests run there too.
pub fn carrier_name() -> String {
    match provider_name().as_str() {
        "auto" if hosts::count_from_env() <= 1 => "shm".into(),
        other => other.into(),
    }
}

/// Whether ranks `a` and `b` of a `ranks`-rank job run on different simulated hosts
/// (`REVERB_TEST_HOSTS`) or host names (`REVERB_TEST_HOST_NAMES`); false without them. The same answer in the test and in its ranks.
pub fn on_different_hosts(a: u32, b: u32, ranks: u32) -> bool {
    let hosts = hosts::count_from_env();
    hosts > 1 && hosts::block(a, ranks, hosts) != hosts::block(b, ranks, hosts)
}

/// Skips (saying why) a test that only means something on `provider`.
/// Whether the current provider is `provider`, in which case it says the test was skipped and why.
pub fn skipped_on(provider: &str, why: &str) -> bool {
    if provider_name() != provider && carrier_name() != provider {
        return false;
    }
    eprintln!("skipped on {provider}: {why}");
    true
}

/// Whether the current provider is `provider`; otherwise says the test was skipped and why.
pub fn only_on(provider: &str, why: &str) -> bool {
    if provider_name() == provider || carrier_name() == provider {
        return true;
    }
    eprintln!("skipped: {why} (needs the {provider} provider, running {})", provider_name());
    false
}
