//! The logger core: one process per node. It creates the node segment, joins the loggers'
//! transport job, hosts the log rings of the nodes that log to it, and loops:
//! drain the determinant queue and the payload lanes into its buddy's ring (one-sided puts),
//! poll completions, publish the durable watermarks, trim on request, heartbeat.
//!
//! Heartbeat: every `heartbeat / 4` each logger puts its loop counter into a word of every
//! related logger's registered heartbeat region (word index = sender node). A related logger
//! whose word has not changed for `heartbeat`, or that the transport reports dead (PeerDead,
//! failed puts), is reported dead: in the segment (when it is the buddy) and on stderr.
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
use std::time::{Duration, Instant};

use reverb_transport::{
    Access, Bootstrap, OpId, PeerState, Provider, Rank, Region, RemoteRegion, Rma, Signal, TransportError,
};

use super::placement::Placement;
use super::segment::{self, NodeSegment, Status};
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
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PeerLife {
    Alive,
    Dead,
    Stopped,
}

/// What this logger knows of one related logger (its buddy, or a node it hosts a ring for).
struct Watched {
    node: Rank,
    heartbeat_region: RemoteRegion,
    last_value: u64,
    last_change: Instant,
    life: PeerLife,
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
        let hosted: Vec<(Rank, Region)> = clients
            .iter()
            .map(|&c| Ok((c, logring::create_ring(provider, self.cfg.ring_bytes)?)))
            .collect::<Result<_, CoreError>>()?;
        let heartbeat_in = provider.alloc_region(8 * nodes as usize, Access::REMOTE_WRITE)?;
        heartbeat_in.fill(0, heartbeat_in.len(), 0)?;
        let heartbeat_out = provider.alloc_region(8, Access::LOCAL)?;

        let mut mine = heartbeat_in.remote().to_bytes().to_vec();
        mine.extend_from_slice(&(hosted.len() as u32).to_le_bytes());
        for (c, ring) in &hosted {
            mine.extend_from_slice(&c.to_le_bytes());
            mine.extend_from_slice(&ring.remote().to_bytes());
        }
        let all = boot.allgather(&mine)?;
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
        let mut writer = LogRingWriter::new(provider, ring_remote)?;

        let now = Instant::now();
        let mut related: Vec<Rank> = std::iter::once(target).chain(clients.iter().copied()).collect();
        related.sort_unstable();
        related.dedup();
        let mut watched: Vec<Watched> = related
            .iter()
            .map(|&node| Watched {
                node,
                heartbeat_region: parsed[node as usize].0,
                last_value: 0,
                last_change: now,
                life: PeerLife::Alive,
            })
            .collect();

        let mut consumer = self.detq.consumer()?;
        self.segment.set(Status::BuddyState, segment::BUDDY_ALIVE);
        self.segment.set(Status::State, segment::STATE_READY);

