//! Over-decomposition (`--objects V`): each process hosts V consecutive ranks as threads
//! (`reverb_runtime::run_objects`), pinned to one core, its processing element (PE). The
//! process is the node, the failure unit: a SIGKILL takes its V objects.
//!
//! Parallel recovery (`--parallel-recovery P`, seed 000 §2.5): a failed process's objects
//! are restarted round-robin in P processes: one on the failed PE's own core, the others on
//! the cores of the P - 1 least loaded live PEs (CPU time so far), whose own objects wait
//! for the restarted ones during the replay. Each restarted object replays beside the
//! helper's, then moves back to its home core after its first checkpoint (the runtime's
//! `go_home`). The launcher keeps one entry per rank: the first rank of each process holds
//! the child; the others follow its fate (`mirror`).

use anyhow::{bail, Result};

use super::spawn::{abandon, spawn_process, JobCtx, RankProc, RankStatus};
use super::LaunchSpec;

/// `--objects` and `--parallel-recovery`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObjectsPlan {
    /// Ranks (objects) per process.
    pub per_process: u32,
    /// Processes a failed process's objects restart in (1: all in one, on its own core).
    pub helpers: u32,
}

/// The launch shapes objects run with: whole processes of `per_process` ranks, one launcher,
/// no logger cores, no redundancy, no teams.
pub(super) fn check(spec: &LaunchSpec, plan: ObjectsPlan, opts: &super::LaunchOptions) -> Result<()> {
    let v = plan.per_process;
    if v == 0 || plan.helpers == 0 {
        bail!("--objects and --parallel-recovery take at least 1");
    }
    if !spec.ranks.is_multiple_of(v) || spec.ranks_per_node != v {
        bail!(
            "--objects {v}: the job's {} ranks must be whole processes of {v} (and nodes of {v})",
            spec.ranks
        );
    }
    if opts.part.is_some() || opts.redundancy.is_some() || opts.logger != reverb_logger::core::Placement::Off
    {
        bail!("--objects runs under one launcher, without --redundancy or logger cores (not yet)");
    }
    if plan.helpers > spec.ranks / v {
        bail!("--parallel-recovery {}: the job has only {} processes", plan.helpers, spec.ranks / v);
    }
    Ok(())
}

/// The cores this launcher may run on (its affinity), in order.
fn cpus() -> Vec<usize> {
    let set = rustix::thread::sched_getaffinity(None).ok();
    let cpus: Vec<usize> =
        (0..rustix::thread::CpuSet::MAX_CPU).filter(|&c| set.as_ref().is_some_and(|s| s.is_set(c))).collect();
    if cpus.is_empty() {
        vec![0]
    } else {
        cpus
    }
}

/// The core of `node`'s processing element: the cores in turn.
fn pe_cpu(node: u32) -> usize {
    let cpus = cpus();
    cpus[node as usize % cpus.len()]
}

/// Starts one process hosting `ranks` (one node's, or part of it) pinned to `cpu`; `home`:
/// they are a parallel recovery's immigrants and go home to that core.
pub(super) fn spawn_host(
    ctx: &JobCtx<'_>,
    ranks: &[u32],
    incarnation: u32,
    cpu: usize,
    home: Option<usize>,
) -> Result<Vec<RankProc>> {
    let Some((&first, rest)) = ranks.split_first() else { return Ok(Vec::new()) };
    let list: Vec<String> = ranks.iter().map(u32::to_string).collect();
    let mut extra = vec![("REVERB_OBJECT_RANKS", list.join(",")), ("REVERB_OBJECT_CPU", cpu.to_string())];
    if let Some(h) = home {
        extra.push(("REVERB_OBJECT_HOME_CPU", h.to_string()));
    }
    let leader = spawn_process(ctx, first, incarnation, &extra)?;
    let followers = rest.iter().map(|&r| leader.follower(r, ctx.ranks_per_node)).collect::<Vec<_>>();
    Ok(std::iter::once(leader).chain(followers).collect())
}

