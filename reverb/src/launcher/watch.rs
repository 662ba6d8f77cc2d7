//! The launch loop: ranks (and logger cores) reaped as they end, a rank or logger killed by a
//! signal failing its node (or team), which is respawned while `--respawn` allows; any other
//! failure, a timeout or SIGINT/SIGTERM stops the job. Under partial redundancy a copy killed
//! while another copy of its virtual rank runs is masked instead (`masking`).

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use reverb_transport::bootstrap::BootServer;

use super::masking::Masked;
use super::signals::{signal_name, take_signal};
use super::spawn::{kill_all, reap, spawn_rank, JobCtx, RankProc, RankStatus};
use super::teams::failure_unit_nodes;
use super::Respawn;

/// Why the job stopped early.
pub(super) enum Stop {
    RankFailed(usize),
    /// A logger core ended while its ranks ran (its node cannot log any more).
    LoggerFailed {
        what: String,
        status: ExitStatus,
    },
    Timeout(Duration),
    Signal(i32),
}

/// Wall-clock time of day (UTC) with milliseconds, for the respawn log.
fn clock() -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let (secs, ms) = (now.as_secs(), now.subsec_millis());
    format!("{:02}:{:02}:{:02}.{ms:03}Z", secs / 3600 % 24, secs / 60 % 60, secs % 60)
}

/// Ranks `first..first + count` of the node holding rank `rank`.
fn node_ranks(rank: u32, rpn: u32, ranks: u32) -> std::ops::Range<u32> {
    let first = rank / rpn * rpn;
    first..(first + rpn).min(ranks)
}

/// What failed a node.
struct NodeFailure {
    node: u32,
    /// The rank whose death failed the node (its first rank when its logger failed it).
    rank: u32,
    signal: i32,
    /// How it died, for the log ("rank 3 (...) was killed by signal 9 (SIGKILL)").
    what: String,
    /// Short reason for the rendezvous servers.
    reason: String,
}

fn dead_reason(rank: u32, signal: i32) -> String {
    format!("rank {rank} was killed by signal {signal} ({})", signal_name(signal))
}

/// A running launch: its ranks and what happened to them so far.
pub(super) struct Watch<'a> {
    ctx: &'a JobCtx<'a>,
    /// The rendezvous, when this launcher hosts it (a part of a job may not).
    server: Option<&'a BootServer>,
    /// Node respawns allowed in the job.
    respawn_limit: u32,
    start: Instant,
    pub(super) procs: Vec<RankProc>,
    pub(super) stop: Option<Stop>,
    kill_deadline: Option<Instant>,
    pub(super) respawns: Vec<Respawn>,
    /// Output pumps of ranks replaced by a respawn, joined at the end.
    pub(super) old_pumps: Vec<JoinHandle<()>>,
    pub(super) respawn_failed: Option<anyhow::Error>,
    /// Copies whose death was masked (partial redundancy).
    pub(super) masked: Vec<Masked>,
}

impl<'a> Watch<'a> {
    pub(super) fn new(
        ctx: &'a JobCtx<'a>,
        server: Option<&'a BootServer>,
        respawn_limit: u32,
        start: Instant,
        procs: Vec<RankProc>,
    ) -> Self {
        Watch {
            ctx,
            server,
            respawn_limit,
            start,
            procs,
            stop: None,
            kill_deadline: None,
            respawns: Vec::new(),
            old_pumps: Vec::new(),
            respawn_failed: None,
            masked: Vec::new(),
        }
    }