        let lanes = self.segment.lanes();
        let spin = self.cfg.placement.spins();
        let hb_period = self.cfg.heartbeat / 4;
        let mut next_hb = now;
        let mut counter = 0u64;
        let mut hb_ops: Vec<OpId> = Vec::new();
        let mut pending_dets: VecDeque<(u64, u64, u64)> = VecDeque::new(); // ring ticket, queue end, count
        let mut pending_frames: VecDeque<(u64, u64, u64)> = VecDeque::new(); // ring ticket, lane, end
        let mut batch: Vec<Determinant> = Vec::new();
        let mut target_dead = false;
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
                    let path = hosted_snapshot_path(&self.cfg.segment_base, *c);
                    let image = ring.to_vec(0, ring.len())?;
                    write_atomically(&path, &image)?;
                }
                self.segment.set(Status::SnapshotDone, asked);
            }
            if !target_dead {
                let step = self.log_step(
                    provider,
                    &mut writer,
                    &mut consumer,
                    &mut batch,
                    lanes,
                    &mut pending_dets,
                    &mut pending_frames,
                );
                match step {
                    Ok(moved) => busy |= moved,
                    Err(e) => {
                        if path_error(&e) || provider.peer_state(target) == PeerState::Dead {
                            target_dead = true;
                            self.report_dead(&mut watched, target, &format!("log write failed: {e}"));
                        } else {
                            return Err(e);
                        }
                    }
                }
                if !target_dead {
                    let durable = writer.durable_watermark();
                    self.segment.set(Status::RingDurable, durable);
                    while pending_dets.front().is_some_and(|p| p.0 <= durable) {
                        if let Some((_, end, n)) = pending_dets.pop_front() {
                            consumer.mark_durable(end)?;
                            summary.determinants += n;
                            self.segment.set(Status::DeterminantsLogged, summary.determinants);
                        }
                    }
                    while pending_frames.front().is_some_and(|p| p.0 <= durable) {
                        if let Some((_, lane, end)) = pending_frames.pop_front() {
                            self.segment.mark_durable(lane, end)?;
                            summary.payloads += 1;
                            self.segment.set(Status::PayloadsLogged, summary.payloads);
                        }
                    }
                    summary.ring_bytes_written = writer.head();
                }
            } else if let Err(e) = provider.progress() {
                eprintln!("reverb logger-core node {me}: {e}");
            }

            // Heartbeat completions (only ours: the ring writer's stay queued for it).
            if !hb_ops.is_empty() {
                let mut failed: Vec<TransportError> = Vec::new();
                let mut done: Vec<OpId> = Vec::new();
                provider.completions().retain(|c| {
                    if hb_ops.contains(&c.op) {
                        done.push(c.op);
                        if let Err(e) = &c.status {
                            failed.push(e.clone());
                        }
                        false
                    } else {
                        true
                    }
                });
                hb_ops.retain(|op| !done.contains(op));
                for e in failed {
                    if let TransportError::PeerDead(r) = e {
                        self.report_dead(&mut watched, r, "heartbeat write failed (PeerDead)");
                        target_dead |= r == target;
                    }
                }
            }

            let now = Instant::now();
            if now >= next_hb {
                next_hb = now + hb_period;
                counter += 1;
                if !matches!(phase, Phase::Parting(_)) {
                    self.send_heartbeat(provider, &heartbeat_out, &mut watched, me, counter, &mut hb_ops);
                }
                for node in related.iter().copied() {
                    if let Some(why) = self.check_peer(provider, &heartbeat_in, &mut watched, node, now) {
                        self.report_dead(&mut watched, node, &why);
                        target_dead |= node == target;
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
                let drained = self.drained(&consumer, &writer, lanes)?;
                let expired = now.duration_since(since) >= self.cfg.drain_timeout;
                if drained || target_dead || expired {
                    let (dets, bytes) = self.leftover(lanes)?;
                    summary.leftover_determinants = dets;
                    summary.leftover_payload_bytes = bytes;
                    if dets + bytes > 0 {
                        eprintln!(
                            "reverb logger-core node {me}: stopping with {dets} determinants and {bytes} payload \
                             bytes not durable ({})",
                            if target_dead { "buddy dead" } else { "drain bound passed" }
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

        summary.buddy_dead = target_dead;
        for (c, _) in &hosted {
            std::fs::remove_file(hosted_snapshot_path(&self.cfg.segment_base, *c)).ok();
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

    /// Moves what fits from the queues into the ring and polls its completions. Returns
    /// whether anything moved.
    #[allow(clippy::too_many_arguments)]
    fn log_step(
        &self,
        provider: &mut dyn Provider,
        writer: &mut LogRingWriter,
        consumer: &mut crate::detqueue::DetConsumer<'_>,
        batch: &mut Vec<Determinant>,
        lanes: u64,
        pending_dets: &mut VecDeque<(u64, u64, u64)>,
        pending_frames: &mut VecDeque<(u64, u64, u64)>,
    ) -> Result<bool, CoreError> {
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
            let ticket = writer.append_determinants(provider, batch)?;
            pending_dets.push_back((ticket, range.end, batch.len() as u64));
            moved = true;
        }
        for lane in 0..lanes {
            for _ in 0..FRAMES_PER_LANE {
                let Some((data, end)) = self.segment.peek_frame(lane)? else { break };
                if writer.bytes_needed(&[data.len()]) > writer.free() {
                    break; // ring full: back-pressure until a trim
                }
                let ticket = writer.append(provider, RecordKind::Payload, &data)?;
                self.segment.take_through(lane, end)?;
                pending_frames.push_back((ticket, lane, end));
                moved = true;
            }
        }
        let durable = writer.poll(provider)?;
        // GC hook: after a checkpoint, drop everything durable so far.
        let asked = self.segment.get(Status::TrimRequested);
        if asked > self.segment.get(Status::TrimDone) {
            writer.trim(provider, durable)?;
            self.segment.set(Status::TrimDone, asked);
        }
        Ok(moved)
    }

    fn drained(
        &self,
        consumer: &crate::detqueue::DetConsumer<'_>,
        writer: &LogRingWriter,
        lanes: u64,
    ) -> Result<bool, CoreError> {
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

    fn send_heartbeat(
        &self,
        provider: &mut dyn Provider,
        out: &Region,
        watched: &mut [Watched],
        me: Rank,
        value: u64,
        ops: &mut Vec<OpId>,
    ) {
        for i in 0..watched.len() {
            if watched[i].life != PeerLife::Alive {
                continue;
            }
            let node = watched[i].node;
            let remote = watched[i].heartbeat_region;
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
                    self.report_dead(watched, node, &why);
                }
            }
        }
    }

    /// The last heartbeat says "stopped" (also to peers that already stopped: they may still
    /// be waiting for it); waits (bounded) for it to land.
    fn send_stopped(&self, provider: &mut dyn Provider, out: &Region, watched: &[Watched], me: Rank) {
        for w in watched.iter().filter(|w| w.life != PeerLife::Dead) {
            let _ = out.write(0, &STOPPED.to_le_bytes());
            let rma = Rma {
                local: out,
                local_offset: 0,
                remote: &w.heartbeat_region,
                remote_offset: 8 * u64::from(me),
                len: 8,
            };
            if let Ok(op) = provider.put(rma, Signal::Yes) {
                let _ = provider.wait_op(op, self.cfg.heartbeat);
            }
        }
    }

    /// Reads `node`'s heartbeat word; `Some(reason)` when it is newly found dead.
    fn check_peer(
        &self,
        provider: &dyn Provider,
        heartbeat_in: &Region,
        watched: &mut [Watched],
        node: Rank,
        now: Instant,
    ) -> Option<String> {
        let heartbeat = self.cfg.heartbeat;
        let w = watched.iter_mut().find(|w| w.node == node)?;
        if w.life != PeerLife::Alive {
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
        }
        if transport_dead {
            return Some("the transport reports it dead (PeerDead)".into());
        }
        let silent = now.duration_since(w.last_change);
        (silent >= heartbeat).then(|| format!("heartbeat silent for {} ms", silent.as_millis()))
    }

    fn report_dead(&self, watched: &mut [Watched], node: Rank, why: &str) {
        let buddy = self.segment.get(Status::BuddyNode);
        let Some(w) = watched.iter_mut().find(|w| w.node == node) else { return };
        if w.life == PeerLife::Dead {
            return;
        }
        w.life = PeerLife::Dead;
        let since = w.last_change.elapsed().as_millis() as u64;
        let role = if u64::from(node) == buddy { "buddy " } else { "" };
        if u64::from(node) == buddy {
            self.segment.set(Status::DetectionMs, since);
            self.segment.set(Status::BuddyState, segment::BUDDY_DEAD);
        }
        eprintln!(
            "reverb logger-core: {role}node {node} is dead ({why}); reported {since} ms after its last heartbeat"
        );
    }
}

/// Whether an error means the buddy path is gone (rather than a bug or a bad argument).
/// Where a snapshot of the ring hosted for node `client` goes (next to the segment).
pub fn hosted_snapshot_path(segment_base: &str, client: Rank) -> PathBuf {
    PathBuf::from(format!("{segment_base}.hosted-node{client}"))
}

/// Readers never see a half-written snapshot: write aside, then rename.
fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> Result<(), CoreError> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).map_err(|e| CoreError::io(format!("write {}", tmp.display()), e))?;
    std::fs::rename(&tmp, path).map_err(|e| CoreError::io(format!("rename to {}", path.display()), e))
}

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
        };
        assert!(cfg.validate().is_err(), "a ring smaller than two lanes' worth");
        assert!(LoggerCoreConfig { ring_bytes: 8192, ..cfg.clone() }.validate().is_ok());
        assert!(LoggerCoreConfig { ring_bytes: 8192, heartbeat: Duration::from_millis(1), ..cfg }
            .validate()
            .is_err());
    }
}
