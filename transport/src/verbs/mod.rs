//! The verbs provider: RC queue pairs on a real RDMA device (InfiniBand, RoCE, soft-RoCE).
//!
//! - One RC QP per peer. `REVERB_VERBS_CONNECT=all` (the default) makes and connects them all
//!   at open (each rank's QP list rides in its address). With `ondemand`, a rank makes a
//!   peer's QP on first traffic to it (`connect.rs`): the op queues, and the QPs are connected
//!   through the wireup channel (a UD QP per rank, `wireup.rs`), as UCX's wireup does; the
//!   address is then O(1) (wireup QP, GID/LID, SRQ geometry, credit word, pid, incarnation),
//!   and rxe's per-QP state grows with the peers a rank talks to, not with the job. The peer
//!   answers from its progress, so the target of a first put or get must call it (as with
//!   UCX): why it is not the default, the loggers write one-sided into buddies that may be
//!   waiting elsewhere. The loopback QP is made at open.
//! - Eager messages are SENDs into one shared receive queue (SRQ, `srq.rs`) that every QP takes
//!   its receives from: `REVERB_VERBS_SRQ_DEPTH` slots, so eager receive memory does not grow
//!   with the job. Slots a poll consumed are reposted as one list at its end.
//! - Credits stay, as each peer's share of the SRQ: `depth / ranks` slots (at most
//!   `REVERB_RING_SLOTS`, at least one, so a job larger than the depth posts one slot per
//!   peer). The sender spends one credit per message; the receiver returns credits by an 8-byte
//!   RDMA write of its cumulative consumed count into the sender's credit word, only after the
//!   slots are reposted. So the messages any peers may have in flight never exceed the posted
//!   slots: no sender can overrun the SRQ, and receiver-not-ready never happens. Why not lean
//!   on RNR retry instead (UCX's way): with a bounded `rnr_retry` (6; 7 is "forever"), a slow
//!   but live receiver would exhaust it and be reported dead; unbounded, a wait would be
//!   unbounded. Credits keep every wait bounded and lose nothing (a sender without credit
//!   queues the message, and a dead peer fails what it queued). Returns ride along with the
//!   next message to that peer from a quarter of its share on (one post list, one doorbell),
//!   and go alone from half.
//! - Sends are signaled selectively (`send::post_list`): only where the owner needs the
//!   completion, at the last free TX bounce slot, or every `sq_depth / 4` WRs; unsignaled WRs
//!   retire with the next signaled completion of their QP, each still completing once.
//! - `put_imm` is a native RDMA write-with-immediate. It also consumes a receive slot (and a
//!   credit); completions tell the two apart by opcode, so the full 32-bit immediate is the
//!   user's.
//! - Rendezvous: RTS carries the sender's {addr, rkey}; the receiver RDMA-reads straight into
//!   the posted buffer and answers FIN.
//!   When the receiver advertised the posted buffer first ([`crate::advert`]), the sender
//!   RDMA-writes into it and posts the DIRECT_FIN notification behind the write in one list.
//! - A QP error, a remote access error or retry exhaustion fails that endpoint and every
//!   operation pending on it. Peers on the same kernel are also watched by pidfd.
//! - As a sub-provider of `auto` (`VerbsProvider::open_sub`): the tagged state and the
//!   operation numbering are shared (`SubCore`); ranks with an empty address are carried by
//!   another sub-provider and stay `Dead` here, never connected, until a `reconnect` gives
//!   them a real one. Memory another provider allocated is registered here too
//!   (`register_region`); region keys follow the layout in `mr.rs`, shared by every provider.
//!
//! Reconnecting to a respawned peer (see [`crate::recovery`]): a respawned rank
//! ([`VerbsProvider::rejoin`]) takes the survivors' addresses and publishes its own. A
//! survivor's `reconnect` fails everything of the old incarnation, takes its QP for that rank
//! (if any) through ERROR to RESET and holds the new address; the next traffic either way
//! connects to the new incarnation. Wireup messages name both incarnations, so a request from a
//! rank whose rejoin a survivor has not applied yet goes unanswered (the requester retries), and
//! old ones are ignored. With `REVERB_VERBS_CONNECT=all` the addresses list QPs, so as before:
//! the respawned rank connects to each survivor's QP for it at once and posts after that
//! survivor's hello (a zero-length SEND), which the survivor sends once `reconnect` connected
//! its QP to the new incarnation's. Work-request ids carry a per-peer generation, so completions of the
//! old connection are dropped, and region keys carry the owner's incarnation, so the old
//! incarnation's descriptors are refused.

mod address;
mod completions;
mod connect;
mod cq;
mod device;
mod mr;
mod pd;
mod qp;
mod send;
mod srq;
#[cfg(test)]
mod tests;
mod ud;
mod wireup;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ibverbs_sys as ffi;

use crate::api::*;
use crate::bootstrap::{Bootstrap, JobInfo};
use crate::completion::{CompletionQueues, Owner};
use crate::config::{Env, TransportConfig, WaitMode};
use crate::error::{ErrorQueue, Result, TransportError};
use crate::msg::{fin, kind, SlotHeader, EAGER_WIRE_LEN, SLOT_HEADER_LEN};
use crate::region::{Region, RegionPool};
use crate::subcore::SubCore;
use crate::sys::liveness::{self, ProcessWatch};
use crate::tagged::{self, Fetch, TaggedHome, TaggedState};
use crate::tagmatch::PostedRecv;
use address::RankAddress;
use connect::Link;
use cq::CompletionQueue;
use device::Context;
use pd::ProtectionDomain;
use qp::{Opcode, PathParams, QpAddress, QueuePair, Sge};
use srq::SharedReceiveQueue;
use wireup::{Route, Wireup};

