//! The logger core: one process per node. It creates the node segment, joins the loggers'
//! transport job, hosts the log rings of the nodes that log to it, and loops:
//! drain the determinant queue and the payload lanes into its buddy's ring (one-sided puts),
//! poll completions, publish the durable watermarks, trim on request, heartbeat.
//!
//! Heartbeat: every `heartbeat / 4` each logger puts its loop counter into a word of every
//! related logger's registered heartbeat region (word index = sender node). A related logger
//! whose word has not changed for `heartbeat`, or that the transport reports dead (PeerDead,
//! failed puts), is reported dead: in the segment's verdict table (and `BuddyState` when it
//! is the buddy) and on stderr.
//!
//! Respawn (`REVERB_LOGGER_RESPAWN`): a dead buddy is awaited (`BUDDY_REJOINING`, bounded by
//! `REVERB_LOGGER_REJOIN_TIMEOUT_S`). Every logger polls the rendezvous for respawned
//! loggers (non-blocking, every 10 ms) and reconnects; with a related one it trades a hello
//! (tagged send: heartbeat region, the ring hosted for the receiver). A respawned logger
//! starts from hellos instead of the collective exchange. The ring a dead logger hosted
//! died with it: its client writes the records it kept since the last trim into the new one.
//!
//! Shutdown: on stop (stdin EOF from the launcher, or the segment's stop word) the logger
//! drains its queues and flushes its ring, writes `STOPPED` as its last heartbeat, then stays
//! until every node it hosts a ring for has stopped (or died), so no ring vanishes under a
//! writer. Every phase is bounded.

use std::collections::VecDeque;
use std::io::Read;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use reverb_transport::{
    Access, Bootstrap, CompletionKind, OpId, PeerState, Provider, Rank, RecvBuffer, Region, RemoteRegion,
    Rma, Signal, Source, Tag, TagMatch, TransportError,
};

use super::placement::Placement;
use super::segment::{self, unix_ms, DeathCause, NodeSegment, NodeVerdict, Status};
use super::{env_parse, segment_paths, vars, CoreError, DEFAULT_HEARTBEAT};
use crate::buddy::BuddyMap;
use crate::determinant::Determinant;
use crate::detqueue::DetQueue;
use crate::error::LogError;
use crate::logring::{self, LogRingWriter, RecordKind};

/// The last heartbeat value of a logger that stopped cleanly.
const STOPPED: u64 = u64::MAX;
/// Determinants per ring record at most.
const MAX_BATCH: u64 = 1024;
/// Frames taken from one lane per loop iteration, so one rank cannot starve the others.
const FRAMES_PER_LANE: usize = 32;

#[derive(Debug, Clone)]
pub struct LoggerCoreConfig {
    /// Base path of the node segment (`REVERB_LOGGER_SEGMENT`).
    pub segment_base: String,
    /// Payload lanes (the node's ranks).
    pub lanes: u64,
    pub lane_bytes: u64,
    pub detq_entries: u64,
    /// Data bytes of each hosted ring.
    pub ring_bytes: usize,
    pub heartbeat: Duration,
    pub placement: Placement,
    pub cpu: Option<usize>,
    pub stop_on_eof: bool,
    pub dump_dir: Option<PathBuf>,
    /// Bound of the drain at stop and of waiting for the nodes it hosts to stop.
    pub drain_timeout: Duration,
    /// The launcher respawns failed nodes: a dead related logger is awaited back.
    pub expect_rejoin: bool,
    /// How long a dead related logger is awaited back (and a hello awaited).
    pub rejoin_timeout: Duration,
}

impl LoggerCoreConfig {
    pub fn from_env() -> Result<Self, CoreError> {
        let segment_base = std::env::var(vars::SEGMENT)
            .map_err(|_| CoreError::Config(format!("{} is not set (the launcher sets it)", vars::SEGMENT)))?;
        let lanes = match env_parse::<u64>(vars::LANES)? {
            Some(n) => n,
            None => env_parse::<u64>(reverb_transport::bootstrap::vars::RANKS_PER_NODE)?.unwrap_or(1),
        };
        let cfg = LoggerCoreConfig {
            segment_base,
            lanes,
            lane_bytes: env_parse(vars::LANE_BYTES)?.unwrap_or(1 << 20),
            detq_entries: env_parse(vars::DETQ_ENTRIES)?.unwrap_or(1 << 16),
            ring_bytes: env_parse(vars::RING_BYTES)?.unwrap_or(16 << 20),
            heartbeat: Duration::from_millis(
                env_parse(vars::HEARTBEAT_MS)?.unwrap_or(DEFAULT_HEARTBEAT.as_millis() as u64),
            ),
            placement: env_parse(vars::PLACEMENT)?.unwrap_or(Placement::SharedUnpinned),
            cpu: env_parse(vars::CPU)?,
            stop_on_eof: env_parse::<u8>(vars::STOP_ON_EOF)?.unwrap_or(0) != 0,
            dump_dir: std::env::var_os(vars::DUMP_DIR).map(PathBuf::from),
            drain_timeout: Duration::from_secs(10),
            expect_rejoin: env_parse::<u32>(vars::RESPAWN)?.unwrap_or(0) > 0,
            rejoin_timeout: Duration::from_secs(env_parse(vars::REJOIN_TIMEOUT_S)?.unwrap_or(30)),
        };
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<(), CoreError> {
        if self.heartbeat < Duration::from_millis(20) {
            return Err(CoreError::Config(format!("{}: at least 20 ms", vars::HEARTBEAT_MS)));
        }
        if self.ring_bytes == 0
            || !self.ring_bytes.is_multiple_of(8)
            || (self.ring_bytes as u64) < 2 * self.lane_bytes
        {
            return Err(CoreError::Config(format!(
                "{}={} must be a multiple of 8 and at least twice {}={} (a frame must always fit)",
                vars::RING_BYTES,
                self.ring_bytes,
                vars::LANE_BYTES,
                self.lane_bytes
            )));
        }
        Ok(())
    }
}

/// What a logger core did, returned when it exits.
#[derive(Debug, Clone, Default)]
pub struct LoggerSummary {
    pub node: Rank,
    pub buddy: Rank,
    pub determinants: u64,
    pub payloads: u64,
    pub ring_bytes_written: u64,
    pub buddy_dead: bool,
    /// What could not be made durable (buddy dead, or the drain bound passed).
    pub leftover_determinants: u64,
    pub leftover_payload_bytes: u64,
    /// Times the buddy came back (respawned) and the log was written again into its ring.
    pub buddy_rejoins: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PeerLife {
    Alive,
    Dead,
    Stopped,
    /// A (new) incarnation whose hello has not come yet.
    Awaiting,
}

/// What this logger knows of one related logger (its buddy, or a node it hosts a ring for).
struct Watched {
    node: Rank,
    /// None until its hello (or the start-up exchange) gave it.
    heartbeat_region: Option<RemoteRegion>,
    last_value: u64,
    last_change: Instant,
    last_change_wall: SystemTime,
    life: PeerLife,
    /// When `life` last changed.
    since: Instant,
    incarnation: u32,
    /// The incarnation our hello went to (u32::MAX: given up on it).
    hello_sent: Option<u32>,
}

impl Watched {
    fn given_up(&self) -> bool {
        self.hello_sent == Some(u32::MAX)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Running,
    Draining(Instant),
    Parting(Instant),
}

/// A node's logger core: the segment exists from `create` on, so ranks can attach and
/// enqueue while the loggers' job is still forming.
pub struct LoggerCore {
    cfg: LoggerCoreConfig,
    segment: NodeSegment,
    detq: DetQueue,
    stop: Arc<AtomicBool>,
}

impl LoggerCore {
    /// Pins (if asked), then creates the determinant queue and the node segment.
    pub fn create(cfg: LoggerCoreConfig) -> Result<Self, CoreError> {
        cfg.validate()?;
        if let Some(cpu) = cfg.cpu {
            reverb_transport::topo::pin_current_thread(cpu)?;
        }
        let (ctl, detq_path) = segment_paths(&cfg.segment_base);
        // The queue first: clients open the segment, then the queue.
        let detq = DetQueue::create(&detq_path, cfg.detq_entries)?;
        let segment = NodeSegment::create(&ctl, cfg.lanes, cfg.lane_bytes)?;
        segment.set(Status::LoggerPid, u64::from(std::process::id()));
        segment.set(Status::State, segment::STATE_STARTING);
        let stop = Arc::new(AtomicBool::new(false));
        if cfg.stop_on_eof {
            let flag = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("reverb-logger-stdin".into())
                .spawn(move || {
                    let mut buf = [0u8; 256];
                    let mut stdin = std::io::stdin();
                    loop {
                        match stdin.read(&mut buf) {
                            Ok(0) => break,
                            Ok(_) => {}
                            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                            Err(_) => break,
                        }
                    }
                    flag.store(true, Ordering::Release);
                })
                .map_err(|e| CoreError::io("spawning the stdin watcher", e))?;
        }
        Ok(LoggerCore { cfg, segment, detq, stop })
    }

