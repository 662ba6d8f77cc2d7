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

//! - **Progress.** One-sided operations are served by the target's `progress`; so that a
//!   target busy elsewhere (computing, or in a bootstrap collective, as the runtime is during
//!   a recovery) still serves them, a helper thread progresses the provider whenever the
//!   application has not for [`SERVE_AFTER`]. Both work on one state behind a lock; what the
//!   helper completes waits in a staging queue until the application's next call.

mod book;
#[cfg(test)]
mod book_tests;
mod conn;
mod connect;
mod core;
mod iface;
mod io;
mod serve;
mod table;
mod watch;
mod wire;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use self::core::Core;
use crate::api::*;
use crate::bootstrap::Bootstrap;
use crate::completion::{CompletionQueues, Owner};
use crate::config::TransportConfig;
use crate::error::{Result, TransportError};
use crate::region::Region;
use crate::subcore::SubCore;

pub use self::core::TX_QUEUE_BYTES;

/// How long the application may leave the provider alone before the helper thread serves
/// peers' one-sided operations in its place.
pub const SERVE_AFTER: Duration = Duration::from_millis(2);
/// How often the helper thread looks.
const HELPER_TICK: Duration = Duration::from_millis(1);

/// What the application's handle and the helper thread share.
struct Shared {
    core: Mutex<Core>,
    /// The sockets' readiness, which the helper thread waits on between ticks.
    watch: Arc<watch::Watch>,
    /// Microseconds since `epoch` at the application's last call.
    last_call: AtomicU64,
    epoch: Instant,
    stop: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Core> {
        // A panic under the lock (a bug) leaves no half-done wire state that matters more
        // than the panic itself; the provider stays usable for reporting it.
        self.core.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }
}

/// The helper thread: progresses the provider while the application does not.
fn serve(shared: Arc<Shared>) {
    while !shared.stop.load(Ordering::Acquire) {
        shared.watch.wait(HELPER_TICK);
        let idle = shared.now_us().saturating_sub(shared.last_call.load(Ordering::Relaxed));
        if idle < SERVE_AFTER.as_micros() as u64 {
            continue;
        }
        let mut core = match shared.core.try_lock() {
            Ok(core) => core,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => continue,
        };
        core.serve_peers();
    }
}

/// The tcp [`Provider`] of one rank (see the module doc); open it with
/// [`TcpProvider::open`], or [`TcpProvider::rejoin`] after a respawn.
pub struct TcpProvider {
    config: TransportConfig,
    rank: Rank,
    size: u32,
    /// The application's completion queues. The core works on them during a call (they are
    /// swapped in); between calls it holds the staging queues the helper thread fills.
    cq: CompletionQueues,
    /// Owners opened besides [`Owner::APP`], in both queue sets.
    owners: Vec<Owner>,
    shared: Arc<Shared>,
    helper: Option<JoinHandle<()>>,
    /// Opened by address ([`TcpProvider::open_by_address`]): the size grows as peers connect.
    by_address: bool,
    /// Calls of `progress_when_ready`, for its periodic full progress.
    lazy_calls: u32,
    /// The `lazy_calls` count when a progress last read bytes.
    last_traffic: u32,
}

impl TcpProvider {
    /// Listens, exchanges addresses through `boot` (a collective) and connects every pair.
    /// Publishes the address too, for ranks that rejoin later.
    pub fn open(config: TransportConfig, boot: &mut dyn Bootstrap) -> Result<TcpProvider> {
        Self::open_sub(config, boot, SubCore::default())
    }

    /// [`TcpProvider::open`] sharing `core` with other sub-providers; ranks whose address
    /// `boot` gives as empty stay `Dead` here.
    pub(crate) fn open_sub(
        config: TransportConfig,
        boot: &mut dyn Bootstrap,
        core: SubCore,
    ) -> Result<TcpProvider> {
        let first_op = core.first_op;
        Self::start(config.clone(), Core::open(config, boot, core)?, first_op)
    }

    /// Opens a respawned rank (incarnation > 0) without a collective: connects to the higher
    /// ranks that have an address at the rendezvous now (`Bootstrap::lookup`), awaits the
    /// lower ones (they connect when they reconnect to this incarnation), and publishes its
    /// own address. Ranks without an address yet stay `Dead` until `reconnect`.
    pub fn rejoin(config: TransportConfig, boot: &mut dyn Bootstrap) -> Result<TcpProvider> {
        Self::rejoin_sub(config, boot, SubCore::default())
    }

