//! `reverb run` (local launcher) and `reverb topo`.
//!
//! The launcher hosts the bootstrap server, spawns N ranks (each in its own process group),
//! groups them into simulated nodes of R consecutive ranks, prefixes their output with
//! `[rank] `, and kills the whole job as soon as one rank fails, on timeout, or on
//! SIGINT/SIGTERM.
//!
//! With `--respawn N` a rank killed by a signal fails its node instead: the launcher SIGKILLs
//! the node's other ranks, tells the bootstrap server those slots failed, and starts the
//! node's ranks again in place with `REVERB_INCARNATION` + 1, at most N times per job. A rank
//! that exits non-zero still fails the job: that is the program's own verdict.
//!
//! With teams (`REVERB_LOG_TEAMS` in the job's environment, the logger's team unit) and
//! `--respawn`, the team is the failure unit: a failed node fails every node of its team, all
//! are SIGKILLed and started again together at the next incarnation (one respawn). Teams must
//! be unions of whole nodes, at least two (checked at launch); logger cores, which pair nodes,
//! are refused with teams.
//!
//! With logger cores (`--logger`), a node failure takes the node's logger core too: it is
//! SIGKILLed with the ranks and started again at the next incarnation, before them. A logger
//! core killed by a signal fails its node the same way (under `--respawn`); without respawn,
//! or when it exits by itself while its ranks run, the job fails naming it.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use rand::RngCore;
use reverb_transport::bootstrap::{vars, BootServer};

/// What to launch.
#[derive(Debug, Clone)]
pub struct LaunchSpec {
    pub ranks: u32,
    pub ranks_per_node: u32,
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Extra variables for every rank (the launcher's own `REVERB_*` win over these).
    pub env: Vec<(String, String)>,
    /// Kill the job and fail after this long.
    pub timeout: Option<Duration>,
    /// Prefix each output line with `[rank] `.
    pub prefix_output: bool,
}

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Number of ranks.
    #[arg(short = 'n', long = "ranks", value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub ranks: u32,
    /// Ranks per simulated node (consecutive ranks share a node). Default: all on one node.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub ranks_per_node: Option<u32>,
    /// Kill every rank and fail after this many seconds.
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<f64>,
    /// Respawn a node whose rank is killed by a signal, at most N times in the job (0: the
    /// first failure fails the job).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub respawn: u32,
    /// Do not prefix output lines with `[rank] `.
    #[arg(long)]
    pub no_prefix: bool,
    /// Logger cores, one per node: dedicated, shared-pinned, shared-unpinned or off.
    #[arg(long, env = "REVERB_LOGGER", default_value = "off", value_name = "PLACEMENT")]
    pub logger: reverb_logger::core::Placement,
    /// The program to run and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "PROG")]
    pub command: Vec<String>,
}

/// `reverb run`: returns the job's exit code (0 when every rank exited 0).
pub fn run(args: RunArgs, verbose: bool) -> Result<i32> {
    let timeout = match args.timeout {
        None => None,
        Some(s) => Some(
            Duration::try_from_secs_f64(s)
                .ok()
                .filter(|d| !d.is_zero())
                .with_context(|| format!("--timeout {s}: expected a positive number of seconds"))?,
        ),
    };
    let Some((program, rest)) = args.command.split_first() else {
        bail!("reverb run: no program given");
    };
    let spec = LaunchSpec {
        ranks: args.ranks,
        ranks_per_node: args.ranks_per_node.unwrap_or(args.ranks),
        program: PathBuf::from(program),
        args: rest.to_vec(),
        env: Vec::new(),
        timeout,
        prefix_output: !args.no_prefix,
    };
    launch_report(&spec, &LaunchOptions { verbose, respawn: args.respawn, logger: args.logger })
        .map(|r| r.code)
}

/// Runs the job described by `spec`; 0 when every rank exited 0.
pub fn launch(spec: &LaunchSpec) -> Result<i32> {
    launch_with(spec, false)
}

/// How to run a job beyond what it is (`LaunchSpec`).
#[derive(Debug, Clone, Default)]
pub struct LaunchOptions {
    /// Print the environment given to each rank and how each ended.
    pub verbose: bool,
    /// Node respawns allowed in the job (0: fail fast).
    pub respawn: u32,
    /// Logger cores, one per node (off: none).
    pub logger: reverb_logger::core::Placement,
}

/// One node (or team) respawn.
#[derive(Debug, Clone)]
pub struct Respawn {
    /// The node that failed.
    pub node: u32,
    /// Every node respawned: `node`, or with teams each node of its team.
    pub nodes: Vec<u32>,
    /// The rank whose death failed the node, and how it died.
    pub rank: u32,
    pub signal: i32,
    /// The ranks started again, at `incarnation`.
    pub ranks: Vec<u32>,
    pub incarnation: u32,
    /// Since the launch started.
    pub at: Duration,
}

/// How a launch ended.
#[derive(Debug, Clone)]
pub struct LaunchReport {
    /// The job's exit code: 0 when every rank (last incarnation) exited 0.
    pub code: i32,
    pub respawns: Vec<Respawn>,
}

