//! The failure-free baselines and one single-host trial.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::classify::{classify, Outcome};
use super::hosts::HostSet;
use super::inject::{host_app_args, host_env, host_size_env};
use super::plan::{app_args, draw, pick_app, Baseline, COLLECTIVE_APP, RANKS, RANKS_PER_NODE};
use super::size::{pick_size, MsgSize, Thresholds};
use super::{ChaosArgs, TrialResult};
use crate::job::{num, run_job, JobOutcome, JobSpec};

/// An app and what changes its send counts ([`MsgSize::counts_key`]).
pub(super) type BaselineKey = (&'static str, Option<(usize, usize)>);

/// The failure-free baselines, one run per app, computed on first use.
pub(super) struct Baselines {
    pub(super) args_provider: String,
    pub(super) timeout: u64,
    pub(super) dir: PathBuf,
    /// Per app and what changes its send counts ([`MsgSize::counts_key`]).
    pub(super) cache: Mutex<HashMap<BaselineKey, Baseline>>,
    /// One failure-free run at a time per app.
    pub(super) computing: Mutex<()>,
    /// With `--hosts`: the baselines run there, as the trials do.
    pub(super) hosts: Option<HostSet>,
    /// The thresholds the trials' message sizes are drawn against.
    pub(super) thresholds: Thresholds,
}

impl Baselines {
    /// The failure-free run of `app` with main messages `size` big. Every size but a
    /// fragmented one sends what the app's own sizes send, and the answer does not depend on
    /// the size: those share one run of the app's own sizes.
    pub(super) fn get(&self, app: &'static str, size: &MsgSize) -> Result<Baseline> {
        let _one = self.computing.lock().unwrap_or_else(|e| e.into_inner());
        let key = (app, size.counts_key());
        if let Some(b) = self.cache.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(b.clone());
        }
        let size = if key.1.is_some() { *size } else { MsgSize::NATURAL };
        let mut env =
            vec![("REVERB_LOG".to_string(), "causal".to_string()), ("REVERB_CKPT".into(), "rs".into())];
        env.extend(size.env());
        let spec = match &self.hosts {
            None => JobSpec {
                provider: self.args_provider.clone(),
                ranks: RANKS,
                ranks_per_node: RANKS_PER_NODE,
                respawn: 0,
                timeout_s: self.timeout,
                app: app.to_string(),
                app_args: app_args(app, &size),
                env,
                hosts: None,
                spares: Vec::new(),
                redundancy: None,
                objects: None,
            },
            Some(set) => JobSpec {
                provider: self.args_provider.clone(),
                ranks: set.ranks(),
                ranks_per_node: RANKS_PER_NODE,
                respawn: 0,
                timeout_s: self.timeout,
                app: app.to_string(),
                app_args: host_app_args(app, &size),
                env: host_env("causal").into_iter().chain(host_size_env(&size)).collect(),
                hosts: Some(set.hosts_arg()),
                spares: Vec::new(),
                redundancy: None,
                objects: None,
            },
        };
        let name = match size.bytes {
            0 => "baseline".to_string(),
            n => format!("baseline-{n}"),
        };
        let mut b = self.measure(app, &spec, &name)?;
        if self.hosts.is_some() {
            // Across hosts the fault times come from the wall time: a second run, the faster
            // counting, keeps a load spike at the campaign's start from pushing faults past
            // the end of every later run.
            let again = self.measure(app, &spec, "baseline-2")?;
            if again.checksum != b.checksum {
                bail!("{app}: failure-free runs disagree ({} vs {})", b.checksum, again.checksum);
            }
            b.wall_ms = b.wall_ms.min(again.wall_ms);
        }
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        // The apps' answer does not depend on their message sizes: a fragmented run's must be
        // the app's own (when that ran already).
        if let Some(own) = cache.get(&(app, None)).filter(|own| own.checksum != b.checksum) {
            bail!(
                "{app}: failure-free runs at {} and at its own sizes disagree ({} vs {})",
                size.describe(),
                b.checksum,
                own.checksum
            );
        }
        cache.insert(key, b.clone());
        Ok(b)
    }

    /// One failure-free run of `spec` in the work directory's `NAME-APP`.
    fn measure(&self, app: &str, spec: &JobSpec, name: &str) -> Result<Baseline> {
        let out = run_job(spec, &self.dir.join(format!("{name}-{app}")), Duration::from_secs(30))?;
        if !out.success() {
            bail!(
                "{app}: the failure-free run failed; last lines of {}:\n{}",
                out.log_path.display(),
                out.log_tail(30)
            );
        }
        let checksum =
            out.checksum.clone().with_context(|| format!("{app}: the failure-free run wrote no checksum"))?;
        let mut sends = vec![0u64; spec.ranks as usize];
        let mut checkpoints = u64::MAX;
        for r in &out.reports {
            if let Some(s) = sends.get_mut(num(r, "rank") as usize) {
                *s = num(r, "messages_sent") as u64;
            }
            checkpoints = checkpoints.min(num(r, "checkpoints") as u64);
        }
        let checkpoints = if out.reports.is_empty() { 0 } else { checkpoints };
        let wall_ms = out.wall.as_millis() as u64;
        eprintln!(
            "reverb chaos: failure-free {app}: checksum {checksum}, sends per rank {sends:?}, \
             {checkpoints} checkpoints, {:.1} s",
            out.wall.as_secs_f64()
        );
        Ok(Baseline { checksum, sends, checkpoints, wall_ms })
    }
}

