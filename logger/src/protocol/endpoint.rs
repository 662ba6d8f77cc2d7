//! [`LoggedEndpoint`]: the part common to every protocol (channels, envelopes, frame pools,
//! stats, matching), with the protocol behind one `Box<dyn LogProtocol>`. Construction,
//! accessors, progress and shutdown live here; the send path in `send.rs`, the receive path
//! in `receive.rs`, recovery in `recovery.rs`, checkpoint GC in `gc.rs`.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use reverb_transport::spinwait::{Idle, SpinWait};
use reverb_transport::{Bootstrap, Capabilities, CompletionKind, JobInfo, OpId, Owner, Provider, Rank};

use super::delivery::Arrived;
use super::passthrough::LentSends;
use super::registry::{self, ProtocolEntry, ProtocolSetup};
use super::rings::{BuddyRings, HostedRing};
use super::{Background, DeterminantSink, LogConfig, LogIo, LogMode, LogProtocol, LogUnit, Pending};
use crate::causal::ReplayPlan;
use crate::channel::{RecvChannels, SendSequencer};
use crate::commmatrix::{CommMatrix, CommRow};
use crate::determinant::{Determinant, ReceptionCounter, Rsn, Ssn};
use crate::detqueue::DetQueue;
use crate::error::{LogError, Result};
use crate::framepool::{FramePool, RecvPool};
use crate::sendlog::SendLog;
use crate::sink::LoggerOffload;
use crate::stats::{LogStats, StatsSnapshot};

/// Receives kept posted in the provider, so arrivals rarely take the unexpected path.
pub(super) const POSTED_RECEIVES: usize = 4;
/// Registered bytes for framing large messages in place (as much as the shm provider pools
/// for its own staging, which such sends then leave unused).
const FRAME_POOL_BYTES: usize = 64 << 20;
/// Registered bytes of receive regions: room for a stream's window of 1 MiB frames (every
/// arrival is fetched as soon as it is announced, delivered or not) and the deliveries the
/// application still holds; beyond it receives are posted as owned buffers. At 64 MiB a
/// 64-message window spilled into owned buffers: 340 k page faults per `bench bw` run, 209 k
/// at 128 MiB.
const RECV_POOL_BYTES: usize = 128 << 20;