    /// A flag that, once set, makes the loop drain, flush and exit.
    pub fn stop_handle(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.stop)
    }

    /// Creates the core from the environment, joins the loggers' job and runs until stopped.
    pub fn run_from_env() -> Result<LoggerSummary, CoreError> {
        let core = LoggerCore::create(LoggerCoreConfig::from_env()?)?;
        let joined = (|| -> Result<_, CoreError> {
            let mut boot = reverb_transport::bootstrap::TcpBootstrap::connect_from_env()?;
            let config = reverb_transport::TransportConfig::from_env()?;
            let provider = reverb_transport::open(&config, &mut boot)?;
            Ok((boot, provider))
        })();
        match joined {
            Ok((mut boot, mut provider)) => core.run(&mut boot, provider.as_mut()),
            Err(e) => {
                core.segment.set(Status::State, segment::STATE_FAILED);
                core.remove_files();
                Err(e)
            }
        }
    }

    /// Runs the logger loop on an opened loggers' job (rank = node index) until stopped.
    pub fn run(
        self,
        boot: &mut dyn Bootstrap,
        provider: &mut dyn Provider,
    ) -> Result<LoggerSummary, CoreError> {
        let result = self.run_inner(boot, provider);
        let state = if result.is_ok() { segment::STATE_EXITED } else { segment::STATE_FAILED };
        self.segment.set(Status::State, state);
        self.remove_files();
        result
    }

    /// The loggers' start-up exchange (a collective): every contribution, or the logger lost
    /// during it (`Err`) when the launcher respawns failed nodes. A logger already lost or
    /// back at a newer incarnation before it begins is taken as lost during it too: its new
    /// incarnation never joins the collective. `REVERB_LOGGER_FAULT_STARTUP=NODE` (tests):
    /// that node's first incarnation SIGKILLs itself here, once its ranks have attached.
    fn start_up_exchange(
        &self,
        boot: &mut dyn Bootstrap,
        mine: &[u8],
    ) -> Result<std::result::Result<Vec<Vec<u8>>, Rank>, CoreError> {
        let me = boot.job().rank;
        if env_parse::<u32>(vars::FAULT_STARTUP)? == Some(me) && boot.job().incarnation == 0 {
            self.die_once_ranks_attached();
        }
        if self.cfg.expect_rejoin {
            let gone = boot
                .lookup()?
                .into_iter()
                .find(|a| a.rank != me && (a.address.is_none() || a.incarnation > 0));
            if let Some(a) = gone {
                return Ok(Err(a.rank));
            }
        }
        match boot.allgather(mine) {
            Ok(all) => Ok(Ok(all)),
            Err(TransportError::PeerDead(lost)) if self.cfg.expect_rejoin => Ok(Err(lost)),
            Err(e) => Err(e.into()),
        }
    }

    /// Fault injection: waits (bounded) until every lane of this node has a producer, then
    /// SIGKILLs this process.
    fn die_once_ranks_attached(&self) -> ! {
        let start = Instant::now();
        while (0..self.segment.lanes()).any(|lane| !self.segment.lane_claimed(lane))
            && start.elapsed() < self.cfg.rejoin_timeout
        {
            std::thread::sleep(Duration::from_millis(2));
        }
        eprintln!(
            "reverb logger-core: fault injection: SIGKILL to this logger core in its start-up exchange"
        );
        // SAFETY: kill(2) on our own pid; SIGKILL is the failure being injected.
        unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        std::thread::sleep(Duration::from_secs(60));
        std::process::abort();
    }

    fn remove_files(&self) {
        std::fs::remove_file(self.segment.path()).ok();
        std::fs::remove_file(self.detq.path()).ok();
    }