    /// Loops until every rank ended (or would not die after a stop).
    pub(super) fn run(&mut self) {
        loop {
            // First: a cancel that also reached the ranks or loggers (Slurm signals the whole
            // step) is the job's end, not failures to respawn.
            self.take_cancel();
            let signaled = self.reap_ranks();
            let mut failures = self.rank_failures(signaled);
            self.logger_failures(&mut failures);
            self.take_cancel();
            self.handle_failures(failures);
            if self.procs.iter().all(|p| p.status != RankStatus::Running) {
                break;
            }
            if let Some(t) =
                self.ctx.spec.timeout.filter(|t| self.stop.is_none() && self.start.elapsed() >= *t)
            {
                self.stop = Some(Stop::Timeout(t));
            }
            if self.stop.is_some() && self.kill_deadline.is_none() {
                kill_all(&mut self.procs);
                self.kill_deadline = Some(Instant::now() + Duration::from_secs(5));
            }
            if self.kill_deadline.is_some_and(|d| Instant::now() >= d) {
                eprintln!("reverb run: some ranks did not die within 5 s of SIGKILL; giving up on them");
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGINT/SIGTERM received (or a stop requested): the job stops.
    fn take_cancel(&mut self) {
        if self.stop.is_none() {
            let sig = take_signal();
            if sig != 0 {
                self.stop = Some(Stop::Signal(sig));
            }
        }
    }

    /// Records ranks that ended; returns those killed by a signal in this pass, each of which
    /// fails its node (respawn permitting) unless its death is masked. Any other failure
    /// stops the job.
    fn reap_ranks(&mut self) -> Vec<usize> {
        let mut signaled = Vec::new();
        for i in 0..self.procs.len() {
            let p = &mut self.procs[i];
            let Some(child) = p.child.as_mut() else { continue };
            match child.try_wait() {
                Ok(Some(st)) => {
                    p.record(st);
                    let failed = !matches!(p.status, RankStatus::Exited(0) | RankStatus::Killed);
                    if !failed || self.stop.is_some() || self.mask(i) {
                        continue;
                    }
                    if matches!(self.procs[i].status, RankStatus::Signaled(_)) && self.respawn_limit > 0 {
                        signaled.push(i);
                    } else {
                        self.stop = Some(Stop::RankFailed(i));
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    eprintln!("reverb run: waiting for rank {}: {e}", p.rank);
                }
            }
        }
        super::objects::mirror(&mut self.procs);
        signaled
    }

    /// Masks the death of rank `i` when it is a copy killed by a signal while another copy
    /// of its virtual rank runs: the rendezvous retires it and the job goes on.
    fn mask(&mut self, i: usize) -> bool {
        let Some(masking) = self.ctx.masking.as_ref() else { return false };
        let p = &self.procs[i];
        let RankStatus::Signaled(signal) = p.status else { return false };
        let decided = match self.server {
            Some(server) => {
                let Some((virtual_rank, live_mates)) =
                    masking.live_mates(p.rank, &self.procs, self.ctx.local.start)
                else {
                    return false;
                };
                let reason = format!("{}; masked by its copies {live_mates:?}", dead_reason(p.rank, signal));
                if let Err(e) = server.retire(p.rank, p.incarnation, &reason) {
                    eprintln!(
                        "reverb run: rank {}: retiring it at the rendezvous: {e}; failing it instead",
                        p.rank
                    );
                    return false;
                }
                Some((virtual_rank, live_mates))
            }
            // A part of a job: the controller sees every host's copies.
            None => masking.ask_controller(p.rank, p.incarnation, &dead_reason(p.rank, signal)),
        };
        let Some((virtual_rank, live_mates)) = decided else { return false };
        eprintln!(
            "reverb run: {} (+{:.3} s): {}, a copy of virtual rank {virtual_rank}: masked, the job goes \
             on with its copies {live_mates:?}",
            clock(),
            self.start.elapsed().as_secs_f64(),
            p.describe(),
        );
        let at = self.start.elapsed();
        self.masked.push(Masked { rank: p.rank, virtual_rank, signal, live_mates, at });
        true
    }

    /// The node failures of ranks killed by a signal (with the rank's index).
    fn rank_failures(&self, signaled: Vec<usize>) -> Vec<(NodeFailure, Option<usize>)> {
        signaled
            .into_iter()
            .map(|i| {
                let p = &self.procs[i];
                let signal = match p.status {
                    RankStatus::Signaled(s) => s,
                    _ => 0,
                };
                let failure = NodeFailure {
                    node: p.node,
                    rank: p.rank,
                    signal,
                    what: p.describe(),
                    reason: dead_reason(p.rank, signal),
                };
                (failure, Some(i))
            })
            .collect()
    }

    /// A logger core killed by a signal fails its node under `--respawn`; any other end of a
    /// logger core stops the job.
    fn logger_failures(&mut self, failures: &mut Vec<(NodeFailure, Option<usize>)>) {
        let Some(l) = self.ctx.loggers.filter(|_| self.stop.is_none()) else { return };
        for end in l.poll_ended() {
            match end.status.signal() {
                Some(signal) if self.respawn_limit > 0 => failures.push((
                    NodeFailure {
                        node: end.node,
                        rank: end.node * self.ctx.ranks_per_node,
                        signal,
                        reason: format!(
                            "its logger core was killed by signal {signal} ({})",
                            signal_name(signal)
                        ),
                        what: end.what,
                    },
                    None,
                )),
                _ if self.stop.is_none() => {
                    self.stop = Some(Stop::LoggerFailed { what: end.what, status: end.status });
                }
                _ => {}
            }
        }
    }

    /// Respawns each failed node once, while respawns are left; otherwise stops the job.
    fn handle_failures(&mut self, failures: Vec<(NodeFailure, Option<usize>)>) {
        let mut respawned_nodes: Vec<u32> = Vec::new();
        for (failure, rank_index) in failures {
            if self.stop.is_some() {
                break;
            }
            if respawned_nodes.contains(&failure.node) {
                continue; // a node-mate's (or its logger's) death already respawned this one
            }
            let fail = |what: String| match rank_index {
                Some(i) => Stop::RankFailed(i),
                None => Stop::LoggerFailed { what, status: ExitStatus::from_raw(failure.signal) },
            };
            if self.respawns.len() as u32 >= self.respawn_limit {
                self.stop = Some(fail(failure.what.clone()));
                break;
            }
            let left = self.respawn_limit - self.respawns.len() as u32 - 1;
            match self.respawn_node(&failure, left) {
                Ok(mut r) => {
                    r.by_logger = rank_index.is_none();
                    // A team mate's death in this pass is the same failure: one respawn.
                    respawned_nodes.extend_from_slice(&r.nodes);
                    self.respawns.push(r);
                }
                Err(e) => {
                    self.stop = Some(fail(failure.what.clone()));
                    self.respawn_failed = Some(e);
                }
            }
        }
    }

    /// Fails a node (with teams: every node of its team) and starts it again at the next
    /// incarnation: its ranks are SIGKILLed and, with logger cores, its logger too (a node
    /// failure takes both); the logger is started first, then the ranks. Ranks that already
    /// exited 0 are done and stay so.
    fn respawn_node(&mut self, failure: &NodeFailure, left: u32) -> Result<Respawn> {
        let ctx = self.ctx;
        let node = failure.node;
        let nodes = failure_unit_nodes(ctx, node);
        let members: Vec<u32> = nodes
            .iter()
            .flat_map(|&n| node_ranks(n * ctx.ranks_per_node, ctx.ranks_per_node, ctx.spec.ranks))
            .collect();
        let next = members.iter().map(|&r| self.proc(r).incarnation).max().unwrap_or(0) + 1;
        eprintln!(
            "reverb run: {} (+{:.3} s): {}; respawning {}{} at incarnation {next} \
             ({left} respawn(s) left after this one)",
            clock(),
            self.start.elapsed().as_secs_f64(),
            failure.what,
            self.describe_unit(node, &nodes, &members),
            if ctx.loggers.is_some() { " and its logger core" } else { "" },
        );
        self.fail_unit(failure, &nodes, &members)?;
        if let Some(loggers) = ctx.loggers {
            let reason = format!("node {node} failed: {}", failure.reason);
            for &n in &nodes {
                let incarnation = loggers.respawn(n, &reason)?;
                eprintln!("reverb run: node {n}: logger core started again at incarnation {incarnation}");
            }
        }
        let ranks: Vec<u32> =
            members.iter().copied().filter(|&r| self.proc(r).status != RankStatus::Exited(0)).collect();
        for &r in &ranks {
            let first = ctx.local.start;
            let p = &mut self.procs[(r - first) as usize];
            self.old_pumps.append(&mut p.pumps);
            if ctx.objects.is_none() {
                *p = spawn_rank(ctx, r, p.incarnation + 1)?;
            }
        }
        if let Some(plan) = ctx.objects {
            self.respawn_objects(node, &ranks, next, plan.helpers)?;
        }
        eprintln!(
            "reverb run: {} (+{:.3} s): {} respawned: ranks {ranks:?} at incarnation {next}",
            clock(),
            self.start.elapsed().as_secs_f64(),
            if nodes.len() > 1 { format!("nodes {nodes:?}") } else { format!("node {node}") },
        );
        Ok(Respawn {
            node,
            nodes,
            rank: failure.rank,
            signal: failure.signal,
            by_logger: false,
            logger_restarted: ctx.loggers.is_some(),
            ranks,
            incarnation: next,
            at: self.start.elapsed(),
        })
    }

    /// Restarts a failed process's objects `ranks` in `helpers` processes (parallel recovery).
    fn respawn_objects(&mut self, node: u32, ranks: &[u32], next: u32, helpers: u32) -> Result<()> {
        let first = self.ctx.local.start;
        for place in super::objects::placements(&self.procs, node, ranks, helpers) {
            if let Some(helper) = place.helper_of {
                eprintln!(
                    "reverb run: parallel recovery: ranks {:?} replay on cpu {} beside node {helper} (home: cpu {})",
                    place.ranks,
                    place.cpu,
                    place.home.unwrap_or_default()
                );
            }
            for p in super::objects::spawn_host(self.ctx, &place.ranks, next, place.cpu, place.home)? {
                let at = (p.rank - first) as usize;
                self.procs[at] = p;
            }
        }
        Ok(())
    }

    /// "node 2 (ranks 4-5)", or with teams "node 2 with its team 1 (nodes ..., ranks ...)".
    fn describe_unit(&self, node: u32, nodes: &[u32], members: &[u32]) -> String {
        match &self.ctx.team_of_node {
            Some(team_of) if nodes.len() > 1 => format!(
                "node {node} with its team {} (nodes {nodes:?}, ranks {members:?})",
                team_of.get(node as usize).copied().unwrap_or_default()
            ),
            _ => format!(
                "node {node} (ranks {}-{})",
                members.first().copied().unwrap_or_default(),
                members.last().copied().unwrap_or_default()
            ),
        }
    }

    /// SIGKILLs the unit's ranks, reaps them and tells the bootstrap server their slots failed.
    fn fail_unit(&mut self, failure: &NodeFailure, nodes: &[u32], members: &[u32]) -> Result<()> {
        let ctx = self.ctx;
        let node = failure.node;
        for &r in members {
            self.procs[(r - ctx.local.start) as usize].kill();
        }
        for &n in nodes {
            let range = node_ranks(n * ctx.ranks_per_node, ctx.ranks_per_node, ctx.spec.ranks);
            let local = (range.start - ctx.local.start) as usize..(range.end - ctx.local.start) as usize;
            reap(&mut self.procs[local], Duration::from_secs(5));
        }
        let reason = format!("node {node} failed: {}", failure.reason);
        for &r in members {
            let p = self.proc(r);
            if p.status == RankStatus::Running {
                bail!("rank {r} did not die within 5 s of SIGKILL; cannot respawn node {node}");
            }
            // A rendezvous on another host sees the connection drop; the respawned
            // incarnation supersedes the old one there.
            if let Some(server) = self.server {
                server
                    .mark_failed(r, p.incarnation, &reason)
                    .with_context(|| format!("telling the bootstrap server that rank {r} failed"))?;
            }
        }
        Ok(())
    }

    /// This launcher's process of `rank` (one of its own: nodes fail whole, and a part of a
    /// job is whole nodes).
    fn proc(&self, rank: u32) -> &RankProc {
        &self.procs[(rank - self.ctx.local.start) as usize]
    }
}
