//! The verbs provider: RC queue pairs on a real RDMA device (InfiniBand, RoCE, soft-RoCE).
//!
//! - One RC QP per peer (a loopback QP for self), connected through the bootstrap.
//! - Eager messages are SENDs into a per-peer ring of pre-posted receive slots at the
//!   receiver; the sender spends one credit per slot, and the receiver returns credits by an
//!   8-byte RDMA write of its cumulative consumed count into the sender's credit word.
//! - `put_imm` is a native RDMA write-with-immediate. It also consumes a receive slot (and a
//!   credit); completions tell the two apart by opcode, so the full 32-bit immediate is the
//!   user's.
//! - Rendezvous: RTS carries the sender's {addr, rkey}; the receiver RDMA-reads straight into
//!   the posted buffer and answers FIN.
//! - A QP error, a remote access error or retry exhaustion fails that endpoint and every
//!   operation pending on it. Peers on the same kernel are also watched by pidfd.
//!
//! Reconnecting to a respawned peer (see [`crate::recovery`]): a rank's QPN for each peer never
//! changes while the rank lives, so the address it published at open stays valid. A respawned
//! rank ([`VerbsProvider::rejoin`]) looks up the survivors' addresses, connects a fresh QP to
//! each survivor's QP for it and publishes its own; it sends nothing to a survivor until that
//! survivor's hello (a zero-length SEND) arrives. A survivor's `reconnect` fails everything of
//! the old incarnation, takes its QP for that rank through ERROR to RESET (same QPN), connects
//! it to the new incarnation's QP, posts fresh receive slots and sends the hello. Work-request
//! ids carry a per-peer generation, so completions of the old connection are dropped, and
//! region keys carry the owner's incarnation, so the old incarnation's descriptors are refused.

mod address;
mod cq;
mod device;
mod mr;
mod pd;
mod qp;

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
use crate::shm::liveness::{self, ProcessWatch};
use crate::tagged::{self, Fetch, TaggedState};
use crate::tagmatch::PostedRecv;
use address::RankAddress;
use cq::CompletionQueue;
use device::Context;
use pd::ProtectionDomain;
use qp::{Opcode, PathParams, QpAddress, QueuePair, Sge};

// wr_id: bit 63 receive, bits 56..63 connection generation, 40..56 peer, 0..40 sequence/slot.
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
}

struct Peer {
    qp: QueuePair,
    state: PeerState,
    /// The incarnation connected to (or, never connected, the latest one known).
    incarnation: u32,
    /// Ever connected: the QP has left RESET.
    connected: bool,
    /// May we post to it: false on a respawned rank until the peer's hello arrives.
    ready: bool,
    /// Connection generation, in every wr_id of this peer (mod 128).
    generation: u64,
    /// Where our credit returns for this peer land: its credit word for us.
    credit_target: (u64, u32),
    watch: Option<ProcessWatch>,
    /// Send queue in posting order: (sequence, what).
    sq: VecDeque<(u64, WrInfo)>,
    next_seq: u64,
    /// Receive slots of the peer we have used (sends + write-imms).
    sent: u64,
    /// TX bounce slots used and released.
    tx_used: u64,
    tx_done: u64,
    /// Receive slots of ours the peer filled and we processed; what we last told it.
    rx_consumed: u64,
    rx_credit_sent: u64,
    backlog: VecDeque<Outgoing>,
    last_probe: Instant,
}

impl Peer {
    /// A peer not connected yet: `Dead`, its QP in RESET, nothing queued or counted.
    fn unconnected(qp: QueuePair) -> Peer {
        Peer {
            qp,
            state: PeerState::Dead,
            incarnation: 0,
            connected: false,
            ready: false,
            generation: 0,
            credit_target: (0, 0),
            watch: None,
            sq: VecDeque::new(),
            next_seq: 0,
            sent: 0,
            tx_used: 0,
            tx_done: 0,
            rx_consumed: 0,
            rx_credit_sent: 0,
            backlog: VecDeque::new(),
            last_probe: Instant::now(),
        }
    }
}

/// The RDMA verbs provider: one RC QP per peer, a SEND eager ring, RDMA-read rendezvous (see
/// the module doc).
pub struct VerbsProvider {
    config: TransportConfig,
    job: JobInfo,
    // Field order is drop order: QPs (in peers) before the CQ, MRs before the PD.
    peers: Vec<Peer>,
    cq: CompletionQueue,
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
    slots: u64,
    slot_size: usize,
    max_inline: u32,
    sq_depth: usize,
    max_msg: u64,
    wc: Vec<ffi::ibv_wc>,
    /// Completions, routed to their owners' queues; numbers operations too.
    completions: CompletionQueues,
    tagged: TaggedState,
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
    /// What reconnecting needs: path parameters, our PSN per peer (published), pidfd policy.
    path: PathParams,
    psns: Vec<u32>,
    pid_watch: bool,
    boot: u64,
}

// SAFETY: all verbs objects are owned by the provider and used through &mut self, one thread at
// a time; the raw pointers they hold stay valid while the provider lives.
unsafe impl Send for VerbsProvider {}

