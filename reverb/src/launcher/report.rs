//! A launch from start to exit code: the bootstrap server and logger cores started, the ranks
//! spawned and watched, then the verdict printed and returned.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use reverb_transport::bootstrap::BootServer;

use super::logger_cores::LoggerCores;
use super::masking::{Masked, Masking};
use super::signals::{signal_name, SignalGuard};
use super::spawn::{abandon, join_handles, join_pumps, random_hex, spawn_rank, JobCtx, RankProc, RankStatus};
use super::teams::teams_of_nodes;
use super::verdict::{Causes, Verdict};
use super::watch::{Stop, Watch};
use super::{JobPart, LaunchOptions, LaunchReport, LaunchSpec, Respawn};

/// How long a launcher hosting the rendezvous for other launchers waits, once its own ranks are
/// done, for the other hosts' ranks to leave (they may still be reading the last collective).
const SERVE_LINGER: Duration = Duration::from_secs(60);

/// Runs the job with `opts`; reports its exit code and the respawns it took.
pub fn launch_report(spec: &LaunchSpec, opts: &LaunchOptions) -> Result<LaunchReport> {
    if spec.ranks == 0 {
        bail!("a job needs at least one rank");
    }
    if spec.ranks_per_node == 0 {
        bail!("ranks per node must be at least 1");
    }
    let part = opts.part.as_ref();
    let team_of_node = teams_of_nodes(spec, opts)?;
    if let Some(plan) = opts.objects {
        super::objects::check(spec, plan, opts)?;
        if team_of_node.is_some() {
            bail!("--objects: teams are not supported (a process is the failure unit)");
        }
    }
    if let Some(p) = part {
        check_part(spec, p, team_of_node.is_some())?;
    }
    let token = part.map_or_else(|| random_hex(32), |p| p.token.clone());
    let job_id = part.map_or_else(|| format!("rv{}", random_hex(6)), |p| p.job_id.clone());
    // Dropped last: after every process of the job was reaped, it removes what they left.
    let _files = super::hygiene::JobFiles::claim(&job_id);
    let server = match part {
        None => Some(BootServer::start("127.0.0.1:0", spec.ranks, &token)),
        Some(p) if p.serve => Some(BootServer::start(&p.root, spec.ranks, &token)),
        Some(_) => None,
    }
    .transpose()
    .context("starting the bootstrap server")?;
    let root = match (part, &server) {
        (Some(p), _) => p.root.clone(),
        (None, Some(s)) => s.local_addr().to_string(),
        (None, None) => bail!("no bootstrap server for a whole job"),
    };
    let loggers = LoggerCores::start(spec, opts, &job_id)?;
    let causes = Causes::default();
    let ctx = JobCtx {
        team_of_node,
        spec,
        ranks_per_node: spec.ranks_per_node.min(spec.ranks),
        local: part.map_or(0..spec.ranks, |p| p.local.clone()),
        first_incarnation: part.map_or(0, |p| p.first_incarnation),
        root,
        token,
        job_id,
        verbose: opts.verbose,
        loggers: loggers.as_ref(),
        masking: opts.redundancy.clone().map(|map| Masking::new(map, opts.masker.clone())),
        objects: opts.objects,
        causes: causes.clone(),
    };
    let _signals = SignalGuard::install();
    let start = Instant::now();
    let procs = match ctx.objects {
        Some(_) => super::objects::spawn_all(&ctx)?,
        None => spawn_all(&ctx)?,
    };

    let mut watch = Watch::new(&ctx, server.as_ref(), opts.respawn, start, procs);
    watch.run();
    let Watch { mut procs, stop, respawns, old_pumps, respawn_failed, masked, .. } = watch;
    join_pumps(&mut procs);
    join_handles(old_pumps);
    match server {
        // Other hosts' ranks may still be reading the last collective.
        Some(s) if part.is_some() && stop.is_none() => s.shutdown_graceful(SERVE_LINGER),
        s => drop(s),
    }
    if let Some(l) = loggers {
        l.finish(stop.is_none());
    }

    // Said once here: every surviving rank found the same loss (their lines were taken).
    let unrecoverable = stop.as_ref().and_then(|_| causes.summary());
    if let Some(cause) = &unrecoverable {
        eprintln!("reverb run: unrecoverable failure: {cause}");
    }
    let code = exit_code(stop.as_ref(), &procs, &respawns, respawn_failed.as_ref(), opts.respawn);
    if let Some(path) = &opts.report_json {
        let verdict = Verdict {
            code,
            stop: stop.as_ref(),
            procs: &procs,
            respawns: &respawns,
            respawn_failed: respawn_failed.as_ref(),
            respawn_limit: opts.respawn,
            masked: &masked,
            unrecoverable: unrecoverable.as_deref(),
        };
        let text = serde_json::to_string_pretty(&verdict.to_json())?;
        std::fs::write(path, text + "\n")
            .with_context(|| format!("writing the launch report {}", path.display()))?;
    }
    if opts.verbose {
        for p in &procs {
            eprintln!(
                "reverb run: {} [local rank {}, incarnation {}]",
                p.describe(),
                p.local_rank,
                p.incarnation
            );
        }
    }
    print_respawns(&respawns);
    print_masked(&masked);
    Ok(LaunchReport { code, respawns })
}