    fn run_inner(
        &self,
        boot: &mut dyn Bootstrap,
        provider: &mut dyn Provider,
    ) -> Result<LoggerSummary, CoreError> {
        let me = boot.job().rank;
        let nodes = boot.job().size;
        let rejoined = boot.job().incarnation > 0;
        let map = BuddyMap::from_nodes(&(0..nodes).collect::<Vec<u32>>()).map_err(|e| match e {
            LogError::Unsupported(why) => {
                CoreError::Config(format!("logger cores need at least 2 nodes: {why}"))
            }
            other => CoreError::Log(other),
        })?;
        let target = map.buddy_of(me).ok_or_else(|| CoreError::Config(format!("no buddy for node {me}")))?;
        let clients = map.clients_of(me);
        self.segment.set(Status::BuddyNode, u64::from(target));

        // Registered memory: the rings this node hosts, and the heartbeat words.
        let mut hosted: Vec<(Rank, Region)> = clients
            .iter()
            .map(|&c| Ok((c, logring::create_ring(provider, self.cfg.ring_bytes)?)))
            .collect::<Result<_, CoreError>>()?;
        let mut retired: Vec<(Rank, u64, Region)> = Vec::new();
        let mut retired_count = 0u64;
        let heartbeat_in = provider.alloc_region(8 * nodes as usize, Access::REMOTE_WRITE)?;
        heartbeat_in.fill(0, heartbeat_in.len(), 0)?;
        let heartbeat_out = provider.alloc_region(8, Access::LOCAL)?;

        let now = Instant::now();
        let mut related: Vec<Rank> = std::iter::once(target).chain(clients.iter().copied()).collect();
        related.sort_unstable();
        related.dedup();
        let mut watched: Vec<Watched> = related
            .iter()
            .map(|&node| Watched {
                node,
                heartbeat_region: None,
                last_value: 0,
                last_change: now,
                last_change_wall: SystemTime::now(),
                life: PeerLife::Alive,
                since: now,
                incarnation: provider.peer_incarnation(node).unwrap_or(0),
                hello_sent: None,
            })
            .collect();
        let mut path = LogPath::default();
        let mut hellos = Hellos::default();

        if rejoined {
            // A respawned logger: the others are running, so no collective. Each related
            // logger answers our hello with its heartbeat region and our new ring.
            for w in watched.iter_mut() {
                w.life = PeerLife::Awaiting;
                w.hello_sent = Some(w.incarnation);
                let incarnation = boot.job().incarnation;
                hellos.send_or_await(provider, me, w.node, incarnation, &heartbeat_in.remote(), &hosted);
            }
            self.segment.set(Status::BuddyState, segment::BUDDY_UNKNOWN);
            eprintln!(
                "reverb logger-core node {me}: incarnation {} rejoined; awaiting the hellos of nodes {related:?}",
                boot.job().incarnation
            );
        } else {
            let mut mine = heartbeat_in.remote().to_bytes().to_vec();
            mine.extend_from_slice(&(hosted.len() as u32).to_le_bytes());
            for (c, ring) in &hosted {
                mine.extend_from_slice(&c.to_le_bytes());
                mine.extend_from_slice(&ring.remote().to_bytes());
            }
            match self.start_up_exchange(boot, &mine)? {
                Err(lost) => {
                    // A logger failed during the start-up exchange, a collective its
                    // respawned incarnation never joins: trade hellos with every related
                    // logger instead, as a respawned one does. The others that fell back
                    // answer alike; the lost one's next incarnation says hello once the
                    // launcher has restarted it.
                    eprintln!(
                        "reverb logger-core node {me}: node {lost} failed during the loggers' start-up \
                         exchange; trading hellos with nodes {related:?} instead"
                    );
                    self.report_dead(
                        &mut watched,
                        lost,
                        "lost during the loggers' start-up exchange",
                        DeathCause::Transport,
                        Phase::Running,
                    );
                    for w in watched.iter_mut() {
                        if w.life == PeerLife::Alive {
                            w.life = PeerLife::Awaiting;
                        }
                        w.hello_sent = Some(w.incarnation);
                        if w.node == lost {
                            continue;
                        }
                        let incarnation = boot.job().incarnation;
                        hellos.send_or_await(
                            provider,
                            me,
                            w.node,
                            incarnation,
                            &heartbeat_in.remote(),
                            &hosted,
                        );
                    }
                    if self.segment.get(Status::BuddyState) != segment::BUDDY_REJOINING {
                        self.segment.set(Status::BuddyState, segment::BUDDY_UNKNOWN);
                    }
                }
                Ok(all) => {
                    let parsed: Vec<(RemoteRegion, Vec<(Rank, RemoteRegion)>)> =
                        all.iter().map(|b| parse_contribution(b)).collect::<Result<_, _>>()?;
                    if parsed.len() != nodes as usize {
                        return Err(CoreError::Malformed {
                            what: "loggers' exchange",
                            detail: format!("{} contributions for {nodes} nodes", parsed.len()),
                        });
                    }
                    let ring_remote = parsed
                        .get(target as usize)
                        .and_then(|(_, rings)| rings.iter().find(|(c, _)| *c == me))
                        .map(|(_, r)| *r)
                        .ok_or_else(|| CoreError::Malformed {
                            what: "loggers' exchange",
                            detail: format!("node {target} hosts no ring for node {me}"),
                        })?;
                    path.writer = Some(LogRingWriter::new(provider, ring_remote)?);
                    path.remote = Some(ring_remote);
                    for w in watched.iter_mut() {
                        w.heartbeat_region = Some(parsed[w.node as usize].0);
                    }
                    self.segment.set(Status::BuddyState, segment::BUDDY_ALIVE);
                }
            }
        }
        hellos.post(provider)?;
        // Silence counts from here: the exchange above may take long on a loaded machine.
        let now = Instant::now();
        for w in watched.iter_mut() {
            w.last_change = now;
            w.last_change_wall = SystemTime::now();
            w.since = now;
        }

        let mut consumer = self.detq.consumer()?;
        self.segment.set(Status::State, segment::STATE_READY);

        let lanes = self.segment.lanes();
        let spin = self.cfg.placement.spins();
        let hb_period = self.cfg.heartbeat / 4;
        let mut next_hb = now;
        let mut next_rejoin_poll = now;
        let mut counter = 0u64;
        let mut hb_ops: Vec<OpId> = Vec::new();
        let mut batch: Vec<Determinant> = Vec::new();
        let mut phase = Phase::Running;
        let mut idle = 0u32;
        let mut summary = LoggerSummary { node: me, buddy: target, ..Default::default() };

        loop {
            self.segment.bump(Status::Ticks);
            let mut busy = false;
            // Replay: clients read the rings this node hosts from files the logger writes.
            let asked = self.segment.get(Status::SnapshotRequested);
            if asked > self.segment.get(Status::SnapshotDone) {
                for (c, ring) in &hosted {
                    write_atomically(
                        &hosted_snapshot_path(&self.cfg.segment_base, *c),
                        &ring.to_vec(0, ring.len())?,
                    )?;
                }
                for (c, k, ring) in &retired {
                    let path = retired_snapshot_path(&self.cfg.segment_base, *c, *k);
                    write_atomically(&path, &ring.to_vec(0, ring.len())?)?;
                }
                self.segment.set(Status::SnapshotDone, asked);
            }
            if path.writer.is_some() {
                let step = self.log_step(provider, &mut path, &mut consumer, &mut batch, lanes);
                match step {
                    Ok(moved) => busy |= moved,
                    Err(e) => {
                        if path_error(&e) || provider.peer_state(target) == PeerState::Dead {
                            path.writer = None;
                            let why = format!("log write failed: {e}");
                            self.report_dead(&mut watched, target, &why, DeathCause::WriteFailed, phase);
                            if self.cfg.expect_rejoin && phase == Phase::Running {
                                self.segment.set(Status::BuddyState, segment::BUDDY_REJOINING);
                            }
                        } else {
                            return Err(e);
                        }
                    }
                }
                if path.writer.is_some() {
                    self.publish_durable(&mut path, &mut consumer, &mut summary)?;
                }
            } else if let Err(e) = provider.progress() {
                eprintln!("reverb logger-core node {me}: {e}");
            }
            // GC hook: after a checkpoint, drop everything durable so far (with the buddy
            // down, from the copy kept for the re-flush), and the rings retired at a respawn.
            let asked = self.segment.get(Status::TrimRequested);
            if asked > self.segment.get(Status::TrimDone) {
                path.trim(provider)?;
                for (c, k, _) in retired.drain(..) {
                    std::fs::remove_file(retired_snapshot_path(&self.cfg.segment_base, c, k)).ok();
                }
                self.segment.set(Status::TrimDone, asked);
            }

            // Our completions: heartbeat puts, hellos sent and received. The ring writer's
            // stay queued for it (it may have posted since its poll); with no writer, what is
            // left besides ours is a dropped writer's (its buddy died) and goes.
            if !provider.completions().is_empty() {
                let mut failed: Vec<TransportError> = Vec::new();
                let mut received: Vec<(Rank, Vec<u8>)> = Vec::new();
                let mut recv_done = false;
                let finished: Vec<_> = if path.writer.is_none() {
                    provider.completions().drain(..).collect()
                } else {
                    let mut ours = Vec::new();
                    let hello_recv = hellos.recv;
                    provider.completions().retain(|c| {
                        let mine = hb_ops.contains(&c.op)
                            || hellos.sends.contains(&c.op)
                            || Some(c.op) == hello_recv;
                        if mine {
                            ours.push(c.clone());
                        }
                        !mine
                    });
                    ours
                };
                for c in finished {
                    if hb_ops.contains(&c.op) || hellos.sends.contains(&c.op) {
                        hb_ops.retain(|&op| op != c.op);
                        hellos.sends.retain(|&op| op != c.op);
                        if let Err(e) = c.status {
                            failed.push(e);
                        }
                    } else if Some(c.op) == hellos.recv {
                        recv_done = true;
                        if let (Ok(()), CompletionKind::Recv { source, data: Some(data), .. }) =
                            (c.status, c.kind)
                        {
                            received.push((source, data));
                        }
                    }
                }
                for e in failed {
                    if let TransportError::PeerDead(r) = e {
                        let why = "a write to it failed (PeerDead)";
                        if self.report_dead(&mut watched, r, why, DeathCause::Transport, phase) && r == target
                        {
                            path.writer = None;
                        }
                    }
                }
                if recv_done {
                    hellos.recv = None;
                    hellos.post(provider)?;
                }
                for (from, bytes) in received {
                    busy = true;
                    let ctx = HelloCtx {
                        me,
                        target,
                        heartbeat_in: &heartbeat_in,
                        incarnation: boot.job().incarnation,
                    };
                    if let Err(e) = self.on_hello(
                        provider,
                        &ctx,
                        &mut watched,
                        &mut path,
                        &mut hosted,
                        &mut retired,
                        &mut retired_count,
                        &mut hellos,
                        from,
                        &bytes,
                        &mut summary,
                    ) {
                        eprintln!("reverb logger-core node {me}: hello from node {from}: {e}");
                    }
                }
            }

            let now = Instant::now();
            // Respawned loggers: reconnect, retire the ring hosted for the dead incarnation,
            // send it a hello (a new ring and our heartbeat region).
            if now >= next_rejoin_poll && phase == Phase::Running {
                next_rejoin_poll = now + REJOIN_POLL;
                match reverb_transport::recovery::apply_rejoins(provider, boot) {
                    Ok(rejoins) => {
                        for r in rejoins.into_iter().filter(|r| related.contains(&r.rank)) {
                            let ctx = HelloCtx {
                                me,
                                target,
                                heartbeat_in: &heartbeat_in,
                                incarnation: boot.job().incarnation,
                            };
                            if let Err(e) = self.on_rejoin(
                                provider,
                                &ctx,
                                &mut watched,
                                &mut path,
                                &mut hosted,
                                &mut retired,
                                &mut retired_count,
                                &mut hellos,
                                r.rank,
                                r.incarnation,
                                phase,
                            ) {
                                eprintln!("reverb logger-core node {me}: node {} rejoined: {e}", r.rank);
                            }
                        }
                    }
                    Err(e) => eprintln!("reverb logger-core node {me}: applying rejoins: {e}"),
                }
            }
            if now >= next_hb {
                next_hb = now + hb_period;
                counter += 1;
                if !matches!(phase, Phase::Parting(_)) {
                    self.send_heartbeat(
                        provider,
                        &heartbeat_out,
                        &mut watched,
                        me,
                        counter,
                        &mut hb_ops,
                        phase,
                    );
                }
                for node in related.iter().copied() {
                    if self.check_revived(provider, &heartbeat_in, &mut watched, node, now) && node == target
                    {
                        if let Some(remote) = path.remote.filter(|_| path.writer.is_none()) {
                            let rewritten = path.retarget(provider, remote)?;
                            self.segment.set(Status::BuddyState, segment::BUDDY_ALIVE);
                            eprintln!(
                                "reverb logger-core node {me}: logging to buddy node {node} again (same \
                                 incarnation); {rewritten} record(s) since the last trim written again"
                            );
                        }
                    }
                    if let Some((why, cause)) =
                        self.check_peer(provider, &heartbeat_in, &mut watched, node, now)
                    {
                        if self.report_dead(&mut watched, node, &why, cause, phase) && node == target {
                            path.writer = None;
                        }
                    }
                }
                // A dead or silent related logger is awaited back only so long.
                for w in watched.iter_mut() {
                    let waiting =
                        w.life == PeerLife::Awaiting || (w.life == PeerLife::Dead && self.cfg.expect_rejoin);
                    if waiting && !w.given_up() && now.duration_since(w.since) >= self.cfg.rejoin_timeout {
                        w.life = PeerLife::Dead;
                        w.hello_sent = Some(u32::MAX); // marks "given up"
                        if w.node == target {
                            self.segment.set(Status::BuddyState, segment::BUDDY_DEAD);
                        }
                        eprintln!(
                            "reverb logger-core node {me}: node {} did not come back within {:?}; given up",
                            w.node, self.cfg.rejoin_timeout
                        );
                    }
                }
            }

            // Shutdown phases.
            if phase == Phase::Running
                && (self.stop.load(Ordering::Acquire) || self.segment.get(Status::StopRequested) != 0)
            {
                self.segment.set(Status::State, segment::STATE_STOPPING);
                phase = Phase::Draining(now);
            }
            if let Phase::Draining(since) = phase {
                let target_down = path.writer.is_none();
                let drained = !target_down && self.drained(&consumer, &path, lanes)?;
                let expired = now.duration_since(since) >= self.cfg.drain_timeout;
                if drained || target_down || expired {
                    let (dets, bytes) = self.leftover(lanes)?;
                    summary.leftover_determinants = dets;
                    summary.leftover_payload_bytes = bytes;
                    if dets + bytes > 0 {
                        eprintln!(
                            "reverb logger-core node {me}: stopping with {dets} determinants and {bytes} payload \
                             bytes not durable ({})",
                            if target_down { "buddy dead" } else { "drain bound passed" }
                        );
                    }
                    self.send_stopped(provider, &heartbeat_out, &watched, me);
                    phase = Phase::Parting(now);
                }
            }
            if let Phase::Parting(since) = phase {
                let hosted_done =
                    watched.iter().filter(|w| clients.contains(&w.node)).all(|w| w.life != PeerLife::Alive);
                if hosted_done {
                    break;
                }
                if now.duration_since(since) >= self.cfg.drain_timeout {
                    eprintln!(
                        "reverb logger-core node {me}: nodes {clients:?} did not stop within the bound"
                    );
                    break;
                }
            }

            if busy {
                idle = 0;
            } else {
                idle = idle.saturating_add(1);
                if spin || idle < 64 {
                    std::hint::spin_loop();
                } else if idle < 1024 {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
        }

        summary.buddy_dead = path.writer.is_none();
        for (c, _) in &hosted {
            std::fs::remove_file(hosted_snapshot_path(&self.cfg.segment_base, *c)).ok();
        }
        for (c, k, _) in &retired {
            std::fs::remove_file(retired_snapshot_path(&self.cfg.segment_base, *c, *k)).ok();
        }
        if let Some(dir) = &self.cfg.dump_dir {
            for (c, ring) in &hosted {
                let path = dir.join(format!("ring-node{c}.bin"));
                let image = ring.to_vec(0, ring.len())?;
                std::fs::write(&path, image)
                    .map_err(|e| CoreError::io(format!("write {}", path.display()), e))?;
            }
        }
        Ok(summary)
    }

    /// Frees the lane and queue entries whose ring records are durable; publishes counters.
    fn publish_durable(
        &self,
        path: &mut LogPath,
        consumer: &mut crate::detqueue::DetConsumer<'_>,
        summary: &mut LoggerSummary,
    ) -> Result<(), CoreError> {
        let Some(writer) = path.writer.as_ref() else { return Ok(()) };
        let durable = writer.durable_watermark();
        path.durable = durable;
        self.segment.set(Status::RingDurable, durable);
        while path.pending_dets.front().is_some_and(|p| p.0 <= durable) {
            if let Some((_, end, n)) = path.pending_dets.pop_front() {
                consumer.mark_durable(end)?;
                summary.determinants += n;
                self.segment.set(Status::DeterminantsLogged, summary.determinants);
            }
        }
        while path.pending_frames.front().is_some_and(|p| p.0 <= durable) {
            if let Some((_, lane, end)) = path.pending_frames.pop_front() {
                self.segment.mark_durable(lane, end)?;
                summary.payloads += 1;
                self.segment.set(Status::PayloadsLogged, summary.payloads);
            }
        }
        summary.ring_bytes_written = writer.head();
        Ok(())
    }

    /// A related logger came back at `incarnation` (the provider is reconnected to it): its
    /// old incarnation is dead; the ring we hosted for it is retired (kept for replay) and a
    /// fresh one offered in our hello; our log waits for its hello.
    #[allow(clippy::too_many_arguments)]
    fn on_rejoin(
        &self,
        provider: &mut dyn Provider,
        ctx: &HelloCtx<'_>,
        watched: &mut [Watched],
        path: &mut LogPath,
        hosted: &mut [(Rank, Region)],
        retired: &mut Vec<(Rank, u64, Region)>,
        retired_count: &mut u64,
        hellos: &mut Hellos,
        node: Rank,
        incarnation: u32,
        phase: Phase,
    ) -> Result<(), CoreError> {
        let Some(w) = watched.iter().find(|w| w.node == node) else { return Ok(()) };
        if w.hello_sent.is_some_and(|i| i != u32::MAX && i >= incarnation) {
            return Ok(()); // answered this incarnation already
        }
        if w.life == PeerLife::Alive {
            let why = format!("incarnation {incarnation} rejoined");
            self.report_dead(watched, node, &why, DeathCause::Rejoined, phase);
        }
        if node == ctx.target {
            path.writer = None;
        }
        let mut offered = None;
        if let Some(slot) = hosted.iter_mut().find(|(c, _)| *c == node) {
            let fresh = logring::create_ring(provider, self.cfg.ring_bytes)?;
            offered = Some(fresh.remote());
            let old = std::mem::replace(&mut slot.1, fresh);
            retired.push((node, *retired_count, old));
            *retired_count += 1;
        }
        if let Some(w) = watched.iter_mut().find(|w| w.node == node) {
            w.incarnation = incarnation;
            w.life = PeerLife::Awaiting;
            w.since = Instant::now();
            w.heartbeat_region = None;
            w.hello_sent = Some(incarnation);
        }
        if let Err(e) =
            hellos.send(provider, node, ctx.incarnation, &ctx.heartbeat_in.remote(), offered.as_ref())
        {
            // That incarnation died already: the next one's rejoin brings another hello.
            eprintln!(
                "reverb logger-core node {}: no hello to node {node}: {e}; awaiting its next incarnation",
                ctx.me
            );
            return Ok(());
        }
        eprintln!(
            "reverb logger-core node {}: node {node} rejoined at incarnation {incarnation}; hello sent{}",
            ctx.me,
            if offered.is_some() { " with a fresh ring (the old one is kept for replay)" } else { "" }
        );
        Ok(())
    }

    /// A related logger's hello: its heartbeat region and, from our buddy, the ring our log
    /// goes to now (the log since the last trim is written again into it).
    #[allow(clippy::too_many_arguments)]
    fn on_hello(
        &self,
        provider: &mut dyn Provider,
        ctx: &HelloCtx<'_>,
        watched: &mut [Watched],
        path: &mut LogPath,
        hosted: &mut [(Rank, Region)],
        retired: &mut Vec<(Rank, u64, Region)>,
        retired_count: &mut u64,
        hellos: &mut Hellos,
        from: Rank,
        bytes: &[u8],
        summary: &mut LoggerSummary,
    ) -> Result<(), CoreError> {
        let hello = parse_hello(bytes)?;
        let Some(w) = watched.iter().find(|w| w.node == from) else {
            return Err(CoreError::Malformed {
                what: "hello",
                detail: format!("node {from} is not related"),
            });
        };
        if hello.incarnation < w.incarnation {
            return Ok(()); // from an incarnation we know is gone
        }
        if w.hello_sent != Some(hello.incarnation) {
            // Its hello came before the rendezvous told us: answer it the same way.
            self.on_rejoin(
                provider,
                ctx,
                watched,
                path,
                hosted,
                retired,
                retired_count,
                hellos,
                from,
                hello.incarnation,
                Phase::Running,
            )?;
        }
        let now = Instant::now();
        let Some(w) = watched.iter_mut().find(|w| w.node == from) else { return Ok(()) };
        let mut b = [0u8; 8];
        ctx.heartbeat_in.read(8 * from as usize, &mut b)?;
        w.heartbeat_region = Some(hello.heartbeat);
        w.last_value = u64::from_le_bytes(b);
        w.last_change = now;
        w.last_change_wall = SystemTime::now();
        w.life = PeerLife::Alive;
        w.since = now;
        w.incarnation = hello.incarnation;
        let verdict = self.segment.verdicts().into_iter().find(|v| v.node == from && v.is_dead());
        if let Some(mut v) = verdict {
            v.back = Some((hello.incarnation, unix_ms(SystemTime::now())));
            self.segment.record_verdict(&v);
        }
        if from == ctx.target {
            let ring = hello.ring.ok_or_else(|| CoreError::Malformed {
                what: "hello",
                detail: format!("buddy node {from} offers no ring"),
            })?;
            let rewritten = path.retarget(provider, ring)?;
            self.segment.set(Status::BuddyState, segment::BUDDY_ALIVE);
            if verdict.is_some() || rewritten > 0 {
                summary.buddy_rejoins += 1;
                self.segment.bump(Status::BuddyRejoins);
            }
            eprintln!(
                "reverb logger-core node {}: logging to buddy node {from} (incarnation {}) again; {rewritten} \
                 record(s) since the last trim written again",
                ctx.me, hello.incarnation
            );
        }
        Ok(())
    }

    /// Moves what fits from the queues into the ring and polls its completions. Returns
    /// whether anything moved.
    fn log_step(
        &self,
        provider: &mut dyn Provider,
        path: &mut LogPath,
        consumer: &mut crate::detqueue::DetConsumer<'_>,
        batch: &mut Vec<Determinant>,
        lanes: u64,
    ) -> Result<bool, CoreError> {
        let Some(writer) = path.writer.as_ref() else { return Ok(false) };
        let mut moved = false;
        let (_, end, _) = self.detq.indices();
        let taken = consumer.in_flight().end;
        let mut n = end.saturating_sub(taken).min(MAX_BATCH);
        while n > 0 && writer.bytes_needed(&[n as usize * Determinant::WIRE_LEN]) > writer.free() {
            n /= 2;
        }
        if n > 0 {
            batch.clear();
            let range = consumer.take_batch(n as usize, batch);
            let mut data = Vec::with_capacity(batch.len() * Determinant::WIRE_LEN);
            for d in batch.iter() {
                data.extend_from_slice(&d.to_bytes());
            }
            let ticket = path.append(provider, RecordKind::Determinants, data)?;
            path.pending_dets.push_back((ticket, range.end, batch.len() as u64));
            moved = true;
        }
        for lane in 0..lanes {
            for _ in 0..FRAMES_PER_LANE {
                let Some((data, end)) = self.segment.peek_frame(lane)? else { break };
                let Some(writer) = path.writer.as_ref() else { return Ok(moved) };
                if writer.bytes_needed(&[data.len()]) > writer.free() {
                    break; // ring full: back-pressure until a trim
                }
                let ticket = path.append(provider, RecordKind::Payload, data)?;
                self.segment.take_through(lane, end)?;
                path.pending_frames.push_back((ticket, lane, end));
                moved = true;
            }
        }
        if let Some(writer) = path.writer.as_mut() {
            path.durable = writer.poll(provider)?;
        }
        Ok(moved)
    }

    fn drained(
        &self,
        consumer: &crate::detqueue::DetConsumer<'_>,
        path: &LogPath,
        lanes: u64,
    ) -> Result<bool, CoreError> {
        let Some(writer) = path.writer.as_ref() else { return Ok(false) };
        let recorded = writer.recorded_header();
        let ring_flushed = writer.durable_watermark() == writer.head()
            && recorded.watermark == writer.head()
            && recorded.tail == writer.tail();
        Ok(ring_flushed && self.leftover(lanes)? == (0, 0) && consumer.in_flight().is_empty())
    }

    /// Enqueued but not durable: (determinants, payload bytes of the lanes).
    fn leftover(&self, lanes: u64) -> Result<(u64, u64), CoreError> {
        let (start, end, _) = self.detq.indices();
        let mut bytes = 0;
        for lane in 0..lanes {
            let (head, _, durable) = self.segment.lane_positions(lane)?;
            bytes += head.saturating_sub(durable);
        }
        Ok((end.saturating_sub(start), bytes))
    }

    #[allow(clippy::too_many_arguments)]
    fn send_heartbeat(
        &self,
        provider: &mut dyn Provider,
        out: &Region,
        watched: &mut [Watched],
        me: Rank,
        value: u64,
        ops: &mut Vec<OpId>,
        phase: Phase,
    ) {
        for i in 0..watched.len() {
            // A node found dead by its heartbeat alone still gets ours while the transport has
            // it alive: if it was only slow, it must not find us dead in turn.
            let suspected = watched[i].life == PeerLife::Dead
                && !watched[i].given_up()
                && provider.peer_state(watched[i].node) == PeerState::Alive;
            if watched[i].life != PeerLife::Alive && !suspected {
                continue;
            }
            let node = watched[i].node;
            let Some(remote) = watched[i].heartbeat_region else { continue };
            let posted = out.write(0, &value.to_le_bytes()).map_err(CoreError::from).and_then(|_| {
                let rma = Rma {
                    local: out,
                    local_offset: 0,
                    remote: &remote,
                    remote_offset: 8 * u64::from(me),
                    len: 8,
                };
                Ok(provider.put(rma, Signal::Yes)?)
            });
            match posted {
                Ok(op) => ops.push(op),
                Err(e) => {
                    let why = format!("heartbeat write failed: {e}");
                    self.report_dead(watched, node, &why, DeathCause::WriteFailed, phase);
                }
            }
        }
    }

    /// The last heartbeat says "stopped" (also to peers that already stopped: they may still
    /// be waiting for it); waits (bounded) for it to land.
    fn send_stopped(&self, provider: &mut dyn Provider, out: &Region, watched: &[Watched], me: Rank) {
        for w in watched.iter().filter(|w| matches!(w.life, PeerLife::Alive | PeerLife::Stopped)) {
            let Some(remote) = w.heartbeat_region else { continue };
            let _ = out.write(0, &STOPPED.to_le_bytes());
            let rma = Rma {
                local: out,
                local_offset: 0,
                remote: &remote,
                remote_offset: 8 * u64::from(me),
                len: 8,
            };
            if let Ok(op) = provider.put(rma, Signal::Yes) {
                let _ = provider.wait_op(op, self.cfg.heartbeat);
            }
        }
    }

    /// Reads `node`'s heartbeat word; `Some(reason, cause)` when it is newly found dead.
    fn check_peer(
        &self,
        provider: &dyn Provider,
        heartbeat_in: &Region,
        watched: &mut [Watched],
        node: Rank,
        now: Instant,
    ) -> Option<(String, DeathCause)> {
        let heartbeat = self.cfg.heartbeat;
        let w = watched.iter_mut().find(|w| w.node == node)?;
        if w.life != PeerLife::Alive || w.heartbeat_region.is_none() {
            return None;
        }
        let read = |region: &Region| {
            let mut b = [0u8; 8];
            region.read(8 * node as usize, &mut b).ok().map(|_| u64::from_le_bytes(b))
        };
        let transport_dead = provider.peer_state(node) == PeerState::Dead;
        // Read after the transport's verdict: a clean exit's STOPPED lands before the exit.
        let value = read(heartbeat_in)?;
        if value == STOPPED {
            w.life = PeerLife::Stopped;
            return None;
        }
        if value != w.last_value {
            w.last_value = value;
            w.last_change = now;
            w.last_change_wall = SystemTime::now();
        }
        if transport_dead {
            return Some(("the transport reports it dead (PeerDead)".into(), DeathCause::Transport));
        }
        let silent = now.duration_since(w.last_change);
        (silent >= heartbeat)
            .then(|| (format!("heartbeat silent for {} ms", silent.as_millis()), DeathCause::Heartbeat))
    }

    /// A logger found dead by a silent heartbeat alone may only have been slow (a loaded
    /// machine): if the same incarnation heartbeats again and the transport has it alive, it
    /// is alive again (the verdict records it back). Returns whether it revived now.
    fn check_revived(
        &self,
        provider: &dyn Provider,
        heartbeat_in: &Region,
        watched: &mut [Watched],
        node: Rank,
        now: Instant,
    ) -> bool {
        let Some(w) = watched.iter_mut().find(|w| w.node == node) else { return false };
        if w.life != PeerLife::Dead || w.heartbeat_region.is_none() || w.given_up() {
            return false;
        }
        let same = provider.peer_incarnation(node).is_none_or(|i| i == w.incarnation);
        if provider.peer_state(node) != PeerState::Alive || !same {
            return false;
        }
        let mut b = [0u8; 8];
        if heartbeat_in.read(8 * node as usize, &mut b).is_err() {
            return false;
        }
        let value = u64::from_le_bytes(b);
        if value == w.last_value || value == STOPPED {
            return false;
        }
        w.last_value = value;
        w.last_change = now;
        w.last_change_wall = SystemTime::now();
        w.life = PeerLife::Alive;
        w.since = now;
        if let Some(mut v) = self.segment.verdicts().into_iter().find(|v| v.node == node && v.is_dead()) {
            v.back = Some((w.incarnation, unix_ms(SystemTime::now())));
            self.segment.record_verdict(&v);
        }
        eprintln!("reverb logger-core: node {node} heartbeats again: it was only slow, not dead");
        true
    }

    /// Records `node` dead (verdict, buddy state, stderr); false if it was not alive.
    fn report_dead(
        &self,
        watched: &mut [Watched],
        node: Rank,
        why: &str,
        cause: DeathCause,
        phase: Phase,
    ) -> bool {
        let buddy = self.segment.get(Status::BuddyNode);
        let Some(w) = watched.iter_mut().find(|w| w.node == node) else { return false };
        if w.life != PeerLife::Alive {
            return false;
        }
        w.life = PeerLife::Dead;
        w.since = Instant::now();
        let since = w.last_change.elapsed().as_millis() as u64;
        let now_ms = unix_ms(SystemTime::now());
        self.segment.record_verdict(&NodeVerdict {
            node,
            incarnation: w.incarnation,
            cause,
            last_heard_unix_ms: unix_ms(w.last_change_wall),
            reported_unix_ms: now_ms,
            back: None,
        });
        let role = if u64::from(node) == buddy { "buddy " } else { "" };
        let awaited = self.cfg.expect_rejoin && phase == Phase::Running;
        if u64::from(node) == buddy {
            self.segment.set(Status::DetectionMs, since);
            let state = if awaited { segment::BUDDY_REJOINING } else { segment::BUDDY_DEAD };
            self.segment.set(Status::BuddyState, state);
        }
        eprintln!(
            "reverb logger-core: {role}node {node} is dead ({why}); reported {since} ms after its last heartbeat{}",
            if awaited { "; awaiting its respawn" } else { "" }
        );
        true
    }
}

/// Tag of the hello a respawned logger and each related logger trade.
const HELLO_TAG: Tag = 0x524c_4845_4c4c_4f00;
const HELLO_MAGIC: u32 = 0x4c48_4c52; // "RLHL"
const HELLO_VERSION: u16 = 1;
const HELLO_MAX: usize = 256;
/// How often a logger asks the rendezvous about respawned loggers (a non-blocking read).
const REJOIN_POLL: Duration = Duration::from_millis(10);

/// What a hello carries: the sender's incarnation and heartbeat region, and the ring it
/// hosts for the receiver (if the receiver logs to it).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Hello {
    incarnation: u32,
    heartbeat: RemoteRegion,
    ring: Option<RemoteRegion>,
}

/// `magic u32 | version u16 | has_ring u16 | incarnation u32 | heartbeat | [ring]`.
fn encode_hello(hello: &Hello) -> Vec<u8> {
    let mut b = Vec::with_capacity(12 + 2 * RemoteRegion::WIRE_LEN);
    b.extend_from_slice(&HELLO_MAGIC.to_le_bytes());
    b.extend_from_slice(&HELLO_VERSION.to_le_bytes());
    b.extend_from_slice(&u16::from(hello.ring.is_some()).to_le_bytes());
    b.extend_from_slice(&hello.incarnation.to_le_bytes());
    b.extend_from_slice(&hello.heartbeat.to_bytes());
    if let Some(r) = &hello.ring {
        b.extend_from_slice(&r.to_bytes());
    }
    b
}

fn parse_hello(b: &[u8]) -> Result<Hello, CoreError> {
    let bad = |detail: String| CoreError::Malformed { what: "logger hello", detail };
    let d = RemoteRegion::WIRE_LEN;
    if b.len() < 12 + d {
        return Err(bad(format!("{} bytes", b.len())));
    }
    let magic = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let version = u16::from_le_bytes([b[4], b[5]]);
    let has_ring = u16::from_le_bytes([b[6], b[7]]);
    if magic != HELLO_MAGIC || version != HELLO_VERSION || has_ring > 1 {
        return Err(bad(format!("magic {magic:#x}, version {version}, ring flag {has_ring}")));
    }
    let expected = 12 + d * (1 + has_ring as usize);
    if b.len() != expected {
        return Err(bad(format!("{} bytes, expected {expected}", b.len())));
    }
    let incarnation = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
    let heartbeat = RemoteRegion::from_bytes(&b[12..12 + d])?;
    let ring = if has_ring == 1 { Some(RemoteRegion::from_bytes(&b[12 + d..])?) } else { None };
    Ok(Hello { incarnation, heartbeat, ring })
}

/// The hello receive kept posted, and hellos in flight.
#[derive(Default)]
struct Hellos {
    recv: Option<OpId>,
    sends: Vec<OpId>,
}

impl Hellos {
    fn post(&mut self, provider: &mut dyn Provider) -> Result<(), CoreError> {
        if self.recv.is_none() {
            let op = provider.post_recv(
                Source::Any,
                TagMatch::exact(HELLO_TAG),
                RecvBuffer::Owned { capacity: HELLO_MAX },
            )?;
            self.recv = Some(op);
        }
        Ok(())
    }