    /// [`TcpProvider::rejoin`] sharing `core` with other sub-providers.
    pub(crate) fn rejoin_sub(
        config: TransportConfig,
        boot: &mut dyn Bootstrap,
        core: SubCore,
    ) -> Result<TcpProvider> {
        let first_op = core.first_op;
        Self::start(config.clone(), Core::rejoin(config, boot, core)?, first_op)
    }

    fn start(config: TransportConfig, core: Core, first_op: u64) -> Result<TcpProvider> {
        let (rank, size) = (core.job.rank, core.job.size);
        let watch = Arc::clone(&core.watch);
        let shared = Arc::new(Shared {
            core: Mutex::new(core),
            watch,
            last_call: AtomicU64::new(0),
            epoch: Instant::now(),
            stop: AtomicBool::new(false),
        });
        let helper = {
            let shared = Arc::clone(&shared);
            std::thread::Builder::new()
                .name(format!("reverb-tcp-{rank}"))
                .spawn(move || serve(shared))
                .map_err(|e| TransportError::io("tcp: start the helper thread", e))?
        };
        Ok(TcpProvider {
            config,
            rank,
            size,
            cq: CompletionQueues::numbered_from(first_op),
            owners: Vec::new(),
            shared,
            helper: Some(helper),
            by_address: false,
            lazy_calls: 0,
            last_traffic: 0,
        })
    }

    /// Opens an endpoint that peers reach by its [`Provider::peer_address`] and that
    /// reaches them by theirs ([`Provider::connect_peer`]), with no job or bootstrap: ranks
    /// are local numbers, this endpoint is rank 0 and each new peer takes the next one. It
    /// listens on `REVERB_TCP_ADDR`, else `REVERB_TCP_IFACE`'s address, else the address the
    /// host routes out of, else loopback.
    pub fn open_by_address(config: TransportConfig) -> Result<TcpProvider> {
        let core = SubCore::default();
        let first_op = core.first_op;
        let mut p = Self::start(config.clone(), Core::by_address(config, core)?, first_op)?;
        p.by_address = true;
        Ok(p)
    }

    /// This rank's address, as published to the rendezvous.
    pub fn address(&self) -> Vec<u8> {
        self.shared.lock().address()
    }

    /// Registers `region` (another provider's, e.g. shm's under `auto`) for peers' one-sided
    /// operations too, under its own key; dropping the returned value deregisters it.
    pub(crate) fn register_region(
        &mut self,
        region: &Region,
    ) -> Result<Box<dyn std::any::Any + Send + Sync>> {
        self.with(|c| c.table.register_region(region))
    }

    /// Fetches a rendezvous that another sub-provider's matcher paired with a receive (the
    /// `auto` provider posts receives itself).
    pub(crate) fn rndv_fetch(&mut self, fetch: crate::tagged::Fetch) {
        self.with(|c| c.rndv_fetch(fetch))
    }

    /// `progress` when it may find something: the sockets showed an edge since the last look
    /// (the helper thread watches them), or every [`watch::FULL_EVERY`]-th call. What `auto`
    /// calls on each of its progresses, so that shm traffic beside it pays no system calls.
    /// While traffic flows (a progress read bytes within the last [`watch::HOT_CALLS`]
    /// calls) it progresses every time: a ping-pong must not wait for the helper thread's wakeup.
    pub(crate) fn progress_when_ready(&mut self) -> Result<()> {
        self.lazy_calls = self.lazy_calls.wrapping_add(1);
        let hot = self.lazy_calls.wrapping_sub(self.last_traffic) < watch::HOT_CALLS;
        self.shared.watch.arm(!hot);
        if !(hot || self.shared.watch.take() || self.lazy_calls.is_multiple_of(watch::FULL_EVERY)) {
            return Ok(());
        }
        let (result, read) = self.with(|c| {
            let before = c.bytes_read;
            (c.progress(), c.bytes_read != before)
        });
        if read {
            self.last_traffic = self.lazy_calls;
        }
        result
    }