// For `auto`, which opens verbs between hosts when a device is usable.
pub(crate) use device::usable;

// Send wr_id: bits 56..63 connection generation, 40..56 peer, 0..40 sequence. Receive wr_id:
// bit 63, and the SRQ slot in bits 0..40 (the peer comes from the completion's QP number).
const RECV_FLAG: u64 = 1 << 63;
const GEN_SHIFT: u32 = 56;
const GEN_MASK: u64 = 0x7f;
const PEER_SHIFT: u32 = 40;
const PEER_MASK: u64 = 0xffff;
const SEQ_MASK: u64 = (1 << PEER_SHIFT) - 1;
const MAX_RANKS: u32 = 1 << 16;
/// Bytes registered for each bounce-region pool (staging, scratch).
const POOL_BYTES: usize = 64 << 20;

/// Device selection and path knobs: `REVERB_VERBS_*`.
#[derive(Debug, Clone)]
pub struct VerbsOptions {
    /// `REVERB_VERBS_DEVICE`: one device, or a comma-separated list where node `n` uses entry
    /// `n % len` (several HCAs per host, or one rxe per simulated host in the VM).
    pub devices: Vec<String>,
    /// `REVERB_VERBS_PID_WATCH=0` turns off the pidfd shortcut for peers on this kernel, so a
    /// dead peer is found only by RC retry exhaustion, as across real hosts.
    pub pid_watch: bool,
    /// `REVERB_VERBS_PORT`: the HCA port (1).
    pub port: u8,
    /// `REVERB_VERBS_GID_INDEX`: the GID table entry; unset picks the first RoCE v2 GID with an
    /// IPv4 address on Ethernet ports (what rxe needs), else 0.
    pub gid_index: Option<i32>,
    /// `REVERB_VERBS_TIMEOUT`: the RC local ACK timeout exponent (4.096 µs × 2^t; 14, at most 31).
    pub timeout: u8,
    /// `REVERB_VERBS_RETRY`: RC transport retries before a peer counts as dead (6, at most 6).
    pub retry_count: u8,
    /// `REVERB_VERBS_SRQ_DEPTH`: eager receive slots in the shared receive queue (512), split
    /// evenly between the peers as credits (at most `REVERB_RING_SLOTS` each, at least one).
    pub srq_depth: u32,
    /// `REVERB_VERBS_CONNECT`: `all` (the default) connects every peer at open; `ondemand`
    /// makes a peer's QP on first traffic to it. Not on demand by default: the first op
    /// towards a peer then needs that peer's progress, and the loggers' one-sided writes into
    /// a buddy that waits elsewhere (a bootstrap barrier, a long compute) would stall.
    pub connect_all: bool,
    /// `REVERB_VERBS_CONNECT_TIMEOUT_MS`: how long a connection request may go unanswered
    /// before the peer counts as dead (10 s, at least the peer timeout). The peer answers from
    /// its progress, so this bounds how long a live rank may go without calling it.
    pub connect_timeout: Duration,
}

impl VerbsOptions {
    /// Reads the `REVERB_VERBS_*` variables that are set; defaults otherwise.
    pub fn from_env() -> Result<VerbsOptions> {
        let env = Env::process();
        let devices = env.raw("REVERB_VERBS_DEVICE")?.unwrap_or_default();
        Ok(VerbsOptions {
            devices: devices.split(',').map(str::trim).filter(|d| !d.is_empty()).map(str::to_owned).collect(),
            pid_watch: env.bool("REVERB_VERBS_PID_WATCH")?.unwrap_or(true),
            port: env.int("REVERB_VERBS_PORT")?.unwrap_or(1),
            gid_index: env.int("REVERB_VERBS_GID_INDEX")?,
            timeout: env.int::<u8>("REVERB_VERBS_TIMEOUT")?.unwrap_or(14).min(31),
            // 7 means "retry forever" to rxe (as rnr_retry 7 does in the spec): stay below it
            // so a dead peer is always reported.
            retry_count: env.int::<u8>("REVERB_VERBS_RETRY")?.unwrap_or(6).min(6),
            srq_depth: env.int::<u32>("REVERB_VERBS_SRQ_DEPTH")?.unwrap_or(512).max(1),
            connect_all: env
                .choice("REVERB_VERBS_CONNECT", &[("ondemand", false), ("all", true)])?
                .unwrap_or(true),
            connect_timeout: env
                .positive_duration("REVERB_VERBS_CONNECT_TIMEOUT_MS")?
                .unwrap_or(Duration::from_secs(10)),
        })
    }
}

/// What a send-queue work request was for; kept in posting order per peer.
enum WrInfo {
    /// A user RMA; `signal` says whether the user wants a completion.
    Rma {
        op: OpId,
        kind: CompletionKind,
        signal: Signal,
        _local: Region,
    },
    /// An eager message; `bounce` if it used a TX bounce slot.
    Msg {
        bounce: bool,
    },
    /// An eager send straight from a registered region: complete once the SEND is.
    MsgZeroCopy {
        op: OpId,
        dest: Rank,
        tag: Tag,
        len: usize,
        _region: Region,
    },
    Credit,
    Probe,
    /// Receiver side of rendezvous.
    RndvRead {
        recv: PostedRecv,
        header: SlotHeader,
        scratch: Option<Region>,
    },
}

