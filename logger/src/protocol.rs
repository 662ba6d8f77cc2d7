//! The logging protocols over one `Provider`: [`LoggedEndpoint`] sends and receives
//! application messages wrapped in an [`Envelope`], orders them per channel, assigns reception
//! numbers and, per [`LogMode`], logs what pessimistic recovery needs before delivery.
//!
//! - `none`: envelope, ordering, duplicate and stale drops; nothing is logged.
//! - `pessimistic-rb` (receiver-based, RADIC, seed 003): before a message is handed to the
//!   application, its frame (envelope + payload) and, for wildcard receives, its determinant
//!   are written with one-sided puts into the ring the receiver's buddy registered, and the
//!   writes have completed. Replaying the ring in order reproduces the deliveries.
//! - `pessimistic-sb` (sender-based, seed 000 §2.4): the sender keeps every payload in its
//!   bounded in-memory [`SendLog`] (a full log is back-pressure, `LogFull`); the receiver
//!   writes only the determinant of a wildcard receive into its ring at the buddy and waits
//!   for it to be durable before delivering. Named receives log nothing. Replay takes the
//!   payloads from the senders' logs (`resend_from`) in the order the determinants give.
//!
//! All logged traffic uses one provider tag, [`LOGGED_MESSAGE_TAG`]; the application tag
//! travels in the envelope, and matching happens here, after per-channel ordering (matching in
//! the provider could take a later ssn of a channel first and stall the ordering).
//!
//! Every rank both logs (to its buddy) and hosts (its clients' rings); the rings are created
//! and exchanged in [`LoggedEndpoint::new`], a collective call.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

use reverb_transport::{
    Bootstrap, CompletionKind, OpId, Provider, Rank, RecvBuffer, Region, RemoteRegion, Source, Tag, TagMatch,
    TransportError,
};

use crate::buddy::BuddyMap;
use crate::channel::{Arrival, RecvChannels, SendSequencer};
use crate::determinant::{Determinant, ReceptionCounter, Rsn, Ssn};
use crate::envelope::Envelope;
use crate::error::{LogError, Result};
use crate::logring::{self, LogRingWriter, RecordKind, RingScan};
use crate::sendlog::SendLog;
use crate::stats::{LogStats, ReceiveKind, StatsSnapshot};
use crate::wire::Reader;

/// Provider tag of every enveloped application message ("RVLG").
pub const LOGGED_MESSAGE_TAG: Tag = 0x5256_4c47_0000_0001;
/// Receives kept posted in the provider, so arrivals rarely take the unexpected path.
const POSTED_RECEIVES: usize = 4;

/// Which logging protocol a job runs (`REVERB_LOG`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogMode {
    None,
    PessimisticReceiverBased,
    PessimisticSenderBased,
    Causal,
}

impl LogMode {
    pub fn as_str(self) -> &'static str {
        match self {
            LogMode::None => "none",
            LogMode::PessimisticReceiverBased => "pessimistic-rb",
            LogMode::PessimisticSenderBased => "pessimistic-sb",
            LogMode::Causal => "causal",
        }
    }

    /// `Unsupported` for the protocols not built yet.
    pub fn check_supported(self) -> Result<()> {
        match self {
            LogMode::None | LogMode::PessimisticReceiverBased | LogMode::PessimisticSenderBased => Ok(()),
            LogMode::Causal => Err(LogError::Unsupported(format!(
                "REVERB_LOG={self} is not implemented yet; use none, pessimistic-rb or pessimistic-sb"
            ))),
        }
    }

    /// `REVERB_LOG`, `none` when unset.
    pub fn from_env() -> Result<Self> {
        match std::env::var("REVERB_LOG") {
            Ok(v) => v.parse(),
            Err(std::env::VarError::NotPresent) => Ok(LogMode::None),
            Err(e) => Err(LogError::InvalidArgument(format!("REVERB_LOG: {e}"))),
        }
    }
}

impl fmt::Display for LogMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for LogMode {
    type Err = LogError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "none" => Ok(LogMode::None),
            "pessimistic-rb" => Ok(LogMode::PessimisticReceiverBased),
            "pessimistic-sb" => Ok(LogMode::PessimisticSenderBased),
            "causal" => Ok(LogMode::Causal),
            other => Err(LogError::InvalidArgument(format!(
                "REVERB_LOG={other:?}: expected none, pessimistic-rb, pessimistic-sb or causal"
            ))),
        }
    }
}