/// An endpoint whose messages carry envelopes and are logged per the job's [`LogMode`].
pub struct LoggedEndpoint {
    pub(super) provider: Box<dyn Provider>,
    /// The provider owner of the endpoint's sends and receives: its queue holds only theirs.
    pub(super) owner: Owner,
    pub(super) config: LogConfig,
    pub(super) rank: Rank,
    pub(super) size: u32,
    pub(super) incarnation: u32,
    /// What the job's protocol does at each hook (`protocol::registry`).
    pub(super) protocol: Box<dyn LogProtocol>,
    /// The protocol's last word on what it has to do: the hot paths skip the rest.
    pub(super) pending: Pending,
    pub(super) sequencer: SendSequencer,
    pub(super) channels: RecvChannels<Arrived>,
    pub(super) reception: ReceptionCounter,
    /// Messages in channel order, not yet matched by a receive.
    pub(super) ready: VecDeque<Arrived>,
    /// Scratch for `RecvChannels::accept`: what one arrival releases in order.
    pub(super) released: Vec<(Ssn, Arrived)>,
    pub(super) posted: Vec<OpId>,
    pub(super) rings: BuddyRings,
    /// Per peer, `logs_payload_with(peer)`: fixed by the mode, the unit and the node map,
    /// so the per-message paths read one byte instead of matching on all three.
    pub(super) payload_logged: Vec<bool>,
    /// Set at a restarted rank while it re-executes: wildcard receives follow it.
    pub(super) replay: Option<ReplayPlan>,
    /// Set by a layer whose receives may be outstanding together (MPI's nonblocking ones):
    /// which of them takes the next message follows arrival order, so named receives are
    /// logged, and replayed, as wildcard ones (`set_order_logged`).
    pub(super) order_logged: bool,
    /// Rsns taken by `tick`, for no delivery.
    pub(super) ticks: u64,
    /// The rsn of the last tick: a probe in the same call logs its finding there.
    pub(super) last_tick: Rsn,
    /// Retired senders and the other copies that sent the same messages under the same
    /// numbers (partial redundancy): a replayed delivery from a retired one takes theirs.
    pub(super) stand_ins: Vec<(Rank, Vec<Rank>)>,
    /// Ranks retired from the job (masked copies): a send to one that failed when it died is
    /// not an error, its death was dealt with.
    pub(super) retired: Vec<Rank>,
    /// The retired senders whose stand-in served a replayed delivery (said once each).
    pub(super) stand_ins_used: std::collections::BTreeSet<Rank>,
    /// Whether the last delivery was a stand-in's copy (`last_delivery_stood_in`).
    pub(super) last_stood_in: bool,
    /// The first bytes of the message the last probe found (`probed_head`).
    pub(super) probed_head: Option<[u8; 8]>,
    /// Collective-aware logging's keys and gathered payloads.
    pub(super) multicasts: super::multicast::Multicasts,
    pub(super) sink: DeterminantSink,
    /// Under `reverb run --logger ...`: the node logger core that does this rank's log writes.
    pub(super) offload: Option<LoggerOffload>,
    pub(super) comm: CommRow,
    /// Piggyback of the message being sent, reused.
    pub(super) piggyback: Vec<Determinant>,
    /// Decode buffer for arriving piggybacks, reused.
    pub(super) incoming_dets: Vec<Determinant>,
    pub(super) stats: LogStats,
    pub(super) send_buf: Vec<u8>,
    /// Whether messages go with the short envelope when nothing is piggybacked: not when the
    /// protocol logs received frames, which are read apart from their channel.
    pub(super) short_envelopes: bool,
    /// Messages go as the provider's own, with no envelope (`passthrough.rs`).
    pub(super) pass_through: bool,
    /// Pass-through on a load/store provider: claims may land in the caller's buffer.
    pub(super) lands_in_place: bool,
    /// Registered buffers large frames are written and sent from.
    pub(super) frames: FramePool,
    /// Registered regions receives are posted into.
    pub(super) recv_frames: RecvPool,
    /// Provider sends not completed yet: a provider may hold them in a backlog that only its
    /// progress drains, so `finish` waits for them before it stops progressing.
    pub(super) sends_in_flight: u64,
    /// Pass-through sends of lent payloads (`send_lent`) and their outcomes.
    pub(super) lent: LentSends,
    /// Fault injection: called in the log GC once every rank has checkpointed, before the
    /// logs are trimmed.
    #[cfg(feature = "fault-injection")]
    pub(super) trim_hook: Option<fn()>,
}

impl fmt::Debug for LoggedEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoggedEndpoint")
            .field("rank", &self.rank)
            .field("mode", &self.config.mode)
            .field("buddy", &self.buddy())
            .field("ready", &self.ready.len())
            .finish_non_exhaustive()
    }
}

/// A failed [`LoggedEndpoint::try_new`]: why, and the provider it was given.
pub struct SetupFailed {
    /// What failed.
    pub error: LogError,
    /// The provider, still connected to every peer that is alive.
    pub provider: Box<dyn Provider>,
}

impl fmt::Debug for SetupFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SetupFailed").field("error", &self.error).finish_non_exhaustive()
    }
}

impl LoggedEndpoint {
    /// Wraps `provider`. Collective: every rank of the job calls it with the same mode, since
    /// every logging mode exchanges node ids and log rings through `boot` (`none` does not).
    /// On an error the provider is dropped; [`LoggedEndpoint::try_new`] hands it back instead.
    pub fn new(provider: Box<dyn Provider>, boot: &mut dyn Bootstrap, config: LogConfig) -> Result<Self> {
        Self::try_new(provider, boot, config).map_err(|failed| failed.error)
    }

    /// [`LoggedEndpoint::new`] that returns the provider with the error, for a caller that
    /// must keep it: a peer dying inside the setup's collectives is recoverable, and the
    /// provider (connected to every rank) is what the recovery needs.
    pub fn try_new(
        mut provider: Box<dyn Provider>,
        boot: &mut dyn Bootstrap,
        config: LogConfig,
    ) -> std::result::Result<Self, SetupFailed> {
        let (entry, rings) = match Self::exchange_rings(&mut *provider, boot, &config) {
            Ok(found) => found,
            Err(error) => return Err(SetupFailed { error, provider }),
        };
        let job = boot.job().clone();
        let owner = match provider.open_owner() {
            Ok(owner) => owner,
            Err(e) => return Err(SetupFailed { error: e.into(), provider }),
        };
        let mut endpoint = Self::assemble((provider, owner), &job, entry, rings, config);
        match endpoint.finish_setup(job.local_rank) {
            Ok(()) => Ok(endpoint),
            Err(error) => Err(SetupFailed { error, provider: endpoint.into_provider() }),
        }
    }