/// Every node's process at the first incarnation.
pub(super) fn spawn_all(ctx: &JobCtx<'_>) -> Result<Vec<RankProc>> {
    let rpn = ctx.ranks_per_node;
    let mut procs = Vec::with_capacity(ctx.local.len());
    for node in ctx.local.start / rpn..ctx.local.end.div_ceil(rpn) {
        let ranks: Vec<u32> = (node * rpn..((node + 1) * rpn).min(ctx.local.end)).collect();
        match spawn_host(ctx, &ranks, ctx.first_incarnation, pe_cpu(node), None) {
            Ok(host) => procs.extend(host),
            Err(e) => return Err(abandon(procs, e)),
        }
    }
    Ok(procs)
}

/// A follower takes the fate of the process it lives in once that process ended.
pub(super) fn mirror(procs: &mut [RankProc]) {
    for i in 0..procs.len() {
        let Some(leader) = procs[i].leader else { continue };
        if procs[i].status != RankStatus::Running {
            continue;
        }
        let pid = procs[i].pid;
        let ended = procs.iter().find(|p| p.rank == leader && p.pid == pid).map(|p| (p.status, p.kill_sent));
        if let Some((status, kill_sent)) = ended.filter(|(s, _)| *s != RankStatus::Running) {
            procs[i].status = status;
            procs[i].kill_sent |= kill_sent;
        }
    }
}

/// CPU time (clock ticks) process `pid` used so far: its load.
fn cpu_ticks(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return u64::MAX };
    // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
    let fields: Vec<&str> = stat.rsplit_once(')').map_or(vec![], |(_, f)| f.split_whitespace().collect());
    let tick = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    tick(11) + tick(12)
}

/// One process of a restart: its ranks, its core, and their home core if it is a helper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Placement {
    pub(super) ranks: Vec<u32>,
    pub(super) cpu: usize,
    pub(super) home: Option<usize>,
    /// The live node whose core it shares (None: the failed node's own).
    pub(super) helper_of: Option<u32>,
}

/// Where `node`'s `ranks` restart: round-robin over its own core and P - 1 helpers, live
/// nodes taken least loaded first (their processes' CPU time) among those whose core has the
/// fewest groups so far, so the replay spreads over distinct cores while there are any.
pub(super) fn placements(procs: &[RankProc], node: u32, ranks: &[u32], helpers: u32) -> Vec<Placement> {
    let home = pe_cpu(node);
    let mut load: Vec<(u64, u32)> = Vec::new();
    for p in procs.iter().filter(|p| p.leader.is_none() && p.node != node && p.status == RankStatus::Running)
    {
        match load.iter_mut().find(|(_, n)| *n == p.node) {
            Some(entry) => entry.0 = entry.0.saturating_add(cpu_ticks(p.pid)),
            None => load.push((cpu_ticks(p.pid), p.node)),
        }
    }
    load.sort();
    let groups = (helpers as usize).min(ranks.len()).max(1);
    let mut used = vec![home];
    let mut taken: Vec<u32> = Vec::new();
    (0..groups)
        .map(|g| {
            let helper = if g == 0 { None } else { pick_helper(&load, &mut taken, &used) };
            let cpu = helper.map_or(home, pe_cpu);
            used.push(cpu);
            Placement {
                ranks: ranks.iter().copied().skip(g).step_by(groups).collect(),
                cpu,
                home: helper.map(|_| home),
                helper_of: helper,
            }
        })
        .collect()
}

/// The next helper: of the nodes not yet taken (all again once each was), the least loaded
/// on the least used core.
fn pick_helper(load: &[(u64, u32)], taken: &mut Vec<u32>, used: &[usize]) -> Option<u32> {
    if load.iter().all(|(_, n)| taken.contains(n)) {
        taken.clear();
    }
    let uses = |n: u32| used.iter().filter(|&&c| c == pe_cpu(n)).count();
    let node = load.iter().filter(|(_, n)| !taken.contains(n)).min_by_key(|(_, n)| uses(*n))?.1;
    taken.push(node);
    Some(node)
}
