//! `reverb chaos --trials N`: the fault-injection campaign. Each trial is a real
//! `reverb run --respawn` job of one app under one logging protocol with one fault picked at
//! random (seeded: `--seed S --trial K` re-runs trial K alone; the fault's send count is drawn
//! within the app's failure-free send counts, which vary from run to run for master-worker, so
//! there the exact fault is the `REVERB_FAULT` the trial line prints), injected with SIGKILL through
//! `REVERB_FAULT` / `REVERB_FAULT_CKPT` / `REVERB_FAULT_INIT` (inside `Runtime::init`'s
//! collectives, sometimes with a survivor that joins the collective late and so misses the
//! abort) / `REVERB_FAULT_GC` (at the log GC after a checkpoint, sometimes with a survivor that
//! joins the GC late). Its checksum is compared with the app's failure-free
//! checksum (one failure-free run per app, cached for the campaign).
//!
//! Outcomes: survived (exit 0, identical checksum), correctly reported unrecoverable (non-zero
//! exit with a clear report in a case the design does not cover: logging off, and two nodes at
//! once today), wrong answer (exit 0, other checksum), hang (killed by
//! the per-trial timeout), other failure (anything else: a bug to report).
//!
//! With `--hosts ... --spares ...` each trial is a job across hosts instead, with a host fault
//! (a host lost, its wire cut, its agent killed, a second host lost during the recovery):
//! see [`hosts`].

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::{bail, Context, Result};
// A fault variable left in the campaign's own environment would reach every trial.
use reverb_runtime::fault::FAULT_VARS;

mod classify;
pub mod hosts;
mod inject;
mod phase;
mod plan;
mod report;
mod size;
mod trial;

pub use classify::Outcome;
use hosts::HostSet;
use inject::run_host_trial;
pub use phase::{Phase, PHASES};
pub use plan::{plan, Baseline, Fault, Plan, FAULT_KINDS};
use plan::{AGENT_FAULT_VAR, RANKS, RANKS_PER_NODE};
use report::Summary;
pub use size::{pick_size, MsgSize, SizeClass, Thresholds, SIZE_CLASSES};
use trial::{run_trial, Baselines};

#[derive(clap::Args, Debug)]
pub struct ChaosArgs {
    /// Number of trials, 1..=1000000.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub trials: u64,
    /// Campaign seed (random when absent; printed either way).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Run only this trial of the campaign (0-based), e.g. to reproduce a failure. The same
    /// app, protocol and fault kind; for master-worker, whose failure-free send counts vary,
    /// the kill point may differ: the trial line prints the exact `REVERB_FAULT`.
    #[arg(long)]
    pub trial: Option<u64>,
    /// Start at this trial (0-based): `--first-trial 200 --trials 100` runs trials 200-299 of
    /// the seed's campaign, so a long campaign runs in slices whose reports add up.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1_000_000_000), conflicts_with = "trial")]
    pub first_trial: u64,
    /// Trials run at once, 1..=64 (1 on a small machine).
    #[arg(long, default_value_t = 1, value_parser = crate::usage::int::<usize>(1, 64))]
    pub jobs: usize,
    /// Bound on each trial's job, in seconds (1..=86400): a job still running then is a hang.
    /// Across hosts, at least four times the app's failure-free run under the trial's protocol
    /// and 30 s.
    #[arg(long, default_value_t = 90, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub timeout: u64,
    /// Transport provider (default shm on one host, auto across hosts).
    #[arg(long)]
    pub provider: Option<String>,
    /// Print the report as JSON on stdout instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Keep every trial's directory (failed trials' directories are always kept).
    #[arg(long)]
    pub keep: bool,
    /// Run each trial across these hosts, `a:2,b:2,...` (started over REVERB_RSH; the first
    /// serves the rendezvous and is never lost), with the host fault kinds.
    #[arg(long, value_name = "HOST:N,...")]
    pub hosts: Option<String>,
    /// With --hosts: idle hosts that take over a lost host's ranks (two for host-in-recovery).
    #[arg(long, value_name = "HOST,...", value_delimiter = ',', requires = "hosts")]
    pub spares: Vec<String>,
    /// With --hosts: the fault kinds to cycle through (host, net-cut, agent,
    /// host-in-recovery; all when absent).
    #[arg(long, value_name = "KIND,...", value_delimiter = ',', requires = "hosts")]
    pub kinds: Vec<String>,
    /// With --hosts: takes a host down (the host's name appended).
    #[arg(long, default_value = "bash ci/hosts.sh kill")]
    pub host_kill_cmd: String,
    /// With --hosts: makes a host taken down again (the host's name appended).
    #[arg(long, default_value = "bash ci/hosts.sh up")]
    pub host_up_cmd: String,
    /// With --hosts: cuts a host's network, its processes left running (the name appended).
    #[arg(long, default_value = "bash ci/hosts.sh cut")]
    pub net_cut_cmd: String,
    /// With --hosts: bound on a net-cut trial's job, in seconds (a cut host is only seen lost
    /// by heartbeats; until then the job waits); grown as `--timeout` is on a slow machine.
    #[arg(long, default_value_t = 90, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub net_cut_timeout: u64,
}