/// Logger settings, from `REVERB_LOG*` variables or set directly.
#[derive(Debug, Clone)]
pub struct LogConfig {
    pub mode: LogMode,
    /// Data bytes of each log ring a rank hosts (`REVERB_LOG_RING_BYTES`, a multiple of 8).
    pub ring_capacity: usize,
    /// Early (out-of-order) messages buffered per peer (`REVERB_LOG_REORDER_WINDOW`).
    pub reorder_window: usize,
    /// Largest application payload (`REVERB_LOG_MAX_MESSAGE`).
    pub max_message: usize,
    /// Bound on waiting for a log write to become durable.
    pub durable_timeout: Duration,
    /// Byte limit of the sender's message log in `pessimistic-sb` (`REVERB_LOG_SEND_LOG_BYTES`).
    pub send_log_limit: usize,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            mode: LogMode::None,
            ring_capacity: 8 << 20,
            reorder_window: 4096,
            max_message: 4 << 20,
            durable_timeout: Duration::from_secs(10),
            send_log_limit: 256 << 20,
        }
    }
}

fn env_usize(name: &str) -> Result<Option<usize>> {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| LogError::InvalidArgument(format!("{name}={v:?} is not a byte count"))),
        Err(_) => Ok(None),
    }
}

impl LogConfig {
    /// Defaults overridden by the `REVERB_LOG*` variables that are set.
    pub fn from_env() -> Result<Self> {
        let mut cfg = LogConfig { mode: LogMode::from_env()?, ..LogConfig::default() };
        if let Some(n) = env_usize("REVERB_LOG_RING_BYTES")? {
            cfg.ring_capacity = n;
        }
        if let Some(n) = env_usize("REVERB_LOG_REORDER_WINDOW")? {
            cfg.reorder_window = n;
        }
        if let Some(n) = env_usize("REVERB_LOG_MAX_MESSAGE")? {
            cfg.max_message = n;
        }
        if let Some(n) = env_usize("REVERB_LOG_SEND_LOG_BYTES")? {
            cfg.send_log_limit = n;
        }
        Ok(cfg)
    }
}

/// One message handed to the application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub source: Rank,
    pub tag: Tag,
    pub payload: Vec<u8>,
    /// The message's number on its (source → this rank) channel.
    pub ssn: Ssn,
    /// This delivery's number among all of this rank's deliveries.
    pub rsn: Rsn,
    /// Set for wildcard receives only: deterministic ones replay without it.
    pub determinant: Option<Determinant>,
}

/// A message released in channel order, waiting for a matching receive.
#[derive(Debug)]
struct Arrived {
    sender: Rank,
    ssn: Ssn,
    tag: Tag,
    /// The whole received frame: it is what receiver-based logging writes.
    frame: Vec<u8>,
    payload_offset: usize,
}

/// The ring a rank keeps for one client's log.
#[derive(Debug)]
pub struct HostedRing {
    pub client: Rank,
    pub region: Region,
}

impl HostedRing {
    /// Reads the ring from this rank's own memory and parses it.
    pub fn scan(&self) -> Result<RingScan> {
        logring::scan(&self.region.to_vec(0, self.region.len())?)
    }
}

/// The writer into this rank's ring at its buddy: frames and determinants (receiver-based),
/// or determinants only (sender-based).
#[derive(Debug)]
struct BuddyLog {
    buddy: Rank,
    writer: LogRingWriter,
}