    /// The collective part: checks the job against the configuration and, for the protocols
    /// that log at a buddy, creates and exchanges the log rings.
    fn exchange_rings(
        provider: &mut dyn Provider,
        boot: &mut dyn Bootstrap,
        config: &LogConfig,
    ) -> Result<(&'static ProtocolEntry, BuddyRings)> {
        let entry = registry::entry(config.mode).ok_or_else(|| {
            LogError::Unsupported(format!("logging mode {:?} is not registered", config.mode))
        })?;
        let (rank, size) = (boot.job().rank, boot.job().size);
        check_job(provider, config, rank, size)?;
        let rings = if entry.uses_buddy_log {
            BuddyRings::set_up(provider, boot, config)?
        } else {
            BuddyRings::default()
        };
        Ok((entry, rings))
    }

    /// The endpoint around `provider` (posting for `owner`) and the exchanged `rings`, before
    /// any receive is posted.
    fn assemble(
        (provider, owner): (Box<dyn Provider>, Owner),
        job: &JobInfo,
        entry: &ProtocolEntry,
        rings: BuddyRings,
        config: LogConfig,
    ) -> Self {
        let failure_units = config.failure_units(&rings.node_of_rank);
        let setup =
            ProtocolSetup { size: job.size, rank: job.rank, failure_units: &failure_units, config: &config };
        let protocol = (entry.new)(&setup);
        let short_envelopes = !protocol.logs_frames();
        let pass_through = super::passthrough::applies(entry.frames_messages, &config, &*provider);
        // A send log keeps large payloads in the frames they were sent from: room for it.
        let frame_pool_bytes = FRAME_POOL_BYTES + protocol.send_log().map_or(0, |_| config.send_log_limit);
        let mut endpoint = LoggedEndpoint {
            rank: job.rank,
            size: job.size,
            incarnation: job.incarnation,
            protocol,
            pending: Pending::default(),
            sequencer: SendSequencer::new(job.size),
            channels: RecvChannels::new(job.size, config.reorder_window),
            reception: ReceptionCounter::new(job.rank),
            ready: VecDeque::new(),
            released: Vec::new(),
            posted: Vec::with_capacity(POSTED_RECEIVES),
            rings,
            payload_logged: Vec::new(),
            replay: None,
            order_logged: false,
            ticks: 0,
            last_tick: 0,
            stand_ins: Vec::new(),
            retired: Vec::new(),
            stand_ins_used: Default::default(),
            last_stood_in: false,
            probed_head: None,
            multicasts: Default::default(),
            sink: DeterminantSink::BuddyRing,
            offload: None,
            comm: CommRow::new(job.size),
            piggyback: Vec::new(),
            incoming_dets: Vec::new(),
            stats: LogStats::default(),
            send_buf: Vec::new(),
            short_envelopes,
            pass_through,
            lands_in_place: pass_through && provider.capabilities().contains(Capabilities::SYNC_RMA),
            frames: FramePool::new(frame_pool_bytes),
            recv_frames: RecvPool::new(RECV_POOL_BYTES),
            sends_in_flight: 0,
            lent: LentSends::default(),
            #[cfg(feature = "fault-injection")]
            trim_hook: None,
            provider,
            owner,
            config,
        };
        endpoint.payload_logged = (0..endpoint.size).map(|p| endpoint.payload_logged_slow(p)).collect();
        endpoint
    }

    /// Posts the receives and attaches the node logger core, if one runs (as the producer of
    /// lane `local_rank`).
    fn finish_setup(&mut self, local_rank: u32) -> Result<()> {
        while !self.pass_through && self.posted.len() < POSTED_RECEIVES {
            self.post_receive()?;
        }
        if registry::entry(self.config.mode).is_some_and(|e| e.uses_buddy_log) {
            self.attach_logger_core(local_rank.into())?;
        }
        Ok(())
    }

    /// Takes the endpoint apart for its provider (its regions and rings are dropped, its
    /// owners closed: what it still has posted completes unseen).
    fn into_provider(mut self) -> Box<dyn Provider> {
        if let Some(log) = self.rings.log.take() {
            log.writer.close(&mut *self.provider);
        }
        self.provider.close_owner(self.owner);
        self.provider
    }