impl ChaosArgs {
    fn provider_or(&self, default: &str) -> String {
        self.provider.clone().unwrap_or_else(|| default.to_string())
    }

    /// The options a re-run of one trial needs besides `--seed` and `--trial`.
    fn rerun_options(&self) -> String {
        let mut o = String::new();
        if let Some(p) = &self.provider {
            o += &format!(" --provider {p}");
        }
        if self.timeout != 90 {
            o += &format!(" --timeout {}", self.timeout);
        }
        let Some(hosts) = &self.hosts else { return o };
        o += &format!(" --hosts {hosts} --spares {}", self.spares.join(","));
        if !self.kinds.is_empty() {
            o += &format!(" --kinds {}", self.kinds.join(","));
        }
        o
    }

    /// The command that re-runs trial `trial` alone: the same plan needs the same
    /// thresholds, so the ones set in the campaign's environment come first.
    fn rerun_command(&self, seed: u64, trial: u64) -> String {
        let env: String = THRESHOLD_VARS
            .iter()
            .filter_map(|v| std::env::var(v).ok().map(|val| format!("{v}={val} ")))
            .collect();
        format!("{env}reverb chaos --seed {seed} --trial {trial}{}", self.rerun_options())
    }
}

/// The variables the trials' message sizes are drawn against ([`Thresholds`]).
const THRESHOLD_VARS: [&str; 2] = ["REVERB_RNDV_THRESH", "REVERB_LOG_MAX_MESSAGE"];

struct TrialResult {
    plan: Plan,
    /// The size of the app's main messages.
    size: MsgSize,
    /// Where in the run the fault strikes.
    phase: Phase,
    outcome: Outcome,
    /// Whether a rank actually died (the fault's point may lie past the run's end).
    fired: bool,
    /// Longest survivor recovery of the trial (detection to resume), from the rank reports.
    recovery_ms: Option<f64>,
    wall_s: f64,
    why: String,
    dir: PathBuf,
    /// The trial's `reverb run` command line.
    job: String,
}

impl TrialResult {
    /// Survived, or reported unrecoverable where the design does not cover the failure.
    fn passed(&self) -> bool {
        matches!(self.outcome, Outcome::Survived | Outcome::ReportedUnrecoverable)
    }
}

/// Returns the exit code: 0 when no trial gave a wrong answer, hung or failed otherwise.
pub fn main(args: ChaosArgs) -> Result<i32> {
    let seed = campaign_seed(&args)?;
    let trials: Vec<u64> = match args.trial {
        Some(k) => vec![k],
        None => (args.first_trial..args.first_trial + args.trials).collect(),
    };
    let set = host_set(&args)?;
    let thresholds = Thresholds::from_env().context("the thresholds message sizes are drawn against")?;
    let dir = std::env::temp_dir().join(format!("reverb-chaos-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let (ranks, provider) = match &set {
        Some(set) => (set.ranks(), args.provider_or("auto")),
        None => (RANKS, args.provider_or("shm")),
    };
    let place = set.as_ref().map_or(String::new(), |s| {
        format!(" across {} (spares {}), kinds {}", s.hosts_arg(), s.spares.join(","), s.kinds.join(","))
    });
    eprintln!(
        "reverb chaos: seed {seed}, {} trial(s){}, {} at a time, {ranks} ranks on {} nodes{place}, provider {provider}, timeout {} s; work dir {}",
        trials.len(),
        match trials.first() {
            Some(&first) if first > 0 && args.trial.is_none() => format!(" from trial {first}"),
            _ => String::new(),
        },
        args.jobs,
        ranks / RANKS_PER_NODE,
        args.timeout,
        dir.display()
    );
    {
        eprintln!(
            "reverb chaos: message sizes against REVERB_RNDV_THRESH={} and REVERB_LOG_MAX_MESSAGE={} \
             (fragmented trials lower it to {})",
            thresholds.rndv,
            thresholds.max_message,
            thresholds.frag_limit()
        );
    }
    let started = std::time::Instant::now();
    let results = run_trials(&args, seed, &trials, &dir, set.as_ref(), thresholds)?;
    let summary = Summary::of(&results, started.elapsed().as_secs_f64());
    let rerun = |trial| args.rerun_command(seed, trial);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary.json(seed, &rerun, &results))?);
    } else {
        summary.print(seed, &rerun, &results);
    }
    if summary.failed == 0 && !args.keep {
        // Best effort: a leftover temp directory is harmless.
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        eprintln!("reverb chaos: work dir kept in {}", dir.display());
    }
    Ok(if summary.failed > 0 { 1 } else { 0 })
}