    /// Fault injection: writes `bytes` into the connection to `dest` as they are (frames, or
    /// anything else), as a faulty or hostile peer could. For tests of the receiver's checks.
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn inject_raw_bytes(&mut self, dest: Rank, bytes: &[u8]) -> Result<()> {
        self.with(|c| c.inject_raw_bytes(dest, bytes))
    }

    /// Runs `f` on the core with the application's queues swapped in, after moving into them
    /// what the helper thread completed since the last call.
    fn with<T>(&mut self, f: impl FnOnce(&mut Core) -> T) -> T {
        let shared = Arc::clone(&self.shared);
        let mut core = shared.lock();
        std::mem::swap(&mut core.cq, &mut self.cq);
        for owner in std::iter::once(Owner::APP).chain(self.owners.iter().copied()) {
            let staged = self.cq.of(owner);
            if !staged.is_empty() {
                let mut moved = std::mem::take(staged);
                core.cq.of(owner).append(&mut moved);
            }
        }
        let out = f(&mut core);
        std::mem::swap(&mut core.cq, &mut self.cq);
        shared.last_call.store(shared.now_us(), Ordering::Relaxed);
        out
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
            | Capabilities::PEEK
    }

    fn rank(&self) -> Rank {
        self.rank
    }

    fn size(&self) -> u32 {
        match self.by_address {
            true => self.shared.lock().job.size,
            false => self.size,
        }
    }

    fn config(&self) -> &TransportConfig {
        &self.config
    }

    fn alloc_region(&mut self, len: usize, access: Access) -> Result<Region> {
        self.with(|c| c.alloc_region(len, access))
    }

    unsafe fn register_memory(&mut self, ptr: *mut u8, len: usize, access: Access) -> Result<Region> {
        // SAFETY: the caller's promise passes on.
        let borrowed = unsafe { Region::borrowed(ptr, len, access, self.rank) };
        self.with(|c| c.register_borrowed(&borrowed))
    }

    fn put_for(&mut self, owner: Owner, rma: Rma<'_>, signal: Signal) -> Result<OpId> {
        self.with(|c| c.put_for(owner, rma, signal))
    }

    fn put_imm_for(&mut self, owner: Owner, rma: Rma<'_>, imm: u32, signal: Signal) -> Result<OpId> {
        self.with(|c| c.put_imm_for(owner, rma, imm, signal))
    }

    fn get_for(&mut self, owner: Owner, rma: Rma<'_>, signal: Signal) -> Result<OpId> {
        self.with(|c| c.get_for(owner, rma, signal))
    }

    fn send_for(&mut self, owner: Owner, dest: Rank, tag: Tag, data: &[u8]) -> Result<OpId> {
        self.with(|c| c.send_for(owner, dest, tag, data))
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
        self.with(|c| c.send_region_for(owner, dest, tag, region, offset, len))
    }

    fn peek_arrived(&mut self, source: Source, tag: TagMatch) -> Result<Option<(Rank, Tag, usize)>> {
        self.with(|c| Ok(c.tagged.with(|t| t.peek(source, tag))))
    }

    fn take_eager_into(
        &mut self,
        source: Source,
        tag: TagMatch,
        buf: &mut [u8],
        accept: &dyn Fn(Tag, usize) -> bool,
    ) -> Result<EagerTake> {
        self.with(|c| Ok(c.tagged.get().take_eager_into(source, tag, buf, accept)))
    }

    fn post_recv_for(
        &mut self,
        owner: Owner,
        source: Source,
        tag: TagMatch,
        buffer: RecvBuffer,
    ) -> Result<OpId> {
        self.with(|c| c.post_recv_for(owner, source, tag, buffer))
    }

    fn cancel_recv(&mut self, op: OpId) -> Result<bool> {
        // Under the core's lock: the helper thread may be matching arrivals meanwhile.
        self.with(|c| Ok(c.tagged.get().cancel_recv(op)))
    }

    fn peer_state(&self, peer: Rank) -> PeerState {
        self.shared.lock().peer_state(peer)
    }

    fn peer_incarnation(&self, peer: Rank) -> Option<u32> {
        self.shared.lock().peer_incarnation(peer)
    }

