//! The tcp provider: ranks on any hosts, one TCP connection per pair. The fallback where
//! there is no RDMA, and the path between hosts in tests.
//!
//! - **Connections.** Every rank listens on an ephemeral port (`REVERB_TCP_ADDR`, else
//!   `REVERB_TCP_IFACE`'s address, else the address it reaches the bootstrap from) and
//!   exchanges `host:port` plus a random key through the bootstrap's allgather. The lower rank
//!   of each pair connects and presents the key in a hello; the higher one accepts. The same
//!   rule holds after a respawn, so a pair never holds two connections and no tie-break is
//!   needed: a respawned rank connects to the higher survivors when it rejoins and waits for
//!   the lower ones, which connect when they `reconnect` to it. Sockets are nonblocking with
//!   `TCP_NODELAY`; `progress` reads and writes them, `block` sleeps in `poll(2)` on all of
//!   them.
//! - **Frames.** Length-prefixed, decoded with the project codec (`wire`). A frame that does
//!   not decode is reported by `progress` (`Malformed`) and skipped; a length beyond the
//!   largest frame breaks the stream, so that peer is reported and failed (`PeerDead`).
//! - **Tagged messages** share the tag matching and rendezvous state of every provider
//!   (`tagged`). Up to `REVERB_RNDV_THRESH` bytes go eagerly in one frame (the send completes
//!   once its bytes are copied out); above it the sender announces its registered region
//!   (RTS), and the receiver, once a receive matches, reads it with the same read request a
//!   `get` uses, then answers FIN. UCX's tcp transport does rendezvous as the mirror image
//!   (the receiver's RTR, then the sender's emulated put into the receiver's buffer);
//!   libfabric's tcp provider streams everything eagerly. A receiver-driven read costs the
//!   same one round trip as RTR + put, keeps the rendezvous shape the shm, verbs and loopback
//!   providers share, and reuses the target-side checks of `get` for free.
//! - **RMA** is emulated with messages that the target's `progress` serves, as libfabric's
//!   and UCX's tcp transports do: a put travels as data chunks, a get as a request answered
//!   by data chunks streamed from the registered memory. The target checks key, address,
//!   bounds and access against its registration table (`table`) before a byte moves; a
//!   refusal comes back as an error completion at the initiator. The initiator checks the
//!   bounds of the descriptor and its local region before sending. So one-sided operations
//!   progress only while the target calls `progress` (or waits).
//! - **Bounded memory.** The receive buffer of a connection holds one largest frame (eager
//!   threshold or 256 KiB data chunk) plus 64 KiB; copied bytes waiting to be sent are capped
//!   per connection ([`TX_QUEUE_BYTES`]: a post past the cap first progresses that connection,
//!   for at most the peer timeout); read answers queue a reference to the memory, not a copy.
//! - **Dead peers.** A peer process that exits or dies closes its socket: EOF or a reset fails
//!   everything outstanding with it (`PeerDead`) at the next `progress`. A host or link that
//!   vanishes is found by keepalive probes and `TCP_USER_TIMEOUT` set to the peer timeout
//!   (keepalive counts in whole seconds: an idle link is declared dead after at most about
//!   one second plus the peer timeout).

mod conn;
mod connect;
mod iface;
mod io;
mod serve;
mod table;
mod wire;

use std::collections::HashMap;
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::api::*;
use crate::bootstrap::{Bootstrap, JobInfo};
use crate::completion::{CompletionQueues, Owner};
use crate::config::TransportConfig;
use crate::error::{ErrorQueue, Result, TransportError};
use crate::region::{Region, RegionPool};
use crate::tagged::{self, TaggedState};
use crate::tagmatch::PostedRecv;
use conn::{Rx, Tx};
use connect::Handshake;
use serve::Pending;
use table::Table;
use wire::{Address, Hello};

/// Copied bytes that may wait in one connection's send queue.
pub const TX_QUEUE_BYTES: usize = 4 << 20;
/// Bytes of staging regions kept for reuse by slice sends above the rendezvous threshold.
const STAGING_POOL_BYTES: usize = 64 << 20;
/// Bound on connecting to a peer, and on the open's wait for the lower ranks' connections.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a reconnect waits for the lower rank's connection before calling it dead: that
/// rank connects when it reconnects in turn, at its next `apply_rejoins` or `await_rejoin`.
const AWAIT_CONNECT: Duration = Duration::from_secs(60);

