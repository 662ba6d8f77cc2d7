//! The tcp provider's state and its operations (see the module doc of [`super`]).

use std::collections::HashMap;
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::conn::{self, Rx, Tx};
use super::connect::{self, Handshake};
use super::serve::Pending;
use super::table::Table;
use super::watch::Watch;
use super::wire::{self, Address, Hello};
use crate::api::*;
use crate::bootstrap::{Bootstrap, JobInfo};
use crate::completion::{CompletionQueues, Owner};
use crate::config::TransportConfig;
use crate::error::{ErrorQueue, Result, TransportError};
use crate::region::{Region, RegionPool};
use crate::subcore::SubCore;
use crate::tagged::{self, TaggedHome};
use crate::tagmatch::PostedRecv;

/// Copied bytes that may wait in one connection's send queue.
pub const TX_QUEUE_BYTES: usize = 4 << 20;
/// Bytes of staging regions kept for reuse by slice sends above the rendezvous threshold.
const STAGING_POOL_BYTES: usize = 64 << 20;
/// Bound on connecting to a peer, and on the open's wait for the lower ranks' connections.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a reconnect waits for the lower rank's connection before calling it dead: that
/// rank connects when it reconnects in turn, at its next `apply_rejoins` or `await_rejoin`.
const AWAIT_CONNECT: Duration = Duration::from_secs(60);

/// How often a wait of the open that lasts says so (a chaos trial's log shows where it is).
const SLOW_NOTE_EVERY: Duration = Duration::from_secs(3);
/// One attempt of a dial during the open; between attempts the rendezvous is asked.
const DIAL_SLICE: Duration = Duration::from_secs(1);
/// How often the open, still awaiting lower ranks, asks the rendezvous whether one was lost.
const LOST_LOOKUP_EVERY: Duration = Duration::from_millis(500);

/// How a peer is reached.
pub(super) enum Link {
    /// Gone (or never connected): operations towards it fail with `PeerDead`.
    Dead,
    /// Reconnected, waiting since then for the lower rank's connection; sends queue.
    Awaiting(Instant),
    Up(TcpStream),
    /// This rank itself: frames go from the send queue straight to the receive path.
    Itself,
}

pub(super) struct Peer {
    /// The incarnation connected to (or awaited, or last heard of).
    pub(super) incarnation: u32,
    /// An incarnation was ever connected or awaited (`peer_incarnation` is Some).
    pub(super) known: bool,
    pub(super) link: Link,
    pub(super) tx: Tx,
    pub(super) rx: Rx,
    /// Endpoints opened by address: the connection the peer dialled while this side dialled
    /// it too. Only read (each side writes on the one it dialled), so each direction keeps
    /// its order.
    pub(super) second: Option<(TcpStream, Rx)>,
}

impl Peer {
    pub(super) fn alive(&self) -> bool {
        !matches!(self.link, Link::Dead)
    }
}

/// The state of one rank's tcp provider, behind [`super::TcpProvider`]'s lock: the
/// application's calls and the serving thread both work on it.
pub(super) struct Core {
    pub(super) config: TransportConfig,
    pub(super) job: JobInfo,
    pub(super) listener: TcpListener,
    /// What the helper thread waits on, for [`super::TcpProvider::progress_when_ready`].
    pub(super) watch: Arc<Watch>,
    /// What a connecting peer must present: proves it learnt our address from the bootstrap.
    pub(super) key: u64,
    pub(super) address: Vec<u8>,
    pub(super) table: Arc<Table>,
    pub(super) peers: Vec<Peer>,
    pub(super) cq: CompletionQueues,
    pub(super) tagged: TaggedHome,
    /// Reads and puts this rank started, by cookie, until their data or acknowledgement.
    pub(super) pending: HashMap<u64, Pending>,
    pub(super) next_cookie: u64,
    /// Accepted connections whose hello has not fully arrived.
    pub(super) handshakes: Vec<Handshake>,
    /// Connections from incarnations this rank has not reconnected to yet.
    pub(super) stash: Vec<(Hello, TcpStream)>,
    pub(super) malformed: ErrorQueue,
    pub(super) staging: RegionPool,
    pub(super) progress_calls: u32,
    /// Bytes read from every connection so far (tells a progress that found traffic).
    pub(super) bytes_read: u64,
    pub(super) max_body: usize,
    /// Endpoints opened by address (see `book`): the rank of each peer's key.
    pub(super) book: Option<HashMap<u64, Rank>>,
}