    fn reconnect(&mut self, peer: Rank, incarnation: u32, address: &[u8]) -> Result<()> {
        self.with(|c| c.reconnect(peer, incarnation, address))
    }

    fn peer_address(&self) -> Result<Vec<u8>> {
        self.shared.lock().peer_address()
    }

    fn connect_peer(&mut self, address: &[u8]) -> Result<Rank> {
        self.with(|c| c.connect_peer(address))
    }

    fn progress(&mut self) -> Result<()> {
        self.with(Core::progress)
    }

    fn block(&mut self, timeout: Duration) -> Result<()> {
        if self.cq.any_queued() {
            return Ok(());
        }
        self.with(|c| c.block(timeout))
    }

    fn queues(&mut self) -> &mut CompletionQueues {
        &mut self.cq
    }

    fn open_owner(&mut self) -> Result<Owner> {
        // Opened in both queue sets, in step, so an owner has the same number in each.
        let staged = self.shared.lock().cq.open()?;
        let owner = self.cq.open()?;
        if owner != staged {
            return Err(TransportError::Config(format!(
                "tcp: owner {owner:?} opened as {staged:?} in staging"
            )));
        }
        self.owners.push(owner);
        Ok(owner)
    }

    fn close_owner(&mut self, owner: Owner) {
        self.shared.lock().cq.close(owner);
        self.cq.close(owner);
        self.owners.retain(|&o| o != owner);
    }

    fn route_remote(&mut self, owner: Owner) {
        self.shared.lock().cq.route_remote(owner);
        self.cq.route_remote(owner);
    }

    fn completions_of(&mut self, owner: Owner) -> &mut VecDeque<Completion> {
        self.cq.of(owner)
    }
}

impl Drop for TcpProvider {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(helper) = self.helper.take() {
            // Bounded: the helper looks at the flag every tick.
            let _ = helper.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loopback::InProcBootstrap;

