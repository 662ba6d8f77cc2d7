//! Spawning ranks: their environment, process group and parent-death signal, pinning per the
//! logger cores' plan, output pumps; and killing and reaping them.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rand::RngCore;
use reverb_transport::bootstrap::vars;

use super::logger_cores::LoggerCores;
use super::signals::signal_name;
use super::verdict::Causes;
use super::LaunchSpec;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RankStatus {
    Running,
    Exited(i32),
    Signaled(i32),
    /// Killed by the launcher after another failure, timeout or signal.
    Killed,
}

pub(super) struct RankProc {
    pub(super) rank: u32,
    pub(super) node: u32,
    pub(super) local_rank: u32,
    pub(super) incarnation: u32,
    pub(super) pid: u32,
    pub(super) child: Option<Child>,
    pub(super) status: RankStatus,
    pub(super) kill_sent: bool,
    pub(super) pumps: Vec<JoinHandle<()>>,
    /// An object living in another rank's process (`--objects`): that rank, whose child this
    /// entry follows (`objects::mirror`).
    pub(super) leader: Option<u32>,
}

impl RankProc {
    /// A running rank with no process behind it, for tests of the launcher's decisions.
    #[cfg(test)]
    pub(super) fn for_test(rank: u32) -> RankProc {
        RankProc {
            rank,
            node: rank,
            local_rank: 0,
            incarnation: 0,
            pid: 0,
            child: None,
            status: RankStatus::Running,
            kill_sent: false,
            pumps: Vec::new(),
            leader: None,
        }
    }

    /// Rank `rank` hosted as an object in this rank's process.
    pub(super) fn follower(&self, rank: u32, ranks_per_node: u32) -> RankProc {
        RankProc {
            rank,
            node: rank / ranks_per_node.max(1),
            local_rank: rank % ranks_per_node.max(1),
            incarnation: self.incarnation,
            pid: self.pid,
            child: None,
            status: RankStatus::Running,
            kill_sent: false,
            pumps: Vec::new(),
            leader: Some(self.rank),
        }
    }

    /// SIGKILLs the rank's process group (the rank and anything it forked).
    pub(super) fn kill(&mut self) {
        if self.status == RankStatus::Running && !self.kill_sent && self.leader.is_none() {
            if let Ok(pgid) = libc::pid_t::try_from(self.pid) {
                // The group leader is our unreaped child: its pgid cannot have been reused.
                super::os::kill_group(pgid);
            }
        }
        // An object dies with its process: its leader's kill signals the group.
        self.kill_sent |= self.status == RankStatus::Running;
    }

    pub(super) fn record(&mut self, st: ExitStatus) {
        self.status = if self.kill_sent {
            RankStatus::Killed
        } else if let Some(c) = st.code() {
            RankStatus::Exited(c)
        } else {
            RankStatus::Signaled(st.signal().unwrap_or(0))
        };
        self.child = None;
    }

    pub(super) fn describe(&self) -> String {
        let who = format!(
            "rank {} (node {}, pid {}, incarnation {})",
            self.rank, self.node, self.pid, self.incarnation
        );
        match self.status {
            RankStatus::Exited(c) => format!("{who} exited with status {c}"),
            RankStatus::Signaled(s) => format!("{who} was killed by signal {s} ({})", signal_name(s)),
            RankStatus::Killed => format!("{who} was killed by the launcher"),
            RankStatus::Running => format!("{who} is running"),
        }
    }
}

/// What every rank of one launch shares.
pub(super) struct JobCtx<'a> {
    pub(super) spec: &'a LaunchSpec,
    pub(super) ranks_per_node: u32,
    /// The ranks this launcher runs (all of them, or its part of the job).
    pub(super) local: std::ops::Range<u32>,
    /// The incarnation they start at.
    pub(super) first_incarnation: u32,
    pub(super) root: String,
    pub(super) token: String,
    pub(super) job_id: String,
    pub(super) verbose: bool,
    pub(super) loggers: Option<&'a LoggerCores>,
    /// With teams under `--respawn`: the team of every node (a failed node fails its team).
    pub(super) team_of_node: Option<Vec<u32>>,
    /// Under partial redundancy: which deaths are masked.
    pub(super) masking: Option<super::masking::Masking>,
    /// Processes hosting several ranks (`--objects`), restarted in parallel.
    pub(super) objects: Option<super::objects::ObjectsPlan>,
    /// Ranks' unrecoverable reports, which the launcher says once (see `verdict`).
    pub(super) causes: super::verdict::Causes,
}

pub(super) fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    rand::rngs::OsRng.fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Copies `src` to stdout/stderr line by line, optionally prefixed. Keeps draining after the
/// terminal goes away so that a rank never blocks on a full pipe.
fn pump(src: impl Read, rank: u32, to_stderr: bool, prefix: bool, causes: Option<Causes>) {
    const MAX_LINE: u64 = 64 * 1024;
    let mut r = BufReader::new(src);
    let mut line = Vec::new();
    let mut out = Vec::new();
    let mut broken = false;
    loop {
        line.clear();
        match r.by_ref().take(MAX_LINE).read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
        if broken || causes.as_ref().is_some_and(|c| c.take(rank, &line)) {
            continue;
        }
        out.clear();
        if prefix {
            let _ = write!(out, "[{rank}] ");
        }
        out.extend_from_slice(&line);
        if prefix && !line.ends_with(b"\n") {
            out.push(b'\n');
        }
        let res = if to_stderr {
            let mut e = std::io::stderr().lock();
            e.write_all(&out).and_then(|_| e.flush())
        } else {
            let mut o = std::io::stdout().lock();
            o.write_all(&out).and_then(|_| o.flush())
        };
        broken = res.is_err();
    }
}