/// How a peer is reached.
enum Link {
    /// Gone (or never connected): operations towards it fail with `PeerDead`.
    Dead,
    /// Reconnected, waiting since then for the lower rank's connection; sends queue.
    Awaiting(Instant),
    Up(TcpStream),
    /// This rank itself: frames go from the send queue straight to the receive path.
    Itself,
}

struct Peer {
    /// The incarnation connected to (or awaited, or last heard of).
    incarnation: u32,
    /// An incarnation was ever connected or awaited (`peer_incarnation` is Some).
    known: bool,
    link: Link,
    tx: Tx,
    rx: Rx,
}

impl Peer {
    fn alive(&self) -> bool {
        !matches!(self.link, Link::Dead)
    }
}

/// The tcp [`Provider`] of one rank (see the module doc); open it with
/// [`TcpProvider::open`], or [`TcpProvider::rejoin`] after a respawn.
pub struct TcpProvider {
    config: TransportConfig,
    job: JobInfo,
    listener: TcpListener,
    /// What a connecting peer must present: proves it learnt our address from the bootstrap.
    key: u64,
    address: Vec<u8>,
    table: Arc<Table>,
    peers: Vec<Peer>,
    cq: CompletionQueues,
    tagged: TaggedState,
    /// Reads and puts this rank started, by cookie, until their data or acknowledgement.
    pending: HashMap<u64, Pending>,
    next_cookie: u64,
    /// Accepted connections whose hello has not fully arrived.
    handshakes: Vec<Handshake>,
    /// Connections from incarnations this rank has not reconnected to yet.
    stash: Vec<(Hello, TcpStream)>,
    malformed: ErrorQueue,
    staging: RegionPool,
    progress_calls: u32,
    max_body: usize,
}

impl TcpProvider {
    /// Listens, exchanges addresses through `boot` (a collective) and connects every pair.
    /// Publishes the address too, for ranks that rejoin later.
    pub fn open(config: TransportConfig, boot: &mut dyn Bootstrap) -> Result<TcpProvider> {
        let mut p = TcpProvider::create(config, boot)?;
        let all = boot.allgather(&p.address)?;
        if all.len() != p.job.size as usize {
            return Err(TransportError::Bootstrap(format!(
                "allgather returned {} entries for {} ranks",
                all.len(),
                p.job.size
            )));
        }
        let me = p.job.rank;
        for (rank, bytes) in all.iter().enumerate().skip(me as usize + 1) {
            let address = Address::decode(bytes, rank as Rank)?;
            p.dial(rank as Rank, &address)?;
        }
        for (rank, bytes) in all.iter().enumerate().take(me as usize) {
            let address = Address::decode(bytes, rank as Rank)?;
            let peer = &mut p.peers[rank];
            (peer.incarnation, peer.known, peer.link) =
                (address.incarnation, true, Link::Awaiting(Instant::now()));
        }
        p.await_lower_ranks()?;
        boot.publish(&p.address)?;
        Ok(p)
    }

    /// Opens a respawned rank (incarnation > 0) without a collective: connects to the higher
    /// ranks that have an address at the rendezvous now (`Bootstrap::lookup`), awaits the
    /// lower ones (they connect when they reconnect to this incarnation), and publishes its
    /// own address. Ranks without an address yet stay `Dead` until `reconnect`.
    pub fn rejoin(config: TransportConfig, boot: &mut dyn Bootstrap) -> Result<TcpProvider> {
        let mut p = TcpProvider::create(config, boot)?;
        let me = p.job.rank;
        for entry in boot.lookup()? {
            if entry.rank == me || entry.rank >= p.job.size {
                continue;
            }
            p.peers[entry.rank as usize].incarnation = entry.incarnation;
            let Some(bytes) = entry.address else { continue };
            let address = Address::decode(&bytes, entry.rank)?;
            if entry.rank > me {
                match p.dial(entry.rank, &address) {
                    // Died since it published: its next incarnation will be announced.
                    Err(TransportError::PeerDead(_)) => {}
                    other => other?,
                }
            } else {
                let peer = &mut p.peers[entry.rank as usize];
                (peer.known, peer.link) = (true, Link::Awaiting(Instant::now()));
            }
        }
        boot.publish(&p.address)?;
        Ok(p)
    }