/// An endpoint whose messages carry envelopes and are logged per the job's [`LogMode`].
pub struct LoggedEndpoint {
    provider: Box<dyn Provider>,
    config: LogConfig,
    rank: Rank,
    size: u32,
    incarnation: u32,
    sequencer: SendSequencer,
    channels: RecvChannels<Arrived>,
    reception: ReceptionCounter,
    /// Messages in channel order, not yet matched by a receive.
    ready: VecDeque<Arrived>,
    posted: Vec<OpId>,
    log: Option<BuddyLog>,
    /// Sender-based logging only: every payload sent, until trimmed.
    send_log: Option<SendLog>,
    hosted: Vec<HostedRing>,
    stats: LogStats,
    send_buf: Vec<u8>,
    released: Vec<(Ssn, Arrived)>,
    /// Provider sends not completed yet: a provider may hold them in a backlog that only its
    /// progress drains, so `finish` waits for them before it stops progressing.
    sends_in_flight: u64,
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

/// Encodes this rank's hosted rings for the all-gather: `count u32 | (client u32 | region)*`.
fn encode_hosted(hosted: &[HostedRing]) -> Vec<u8> {
    let mut out = (hosted.len() as u32).to_le_bytes().to_vec();
    for h in hosted {
        out.extend_from_slice(&h.client.to_le_bytes());
        out.extend_from_slice(&h.region.remote().to_bytes());
    }
    out
}

/// Finds `client`'s ring in what `host` contributed.
fn find_hosted(bytes: &[u8], host: Rank, client: Rank) -> Result<RemoteRegion> {
    const WHAT: &str = "hosted ring list";
    let mut r = Reader::new(bytes, WHAT);
    let count = r.u32()?;
    for _ in 0..count {
        let c = r.u32()?;
        let remote = RemoteRegion::from_bytes(r.take(RemoteRegion::WIRE_LEN)?)?;
        if c == client {
            if remote.owner != host {
                return Err(LogError::malformed(
                    WHAT,
                    format!("ring of rank {host} owned by {}", remote.owner),
                ));
            }
            return Ok(remote);
        }
    }
    Err(LogError::malformed(WHAT, format!("buddy {host} hosts no ring for rank {client}")))
}

impl LoggedEndpoint {
    /// Wraps `provider`. Collective: every rank of the job calls it with the same mode, since
    /// pessimistic logging exchanges node ids and log rings through `boot`.
    pub fn new(mut provider: Box<dyn Provider>, boot: &mut dyn Bootstrap, config: LogConfig) -> Result<Self> {
        config.mode.check_supported()?;
        let job = boot.job().clone();
        if provider.rank() != job.rank || provider.size() != job.size {
            return Err(LogError::InvalidArgument(format!(
                "provider is rank {}/{} but the job says {}/{}",
                provider.rank(),
                provider.size(),
                job.rank,
                job.size
            )));
        }
        let (log, hosted, send_log) = match config.mode {
            LogMode::None => (None, Vec::new(), None),
            LogMode::PessimisticReceiverBased => {
                let (log, hosted) = Self::set_up_rings(&mut *provider, boot, &config)?;
                (Some(log), hosted, None)
            }
            LogMode::PessimisticSenderBased => {
                let (log, hosted) = Self::set_up_rings(&mut *provider, boot, &config)?;
                (Some(log), hosted, Some(SendLog::new(job.size, config.send_log_limit as u64)))
            }
            LogMode::Causal => {
                return Err(LogError::Unsupported(format!("REVERB_LOG={}", config.mode)));
            }
        };
        let mut endpoint = LoggedEndpoint {
            rank: job.rank,
            size: job.size,
            incarnation: job.incarnation,
            sequencer: SendSequencer::new(job.size),
            channels: RecvChannels::new(job.size, config.reorder_window),
            reception: ReceptionCounter::new(job.rank),
            ready: VecDeque::new(),
            posted: Vec::with_capacity(POSTED_RECEIVES),
            log,
            send_log,
            hosted,
            stats: LogStats::default(),
            send_buf: Vec::new(),
            released: Vec::new(),
            sends_in_flight: 0,
            provider,
            config,
        };
        while endpoint.posted.len() < POSTED_RECEIVES {
            endpoint.post_receive()?;
        }
        Ok(endpoint)
    }

    /// Picks buddies from the real node ids, registers the rings this rank hosts and opens a
    /// writer into its own ring at its buddy.
    fn set_up_rings(
        provider: &mut dyn Provider,
        boot: &mut dyn Bootstrap,
        config: &LogConfig,
    ) -> Result<(BuddyLog, Vec<HostedRing>)> {
        let rank = boot.job().rank;
        let node = boot.job().node;
        let nodes = boot.allgather(&node.to_le_bytes())?;
        let node_of_rank =
            nodes.iter().map(|b| Reader::new(b, "node id").u32()).collect::<Result<Vec<u32>>>()?;
        let map = BuddyMap::from_nodes(&node_of_rank)?;
        let buddy = map
            .buddy_of(rank)
            .ok_or_else(|| LogError::InvalidArgument(format!("rank {rank} outside the buddy map")))?;
        let hosted = map
            .clients_of(rank)
            .into_iter()
            .map(|client| {
                Ok(HostedRing { client, region: logring::create_ring(provider, config.ring_capacity)? })
            })
            .collect::<Result<Vec<_>>>()?;
        let all = boot.allgather(&encode_hosted(&hosted))?;
        let theirs = all
            .get(buddy as usize)
            .ok_or_else(|| LogError::malformed("hosted ring list", format!("none from buddy {buddy}")))?;
        let remote = find_hosted(theirs, buddy, rank)?;
        let writer = LogRingWriter::new(provider, remote)?;
        Ok((BuddyLog { buddy, writer }, hosted))
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

    /// The rank hosting this rank's log (pessimistic modes).
    pub fn buddy(&self) -> Option<Rank> {
        self.log.as_ref().map(|l| l.buddy)
    }

    /// The rings this rank keeps for its clients.
    pub fn hosted_rings(&self) -> &[HostedRing] {
        &self.hosted
    }

    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }

