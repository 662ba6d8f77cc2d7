//! `reverb run --logger P`: one logger-core process per node (`reverb logger-core`), in a
//! transport job of their own (second bootstrap server, own token, job id `<job>-lg`), and the
//! cpu plan of the placement. Ranks get `REVERB_LOGGER_SEGMENT` to attach to their node's
//! logger; loggers stop (stdin closed) after the ranks finish, or are killed with the job.
//! A failed node's logger is restarted at the next incarnation (`LoggerCores::respawn`): it
//! rejoins the loggers' job, whose rendezvous was told its slot failed.
//!
//! A part of a job across hosts (a [`super::JobPart`], under `reverb agent`) starts only its
//! own nodes' loggers, placed on its host's cpus, at the part's first incarnation (a spare
//! taking over a lost host's nodes starts theirs above any the lost host reached). They join
//! the whole job's loggers' rendezvous, which the first host serves at the job root's host and
//! next port ([`loggers_root`]) with a token derived from the job's ([`loggers_token`]); the
//! job's controller marks a lost host's logger slots failed there.

use std::cell::RefCell;
use std::io::Write as _;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use reverb_logger::core::placement::{self, Placement, PlacementPlan};
use reverb_logger::core::{segment_base, segment_paths, vars as logvars};
use reverb_transport::bootstrap::{vars, BootServer};

use super::signals::signal_name;
use super::spawn::random_hex;
use super::{JobPart, LaunchOptions, LaunchSpec};

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
        let who =
            format!("the logger core of node {node} (pid {}, incarnation {})", self.pid, self.incarnation);
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
    /// Indexed by local rank and local node (a part's first node is its index 0).
    plan: PlacementPlan,
    ranks_per_node: u32,
    /// This launch's nodes: `first_node..first_node + local_nodes`.
    first_node: u32,
    local_nodes: u32,
    job_id: String,
    /// The loggers' rendezvous (ours, or the one the job's first host serves).
    root: String,
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
    /// The loggers' rendezvous when this launch hosts it; a part not serving the job has none.
    server: Option<BootServer>,
    /// It hosts the rendezvous for other launchers' loggers too: it lingers for them at the end.
    serves_part: bool,
}

impl LoggerCores {
    /// Starts this launch's node loggers (a part's: its own nodes, placed on its host's cpus,
    /// at the part's first incarnation), or nothing for `Placement::Off`. With `respawn` > 0
    /// they await a dead buddy's next incarnation instead of giving it up.
    pub fn start(spec: &LaunchSpec, opts: &LaunchOptions, job_id: &str) -> Result<Option<Self>> {
        let placement = opts.logger;
        if placement == Placement::Off {
            return Ok(None);
        }
        let rpn = spec.ranks_per_node.min(spec.ranks).max(1);
        let nodes = spec.ranks.div_ceil(rpn);
        if nodes < 2 {
            bail!("--logger {placement}: logger cores write each node's log to another node, and this job has one node (use --ranks-per-node)");
        }
        let part = opts.part.as_ref();
        let (local, first_incarnation) =
            part.map_or((0..spec.ranks, 0), |p| (p.local.clone(), p.first_incarnation));
        let cpus = reverb_transport::topo::Topology::discover()
            .map(|t| t.cpus())
            .or_else(|_| core_ids())
            .context("finding the cpus to place logger cores on")?;
        // A part plans over its own ranks only: the cpus are its host's.
        let plan = placement::plan(placement, &cpus, local.end - local.start, rpn)?;
        eprintln!("reverb run: logger cores: {}", plan.note);
        let (root, token, server) = rendezvous(part, nodes)?;
        let exe = match reverb_transport::config::env_path("REVERB_LOGGER_EXE")? {
            Some(p) => p,
            None => std::env::current_exe().context("locating the reverb binary for logger-core")?,
        };
        let cores = LoggerCores {
            plan,
            ranks_per_node: rpn,
            first_node: local.start / rpn,
            local_nodes: (local.end - local.start).div_ceil(rpn),
            job_id: job_id.to_string(),
            root,
            token,
            exe,
            nodes,
            verbose: opts.verbose,
            respawn: opts.respawn,
            env: spec.env.clone(),
            procs: RefCell::new(Vec::new()),
            pumps: RefCell::new(Vec::new()),
            serves_part: part.is_some_and(|p| p.serve),
            server,
        };
        for node in cores.local_node_ids() {
            // A node taken over from a lost host: its old logger left files behind if that
            // host shares this one's file system.
            remove_node_files(&segment_base(job_id, node));
            match cores.spawn(node, first_incarnation) {
                Ok(p) => cores.procs.borrow_mut().push(p),
                Err(e) => {
                    cores.kill();
                    return Err(e);
                }
            }
        }
        Ok(Some(cores))
    }