    /// The listener and this rank's state, every peer Dead and unknown.
    fn create(config: TransportConfig, boot: &mut dyn Bootstrap) -> Result<TcpProvider> {
        config.validate()?;
        let job = boot.job().clone();
        if job.rank >= job.size {
            return Err(TransportError::InvalidRank(job.rank, job.size));
        }
        let listener = connect::listen(connect::listen_ip(&config, boot)?)?;
        let socket = listener.local_addr().map_err(|e| TransportError::io("tcp: listener address", e))?;
        let key = rand::random::<u64>() | 1;
        let address = Address { incarnation: job.incarnation, key, socket }.encode();
        let max_body = wire::MAX_FIXED + config.rndv_thresh.max(conn::CHUNK);
        let peers = (0..job.size)
            .map(|rank| Peer {
                incarnation: if rank == job.rank { job.incarnation } else { 0 },
                known: rank == job.rank,
                link: if rank == job.rank { Link::Itself } else { Link::Dead },
                tx: Tx::default(),
                rx: Rx::new(max_body),
            })
            .collect();
        Ok(TcpProvider {
            config,
            job,
            listener,
            key,
            address,
            table: Arc::new(Table::default()),
            peers,
            cq: CompletionQueues::new(),
            tagged: TaggedState::default(),
            pending: HashMap::new(),
            next_cookie: 1,
            handshakes: Vec::new(),
            stash: Vec::new(),
            malformed: ErrorQueue::default(),
            staging: RegionPool::new(STAGING_POOL_BYTES),
            progress_calls: 0,
            max_body,
        })
    }

    /// This rank's address, as published to the rendezvous.
    pub fn address(&self) -> Vec<u8> {
        self.address.clone()
    }

    fn hello(&self) -> Hello {
        Hello { rank: self.job.rank, incarnation: self.job.incarnation, key: 0 }
    }

    /// Connects to higher rank `rank` at `address`; `PeerDead` if nobody listens there.
    fn dial(&mut self, rank: Rank, address: &Address) -> Result<()> {
        let hello = Hello { key: address.key, ..self.hello() };
        let stream = connect::dial(address.socket, rank, &hello, &self.config, CONNECT_TIMEOUT)?;
        let peer = &mut self.peers[rank as usize];
        (peer.incarnation, peer.known, peer.link) = (address.incarnation, true, Link::Up(stream));
        Ok(())
    }

    /// The open's wait for every lower rank's connection.
    fn await_lower_ranks(&mut self) -> Result<()> {
        let deadline = Instant::now() + CONNECT_TIMEOUT;
        while self.peers.iter().any(|p| matches!(p.link, Link::Awaiting(_))) {
            self.poll_accepts();
            if Instant::now() > deadline {
                let missing: Vec<usize> = (0..self.peers.len())
                    .filter(|&r| matches!(self.peers[r].link, Link::Awaiting(_)))
                    .collect();
                return Err(TransportError::Bootstrap(format!(
                    "tcp: ranks {missing:?} did not connect within {CONNECT_TIMEOUT:?}"
                )));
            }
            self.sleep_in_poll(Duration::from_millis(10));
        }
        Ok(())
    }

    /// Accepts waiting connections and routes those whose hello is in: to the peer awaiting
    /// that incarnation, or to the stash when it is newer than the one this rank knows.
    fn poll_accepts(&mut self) {
        if let Err(e) = Handshake::accept_all(&self.listener, &mut self.handshakes) {
            tracing::debug!("tcp: {e}");
        }
        let mut i = 0;
        while i < self.handshakes.len() {
            match self.handshakes[i].poll(self.key) {
                Ok(None) => i += 1,
                Ok(Some(hello)) => {
                    let h = self.handshakes.swap_remove(i);
                    if let Err(e) = self.route_hello(hello, h) {
                        tracing::debug!("tcp: dropped a connection: {e}");
                    }
                }
                Err(e) => {
                    tracing::debug!("tcp: dropped a connection: {e}");
                    self.handshakes.swap_remove(i);
                }
            }
        }
    }

    fn route_hello(&mut self, hello: Hello, h: Handshake) -> Result<()> {
        let rank = hello.rank;
        if rank >= self.job.size || rank >= self.job.rank {
            return Err(TransportError::Malformed {
                what: "tcp hello",
                detail: format!("rank {rank} may not connect to rank {}", self.job.rank),
            });
        }
        let stream = h.into_stream(self.config.peer_timeout)?;
        let peer = &mut self.peers[rank as usize];
        match peer.link {
            Link::Awaiting(_) if hello.incarnation == peer.incarnation => peer.link = Link::Up(stream),
            _ if hello.incarnation > peer.incarnation || !peer.known => {
                self.stash.retain(|(s, _)| s.rank != rank || s.incarnation > hello.incarnation);
                self.stash.push((hello, stream));
            }
            _ => {
                return Err(TransportError::StaleIncarnation {
                    rank,
                    incarnation: hello.incarnation,
                    current: peer.incarnation,
                })
            }
        }
        Ok(())
    }