enum Outgoing {
    /// `done` is the user send this message completes once it is posted.
    Msg { header: SlotHeader, payload: Vec<u8>, done: Option<Completion> },
    WriteImm {
        op: OpId,
        signal: Signal,
        local: Region,
        local_offset: usize,
        remote: (u64, u32),
        len: usize,
        imm: u32,
    },
    /// A put or get waiting for its peer's connection.
    Rma {
        op: OpId,
        kind: CompletionKind,
        signal: Signal,
        opcode: Opcode,
        local: Region,
        local_offset: usize,
        remote: (u64, u32),
        len: usize,
    },
}

struct Peer {
    /// Our RC QP for this peer: made on first traffic (or at open with `connect_all`), then
    /// kept for the provider's life (a reconnect resets it).
    qp: Option<QueuePair>,
    /// Our send PSN on that QP (fixed at its creation).
    psn: u32,
    link: Link,
    state: PeerState,
    /// The incarnation whose address we hold (or, without one, the latest one known).
    incarnation: u32,
    /// We hold that incarnation's address: it is reachable.
    attached: bool,
    /// Its wireup QP and path, from the address.
    route: Option<Route>,
    /// May we post to it: its QP is connected to ours (see `connect.rs`).
    ready: bool,
    /// Since when an op waits for this connection; the next request is due at `next_request`,
    /// `retry` after the last one.
    connect_since: Option<Instant>,
    next_request: Instant,
    retry: Duration,
    /// Connection generation, in every wr_id of this peer (mod 128).
    generation: u64,
    /// Where our credit returns for this peer land: its credit word for us.
    credit_target: (u64, u32),
    watch: Option<ProcessWatch>,
    /// Send queue in posting order: (sequence, what).
    sq: VecDeque<(u64, WrInfo)>,
    next_seq: u64,
    /// Work requests posted unsignaled since the last signaled one.
    unsignaled: u32,
    /// Receive slots of the peer we have used (sends + write-imms).
    sent: u64,
    /// TX bounce slots used and released.
    tx_used: u64,
    tx_done: u64,
    /// Receive slots of ours the peer filled, processed and reposted; what we last told it.
    rx_consumed: u64,
    /// Processed slots of this peer's waiting to be reposted with the poll's refill list.
    rx_unposted: u64,
    rx_credit_sent: u64,
    backlog: VecDeque<Outgoing>,
    /// Puts and gets in `backlog`: later ones queue behind them.
    backlog_rma: usize,
    last_probe: Instant,
}

impl Peer {
    /// A peer without an address yet: `Dead`, no QP, nothing queued or counted.
    fn unattached() -> Peer {
        Peer {
            qp: None,
            psn: 0,
            link: Link::Idle,
            state: PeerState::Dead,
            incarnation: 0,
            attached: false,
            route: None,
            ready: false,
            connect_since: None,
            next_request: Instant::now(),
            retry: Duration::ZERO,
            generation: 0,
            credit_target: (0, 0),
            watch: None,
            sq: VecDeque::new(),
            next_seq: 0,
            unsignaled: 0,
            sent: 0,
            tx_used: 0,
            tx_done: 0,
            rx_consumed: 0,
            rx_unposted: 0,
            rx_credit_sent: 0,
            backlog: VecDeque::new(),
            backlog_rma: 0,
            last_probe: Instant::now(),
        }
    }
}

/// The RDMA verbs provider: an RC QP per peer it talks to, a SEND eager ring, RDMA-read
/// rendezvous (see the module doc).
pub struct VerbsProvider {
    config: TransportConfig,
    job: JobInfo,
    // Field order is drop order: QPs (in peers, wireup) before the SRQ and the CQ, MRs before
    // the PD.
    peers: Vec<Peer>,
    wireup: Wireup,
    srq: SharedReceiveQueue,
    cq: CompletionQueue,
    /// The wireup QP's number: its completions share the CQ.
    wireup_qpn: u32,
    /// Peers with an op waiting for their connection (retries and timeouts, `connect.rs`).
    connecting: Vec<Rank>,
    connect_timeout: Duration,
    /// (QP number, peer) sorted by QP number: routes receive completions of the shared queue;
    /// a QP is added when it is made.
    qpn_rank: Vec<(u32, Rank)>,
    /// SRQ receives to repost at the end of this poll, as one list.
    refill: Vec<(u64, Sge)>,
    refill_peers: Vec<Rank>,
    rx_ring: Region,
    tx_ring: Region,
    credit_words: Region,
    credit_src: Region,
    /// Registered bounce regions reused across messages: staging for large slice sends
    /// (remote read) and scratch for rendezvous reads into owned buffers (local).
    staging: RegionPool,
    scratch: RegionPool,
    pd: Arc<ProtectionDomain>,
    _ctx: Arc<Context>,
    /// Credits per peer: its share of the SRQ, and its TX bounce slots.
    slots: u64,
    slot_size: usize,
    max_inline: u32,
    sq_depth: usize,
    max_msg: u64,
    wc: Vec<ffi::ibv_wc>,
    /// Completions, routed to their owners' queues; numbers operations too.
    completions: CompletionQueues,
    tagged: TaggedHome,
    last_liveness: Instant,
    progress_calls: u32,
    malformed: ErrorQueue,
    /// Queued messages across all peers, and whether a credit return waits for SQ room: lets
    /// an idle `progress` be a bare CQ poll.
    backlogged: usize,
    credits_deferred: bool,
    /// Rendezvous reads that found their peer's send queue full; posted by the next
    /// `progress` (never by a nested CQ poll from inside `poll_cq`).
    deferred_fetches: VecDeque<Fetch>,
    /// What connecting needs: path parameters, pidfd policy.
    path: PathParams,
    pid_watch: bool,
    boot: u64,
}