impl Core {
    /// Listens, exchanges addresses through `boot` (a collective) and connects every pair.
    /// Publishes the address too, for ranks that rejoin later.
    /// Ranks whose address `boot` gives as empty are reached another way (the `auto`
    /// provider's shm): they stay `Dead` here.
    pub(super) fn open(config: TransportConfig, boot: &mut dyn Bootstrap, core: SubCore) -> Result<Core> {
        let mut p = Core::create(config, boot, core)?;
        let all = boot.allgather(&p.address)?;
        if all.len() != p.job.size as usize {
            return Err(TransportError::Bootstrap(format!(
                "allgather returned {} entries for {} ranks",
                all.len(),
                p.job.size
            )));
        }
        let me = p.job.rank;
        for (rank, bytes) in all.iter().enumerate().skip(me as usize + 1).filter(|(_, b)| !b.is_empty()) {
            let address = Address::decode(bytes, rank as Rank)?;
            match p.dial_watching(boot, rank as Rank, &address) {
                // Died since the allgather: the open goes on without it, as after any failure
                // (the runtime's recovery reconnects to its next incarnation).
                Err(TransportError::PeerDead(_)) => p.lost_in_open(rank as Rank, address.incarnation),
                other => other?,
            }
        }
        for (rank, bytes) in all.iter().enumerate().take(me as usize).filter(|(_, b)| !b.is_empty()) {
            let address = Address::decode(bytes, rank as Rank)?;
            let peer = &mut p.peers[rank];
            (peer.incarnation, peer.known, peer.link) =
                (address.incarnation, true, Link::Awaiting(Instant::now()));
        }
        p.await_lower_ranks(boot)?;
        boot.publish(&p.address)?;
        Ok(p)
    }