/// Checks the arguments and the environment; the campaign's seed (`--seed`, else the clock).
fn campaign_seed(args: &ChaosArgs) -> Result<u64> {
    if args.trials == 0 && args.trial.is_none() {
        bail!("--trials must be at least 1");
    }
    if args.jobs == 0 || args.timeout == 0 {
        bail!("--jobs and --timeout must be at least 1");
    }
    if let Some(var) = FAULT_VARS.iter().find(|v| matches!(reverb_transport::config::env_os(v), Ok(Some(_))))
    {
        bail!("{var} is set: the campaign injects its own faults, unset it first");
    }
    // Read directly: the agent's branch registers it (transport/src/config/registry.rs).
    if std::env::var_os(AGENT_FAULT_VAR).is_some() {
        bail!("{AGENT_FAULT_VAR} is set: the campaign injects its own faults, unset it first");
    }
    Ok(args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
            % 1_000_000
    }))
}

/// With `--hosts`: the checked host set (one trial at a time: the trials share the hosts, and
/// REVERB_RSH must reach them).
fn host_set(args: &ChaosArgs) -> Result<Option<HostSet>> {
    let Some(hosts) = &args.hosts else { return Ok(None) };
    if args.jobs != 1 {
        bail!("--hosts runs one trial at a time (the trials share the hosts): drop --jobs");
    }
    if args.net_cut_timeout == 0 {
        bail!("--net-cut-timeout must be at least 1");
    }
    if !matches!(reverb_transport::config::env_get("REVERB_RSH"), Ok(Some(_))) {
        bail!("--hosts: set REVERB_RSH to the remote shell that reaches the hosts (e.g. \"bash ci/hosts.sh exec\")");
    }
    HostSet::new(hosts, &args.spares, &args.kinds).map(Some)
}

/// Runs `trials`, `--jobs` at a time, each printed as it ends; the results in trial order.
/// A trial that could not be run at all stops the campaign with its error.
fn run_trials(
    args: &ChaosArgs,
    seed: u64,
    trials: &[u64],
    dir: &Path,
    set: Option<&HostSet>,
    thresholds: Thresholds,
) -> Result<Vec<TrialResult>> {
    let baselines = Baselines {
        args_provider: args.provider_or(if set.is_some() { "auto" } else { "shm" }),
        timeout: args.timeout,
        dir: dir.to_path_buf(),
        cache: Mutex::new(HashMap::new()),
        computing: Mutex::new(()),
        hosts: set.cloned(),
        thresholds,
    };
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<TrialResult>> = Mutex::new(Vec::new());
    let first_error: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    std::thread::scope(|s| {
        for _ in 0..args.jobs.min(trials.len()) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(&trial) = trials.get(i) else { break };
                if first_error.lock().unwrap_or_else(|e| e.into_inner()).is_some() {
                    break;
                }
                let result = match set {
                    Some(set) => run_host_trial(args, seed, trial, &baselines, set, dir),
                    None => run_trial(args, seed, trial, &baselines, dir),
                };
                match result {
                    Ok(r) => {
                        print_trial(&r, &args.rerun_command(seed, r.plan.trial), args.keep);
                        results.lock().unwrap_or_else(|e| e.into_inner()).push(r);
                    }
                    Err(e) => {
                        *first_error.lock().unwrap_or_else(|e| e.into_inner()) =
                            Some(e.context(format!("trial {trial}")));
                        break;
                    }
                }
            });
        }
    });
    if let Some(e) = first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        eprintln!("reverb chaos: work dir kept in {}", dir.display());
        return Err(e);
    }
    let mut results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    results.sort_by_key(|r| r.plan.trial);
    Ok(results)
}

/// One trial's line on stderr; a passed trial's directory is removed (unless `--keep`), a
/// failed one's is named with the commands that re-run it: the campaign's trial and its job.
fn print_trial(r: &TrialResult, rerun: &str, keep: bool) {
    let trial = r.plan.trial;
    let rerun = if r.passed() {
        if !keep {
            // Best effort: a leftover directory is harmless.
            let _ = std::fs::remove_dir_all(&r.dir);
        }
        String::new()
    } else {
        format!(
            "\n    re-run: {rerun} --keep   (job log: {})\n    job: {}",
            r.dir.join("job.log").display(),
            r.job
        )
    };
    eprintln!(
        "reverb chaos: trial {trial}: {} {} {} [{}, {}]{} -> {} ({:.1} s){}{}{rerun}",
        r.plan.app,
        r.plan.protocol,
        r.plan.fault.describe(),
        r.size.describe(),
        r.phase.name(),
        if r.fired || r.plan.fault == Fault::None { "" } else { " [did not fire]" },
        r.outcome.name(),
        r.wall_s,
        r.recovery_ms.map_or(String::new(), |ms| format!(", recovery {ms:.0} ms")),
        if r.why.is_empty() { String::new() } else { format!(": {}", r.why) },
    );
}
