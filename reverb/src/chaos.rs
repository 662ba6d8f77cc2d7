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

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{bail, Context, Result};
// A fault variable left in the campaign's own environment would reach every trial.
use reverb_runtime::fault::FAULT_VARS;
use serde_json::{json, Value};

use crate::job::{num, run_job, JobOutcome, JobSpec};

#[derive(clap::Args, Debug)]
pub struct ChaosArgs {
    /// Number of trials.
    #[arg(long, default_value_t = 20)]
    pub trials: u64,
    /// Campaign seed (random when absent; printed either way).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Run only this trial of the campaign (0-based), e.g. to reproduce a failure. The same
    /// app, protocol and fault kind; for master-worker, whose failure-free send counts vary,
    /// the kill point may differ: the trial line prints the exact `REVERB_FAULT`.
    #[arg(long)]
    pub trial: Option<u64>,
    /// Trials run at once (1 on a small machine).
    #[arg(long, default_value_t = 1)]
    pub jobs: usize,
    /// Bound on each trial's job, in seconds: a job still running then is a hang.
    #[arg(long, default_value_t = 90)]
    pub timeout: u64,
    /// Transport provider.
    #[arg(long, default_value = "shm")]
    pub provider: String,
    /// Print the report as JSON on stdout instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Keep every trial's directory (failed trials' directories are always kept).
    #[arg(long)]
    pub keep: bool,
}

const RANKS: u32 = 8;
const RANKS_PER_NODE: u32 = 2;
const APPS: [&str; 3] = ["stencil", "master-worker", "ring"];
const PROTOCOLS: [&str; 4] = ["causal", "pessimistic-sb", "pessimistic-rb", "none"];
const CKPT_STAGES: [&str; 3] = ["local-written", "buddy-body-landed", "buddy-flipped"];
/// `Runtime::init`'s collective steps a fault can hit (`REVERB_FAULT_INIT`).
const INIT_STEPS: [&str; 2] = ["log-rings", "ckpt-slots"];
/// Fault kinds, cycled through by trial number.
pub const FAULT_KINDS: [&str; 8] =
    ["none", "rank", "node", "checkpoint", "replay", "two-nodes", "init", "gc"];

/// Small sizes: a trial takes a second or two.
fn app_args(app: &str) -> Vec<String> {
    let a: &[&str] = match app {
        "stencil" => &["--iters", "60", "--size", "64", "--ckpt-every", "10"],
        "master-worker" => &["--iters", "12", "--size", "2000", "--ckpt-every", "3"],
        _ => &["--iters", "40", "--size", "256", "--ckpt-every", "8"],
    };
    a.iter().map(|s| s.to_string()).collect()
}

/// The fault a trial injects.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    None,
    /// A rank dies after its SENDS-th send; the launcher takes its node down.
    Rank {
        rank: u32,
        sends: u64,
    },
    /// Both ranks of a node, each at a random point of its own; the first death takes the node.
    Node {
        node: u32,
        sends: [u64; 2],
    },
    /// A rank dies inside checkpoint EPOCH at STAGE.
    Checkpoint {
        rank: u32,
        epoch: u64,
        stage: &'static str,
    },
    /// A rank dies, then its restarted incarnation dies again after `replay_sends` sends.
    Replay {
        rank: u32,
        sends: u64,
        replay_sends: u64,
    },
    /// Ranks on two different nodes die at the same point.
    TwoNodes {
        ranks: [u32; 2],
        sends: u64,
    },
    /// A rank dies inside `Runtime::init`, just before STEP's collective; with `late`, a rank
    /// of another node joins that collective only once the dead node is back (it misses
    /// the abort and must join the recovery from the resumed round).
    Init {
        rank: u32,
        step: &'static str,
        late: Option<u32>,
    },
    /// A rank dies at the log GC after checkpoint EPOCH committed; with `late`, a rank of
    /// another node joins that GC only once the dead node is back.
    Gc {
        rank: u32,
        epoch: u64,
        late: Option<u32>,
    },
}