    /// The provider underneath, for traffic outside the logging protocol (not logged).
    pub fn provider(&mut self) -> &mut dyn Provider {
        &mut *self.provider
    }

    fn post_receive(&mut self) -> Result<()> {
        // Envelope + largest payload; piggybacked determinants are not sent yet.
        let capacity = crate::envelope::HEADER_LEN + self.config.max_message;
        let op = self.provider.post_recv(
            Source::Any,
            TagMatch::exact(LOGGED_MESSAGE_TAG),
            RecvBuffer::Owned { capacity },
        )?;
        self.posted.push(op);
        Ok(())
    }

    /// Sends `payload` to `dest` under application tag `tag`. The provider copies it, so the
    /// buffer is free on return.
    pub fn send(&mut self, dest: Rank, tag: Tag, payload: &[u8]) -> Result<()> {
        if dest >= self.size {
            return Err(LogError::InvalidArgument(format!("destination {dest} in a job of {}", self.size)));
        }
        if payload.len() > self.config.max_message {
            return Err(LogError::InvalidArgument(format!(
                "payload of {} bytes above REVERB_LOG_MAX_MESSAGE {}",
                payload.len(),
                self.config.max_message
            )));
        }
        // Room first, so a full send log refuses the message before it takes an ssn.
        if let Some(send_log) = &self.send_log {
            if let Err(e) = send_log.reserve(payload.len()) {
                LogStats::add(&self.stats.back_pressure_events, 1);
                return Err(e);
            }
        }
        // A failed provider send leaves a gap in this channel's ssns: the peer is then gone,
        // and recovery (which resends from the log) owns the channel.
        let ssn = self.sequencer.next_ssn(dest)?;
        self.encode_frame(dest, ssn, tag, payload)?;
        // Logged before it leaves, so the log covers every message a receiver can hold.
        if let Some(send_log) = self.send_log.as_mut() {
            let before = send_log.used();
            send_log.record(dest, ssn, tag, payload)?;
            LogStats::add(&self.stats.send_log_bytes, send_log.used() - before);
            LogStats::add(&self.stats.payload_bytes_logged, payload.len() as u64);
        }
        self.provider.send(dest, LOGGED_MESSAGE_TAG, &self.send_buf)?;
        self.sends_in_flight += 1;
        LogStats::add(&self.stats.messages_sent, 1);
        self.collect_completions()
    }

    /// Encodes message `ssn` to `dest` into `send_buf`.
    fn encode_frame(&mut self, dest: Rank, ssn: Ssn, tag: Tag, payload: &[u8]) -> Result<()> {
        let mut envelope = Envelope {
            sender: self.rank,
            receiver: dest,
            incarnation: self.incarnation,
            ssn,
            tag,
            payload_len: 0,
            determinants: Vec::new(),
        };
        self.send_buf.clear();
        envelope.encode_into(payload, &mut self.send_buf)
    }

    /// The sender's message log (`pessimistic-sb` only).
    pub fn send_log(&self) -> Option<&SendLog> {
        self.send_log.as_ref()
    }

    /// Replay primitive (`pessimistic-sb`): re-sends every logged message to `dest` from
    /// `from_ssn` on, in ssn order, with its original ssn. A restarted receiver takes them in
    /// the order its determinants give; a live one drops them as duplicates. Returns how many
    /// were sent.
    pub fn resend_from(&mut self, dest: Rank, from_ssn: Ssn) -> Result<usize> {
        let Some(send_log) = self.send_log.take() else {
            return Err(LogError::Unsupported(format!(
                "resend_from needs pessimistic-sb, not {}",
                self.mode()
            )));
        };
        // The log is taken out for the loop (sending borrows the endpoint) and always put back.
        let resent = self.resend_logged(&send_log, dest, from_ssn);
        self.send_log = Some(send_log);
        resent
    }

