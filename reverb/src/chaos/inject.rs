//! One trial across hosts: the job, its host fault injected from outside while it runs (the
//! host-kill or net-cut command after a delay, a second kill once the launcher says the first
//! host's ranks start again on a spare), and the hosts made anew afterwards.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use super::classify::{classify, Outcome};
use super::hosts::{host_plan, HostSet};
use super::phase::Phase;
use super::plan::{pick_host_app, Fault, RANKS_PER_NODE};
use super::size::{pick_size, MsgSize};
use super::trial::{job_command, recovery_of, Baselines};
use super::{ChaosArgs, TrialResult};
use crate::job::{run_job, JobSpec};

/// The line of `reverb run --hosts` when a lost host's ranks start again on a spare.
const TAKEOVER: &str = "start again on spare";
/// Bound on one host command (`ci/hosts.sh kill|up|cut` take well under a second).
const COMMAND_BOUND: Duration = Duration::from_secs(30);

/// Longer runs than on one host: a few seconds each, so a host lost lands mid-run; the
/// app's main messages `size` big.
pub(super) fn host_app_args(app: &str, size: &MsgSize) -> Vec<String> {
    let a: &[&str] = match app {
        "stencil" => &["--iters", "4000", "--size", "64", "--ckpt-every", "400"],
        "master-worker" => &["--iters", "150", "--size", "20000", "--ckpt-every", "25"],
        _ => &["--iters", "1500", "--size", "256", "--ckpt-every", "150"],
    };
    let mut a: Vec<String> = a.iter().map(|s| s.to_string()).collect();
    a.extend(size.app_args());
    a
}

/// A host trial's bound, in seconds: `timeout`, or more on a slow or loaded machine, where a
/// recovery over tcp would outlast it without being hung. `failure_free_ms` is the causal
/// baseline's; `protocol` scales it to the trial's own failure-free time.
fn host_trial_bound(timeout: u64, failure_free_ms: u64, protocol: &str) -> u64 {
    let own_ms = failure_free_ms * protocol_slowdown(protocol);
    timeout.max(HOST_SLOWDOWN_BOUND * own_ms / 1000 + 30)
}

/// How many times the causal failure-free run a protocol's takes across hosts, rounded up.
/// Measured (8 ranks on 4 namespace hosts, auto, release build): pessimistic-rb sends every
/// payload to its log buddy before delivering it, 2.7x (stencil) to 4.8x (master-worker);
/// pessimistic-sb 1.0x to 2.3x; without this an rb trial's recovery on a loaded machine
/// outlasted a bound made from the causal run and counted as a hang.
fn protocol_slowdown(protocol: &str) -> u64 {
    match protocol {
        "pessimistic-rb" => 5,
        "pessimistic-sb" => 3,
        _ => 1,
    }
}

/// How many failure-free runs' time a host trial may take before it counts as hung.
const HOST_SLOWDOWN_BOUND: u64 = 4;

/// A host trial's environment for its message size: the host apps' checkpoint intervals are
/// long, so padded messages outgrow the default log ring within one (`log ring full`).
pub(super) fn host_size_env(size: &MsgSize) -> Vec<(String, String)> {
    let mut env = size.env();
    if size.bytes > 0 {
        env.retain(|(k, _)| k != "REVERB_LOG_RING_BYTES");
        env.push(("REVERB_LOG_RING_BYTES".to_string(), host_ring_bytes(size.bytes).to_string()));
    }
    env
}

/// Log ring bytes of a host trial whose messages are `bytes` big: the busiest node's log of
/// one checkpoint interval, rounded up to a power of two. That is master-worker's master node:
/// 25 rounds of 35 results, with its worker's tasks about 1,000 messages (98 KiB fragmented
/// ones outgrew a 64 MiB ring). No more: each rank holds its ring and its buddy's copy, in
/// the 2 GiB /dev/shm of a namespace host (ci/hosts.sh).
fn host_ring_bytes(bytes: usize) -> usize {
    (bytes * HOST_INTERVAL_MESSAGES).next_power_of_two().max(MIN_HOST_SIZED_RING_BYTES)
}