impl Fault {
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::Rank { .. } => "rank",
            Fault::Node { .. } => "node",
            Fault::Checkpoint { .. } => "checkpoint",
            Fault::Replay { .. } => "replay",
            Fault::TwoNodes { .. } => "two-nodes",
            Fault::Init { .. } => "init",
            Fault::Gc { .. } => "gc",
        }
    }

    /// The environment that injects it.
    fn env(&self) -> Vec<(String, String)> {
        let fault = |v: String| vec![("REVERB_FAULT".to_string(), v)];
        match self {
            Fault::None => Vec::new(),
            Fault::Rank { rank, sends } => fault(format!("{rank}:{sends}")),
            Fault::Node { node, sends } => {
                let r = node * RANKS_PER_NODE;
                fault(format!("{r}:{},{}:{}", sends[0], r + 1, sends[1]))
            }
            Fault::Checkpoint { rank, epoch, stage } => {
                vec![("REVERB_FAULT_CKPT".to_string(), format!("{rank}:{epoch}:{stage}"))]
            }
            Fault::Replay { rank, sends, replay_sends } => {
                fault(format!("{rank}:{sends},{rank}:{replay_sends}@1"))
            }
            Fault::TwoNodes { ranks, sends } => fault(format!("{}:{sends},{}:{sends}", ranks[0], ranks[1])),
            Fault::Init { rank, step, late } => {
                let late = late.map_or(String::new(), |l| format!(",{l}:{step}:late"));
                vec![("REVERB_FAULT_INIT".to_string(), format!("{rank}:{step}{late}"))]
            }
            Fault::Gc { rank, epoch, late } => {
                let late = late.map_or(String::new(), |l| format!(",{l}:{epoch}:late"));
                vec![("REVERB_FAULT_GC".to_string(), format!("{rank}:{epoch}{late}"))]
            }
        }
    }

    fn respawns(&self) -> u32 {
        match self {
            Fault::None => 0,
            Fault::Replay { .. } | Fault::TwoNodes { .. } => 2,
            _ => 1,
        }
    }

    fn describe(&self) -> String {
        match self.env().first() {
            Some((k, v)) => format!("{} ({k}={v})", self.kind()),
            None => "none".into(),
        }
    }
}

/// splitmix64: a trial's plan depends only on (seed, trial), so one trial re-runs alone.
struct Rng(u64);

impl Rng {
    fn new(seed: u64, trial: u64) -> Rng {
        let mut r = Rng(seed ^ trial.wrapping_mul(0xA076_1D64_78BD_642F));
        r.next();
        r
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (`n` > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// Uniform in `lo..=hi`.
    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }
}

/// What the failure-free run of an app says: its checksum, each rank's sends and checkpoints.
#[derive(Debug, Clone)]
pub struct Baseline {
    pub checksum: String,
    pub sends: Vec<u64>,
    pub checkpoints: u64,
}

/// One trial's plan.
#[derive(Debug, Clone)]
pub struct Plan {
    pub trial: u64,
    pub app: &'static str,
    pub protocol: &'static str,
    pub fault: Fault,
}

/// The app of trial `trial` (needed before its baseline).
fn pick_app(seed: u64, trial: u64) -> &'static str {
    APPS[Rng::new(seed, trial).below(APPS.len() as u64) as usize]
}

/// One time in three, a rank on another node than `rank` (a survivor that joins late).
fn late_survivor(rng: &mut Rng, rank: u32) -> Option<u32> {
    let nodes = RANKS / RANKS_PER_NODE;
    (rng.below(3) == 0).then(|| {
        let node = (rank / RANKS_PER_NODE + 1 + rng.below(u64::from(nodes - 1)) as u32) % nodes;
        node * RANKS_PER_NODE + rng.below(u64::from(RANKS_PER_NODE)) as u32
    })
}