    /// The protocol and the logging machinery it may use, borrowed apart.
    #[inline]
    pub(super) fn protocol_io(&mut self) -> (&mut dyn LogProtocol, LogIo<'_>) {
        let io = LogIo {
            provider: &mut *self.provider,
            log: self.rings.log.as_mut(),
            sink: &self.sink,
            offload: self.offload.as_ref(),
            config: &self.config,
            stats: &self.stats,
            comm: &mut self.comm,
        };
        (&mut *self.protocol, io)
    }

    /// Log writes off the delivery path (`LogProtocol::background`), when the protocol has
    /// work due (forced: any state to work on): the common case costs one comparison.
    #[inline]
    pub(super) fn background(&mut self, force: bool) -> Result<()> {
        let due = if force { Background::Held } else { Background::Due };
        if self.pending.background < due {
            return Ok(());
        }
        self.background_now(force)
    }

    #[inline(never)]
    fn background_now(&mut self, force: bool) -> Result<()> {
        let (protocol, mut io) = self.protocol_io();
        self.pending = protocol.background(&mut io, force)?;
        Ok(())
    }

    /// Asks the protocol again after a hook that may have changed what it has pending.
    pub(super) fn refresh_pending(&mut self) {
        self.pending = self.protocol.pending();
    }

    pub fn rank(&self) -> Rank {
        self.rank
    }

    pub fn size(&self) -> u32 {
        self.size
    }

    pub fn mode(&self) -> LogMode {
        self.config.mode
    }

    /// Whether messages go as the provider's own, with no envelope (logging off, on a
    /// provider that can peek at arrivals: `passthrough.rs`).
    pub fn is_pass_through(&self) -> bool {
        self.pass_through
    }

    /// The failure unit this endpoint logs for.
    pub fn unit(&self) -> LogUnit {
        self.config.unit
    }

    /// The rank hosting this rank's log (every mode but `none`).
    pub fn buddy(&self) -> Option<Rank> {
        self.rings.log.as_ref().map(|l| l.buddy)
    }

    /// `ranks` are gone from the job for good (copies whose death partial redundancy masked):
    /// if one hosts this rank's log, logging stops (nothing else could take the ring over),
    /// so this rank's own failure from now on is not recoverable from its log.
    pub fn retire(&mut self, ranks: &[Rank]) {
        for &r in ranks {
            if !self.retired.contains(&r) {
                self.retired.push(r);
            }
        }
        if let Some(buddy) = self.buddy().filter(|b| ranks.contains(b)) {
            tracing::warn!(
                "reverb: rank {}: its log buddy {buddy} was retired from the job: it logs no more",
                self.rank
            );
            self.rings.log = None;
            self.rings.buddy_retired = true;
        }
    }

    /// Partial redundancy: `retired` sent the same messages, in the same channel order, as
    /// each of `copies` (the other copies of its rank, live ones first); a replayed delivery
    /// the log names from `retired` (whose sender log died with it) takes theirs instead.
    pub fn stand_in(&mut self, retired: Rank, copies: Vec<Rank>) {
        self.stand_ins.retain(|(r, _)| *r != retired);
        self.stand_ins.push((retired, copies));
    }

    /// Whether the last message delivered was a stand-in's copy of a retired copy's message
    /// (`stand_in`): a message new to the receiver, which the log had from the retired one.
    pub fn last_delivery_stood_in(&self) -> bool {
        self.last_stood_in
    }

    /// The rings this rank keeps for its clients.
    pub fn hosted_rings(&self) -> &[HostedRing] {
        &self.rings.hosted
    }

    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    /// The provider underneath, for traffic outside the logging protocol (not logged).
    pub fn provider(&mut self) -> &mut dyn Provider {
        &mut *self.provider
    }

    /// The sender's message log (`pessimistic-sb`, `causal`, and `pessimistic-rb` for the
    /// messages in flight when a receiver dies).
    pub fn send_log(&self) -> Option<&SendLog> {
        self.protocol.send_log()
    }

    /// The ssn of the last message sent to `dest` (0 before the first).
    pub fn last_ssn_sent(&self, dest: Rank) -> Option<Ssn> {
        self.sequencer.last_ssn(dest)
    }

    /// Causal: this rank's own determinants not yet stable.
    pub fn unstable_determinants(&self) -> usize {
        self.protocol.unstable_determinants()
    }