// SAFETY: all verbs objects are owned by the provider and used through &mut self, one thread at
// a time; the raw pointers they hold stay valid while the provider lives.
unsafe impl Send for VerbsProvider {}

/// Credits per peer: an even share of `srq_depth` receive slots, at most `ring_slots` and at
/// least one (a job larger than the SRQ depth gets one slot per peer), within the device's SRQ
/// limits. Every rank computes the same value (the address check enforces it).
fn credits_per_peer(limits: &device::Limits, srq_depth: u32, ring_slots: u64, size: u32) -> Result<u64> {
    if limits.max_srq == 0 {
        return Err(TransportError::Unavailable("verbs", "the device has no shared receive queues".into()));
    }
    let share = (srq_depth as u64 / size as u64).clamp(1, ring_slots);
    let fit = limits.max_srq_wr as u64 / size as u64;
    if fit == 0 {
        return Err(TransportError::Config(format!(
            "{size} ranks need {size} shared receive slots, the device allows {}",
            limits.max_srq_wr
        )));
    }
    Ok(share.min(fit))
}

fn status_error(peer: Rank, status: ffi::ibv_wc_status::Type) -> TransportError {
    use ffi::ibv_wc_status as s;
    match status {
        s::IBV_WC_RETRY_EXC_ERR | s::IBV_WC_RNR_RETRY_EXC_ERR => TransportError::PeerDead(peer),
        s::IBV_WC_REM_ACCESS_ERR => TransportError::Remote(
            peer,
            "remote access error: bad rkey, no access right, or out of bounds".into(),
        ),
        other => {
            // SAFETY: ibv_wc_status_str returns a static string for any status value.
            let text = unsafe { std::ffi::CStr::from_ptr(ffi::ibv_wc_status_str(other)) };
            TransportError::Remote(peer, format!("work request failed: {}", text.to_string_lossy()))
        }
    }
}

impl VerbsProvider {
    /// Opens the provider for a fresh job: every rank takes part (allgather, barrier). Also
    /// publishes this rank's address, for ranks that rejoin later. Peers' QPs are made on first
    /// traffic, or here with `REVERB_VERBS_CONNECT=all`.
    pub fn open(config: TransportConfig, boot: &mut dyn Bootstrap) -> Result<VerbsProvider> {
        Self::open_sub(config, boot, SubCore::default())
    }

    /// [`VerbsProvider::open`] sharing `core` with other sub-providers. Ranks whose address
    /// `boot` gives as empty are reached another way: they stay `Dead` here, never connected
    /// (with `REVERB_VERBS_CONNECT=all` our QP for them stays in RESET) until `reconnect`.
    pub(crate) fn open_sub(
        config: TransportConfig,
        boot: &mut dyn Bootstrap,
        core: SubCore,
    ) -> Result<VerbsProvider> {
        let (mut provider, me) = VerbsProvider::create(config, boot.job().clone(), core)?;
        let size = provider.job.size;
        let all = boot.allgather(&me.encode())?;
        if all.len() != size as usize {
            return Err(TransportError::Bootstrap(format!(
                "allgather returned {} entries for {size} ranks",
                all.len()
            )));
        }
        let my_qps = me.qps.len();
        for (rank, bytes) in all.iter().enumerate() {
            let rank = rank as Rank;
            if rank == provider.job.rank || bytes.is_empty() {
                continue;
            }
            let peer = provider.decode_peer(bytes, rank)?;
            if peer.qps.len() != my_qps {
                return Err(TransportError::Config(format!(
                    "rank {rank} connects {} at open, this rank {}: REVERB_VERBS_CONNECT must match \
                     across the job",
                    if peer.qps.is_empty() { "on demand" } else { "all peers" },
                    if my_qps == 0 { "on demand" } else { "all peers" },
                )));
            }
            provider.attach(rank, &peer)?;
            provider.connect_listed(rank, &peer, true)?;
        }
        boot.publish(&me.encode())?;
        // Nobody sends until every rank has its peers' addresses (and, connecting all, its QPs
        // connected).
        boot.barrier()?;
        Ok(provider)
    }

    /// Opens a respawned rank (incarnation > 0) without a collective: takes the address of
    /// every rank that has one at the rendezvous now (`Bootstrap::lookup`), then publishes its
    /// own, which announces it to the others. Connections are made on first traffic, either
    /// way; a survivor answers our requests once it has applied our rejoin (`reconnect`), so
    /// until then what we send it waits. Ranks without an address yet (a node-mate still
    /// starting) stay `Dead` until `reconnect` is called with their `Rejoin`.
    pub fn rejoin(config: TransportConfig, boot: &mut dyn Bootstrap) -> Result<VerbsProvider> {
        Self::rejoin_sub(config, boot, SubCore::default())
    }