/// The plan of trial `trial`. Fault kinds are cycled through by trial number (so a short
/// campaign covers each), everything else is random.
pub fn plan(seed: u64, trial: u64, base: &Baseline) -> Plan {
    let mut rng = Rng::new(seed, trial);
    let app = APPS[rng.below(APPS.len() as u64) as usize];
    let protocol = PROTOCOLS[rng.below(PROTOCOLS.len() as u64) as usize];
    let nodes = RANKS / RANKS_PER_NODE;
    let sends_of = |r: u32| base.sends.get(r as usize).copied().unwrap_or(1).max(1);
    let fault = match (trial + seed) % FAULT_KINDS.len() as u64 {
        0 => Fault::None,
        1 => {
            let rank = rng.below(u64::from(RANKS)) as u32;
            Fault::Rank { rank, sends: rng.between(1, sends_of(rank)) }
        }
        2 => {
            let node = rng.below(u64::from(nodes)) as u32;
            let r = node * RANKS_PER_NODE;
            Fault::Node { node, sends: [rng.between(1, sends_of(r)), rng.between(1, sends_of(r + 1))] }
        }
        3 if base.checkpoints > 0 => Fault::Checkpoint {
            rank: rng.below(u64::from(RANKS)) as u32,
            epoch: rng.between(1, base.checkpoints),
            stage: CKPT_STAGES[rng.below(CKPT_STAGES.len() as u64) as usize],
        },
        3 | 4 => {
            let rank = rng.below(u64::from(RANKS)) as u32;
            Fault::Replay { rank, sends: rng.between(1, sends_of(rank)), replay_sends: rng.between(1, 6) }
        }
        6 => {
            let rank = rng.below(u64::from(RANKS)) as u32;
            let step = INIT_STEPS[rng.below(INIT_STEPS.len() as u64) as usize];
            let late = late_survivor(&mut rng, rank);
            Fault::Init { rank, step, late }
        }
        7 if base.checkpoints > 0 => {
            let rank = rng.below(u64::from(RANKS)) as u32;
            let epoch = rng.between(1, base.checkpoints);
            let late = late_survivor(&mut rng, rank);
            Fault::Gc { rank, epoch, late }
        }
        _ => {
            let a = rng.below(u64::from(RANKS)) as u32;
            let other_node = (a / RANKS_PER_NODE + 1 + rng.below(u64::from(nodes - 1)) as u32) % nodes;
            let b = other_node * RANKS_PER_NODE + rng.below(u64::from(RANKS_PER_NODE)) as u32;
            let most = sends_of(a).min(sends_of(b));
            Fault::TwoNodes { ranks: [a, b], sends: rng.between(1, most) }
        }
    };
    Plan { trial, app, protocol, fault }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Survived,
    ReportedUnrecoverable,
    WrongAnswer,
    Hang,
    OtherFailure,
}

impl Outcome {
    fn name(self) -> &'static str {
        match self {
            Outcome::Survived => "survived",
            Outcome::ReportedUnrecoverable => "reported-unrecoverable",
            Outcome::WrongAnswer => "WRONG-ANSWER",
            Outcome::Hang => "HANG",
            Outcome::OtherFailure => "OTHER-FAILURE",
        }
    }
}

struct TrialResult {
    plan: Plan,
    outcome: Outcome,
    /// Whether a rank actually died (the fault's point may lie past the run's end).
    fired: bool,
    /// Longest survivor recovery of the trial (detection to resume), from the rank reports.
    recovery_ms: Option<f64>,
    wall_s: f64,
    why: String,
    dir: PathBuf,
}

impl TrialResult {
    /// Survived, or reported unrecoverable where the design does not cover the failure.
    fn passed(&self) -> bool {
        matches!(self.outcome, Outcome::Survived | Outcome::ReportedUnrecoverable)
    }
}

/// Whether the design does not cover this trial's failure (the job must then stop with a
/// clear report, or may survive if the runtime has learnt it since).
fn expected_unrecoverable(plan: &Plan) -> Option<&'static str> {
    match (plan.protocol, &plan.fault) {
        (_, Fault::None) => None,
        ("none", _) => Some("logging off"),
        (_, Fault::TwoNodes { .. }) => Some("two nodes at once"),
        _ => None,
    }
}

/// A clear report: a rank or the runtime said what could not be recovered.
fn clear_report(log: &str) -> bool {
    log.contains("unrecoverable failure:") || log.contains("unsupported:")
}