/// A part of a job: whole nodes inside the job, and no teams (they fail nodes together, which
/// needs the whole job in one launcher). Logger cores run per part (see `logger_cores`).
fn check_part(spec: &LaunchSpec, part: &JobPart, teams: bool) -> Result<()> {
    let rpn = spec.ranks_per_node.min(spec.ranks);
    let local = &part.local;
    if local.is_empty() || local.end > spec.ranks {
        bail!("local ranks {}-{} are not inside the job's 0-{}", local.start, local.end - 1, spec.ranks - 1);
    }
    if !local.start.is_multiple_of(rpn) || (!local.end.is_multiple_of(rpn) && local.end != spec.ranks) {
        bail!(
            "local ranks {}-{} are not whole nodes of {rpn} rank(s): a node runs under one launcher",
            local.start,
            local.end - 1
        );
    }
    if teams {
        bail!("teams under --respawn need the whole job in one launcher (not yet across hosts)");
    }
    Ok(())
}

/// Spawns this launcher's ranks at their first incarnation (0, or above it for ranks taking
/// over from a lost host); on a failure, kills those already started.
fn spawn_all(ctx: &JobCtx<'_>) -> Result<Vec<RankProc>> {
    let mut procs: Vec<RankProc> = Vec::with_capacity(ctx.local.len());
    for rank in ctx.local.clone() {
        match spawn_rank(ctx, rank, ctx.first_incarnation) {
            Ok(p) => procs.push(p),
            Err(e) => return Err(abandon(procs, e)),
        }
    }
    Ok(procs)
}

/// The job's exit code, with the reason printed: 0 when no stop; a failed rank's own code
/// (or 128 + its signal); 124 on timeout; 128 + a signal received.
fn exit_code(
    stop: Option<&Stop>,
    procs: &[RankProc],
    respawns: &[Respawn],
    respawn_failed: Option<&anyhow::Error>,
    respawn_limit: u32,
) -> i32 {
    let killed = procs.iter().filter(|p| p.status == RankStatus::Killed).count();
    let no_respawn_left =
        || format!("; no respawn left ({} of --respawn {respawn_limit} used)", respawns.len());
    match stop {
        None => 0,
        Some(Stop::RankFailed(i)) => {
            let p = &procs[*i];
            let others = if killed > 0 { format!("; killed {killed} other rank(s)") } else { String::new() };
            let why = match (respawn_failed, p.status) {
                (Some(e), _) => format!("; respawn failed: {e:#}"),
                (None, RankStatus::Signaled(_)) if respawn_limit > 0 => no_respawn_left(),
                _ => String::new(),
            };
            eprintln!("reverb run: {}{why}{others}", p.describe());
            match p.status {
                RankStatus::Exited(c) => c,
                RankStatus::Signaled(s) => 128 + s,
                _ => 1,
            }
        }
        Some(Stop::LoggerFailed { what, status }) => {
            let others = if killed > 0 { format!("; killed {killed} rank(s)") } else { String::new() };
            let why = match (respawn_failed, status.signal()) {
                (Some(e), _) => format!("; respawn failed: {e:#}"),
                (None, Some(_)) if respawn_limit > 0 => no_respawn_left(),
                (None, Some(_)) => {
                    "; its node cannot log any more (run with --respawn N to restart the node)".into()
                }
                (None, None) => "; its node cannot log any more".into(),
            };
            eprintln!("reverb run: {what}{why}{others}");
            logger_failed_code(*status)
        }
        Some(Stop::Timeout(t)) => {
            eprintln!("reverb run: timeout after {:.1} s; killed {killed} rank(s)", t.as_secs_f64());
            124
        }
        Some(Stop::Signal(s)) => {
            eprintln!("reverb run: received {}; killed {killed} rank(s)", signal_name(*s));
            128 + *s
        }
    }
}

/// A failed logger core's status as the job's code (never 0: the job failed).
fn logger_failed_code(status: ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(0), _) | (None, None) => 1,
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
    }
}

fn print_respawns(respawns: &[Respawn]) {
    if respawns.is_empty() {
        return;
    }
    let each: Vec<String> = respawns
        .iter()
        .map(|r| {
            format!(
                "node {}{} at +{:.3} s (incarnation {})",
                r.node,
                if r.nodes.len() > 1 {
                    format!(" with its team's nodes {:?}", r.nodes)
                } else {
                    String::new()
                },
                r.at.as_secs_f64(),
                r.incarnation
            )
        })
        .collect();
    eprintln!("reverb run: {} node respawn(s): {}", respawns.len(), each.join(", "));
}

fn print_masked(masked: &[Masked]) {
    if masked.is_empty() {
        return;
    }
    let each: Vec<String> = masked
        .iter()
        .map(|m| format!("rank {} (virtual rank {}) at +{:.3} s", m.rank, m.virtual_rank, m.at.as_secs_f64()))
        .collect();
    eprintln!("reverb run: {} copy death(s) masked: {}", masked.len(), each.join(", "));
}