    /// [`VerbsProvider::rejoin`] sharing `core` with other sub-providers; ranks that `boot`
    /// lists without an address stay `Dead` here.
    pub(crate) fn rejoin_sub(
        config: TransportConfig,
        boot: &mut dyn Bootstrap,
        core: SubCore,
    ) -> Result<VerbsProvider> {
        let (mut provider, me) = VerbsProvider::create(config, boot.job().clone(), core)?;
        let (my_rank, size) = (provider.job.rank, provider.job.size);
        for entry in boot.lookup()? {
            if entry.rank == my_rank || entry.rank >= size {
                continue;
            }
            provider.peers[entry.rank as usize].incarnation = entry.incarnation;
            if let Some(bytes) = entry.address.filter(|b| !b.is_empty()) {
                let peer = provider.decode_peer(&bytes, entry.rank)?;
                if peer.incarnation != entry.incarnation {
                    return Err(TransportError::Malformed {
                        what: "verbs address",
                        detail: format!(
                            "rank {}: address of incarnation {} listed for incarnation {}",
                            entry.rank, peer.incarnation, entry.incarnation
                        ),
                    });
                }
                provider.attach(entry.rank, &peer)?;
                // Connecting all: to the survivor's QP for us; we post once its hello (sent
                // when it reconnects to us) arrives.
                provider.connect_listed(entry.rank, &peer, false)?;
            }
        }
        boot.publish(&me.encode())?;
        Ok(provider)
    }

    /// Registers `region` (another provider's memory, e.g. shm's under `auto`) with this
    /// provider's device too: the registration (dropping it deregisters; it keeps `region`
    /// alive), the lkey and the rkey. A descriptor for it carries the rkey in its key's low
    /// 32 bits under this rank's incarnation (see `mr.rs`).
    pub(crate) fn register_region(
        &mut self,
        region: &Region,
    ) -> Result<(Box<dyn std::any::Any + Send + Sync>, u32, u32)> {
        mr::register_existing(&self.pd, region)
    }

    /// This rank's device, queues, rings and wireup channel, its loopback QP connected and every
    /// other peer `Dead` without an address (with `connect_all`, with a QP in RESET); and the
    /// address to exchange.
    fn create(config: TransportConfig, job: JobInfo, core: SubCore) -> Result<(VerbsProvider, RankAddress)> {
        config.validate()?;
        let peer_timeout = config.peer_timeout;
        let opts = VerbsOptions::from_env()?;
        let size = job.size;
        if size > MAX_RANKS || job.rank >= size {
            return Err(TransportError::Config(format!(
                "rank {} of {size}: the verbs provider supports up to {MAX_RANKS} ranks",
                job.rank
            )));
        }
        // SAFETY: ibv_fork_init only sets a library flag; called before any registration.
        unsafe { ffi::ibv_fork_init() };
        let device =
            (!opts.devices.is_empty()).then(|| opts.devices[job.node as usize % opts.devices.len()].as_str());
        let ctx = Context::open(device)?;
        let port = ctx.query_port(opts.port)?;
        let gid_index = ctx.pick_gid_index(opts.port, &port, opts.gid_index)?;
        let gid = ctx.gid(opts.port, gid_index)?;
        let limits = ctx.limits()?;
        let pd = ProtectionDomain::new(&ctx)?;

        let slots = credits_per_peer(&limits, opts.srq_depth, config.ring_slots as u64, size)?;
        let rx_slots = slots * size as u64;
        let slot_size = (SLOT_HEADER_LEN + config.rndv_thresh).next_multiple_of(64);
        let sq_depth = (2 * slots as u32 + 64).min(limits.max_qp_wr) as usize;
        let wireup_entries = 2 * wireup::DEPTH;
        let cq_entries = (size * sq_depth as u32 + rx_slots as u32 + wireup_entries).min(limits.max_cqe);
        let events = config.wait_mode != WaitMode::Poll;
        let cq = CompletionQueue::new(&ctx, cq_entries, events)?;
        let ring_len = rx_slots as usize * slot_size;
        let inc = job.incarnation;
        let rx_ring = mr::register(&pd, job.rank, inc, ring_len, Access::LOCAL)?;
        let tx_ring = mr::register(&pd, job.rank, inc, ring_len, Access::LOCAL)?;
        let credit_words = mr::register(&pd, job.rank, inc, 8 * size as usize, Access::REMOTE_WRITE)?;
        let credit_src = mr::register(&pd, job.rank, inc, 8 * size as usize, Access::LOCAL)?;
        let mut srq = SharedReceiveQueue::new(&pd, rx_slots as u32)?;
        // Every slot is posted before any QP exists, so before any peer may send.
        let (ring, lkey) = (rx_ring.as_ptr() as u64, rx_ring.local_key());
        let recvs: Vec<(u64, Sge)> = (0..rx_slots)
            .map(|slot| {
                (RECV_FLAG | slot, Sge { addr: ring + slot * slot_size as u64, len: slot_size as u32, lkey })
            })
            .collect();
        srq.post(&recvs)?;

        let wireup = Wireup::new(&pd, &cq, opts.port, (job.rank, inc, size))?;
        let me = RankAddress {
            lid: port.lid,
            gid,
            gid_index: gid_index as u8,
            mtu: port.active_mtu,
            slots: slots as u32,
            slot_size: slot_size as u32,
            credit_addr: credit_words.remote().addr,
            credit_rkey: mr::rkey_of(credit_words.remote().key),
            pid: std::process::id(),
            boot: crate::bootstrap::host::boot_id(),
            incarnation: inc,
            ud_qpn: wireup.qpn(),
            ud_qkey: wireup::QKEY,
            qps: Vec::new(),
        };
        let path = PathParams {
            port: opts.port,
            gid_index: gid_index as u8,
            mtu: port.active_mtu,
            use_grh: port.is_ethernet(),
            max_rd_atomic: limits.max_rd_atomic.min(16),
            timeout: opts.timeout,
            retry_count: opts.retry_count,
        };
        let mut provider = VerbsProvider {
            config,
            job,
            peers: (0..size).map(|_| Peer::unattached()).collect(),
            wireup_qpn: wireup.qpn(),
            wireup,
            srq,
            cq,
            connecting: Vec::new(),
            connect_timeout: opts.connect_timeout.max(peer_timeout),
            qpn_rank: Vec::new(),
            refill: Vec::with_capacity(64),
            refill_peers: Vec::new(),
            rx_ring,
            tx_ring,
            credit_words,
            credit_src,
            pd,
            _ctx: ctx,
            slots,
            slot_size,
            max_inline: qp::INLINE_WANTED,
            sq_depth,
            max_msg: port.max_msg_size as u64,
            wc: vec![Default::default(); 32],
            completions: core.queues(),
            tagged: core.tagged,
            last_liveness: Instant::now(),
            progress_calls: 0,
            malformed: ErrorQueue::default(),
            staging: RegionPool::new(POOL_BYTES),
            scratch: RegionPool::new(POOL_BYTES),
            backlogged: 0,
            credits_deferred: false,
            deferred_fetches: VecDeque::new(),
            path,
            pid_watch: opts.pid_watch,
            boot: me.boot,
        };
        let rank = provider.job.rank;
        let mut me = me;
        // QPs made now, with our PSN for each in the address: every peer's with `connect_all`.
        let made: Vec<Rank> = if opts.connect_all { (0..size).collect() } else { vec![rank] };
        for &r in &made {
            provider.make_qp(r)?;
        }
        if opts.connect_all {
            me.qps = provider.peers.iter().flat_map(|p| p.qp.as_ref().map(|q| (q.qpn(), p.psn))).collect();
        }
        provider.attach(rank, &me)?;
        let (qpn, psn) = provider.own_qp().ok_or(TransportError::InvalidRank(rank, size))?;
        provider.link_up(rank, qpn, psn)?;
        provider.peers[rank as usize].ready = true;
        Ok((provider, me))
    }