    fn local_node_ids(&self) -> std::ops::Range<u32> {
        self.first_node..self.first_node + self.local_nodes
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
            (vars::ROOT, self.root.clone()),
            (vars::JOB_TOKEN, self.token.clone()),
            (vars::BOOT_SERVER, "external".into()),
            (logvars::SEGMENT, segment_base(&self.job_id, node)),
            (logvars::LANES, self.ranks_per_node.to_string()),
            (logvars::PLACEMENT, placement.to_string()),
            (logvars::STOP_ON_EOF, "1".into()),
            (logvars::RESPAWN, self.respawn.to_string()),
        ];
        let local = (node - self.first_node) as usize;
        if let Some(cpu) = self.plan.logger_cpu.get(local).copied().flatten() {
            env.push((logvars::CPU, cpu.to_string()));
        }
        let mut cmd = Command::new(&self.exe);
        cmd.arg("logger-core")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // As a rank: a terminal's Ctrl-C reaches the launcher alone, which stops the job.
            .process_group(0);
        if self.verbose {
            cmd.arg("--summary");
        }
        // A logger dies with the launcher.
        super::os::die_with_launcher(&mut cmd);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("spawning the logger core of node {node}: {}", self.exe.display()))?;
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
        for (node, p) in self.local_node_ids().zip(self.procs.borrow_mut().iter_mut()) {
            if p.ended.is_some() {
                continue;
            }
            if let Ok(Some(st)) = p.child.try_wait() {
                p.ended = Some(st);
                if !p.kill_sent {
                    ended.push(LoggerEnd { node, status: st, what: p.describe(node) });
                }
            }
        }
        ended
    }

    /// A node failed: SIGKILLs its logger (if still running), tells the loggers'
    /// rendezvous its slot failed when this launch hosts it (otherwise the new incarnation
    /// supersedes the old slot there, whose connection dropped), clears its segment files and
    /// starts the logger again at the next incarnation (before the node's ranks, which wait
    /// for the segment). Returns the new incarnation.
    pub fn respawn(&self, node: u32, reason: &str) -> Result<u32> {
        let index = node
            .checked_sub(self.first_node)
            .filter(|i| *i < self.local_nodes)
            .with_context(|| format!("no logger core for node {node} in this launch"))?
            as usize;
        let mut procs = self.procs.borrow_mut();
        let p = procs.get_mut(index).with_context(|| format!("no logger core for node {node}"))?;
        if !p.kill_and_reap(Duration::from_secs(5)) {
            bail!("the logger core of node {node} (pid {}) did not die within 5 s of SIGKILL", p.pid);
        }
        let incarnation = p.incarnation;
        if let Some(server) = &self.server {
            server.mark_failed(node, incarnation, reason).with_context(|| {
                format!("telling the loggers' rendezvous that node {node}'s logger failed")
            })?;
        }
        remove_node_files(&segment_base(&self.job_id, node));
        drop(procs);
        let fresh = self.spawn(node, incarnation + 1)?;
        let mut procs = self.procs.borrow_mut();
        procs[index] = fresh;
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
        for node in self.local_node_ids() {
            remove_node_files(&segment_base(&self.job_id, node));
        }
    }

    /// After the ranks: a clean job lets loggers drain and exit (bounded), a failed one
    /// kills them. Returns false if a logger failed or had to be killed.
    pub fn finish(mut self, clean: bool) -> bool {
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
            for (node, p) in self.local_node_ids().zip(procs.iter_mut()) {
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
                        Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
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
        if let Some(server) = self.server.take().filter(|_| self.serves_part) {
            // Other hosts' loggers may still be stopping.
            server.shutdown_graceful(STOP_BOUND);
        }
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

/// The CPUs the plan pins this launch's ranks to, counted once each; None when it pins none.
/// With a dedicated logger core the ranks share the CPUs left: their host's count for them.
pub fn rank_cpus(cores: Option<&LoggerCores>) -> Option<usize> {
    let mut cpus: Vec<usize> = cores?.plan.rank_cpu.iter().flatten().copied().collect();
    cpus.sort_unstable();
    cpus.dedup();
    (!cpus.is_empty()).then_some(cpus.len())
}

/// Pins a spawned rank (every thread it has so far; later ones inherit) per the plan.
pub fn pin_rank(cores: Option<&LoggerCores>, rank: u32, pid: u32) {
    let local = |c: &LoggerCores| rank.checked_sub(c.first_node * c.ranks_per_node);
    let cpu = cores.and_then(|c| c.plan.rank_cpu.get(local(c)? as usize).copied().flatten());
    let Some(cpu) = cpu else { return };
    let tids: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_else(|_| vec![pid as i32]);
    for tid in tids {
        let pinned = super::os::pin_thread(tid, cpu);
        if let Err(e) = pinned {
            eprintln!("reverb run: pinning rank {rank} (tid {tid}) to cpu {cpu}: {e}");
        }
    }
}

/// The loggers' rendezvous of a job across launchers: the job's root host, the next port.
pub fn loggers_root(root: &str) -> Result<String> {
    let (host, port) =
        root.rsplit_once(':').with_context(|| format!("the job's root '{root}' is not HOST:PORT"))?;
    let port: u16 = port.parse().with_context(|| format!("the job's root '{root}': port"))?;
    let next = port
        .checked_add(1)
        .filter(|_| port != 0)
        .with_context(|| format!("the job's root '{root}': no port after it for the loggers' rendezvous"))?;
    Ok(format!("{host}:{next}"))
}

/// The loggers' token, derived from the job's (a logger is not a rank of the job).
pub fn loggers_token(job_token: &str) -> String {
    format!("{job_token}-lg")
}

/// Where this launch's loggers meet, their token, and the rendezvous if this launch hosts it:
/// its own (a whole job), or the job's loggers' rendezvous (a part; hosted by the serving one).
fn rendezvous(part: Option<&JobPart>, nodes: u32) -> Result<(String, String, Option<BootServer>)> {
    let Some(p) = part else {
        let token = random_hex(32);
        let server = serve_loggers("127.0.0.1:0", nodes, &token)?;
        return Ok((server.local_addr().to_string(), token, Some(server)));
    };
    let (root, token) = (loggers_root(&p.root)?, loggers_token(&p.token));
    let server = if p.serve { Some(serve_loggers(&root, nodes, &token)?) } else { None };
    Ok((root, token, server))
}

/// Starts the loggers' rendezvous for `nodes` loggers at `bind`.
pub fn serve_loggers(bind: &str, nodes: u32, token: &str) -> Result<BootServer> {
    BootServer::start(bind, nodes, token)
        .with_context(|| format!("starting the loggers' bootstrap server at {bind}"))
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