fn classify(plan: &Plan, base: &Baseline, out: &JobOutcome) -> (Outcome, bool, String) {
    let log = out.log();
    let fired =
        out.kill_ns.is_some() || log.contains("respawning node") || log.contains("killed by signal 9");
    let Some(status) = out.status else {
        return (
            Outcome::Hang,
            fired,
            format!("still running {:.0} s after the job's timeout", out.wall.as_secs_f64()),
        );
    };
    if status.code() == Some(124) && log.contains("reverb run: timeout after") {
        return (Outcome::Hang, fired, "the launcher's timeout killed the job".into());
    }
    if status.success() {
        return match &out.checksum {
            Some(c) if *c == base.checksum => (Outcome::Survived, fired, String::new()),
            Some(c) => (Outcome::WrongAnswer, fired, format!("checksum {c}, failure-free {}", base.checksum)),
            None => (Outcome::OtherFailure, fired, "exit 0 but no checksum written".into()),
        };
    }
    let why = log
        .lines()
        .find(|l| clear_report(l))
        .or_else(|| log.lines().rev().find(|l| l.starts_with("reverb run:")))
        .unwrap_or("")
        .trim();
    // A lost-checkpoint report lists every level of every rank: the start says enough.
    let why: String = if why.chars().count() > 240 {
        format!("{}...", why.chars().take(240).collect::<String>())
    } else {
        why.to_string()
    };
    match expected_unrecoverable(plan) {
        Some(case) if fired && clear_report(&log) => {
            (Outcome::ReportedUnrecoverable, fired, format!("{case}: {why}"))
        }
        Some(case) => {
            (Outcome::OtherFailure, fired, format!("{case} without a clear report ({status}): {why}"))
        }
        None => (Outcome::OtherFailure, fired, format!("{status}: {why}")),
    }
}

/// The failure-free baselines, one run per app, computed on first use.
struct Baselines {
    args_provider: String,
    timeout: u64,
    dir: PathBuf,
    cache: Mutex<HashMap<&'static str, Baseline>>,
    /// One failure-free run at a time per app.
    computing: Mutex<()>,
}

impl Baselines {
    fn get(&self, app: &'static str) -> Result<Baseline> {
        let _one = self.computing.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(b) = self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(app) {
            return Ok(b.clone());
        }
        let spec = JobSpec {
            provider: self.args_provider.clone(),
            ranks: RANKS,
            ranks_per_node: RANKS_PER_NODE,
            respawn: 0,
            timeout_s: self.timeout,
            app: app.to_string(),
            app_args: app_args(app),
            env: vec![("REVERB_LOG".into(), "causal".into()), ("REVERB_CKPT".into(), "rs".into())],
            hosts: None,
        };
        let out = run_job(&spec, &self.dir.join(format!("baseline-{app}")), Duration::from_secs(30))?;
        if !out.success() {
            bail!(
                "{app}: the failure-free run failed; last lines of {}:\n{}",
                out.log_path.display(),
                out.log_tail(30)
            );
        }
        let checksum =
            out.checksum.clone().with_context(|| format!("{app}: the failure-free run wrote no checksum"))?;
        let mut sends = vec![0u64; RANKS as usize];
        let mut checkpoints = u64::MAX;
        for r in &out.reports {
            if let Some(s) = sends.get_mut(num(r, "rank") as usize) {
                *s = num(r, "messages_sent") as u64;
            }
            checkpoints = checkpoints.min(num(r, "checkpoints") as u64);
        }
        let checkpoints = if out.reports.is_empty() { 0 } else { checkpoints };
        eprintln!("reverb chaos: failure-free {app}: checksum {checksum}, sends per rank {sends:?}, {checkpoints} checkpoints");
        let b = Baseline { checksum, sends, checkpoints };
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).insert(app, b.clone());
        Ok(b)
    }
}

/// Longest survivor recovery of a job (ms), from `recovery_ms` of the rank reports.
fn recovery_of(out: &JobOutcome) -> Option<f64> {
    out.reports
        .iter()
        .filter_map(|r| r.get("recovery_ms").and_then(Value::as_array))
        .flatten()
        .filter_map(Value::as_f64)
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
}

fn run_trial(
    args: &ChaosArgs,
    seed: u64,
    trial: u64,
    baselines: &Baselines,
    dir: &Path,
) -> Result<TrialResult> {
    let base = baselines.get(pick_app(seed, trial))?;
    let plan = plan(seed, trial, &base);
    let mut env = vec![
        ("REVERB_LOG".to_string(), plan.protocol.to_string()),
        ("REVERB_CKPT".to_string(), "rs".to_string()),
        // Unsurvivable cases end within this bound instead of the 30 s default.
        ("REVERB_REJOIN_TIMEOUT_MS".to_string(), "15000".to_string()),
    ];
    env.extend(plan.fault.env());
    let spec = JobSpec {
        provider: args.provider.clone(),
        ranks: RANKS,
        ranks_per_node: RANKS_PER_NODE,
        respawn: plan.fault.respawns(),
        timeout_s: args.timeout,
        app: plan.app.to_string(),
        app_args: app_args(plan.app),
        env,
        hosts: None,
    };
    let out = run_job(&spec, &dir.join(format!("trial-{trial}")), Duration::from_secs(30))?;
    let (outcome, fired, why) = classify(&plan, &base, &out);
    let recovery_ms = if outcome == Outcome::Survived { recovery_of(&out) } else { None };
    Ok(TrialResult { plan, outcome, fired, recovery_ms, wall_s: out.wall.as_secs_f64(), why, dir: out.dir })
}