// ---- signals ----

/// Last SIGINT/SIGTERM received while a launch was running (0: none).
static SIGNALLED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    SIGNALLED.store(sig, Ordering::SeqCst);
}

/// Handlers are process-wide: installed by the first concurrent launch, restored by the last.
static HANDLERS: Mutex<(usize, Vec<(libc::c_int, libc::sigaction)>)> = Mutex::new((0, Vec::new()));

struct SignalGuard;

impl SignalGuard {
    fn install() -> SignalGuard {
        let mut g = HANDLERS.lock().unwrap_or_else(|p| p.into_inner());
        if g.0 == 0 {
            SIGNALLED.store(0, Ordering::SeqCst);
            for sig in [libc::SIGINT, libc::SIGTERM] {
                // SAFETY: sigaction with a zeroed struct plus a handler that only stores an
                // atomic; the old action is saved to be restored.
                unsafe {
                    let mut new: libc::sigaction = std::mem::zeroed();
                    new.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
                    new.sa_flags = libc::SA_RESTART;
                    libc::sigemptyset(&mut new.sa_mask);
                    let mut old: libc::sigaction = std::mem::zeroed();
                    if libc::sigaction(sig, &new, &mut old) == 0 {
                        g.1.push((sig, old));
                    }
                }
            }
        }
        g.0 += 1;
        SignalGuard
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        let mut g = HANDLERS.lock().unwrap_or_else(|p| p.into_inner());
        g.0 -= 1;
        if g.0 == 0 {
            for (sig, old) in g.1.drain(..) {
                // SAFETY: restores the action saved by `install`.
                unsafe {
                    libc::sigaction(sig, &old, std::ptr::null_mut());
                }
            }
        }
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}

// ---- per-rank state ----

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RankStatus {
    Running,
    Exited(i32),
    Signaled(i32),
    /// Killed by the launcher after another failure, timeout or signal.
    Killed,
}

struct RankProc {
    rank: u32,
    node: u32,
    local_rank: u32,
    incarnation: u32,
    pid: u32,
    child: Option<Child>,
    status: RankStatus,
    kill_sent: bool,
    pumps: Vec<JoinHandle<()>>,
}

impl RankProc {
    /// SIGKILLs the rank's process group (the rank and anything it forked).
    fn kill(&mut self) {
        if self.status == RankStatus::Running && !self.kill_sent {
            if let Ok(pgid) = libc::pid_t::try_from(self.pid) {
                // SAFETY: plain syscall; the group leader is our unreaped child, so its pgid
                // cannot have been reused.
                unsafe {
                    libc::killpg(pgid, libc::SIGKILL);
                }
            }
            self.kill_sent = true;
        }
    }

    fn record(&mut self, st: ExitStatus) {
        self.status = if self.kill_sent {
            RankStatus::Killed
        } else if let Some(c) = st.code() {
            RankStatus::Exited(c)
        } else {
            RankStatus::Signaled(st.signal().unwrap_or(0))
        };
        self.child = None;
    }

