//! One run of the logger loop on an opened loggers' job: the state the loop keeps, how it is
//! set up, the loop itself and the shutdown phases. The loop's jobs live beside it:
//! [`super::startup`] (the start-up exchange), [`super::drain`] (queues into the ring,
//! watermarks, snapshots, trims), [`super::peers`] (heartbeats, deaths) and
//! [`super::respawn`] (hellos, respawned loggers).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime};

use reverb_transport::{Access, Bootstrap, OpId, Provider, Rank, Region};

use super::hello::Hellos;
use super::log_path::LogPath;
use super::peers::{PeerLife, Phase, Watched};
use super::segment::{self, Status};
use super::service::{LoggerCore, LoggerSummary};
use super::snapshot::{hosted_snapshot_path, retired_snapshot_path};
use super::CoreError;
use crate::buddy::BuddyMap;
use crate::detqueue::DetConsumer;
use crate::error::LogError;
use crate::logring;

/// How often a logger asks the rendezvous about respawned loggers (a non-blocking read).
const REJOIN_POLL: Duration = Duration::from_millis(10);

/// The logger loop's state. The transport and bootstrap are the caller's.
pub(super) struct Session<'a> {
    pub(super) core: &'a LoggerCore,
    pub(super) boot: &'a mut dyn Bootstrap,
    pub(super) provider: &'a mut dyn Provider,
    pub(super) me: Rank,
    /// The buddy: the node whose ring this node logs into.
    pub(super) target: Rank,
    /// The nodes that log into rings this node hosts.
    pub(super) clients: Vec<Rank>,
    /// The buddy and the clients, sorted, once each.
    pub(super) related: Vec<Rank>,
    pub(super) hosted: Vec<(Rank, Region)>,
    /// Rings hosted for a dead incarnation, kept readable for replay until the next trim.
    pub(super) retired: Vec<(Rank, u64, Region)>,
    pub(super) retired_count: u64,
    pub(super) heartbeat_in: Region,
    pub(super) heartbeat_out: Region,
    pub(super) watched: Vec<Watched>,
    pub(super) path: LogPath,
    pub(super) hellos: Hellos,
    /// Heartbeat puts in flight.
    pub(super) hb_ops: Vec<OpId>,
    pub(super) phase: Phase,
    pub(super) summary: LoggerSummary,
    counter: u64,
    next_hb: Instant,
    next_rejoin_poll: Instant,
    idle: u32,
}

impl<'a> Session<'a> {
    /// Works out the buddy pairs and registers the hosted rings and heartbeat words.
    pub(super) fn open(
        core: &'a LoggerCore,
        boot: &'a mut dyn Bootstrap,
        provider: &'a mut dyn Provider,
    ) -> Result<Self, CoreError> {
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
        core.segment.set(Status::BuddyNode, u64::from(target));

        let hosted: Vec<(Rank, Region)> = clients
            .iter()
            .map(|&c| Ok((c, logring::create_ring(provider, core.cfg.ring_bytes)?)))
            .collect::<Result<_, CoreError>>()?;
        let heartbeat_in = provider.alloc_region(8 * nodes as usize, Access::REMOTE_WRITE)?;
        heartbeat_in.fill(0, heartbeat_in.len(), 0)?;
        let heartbeat_out = provider.alloc_region(8, Access::LOCAL)?;

        let mut related: Vec<Rank> = std::iter::once(target).chain(clients.iter().copied()).collect();
        related.sort_unstable();
        related.dedup();
        let now = Instant::now();
        let watched = related
            .iter()
            .map(|&node| Watched::new(node, provider.peer_incarnation(node).unwrap_or(0), now))
            .collect();
        Ok(Session {
            core,
            boot,
            provider,
            me,
            target,
            clients,
            related,
            hosted,
            retired: Vec::new(),
            retired_count: 0,
            heartbeat_in,
            heartbeat_out,
            watched,
            path: LogPath::default(),
            hellos: Hellos::default(),
            hb_ops: Vec::new(),
            phase: Phase::Running,
            summary: LoggerSummary { node: me, buddy: target, ..Default::default() },
            counter: 0,
            next_hb: now,
            next_rejoin_poll: now,
            idle: 0,
        })
    }

    /// Start-up, the loop until stopped, then the clean-up.
    pub(super) fn run(mut self) -> Result<LoggerSummary, CoreError> {
        self.start_up()?;
        self.hellos.post(self.provider)?;
        // Silence counts from here: the start-up may take long on a loaded machine.
        let now = Instant::now();
        for w in self.watched.iter_mut() {
            w.last_change = now;
            w.last_change_wall = SystemTime::now();
            w.since = now;
        }
        self.next_hb = now;
        self.next_rejoin_poll = now;
        let mut consumer = self.core.detq.consumer()?;
        self.core.segment.set(Status::State, segment::STATE_READY);
        self.run_loop(&mut consumer)?;
        self.finish()
    }