/// One fault kind's share of a campaign: its trials and their outcomes.
struct KindCounts {
    kind: &'static str,
    trials: usize,
    survived: usize,
    unrecoverable: usize,
    /// Wrong answers, hangs and other failures.
    failed: usize,
    fired: usize,
}

impl KindCounts {
    /// Per kind, in [`FAULT_KINDS`] order; kinds without trials are left out.
    fn of(results: &[TrialResult]) -> Vec<KindCounts> {
        FAULT_KINDS
            .iter()
            .map(|&kind| {
                let mine: Vec<&TrialResult> =
                    results.iter().filter(|r| r.plan.fault.kind() == kind).collect();
                let with = |o: Outcome| mine.iter().filter(|r| r.outcome == o).count();
                KindCounts {
                    kind,
                    trials: mine.len(),
                    survived: with(Outcome::Survived),
                    unrecoverable: with(Outcome::ReportedUnrecoverable),
                    failed: mine.len() - with(Outcome::Survived) - with(Outcome::ReportedUnrecoverable),
                    fired: mine.iter().filter(|r| r.fired).count(),
                }
            })
            .filter(|k| k.trials > 0)
            .collect()
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Returns the exit code: 0 when no trial gave a wrong answer or hung.
pub fn main(args: ChaosArgs) -> Result<i32> {
    let seed = campaign_seed(&args)?;
    let trials: Vec<u64> = match args.trial {
        Some(k) => vec![k],
        None => (0..args.trials).collect(),
    };
    let dir = std::env::temp_dir().join(format!("reverb-chaos-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    eprintln!(
        "reverb chaos: seed {seed}, {} trial(s), {} at a time, {RANKS} ranks on {} nodes, provider {}, timeout {} s; work dir {}",
        trials.len(),
        args.jobs,
        RANKS / RANKS_PER_NODE,
        args.provider,
        args.timeout,
        dir.display()
    );
    let started = std::time::Instant::now();
    let results = run_trials(&args, seed, &trials, &dir)?;
    let summary = Summary::of(&results, started.elapsed().as_secs_f64());
    if args.json {
        println!("{}", serde_json::to_string_pretty(&summary.json(seed, &results))?);
    } else {
        summary.print(seed, &results);
    }
    if summary.failed == 0 && !args.keep {
        // Best effort: a leftover temp directory is harmless.
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        eprintln!("reverb chaos: work dir kept in {}", dir.display());
    }
    Ok(if summary.wrong > 0 || summary.hangs > 0 { 1 } else { 0 })
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
    Ok(args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64)
            % 1_000_000
    }))
}