    /// Says hello to `to` with the ring this logger hosts for it, if any. A failed send means
    /// `to` is dead too (its node failed with ours): its next incarnation will say hello.
    fn send_or_await(
        &mut self,
        provider: &mut dyn Provider,
        me: Rank,
        to: Rank,
        incarnation: u32,
        heartbeat: &RemoteRegion,
        hosted: &[(Rank, Region)],
    ) {
        let ring = hosted.iter().find(|(c, _)| *c == to).map(|(_, r)| r.remote());
        if let Err(e) = self.send(provider, to, incarnation, heartbeat, ring.as_ref()) {
            eprintln!("reverb logger-core node {me}: no hello to node {to}: {e}; awaiting it");
        }
    }

    fn send(
        &mut self,
        provider: &mut dyn Provider,
        to: Rank,
        incarnation: u32,
        heartbeat: &RemoteRegion,
        ring: Option<&RemoteRegion>,
    ) -> Result<(), CoreError> {
        let hello = Hello { incarnation, heartbeat: *heartbeat, ring: ring.copied() };
        self.sends.push(provider.send(to, HELLO_TAG, &encode_hello(&hello))?);
        Ok(())
    }
}

/// What hello handling needs to know of this logger.
struct HelloCtx<'a> {
    me: Rank,
    target: Rank,
    heartbeat_in: &'a Region,
    incarnation: u32,
}

/// A record written to the buddy's ring, kept until trimmed: when the buddy's logger dies,
/// its ring dies with it, and these are written again into its next incarnation's ring.
struct Shadowed {
    ticket: u64,
    kind: RecordKind,
    data: Vec<u8>,
}

/// This node's log path: the writer into the buddy's ring (None while the buddy is down),
/// the copy kept for a re-flush, and the entries not yet durable.
#[derive(Default)]
struct LogPath {
    writer: Option<LogRingWriter>,
    shadow: VecDeque<Shadowed>,
    /// (ring ticket, queue end, count)
    pending_dets: VecDeque<(u64, u64, u64)>,
    /// (ring ticket, lane, lane end)
    pending_frames: VecDeque<(u64, u64, u64)>,
    /// The current writer's durable watermark.
    durable: u64,
    /// The buddy ring the log goes to (kept while the buddy is only suspected).
    remote: Option<RemoteRegion>,
}

impl LogPath {
    fn append(
        &mut self,
        provider: &mut dyn Provider,
        kind: RecordKind,
        data: Vec<u8>,
    ) -> Result<u64, CoreError> {
        let writer = self.writer.as_mut().ok_or_else(|| CoreError::Config("no log path".into()))?;
        let ticket = writer.append(provider, kind, &data)?;
        self.shadow.push_back(Shadowed { ticket, kind, data });
        Ok(ticket)
    }