fn boot_id() -> u64 {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    id.trim().bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
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
    /// publishes this rank's address, for ranks that rejoin later.
    pub fn open(config: TransportConfig, boot: &mut dyn Bootstrap) -> Result<VerbsProvider> {
        let (mut provider, me) = VerbsProvider::create(config, boot.job().clone())?;
        let size = provider.job.size;
        let all = boot.allgather(&me.encode())?;
        if all.len() != size as usize {
            return Err(TransportError::Bootstrap(format!(
                "allgather returned {} entries for {size} ranks",
                all.len()
            )));
        }
        for (rank, bytes) in all.iter().enumerate() {
            let rank = rank as Rank;
            if rank == provider.job.rank {
                continue;
            }
            let peer = provider.decode_peer(bytes, rank)?;
            provider.attach(rank, &peer, true)?;
        }
        boot.publish(&me.encode())?;
        // Nobody sends until every rank has connected and posted its receives.
        boot.barrier()?;
        Ok(provider)
    }

    /// Opens a respawned rank (incarnation > 0) without a collective: connects to every rank
    /// that has an address at the rendezvous now (`Bootstrap::lookup`), then publishes its own
    /// address, which announces it to the others. Each peer stays unready (messages queue) until
    /// its hello arrives, sent once it reconnected to us; ranks without an address yet (a
    /// node-mate still starting) stay `Dead` until `reconnect` is called with their `Rejoin`.
    pub fn rejoin(config: TransportConfig, boot: &mut dyn Bootstrap) -> Result<VerbsProvider> {
        let (mut provider, me) = VerbsProvider::create(config, boot.job().clone())?;
        let (my_rank, size) = (provider.job.rank, provider.job.size);
        for entry in boot.lookup()? {
            if entry.rank == my_rank || entry.rank >= size {
                continue;
            }
            provider.peers[entry.rank as usize].incarnation = entry.incarnation;
            if let Some(bytes) = entry.address {
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
                provider.attach(entry.rank, &peer, false)?;
            }
        }
        // Last: survivors connect to our QPs once announced, and those are ready now.
        boot.publish(&me.encode())?;
        Ok(provider)
    }

    /// This rank's device, queues and rings, its loopback QP connected and every other peer
    /// `Dead` with a QP in RESET; and the address to exchange.
    fn create(config: TransportConfig, job: JobInfo) -> Result<(VerbsProvider, RankAddress)> {
        config.validate()?;
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
        let (max_qp_wr, max_rd_atomic, max_cqe) = ctx.limits()?;
        let pd = ProtectionDomain::new(&ctx)?;

        let slots = config.ring_slots as u64;
        let slot_size = (SLOT_HEADER_LEN + config.rndv_thresh).next_multiple_of(64);
        let sq_depth = (2 * slots as u32 + 64).min(max_qp_wr) as usize;
        let rq_depth = (slots as u32).min(max_qp_wr);
        let cq_entries = (size * (sq_depth as u32 + rq_depth)).min(max_cqe);
        let events = config.wait_mode != WaitMode::Poll;
        let cq = CompletionQueue::new(&ctx, cq_entries, events)?;
        let ring_len = size as usize * slots as usize * slot_size;
        let inc = job.incarnation;
        let rx_ring = mr::register(&pd, job.rank, inc, ring_len, Access::LOCAL)?;
        let tx_ring = mr::register(&pd, job.rank, inc, ring_len, Access::LOCAL)?;
        let credit_words = mr::register(&pd, job.rank, inc, 8 * size as usize, Access::REMOTE_WRITE)?;
        let credit_src = mr::register(&pd, job.rank, inc, 8 * size as usize, Access::LOCAL)?;

        let mut qps = Vec::with_capacity(size as usize);
        for _ in 0..size {
            qps.push(QueuePair::new(&pd, &cq, sq_depth as u32, rq_depth, 256)?);
        }
        let max_inline = qps.iter().map(|q| q.max_inline).min().unwrap_or(0);
        let psns: Vec<u32> = (0..size).map(|_| rand::random::<u32>() & 0xff_ffff).collect();
        let me = RankAddress {
            lid: port.lid,
            gid,
            gid_index: gid_index as u8,
            mtu: port.active_mtu,
            slots: slots as u32,
            slot_size: slot_size as u32,
            credit_addr: credit_words.remote().addr,
            credit_rkey: credit_words.remote().key as u32,
            pid: std::process::id(),
            boot: boot_id(),
            incarnation: inc,
            qps: qps.iter().zip(&psns).map(|(q, p)| (q.qpn(), *p)).collect(),
        };
        let path = PathParams {
            port: opts.port,
            gid_index: gid_index as u8,
            mtu: port.active_mtu,
            use_grh: port.is_ethernet(),
            max_rd_atomic: max_rd_atomic.min(16),
            timeout: opts.timeout,
            retry_count: opts.retry_count,
        };
        let peers = qps.into_iter().map(Peer::unconnected).collect();
        let mut provider = VerbsProvider {
            config,
            job,
            peers,
            cq,
            rx_ring,
            tx_ring,
            credit_words,
            credit_src,
            pd,
            _ctx: ctx,
            slots,
            slot_size,
            max_inline,
            sq_depth,
            max_msg: port.max_msg_size as u64,
            wc: vec![Default::default(); 32],
            completions: CompletionQueues::new(),
            tagged: TaggedState::default(),
            last_liveness: Instant::now(),
            progress_calls: 0,
            malformed: ErrorQueue::default(),
            staging: RegionPool::new(POOL_BYTES),
            scratch: RegionPool::new(POOL_BYTES),
            backlogged: 0,
            credits_deferred: false,
            deferred_fetches: VecDeque::new(),
            path,
            psns,
            pid_watch: opts.pid_watch,
            boot: me.boot,
        };
        let rank = provider.job.rank;
        let own = RankAddress::decode(&me.encode(), rank, size)?;
        provider.attach(rank, &own, true)?;
        Ok((provider, me))
    }

    /// Decodes `rank`'s address and checks its rings match ours.
    fn decode_peer(&self, bytes: &[u8], rank: Rank) -> Result<RankAddress> {
        let peer = RankAddress::decode(bytes, rank, self.job.size)?;
        if peer.slots as u64 != self.slots || peer.slot_size as usize != self.slot_size {
            return Err(TransportError::Config(format!(
                "rank {rank} uses {} slots of {} bytes, this rank {} of {}: \
                 REVERB_RING_SLOTS and REVERB_RNDV_THRESH must match across the job",
                peer.slots, peer.slot_size, self.slots, self.slot_size
            )));
        }
        Ok(peer)
    }

    /// Connects our QP for `rank` to `peer`'s QP for us (from RESET; a used QP is reset
    /// first, so its QPN stays the one we published), posts every receive slot and starts the
    /// connection's counters from zero. The caller has failed everything of an earlier
    /// connection. `ready`: we may post at once (the peer's QP is connected already).
    fn attach(&mut self, rank: Rank, peer: &RankAddress, ready: bool) -> Result<()> {
        let (slots, slot_size) = (self.slots, self.slot_size);
        let (qpn, psn) = peer.qps[self.job.rank as usize];
        let remote =
            QpAddress { qpn, psn, lid: peer.lid, gid: peer.gid, gid_index: peer.gid_index, mtu: peer.mtu };
        // Credits count from zero on the new connection; nobody writes this word until then.
        self.credit_words.write(8 * rank as usize, &0u64.to_le_bytes())?;
        let same_kernel = self.pid_watch && peer.boot == self.boot && rank != self.job.rank;
        let (path, local_psn) = (self.path, self.psns[rank as usize]);
        let lkey = self.rx_ring.local_key();
        let ring = self.rx_ring.as_ptr() as u64;
        let p = &mut self.peers[rank as usize];
        if p.connected {
            p.qp.reset()?;
        }
        p.generation = (p.generation + 1) & GEN_MASK;
        p.connected = true;
        p.qp.connect(&path, local_psn, &remote)?;
        // Every receive slot is posted before the peer may send.
        for slot in 0..slots {
            let addr = ring + ((rank as u64 * slots + slot) as usize * slot_size) as u64;
            let wr_id = RECV_FLAG | (p.generation << GEN_SHIFT) | ((rank as u64) << PEER_SHIFT) | slot;
            p.qp.post_recv(wr_id, Sge { addr, len: slot_size as u32, lkey })?;
        }
        p.state = PeerState::Alive;
        p.incarnation = peer.incarnation;
        p.ready = ready;
        p.credit_target = (peer.credit_addr + 8 * self.job.rank as u64, peer.credit_rkey);
        p.watch = same_kernel.then(|| ProcessWatch::new(peer.pid));
        p.sent = 0;
        p.tx_used = 0;
        p.tx_done = 0;
        p.rx_consumed = 0;
        p.rx_credit_sent = 0;
        p.last_probe = Instant::now();
        Ok(())
    }

    /// A wr_id for `peer`'s current connection.
    fn wr_id(&self, peer: Rank, seq: u64) -> u64 {
        (self.peers[peer as usize].generation << GEN_SHIFT) | ((peer as u64) << PEER_SHIFT) | (seq & SEQ_MASK)
    }

    /// Waits (bounded) until a respawned rank may post to `peer` (its hello arrived).
    fn await_ready(&mut self, peer: Rank) -> Result<()> {
        let start = Instant::now();
        while !self.live_peer(peer)?.ready {
            if start.elapsed() > self.config.peer_timeout * 4 {
                return Err(TransportError::Timeout(self.config.peer_timeout * 4));
            }
            // The hello is a receive completion: sleep on the CQ rather than spin.
            self.cq.arm()?;
            if self.poll_cq()? == 0 {
                self.cq.wait_event(Duration::from_millis(10))?;
            }
            if self.last_liveness.elapsed() >= self.config.peer_timeout / 4 {
                self.check_liveness(false);
            }
        }
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

    /// Posts a send-queue WR to `peer`, recording what it was for. Signals when the caller
    /// needs the completion, and every quarter queue so slots are reclaimed.
    fn post(
        &mut self,
        peer: Rank,
        info: WrInfo,
        op: Opcode,
        sges: &[Sge],
        remote: Option<(u64, u32)>,
        inline: bool,
    ) -> Result<()> {
        let depth = self.sq_depth;
        let wr_id = self.wr_id(peer, self.peers[peer as usize].next_seq);
        let p = &mut self.peers[peer as usize];
        let wants = !matches!(info, WrInfo::Rma { signal: Signal::No, .. } | WrInfo::Credit);
        let signaled = wants || p.sq.len() % (depth / 4).max(1) == (depth / 4).max(1) - 1;
        let seq = p.next_seq;
        p.qp.post_send(wr_id, op, sges, remote, signaled, inline)?;
        p.next_seq += 1;
        p.sq.push_back((seq & SEQ_MASK, info));
        Ok(())
    }

    /// Waits (bounded) until `peer`'s send queue has room.
    fn reserve_sq(&mut self, peer: Rank) -> Result<()> {
        let start = Instant::now();
        while self.peers[peer as usize].sq.len() + 2 >= self.sq_depth {
            self.poll_cq()?;
            self.live_peer(peer)?;
            if start.elapsed() > self.config.peer_timeout * 4 {
                return Err(TransportError::Timeout(self.config.peer_timeout * 4));
            }
        }
        Ok(())
    }

    fn can_send_now(&self, peer: Rank, needs_bounce: bool) -> bool {
        let p = &self.peers[peer as usize];
        p.ready
            && p.backlog.is_empty()
            && self.has_credit(peer)
            && p.sq.len() + 2 < self.sq_depth
            && (!needs_bounce || p.tx_used - p.tx_done < self.slots)
    }

    /// Sends an eager message (data or control) now, or queues it behind earlier ones.
    /// `done` is reported once the message is posted, never while it waits in the backlog.
    fn push_msg(
        &mut self,
        dest: Rank,
        header: SlotHeader,
        payload: &[u8],
        done: Option<Completion>,
    ) -> Result<()> {
        self.live_peer(dest)?;
        let total = header.wire_len() + payload.len();
        let inline = total <= self.max_inline as usize;
        if !self.can_send_now(dest, !inline) {
            self.backlogged += 1;
            self.peers[dest as usize].backlog.push_back(Outgoing::Msg {
                header,
                payload: payload.to_vec(),
                done,
            });
            return Ok(());
        }
        self.send_msg_now(dest, &header, payload, inline)?;
        self.completions.extend(done);
        Ok(())
    }

    /// An eager tagged send: one receive slot at the peer.
    fn send_eager(&mut self, owner: Owner, dest: Rank, tag: Tag, data: &[u8]) -> Result<OpId> {
        let op = self.completions.next_op(owner);
        let done = Completion::ok(op, CompletionKind::Send { dest, tag, len: data.len() });
        self.push_msg(dest, SlotHeader::eager(tag, data.len()), data, Some(done))?;
        Ok(op)
    }

    /// Takes the next TX bounce slot for `dest` (the caller checked one is free) and returns its
    /// offset in the TX ring.
    fn claim_tx_slot(&mut self, dest: Rank) -> usize {
        let p = &mut self.peers[dest as usize];
        let slot = (dest as u64 * self.slots + p.tx_used % self.slots) as usize * self.slot_size;
        p.tx_used += 1;
        slot
    }

    /// An eager send too big to inline: the header from a bounce slot, the payload straight
    /// from the registered region (no copy), so the region must stay unchanged until the Send
    /// completion, which comes with the SEND's.
    fn send_eager_zero_copy(
        &mut self,
        owner: Owner,
        dest: Rank,
        tag: Tag,
        region: &Region,
        offset: usize,
        len: usize,
    ) -> Result<OpId> {
        let op = self.completions.next_op(owner);
        let mut bytes = [0u8; SLOT_HEADER_LEN];
        let header_len = SlotHeader::eager(tag, len).encode_wire(&mut bytes);
        let slot = self.claim_tx_slot(dest);
        self.tx_ring.write(slot, &bytes[..header_len])?;
        let sges = [
            Sge {
                addr: self.tx_ring.as_ptr() as u64 + slot as u64,
                len: header_len as u32,
                lkey: self.tx_ring.local_key(),
            },
            Sge { addr: region.as_ptr() as u64 + offset as u64, len: len as u32, lkey: region.local_key() },
        ];
        let info = WrInfo::MsgZeroCopy { op, dest, tag, len, _region: region.clone() };
        self.post(dest, info, Opcode::Send, &sges[..if len == 0 { 1 } else { 2 }], None, false)?;
        self.peers[dest as usize].sent += 1;
        Ok(op)
    }

    fn send_msg_now(&mut self, dest: Rank, header: &SlotHeader, payload: &[u8], inline: bool) -> Result<()> {
        let mut bytes = [0u8; SLOT_HEADER_LEN];
        let header_len = header.encode_wire(&mut bytes);
        let total = header_len + payload.len();
        let mut sges = [Sge { addr: 0, len: 0, lkey: 0 }; 2];
        let count = if inline {
            // Copied at post time, so the SGEs may point at the stack and the caller's bytes.
            sges[0] = Sge { addr: bytes.as_ptr() as u64, len: header_len as u32, lkey: 0 };
            sges[1] = Sge { addr: payload.as_ptr() as u64, len: payload.len() as u32, lkey: 0 };
            if payload.is_empty() {
                1
            } else {
                2
            }
        } else {
            let slot = self.claim_tx_slot(dest);
            self.tx_ring.write(slot, &bytes[..header_len])?;
            self.tx_ring.write(slot + header_len, payload)?;
            let addr = self.tx_ring.as_ptr() as u64 + slot as u64;
            sges[0] = Sge { addr, len: total as u32, lkey: self.tx_ring.local_key() };
            1
        };
        self.post(dest, WrInfo::Msg { bounce: !inline }, Opcode::Send, &sges[..count], None, inline)?;
        self.peers[dest as usize].sent += 1;
        Ok(())
    }

    fn write_imm_now(&mut self, dest: Rank, o: Outgoing) -> Result<()> {
        let Outgoing::WriteImm { op, signal, local, local_offset, remote, len, imm } = o else {
            return Ok(());
        };
        let sge = Sge {
            addr: local.as_ptr() as u64 + local_offset as u64,
            len: len as u32,
            lkey: local.local_key(),
        };
        let sges: &[Sge] = if len == 0 { &[] } else { std::slice::from_ref(&sge) };
        let info = WrInfo::Rma { op, kind: CompletionKind::PutImm, signal, _local: local.clone() };
        self.post(dest, info, Opcode::WriteImm(imm), sges, Some(remote), false)?;
        self.peers[dest as usize].sent += 1;
        Ok(())
    }

    fn flush_backlogs(&mut self) -> Result<()> {
        for dest in 0..self.peers.len() as Rank {
            while let Some(front) = self.peers[dest as usize].backlog.front() {
                if self.peers[dest as usize].state == PeerState::Dead || !self.peers[dest as usize].ready {
                    break;
                }
                let inline = match front {
                    Outgoing::Msg { header, payload, .. } => {
                        header.wire_len() + payload.len() <= self.max_inline as usize
                    }
                    Outgoing::WriteImm { .. } => true,
                };
                let p = &self.peers[dest as usize];
                let room = self.has_credit(dest)
                    && p.sq.len() + 2 < self.sq_depth
                    && (inline || p.tx_used - p.tx_done < self.slots);
                if !room {
                    break;
                }
                let Some(item) = self.peers[dest as usize].backlog.pop_front() else { break };
                self.backlogged -= 1;
                match item {
                    Outgoing::Msg { header, payload, done } => {
                        self.send_msg_now(dest, &header, &payload, inline)?;
                        self.completions.extend(done);
                    }
                    other => self.write_imm_now(dest, other)?,
                }
            }
        }
        Ok(())
    }

    /// Returns receive credits to `peer` once a quarter of its slots are free again.
    fn return_credits(&mut self, peer: Rank) -> Result<()> {
        let p = &self.peers[peer as usize];
        let due = p.rx_consumed - p.rx_credit_sent;
        if due < (self.slots / 4).max(1) || p.state == PeerState::Dead || !p.ready {
            return Ok(());
        }
        if p.sq.len() + 2 >= self.sq_depth {
            self.credits_deferred = true; // retried by the next progress
            return Ok(());
        }
        let value = p.rx_consumed;
        self.credit_src.write(8 * peer as usize, &value.to_le_bytes())?;
        let sge = Sge {
            addr: self.credit_src.as_ptr() as u64 + 8 * peer as u64,
            len: 8,
            lkey: self.credit_src.local_key(),
        };
        let target = p.credit_target;
        self.post(peer, WrInfo::Credit, Opcode::Write, &[sge], Some(target), false)?;
        self.peers[peer as usize].rx_credit_sent = value;
        Ok(())
    }

    fn repost_recv(&mut self, peer: Rank, slot: u64) -> Result<()> {
        let addr = self.rx_ring.as_ptr() as u64
            + ((peer as u64 * self.slots + slot) as usize * self.slot_size) as u64;
        let wr_id = RECV_FLAG | self.wr_id(peer, slot);
        let lkey = self.rx_ring.local_key();
        let slot_size = self.slot_size as u32;
        self.peers[peer as usize].qp.post_recv(wr_id, Sge { addr, len: slot_size, lkey })?;
        self.peers[peer as usize].rx_consumed += 1;
        self.return_credits(peer)
    }

    fn complete_recv(&mut self, op: OpId, source: Rank, tag: Tag, len: usize, r: Result<Option<Vec<u8>>>) {
        self.completions.push(tagged::recv_completion(op, source, tag, len, r));
    }

    fn send_fin(&mut self, dest: Rank, rts: &SlotHeader, status: u32) {
        let fin = SlotHeader {
            kind: kind::FIN,
            imm: status,
            cookie: rts.cookie,
            tag: rts.tag,
            ..Default::default()
        };
        // A dead sender needs no FIN.
        let _ = self.push_msg(dest, fin, &[], None);
    }

    /// Receiver side of rendezvous: RDMA-read the sender's buffer into the posted one.
    fn rndv_fetch(&mut self, f: Fetch) {
        let Fetch { recv, source, rts } = f;
        let len = rts.len as usize;
        let fail = |this: &mut Self, recv: PostedRecv, e: TransportError, status: u32| {
            this.send_fin(source, &rts, status);
            this.complete_recv(recv.op, source, rts.tag, len, Err(e));
        };
        if len > recv.buffer.capacity() {
            let e = TransportError::Truncated { len: rts.len, capacity: recv.buffer.capacity() as u64 };
            return fail(self, recv, e, fin::TRUNCATED);
        }
        let key_incarnation = (rts.r_key >> 32) as u32;
        if rts.len > self.max_msg || key_incarnation != self.peers[source as usize].incarnation {
            let e = TransportError::Malformed {
                what: "rendezvous",
                detail: format!("length {} or key {:#x} invalid", rts.len, rts.r_key),
            };
            return fail(self, recv, e, fin::READ_FAILED);
        }
        if self.peers[source as usize].state == PeerState::Dead {
            return fail(self, recv, TransportError::PeerDead(source), fin::READ_FAILED);
        }
        if self.peers[source as usize].sq.len() + 2 >= self.sq_depth {
            // Waiting here would poll the CQ from inside `poll_cq`, which has taken the
            // completion array: the wait could not see the completions that free the queue.
            self.deferred_fetches.push_back(Fetch { recv, source, rts });
            return;
        }
        let (region, offset, scratch) = match &recv.buffer {
            RecvBuffer::Region { region, offset, .. } => (region.clone(), *offset, None),
            RecvBuffer::Owned { .. } => {
                let (pd, rank, incarnation) = (&self.pd, self.job.rank, self.job.incarnation);
                match self.scratch.take(len, |l| mr::register(pd, rank, incarnation, l.max(1), Access::LOCAL))
                {
                    Ok(r) => (r.clone(), 0, Some(r)),
                    Err(e) => return fail(self, recv, e, fin::READ_FAILED),
                }
            }
        };
        let sge =
            Sge { addr: region.as_ptr() as u64 + offset as u64, len: len as u32, lkey: region.local_key() };
        let remote = Some((rts.r_addr.wrapping_add(rts.r_offset), rts.r_key as u32)); // the rkey
        let info = WrInfo::RndvRead { recv, header: rts, scratch };
        if let Err(e) = self.post(source, info, Opcode::Read, &[sge], remote, false) {
            self.fail_peer(source, e);
        }
    }

    fn handle_message(&mut self, source: Rank, bytes: &[u8]) {
        let Some((header, payload)) = SlotHeader::decode_wire(bytes) else {
            self.malformed.push(TransportError::Malformed {
                what: "message",
                detail: format!("{} bytes from rank {source}", bytes.len()),
            });
            return;
        };
        match header.kind {
            kind::EAGER => self.tagged.on_eager(source, header.tag, payload, &mut self.completions),
            kind::RTS => {
                if let Some(fetch) = self.tagged.on_rts(source, header) {
                    self.rndv_fetch(fetch);
                }
            }
            kind::FIN => {
                if let Err(e) = self.tagged.on_fin(source, &header, &mut self.completions) {
                    self.malformed.push(e);
                }
            }
            other => self.malformed.push(TransportError::Malformed {
                what: "message",
                detail: format!("kind {other} with {} payload bytes from rank {source}", payload.len()),
            }),
        }
    }

    /// Marks `peer` failed with `error` and fails everything that depended on it.
    fn fail_peer(&mut self, peer: Rank, error: TransportError) {
        let Some(p) = self.peers.get_mut(peer as usize) else { return };
        if p.state == PeerState::Dead {
            return;
        }
        p.state = PeerState::Dead;
        let sq: Vec<WrInfo> = p.sq.drain(..).map(|(_, info)| info).collect();
        let backlog: Vec<Outgoing> = p.backlog.drain(..).collect();
        self.backlogged -= backlog.len();
        for info in sq {
            self.fail_wr(info, peer, error.clone());
        }
        for item in backlog {
            match item {
                Outgoing::WriteImm { op, .. } => {
                    self.completions.push(Completion::failed(op, CompletionKind::PutImm, error.clone()))
                }
                Outgoing::Msg { done: Some(c), .. } => {
                    self.completions.push(Completion::failed(c.op, c.kind, error.clone()))
                }
                Outgoing::Msg { done: None, .. } => {}
            }
        }
        self.tagged.fail_peer(peer, &error, &mut self.completions);
        let (failed, kept): (VecDeque<Fetch>, VecDeque<Fetch>) =
            std::mem::take(&mut self.deferred_fetches).into_iter().partition(|f| f.source == peer);
        self.deferred_fetches = kept;
        for f in failed {
            self.complete_recv(f.recv.op, peer, f.rts.tag, f.rts.len as usize, Err(error.clone()));
        }
    }

    fn fail_wr(&mut self, info: WrInfo, peer: Rank, error: TransportError) {
        match info {
            WrInfo::Rma { op, kind, .. } => self.completions.push(Completion::failed(op, kind, error)),
            WrInfo::RndvRead { recv, header, .. } => {
                self.complete_recv(recv.op, peer, header.tag, header.len as usize, Err(error))
            }
            WrInfo::MsgZeroCopy { op, dest, tag, len, .. } => {
                self.peers[peer as usize].tx_done += 1;
                self.completions.push(Completion::failed(op, CompletionKind::Send { dest, tag, len }, error))
            }
            WrInfo::Msg { .. } | WrInfo::Credit | WrInfo::Probe => {}
        }
    }

    /// A send-queue completion: everything posted before it on that QP is done too.
    fn on_send_completion(&mut self, peer: Rank, seq: u64, status: ffi::ibv_wc_status::Type) {
        let ok = status == ffi::ibv_wc_status::IBV_WC_SUCCESS;
        loop {
            let Some((s, _)) = self.peers[peer as usize].sq.front() else { return };
            let s = *s;
            let Some((_, info)) = self.peers[peer as usize].sq.pop_front() else { return };
            let this = s == seq;
            if this && !ok {
                let error = status_error(peer, status);
                self.fail_wr(info, peer, error.clone());
                self.fail_peer(peer, error);
                return;
            }
            match info {
                WrInfo::Msg { bounce: true } => self.peers[peer as usize].tx_done += 1,
                WrInfo::MsgZeroCopy { op, dest, tag, len, .. } => {
                    self.peers[peer as usize].tx_done += 1;
                    self.completions.push(Completion::ok(op, CompletionKind::Send { dest, tag, len }));
                }
                WrInfo::Rma { op, kind, signal: Signal::Yes, .. } if this => {
                    self.completions.push(Completion::ok(op, kind))
                }
                WrInfo::RndvRead { recv, header, scratch } => {
                    let len = header.len as usize;
                    let r = match (&recv.buffer, scratch) {
                        (RecvBuffer::Owned { .. }, Some(s)) => s.to_vec(0, len).map(Some),
                        _ => Ok(None),
                    };
                    self.send_fin(peer, &header, fin::OK);
                    self.complete_recv(recv.op, peer, header.tag, len, r);
                }
                _ => {}
            }
            if this {
                return;
            }
        }
    }

    fn poll_cq(&mut self) -> Result<usize> {
        let mut wc = std::mem::take(&mut self.wc);
        let n = self.cq.poll(&mut wc);
        let n = match n {
            Ok(n) => n,
            Err(e) => {
                self.wc = wc;
                return Err(e);
            }
        };
        for c in &wc[..n] {
            let id = c.wr_id();
            let peer = ((id >> PEER_SHIFT) & PEER_MASK) as Rank;
            let Some(p) = self.peers.get(peer as usize) else { continue };
            if (id >> GEN_SHIFT) & GEN_MASK != p.generation {
                continue; // a connection that reconnect replaced: already failed
            }
            let status = c.error().map_or(ffi::ibv_wc_status::IBV_WC_SUCCESS, |(s, _)| s);
            if id & RECV_FLAG == 0 {
                self.on_send_completion(peer, id & SEQ_MASK, status);
                continue;
            }
            if status != ffi::ibv_wc_status::IBV_WC_SUCCESS {
                if status != ffi::ibv_wc_status::IBV_WC_WR_FLUSH_ERR {
                    self.fail_peer(peer, status_error(peer, status));
                }
                continue;
            }
            let slot = id & SEQ_MASK;
            if c.len() == 0 && c.opcode() == ffi::ibv_wc_opcode::IBV_WC_RECV {
                // A hello: the peer reconnected to us, we may post to it now.
                self.peers[peer as usize].ready = true;
            } else if c.opcode() == ffi::ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM {
                let imm = u32::from_be(c.imm_data().unwrap_or(0));
                self.completions.push(Completion::ok(
                    OpId::REMOTE,
                    CompletionKind::Imm { source: peer, imm, len: c.len() },
                ));
            } else {
                let off = (peer as u64 * self.slots + slot) as usize * self.slot_size;
                let len = c.len().min(self.slot_size);
                let ring = self.rx_ring.clone();
                // SAFETY: the slot's receive WR has completed and is reposted only below, so the
                // device does not write these bytes while we parse them. `handle_message` never
                // polls the CQ again (a rendezvous read that finds the send queue full is
                // deferred to `progress`), so no nested poll reposts this slot.
                match unsafe { ring.slice(off, len) } {
                    Ok(bytes) => self.handle_message(peer, bytes),
                    Err(e) => self.malformed.push(e),
                }
            }
            if let Err(e) = self.repost_recv(peer, slot) {
                self.fail_peer(peer, e);
            }
        }
        self.wc = wc;
        Ok(n)
    }

    fn check_liveness(&mut self, probe: bool) {
        self.last_liveness = Instant::now();
        for rank in 0..self.peers.len() as Rank {
            let p = &self.peers[rank as usize];
            if p.state == PeerState::Dead || rank == self.job.rank {
                continue;
            }
            if p.watch.as_ref().is_some_and(|w| !w.alive()) {
                // What it sent before dying (a clean exit's last words) may still sit in the CQ:
                // deliver it to the receives posted for it before failing them.
                while matches!(self.poll_cq(), Ok(n) if n == self.wc.len()) {}
                self.fail_peer(rank, TransportError::PeerDead(rank));
                continue;
            }
            // Peers on other hosts: a zero-byte write fails by retry exhaustion if they are gone.
            if probe
                && p.ready
                && p.watch.is_none()
                && p.last_probe.elapsed() >= self.config.peer_timeout / 2
                && p.sq.len() + 2 < self.sq_depth
            {
                let target = p.credit_target;
                self.peers[rank as usize].last_probe = Instant::now();
                if let Err(e) = self.post(rank, WrInfo::Probe, Opcode::Write, &[], Some(target), false) {
                    self.fail_peer(rank, e);
                }
            }
        }
    }

    fn start_send(
        &mut self,
        owner: Owner,
        dest: Rank,
        tag: Tag,
        region: &Region,
        offset: usize,
        len: usize,
    ) -> Result<OpId> {
        region.check_bounds("send", offset, len)?;
        self.live_peer(dest)?;
        if len <= self.config.rndv_thresh {
            if EAGER_WIRE_LEN + len > self.max_inline as usize && self.can_send_now(dest, true) {
                return self.send_eager_zero_copy(owner, dest, tag, region, offset, len);
            }
            return self.send_eager(owner, dest, tag, &region.to_vec(offset, len)?);
        }
        let op = self.completions.next_op(owner);
        if !region.access().allows(Access::REMOTE_READ) {
            return Err(TransportError::AccessDenied { op: "rendezvous send", needed: "remote read" });
        }
        self.push_msg(dest, SlotHeader::rts(tag, len, op.0, &region.remote(), offset), &[], None)?;
        self.tagged.add_pending(op, dest, tag, len, region);
        Ok(op)
    }

    /// Checks an RMA at the initiator and returns (local SGE, remote address, rkey).
    fn rma_args(&self, op: &'static str, rma: &Rma<'_>) -> Result<(Sge, (u64, u32))> {
        rma.local.check_bounds(op, rma.local_offset, rma.len)?;
        rma.remote.check_bounds(op, rma.remote_offset, rma.len as u64)?;
        let owner = self.live_peer(rma.remote.owner)?;
        // The key's high half names the owner's incarnation: a dead one's descriptors are refused.
        if (rma.remote.key >> 32) as u32 != owner.incarnation {
            return Err(TransportError::InvalidKey { op, owner: rma.remote.owner, key: rma.remote.key });
        }
        if rma.len as u64 > self.max_msg {
            return Err(TransportError::OutOfBounds {
                op,
                offset: 0,
                len: rma.len as u64,
                region_len: self.max_msg,
            });
        }
        let sge = Sge {
            addr: rma.local.as_ptr() as u64 + rma.local_offset as u64,
            len: rma.len as u32,
            lkey: rma.local.local_key(),
        };
        Ok((sge, (rma.remote.addr + rma.remote_offset, rma.remote.key as u32)))
    }

    fn rma(
        &mut self,
        owner: Owner,
        name: &'static str,
        rma: Rma<'_>,
        opcode: Opcode,
        kind: CompletionKind,
        signal: Signal,
    ) -> Result<OpId> {
        let (sge, remote) = self.rma_args(name, &rma)?;
        let peer = rma.remote.owner;
        self.await_ready(peer)?;
        self.reserve_sq(peer)?;
        let op = self.completions.next_op(owner);
        let inline = matches!(opcode, Opcode::Write) && rma.len <= self.max_inline as usize && rma.len > 0;
        let sges: &[Sge] = if rma.len == 0 { &[] } else { std::slice::from_ref(&sge) };
        let info = WrInfo::Rma { op, kind, signal, _local: rma.local.clone() };
        self.post(peer, info, opcode, sges, Some(remote), inline)?;
        Ok(op)
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
            | Capabilities::INTER_NODE;
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
            self.backlogged += 1;
            self.peers[dest as usize].backlog.push_back(item);
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
        if let Some(fetch) =
            self.tagged.post(PostedRecv { op, source, tag, buffer }, dead, &mut self.completions)?
        {
            self.rndv_fetch(fetch);
        }
        Ok(op)
    }

    fn peer_state(&self, peer: Rank) -> PeerState {
        self.peers.get(peer as usize).map_or(PeerState::Dead, |p| p.state)
    }

    fn peer_incarnation(&self, peer: Rank) -> Option<u32> {
        self.peers.get(peer as usize).filter(|p| p.connected).map(|p| p.incarnation)
    }

    fn reconnect(&mut self, peer: Rank, incarnation: u32, address: &[u8]) -> Result<()> {
        let current = self.peers.get(peer as usize).map(|p| (p.incarnation, p.connected));
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
        self.tagged.purge_unexpected_from(peer);
        let attached = self.attach(peer, &address, true);
        if let Err(e) = attached {
            self.peers[peer as usize].state = PeerState::Dead;
            return Err(e);
        }
        // The flush of the old connection (dropped by generation) must not fill the CQ.
        while self.poll_cq()? == self.wc.len() {}
        // The hello: the new incarnation posts nothing to us before it (its QP is connected
        // already: it published after connecting). It takes one of its receive slots.
        let hello = self.post(peer, WrInfo::Msg { bounce: false }, Opcode::Send, &[], None, false);
        match hello {
            Ok(()) => {
                self.peers[peer as usize].sent += 1;
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
        // Waiting on credits is not a CQ event at the sender: poll the credit words soon.
        let backlog = self.backlogged > 0 || !self.deferred_fetches.is_empty();
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
        // Destroying a QP drops what it has not sent: post the backlog and wait (bounded) for
        // the signaled work requests still in flight.
        let deadline = Instant::now() + self.config.peer_timeout;
        let busy = |p: &Peer| {
            p.state == PeerState::Alive
                && p.ready
                && (!p.backlog.is_empty()
                    || p.sq
                        .iter()
                        .any(|(_, i)| !matches!(i, WrInfo::Credit | WrInfo::Rma { signal: Signal::No, .. })))
        };
        while self.peers.iter().any(busy) && Instant::now() < deadline {
            if self.progress().is_err() {
                break;
            }
            std::thread::yield_now();
        }
    }
}