    /// Whether a message between this rank and `peer` has its payload logged: every one under
    /// `REVERB_LOG_UNIT=rank`, only inter-node ones under `node`, only inter-team ones under teams.
    #[inline]
    pub fn logs_payload_with(&self, peer: Rank) -> bool {
        match self.payload_logged.get(peer as usize) {
            Some(&logged) => logged,
            None => self.payload_logged_slow(peer),
        }
    }

    fn payload_logged_slow(&self, peer: Rank) -> bool {
        if self.rings.log.is_none() && !self.rings.buddy_retired {
            // `none`: nothing is logged.
            return false;
        }
        match (self.config.unit, &self.config.teams) {
            (LogUnit::Rank, _) => true,
            (LogUnit::Node, _) => !self.same_node(peer),
            (LogUnit::Team, Some(teams)) => !teams.same_team(self.rank, peer),
            (LogUnit::Team, None) => true,
        }
    }

    fn same_node(&self, peer: Rank) -> bool {
        let node = |r: Rank| self.rings.node_of_rank.get(r as usize).copied();
        node(peer).is_some() && node(peer) == node(self.rank)
    }

    /// Makes progress without receiving: drains arrivals into the channels, collects send
    /// completions and advances the log's watermark. Hosting needs nothing more.
    pub fn progress(&mut self) -> Result<()> {
        if let Some(log) = self.rings.log.as_mut() {
            log.writer.poll(&mut *self.provider)?;
        } else {
            self.provider.progress()?;
        }
        self.collect_completions()?;
        self.background(true)
    }

    /// Plugs in the node's determinant queue (`core::NodeLogClient::open_det_queue`): this
    /// rank's determinants (`pessimistic-sb`, `causal`) go there instead of to its ring, and
    /// are stable once the node logger core acknowledged them (the queue's start passed).
    /// Receiver-based logging keeps frames and determinants together in the ring, so it
    /// refuses.
    pub fn attach_det_queue(&mut self, queue: DetQueue) -> Result<()> {
        if !self.config.mode.sender_logs_payloads() {
            return Err(LogError::Unsupported(format!(
                "a node determinant queue under REVERB_LOG={}",
                self.mode()
            )));
        }
        self.flush_log()?;
        self.sink = DeterminantSink::NodeQueue(queue);
        Ok(())
    }

    /// Attaches the node's logger core when the launcher started one (`REVERB_LOGGER_SEGMENT`):
    /// `pessimistic-sb` and `causal` then send determinants through its queue,
    /// `pessimistic-rb` enqueues frames into its payload lane (see [`crate::sink`]).
    fn attach_logger_core(&mut self, lane: u64) -> Result<()> {
        let Some(offload) = LoggerOffload::attach_from_env(lane)? else { return Ok(()) };
        if self.config.mode.sender_logs_payloads() {
            self.attach_det_queue(offload.client().open_det_queue()?)?;
        }
        self.offload = Some(offload);
        Ok(())
    }

    /// The node logger core this endpoint logs through, if any.
    pub fn logger_offload(&self) -> Option<&LoggerOffload> {
        self.offload.as_ref()
    }

    /// Where determinants go now.
    pub fn determinant_sink(&self) -> &DeterminantSink {
        &self.sink
    }

    /// This rank's row of the communication matrix.
    pub fn comm_row(&self) -> &CommRow {
        &self.comm
    }

    /// Collective: every rank's row, as the whole matrix (on every rank; rank 0 writes it with
    /// `CommMatrix::to_text`).
    pub fn gather_comm_matrix(&self, boot: &mut dyn Bootstrap) -> Result<CommMatrix> {
        let rows = boot.allgather(&self.comm.to_bytes())?;
        CommMatrix::from_rows(rows.iter().map(|r| CommRow::from_bytes(r)).collect::<Result<_>>()?)
    }

    /// Waits until every log write is durable and the buddy's ring header says so.
    /// Causal: writes every pending determinant first; all of them are stable on return.
    /// A causal determinant that a full ring or queue keeps unwritten is `RingFull`: only a
    /// checkpoint frees room (and makes the determinant unnecessary).
    pub fn flush_log(&mut self) -> Result<()> {
        self.flush_writes()?;
        let unwritten = self.protocol.unwritten_determinants();
        // A retired buddy (partial redundancy) takes no writes: they stay unwritten for good.
        if unwritten > 0 && !self.rings.buddy_retired {
            let free = self.rings.log.as_ref().map_or(0, |l| l.writer.free());
            return Err(LogError::RingFull { needed: (unwritten * Determinant::WIRE_LEN) as u64, free });
        }
        Ok(())
    }