/// Runs `trials`, `--jobs` at a time, each printed as it ends; the results in trial order.
/// A trial that could not be run at all stops the campaign with its error.
fn run_trials(args: &ChaosArgs, seed: u64, trials: &[u64], dir: &Path) -> Result<Vec<TrialResult>> {
    let baselines = Baselines {
        args_provider: args.provider.clone(),
        timeout: args.timeout,
        dir: dir.to_path_buf(),
        cache: Mutex::new(HashMap::new()),
        computing: Mutex::new(()),
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
                match run_trial(args, seed, trial, &baselines, dir) {
                    Ok(r) => {
                        print_trial(&r, seed, args.keep);
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
/// failed one's is named with the command that re-runs it.
fn print_trial(r: &TrialResult, seed: u64, keep: bool) {
    let trial = r.plan.trial;
    let rerun = if r.passed() {
        if !keep {
            // Best effort: a leftover directory is harmless.
            let _ = std::fs::remove_dir_all(&r.dir);
        }
        String::new()
    } else {
        format!(
            "\n    re-run: reverb chaos --seed {seed} --trial {trial} --keep   (job log: {})",
            r.dir.join("job.log").display()
        )
    };
    eprintln!(
        "reverb chaos: trial {trial}: {} {} {}{} -> {} ({:.1} s){}{}{rerun}",
        r.plan.app,
        r.plan.protocol,
        r.plan.fault.describe(),
        if r.fired || r.plan.fault == Fault::None { "" } else { " [did not fire]" },
        r.outcome.name(),
        r.wall_s,
        r.recovery_ms.map_or(String::new(), |ms| format!(", recovery {ms:.0} ms")),
        if r.why.is_empty() { String::new() } else { format!(": {}", r.why) },
    );
}

/// A campaign's counts.
struct Summary {
    wall_s: f64,
    survived: usize,
    unrecoverable: usize,
    wrong: usize,
    hangs: usize,
    other: usize,
    /// Wrong answers, hangs and other failures.
    failed: usize,
    fired: usize,
    /// Survivor recovery times, sorted.
    recovery_ms: Vec<f64>,
    by_kind: Vec<KindCounts>,
}

impl Summary {
    fn of(results: &[TrialResult], wall_s: f64) -> Summary {
        let count = |o: Outcome| results.iter().filter(|r| r.outcome == o).count();
        let mut recovery_ms: Vec<f64> = results.iter().filter_map(|r| r.recovery_ms).collect();
        recovery_ms.sort_by(f64::total_cmp);
        Summary {
            wall_s,
            survived: count(Outcome::Survived),
            unrecoverable: count(Outcome::ReportedUnrecoverable),
            wrong: count(Outcome::WrongAnswer),
            hangs: count(Outcome::Hang),
            other: count(Outcome::OtherFailure),
            failed: results.iter().filter(|r| !r.passed()).count(),
            fired: results.iter().filter(|r| r.fired).count(),
            recovery_ms,
            by_kind: KindCounts::of(results),
        }
    }

    /// (min, median, p90, max) of the recovery times.
    fn recovery_spread(&self) -> (f64, f64, f64, f64) {
        let rec = &self.recovery_ms;
        (
            rec.first().copied().unwrap_or(0.0),
            percentile(rec, 0.5),
            percentile(rec, 0.9),
            rec.last().copied().unwrap_or(0.0),
        )
    }

    /// The `--json` report.
    fn json(&self, seed: u64, results: &[TrialResult]) -> Value {
        let (min, median, p90, max) = self.recovery_spread();
        json!({
            "seed": seed,
            "trials": results.len(),
            "survived": self.survived,
            "reported_unrecoverable": self.unrecoverable,
            "wrong_answers": self.wrong,
            "hangs": self.hangs,
            "other_failures": self.other,
            "faults_fired": self.fired,
            "wall_s": self.wall_s,
            "recovery_ms": { "count": self.recovery_ms.len(), "min": min, "median": median, "p90": p90, "max": max },
            "by_fault": self.by_kind.iter().map(|k| json!({
                "fault": k.kind,
                "trials": k.trials,
                "survived": k.survived,
                "reported_unrecoverable": k.unrecoverable,
                "failed": k.failed,
                "fired": k.fired,
            })).collect::<Vec<_>>(),
            "failures": results.iter().filter(|r| !r.passed()).map(|r| json!({
                "trial": r.plan.trial,
                "outcome": r.outcome.name(),
                "app": r.plan.app,
                "protocol": r.plan.protocol,
                "fault": r.plan.fault.describe(),
                "why": r.why,
                "rerun": format!("reverb chaos --seed {seed} --trial {}", r.plan.trial),
            })).collect::<Vec<_>>(),
        })
    }

    /// The human report.
    fn print(&self, seed: u64, results: &[TrialResult]) {
        println!("reverb chaos report (seed {seed}, {:.0} s)", self.wall_s);
        println!("  trials                           {}", results.len());
        println!("  survived                         {}", self.survived);
        println!("  correctly-reported-unrecoverable {}", self.unrecoverable);
        println!("  wrong answers                    {}", self.wrong);
        println!("  hangs                            {}", self.hangs);
        println!("  other failures                   {}", self.other);
        println!("  faults that fired                {}", self.fired);
        let (min, median, p90, max) = self.recovery_spread();
        println!(
            "  recovery time (ms, {} recoveries) min {min:.0} / median {median:.0} / p90 {p90:.0} / max {max:.0}",
            self.recovery_ms.len(),
        );
        for k in &self.by_kind {
            println!(
                "  fault {:<11} {:>4} trials, {:>4} survived, {:>4} reported unrecoverable, {:>4} failed ({} fired)",
                k.kind, k.trials, k.survived, k.unrecoverable, k.failed, k.fired
            );
        }
        for r in results.iter().filter(|r| !r.passed()) {
            println!(
                "  {} trial {}: {} {} {}: {}  (re-run: reverb chaos --seed {seed} --trial {})",
                r.outcome.name(),
                r.plan.trial,
                r.plan.app,
                r.plan.protocol,
                r.plan.fault.describe(),
                r.why,
                r.plan.trial
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    use super::*;

    fn base() -> Baseline {
        Baseline { checksum: "abc".into(), sends: vec![100; RANKS as usize], checkpoints: 4 }
    }

    /// A finished job whose log says `log`, in a fresh directory.
    fn outcome(name: &str, status: Option<ExitStatus>, checksum: Option<&str>, log: &str) -> JobOutcome {
        let dir = std::env::temp_dir().join(format!("reverb-chaos-unit-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let log_path = dir.join("job.log");
        std::fs::write(&log_path, log).expect("log");
        JobOutcome {
            status,
            dir,
            log_path,
            checksum: checksum.map(str::to_string),
            reports: Vec::new(),
            kill_ns: None,
            wall: Duration::from_secs(1),
        }
    }

    #[test]
    fn a_trial_plan_depends_only_on_seed_and_trial() {
        for trial in 0..50 {
            let (a, b) = (plan(9, trial, &base()), plan(9, trial, &base()));
            assert_eq!((a.app, a.protocol, &a.fault), (b.app, b.protocol, &b.fault));
            assert_eq!(a.app, pick_app(9, trial));
        }
    }

    #[test]
    fn eight_consecutive_trials_cover_every_fault_kind() {
        let kinds: Vec<&str> = (10..18).map(|t| plan(3, t, &base()).fault.kind()).collect();
        for k in FAULT_KINDS {
            assert!(kinds.contains(&k), "{k} missing from {kinds:?}");
        }
    }

    #[test]
    fn faults_stay_within_the_run_and_two_nodes_are_two_nodes() {
        for trial in 0..600 {
            match plan(1, trial, &base()).fault {
                Fault::Rank { rank, sends } | Fault::Replay { rank, sends, .. } => {
                    assert!(rank < RANKS && (1..=100).contains(&sends));
                }
                Fault::Checkpoint { rank, epoch, .. } => assert!(rank < RANKS && (1..=4).contains(&epoch)),
                Fault::TwoNodes { ranks, sends } => {
                    assert_ne!(ranks[0] / RANKS_PER_NODE, ranks[1] / RANKS_PER_NODE);
                    assert!(ranks.iter().all(|&r| r < RANKS) && (1..=100).contains(&sends));
                }
                Fault::Node { node, .. } => assert!(node < RANKS / RANKS_PER_NODE),
                Fault::Init { rank, step, late } => {
                    assert!(rank < RANKS && INIT_STEPS.contains(&step));
                    if let Some(late) = late {
                        assert!(late < RANKS);
                        assert_ne!(late / RANKS_PER_NODE, rank / RANKS_PER_NODE, "the late rank survives");
                    }
                }
                Fault::Gc { rank, epoch, late } => {
                    assert!(rank < RANKS && (1..=4).contains(&epoch));
                    if let Some(late) = late {
                        assert!(late < RANKS);
                        assert_ne!(late / RANKS_PER_NODE, rank / RANKS_PER_NODE, "the late rank survives");
                    }
                }
                Fault::None => {}
            }
        }
    }

    #[test]
    fn fault_environment_uses_the_runtime_syntax() {
        assert_eq!(Fault::Node { node: 1, sends: [3, 4] }.env()[0].1, "2:3,3:4");
        assert_eq!(Fault::Replay { rank: 5, sends: 9, replay_sends: 2 }.env()[0].1, "5:9,5:2@1");
        let ckpt = Fault::Checkpoint { rank: 3, epoch: 2, stage: "buddy-flipped" }.env();
        assert_eq!(ckpt[0], ("REVERB_FAULT_CKPT".to_string(), "3:2:buddy-flipped".to_string()));
        let init = Fault::Init { rank: 3, step: "ckpt-slots", late: None }.env();
        assert_eq!(init, vec![("REVERB_FAULT_INIT".to_string(), "3:ckpt-slots".to_string())]);
        let late = Fault::Init { rank: 3, step: "log-rings", late: Some(6) }.env();
        assert_eq!(late[0].1, "3:log-rings,6:log-rings:late");
        let gc = Fault::Gc { rank: 2, epoch: 3, late: Some(7) }.env();
        assert_eq!(gc, vec![("REVERB_FAULT_GC".to_string(), "2:3,7:3:late".to_string())]);
        // The runtime accepts what the campaign sets.
        for f in ["3:ckpt-slots", "3:log-rings", "6:log-rings:late"] {
            assert!(f.parse::<reverb_runtime::InitFault>().is_ok(), "{f}");
        }
        for f in ["2:3", "7:3:late"] {
            assert!(f.parse::<reverb_runtime::GcFault>().is_ok(), "{f}");
        }
    }

    #[test]
    fn init_faults_get_a_share_and_sometimes_a_late_survivor() {
        let inits: Vec<Fault> =
            (0..800).map(|t| plan(5, t, &base()).fault).filter(|f| f.kind() == "init").collect();
        assert_eq!(inits.len(), 100, "one trial in eight");
        let late = inits.iter().filter(|f| matches!(f, Fault::Init { late: Some(_), .. })).count();
        assert!((15..=55).contains(&late), "{late} of 100 with a late survivor");
        for step in INIT_STEPS {
            assert!(inits.iter().any(|f| matches!(f, Fault::Init { step: s, .. } if *s == step)), "{step}");
        }
        assert_eq!(inits[0].respawns(), 1);
    }

    #[test]
    fn outcomes_are_classified_strictly() {
        let p = |protocol, fault| Plan { trial: 0, app: "stencil", protocol, fault };
        let rank = Fault::Rank { rank: 3, sends: 5 };
        let killed = "reverb run: rank 3 was killed by signal 9 (SIGKILL); respawning node 1\n";
        let ok = Some(ExitStatus::from_raw(0));
        let failed = Some(ExitStatus::from_raw(1 << 8));
        let cases = [
            (p("causal", rank.clone()), outcome("ok", ok, Some("abc"), killed), Outcome::Survived),
            (p("causal", rank.clone()), outcome("wrong", ok, Some("abd"), killed), Outcome::WrongAnswer),
            (p("causal", rank.clone()), outcome("nosum", ok, None, killed), Outcome::OtherFailure),
            (p("causal", rank.clone()), outcome("watchdog", None, None, killed), Outcome::Hang),
            (
                p("causal", rank.clone()),
                outcome(
                    "timeout",
                    Some(ExitStatus::from_raw(124 << 8)),
                    None,
                    "reverb run: timeout after 9.0 s",
                ),
                Outcome::Hang,
            ),
            (
                p("none", rank.clone()),
                outcome("none", failed, None, &format!("{killed}[1] unrecoverable failure: no log\n")),
                Outcome::ReportedUnrecoverable,
            ),
            // Covered by the design: a clear report is still a bug.
            (
                p("causal", rank.clone()),
                outcome("causal", failed, None, &format!("{killed}[1] unrecoverable failure: lost\n")),
                Outcome::OtherFailure,
            ),
            // One node failing inside init is covered: it must survive.
            (
                p("causal", Fault::Init { rank: 2, step: "log-rings", late: Some(5) }),
                outcome("init", failed, None, &format!("{killed}[1] unrecoverable failure: init\n")),
                Outcome::OtherFailure,
            ),
            (
                p("none", Fault::Init { rank: 2, step: "ckpt-slots", late: None }),
                outcome("init-none", failed, None, &format!("{killed}[1] unrecoverable failure: no log\n")),
                Outcome::ReportedUnrecoverable,
            ),
            // Not covered, but no clear report.
            (p("none", rank.clone()), outcome("unclear", failed, None, killed), Outcome::OtherFailure),
            // pessimistic-rb recovers now: a failure to recover is a bug, not an expected report.
            (
                p("pessimistic-rb", rank),
                outcome("rb", failed, None, &format!("{killed}[1] unsupported: rb\n")),
                Outcome::OtherFailure,
            ),
        ];
        for (plan, out, expected) in cases {
            assert_eq!(classify(&plan, &base(), &out).0, expected, "{}", out.dir.display());
            let _ = std::fs::remove_dir_all(&out.dir);
        }
    }
}