/// Longest survivor recovery of a job (ms), from `recovery_ms` of the rank reports.
pub(super) fn recovery_of(out: &JobOutcome) -> Option<f64> {
    out.reports
        .iter()
        .filter_map(|r| r.get("recovery_ms").and_then(Value::as_array))
        .flatten()
        .filter_map(Value::as_f64)
        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
}

pub(super) fn run_trial(
    args: &ChaosArgs,
    seed: u64,
    trial: u64,
    baselines: &Baselines,
    dir: &Path,
) -> Result<TrialResult> {
    let size = pick_size(seed, trial, &baselines.thresholds);
    let base = baselines.get(pick_app(seed, trial), &size)?;
    let (plan, phase) = draw(seed, trial, &base);
    let mut env = vec![
        ("REVERB_LOG".to_string(), plan.protocol.to_string()),
        ("REVERB_CKPT".to_string(), "rs".to_string()),
        // Unsurvivable cases end within this bound instead of the 30 s default.
        ("REVERB_REJOIN_TIMEOUT_MS".to_string(), "15000".to_string()),
    ];
    env.extend(plan.fault.env());
    env.extend(size.env());
    if plan.app == COLLECTIVE_APP {
        // Every trial of the collectives app logs collective-aware, whatever its fault.
        env.push(("REVERB_LOG_CAML".to_string(), "1".to_string()));
    }
    let spec = JobSpec {
        provider: args.provider_or("shm"),
        ranks: RANKS,
        ranks_per_node: RANKS_PER_NODE,
        respawn: plan.fault.respawns(),
        timeout_s: args.timeout,
        app: plan.app.to_string(),
        app_args: app_args(plan.app, &size),
        env,
        hosts: None,
        spares: Vec::new(),
        redundancy: plan.fault.redundancy().map(str::to_string),
        objects: plan.fault.objects(),
    };
    let job = job_command(&spec);
    let out = run_job(&spec, &dir.join(format!("trial-{trial}")), Duration::from_secs(30))?;
    let (outcome, fired, why) = classify(&plan, &base, &out, false);
    let recovery_ms = if outcome == Outcome::Survived { recovery_of(&out) } else { None };
    Ok(TrialResult {
        plan,
        size,
        phase,
        outcome,
        fired,
        recovery_ms,
        wall_s: out.wall.as_secs_f64(),
        why,
        dir: out.dir,
        job,
    })
}

/// The `reverb run` command line of a job, as a shell runs it (what `run_job` starts, the
/// report directory left out): a failed trial's job, to re-run without the campaign.
pub(super) fn job_command(spec: &JobSpec) -> String {
    let mut w: Vec<String> = vec![format!("REVERB_PROVIDER={}", spec.provider)];
    w.extend(spec.env.iter().map(|(k, v)| format!("{k}={v}")));
    w.push("reverb run".into());
    w.push(format!("-n {} --ranks-per-node {}", spec.ranks, spec.ranks_per_node));
    w.push(format!("--respawn {} --timeout {}", spec.respawn, spec.timeout_s));
    if let Some(h) = &spec.hosts {
        w.push(format!("--hosts {h}"));
    }
    if !spec.spares.is_empty() {
        w.push(format!("--spares {}", spec.spares.join(",")));
    }
    if let Some(r) = &spec.redundancy {
        w.push(format!("--redundancy {r}"));
    }
    if let Some((v, p)) = spec.objects {
        w.push(format!("--objects {v} --parallel-recovery {p}"));
    }
    w.push(format!("-- reverb app {}", spec.app));
    w.extend(spec.app_args.iter().cloned());
    w.join(" ")
}