    fn one_rank(job: &str) -> TcpProvider {
        let mut boots = InProcBootstrap::job(job, 1);
        TcpProvider::open(TransportConfig::default(), &mut boots[0]).expect("open")
    }

    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + 3) as u8).collect()
    }

    /// A rank's messages and one-sided operations to itself never touch a socket, and go
    /// through the same frames, checks and rendezvous as a peer's.
    #[test]
    fn a_rank_talks_to_itself_eager_rendezvous_and_rma() {
        let mut p = one_rank("tcp-self");
        let wait = Duration::from_secs(10);
        for len in [0, 8, 8192, 8193, 1 << 20] {
            let data = pattern(len);
            let recv = p
                .post_recv(Source::Rank(0), TagMatch::exact(len as u64), RecvBuffer::Owned { capacity: len })
                .unwrap();
            let send = p.send(0, len as u64, &data).unwrap();
            let got = p.wait_op(recv, wait).unwrap().into_result().unwrap();
            assert!(
                matches!(got.kind, CompletionKind::Recv { data: Some(ref d), .. } if *d == data),
                "{len} bytes"
            );
            p.wait_op(send, wait).unwrap().into_result().unwrap();
        }
        let region = p.alloc_region(1 << 20, Access::REMOTE_RW).unwrap();
        let remote = region.remote();
        region.write(0, &pattern(4096)).unwrap();
        let rma = Rma { local: &region, local_offset: 0, remote: &remote, remote_offset: 600_000, len: 4096 };
        let put = p.put(rma, Signal::Yes).unwrap();
        p.wait_op(put, wait).unwrap().into_result().unwrap();
        assert_eq!(region.to_vec(600_000, 4096).unwrap(), pattern(4096));
        let wrong = RemoteRegion { key: remote.key ^ 1, ..remote };
        let bad = p.get(Rma { remote: &wrong, ..rma }, Signal::Yes).unwrap();
        let err = p.wait_op(bad, wait).unwrap().into_result().unwrap_err();
        assert!(matches!(err, TransportError::InvalidKey { .. }), "{err}");
        let past = p.put(Rma { remote_offset: (1 << 20) - 8, ..rma }, Signal::Yes);
        assert!(
            matches!(past, Err(TransportError::OutOfBounds { .. })),
            "the descriptor's bound, at the post"
        );
    }

    /// Joins a job of `size` over raw frames as `rank`, contributes a tcp address nobody
    /// listens at to the open's allgather, and dies (no Bye): a rank lost between the
    /// allgather and its connections.
    fn rank_lost_in_open(root: std::net::SocketAddr, rank: u32, size: u32) -> std::thread::JoinHandle<()> {
        use crate::bootstrap::wire::{self as boot_wire, Frame, Read1, Wait};
        std::thread::spawn(move || {
            let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
            let address = wire::Address { incarnation: 0, key: 7, socket: closed }.encode();
            let mut s = std::net::TcpStream::connect(root).unwrap();
            let hello = Frame::Hello { token: b"tok".to_vec(), rank, size, incarnation: 0 };
            let contribute = Frame::Contribute { round: 0, data: address };
            for f in [hello, contribute] {
                std::io::Write::write_all(&mut s, &boot_wire::encode(&f).unwrap()).unwrap();
            }
            let cancel = || false;
            let wait = Wait { idle_deadline: None, frame_timeout: Duration::from_secs(10), cancel: &cancel };
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            // Welcome, then the round's result: the others have the address now.
            for _ in 0..2 {
                assert!(matches!(
                    boot_wire::read_frame(&mut s, boot_wire::MAX_FRAME, &wait),
                    Ok(Read1::Frame(_))
                ));
            }
        })
    }

    /// A rank that dies between the open's allgather and its connections neither fails nor
    /// stalls the others' open: higher ranks find its port closed, lower ones see it lost at
    /// the rendezvous; it is left `Dead` for the runtime's recovery.
    #[test]
    fn the_open_goes_on_without_ranks_lost_during_it() {
        use crate::bootstrap::{BootServer, TcpBootstrap};
        let server = BootServer::start("127.0.0.1:0", 4, "tok").unwrap();
        let root = server.local_addr();
        let fakes = [rank_lost_in_open(root, 0, 4), rank_lost_in_open(root, 3, 4)];
        let real: Vec<_> = [1u32, 2]
            .into_iter()
            .map(|rank| {
                std::thread::spawn(move || {
                    let job = crate::JobInfo {
                        rank,
                        size: 4,
                        node: rank,
                        local_rank: 0,
                        ranks_per_node: 1,
                        job_id: "tcp-lost-in-open".into(),
                        incarnation: 0,
                    };
                    let mut boot =
                        TcpBootstrap::connect(job, &root.to_string(), "tok", Duration::from_secs(10))
                            .unwrap();
                    let start = Instant::now();
                    let p = TcpProvider::open(TransportConfig::default(), &mut boot).expect("open");
                    (start.elapsed(), [0, 1, 2, 3].map(|r| p.peer_state(r)))
                })
            })
            .collect();
        for f in fakes {
            f.join().unwrap();
        }
        for (i, h) in real.into_iter().enumerate() {
            let (took, states) = h.join().unwrap();
            assert!(took < Duration::from_secs(20), "rank {}: the open took {took:?}", i + 1);
            assert_eq!(states[0], PeerState::Dead, "rank {}: {states:?}", i + 1);
            assert_eq!(states[3], PeerState::Dead, "rank {}: {states:?}", i + 1);
            assert_eq!(states[2 - i], PeerState::Alive, "rank {}: {states:?}", i + 1);
        }
    }

    /// What the helper thread completes while the application is away waits in staging and
    /// reaches the owner's queue at the next call.
    #[test]
    fn the_helper_serves_while_the_application_is_away() {
        let mut p = one_rank("tcp-helper");
        let owner = p.open_owner().unwrap();
        let recv = p
            .post_recv_for(owner, Source::Rank(0), TagMatch::exact(1), RecvBuffer::Owned { capacity: 8 })
            .unwrap();
        p.send(0, 1, b"later").unwrap();
        let start = Instant::now();
        while !p.shared.lock().cq.of(owner).iter().any(|c| c.op == recv) {
            assert!(start.elapsed() < Duration::from_secs(10), "the helper thread never delivered it");
            std::thread::sleep(SERVE_AFTER);
        }
        assert!(p.completions_of(owner).is_empty(), "staged until the next call");
        p.progress().unwrap();
        assert!(p.completions_of(owner).iter().any(|c| c.op == recv));
    }
}