    /// Everything written so far is durable on return; causal determinants that find no room
    /// stay unwritten.
    pub(super) fn flush_writes(&mut self) -> Result<()> {
        let (protocol, mut io) = self.protocol_io();
        let flushed = protocol.flush_writes(&mut io);
        self.refresh_pending();
        flushed
    }

    /// Waits until every message sent (or re-sent) has left this rank, progressing meanwhile.
    pub fn wait_sends(&mut self, timeout: Duration) -> Result<()> {
        let mut wait = SpinWait::new(self.provider.config(), timeout);
        loop {
            self.progress()?;
            if self.sends_in_flight == 0 {
                return Ok(());
            }
            wait.busy()?;
            self.await_own(&mut wait, |k| matches!(k, CompletionKind::Send { .. }))?;
        }
    }

    /// One leg of a longer wait: progresses, spinning or sleeping as `wait` says, until this
    /// endpoint's queue holds a completion `wanted` takes, or holds any at all when the wait
    /// would sleep: one left queued (a send's, in a receive) makes the provider's `block`
    /// return at once, so the caller drains it first.
    pub(super) fn await_own(
        &mut self,
        wait: &mut SpinWait,
        wanted: impl Fn(&CompletionKind) -> bool,
    ) -> Result<()> {
        loop {
            self.provider.progress()?;
            // An empty queue is the common round: its check is one load, where the iterator
            // of an empty deque cost ~50 instructions, a quarter of a spinning round.
            let cq = self.provider.completions_of(self.owner);
            if !cq.is_empty() && cq.iter().any(|c| wanted(&c.kind)) {
                return Ok(());
            }
            if let Idle::Sleep(slice) = wait.idle()? {
                if !self.provider.completions_of(self.owner).is_empty() {
                    return Ok(());
                }
                self.provider.block(slice)?;
            }
        }
    }

    /// Collective shutdown: flushes the log and drains this rank's sends, then waits for every
    /// rank, so no host releases a ring a client is still writing and no peer waits on a
    /// message stuck in this rank's backlog. Returns the provider.
    pub fn finish(mut self, boot: &mut dyn Bootstrap) -> Result<Box<dyn Provider>> {
        self.flush_log()?;
        self.wait_sends(self.config.durable_timeout)?;
        self.progressing(boot, |b| b.barrier())?;
        Ok(self.into_provider())
    }

    /// Runs a bootstrap collective (`collective`, on a helper thread) while this endpoint
    /// keeps progressing. A rank blocked in the rendezvous serves nobody, but peers may still
    /// need it: one finishing a replay writes its log into the ring this rank hosts, and on
    /// verbs its eager sends and write-with-immediates spend receive credits that come back
    /// only when this rank polls. Progress errors are left to the collective's outcome (a
    /// dead peer fails it too).
    pub fn progressing<T: Send>(
        &mut self,
        boot: &mut dyn Bootstrap,
        collective: impl FnOnce(&mut dyn Bootstrap) -> T + Send,
    ) -> T {
        std::thread::scope(|scope| {
            let worker = scope.spawn(move || collective(boot));
            while !worker.is_finished() {
                let _ = self.progress();
                // Between polls the collective's socket wakes its own thread; the poll rate
                // bounds how long a peer waits for a credit, not the collective.
                std::thread::sleep(Duration::from_micros(500));
            }
            match worker.join() {
                Ok(result) => result,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }
}

/// The configuration and the provider must agree with the job before any collective.
fn check_job(provider: &dyn Provider, config: &LogConfig, rank: Rank, size: u32) -> Result<()> {
    if config.unit == LogUnit::Team {
        let teams = config.teams.as_ref().ok_or_else(|| {
            LogError::InvalidArgument("REVERB_LOG_UNIT=team needs teams (REVERB_LOG_TEAMS)".into())
        })?;
        teams.check_size(size)?;
    }
    if provider.rank() != rank || provider.size() != size {
        return Err(LogError::InvalidArgument(format!(
            "provider is rank {}/{} but the job says {rank}/{size}",
            provider.rank(),
            provider.size(),
        )));
    }
    Ok(())
}