    fn resend_logged(&mut self, send_log: &SendLog, dest: Rank, from_ssn: Ssn) -> Result<usize> {
        let mut resent = 0;
        for entry in send_log.from_ssn(dest, from_ssn)? {
            self.encode_frame(dest, entry.ssn, entry.tag, &entry.payload)?;
            self.provider.send(dest, LOGGED_MESSAGE_TAG, &self.send_buf)?;
            self.sends_in_flight += 1;
            resent += 1;
        }
        self.collect_completions()?;
        Ok(resent)
    }

    /// Frees the send log to `dest` through `through_ssn`: to call once a checkpoint of `dest`
    /// covers those deliveries. Returns the bytes freed (0 outside `pessimistic-sb`).
    pub fn trim_send_log(&mut self, dest: Rank, through_ssn: Ssn) -> Result<u64> {
        let Some(send_log) = self.send_log.as_mut() else { return Ok(0) };
        let freed = send_log.trim(dest, through_ssn)?;
        LogStats::sub(&self.stats.send_log_bytes, freed);
        Ok(freed)
    }

    /// The ssn of the last message sent to `dest` (0 before the first).
    pub fn last_ssn_sent(&self, dest: Rank) -> Option<Ssn> {
        self.sequencer.last_ssn(dest)
    }

    /// Receives the first message, in channel order, from `source` whose tag matches `tag`,
    /// waiting at most `timeout`. Pessimistic modes return only once the log is durable.
    pub fn recv(&mut self, source: Source, tag: TagMatch, timeout: Duration) -> Result<Delivery> {
        let start = Instant::now();
        loop {
            self.provider.progress()?;
            self.collect_completions()?;
            if let Some(i) = self.ready.iter().position(|a| source.matches(a.sender) && tag.matches(a.tag)) {
                return self.deliver(i, ReceiveKind::classify(source, tag));
            }
            let left = timeout
                .checked_sub(start.elapsed())
                .ok_or(LogError::Transport(TransportError::Timeout(timeout)))?;
            let posted = &self.posted;
            self.provider.wait_until(left, &mut |cq| cq.iter().any(|c| posted.contains(&c.op)))?;
        }
    }

    /// Makes progress without receiving: drains arrivals into the channels, collects send
    /// completions and advances the log's watermark. Hosting needs nothing more.
    pub fn progress(&mut self) -> Result<()> {
        if let Some(log) = self.log.as_mut() {
            log.writer.poll(&mut *self.provider)?;
        } else {
            self.provider.progress()?;
        }
        self.collect_completions()
    }

    /// Takes this endpoint's completions from the provider's queue; the log writer's stay.
    fn collect_completions(&mut self) -> Result<()> {
        let posted = &self.posted;
        let mine: Vec<_> = {
            let cq = self.provider.completions();
            if !cq.iter().any(|c| is_endpoint_completion(posted, c)) {
                return Ok(());
            }
            let mut mine = Vec::new();
            cq.retain(|c| {
                if is_endpoint_completion(posted, c) {
                    mine.push(c.clone());
                    false
                } else {
                    true
                }
            });
            mine
        };
        for c in mine {
            match c.kind {
                CompletionKind::Recv { .. } => {
                    self.posted.retain(|&op| op != c.op);
                    self.post_receive()?;
                }
                CompletionKind::Send { .. } => self.sends_in_flight = self.sends_in_flight.saturating_sub(1),
                _ => {}
            }
            let c = c.into_result()?;
            if let CompletionKind::Recv { source, data, .. } = c.kind {
                let frame = data.ok_or_else(|| {
                    LogError::malformed("logged message", format!("no data from rank {source}"))
                })?;
                self.accept_frame(source, frame)?;
            }
        }
        Ok(())
    }