    fn live(&self, rank: Rank) -> Result<()> {
        let Some(peer) = self.peers.get(rank as usize) else {
            return Err(TransportError::InvalidRank(rank, self.job.size));
        };
        if !peer.alive() {
            return Err(TransportError::PeerDead(rank));
        }
        Ok(())
    }

    /// Fails everything outstanding with `rank` and forgets its connection.
    fn mark_dead(&mut self, rank: Rank) {
        let Some(peer) = self.peers.get_mut(rank as usize) else { return };
        if !peer.alive() {
            return;
        }
        peer.link = Link::Dead;
        peer.tx = Tx::default();
        peer.rx = Rx::new(self.max_body);
        let dead = TransportError::PeerDead(rank);
        self.tagged.fail_peer(rank, &dead, &mut self.cq);
        self.fail_pending(rank, &dead);
    }

    /// Fails the awaited connections that did not come within their bound.
    fn expire_awaits(&mut self) {
        let late: Vec<Rank> = (0..self.job.size)
            .filter(
                |&r| matches!(self.peers[r as usize].link, Link::Awaiting(t) if t.elapsed() > AWAIT_CONNECT),
            )
            .collect();
        for rank in late {
            self.mark_dead(rank);
        }
    }

    fn start_rndv(
        &mut self,
        owner: Owner,
        dest: Rank,
        tag: Tag,
        region: &Region,
        offset: usize,
        len: usize,
    ) -> Result<OpId> {
        if !region.access().allows(Access::REMOTE_READ) {
            return Err(TransportError::AccessDenied { op: "rendezvous send", needed: "remote read" });
        }
        self.make_room(dest)?;
        let op = self.cq.next_op(owner);
        let rts = crate::msg::SlotHeader::rts(tag, len, op.0, &region.remote(), offset);
        self.peers[dest as usize].tx.push(|out| wire::msg(out, &rts, &[]));
        self.tagged.add_pending(op, dest, tag, len, region);
        self.kick(dest);
        Ok(op)
    }