/// Messages the busiest node logs in one checkpoint interval of a host app.
const HOST_INTERVAL_MESSAGES: usize = 1024;
/// The least log ring of a host trial with padded messages.
const MIN_HOST_SIZED_RING_BYTES: usize = 64 << 20;

/// A job across hosts that may lose one: logs per node, checkpoints on buddies.
pub(super) fn host_env(protocol: &str) -> Vec<(String, String)> {
    [
        ("REVERB_LOG", protocol),
        ("REVERB_LOG_UNIT", "node"),
        ("REVERB_CKPT", "buddy"),
        // Unsurvivable cases end within this bound instead of the 30 s default.
        ("REVERB_REJOIN_TIMEOUT_MS", "15000"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// The commands that take a host down, make it again and cut its wire; each gets the host's
/// name appended.
pub(super) struct HostCommands {
    kill: Vec<String>,
    up: Vec<String>,
    cut: Vec<String>,
}

impl HostCommands {
    pub(super) fn new(args: &ChaosArgs) -> Result<HostCommands> {
        let words = |opt: &str, cmd: &str| -> Result<Vec<String>> {
            let w: Vec<String> = cmd.split_whitespace().map(String::from).collect();
            if w.is_empty() {
                bail!("{opt} is empty");
            }
            Ok(w)
        };
        Ok(HostCommands {
            kill: words("--host-kill-cmd", &args.host_kill_cmd)?,
            up: words("--host-up-cmd", &args.host_up_cmd)?,
            cut: words("--net-cut-cmd", &args.net_cut_cmd)?,
        })
    }

    /// Runs `cmd HOST`, bounded.
    fn run(cmd: &[String], host: &str) -> Result<()> {
        let line = format!("{} {host}", cmd.join(" "));
        let mut child = Command::new(&cmd[0])
            .args(&cmd[1..])
            .arg(host)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .with_context(|| format!("starting `{line}`"))?;
        let until = Instant::now() + COMMAND_BOUND;
        loop {
            if let Some(status) = child.try_wait().with_context(|| format!("waiting for `{line}`"))? {
                if !status.success() {
                    bail!("`{line}` failed ({status})");
                }
                return Ok(());
            }
            if Instant::now() >= until {
                // Best effort: it is reported either way.
                let _ = child.kill();
                let _ = child.wait();
                bail!("`{line}` still running after {} s", COMMAND_BOUND.as_secs());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Takes `host` down if it is up (killing an absent host is harmless) and makes it again:
    /// whatever a trial left there dies, and the next trial finds it fresh.
    fn renew(&self, host: &str) -> Result<()> {
        Self::run(&self.kill, host)?;
        Self::run(&self.up, host)
    }
}

/// Sleeps until `at` (true) or until the job ended (false).
fn wait_until(done: &AtomicBool, at: Instant) -> bool {
    loop {
        if done.load(Ordering::Acquire) {
            return false;
        }
        if Instant::now() >= at {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Waits until the job's log says a lost host's ranks start again on a spare (true) or the
/// job ended (false).
fn wait_for_takeover(done: &AtomicBool, log: &Path) -> bool {
    while !done.load(Ordering::Acquire) {
        if std::fs::read_to_string(log).is_ok_and(|l| l.contains(TAKEOVER)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Injects `fault` into the job started at `started` (until `done`), recording in `touched`
/// every host it took down or cut.
fn inject(
    fault: &Fault,
    cmds: &HostCommands,
    log: &Path,
    done: &AtomicBool,
    started: Instant,
    touched: &mut Vec<String>,
) -> Result<()> {
    let at = |ms: u64| started + Duration::from_millis(ms);
    match fault {
        Fault::Host { host, at_ms } | Fault::NetCut { host, at_ms } if wait_until(done, at(*at_ms)) => {
            touched.push(host.clone());
            let cmd = if matches!(fault, Fault::Host { .. }) { &cmds.kill } else { &cmds.cut };
            HostCommands::run(cmd, host)?;
        }
        Fault::HostInRecovery { first, at_ms, second, after_ms, .. } => {
            if !wait_until(done, at(*at_ms)) {
                return Ok(());
            }
            touched.push(first.clone());
            HostCommands::run(&cmds.kill, first)?;
            if wait_for_takeover(done, log)
                && wait_until(done, Instant::now() + Duration::from_millis(*after_ms))
            {
                touched.push(second.clone());
                HostCommands::run(&cmds.kill, second)?;
            }
        }
        // The agent kills itself (`REVERB_FAULT_AGENT`); the others are not host faults.
        _ => {}
    }
    Ok(())
}

/// Runs trial `trial` across the hosts of `set`.
pub(super) fn run_host_trial(
    args: &ChaosArgs,
    seed: u64,
    trial: u64,
    baselines: &Baselines,
    set: &HostSet,
    dir: &Path,
) -> Result<TrialResult> {
    let cmds = HostCommands::new(args)?;
    let size = pick_size(seed, trial, &baselines.thresholds);
    let base = baselines.get(pick_host_app(seed, trial), &size)?;
    let plan = host_plan(seed, trial, set, base.wall_ms);
    let mut env = host_env(plan.protocol);
    env.extend(host_size_env(&size));
    env.extend(plan.fault.env());
    let net_cut = matches!(plan.fault, Fault::NetCut { .. });
    let spec = JobSpec {
        provider: args.provider_or("auto"),
        ranks: set.ranks(),
        ranks_per_node: RANKS_PER_NODE,
        respawn: plan.fault.respawns(),
        timeout_s: host_trial_bound(
            if net_cut { args.net_cut_timeout } else { args.timeout },
            base.wall_ms,
            plan.protocol,
        ),
        app: plan.app.to_string(),
        app_args: host_app_args(plan.app, &size),
        env,
        hosts: Some(set.hosts_arg()),
        spares: set.spares.clone(),
        redundancy: None,
        objects: None,
    };
    let job = job_command(&spec);
    let out_dir = dir.join(format!("trial-{trial}"));
    let done = AtomicBool::new(false);
    let (out, injected) = std::thread::scope(|s| {
        let injector = s.spawn(|| {
            let mut touched = Vec::new();
            let log = out_dir.join("job.log");
            let r = inject(&plan.fault, &cmds, &log, &done, Instant::now(), &mut touched);
            (touched, r)
        });
        let out = run_job(&spec, &out_dir, Duration::from_secs(30));
        done.store(true, Ordering::Release);
        (out, injector.join())
    });
    let (touched, injected) = injected.map_err(|_| anyhow!("trial {trial}: the fault injector panicked"))?;
    let out = out?;
    // A host the injector took down or cut is a fault that fired, whether or not the job
    // lived long enough to say so.
    let (outcome, fired, why) = classify(&plan, &base, &out, !touched.is_empty());
    // Every host the fault touched, every spare (ranks may have moved there) and, after a
    // hang or a failure, every host: made anew, so nothing left over reaches the next trial.
    let clean = matches!(outcome, Outcome::Survived | Outcome::ReportedUnrecoverable);
    let mut renew: Vec<&String> = touched.iter().chain(&set.spares).collect();
    if !clean {
        renew.extend(set.hosts.iter().map(|(h, _)| h));
    }
    renew.sort();
    renew.dedup();
    for host in renew {
        cmds.renew(host).with_context(|| format!("trial {trial}: bringing host {host} back"))?;
    }
    injected.with_context(|| format!("trial {trial}: injecting {}", plan.fault.describe()))?;
    let recovery_ms = if outcome == Outcome::Survived { recovery_of(&out) } else { None };
    Ok(TrialResult {
        plan,
        size,
        phase: Phase::Timed,
        outcome,
        fired,
        recovery_ms,
        wall_s: out.wall.as_secs_f64(),
        why,
        dir: out.dir,
        job,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_ring_holds_an_interval_of_the_largest_messages() {
        assert_eq!(host_ring_bytes(1000), 64 << 20);
        assert_eq!(host_ring_bytes(30_000), 64 << 20);
        assert_eq!(host_ring_bytes(98_303), 128 << 20);
    }

    #[test]
    fn a_host_trial_s_bound_grows_with_a_slow_failure_free_run() {
        assert_eq!(host_trial_bound(90, 10_000, "causal"), 90);
        assert_eq!(host_trial_bound(90, 51_000, "causal"), 234);
        assert_eq!(host_trial_bound(90, 8_000, "pessimistic-rb"), 190);
    }
}