    /// Opens a respawned rank (incarnation > 0) without a collective: connects to the higher
    /// ranks that have an address at the rendezvous now (`Bootstrap::lookup`), awaits the
    /// lower ones (they connect when they reconnect to this incarnation), and publishes its
    /// own address. Ranks without an address yet stay `Dead` until `reconnect`.
    pub(super) fn rejoin(config: TransportConfig, boot: &mut dyn Bootstrap, core: SubCore) -> Result<Core> {
        let mut p = Core::create(config, boot, core)?;
        let me = p.job.rank;
        for entry in boot.lookup()? {
            if entry.rank == me || entry.rank >= p.job.size {
                continue;
            }
            p.peers[entry.rank as usize].incarnation = entry.incarnation;
            let Some(bytes) = entry.address else { continue };
            let address = Address::decode(&bytes, entry.rank)?;
            if entry.rank > me {
                match p.dial_watching(boot, entry.rank, &address) {
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
    pub(super) fn create(config: TransportConfig, boot: &mut dyn Bootstrap, core: SubCore) -> Result<Core> {
        config.validate()?;
        let job = boot.job().clone();
        if job.rank >= job.size {
            return Err(TransportError::InvalidRank(job.rank, job.size));
        }
        let ip = connect::listen_ip(&config, boot)?;
        Core::create_at(config, job, ip, core)
    }

    /// [`Core::create`] for `job`, listening on `ip`.
    pub(super) fn create_at(
        config: TransportConfig,
        job: JobInfo,
        ip: std::net::IpAddr,
        core: SubCore,
    ) -> Result<Core> {
        let listener = connect::listen(ip)?;
        let watch = Arc::new(Watch::new()?);
        watch.add(&listener);
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
                second: None,
            })
            .collect();
        Ok(Core {
            config,
            job,
            listener,
            watch,
            key,
            address,
            table: Arc::new(Table::default()),
            peers,
            cq: core.queues(),
            tagged: core.tagged,
            pending: HashMap::new(),
            next_cookie: 1,
            handshakes: Vec::new(),
            stash: Vec::new(),
            malformed: ErrorQueue::default(),
            staging: RegionPool::new(STAGING_POOL_BYTES),
            progress_calls: 0,
            bytes_read: 0,
            max_body,
            book: None,
        })
    }

    /// This rank's address, as published to the rendezvous.
    pub(super) fn address(&self) -> Vec<u8> {
        self.address.clone()
    }

    pub(super) fn hello(&self) -> Hello {
        Hello { rank: self.job.rank, incarnation: self.job.incarnation, key: 0 }
    }

    /// Connects to higher rank `rank` at `address`; `PeerDead` if nobody listens there.
    pub(super) fn dial(&mut self, rank: Rank, address: &Address) -> Result<()> {
        self.dial_within(rank, address, CONNECT_TIMEOUT)
    }

    fn dial_within(&mut self, rank: Rank, address: &Address, timeout: Duration) -> Result<()> {
        let hello = Hello { key: address.key, ..self.hello() };
        let stream = connect::dial(address.socket, rank, &hello, &self.config, timeout)?;
        let peer = &mut self.peers[rank as usize];
        self.watch.add(&stream);
        (peer.incarnation, peer.known, peer.link) = (address.incarnation, true, Link::Up(stream));
        Ok(())
    }

    /// `dial` in slices, asking the rendezvous between them: a peer whose host is gone is not
    /// refused, the connect just hangs, and the rendezvous knows it lost within a heartbeat.
    /// `PeerDead` once it shows the peer lost (or at a newer incarnation), or at the bound.
    fn dial_watching(&mut self, boot: &mut dyn Bootstrap, rank: Rank, address: &Address) -> Result<()> {
        let start = Instant::now();
        let deadline = start + CONNECT_TIMEOUT;
        let mut next_note = start + SLOW_NOTE_EVERY;
        loop {
            let slice = Instant::now();
            match self.dial_within(rank, address, DIAL_SLICE) {
                Err(TransportError::PeerDead(_)) => {}
                other => return other,
            }
            if Instant::now() >= next_note {
                next_note = Instant::now() + SLOW_NOTE_EVERY;
                // Refused comes back at once, an unanswered connect after the slice.
                let how = if slice.elapsed() >= DIAL_SLICE { "unanswered" } else { "refused" };
                tracing::info!(
                    "tcp: rank {}: still dialling rank {rank} at {} ({how}, {} s)",
                    self.job.rank,
                    address.socket,
                    start.elapsed().as_secs()
                );
            }
            if Instant::now() >= deadline {
                return Err(TransportError::PeerDead(rank));
            }
            let entry = match boot.lookup() {
                Ok(table) => table.into_iter().find(|e| e.rank == rank),
                // No table to ask: a dial refused or unanswered is the peer's death, as it was.
                Err(TransportError::Unsupported(_)) => return Err(TransportError::PeerDead(rank)),
                Err(e) => return Err(e),
            };
            if entry.is_some_and(|e| e.lost || e.incarnation > address.incarnation) {
                return Err(TransportError::PeerDead(rank));
            }
            // Refused rather than timed out: not listening yet, or gone; do not spin.
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// See [`super::TcpProvider::inject_raw_bytes`].
    #[cfg(feature = "fault-injection")]
    pub(super) fn inject_raw_bytes(&mut self, dest: Rank, bytes: &[u8]) -> Result<()> {
        self.live(dest)?;
        self.peers[dest as usize].tx.push(|out| out.extend_from_slice(bytes));
        self.kick(dest);
        Ok(())
    }

    /// A peer found dead during the open: `Dead` at the incarnation it had.
    fn lost_in_open(&mut self, rank: Rank, incarnation: u32) {
        tracing::info!(
            "tcp: rank {}: rank {rank} died while the transport opened; going on without it",
            self.job.rank
        );
        let peer = &mut self.peers[rank as usize];
        (peer.incarnation, peer.known, peer.link) = (incarnation, true, Link::Dead);
    }

    /// The open's wait for every lower rank's connection. A lower rank the rendezvous shows
    /// lost meanwhile is left `Dead` rather than awaited to the bound.
    pub(super) fn await_lower_ranks(&mut self, boot: &mut dyn Bootstrap) -> Result<()> {
        let start = Instant::now();
        let deadline = start + CONNECT_TIMEOUT;
        let mut next_lookup = start + LOST_LOOKUP_EVERY;
        let mut next_note = start + SLOW_NOTE_EVERY;
        loop {
            self.poll_accepts();
            // Checked after the accepts: the last one may land just at the deadline.
            let missing: Vec<usize> =
                (0..self.peers.len()).filter(|&r| matches!(self.peers[r].link, Link::Awaiting(_))).collect();
            if missing.is_empty() {
                return Ok(());
            }
            if Instant::now() >= next_note {
                next_note = Instant::now() + SLOW_NOTE_EVERY;
                let waited = start.elapsed().as_secs();
                let at = self.listener.local_addr().map_or_else(|e| e.to_string(), |a| a.to_string());
                tracing::info!(
                    "tcp: rank {}: the open still awaits ranks {missing:?}, listening at {at} ({waited} s)",
                    self.job.rank
                );
            }
            if Instant::now() >= next_lookup {
                next_lookup = Instant::now() + LOST_LOOKUP_EVERY;
                let table = match boot.lookup() {
                    Ok(table) => table,
                    // A rendezvous that keeps no table: wait to the bound.
                    Err(TransportError::Unsupported(_)) => {
                        next_lookup = deadline;
                        Vec::new()
                    }
                    Err(e) => return Err(e),
                };
                for entry in table.into_iter().filter(|e| missing.contains(&(e.rank as usize))) {
                    let incarnation = self.peers[entry.rank as usize].incarnation;
                    if entry.lost || entry.incarnation > incarnation {
                        self.lost_in_open(entry.rank, incarnation);
                    }
                }
                continue;
            }
            if Instant::now() > deadline {
                return Err(TransportError::Bootstrap(format!(
                    "tcp: ranks {missing:?} did not connect within {CONNECT_TIMEOUT:?}"
                )));
            }
            self.sleep_in_poll(Duration::from_millis(10));
        }
    }

    /// Accepts waiting connections and routes those whose hello is in: to the peer awaiting
    /// that incarnation, or to the stash when it is newer than the one this rank knows.
    pub(super) fn poll_accepts(&mut self) {
        let want = if self.book.is_some() { wire::HELLO_LEN + wire::INTRO_LEN } else { wire::HELLO_LEN };
        if let Err(e) = Handshake::accept_all(&self.listener, want, &mut self.handshakes) {
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

    pub(super) fn route_hello(&mut self, hello: Hello, h: Handshake) -> Result<()> {
        if self.book.is_some() {
            return self.route_intro(hello, h);
        }
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
            Link::Awaiting(_) if hello.incarnation == peer.incarnation => {
                self.watch.add(&stream);
                peer.link = Link::Up(stream);
            }
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

    pub(super) fn live(&self, rank: Rank) -> Result<()> {
        let Some(peer) = self.peers.get(rank as usize) else {
            return Err(TransportError::InvalidRank(rank, self.job.size));
        };
        if !peer.alive() {
            return Err(TransportError::PeerDead(rank));
        }
        Ok(())
    }

    /// Fails everything outstanding with `rank` and forgets its connection.
    pub(super) fn mark_dead(&mut self, rank: Rank) {
        let Some(peer) = self.peers.get_mut(rank as usize) else { return };
        if !peer.alive() {
            return;
        }
        peer.link = Link::Dead;
        peer.second = None;
        peer.tx = Tx::default();
        peer.rx = Rx::new(self.max_body);
        let dead = TransportError::PeerDead(rank);
        self.tagged.get().fail_peer(rank, &dead, &mut self.cq);
        self.fail_pending(rank, &dead);
    }

    /// Forgets the frames queued for `rank` and fails the operations waiting on its answers
    /// (`PeerDead`), whether or not it was marked dead already.
    fn drop_queued(&mut self, rank: Rank) {
        let Some(peer) = self.peers.get_mut(rank as usize) else { return };
        peer.tx = Tx::default();
        peer.rx = Rx::new(self.max_body);
        self.fail_pending(rank, &TransportError::PeerDead(rank));
    }

    /// Fails the awaited connections that did not come within their bound.
    pub(super) fn expire_awaits(&mut self) {
        let late: Vec<Rank> = (0..self.job.size)
            .filter(
                |&r| matches!(self.peers[r as usize].link, Link::Awaiting(t) if t.elapsed() > AWAIT_CONNECT),
            )
            .collect();
        for rank in late {
            self.mark_dead(rank);
        }
    }

    pub(super) fn start_rndv(
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
        self.tagged.get().add_pending(op, dest, tag, len, Some(region));
        self.kick(dest);
        Ok(op)
    }

    pub(super) fn send_eager(
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

/// The provider's operations, called under the lock (see [`super::TcpProvider`]).
impl Core {
    pub(super) fn alloc_region(&mut self, len: usize, access: Access) -> Result<Region> {
        if len == 0 {
            return Err(TransportError::Config("cannot register an empty region".into()));
        }
        Ok(self.table.register(self.job.rank, self.job.incarnation, len, access))
    }

    /// Registers memory its caller owns (`region`, which no provider registered).
    pub(super) fn register_borrowed(&mut self, region: &Region) -> Result<Region> {
        if region.is_empty() {
            return Err(TransportError::Config("cannot register an empty region".into()));
        }
        Ok(self.table.register_borrowed(self.job.rank, self.job.incarnation, region))
    }

    pub(super) fn put_for(&mut self, owner: Owner, rma: Rma<'_>, signal: Signal) -> Result<OpId> {
        self.post_put(owner, "put", &rma, None, signal)
    }

    pub(super) fn put_imm_for(
        &mut self,
        owner: Owner,
        rma: Rma<'_>,
        imm: u32,
        signal: Signal,
    ) -> Result<OpId> {
        self.post_put(owner, "put_imm", &rma, Some(imm), signal)
    }

    pub(super) fn get_for(&mut self, owner: Owner, rma: Rma<'_>, signal: Signal) -> Result<OpId> {
        self.post_get(owner, &rma, signal)
    }

    pub(super) fn send_for(&mut self, owner: Owner, dest: Rank, tag: Tag, data: &[u8]) -> Result<OpId> {
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

    pub(super) fn send_region_for(
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

    pub(super) fn post_recv_for(
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
        // Never advertised: tcp has no direct writes into a peer's buffer (usize::MAX).
        let recv = PostedRecv { op, source, tag, buffer };
        let matched = self.tagged.get().post(recv, dead, &mut self.cq, usize::MAX)?;
        if let Some(fetch) = matched {
            self.rndv_fetch(fetch);
        }
        Ok(op)
    }

    pub(super) fn peer_state(&self, peer: Rank) -> PeerState {
        match self.peers.get(peer as usize) {
            Some(p) if p.alive() => PeerState::Alive,
            _ => PeerState::Dead,
        }
    }

    pub(super) fn peer_incarnation(&self, peer: Rank) -> Option<u32> {
        self.peers.get(peer as usize).filter(|p| p.known).map(|p| p.incarnation)
    }

    pub(super) fn reconnect(&mut self, peer: Rank, incarnation: u32, address: &[u8]) -> Result<()> {
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
        // The old incarnation is gone even if its close was not seen yet; frames still queued
        // for it, and the operations waiting on them, must not reach the new one.
        self.mark_dead(peer);
        self.drop_queued(peer);
        self.tagged.get().purge_unexpected_from(peer);
        if self.job.rank < peer {
            return self.dial(peer, &address);
        }
        self.poll_accepts();
        let p = &mut self.peers[peer as usize];
        (p.incarnation, p.known, p.link) = (incarnation, true, Link::Awaiting(Instant::now()));
        if let Some(i) = self.stash.iter().position(|(h, _)| h.rank == peer && h.incarnation == incarnation) {
            let (_, stream) = self.stash.swap_remove(i);
            self.watch.add(&stream);
            self.peers[peer as usize].link = Link::Up(stream);
        }
        self.stash.retain(|(h, _)| h.rank != peer || h.incarnation > incarnation);
        Ok(())
    }

    pub(super) fn progress(&mut self) -> Result<()> {
        self.progress_calls = self.progress_calls.wrapping_add(1);
        let awaiting = self.peers.iter().any(|p| matches!(p.link, Link::Awaiting(_)));
        // By address, peers arrive at any time: a first message must not wait 64 calls.
        let every = if self.book.is_some() { 8 } else { 64 };
        if awaiting || !self.handshakes.is_empty() || self.progress_calls.is_multiple_of(every) {
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

    pub(super) fn block(&mut self, timeout: Duration) -> Result<()> {
        if self.cq.any_queued() {
            return Ok(());
        }
        if self.config.wait_mode == crate::config::WaitMode::Poll {
            // A zero timeout asks for no sleep: nothing to yield for.
            if !timeout.is_zero() {
                std::thread::yield_now();
            }
            return Ok(());
        }
        self.sleep_in_poll(timeout);
        if self.book.is_some() {
            self.poll_accepts();
        }
        // A peer's close is only seen by reading: take in what woke us (its last messages
        // first), so that `peer_state` is current after a block as on the other providers.
        for rank in 0..self.job.size {
            self.pump(rank);
        }
        Ok(())
    }
}

impl Drop for Core {
    fn drop(&mut self) {
        self.close_all();
    }
}