    fn send_eager(
        &mut self,
        owner: Owner,
        dest: Rank,
        tag: Tag,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<OpId> {
        self.make_room(dest)?;
        let header = crate::msg::SlotHeader::eager(tag, len);
        self.peers[dest as usize].tx.push(|out| {
            wire::msg_start(out, &header, len);
            let start = out.len();
            out.resize(start + len, 0);
            fill(&mut out[start..]);
        });
        self.kick(dest);
        let op = self.cq.next_op(owner);
        self.cq.push(Completion::ok(op, CompletionKind::Send { dest, tag, len }));
        Ok(op)
    }
}

impl Provider for TcpProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::TCP
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::PUT
            | Capabilities::PUT_IMM
            | Capabilities::GET
            | Capabilities::TAGGED
            | Capabilities::EVENT_WAIT
            | Capabilities::INTER_NODE
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
        if len == 0 {
            return Err(TransportError::Config("cannot register an empty region".into()));
        }
        Ok(self.table.register(self.job.rank, len, access))
    }

    fn put_for(&mut self, owner: Owner, rma: Rma<'_>, signal: Signal) -> Result<OpId> {
        self.post_put(owner, "put", &rma, None, signal)
    }

    fn put_imm_for(&mut self, owner: Owner, rma: Rma<'_>, imm: u32, signal: Signal) -> Result<OpId> {
        self.post_put(owner, "put_imm", &rma, Some(imm), signal)
    }

    fn get_for(&mut self, owner: Owner, rma: Rma<'_>, signal: Signal) -> Result<OpId> {
        self.post_get(owner, &rma, signal)
    }

    fn send_for(&mut self, owner: Owner, dest: Rank, tag: Tag, data: &[u8]) -> Result<OpId> {
        self.live(dest)?;
        if data.len() <= self.config.rndv_thresh {
            return self.send_eager(owner, dest, tag, data.len(), |out| out.copy_from_slice(data));
        }
        let mut pool = std::mem::replace(&mut self.staging, RegionPool::new(0));
        let staging = pool.take(data.len(), |len| self.alloc_region(len, Access::REMOTE_READ));
        self.staging = pool;
        let staging = staging?;
        staging.write(0, data)?;
        self.start_rndv(owner, dest, tag, &staging, 0, data.len())
    }

    fn send_region_for(
        &mut self,
        owner: Owner,
        dest: Rank,
        tag: Tag,
        region: &Region,
        offset: usize,
        len: usize,
    ) -> Result<OpId> {
        self.live(dest)?;
        region.check_bounds("send", offset, len)?;
        if len <= self.config.rndv_thresh {
            // Cannot fail: the range was checked above.
            return self.send_eager(owner, dest, tag, len, |out| drop(region.read(offset, out)));
        }
        self.start_rndv(owner, dest, tag, region, offset, len)
    }

    fn post_recv_for(
        &mut self,
        owner: Owner,
        source: Source,
        tag: TagMatch,
        buffer: RecvBuffer,
    ) -> Result<OpId> {
        tagged::check_recv(source, &buffer, self.job.size)?;
        let op = self.cq.next_op(owner);
        let peers = &self.peers;
        let dead = |r: Rank| !peers[r as usize].alive();
        if let Some(fetch) = self.tagged.post(PostedRecv { op, source, tag, buffer }, dead, &mut self.cq)? {
            self.rndv_fetch(fetch);
        }
        Ok(op)
    }

    fn peer_state(&self, peer: Rank) -> PeerState {
        match self.peers.get(peer as usize) {
            Some(p) if p.alive() => PeerState::Alive,
            _ => PeerState::Dead,
        }
    }

    fn peer_incarnation(&self, peer: Rank) -> Option<u32> {
        self.peers.get(peer as usize).filter(|p| p.known).map(|p| p.incarnation)
    }

    fn reconnect(&mut self, peer: Rank, incarnation: u32, address: &[u8]) -> Result<()> {
        let current = self.peers.get(peer as usize).map(|p| (p.incarnation, p.known));
        crate::recovery::check_reconnect(self.job.rank, self.job.size, peer, incarnation, current)?;
        let address = Address::decode(address, peer)?;
        if address.incarnation != incarnation {
            return Err(TransportError::Malformed {
                what: "tcp address",
                detail: format!(
                    "rank {peer}: address of incarnation {}, expected {incarnation}",
                    address.incarnation
                ),
            });
        }
        // The old incarnation is gone even if its close was not seen yet.
        self.mark_dead(peer);
        self.tagged.purge_unexpected_from(peer);
        if self.job.rank < peer {
            return self.dial(peer, &address);
        }
        self.poll_accepts();
        let p = &mut self.peers[peer as usize];
        (p.incarnation, p.known, p.link) = (incarnation, true, Link::Awaiting(Instant::now()));
        if let Some(i) = self.stash.iter().position(|(h, _)| h.rank == peer && h.incarnation == incarnation) {
            let (_, stream) = self.stash.swap_remove(i);
            self.peers[peer as usize].link = Link::Up(stream);
        }
        self.stash.retain(|(h, _)| h.rank != peer || h.incarnation > incarnation);
        Ok(())
    }

    fn progress(&mut self) -> Result<()> {
        self.progress_calls = self.progress_calls.wrapping_add(1);
        let awaiting = self.peers.iter().any(|p| matches!(p.link, Link::Awaiting(_)));
        if awaiting || !self.handshakes.is_empty() || self.progress_calls.is_multiple_of(64) {
            self.poll_accepts();
            if awaiting {
                self.expire_awaits();
            }
        }
        for rank in 0..self.job.size {
            self.pump(rank);
        }
        match self.malformed.next_error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn block(&mut self, timeout: Duration) -> Result<()> {
        if self.cq.any_queued() {
            return Ok(());
        }
        if self.config.wait_mode == crate::config::WaitMode::Poll {
            std::thread::yield_now();
            return Ok(());
        }
        self.sleep_in_poll(timeout);
        // A peer's close is only seen by reading: take in what woke us (its last messages
        // first), so that `peer_state` is current after a block as on the other providers.
        for rank in 0..self.job.size {
            self.pump(rank);
        }
        Ok(())
    }

    fn queues(&mut self) -> &mut CompletionQueues {
        &mut self.cq
    }
}

impl Drop for TcpProvider {
    fn drop(&mut self) {
        self.close_all();
    }
}