/// The transport's count of the host's CPUs for the job (it decides whether waits spin).
const HOST_CPUS: &str = "REVERB_HOST_CPUS";

/// `REVERB_HOST_CPUS` for a rank: the CPUs the ranks are pinned to beside logger cores, else
/// those this launcher (or agent) may run on. Either way not the one CPU a pinned rank would
/// read as its host's count. None when the user set it (here or in the job's variables):
/// theirs goes through.
fn host_cpus(spec: &LaunchSpec, loggers: Option<&LoggerCores>) -> Option<String> {
    let set_by_user = matches!(reverb_transport::config::env_os(HOST_CPUS), Ok(Some(_)))
        || spec.env.iter().any(|(k, _)| k == HOST_CPUS);
    let cpus = match super::logger_cores::rank_cpus(loggers) {
        Some(n) => n,
        None => std::thread::available_parallelism().ok()?.get(),
    };
    (!set_by_user).then(|| cpus.to_string())
}

pub(super) fn spawn_rank(ctx: &JobCtx<'_>, rank: u32, incarnation: u32) -> Result<RankProc> {
    spawn_process(ctx, rank, incarnation, &[])
}

/// Starts rank `rank`'s process with `extra` variables besides the job's.
pub(super) fn spawn_process(
    ctx: &JobCtx<'_>,
    rank: u32,
    incarnation: u32,
    extra: &[(&'static str, String)],
) -> Result<RankProc> {
    let spec = ctx.spec;
    let rpn = ctx.ranks_per_node;
    let (node, local_rank) = (rank / rpn, rank % rpn);
    let mut ours: Vec<(&str, String)> = vec![
        (vars::RANK, rank.to_string()),
        (vars::SIZE, spec.ranks.to_string()),
        (vars::NODE, node.to_string()),
        (vars::LOCAL_RANK, local_rank.to_string()),
        (vars::RANKS_PER_NODE, rpn.to_string()),
        (vars::JOB_ID, ctx.job_id.clone()),
        (vars::INCARNATION, incarnation.to_string()),
        (vars::ROOT, ctx.root.clone()),
        (vars::JOB_TOKEN, ctx.token.clone()),
        (vars::BOOT_SERVER, "external".into()),
    ];
    ours.extend(extra.iter().cloned());
    if let Some(cpus) = host_cpus(spec, ctx.loggers) {
        ours.push((HOST_CPUS, cpus));
    }
    if ctx.verbose {
        let shown: Vec<String> = ours
            .iter()
            .map(|(k, v)| {
                if *k == vars::JOB_TOKEN {
                    format!("{k}=<{} chars, hidden>", v.len())
                } else {
                    format!("{k}={v}")
                }
            })
            .chain(spec.env.iter().map(|(k, v)| format!("{k}={v}")))
            .collect();
        eprintln!("reverb run: rank {rank}: {}", shown.join(" "));
    }

    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args)
        .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .envs(ours.iter().map(|(k, v)| (*k, v.as_str())))
        .envs(super::logger_cores::rank_env(ctx.loggers, rank))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // A rank dies with the launcher thread that spawned it.
    super::os::die_with_launcher(&mut cmd);
    let mut child =
        cmd.spawn().with_context(|| format!("spawning rank {rank}: {}", spec.program.display()))?;
    super::logger_cores::pin_rank(ctx.loggers, rank, child.id());
    let mut pumps = Vec::new();
    let prefix = spec.prefix_output;
    if let Some(out) = child.stdout.take() {
        pumps.push(std::thread::spawn(move || pump(out, rank, false, prefix, None)));
    }
    if let Some(err) = child.stderr.take() {
        let causes = Some(ctx.causes.clone());
        pumps.push(std::thread::spawn(move || pump(err, rank, true, prefix, causes)));
    }
    Ok(RankProc {
        rank,
        node,
        local_rank,
        incarnation,
        pid: child.id(),
        child: Some(child),
        status: RankStatus::Running,
        kill_sent: false,
        pumps,
        leader: None,
    })
}

/// A launch that could not start all its ranks: those started are killed, reaped and their
/// output drained; returns `error` to pass on.
pub(super) fn abandon(mut procs: Vec<RankProc>, error: anyhow::Error) -> anyhow::Error {
    kill_all(&mut procs);
    reap(&mut procs, Duration::from_secs(5));
    join_pumps(&mut procs);
    error
}

pub(super) fn kill_all(procs: &mut [RankProc]) {
    for p in procs.iter_mut() {
        p.kill();
    }
}

/// Waits (bounded) for every spawned rank to be reaped.
pub(super) fn reap(procs: &mut [RankProc], bound: Duration) {
    let deadline = Instant::now() + bound;
    while Instant::now() < deadline {
        let mut running = false;
        for p in procs.iter_mut() {
            if let Some(c) = p.child.as_mut() {
                match c.try_wait() {
                    Ok(Some(st)) => p.record(st),
                    _ => running = true,
                }
            }
        }
        if !running {
            super::objects::mirror(procs);
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Lets output threads finish (bounded: a stray grandchild may hold a pipe open).
pub(super) fn join_pumps(procs: &mut [RankProc]) {
    join_handles(procs.iter_mut().flat_map(|p| p.pumps.drain(..)).collect());
}

pub(super) fn join_handles(mut pumps: Vec<JoinHandle<()>>) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while !pumps.is_empty() && Instant::now() < deadline {
        pumps.retain(|h| !h.is_finished());
        std::thread::sleep(Duration::from_millis(5));
    }
    for h in pumps.into_iter().filter(|h| h.is_finished()) {
        let _ = h.join();
    }
}