    fn run_loop(&mut self, consumer: &mut DetConsumer<'_>) -> Result<(), CoreError> {
        let lanes = self.core.segment.lanes();
        let hb_period = self.core.cfg.heartbeat / 4;
        let mut batch = Vec::new();
        loop {
            self.core.segment.bump(Status::Ticks);
            self.serve_snapshot_request()?;
            let mut busy = self.log(consumer, &mut batch, lanes)?;
            self.serve_trim_request()?;
            busy |= self.take_completions()?;

            let now = Instant::now();
            if now >= self.next_rejoin_poll && self.phase == Phase::Running {
                self.next_rejoin_poll = now + REJOIN_POLL;
                self.poll_rejoins();
            }
            if now >= self.next_hb {
                self.next_hb = now + hb_period;
                self.counter += 1;
                self.heartbeat_tick(self.counter, now)?;
            }
            if self.shutdown_step(consumer, lanes, now)? {
                return Ok(());
            }
            self.pause(busy);
        }
    }

    /// Advances the shutdown phases; true once the loop may end.
    fn shutdown_step(
        &mut self,
        consumer: &DetConsumer<'_>,
        lanes: u64,
        now: Instant,
    ) -> Result<bool, CoreError> {
        let stop =
            self.core.stop.load(Ordering::Acquire) || self.core.segment.get(Status::StopRequested) != 0;
        if self.phase == Phase::Running && stop {
            self.core.segment.set(Status::State, segment::STATE_STOPPING);
            self.phase = Phase::Draining(now);
        }
        if let Phase::Draining(since) = self.phase {
            let target_down = self.path.writer.is_none();
            let drained = !target_down && self.drained(consumer, lanes)?;
            let expired = now.duration_since(since) >= self.core.cfg.drain_timeout;
            if drained || target_down || expired {
                self.record_leftover(lanes, target_down)?;
                self.send_stopped();
                self.phase = Phase::Parting(now);
            }
        }
        if let Phase::Parting(since) = self.phase {
            let clients = &self.clients;
            let hosted_done =
                self.watched.iter().filter(|w| clients.contains(&w.node)).all(|w| w.life != PeerLife::Alive);
            if hosted_done {
                return Ok(true);
            }
            if now.duration_since(since) >= self.core.cfg.drain_timeout {
                tracing::info!(
                    "reverb logger-core node {}: nodes {:?} did not stop within the bound",
                    self.me,
                    self.clients
                );
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// What could not be made durable, in the summary and on stderr.
    fn record_leftover(&mut self, lanes: u64, target_down: bool) -> Result<(), CoreError> {
        let (dets, bytes) = self.leftover(lanes)?;
        self.summary.leftover_determinants = dets;
        self.summary.leftover_payload_bytes = bytes;
        if dets + bytes > 0 {
            tracing::warn!(
                "reverb logger-core node {}: stopping with {dets} determinants and {bytes} payload bytes not \
                 durable ({})",
                self.me,
                if target_down { "buddy dead" } else { "drain bound passed" }
            );
        }
        Ok(())
    }

    /// Idles as the placement allows when nothing moved.
    fn pause(&mut self, busy: bool) {
        if busy {
            self.idle = 0;
            return;
        }
        self.idle = self.idle.saturating_add(1);
        if self.core.cfg.placement.spins() || self.idle < 64 {
            std::hint::spin_loop();
        } else if self.idle < 1024 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// Removes the snapshots, dumps the hosted rings if asked, and returns the summary.
    fn finish(mut self) -> Result<LoggerSummary, CoreError> {
        self.summary.buddy_dead = self.path.writer.is_none();
        let base = &self.core.cfg.segment_base;
        for (c, _) in &self.hosted {
            std::fs::remove_file(hosted_snapshot_path(base, *c)).ok();
        }
        for (c, k, _) in &self.retired {
            std::fs::remove_file(retired_snapshot_path(base, *c, *k)).ok();
        }
        if let Some(dir) = &self.core.cfg.dump_dir {
            for (c, ring) in &self.hosted {
                let path = dir.join(format!("ring-node{c}.bin"));
                let image = ring.to_vec(0, ring.len())?;
                std::fs::write(&path, image)
                    .map_err(|e| CoreError::io(format!("write {}", path.display()), e))?;
            }
        }
        Ok(self.summary)
    }
}