    /// Decodes `rank`'s address and checks its rings match ours.
    fn decode_peer(&self, bytes: &[u8], rank: Rank) -> Result<RankAddress> {
        let peer = RankAddress::decode(bytes, rank, self.job.size)?;
        if peer.slots as u64 != self.slots || peer.slot_size as usize != self.slot_size {
            return Err(TransportError::Config(format!(
                "rank {rank} uses {} slots of {} bytes, this rank {} of {}: \
                 REVERB_VERBS_SRQ_DEPTH, REVERB_RING_SLOTS and REVERB_RNDV_THRESH must match \
                 across the job",
                peer.slots, peer.slot_size, self.slots, self.slot_size
            )));
        }
        Ok(peer)
    }

    /// Takes `peer`, `rank`'s address: the rank is reachable (`Alive`), with its counters from
    /// zero (its share of the SRQ is posted already) and no connection yet; a QP of an earlier
    /// connection is reset (same QPN) for the next one. The caller has failed everything of an
    /// earlier connection.
    fn attach(&mut self, rank: Rank, peer: &RankAddress) -> Result<()> {
        // Credits count from zero on the new connection; nobody writes this word until then.
        self.credit_words.write(8 * rank as usize, &0u64.to_le_bytes())?;
        let same_kernel = self.pid_watch && peer.boot == self.boot && rank != self.job.rank;
        self.wireup.forget(rank);
        let p = &mut self.peers[rank as usize];
        if p.link != Link::Idle {
            if let Some(qp) = &p.qp {
                qp.reset()?;
            }
            p.link = Link::Idle;
        }
        p.attached = true;
        p.state = PeerState::Alive;
        p.incarnation = peer.incarnation;
        p.ready = false;
        p.connect_since = None;
        p.route = Some(Route {
            gid: peer.gid,
            lid: peer.lid,
            gid_index: peer.gid_index,
            mtu: peer.mtu,
            qpn: peer.ud_qpn,
            qkey: peer.ud_qkey,
        });
        p.credit_target = (peer.credit_addr + 8 * self.job.rank as u64, peer.credit_rkey);
        p.watch = same_kernel.then(|| ProcessWatch::new(peer.pid));
        p.sent = 0;
        p.tx_used = 0;
        p.tx_done = 0;
        p.unsignaled = 0;
        p.rx_consumed = 0;
        p.rx_unposted = 0;
        p.rx_credit_sent = 0;
        p.last_probe = Instant::now();
        Ok(())
    }

    fn live_peer(&self, rank: Rank) -> Result<&Peer> {
        let peer = self.peers.get(rank as usize).ok_or(TransportError::InvalidRank(rank, self.job.size))?;
        if peer.state == PeerState::Dead {
            return Err(TransportError::PeerDead(rank));
        }
        Ok(peer)
    }