    /// Runs channel ordering on one arrival; in-order messages join `ready`.
    fn accept_frame(&mut self, source: Rank, frame: Vec<u8>) -> Result<()> {
        let (envelope, payload) = Envelope::decode(&frame)?;
        if envelope.sender != source || envelope.receiver != self.rank {
            return Err(LogError::malformed(
                "logged message",
                format!(
                    "envelope {} -> {} arrived from rank {source} at rank {}",
                    envelope.sender, envelope.receiver, self.rank
                ),
            ));
        }
        let payload_offset = frame.len() - payload.len();
        let arrived = Arrived { sender: source, ssn: envelope.ssn, tag: envelope.tag, frame, payload_offset };
        let outcome =
            self.channels.accept(source, envelope.incarnation, envelope.ssn, arrived, &mut self.released)?;
        match outcome {
            Arrival::DroppedStale => LogStats::add(&self.stats.stale_dropped, 1),
            Arrival::DroppedDuplicate => LogStats::add(&self.stats.duplicates_dropped, 1),
            Arrival::Delivered { .. } | Arrival::Buffered => {}
        }
        self.ready.extend(self.released.drain(..).map(|(_, a)| a));
        Ok(())
    }

    /// Hands `ready[index]` to the application, after logging it if the mode says so.
    fn deliver(&mut self, index: usize, kind: ReceiveKind) -> Result<Delivery> {
        let Some(arrived) = self.ready.get(index) else {
            return Err(LogError::InvalidArgument(format!("no ready message {index}")));
        };
        let determinant = kind.needs_determinant().then(|| Determinant {
            sender: arrived.sender,
            receiver: self.rank,
            ssn: arrived.ssn,
            rsn: self.reception.last_rsn() + 1,
        });
        // Log first: on back-pressure the message stays queued and nothing is half-delivered.
        match (self.config.mode, self.log.as_mut()) {
            (LogMode::PessimisticReceiverBased, Some(log)) => {
                log.record(&mut *self.provider, &arrived.frame, determinant, &self.config, &self.stats)?;
            }
            // Sender-based: the payload is in the sender's log; only the determinant leaves.
            (LogMode::PessimisticSenderBased, Some(log)) => {
                if let Some(d) = determinant {
                    log.record_determinant(&mut *self.provider, d, &self.config, &self.stats)?;
                }
            }
            _ => {}
        }
        let Some(mut arrived) = self.ready.remove(index) else {
            return Err(LogError::InvalidArgument(format!("no ready message {index}")));
        };
        let rsn = self.reception.deliver(arrived.sender, arrived.ssn).rsn;
        self.stats.record_receive(kind);
        LogStats::add(&self.stats.messages_delivered, 1);
        let payload = arrived.frame.split_off(arrived.payload_offset);
        Ok(Delivery { source: arrived.sender, tag: arrived.tag, payload, ssn: arrived.ssn, rsn, determinant })
    }

    /// Waits until every log write is durable and the buddy's ring header says so.
    pub fn flush_log(&mut self) -> Result<()> {
        let timeout = self.config.durable_timeout;
        if let Some(log) = self.log.as_mut() {
            log.writer.flush(&mut *self.provider, timeout)?;
        }
        Ok(())
    }

    /// Frees the log up to what is durable: to call once a checkpoint covers those deliveries.
    pub fn trim_log_to_durable(&mut self) -> Result<()> {
        if let Some(log) = self.log.as_mut() {
            let durable = log.writer.poll(&mut *self.provider)?;
            log.writer.trim(&mut *self.provider, durable)?;
        }
        Ok(())
    }

    /// Waits until every message sent (or re-sent) has left this rank, progressing meanwhile.
    pub fn wait_sends(&mut self, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        loop {
            self.progress()?;
            if self.sends_in_flight == 0 {
                return Ok(());
            }
            let left = timeout.checked_sub(start.elapsed()).ok_or(TransportError::Timeout(timeout))?;
            self.provider.wait_until(left, &mut |cq| {
                cq.iter()
                    .any(|c| matches!(c.kind, CompletionKind::Send { tag, .. } if tag == LOGGED_MESSAGE_TAG))
            })?;
        }
    }