    fn describe(&self) -> String {
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
struct JobCtx<'a> {
    spec: &'a LaunchSpec,
    ranks_per_node: u32,
    root: String,
    token: String,
    job_id: String,
    verbose: bool,
    loggers: Option<&'a logger_cores::LoggerCores>,
    /// With teams under `--respawn`: the team of every node (a failed node fails its team).
    team_of_node: Option<Vec<u32>>,
}

/// The teams of a job run with `--respawn` (`REVERB_LOG_TEAMS` in `spec.env`, else in the
/// launcher's environment), as the team of every node; `None` without teams. Teams that are
/// not unions of whole nodes, a single team, or logger cores with teams are refused.
fn teams_of_nodes(spec: &LaunchSpec, opts: &LaunchOptions) -> Result<Option<Vec<u32>>> {
    use reverb_logger::team::{Teams, TEAMS_VAR};
    let from_spec = spec.env.iter().rev().find(|(k, _)| k == TEAMS_VAR).map(|(_, v)| v.clone());
    let Some(text) = from_spec.or_else(|| std::env::var(TEAMS_VAR).ok()) else { return Ok(None) };
    if opts.respawn == 0 {
        return Ok(None);
    }
    let teams = Teams::from_spec(&text).with_context(|| format!("{TEAMS_VAR}={text:?}"))?;
    let rpn = spec.ranks_per_node.min(spec.ranks);
    let node_of_rank: Vec<u32> = (0..spec.ranks).map(|r| r / rpn).collect();
    teams.check_whole_nodes(&node_of_rank).with_context(|| {
        format!(
            "{TEAMS_VAR}={text:?} with --respawn: a failed node fails its whole team, so each team \
             must be a union of whole nodes ({} ranks, {rpn} per node)",
            spec.ranks
        )
    })?;
    if opts.logger != reverb_logger::core::Placement::Off {
        bail!(
            "{TEAMS_VAR} with --respawn and --logger {}: unsupported, logger cores pair nodes and \
             a team's log could stay inside the team; run teams without logger cores",
            opts.logger
        );
    }
    let nodes = spec.ranks.div_ceil(rpn);
    (0..nodes)
        .map(|n| teams.team_of(n * rpn).with_context(|| format!("node {n} has no team in {TEAMS_VAR}")))
        .collect::<Result<Vec<u32>>>()
        .map(Some)
}

/// The nodes that fail together with `node`: its team's, or itself alone.
fn failure_unit_nodes(ctx: &JobCtx<'_>, node: u32) -> Vec<u32> {
    match &ctx.team_of_node {
        Some(team_of) => match team_of.get(node as usize) {
            Some(&team) => (0..team_of.len() as u32).filter(|&n| team_of[n as usize] == team).collect(),
            None => vec![node],
        },
        None => vec![node],
    }
}

fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    rand::rngs::OsRng.fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Copies `src` to stdout/stderr line by line, optionally prefixed. Keeps draining after the
/// terminal goes away so that a rank never blocks on a full pipe.
fn pump(src: impl Read, rank: u32, to_stderr: bool, prefix: bool) {
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
        if broken {
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

fn spawn_rank(ctx: &JobCtx<'_>, rank: u32, incarnation: u32) -> Result<RankProc> {
    let spec = ctx.spec;
    let rpn = ctx.ranks_per_node;
    let (node, local_rank) = (rank / rpn, rank % rpn);
    let ours: Vec<(&str, String)> = vec![
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
        .envs(logger_cores::rank_env(ctx.loggers, rank))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // SAFETY: the closure runs between fork and exec and calls only async-signal-safe
    // functions (getppid, prctl, raise). A rank dies with the launcher thread that spawned it.
    let parent = unsafe { libc::getpid() };
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            if libc::getppid() != parent {
                libc::raise(libc::SIGKILL);
            }
            Ok(())
        });
    }
    let mut child =
        cmd.spawn().with_context(|| format!("spawning rank {rank}: {}", spec.program.display()))?;
    logger_cores::pin_rank(ctx.loggers, rank, child.id());
    let mut pumps = Vec::new();
    let prefix = spec.prefix_output;
    if let Some(out) = child.stdout.take() {
        pumps.push(std::thread::spawn(move || pump(out, rank, false, prefix)));
    }
    if let Some(err) = child.stderr.take() {
        pumps.push(std::thread::spawn(move || pump(err, rank, true, prefix)));
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
    })
}

/// Why the job stopped early.
enum Stop {
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

/// Fails a node (with teams: every node of its team) and starts it again at the next
/// incarnation: its ranks are SIGKILLed and, with logger cores, its logger too (a node failure
/// takes both); the logger is started first, then the ranks. Ranks that already exited 0 are
/// done and stay so.
#[allow(clippy::too_many_arguments)]
fn respawn_node(
    ctx: &JobCtx<'_>,
    server: &BootServer,
    procs: &mut [RankProc],
    failure: &NodeFailure,
    old_pumps: &mut Vec<JoinHandle<()>>,
    start: Instant,
    left: u32,
) -> Result<Respawn> {
    let node = failure.node;
    let nodes = failure_unit_nodes(ctx, node);
    let members: Vec<u32> = nodes
        .iter()
        .flat_map(|&n| node_ranks(n * ctx.ranks_per_node, ctx.ranks_per_node, ctx.spec.ranks))
        .collect();
    let next = members.iter().map(|&r| procs[r as usize].incarnation).max().unwrap_or(0) + 1;
    let what = match &ctx.team_of_node {
        Some(team_of) if nodes.len() > 1 => format!(
            "node {node} with its team {} (nodes {nodes:?}, ranks {members:?})",
            team_of.get(node as usize).copied().unwrap_or_default()
        ),
        _ => format!(
            "node {node} (ranks {}-{})",
            members.first().copied().unwrap_or_default(),
            members.last().copied().unwrap_or_default()
        ),
    };
    eprintln!(
        "reverb run: {} (+{:.3} s): {}; respawning {what}{} at incarnation {next} \
         ({left} respawn(s) left after this one)",
        clock(),
        start.elapsed().as_secs_f64(),
        failure.what,
        if ctx.loggers.is_some() { " and its logger core" } else { "" },
    );
    for &r in &members {
        procs[r as usize].kill();
    }
    for &n in &nodes {
        let range = node_ranks(n * ctx.ranks_per_node, ctx.ranks_per_node, ctx.spec.ranks);
        reap(&mut procs[range.start as usize..range.end as usize], Duration::from_secs(5));
    }
    let reason = format!("node {node} failed: {}", failure.reason);
    for &r in &members {
        let p = &procs[r as usize];
        if p.status == RankStatus::Running {
            bail!("rank {r} did not die within 5 s of SIGKILL; cannot respawn node {node}");
        }
        server
            .mark_failed(r, p.incarnation, &reason)
            .with_context(|| format!("telling the bootstrap server that rank {r} failed"))?;
    }
    if let Some(loggers) = ctx.loggers {
        for &n in &nodes {
            let incarnation = loggers.respawn(n, &reason)?;
            eprintln!("reverb run: node {n}: logger core started again at incarnation {incarnation}");
        }
    }
    let mut ranks = Vec::new();
    for &r in &members {
        let p = &mut procs[r as usize];
        if p.status == RankStatus::Exited(0) {
            continue;
        }
        old_pumps.append(&mut p.pumps);
        *p = spawn_rank(ctx, r, p.incarnation + 1)?;
        ranks.push(r);
    }
    eprintln!(
        "reverb run: {} (+{:.3} s): {} respawned: ranks {ranks:?} at incarnation {next}",
        clock(),
        start.elapsed().as_secs_f64(),
        if nodes.len() > 1 { format!("nodes {nodes:?}") } else { format!("node {node}") },
    );
    Ok(Respawn {
        node,
        nodes,
        rank: failure.rank,
        signal: failure.signal,
        ranks,
        incarnation: next,
        at: start.elapsed(),
    })
}

fn dead_reason(rank: u32, signal: i32) -> String {
    format!("rank {rank} was killed by signal {signal} ({})", signal_name(signal))
}

/// As [`launch`]; `verbose` prints the environment given to each rank.
pub fn launch_with(spec: &LaunchSpec, verbose: bool) -> Result<i32> {
    launch_report(spec, &LaunchOptions { verbose, ..LaunchOptions::default() }).map(|r| r.code)
}

/// As [`launch_with`], with one logger core per node placed as `logger` says.
pub fn launch_logged(
    spec: &LaunchSpec,
    verbose: bool,
    logger: reverb_logger::core::Placement,
) -> Result<i32> {
    launch_report(spec, &LaunchOptions { verbose, logger, ..LaunchOptions::default() }).map(|r| r.code)
}

/// Runs the job with `opts`; reports its exit code and the respawns it took.
pub fn launch_report(spec: &LaunchSpec, opts: &LaunchOptions) -> Result<LaunchReport> {
    let verbose = opts.verbose;
    let logger = opts.logger;
    if spec.ranks == 0 {
        bail!("a job needs at least one rank");
    }
    if spec.ranks_per_node == 0 {
        bail!("ranks per node must be at least 1");
    }
    let token = random_hex(32);
    let job_id = format!("rv{}", random_hex(6));
    let server =
        BootServer::start("127.0.0.1:0", spec.ranks, &token).context("starting the bootstrap server")?;
    let team_of_node = teams_of_nodes(spec, opts)?;
    let loggers = logger_cores::LoggerCores::start(spec, logger, &job_id, verbose, opts.respawn)?;
    let ctx = JobCtx {
        team_of_node,
        spec,
        ranks_per_node: spec.ranks_per_node.min(spec.ranks),
        root: server.local_addr().to_string(),
        token,
        job_id,
        verbose,
        loggers: loggers.as_ref(),
    };
    let _signals = SignalGuard::install();
    let start = Instant::now();

    let mut procs: Vec<RankProc> = Vec::with_capacity(spec.ranks as usize);
    for rank in 0..spec.ranks {
        match spawn_rank(&ctx, rank, 0) {
            Ok(p) => procs.push(p),
            Err(e) => {
                kill_all(&mut procs);
                reap(&mut procs, Duration::from_secs(5));
                join_pumps(&mut procs);
                return Err(e);
            }
        }
    }

    let mut stop: Option<Stop> = None;
    let mut kill_deadline: Option<Instant> = None;
    let mut respawns: Vec<Respawn> = Vec::new();
    let mut old_pumps: Vec<JoinHandle<()>> = Vec::new();
    let mut respawn_failed: Option<anyhow::Error> = None;
    loop {
        // Ranks killed by a signal in this pass: each fails its node (respawn permitting).
        let mut signaled: Vec<usize> = Vec::new();
        for (i, p) in procs.iter_mut().enumerate() {
            let Some(child) = p.child.as_mut() else { continue };
            match child.try_wait() {
                Ok(Some(st)) => {
                    p.record(st);
                    let failed = !matches!(p.status, RankStatus::Exited(0) | RankStatus::Killed);
                    if failed && stop.is_none() {
                        if matches!(p.status, RankStatus::Signaled(_)) && opts.respawn > 0 {
                            signaled.push(i);
                        } else {
                            stop = Some(Stop::RankFailed(i));
                        }
                    }
                }
                Ok(None) => {}
                Err(e) => {
                    eprintln!("reverb run: waiting for rank {}: {e}", p.rank);
                }
            }
        }
        // Failed nodes: a rank killed by a signal, or the node's logger core killed by one.
        let mut failures: Vec<(NodeFailure, Option<usize>)> = signaled
            .into_iter()
            .map(|i| {
                let p = &procs[i];
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
            .collect();
        if let Some(l) = ctx.loggers.filter(|_| stop.is_none()) {
            for end in l.poll_ended() {
                match end.status.signal() {
                    Some(signal) if opts.respawn > 0 => failures.push((
                        NodeFailure {
                            node: end.node,
                            rank: end.node * ctx.ranks_per_node,
                            signal,
                            reason: format!(
                                "its logger core was killed by signal {signal} ({})",
                                signal_name(signal)
                            ),
                            what: end.what,
                        },
                        None,
                    )),
                    _ if stop.is_none() => {
                        stop = Some(Stop::LoggerFailed { what: end.what, status: end.status });
                    }
                    _ => {}
                }
            }
        }
        let mut respawned_nodes: Vec<u32> = Vec::new();
        for (failure, rank_index) in failures {
            if stop.is_some() {
                break;
            }
            if respawned_nodes.contains(&failure.node) {
                continue; // a node-mate's (or its logger's) death already respawned this one
            }
            let fail = |what: String| match rank_index {
                Some(i) => Stop::RankFailed(i),
                None => Stop::LoggerFailed { what, status: ExitStatus::from_raw(failure.signal) },
            };
            if respawns.len() as u32 >= opts.respawn {
                stop = Some(fail(failure.what.clone()));
                break;
            }
            let left = opts.respawn - respawns.len() as u32 - 1;
            match respawn_node(&ctx, &server, &mut procs, &failure, &mut old_pumps, start, left) {
                Ok(r) => {
                    // A team mate's death in this pass is the same failure: one respawn.
                    respawned_nodes.extend_from_slice(&r.nodes);
                    respawns.push(r);
                }
                Err(e) => {
                    stop = Some(fail(failure.what.clone()));
                    respawn_failed = Some(e);
                }
            }
        }
        if procs.iter().all(|p| p.status != RankStatus::Running) {
            break;
        }
        if stop.is_none() {
            let sig = SIGNALLED.swap(0, Ordering::SeqCst);
            if sig != 0 {
                stop = Some(Stop::Signal(sig));
            } else if let Some(t) = spec.timeout.filter(|t| start.elapsed() >= *t) {
                stop = Some(Stop::Timeout(t));
            }
        }
        if stop.is_some() && kill_deadline.is_none() {
            kill_all(&mut procs);
            kill_deadline = Some(Instant::now() + Duration::from_secs(5));
        }
        if kill_deadline.is_some_and(|d| Instant::now() >= d) {
            eprintln!("reverb run: some ranks did not die within 5 s of SIGKILL; giving up on them");
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    join_pumps(&mut procs);
    join_handles(old_pumps);
    drop(server);
    if let Some(l) = loggers {
        l.finish(stop.is_none());
    }

    let killed = procs.iter().filter(|p| p.status == RankStatus::Killed).count();
    let code = match stop {
        None => 0,
        Some(Stop::RankFailed(i)) => {
            let p = &procs[i];
            let others = if killed > 0 { format!("; killed {killed} other rank(s)") } else { String::new() };
            let why = match (&respawn_failed, p.status) {
                (Some(e), _) => format!("; respawn failed: {e:#}"),
                (None, RankStatus::Signaled(_)) if opts.respawn > 0 => {
                    format!("; no respawn left ({} of --respawn {} used)", respawns.len(), opts.respawn)
                }
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
            let why = match (&respawn_failed, status.signal()) {
                (Some(e), _) => format!("; respawn failed: {e:#}"),
                (None, Some(_)) if opts.respawn > 0 => {
                    format!("; no respawn left ({} of --respawn {} used)", respawns.len(), opts.respawn)
                }
                (None, Some(_)) => {
                    "; its node cannot log any more (run with --respawn N to restart the node)".into()
                }
                (None, None) => "; its node cannot log any more".into(),
            };
            eprintln!("reverb run: {what}{why}{others}");
            match (status.code(), status.signal()) {
                (Some(0), _) | (None, None) => 1,
                (Some(c), _) => c,
                (None, Some(s)) => 128 + s,
            }
        }
        Some(Stop::Timeout(t)) => {
            eprintln!("reverb run: timeout after {:.1} s; killed {killed} rank(s)", t.as_secs_f64());
            124
        }
        Some(Stop::Signal(s)) => {
            eprintln!("reverb run: received {}; killed {killed} rank(s)", signal_name(s));
            128 + s
        }
    };
    if verbose {
        for p in &procs {
            eprintln!(
                "reverb run: {} [local rank {}, incarnation {}]",
                p.describe(),
                p.local_rank,
                p.incarnation
            );
        }
    }
    if !respawns.is_empty() {
        eprintln!(
            "reverb run: {} node respawn(s): {}",
            respawns.len(),
            respawns
                .iter()
                .map(|r| format!(
                    "node {}{} at +{:.3} s (incarnation {})",
                    r.node,
                    if r.nodes.len() > 1 {
                        format!(" with its team's nodes {:?}", r.nodes)
                    } else {
                        String::new()
                    },
                    r.at.as_secs_f64(),
                    r.incarnation
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(LaunchReport { code, respawns })
}

fn kill_all(procs: &mut [RankProc]) {
    for p in procs.iter_mut() {
        p.kill();
    }
}

/// Waits (bounded) for every spawned rank to be reaped.
fn reap(procs: &mut [RankProc], bound: Duration) {
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
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Lets output threads finish (bounded: a stray grandchild may hold a pipe open).
fn join_pumps(procs: &mut [RankProc]) {
    join_handles(procs.iter_mut().flat_map(|p| p.pumps.drain(..)).collect());
}

fn join_handles(mut pumps: Vec<JoinHandle<()>>) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while !pumps.is_empty() && Instant::now() < deadline {
        pumps.retain(|h| !h.is_finished());
        std::thread::sleep(Duration::from_millis(5));
    }
    for h in pumps.into_iter().filter(|h| h.is_finished()) {
        let _ = h.join();
    }
}

// ---- logger cores (issue 4) ----

/// `reverb run --logger P`: one logger-core process per node (`reverb logger-core`), in a
/// transport job of their own (second bootstrap server, own token, job id `<job>-lg`), and the
/// cpu plan of the placement. Ranks get `REVERB_LOGGER_SEGMENT` to attach to their node's
/// logger; loggers stop (stdin closed) after the ranks finish, or are killed with the job.
/// A failed node's logger is restarted at the next incarnation (`LoggerCores::respawn`): it
/// rejoins the loggers' job, whose rendezvous was told its slot failed.
pub mod logger_cores {
    use std::cell::RefCell;
    use std::io::Write as _;
    use std::os::unix::process::ExitStatusExt;
    use std::path::PathBuf;
    use std::process::{Child, Command, ExitStatus, Stdio};
    use std::thread::JoinHandle;
    use std::time::{Duration, Instant};

    use anyhow::{bail, Context, Result};
    use reverb_logger::core::placement::{self, Placement, PlacementPlan};
    use reverb_logger::core::{segment_base, segment_paths, vars as logvars};
    use reverb_transport::bootstrap::{vars, BootServer};

    use super::{random_hex, signal_name, LaunchSpec};

    /// How long loggers get to drain, flush and exit after the ranks finished.
    const STOP_BOUND: Duration = Duration::from_secs(30);

    /// One node's logger-core process.
    struct LoggerProc {
        child: Child,
        pid: u32,
        incarnation: u32,
        /// Killed by the launcher (job end, or its node failed): its end is expected.
        kill_sent: bool,
        ended: Option<ExitStatus>,
    }

    impl LoggerProc {
        fn describe(&self, node: u32) -> String {
            let who = format!(
                "the logger core of node {node} (pid {}, incarnation {})",
                self.pid, self.incarnation
            );
            match self.ended {
                Some(st) => match (st.code(), st.signal()) {
                    (Some(c), _) => format!("{who} exited with status {c}"),
                    (None, Some(s)) => format!("{who} was killed by signal {s} ({})", signal_name(s)),
                    _ => format!("{who} ended ({st})"),
                },
                None => format!("{who} is running"),
            }
        }

        /// SIGKILLs it (once) and waits, bounded, for it to be reaped.
        fn kill_and_reap(&mut self, bound: Duration) -> bool {
            if self.ended.is_some() {
                return true;
            }
            if !self.kill_sent {
                let _ = self.child.kill();
                self.kill_sent = true;
            }
            let deadline = Instant::now() + bound;
            loop {
                match self.child.try_wait() {
                    Ok(Some(st)) => {
                        self.ended = Some(st);
                        return true;
                    }
                    Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                    _ => return false,
                }
            }
        }
    }

    /// A logger core that ended while the job ran, not killed by the launcher.
    pub struct LoggerEnd {
        pub node: u32,
        pub status: ExitStatus,
        /// "the logger core of node N (pid P, incarnation I) was killed by signal S (...)".
        pub what: String,
    }

    pub struct LoggerCores {
        plan: PlacementPlan,
        ranks_per_node: u32,
        job_id: String,
        token: String,
        exe: PathBuf,
        nodes: u32,
        verbose: bool,
        respawn: u32,
        env: Vec<(String, String)>,
        /// Interior mutability: the launch loop holds shared references (through its job
        /// context) and still respawns loggers.
        procs: RefCell<Vec<LoggerProc>>,
        pumps: RefCell<Vec<JoinHandle<()>>>,
        server: BootServer,
    }

    impl LoggerCores {
        /// Starts the node loggers, or nothing for `Placement::Off`. With `respawn` > 0 they
        /// await a dead buddy's next incarnation instead of giving it up.
        pub fn start(
            spec: &LaunchSpec,
            placement: Placement,
            job_id: &str,
            verbose: bool,
            respawn: u32,
        ) -> Result<Option<Self>> {
            if placement == Placement::Off {
                return Ok(None);
            }
            let rpn = spec.ranks_per_node.min(spec.ranks).max(1);
            let nodes = spec.ranks.div_ceil(rpn);
            if nodes < 2 {
                bail!("--logger {placement}: logger cores write each node's log to another node, and this job has one node (use --ranks-per-node)");
            }
            let cpus = reverb_transport::topo::Topology::discover()
                .map(|t| t.cpus())
                .or_else(|_| core_ids())
                .context("finding the cpus to place logger cores on")?;
            let plan = placement::plan(placement, &cpus, spec.ranks, rpn)?;
            eprintln!("reverb run: logger cores: {}", plan.note);
            let token = random_hex(32);
            let server = BootServer::start("127.0.0.1:0", nodes, &token)
                .context("starting the loggers' bootstrap server")?;
            let exe = match std::env::var_os("REVERB_LOGGER_EXE") {
                Some(p) => p.into(),
                None => std::env::current_exe().context("locating the reverb binary for logger-core")?,
            };
            let cores = LoggerCores {
                plan,
                ranks_per_node: rpn,
                job_id: job_id.to_string(),
                token,
                exe,
                nodes,
                verbose,
                respawn,
                env: spec.env.clone(),
                procs: RefCell::new(Vec::new()),
                pumps: RefCell::new(Vec::new()),
                server,
            };
            for node in 0..nodes {
                match cores.spawn(node, 0) {
                    Ok(p) => cores.procs.borrow_mut().push(p),
                    Err(e) => {
                        cores.kill();
                        return Err(e);
                    }
                }
            }
            Ok(Some(cores))
        }

        fn spawn(&self, node: u32, incarnation: u32) -> Result<LoggerProc> {
            let placement = self.plan.placement;
            let mut env: Vec<(&str, String)> = vec![
                (vars::RANK, node.to_string()),
                (vars::SIZE, self.nodes.to_string()),
                (vars::NODE, node.to_string()),
                (vars::LOCAL_RANK, "0".into()),
                (vars::RANKS_PER_NODE, "1".into()),
                (vars::JOB_ID, format!("{}-lg", self.job_id)),
                (vars::INCARNATION, incarnation.to_string()),
                (vars::ROOT, self.server.local_addr().to_string()),
                (vars::JOB_TOKEN, self.token.clone()),
                (vars::BOOT_SERVER, "external".into()),
                (logvars::SEGMENT, segment_base(&self.job_id, node)),
                (logvars::LANES, self.ranks_per_node.to_string()),
                (logvars::PLACEMENT, placement.to_string()),
                (logvars::STOP_ON_EOF, "1".into()),
                (logvars::RESPAWN, self.respawn.to_string()),
            ];
            if let Some(cpu) = self.plan.logger_cpu.get(node as usize).copied().flatten() {
                env.push((logvars::CPU, cpu.to_string()));
            }
            let mut cmd = Command::new(&self.exe);
            cmd.arg("logger-core")
                .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            if self.verbose {
                cmd.arg("--summary");
            }
            // SAFETY: between fork and exec only async-signal-safe calls (prctl, getppid,
            // raise): a logger dies with the launcher.
            let parent = unsafe { libc::getpid() };
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
                    if libc::getppid() != parent {
                        libc::raise(libc::SIGKILL);
                    }
                    Ok(())
                });
            }
            let mut child = cmd.spawn().with_context(|| {
                format!("spawning the logger core of node {node}: {}", self.exe.display())
            })?;
            let tag = format!("logger {node}");
            let mut pumps = self.pumps.borrow_mut();
            if let Some(out) = child.stdout.take() {
                let tag = tag.clone();
                pumps.push(std::thread::spawn(move || pump_tagged(out, &tag, false)));
            }
            if let Some(err) = child.stderr.take() {
                pumps.push(std::thread::spawn(move || pump_tagged(err, &tag, true)));
            }
            Ok(LoggerProc { pid: child.id(), child, incarnation, kill_sent: false, ended: None })
        }

        /// Loggers that ended since the last call without the launcher killing them (a clean
        /// exit while ranks still run is reported too: its ranks lost their logger).
        pub fn poll_ended(&self) -> Vec<LoggerEnd> {
            let mut ended = Vec::new();
            for (node, p) in self.procs.borrow_mut().iter_mut().enumerate() {
                if p.ended.is_some() {
                    continue;
                }
                if let Ok(Some(st)) = p.child.try_wait() {
                    p.ended = Some(st);
                    if !p.kill_sent {
                        ended.push(LoggerEnd {
                            node: node as u32,
                            status: st,
                            what: p.describe(node as u32),
                        });
                    }
                }
            }
            ended
        }

        /// A node failed: SIGKILLs its logger (if still running), tells the loggers'
        /// rendezvous its slot failed, clears its segment files and starts the logger again
        /// at the next incarnation (before the node's ranks, which wait for the segment).
        /// Returns the new incarnation.
        pub fn respawn(&self, node: u32, reason: &str) -> Result<u32> {
            let mut procs = self.procs.borrow_mut();
            let p =
                procs.get_mut(node as usize).with_context(|| format!("no logger core for node {node}"))?;
            if !p.kill_and_reap(Duration::from_secs(5)) {
                bail!("the logger core of node {node} (pid {}) did not die within 5 s of SIGKILL", p.pid);
            }
            let incarnation = p.incarnation;
            self.server.mark_failed(node, incarnation, reason).with_context(|| {
                format!("telling the loggers' rendezvous that node {node}'s logger failed")
            })?;
            remove_node_files(&segment_base(&self.job_id, node));
            drop(procs);
            let fresh = self.spawn(node, incarnation + 1)?;
            let mut procs = self.procs.borrow_mut();
            procs[node as usize] = fresh;
            Ok(incarnation + 1)
        }

        fn kill(&self) {
            for p in self.procs.borrow_mut().iter_mut() {
                if !p.kill_and_reap(Duration::from_secs(5)) {
                    eprintln!("reverb run: the logger core pid {} did not die within 5 s of SIGKILL", p.pid);
                }
            }
            self.remove_segments();
        }

        fn remove_segments(&self) {
            for node in 0..self.nodes {
                remove_node_files(&segment_base(&self.job_id, node));
            }
        }

        /// After the ranks: a clean job lets loggers drain and exit (bounded), a failed one
        /// kills them. Returns false if a logger failed or had to be killed.
        pub fn finish(self, clean: bool) -> bool {
            if !clean {
                self.kill();
                return true;
            }
            let mut ok = true;
            {
                let mut procs = self.procs.borrow_mut();
                for p in procs.iter_mut() {
                    if let Some(mut stdin) = p.child.stdin.take() {
                        let _ = stdin.flush();
                    }
                }
                let deadline = Instant::now() + STOP_BOUND;
                for (node, p) in procs.iter_mut().enumerate() {
                    loop {
                        let status = match p.ended {
                            Some(st) => Ok(Some(st)),
                            None => p.child.try_wait(),
                        };
                        match status {
                            Ok(Some(st)) if st.success() => break,
                            Ok(Some(st)) => {
                                eprintln!("reverb run: the logger core of node {node} ended with {st}");
                                ok = false;
                                break;
                            }
                            Ok(None) if Instant::now() < deadline => {
                                std::thread::sleep(Duration::from_millis(5))
                            }
                            _ => {
                                eprintln!("reverb run: the logger core of node {node} did not stop within {STOP_BOUND:?}; killed");
                                let _ = p.child.kill();
                                let _ = p.child.wait();
                                ok = false;
                                break;
                            }
                        }
                    }
                }
            }
            let deadline = Instant::now() + Duration::from_secs(2);
            while self.pumps.borrow().iter().any(|h| !h.is_finished()) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            self.remove_segments();
            ok
        }
    }

    impl Drop for LoggerCores {
        fn drop(&mut self) {
            let running = self
                .procs
                .get_mut()
                .iter_mut()
                .any(|p| p.ended.is_none() && matches!(p.child.try_wait(), Ok(None)));
            if running {
                self.kill();
            }
        }
    }

    /// A node's segment files, and the ring snapshots its logger left (a killed logger does
    /// not clean up: its successor's clients must not read them).
    fn remove_node_files(base: &str) {
        let (ctl, detq) = segment_paths(base);
        std::fs::remove_file(ctl).ok();
        std::fs::remove_file(detq).ok();
        let base = std::path::Path::new(base);
        let (Some(dir), Some(name)) = (base.parent(), base.file_name()) else { return };
        let prefix = format!("{}.hosted-node", name.to_string_lossy());
        if let Ok(entries) = std::fs::read_dir(dir) {
            for entry in entries.flatten() {
                if entry.file_name().to_string_lossy().starts_with(&prefix) {
                    std::fs::remove_file(entry.path()).ok();
                }
            }
        }
    }

    /// Environment for `rank`: its node's segment.
    pub fn rank_env(cores: Option<&LoggerCores>, rank: u32) -> Vec<(String, String)> {
        let Some(c) = cores else { return Vec::new() };
        vec![
            (logvars::SEGMENT.to_string(), segment_base(&c.job_id, rank / c.ranks_per_node)),
            (logvars::PLACEMENT.to_string(), c.plan.placement.to_string()),
        ]
    }

    /// Pins a spawned rank (every thread it has so far; later ones inherit) per the plan.
    pub fn pin_rank(cores: Option<&LoggerCores>, rank: u32, pid: u32) {
        let Some(cpu) = cores.and_then(|c| c.plan.rank_cpu.get(rank as usize).copied().flatten()) else {
            return;
        };
        let tids: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
            .unwrap_or_else(|_| vec![pid as i32]);
        for tid in tids {
            // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET indexes inside it (cpu
            // comes from the host's cpu list, below CPU_SETSIZE); sched_setaffinity only reads it.
            let rc = unsafe {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu, &mut set);
                libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set)
            };
            if rc != 0 {
                eprintln!(
                    "reverb run: pinning rank {rank} (tid {tid}) to cpu {cpu}: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
    }

    /// Copies a logger's output line by line, prefixed `[logger N] `.
    fn pump_tagged(src: impl std::io::Read, tag: &str, to_stderr: bool) {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(src).lines() {
            let Ok(line) = line else { break };
            if to_stderr {
                eprintln!("[{tag}] {line}");
            } else {
                println!("[{tag}] {line}");
            }
        }
    }

    fn core_ids() -> Result<Vec<usize>> {
        let n = std::thread::available_parallelism().context("counting cpus")?.get();
        Ok((0..n).collect())
    }
}