    /// Cumulative receive slots `peer` has processed of ours (its credit return).
    fn peer_consumed(&self, peer: Rank) -> u64 {
        let mut word = [0u8; 8];
        let _ = self.credit_words.read(8 * peer as usize, &mut word);
        u64::from_le_bytes(word)
    }

    fn has_credit(&self, peer: Rank) -> bool {
        let p = &self.peers[peer as usize];
        p.sent - self.peer_consumed(peer).min(p.sent) < self.slots
    }
}

impl Provider for VerbsProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::VERBS
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::PUT
            | Capabilities::PUT_IMM
            | Capabilities::GET
            | Capabilities::TAGGED
            | Capabilities::RNDV_ZCOPY
            | Capabilities::INTER_NODE
            | Capabilities::PEEK;
        if self.cq.has_channel() {
            caps = caps | Capabilities::EVENT_WAIT;
        }
        if self.max_inline > 0 {
            caps = caps | Capabilities::INLINE;
        }
        caps
    }

    fn rank(&self) -> Rank {
        self.job.rank
    }

    fn size(&self) -> u32 {
        self.job.size
    }

    fn config(&self) -> &TransportConfig {
        &self.config
    }

    fn alloc_region(&mut self, len: usize, access: Access) -> Result<Region> {
        mr::register(&self.pd, self.job.rank, self.job.incarnation, len, access)
    }

    unsafe fn register_memory(&mut self, ptr: *mut u8, len: usize, access: Access) -> Result<Region> {
        // SAFETY: the caller's promise passes on.
        unsafe {
            mr::register_caller_memory(&self.pd, (self.job.rank, self.job.incarnation), ptr, len, access)
        }
    }

    // Inlined into the `APP` posts (`put`, `send`, ...): they cost no extra call.
    #[inline(always)]
    fn put_for(&mut self, owner: Owner, rma: Rma<'_>, signal: Signal) -> Result<OpId> {
        self.rma(owner, "put", rma, Opcode::Write, CompletionKind::Put, signal)
    }

    #[inline(always)]
    fn put_imm_for(&mut self, owner: Owner, rma: Rma<'_>, imm: u32, signal: Signal) -> Result<OpId> {
        let (_, remote) = self.rma_args("put_imm", &rma)?;
        let dest = rma.remote.owner;
        let op = self.completions.next_op(owner);
        let item = Outgoing::WriteImm {
            op,
            signal,
            local: rma.local.clone(),
            local_offset: rma.local_offset,
            remote,
            len: rma.len,
            imm,
        };
        // The immediate consumes a receive slot at the target, so it waits for a credit.
        if self.can_send_now(dest, false) {
            self.write_imm_now(dest, item)?;
        } else {
            self.enqueue(dest, item);
        }
        Ok(op)
    }

    #[inline(always)]
    fn get_for(&mut self, owner: Owner, rma: Rma<'_>, signal: Signal) -> Result<OpId> {
        self.rma(owner, "get", rma, Opcode::Read, CompletionKind::Get, signal)
    }

    #[inline(always)]
    fn send_for(&mut self, owner: Owner, dest: Rank, tag: Tag, data: &[u8]) -> Result<OpId> {
        self.live_peer(dest)?;
        if data.len() <= self.config.rndv_thresh {
            return self.send_eager(owner, dest, tag, data);
        }
        let (pd, rank, incarnation) = (&self.pd, self.job.rank, self.job.incarnation);
        let staging =
            self.staging.take(data.len(), |l| mr::register(pd, rank, incarnation, l, Access::REMOTE_READ))?;
        staging.write(0, data)?;
        self.start_send(owner, dest, tag, &staging, 0, data.len())
    }

    #[inline(always)]
    fn send_region_for(
        &mut self,
        owner: Owner,
        dest: Rank,
        tag: Tag,
        region: &Region,
        offset: usize,
        len: usize,
    ) -> Result<OpId> {
        self.start_send(owner, dest, tag, region, offset, len)
    }

    #[inline(always)]
    fn peek_arrived(&mut self, source: Source, tag: TagMatch) -> Result<Option<(Rank, Tag, usize)>> {
        Ok(self.tagged.with(|t| t.peek(source, tag)))
    }

    fn take_eager_into(
        &mut self,
        source: Source,
        tag: TagMatch,
        buf: &mut [u8],
        accept: &dyn Fn(Tag, usize) -> bool,
    ) -> Result<EagerTake> {
        Ok(self.tagged.get().take_eager_into(source, tag, buf, accept))
    }

    fn post_recv_for(
        &mut self,
        owner: Owner,
        source: Source,
        tag: TagMatch,
        buffer: RecvBuffer,
    ) -> Result<OpId> {
        tagged::check_recv(source, &buffer, self.job.size)?;
        let op = self.completions.next_op(owner);
        let peers = &self.peers;
        let dead = |r: Rank| peers[r as usize].state == PeerState::Dead;
        let (recv, thresh) = (PostedRecv { op, source, tag, buffer }, self.config.advert_thresh(true));
        let matched = self.tagged.get().post(recv, dead, &mut self.completions, thresh)?;
        if let Some(fetch) = matched {
            self.rndv_fetch(fetch);
        }
        self.send_adverts();
        Ok(op)
    }

    fn cancel_recv(&mut self, op: OpId) -> Result<bool> {
        Ok(self.tagged.get().cancel_recv(op))
    }

    fn rndv_stats(&self) -> crate::advert::RndvStats {
        self.tagged.with(TaggedState::rndv_stats)
    }

    fn peer_state(&self, peer: Rank) -> PeerState {
        self.peers.get(peer as usize).map_or(PeerState::Dead, |p| p.state)
    }

    fn peer_incarnation(&self, peer: Rank) -> Option<u32> {
        self.peers.get(peer as usize).filter(|p| p.attached).map(|p| p.incarnation)
    }

    fn reconnect(&mut self, peer: Rank, incarnation: u32, address: &[u8]) -> Result<()> {
        let current = self.peers.get(peer as usize).map(|p| (p.incarnation, p.attached));
        crate::recovery::check_reconnect(self.job.rank, self.job.size, peer, incarnation, current)?;
        // Validate the new address before touching the old connection.
        let address = self.decode_peer(address, peer)?;
        if address.incarnation != incarnation {
            return Err(TransportError::Malformed {
                what: "verbs address",
                detail: format!(
                    "rank {peer}: address of incarnation {} given for incarnation {incarnation}",
                    address.incarnation
                ),
            });
        }
        if self.pid_watch && address.boot == self.boot && !liveness::pid_exists(address.pid) {
            return Err(TransportError::PeerDead(peer)); // that incarnation died already
        }
        // What the old incarnation delivered before is still its own; then fail the rest.
        while self.poll_cq()? == self.wc.len() {}
        self.fail_peer(peer, TransportError::PeerDead(peer));
        // Arrivals of the old incarnation that no receive claimed must not look like the new one's.
        self.tagged.get().purge_unexpected_from(peer);
        let attached = self.attach(peer, &address);
        if let Err(e) = attached {
            self.peers[peer as usize].state = PeerState::Dead;
            return Err(e);
        }
        // The flush of the old connection (dropped by generation) must not fill the CQ. On
        // demand, the next traffic either way connects to the new incarnation.
        while self.poll_cq()? == self.wc.len() {}
        // Connecting all: to its QP for us now, and the hello, before which it posts nothing.
        let hello = match self.connect_listed(peer, &address, true) {
            Ok(false) => return Ok(()),
            Ok(true) => self.post(peer, WrInfo::Msg { bounce: false }, Opcode::Send, &[], None, false),
            Err(e) => Err(e),
        };
        match hello {
            Ok(()) => {
                self.peers[peer as usize].sent += 1; // it takes one of its receive slots
                Ok(())
            }
            Err(e) => {
                self.fail_peer(peer, e.clone());
                Err(e)
            }
        }
    }

    fn progress(&mut self) -> Result<()> {
        while self.poll_cq()? == self.wc.len() {}
        if !self.connecting.is_empty() {
            self.wireup_tick();
        }
        if self.backlogged > 0 {
            self.flush_backlogs()?;
        }
        for fetch in std::mem::take(&mut self.deferred_fetches) {
            // Deferred again (at the back, in order) while its peer's queue is still full.
            self.rndv_fetch(fetch);
        }
        if std::mem::take(&mut self.credits_deferred) {
            for peer in 0..self.peers.len() as Rank {
                self.return_credits(peer)?;
            }
        }
        self.progress_calls = self.progress_calls.wrapping_add(1);
        // Probes too: a caller that only polls (no `block`) must still see a dead peer on
        // another host, where only a failed write tells.
        if self.progress_calls.is_multiple_of(256)
            && self.last_liveness.elapsed() >= self.config.peer_timeout / 4
        {
            self.check_liveness(true);
        }
        match self.malformed.next_error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn block(&mut self, timeout: Duration) -> Result<()> {
        if self.last_liveness.elapsed() >= self.config.peer_timeout / 4 {
            self.check_liveness(true);
        }
        if self.completions.any_queued() {
            return Ok(());
        }
        // Waiting on credits is not a CQ event at the sender: poll the credit words soon (and
        // retry connection requests in time).
        let backlog = self.backlogged > 0 || !self.deferred_fetches.is_empty() || !self.connecting.is_empty();
        let timeout = if backlog { timeout.min(Duration::from_micros(200)) } else { timeout };
        self.cq.arm()?;
        if self.poll_cq()? > 0 {
            return Ok(());
        }
        self.cq.wait_event(timeout)?;
        Ok(())
    }

    fn queues(&mut self) -> &mut CompletionQueues {
        &mut self.completions
    }
}

impl Drop for VerbsProvider {
    fn drop(&mut self) {
        // Destroying a QP drops what it has not sent: post the backlog (connecting first where
        // it waits for a connection) and wait (bounded) for the signaled work requests still in
        // flight.
        let connecting =
            self.peers.iter().any(|p| p.state == PeerState::Alive && !p.ready && !p.backlog.is_empty());
        let bound = if connecting { self.connect_timeout } else { self.config.peer_timeout };
        let deadline = Instant::now() + bound;
        let busy = |p: &Peer| {
            p.state == PeerState::Alive
                && (!p.backlog.is_empty()
                    || p.sq
                        .iter()
                        .any(|(_, i)| !matches!(i, WrInfo::Credit | WrInfo::Rma { signal: Signal::No, .. })))
        };
        while self.peers.iter().any(busy) && Instant::now() < deadline {
            // Unsignaled sends retire only behind a signaled WR.
            for peer in 0..self.peers.len() as Rank {
                if self.flush_unsignaled(peer).is_err() {
                    break;
                }
            }
            if self.progress().is_err() {
                break;
            }
            std::thread::yield_now();
        }
    }
}