    /// Drops everything durable (the ring's and the kept copy's).
    fn trim(&mut self, provider: &mut dyn Provider) -> Result<(), CoreError> {
        if let Some(writer) = self.writer.as_mut() {
            writer.trim(provider, self.durable)?;
        }
        while self.shadow.front().is_some_and(|r| r.ticket <= self.durable) {
            self.shadow.pop_front();
        }
        Ok(())
    }

    /// Points the log at the buddy's new ring and writes the kept records again, in order;
    /// entries still in flight follow their records. Returns the records written.
    fn retarget(&mut self, provider: &mut dyn Provider, remote: RemoteRegion) -> Result<usize, CoreError> {
        let mut writer = LogRingWriter::new(provider, remote)?;
        let mut moved = std::collections::HashMap::with_capacity(self.shadow.len());
        for r in self.shadow.iter_mut() {
            let ticket = writer.append(provider, r.kind, &r.data)?;
            moved.insert(r.ticket, ticket);
            r.ticket = ticket;
        }
        let remap = |t: &mut u64| -> Result<(), CoreError> {
            *t = *moved.get(t).ok_or_else(|| CoreError::Malformed {
                what: "log re-flush",
                detail: format!("ticket {t} in flight has no kept record"),
            })?;
            Ok(())
        };
        for p in self.pending_dets.iter_mut() {
            remap(&mut p.0)?;
        }
        for p in self.pending_frames.iter_mut() {
            remap(&mut p.0)?;
        }
        self.durable = 0;
        self.writer = Some(writer);
        self.remote = Some(remote);
        Ok(self.shadow.len())
    }
}

/// Where the snapshot of a ring hosted for `client` and retired at its respawn goes.
fn retired_snapshot_path(segment_base: &str, client: Rank, k: u64) -> PathBuf {
    PathBuf::from(format!("{segment_base}.hosted-node{client}-r{k}"))
}

/// Where a snapshot of the ring hosted for node `client` goes (next to the segment).
pub fn hosted_snapshot_path(segment_base: &str, client: Rank) -> PathBuf {
    PathBuf::from(format!("{segment_base}.hosted-node{client}"))
}

/// Readers never see a half-written snapshot: write aside, then rename. Private (0600) like
/// the segment, as it holds logged payloads; a leftover aside file is this logger's to replace.
fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> Result<(), CoreError> {
    use std::io::Write as _;
    let tmp = path.with_extension("tmp");
    std::fs::remove_file(&tmp).ok();
    reverb_transport::shm::create_private(&tmp, |_| None)
        .and_then(|mut file| file.write_all(bytes))
        .map_err(|e| CoreError::io(format!("write {}", tmp.display()), e))?;
    std::fs::rename(&tmp, path).map_err(|e| CoreError::io(format!("rename to {}", path.display()), e))
}

/// Whether an error means the buddy path is gone (rather than a bug or a bad argument).
fn path_error(e: &CoreError) -> bool {
    matches!(
        e,
        CoreError::Transport(TransportError::PeerDead(_))
            | CoreError::Log(LogError::WriteFailed(_))
            | CoreError::Log(LogError::Transport(TransportError::PeerDead(_)))
    )
}

/// `heartbeat descriptor | u32 count | count × (u32 client node | ring descriptor)`.
fn parse_contribution(bytes: &[u8]) -> Result<(RemoteRegion, Vec<(Rank, RemoteRegion)>), CoreError> {
    const WHAT: &str = "logger exchange";
    let d = RemoteRegion::WIRE_LEN;
    let bad = |detail: String| CoreError::Malformed { what: WHAT, detail };
    if bytes.len() < d + 4 {
        return Err(bad(format!("{} bytes", bytes.len())));
    }
    let heartbeat = RemoteRegion::from_bytes(&bytes[..d])?;
    let count = u32::from_le_bytes([bytes[d], bytes[d + 1], bytes[d + 2], bytes[d + 3]]) as usize;
    let entry = 4 + d;
    if bytes.len() != d + 4 + count.saturating_mul(entry) {
        return Err(bad(format!("{} bytes for {count} rings", bytes.len())));
    }
    let rings = bytes[d + 4..]
        .chunks_exact(entry)
        .map(|c| {
            let node = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            Ok((node, RemoteRegion::from_bytes(&c[4..])?))
        })
        .collect::<Result<_, CoreError>>()?;
    Ok((heartbeat, rings))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(key: u64) -> RemoteRegion {
        RemoteRegion { owner: 1, addr: 0x1000 * key, len: 4096, key }
    }

    #[test]
    fn exchange_parses_and_rejects_garbage() {
        let mut bytes = region(1).to_bytes().to_vec();
        bytes.extend_from_slice(&2u32.to_le_bytes());
        for (node, key) in [(0u32, 2u64), (3, 3)] {
            bytes.extend_from_slice(&node.to_le_bytes());
            bytes.extend_from_slice(&region(key).to_bytes());
        }
        let (hb, rings) = parse_contribution(&bytes).unwrap();
        assert_eq!(hb, region(1));
        assert_eq!(rings, vec![(0, region(2)), (3, region(3))]);
        for cut in [0, 10, RemoteRegion::WIRE_LEN + 3, bytes.len() - 1] {
            assert!(parse_contribution(&bytes[..cut]).is_err(), "cut {cut}");
        }
        let mut lying = bytes.clone();
        lying[RemoteRegion::WIRE_LEN] = 200; // claims 200 rings
        assert!(parse_contribution(&lying).is_err());
    }

    #[test]
    fn hello_round_trips_and_rejects_garbage() {
        for ring in [None, Some(region(7))] {
            let hello = Hello { incarnation: 3, heartbeat: region(1), ring };
            let bytes = encode_hello(&hello);
            assert_eq!(parse_hello(&bytes).unwrap(), hello);
            for cut in [0, 11, bytes.len() - 1] {
                assert!(parse_hello(&bytes[..cut]).is_err(), "cut {cut}");
            }
            let mut bad = bytes.clone();
            bad[0] ^= 1;
            assert!(parse_hello(&bad).is_err(), "magic");
            let mut lying = bytes.clone();
            lying[6] = u8::from(ring.is_none()); // ring flag disagrees with the length
            assert!(parse_hello(&lying).is_err());
        }
    }

    #[test]
    fn config_is_checked() {
        let cfg = LoggerCoreConfig {
            segment_base: "/nonexistent/x".into(),
            lanes: 1,
            lane_bytes: 4096,
            detq_entries: 16,
            ring_bytes: 4096,
            heartbeat: DEFAULT_HEARTBEAT,
            placement: Placement::SharedUnpinned,
            cpu: None,
            stop_on_eof: false,
            dump_dir: None,
            drain_timeout: Duration::from_secs(1),
            expect_rejoin: false,
            rejoin_timeout: Duration::from_secs(1),
        };
        assert!(cfg.validate().is_err(), "a ring smaller than two lanes' worth");
        assert!(LoggerCoreConfig { ring_bytes: 8192, ..cfg.clone() }.validate().is_ok());
        assert!(LoggerCoreConfig { ring_bytes: 8192, heartbeat: Duration::from_millis(1), ..cfg }
            .validate()
            .is_err());
    }
}