    /// Collective shutdown: flushes the log and drains this rank's sends, then waits for every
    /// rank, so no host releases a ring a client is still writing and no peer waits on a
    /// message stuck in this rank's backlog. Returns the provider.
    pub fn finish(mut self, boot: &mut dyn Bootstrap) -> Result<Box<dyn Provider>> {
        self.flush_log()?;
        self.wait_sends(self.config.durable_timeout)?;
        boot.barrier()?;
        Ok(self.provider)
    }
}

fn is_endpoint_completion(posted: &[OpId], c: &reverb_transport::Completion) -> bool {
    match &c.kind {
        CompletionKind::Recv { .. } => posted.contains(&c.op),
        CompletionKind::Send { tag, .. } => *tag == LOGGED_MESSAGE_TAG,
        _ => false,
    }
}

impl BuddyLog {
    /// Writes the frame (and the determinant, if any) into the buddy's ring and waits until
    /// both are durable.
    fn record(
        &mut self,
        provider: &mut dyn Provider,
        frame: &[u8],
        determinant: Option<Determinant>,
        config: &LogConfig,
        stats: &LogStats,
    ) -> Result<()> {
        let lens = [frame.len(), Determinant::WIRE_LEN];
        let lens = if determinant.is_some() { &lens[..] } else { &lens[..1] };
        // Check room for both records first, so a full ring never logs half a delivery.
        let needed = self.writer.bytes_needed(lens);
        if needed > self.writer.free() {
            self.writer.poll(provider)?;
            if needed > self.writer.free() {
                LogStats::add(&stats.back_pressure_events, 1);
                return Err(LogError::RingFull { needed, free: self.writer.free() });
            }
        }
        let mut ticket = self.writer.append(provider, RecordKind::Payload, frame)?;
        LogStats::add(&stats.payload_bytes_logged, frame.len() as u64);
        if let Some(d) = determinant {
            ticket = self.writer.append_determinants(provider, &[d])?;
            LogStats::add(&stats.determinant_bytes_logged, Determinant::WIRE_LEN as u64);
            LogStats::add(&stats.determinants_logged, 1);
        }
        self.writer.wait_durable(provider, ticket, config.durable_timeout)
    }

    /// Writes one determinant into the buddy's ring and waits until it is durable.
    fn record_determinant(
        &mut self,
        provider: &mut dyn Provider,
        determinant: Determinant,
        config: &LogConfig,
        stats: &LogStats,
    ) -> Result<()> {
        let needed = self.writer.bytes_needed(&[Determinant::WIRE_LEN]);
        if needed > self.writer.free() {
            self.writer.poll(provider)?;
        }
        let ticket = match self.writer.append_determinants(provider, &[determinant]) {
            Ok(ticket) => ticket,
            Err(e @ LogError::RingFull { .. }) => {
                LogStats::add(&stats.back_pressure_events, 1);
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        LogStats::add(&stats.determinant_bytes_logged, Determinant::WIRE_LEN as u64);
        LogStats::add(&stats.determinants_logged, 1);
        self.writer.wait_durable(provider, ticket, config.durable_timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_print() {
        for mode in [
            LogMode::None,
            LogMode::PessimisticReceiverBased,
            LogMode::PessimisticSenderBased,
            LogMode::Causal,
        ] {
            assert_eq!(mode.as_str().parse::<LogMode>().ok(), Some(mode));
        }
        assert!(matches!("pessimistic".parse::<LogMode>(), Err(LogError::InvalidArgument(_))));
        assert!("".parse::<LogMode>().is_err());
        assert!(LogMode::PessimisticReceiverBased.check_supported().is_ok());
        assert!(LogMode::PessimisticSenderBased.check_supported().is_ok());
        assert!(
            matches!(LogMode::Causal.check_supported(), Err(LogError::Unsupported(m)) if m.contains("causal"))
        );
    }

    #[test]
    fn hosted_list_round_trips_and_rejects_garbage() {
        let remote = RemoteRegion { owner: 3, addr: 0x1000, len: 4224, key: 9 };
        let mut bytes = 2u32.to_le_bytes().to_vec();
        for client in [1u32, 5] {
            bytes.extend_from_slice(&client.to_le_bytes());
            bytes.extend_from_slice(&remote.to_bytes());
        }
        assert_eq!(find_hosted(&bytes, 3, 5).ok(), Some(remote));
        assert!(find_hosted(&bytes, 4, 5).is_err(), "owner must be the host");
        assert!(find_hosted(&bytes, 3, 2).is_err());
        for cut in 0..bytes.len() {
            assert!(find_hosted(&bytes[..cut], 3, 5).is_err(), "cut {cut}");
        }
        assert!(find_hosted(&u32::MAX.to_le_bytes(), 3, 5).is_err());
    }
}
