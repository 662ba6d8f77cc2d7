//! Token-guarded TCP rendezvous: a [`BootServer`] and the [`TcpBootstrap`] client.
//!
//! Threads of the server: one accept loop, one reader per connection, one coordinator that
//! owns all job state (rank slots and the current allgather round) and does every write to
//! admitted connections. Readers only parse frames and send events to the coordinator, so the
//! state has a single owner and admission (duplicate checks) is race-free.
//!
//! A rank slot keeps its incarnation, status and published provider address. A failed slot
//! (lost connection, or [`BootServer::mark_failed`] from the launcher) is re-admitted at a
//! higher incarnation; once the respawned rank publishes its address, every other live rank
//! gets an unsolicited `Rejoined` frame, which [`TcpBootstrap`] queues for `poll_rejoins`.
//! A loss aborts the current allgather round without advancing it; once no slot is failed,
//! collectives resume at that round (the Welcome tells a respawned rank which).

use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam::channel::{self, Receiver, Sender};

use super::env::BootParams;
use super::wire::{self, Frame, Read1, Wait};
use super::{Bootstrap, JobInfo, PeerAddress, Rejoin};
use crate::error::{IoContext, Result, TransportError};

/// Granularity at which blocked threads notice deadlines and shutdown.
const TICK: Duration = Duration::from_millis(50);

/// Limits of a [`BootServer`]; the defaults (10 s hello, 30 s I/O, 256 pending) suit jobs.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// A new connection must present its Hello within this.
    pub hello_timeout: Duration,
    /// Bound on every write, and on receiving a frame once it has started.
    pub io_timeout: Duration,
    /// Connections still in their handshake beyond this are dropped at once.
    pub max_pending: usize,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            hello_timeout: Duration::from_secs(10),
            io_timeout: Duration::from_secs(30),
            max_pending: 256,
        }
    }
}

struct Shared {
    stop: AtomicBool,
    token: Vec<u8>,
    size: u32,
    opts: ServerOptions,
    pending: AtomicUsize,
    next_conn: AtomicU64,
    /// (ranks connected now, ranks that ever connected); for a graceful shutdown.
    presence: Mutex<(u32, u32)>,
    presence_cv: Condvar,
}

impl Shared {
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

fn log_line(msg: std::fmt::Arguments<'_>) {
    tracing::info!("reverb boot server: {msg}");
}

/// The rendezvous server; runs in background threads and stops on drop.
pub struct BootServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    events: Sender<Event>,
    threads: Vec<JoinHandle<()>>,
}

enum Event {
    Join {
        conn: u64,
        rank: u32,
        incarnation: u32,
        peer: SocketAddr,
        writer: TcpStream,
        verdict: Sender<std::result::Result<(), String>>,
    },
    Contribute {
        conn: u64,
        rank: u32,
        round: u64,
        data: Vec<u8>,
    },
    Left {
        conn: u64,
        rank: u32,
        clean: bool,
        reason: String,
    },
    Publish {
        conn: u64,
        rank: u32,
        address: Vec<u8>,
    },
    Lookup {
        conn: u64,
        rank: u32,
    },
    /// From the launcher: `rank` at `incarnation` is gone (its node failed).
    MarkFailed {
        rank: u32,
        incarnation: u32,
        reason: String,
        verdict: Sender<std::result::Result<(), String>>,
    },
}

impl BootServer {
    /// Binds `bind` (e.g. `127.0.0.1:0`) and serves a job of `size` ranks guarded by `token`.
    pub fn start(bind: &str, size: u32, token: &str) -> Result<BootServer> {
        BootServer::start_with(bind, size, token, ServerOptions::default())
    }

    /// [`BootServer::start`] with explicit limits. [`TransportError::Config`] for a job size of 0
    /// or a token that is empty or longer than `wire::MAX_TOKEN`; [`TransportError::Io`] if the
    /// address cannot be bound or the server threads cannot start.
    pub fn start_with(bind: &str, size: u32, token: &str, opts: ServerOptions) -> Result<BootServer> {
        if size == 0 {
            return Err(TransportError::Config("boot server: job size 0".into()));
        }
        if token.is_empty() || token.len() > wire::MAX_TOKEN {
            return Err(TransportError::Config(format!(
                "boot server: the job token must be 1..={} bytes",
                wire::MAX_TOKEN
            )));
        }
        let listener = TcpListener::bind(bind).context(|| format!("boot server: bind {bind}"))?;
        let addr = listener.local_addr().context(|| "boot server: local_addr".into())?;
        listener.set_nonblocking(true).context(|| "boot server: set_nonblocking".into())?;
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            token: token.as_bytes().to_vec(),
            size,
            opts,
            pending: AtomicUsize::new(0),
            next_conn: AtomicU64::new(1),
            presence: Mutex::new((0, 0)),
            presence_cv: Condvar::new(),
        });
        let (tx, rx) = channel::unbounded();
        let coord = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("reverb-boot-coord".into())
                .spawn(move || Coordinator::new(shared).run(rx))
                .context(|| "boot server: spawn".into())?
        };
        let events = tx.clone();
        let accept = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("reverb-boot-accept".into())
                .spawn(move || accept_loop(listener, shared, tx))
                .context(|| "boot server: spawn".into())?
        };
        Ok(BootServer { addr, shared, events, threads: vec![accept, coord] })
    }

    /// The address the server listens on (the real port when bound to port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Records that `rank` at `incarnation` failed (the launcher killed or lost it): its
    /// connection, if still open, is dropped, its address is forgotten, and a rank presenting
    /// a higher incarnation is admitted in its place. A report about an older incarnation than
    /// the slot's is ignored. Returns once the server has applied it (bounded).
    pub fn mark_failed(&self, rank: u32, incarnation: u32, reason: &str) -> Result<()> {
        if rank >= self.shared.size {
            return Err(TransportError::InvalidRank(rank, self.shared.size));
        }
        let (vtx, vrx) = channel::bounded(1);
        let ev = Event::MarkFailed { rank, incarnation, reason: reason.to_string(), verdict: vtx };
        self.events.send(ev).map_err(|_| TransportError::Bootstrap("boot server stopped".into()))?;
        match vrx.recv_timeout(self.shared.opts.io_timeout) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(reason)) => Err(TransportError::Bootstrap(reason)),
            Err(_) => Err(TransportError::Bootstrap("boot server did not answer mark_failed".into())),
        }
    }

    /// Waits (at most `linger`) until every rank has connected and left, then stops. Rank 0
    /// uses this so that it does not cut off peers still reading the last result.
    pub fn shutdown_graceful(self, linger: Duration) {
        let deadline = Instant::now() + linger;
        let size = self.shared.size;
        let mut g = match self.shared.presence.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        while !(g.0 == 0 && g.1 >= size) {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            g = match self.shared.presence_cv.wait_timeout(g, deadline - now) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        drop(g);
        // Drop stops the threads.
    }
}

impl Drop for BootServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>, tx: Sender<Event>) {
    let mut readers: Vec<JoinHandle<()>> = Vec::new();
    while !shared.stopping() {
        match listener.accept() {
            Ok((stream, peer)) => {
                if shared.pending.load(Ordering::SeqCst) >= shared.opts.max_pending {
                    log_line(format_args!("refused {peer}: too many connections in handshake"));
                    continue;
                }
                shared.pending.fetch_add(1, Ordering::SeqCst);
                let (shared2, tx2) = (shared.clone(), tx.clone());
                let spawned = std::thread::Builder::new()
                    .name("reverb-boot-conn".into())
                    .spawn(move || serve_conn(stream, peer, shared2, tx2));
                match spawned {
                    Ok(h) => readers.push(h),
                    Err(e) => {
                        shared.pending.fetch_sub(1, Ordering::SeqCst);
                        log_line(format_args!("refused {peer}: cannot spawn a thread: {e}"));
                    }
                }
                readers.retain(|h| !h.is_finished());
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                log_line(format_args!("accept: {e}"));
                std::thread::sleep(TICK);
            }
        }
    }
    // Readers see `stop` within a tick.
    for h in readers {
        let _ = h.join();
    }
}

/// Handshake, then forward frames to the coordinator until the connection ends.
fn serve_conn(mut stream: TcpStream, peer: SocketAddr, shared: Arc<Shared>, tx: Sender<Event>) {
    let admitted = handshake(&mut stream, peer, &shared, &tx);
    shared.pending.fetch_sub(1, Ordering::SeqCst);
    let (conn, rank) = match admitted {
        Ok(x) => x,
        Err(reason) => {
            if !shared.stopping() {
                log_line(format_args!("refused {peer}: {reason}"));
                if let Ok(b) = wire::encode(&Frame::Refused { reason }) {
                    let _ = std::io::Write::write_all(&mut stream, &b);
                }
            }
            let _ = stream.shutdown(Shutdown::Both);
            return;
        }
    };
    let cancel = || shared.stopping();
    let wait = Wait { idle_deadline: None, frame_timeout: shared.opts.io_timeout, cancel: &cancel };
    loop {
        let ev = match wire::read_frame(&mut stream, wire::MAX_FRAME, &wait) {
            Ok(Read1::Frame(Frame::Contribute { round, data })) => {
                let ev = Event::Contribute { conn, rank, round, data };
                if tx.send(ev).is_err() {
                    break;
                }
                continue;
            }
            Ok(Read1::Frame(Frame::Publish { address })) => {
                if tx.send(Event::Publish { conn, rank, address }).is_err() {
                    break;
                }
                continue;
            }
            Ok(Read1::Frame(Frame::Lookup)) => {
                if tx.send(Event::Lookup { conn, rank }).is_err() {
                    break;
                }
                continue;
            }
            Ok(Read1::Frame(Frame::Bye)) => Event::Left { conn, rank, clean: true, reason: "left".into() },
            Ok(Read1::Frame(f)) => Event::Left {
                conn,
                rank,
                clean: false,
                reason: format!("protocol error: unexpected {} frame", f.kind_name()),
            },
            Ok(Read1::Eof) => {
                Event::Left { conn, rank, clean: false, reason: "connection closed without Bye".into() }
            }
            Err(_) if shared.stopping() => break,
            Err(e) => Event::Left { conn, rank, clean: false, reason: e.to_string() },
        };
        let _ = tx.send(ev);
        break;
    }
    let _ = stream.shutdown(Shutdown::Both);
}

/// Reads and checks the Hello; on success the coordinator has admitted (and welcomed) it.
fn handshake(
    stream: &mut TcpStream,
    peer: SocketAddr,
    shared: &Shared,
    tx: &Sender<Event>,
) -> std::result::Result<(u64, u32), String> {
    let setup = stream
        .set_nonblocking(false)
        .and_then(|_| stream.set_read_timeout(Some(TICK)))
        .and_then(|_| stream.set_write_timeout(Some(shared.opts.io_timeout)))
        .and_then(|_| stream.set_nodelay(true));
    setup.map_err(|e| format!("socket setup: {e}"))?;
    let cancel = || shared.stopping();
    let wait = Wait {
        idle_deadline: Some(Instant::now() + shared.opts.hello_timeout),
        frame_timeout: shared.opts.hello_timeout,
        cancel: &cancel,
    };
    let hello = match wire::read_frame(stream, wire::MAX_HELLO, &wait) {
        Ok(Read1::Frame(f)) => f,
        Ok(Read1::Eof) => return Err("closed before Hello".into()),
        Err(TransportError::Timeout(_)) => {
            return Err(format!("no Hello within {:?}", shared.opts.hello_timeout))
        }
        Err(e) => return Err(format!("bad Hello: {e}")),
    };
    let Frame::Hello { token, rank, size, incarnation } = hello else {
        return Err(format!("expected Hello, got {}", hello.kind_name()));
    };
    if !wire::ct_eq(&token, &shared.token) {
        return Err(format!("wrong job token (claimed rank {rank})"));
    }
    if size != shared.size {
        return Err(format!("wrong job size {size} (the job has {})", shared.size));
    }
    if rank >= shared.size {
        return Err(format!("rank {rank} out of range (size {})", shared.size));
    }
    let writer = stream.try_clone().map_err(|e| format!("socket clone: {e}"))?;
    let conn = shared.next_conn.fetch_add(1, Ordering::Relaxed);
    let (vtx, vrx) = channel::bounded(1);
    tx.send(Event::Join { conn, rank, incarnation, peer, writer, verdict: vtx })
        .map_err(|_| "server stopping".to_string())?;
    match vrx.recv_timeout(shared.opts.io_timeout) {
        Ok(Ok(())) => Ok((conn, rank)),
        Ok(Err(reason)) => Err(reason),
        Err(_) => Err("server did not answer the admission".into()),
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum SlotStatus {
    /// Never connected yet.
    Waiting,
    Live,
    /// Said Bye.
    Left,
    /// Lost without Bye; carries the reason.
    Failed(String),
}

struct Conn {
    id: u64,
    peer: SocketAddr,
    writer: TcpStream,
}

struct RankSlot {
    incarnation: u32,
    status: SlotStatus,
    conn: Option<Conn>,
    /// The provider address this incarnation published; None until then and after a failure.
    address: Option<Vec<u8>>,
    /// Admitted after a failure: its Publish is announced to the other ranks.
    rejoined: bool,
}

struct Coordinator {
    shared: Arc<Shared>,
    slots: Vec<RankSlot>,
    round: u64,
    parts: Vec<Option<Vec<u8>>>,
    have: u32,
    /// Why collectives cannot proceed (rank, reason); set by a failure.
    failure: Option<(Option<u32>, String)>,
}

impl Coordinator {
    fn new(shared: Arc<Shared>) -> Self {
        let n = shared.size as usize;
        Coordinator {
            slots: (0..n)
                .map(|_| RankSlot {
                    incarnation: 0,
                    status: SlotStatus::Waiting,
                    conn: None,
                    address: None,
                    rejoined: false,
                })
                .collect(),
            parts: vec![None; n],
            shared,
            round: 0,
            have: 0,
            failure: None,
        }
    }

    fn run(mut self, rx: Receiver<Event>) {
        while !self.shared.stopping() {
            match rx.recv_timeout(TICK) {
                Ok(ev) => self.handle(ev),
                Err(channel::RecvTimeoutError::Timeout) => {}
                Err(channel::RecvTimeoutError::Disconnected) => break,
            }
        }
        for s in &mut self.slots {
            if let Some(c) = s.conn.take() {
                let _ = c.writer.shutdown(Shutdown::Both);
            }
        }
    }

    fn handle(&mut self, ev: Event) {
        match ev {
            Event::Join { conn, rank, incarnation, peer, writer, verdict } => {
                let v = self.admit(conn, rank, incarnation, peer, writer);
                let _ = verdict.send(v);
            }
            Event::Contribute { conn, rank, round, data } => self.contribute(conn, rank, round, data),
            Event::Left { conn, rank, clean, reason } => self.left(conn, rank, clean, reason),
            Event::Publish { conn, rank, address } => self.publish(conn, rank, address),
            Event::Lookup { conn, rank } => self.lookup(conn, rank),
            Event::MarkFailed { rank, incarnation, reason, verdict } => {
                self.mark_failed(rank, incarnation, reason);
                let _ = verdict.send(Ok(()));
            }
        }
    }

    fn set_presence(&self, joined: bool, left: bool) {
        let mut g = match self.shared.presence.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if joined {
            g.0 += 1;
            g.1 += 1;
        }
        if left {
            g.0 = g.0.saturating_sub(1);
        }
        self.shared.presence_cv.notify_all();
    }

    /// Admission policy: a never-connected slot at its incarnation; a failed slot (or a live
    /// one whose process the launcher replaced) only at a higher incarnation.
    fn admit(
        &mut self,
        id: u64,
        rank: u32,
        incarnation: u32,
        peer: SocketAddr,
        mut writer: TcpStream,
    ) -> std::result::Result<(), String> {
        let slot = &self.slots[rank as usize];
        let current = slot.incarnation;
        let rejoin = match &slot.status {
            SlotStatus::Waiting if incarnation >= current => false,
            SlotStatus::Live if incarnation > current => {
                // The old process is gone but its connection is not closed yet.
                let old = slot.conn.as_ref().map(|c| c.id).unwrap_or_default();
                self.left(old, rank, false, format!("superseded by incarnation {incarnation}"));
                true
            }
            SlotStatus::Live => {
                let from = slot.conn.as_ref().map(|c| c.peer.to_string()).unwrap_or_default();
                return Err(format!(
                    "duplicate rank {rank}: incarnation {current} already connected from {from} \
                     (a rejoin needs a higher incarnation than {current}, got {incarnation})"
                ));
            }
            SlotStatus::Left => return Err(format!("rank {rank} has already left the job")),
            SlotStatus::Failed(_) if incarnation > current => true,
            SlotStatus::Waiting | SlotStatus::Failed(_) => {
                return Err(format!(
                    "stale incarnation {incarnation} for rank {rank}: the slot is at incarnation \
                     {current}; a rejoin needs a higher one"
                ))
            }
        };
        let welcome = wire::encode(&Frame::Welcome { size: self.shared.size, round: self.round })
            .map_err(|e| e.to_string())?;
        std::io::Write::write_all(&mut writer, &welcome).map_err(|e| format!("writing Welcome: {e}"))?;
        if rejoin {
            log_line(format_args!("rank {rank} rejoined at incarnation {incarnation} from {peer}"));
        }
        let slot = &mut self.slots[rank as usize];
        slot.incarnation = incarnation;
        slot.status = SlotStatus::Live;
        slot.conn = Some(Conn { id, peer, writer });
        slot.address = None;
        slot.rejoined = rejoin;
        self.set_presence(true, false);
        // Collectives resume once no rank is missing: rounds did not advance while one was.
        let lost_rank = matches!(self.failure, Some((Some(_), _)));
        if rejoin && lost_rank && !self.slots.iter().any(|s| matches!(s.status, SlotStatus::Failed(_))) {
            log_line(format_args!(
                "every failed rank has rejoined: collectives resume at round {}",
                self.round
            ));
            self.failure = None;
        }
        Ok(())
    }

    /// Stores a rank's address; a rejoined rank's is announced to every other live rank.
    fn publish(&mut self, conn: u64, rank: u32, address: Vec<u8>) {
        if !self.is_current(conn, rank) {
            return;
        }
        let slot = &mut self.slots[rank as usize];
        let (incarnation, announce) = (slot.incarnation, slot.rejoined);
        slot.address = Some(address.clone());
        if !announce {
            return;
        }
        let frame = match wire::encode(&Frame::Rejoined { rank, incarnation, address }) {
            Ok(f) => f,
            Err(e) => {
                self.left(conn, rank, false, format!("unannounceable address: {e}"));
                return;
            }
        };
        for r in 0..self.shared.size {
            if r != rank && self.slots[r as usize].status == SlotStatus::Live {
                self.send_to(r, &frame);
            }
        }
    }

    fn lookup(&mut self, conn: u64, rank: u32) {
        if !self.is_current(conn, rank) {
            return;
        }
        let entries = (0..self.shared.size)
            .map(|r| {
                let s = &self.slots[r as usize];
                let live = s.status == SlotStatus::Live;
                PeerAddress {
                    rank: r,
                    incarnation: s.incarnation,
                    address: s.address.clone().filter(|_| live),
                }
            })
            .collect();
        match wire::encode(&Frame::Addresses { entries }) {
            Ok(frame) => {
                self.send_to(rank, &frame);
            }
            Err(e) => self.left(conn, rank, false, format!("lookup: {e}")),
        }
    }

    fn mark_failed(&mut self, rank: u32, incarnation: u32, reason: String) {
        let Some(slot) = self.slots.get(rank as usize) else { return };
        if slot.incarnation > incarnation {
            return;
        }
        match slot.conn.as_ref().map(|c| c.id) {
            Some(id) => self.left(id, rank, false, reason),
            None => {
                let slot = &mut self.slots[rank as usize];
                slot.status = SlotStatus::Failed(reason.clone());
                slot.address = None;
                if self.failure.is_none() {
                    self.failure = Some((Some(rank), format!("rank {rank} lost: {reason}")));
                }
                self.abort_pending();
            }
        }
    }

    fn is_current(&self, conn: u64, rank: u32) -> bool {
        self.slots.get(rank as usize).and_then(|s| s.conn.as_ref()).is_some_and(|c| c.id == conn)
    }

    /// Writes `bytes` to a rank; a failed write marks the rank lost.
    fn send_to(&mut self, rank: u32, bytes: &[u8]) -> bool {
        let Some(c) = self.slots[rank as usize].conn.as_mut() else {
            return false;
        };
        match std::io::Write::write_all(&mut c.writer, bytes) {
            Ok(()) => true,
            Err(e) => {
                let (id, reason) = (c.id, format!("write failed: {e}"));
                self.left(id, rank, false, reason);
                false
            }
        }
    }

    fn abort_frame(&self) -> Vec<u8> {
        let (rank, reason) = self.failure.clone().unwrap_or((None, "job aborted".into()));
        wire::encode(&Frame::Abort { rank, reason }).unwrap_or_default()
    }

    /// Fails every rank waiting in the current round with the job's failure.
    fn abort_pending(&mut self) {
        let frame = self.abort_frame();
        let waiting: Vec<u32> = (0..self.shared.size).filter(|&r| self.parts[r as usize].is_some()).collect();
        for p in self.parts.iter_mut() {
            *p = None;
        }
        self.have = 0;
        for r in waiting {
            self.send_to(r, &frame);
        }
    }

    fn contribute(&mut self, conn: u64, rank: u32, round: u64, data: Vec<u8>) {
        if !self.is_current(conn, rank) {
            return;
        }
        if self.failure.is_some() {
            let frame = self.abort_frame();
            self.send_to(rank, &frame);
            return;
        }
        if round != self.round || self.parts[rank as usize].is_some() {
            let why = format!(
                "protocol error: contribution to round {round} while the job is at round {}",
                self.round
            );
            self.left(conn, rank, false, why);
            return;
        }
        self.parts[rank as usize] = Some(data);
        self.have += 1;
        // A rank that already left can never contribute: the round is dead.
        if let Some(gone) = self.slots.iter().position(|s| s.status == SlotStatus::Left) {
            self.failure = Some((Some(gone as u32), format!("rank {gone} has left the job")));
            self.abort_pending();
            return;
        }
        if self.have < self.shared.size {
            return;
        }
        let parts: Vec<Vec<u8>> = self.parts.iter_mut().map(|p| p.take().unwrap_or_default()).collect();
        self.have = 0;
        let round = self.round;
        self.round += 1;
        match wire::encode(&Frame::Gathered { round, parts }) {
            Ok(bytes) => {
                for r in 0..self.shared.size {
                    self.send_to(r, &bytes);
                }
            }
            Err(e) => {
                self.failure = Some((None, format!("allgather round {round}: {e}")));
                let frame = self.abort_frame();
                for r in 0..self.shared.size {
                    self.send_to(r, &frame);
                }
            }
        }
    }

    fn left(&mut self, conn: u64, rank: u32, clean: bool, reason: String) {
        if !self.is_current(conn, rank) {
            return;
        }
        let peer = self.slots[rank as usize].conn.take().map(|c| {
            let _ = c.writer.shutdown(Shutdown::Both);
            c.peer
        });
        self.set_presence(false, true);
        let slot = &mut self.slots[rank as usize];
        if clean {
            slot.status = SlotStatus::Left;
            if self.have > 0 && self.failure.is_none() {
                self.failure = Some((Some(rank), format!("rank {rank} has left the job")));
                self.abort_pending();
            }
            return;
        }
        if let Some(p) = peer {
            log_line(format_args!("rank {rank} ({p}) lost: {reason}"));
        }
        slot.status = SlotStatus::Failed(reason.clone());
        slot.address = None;
        if self.failure.is_none() {
            self.failure = Some((Some(rank), format!("rank {rank} lost: {reason}")));
        }
        self.abort_pending();
    }
}

/// A rank's connection to the rendezvous.
pub struct TcpBootstrap {
    job: JobInfo,
    stream: TcpStream,
    root: String,
    timeout: Duration,
    round: u64,
    /// Once a collective failed the round counter is out of step: every later call fails.
    broken: Option<TransportError>,
    /// The server rank 0 hosts when no launcher does.
    server: Option<BootServer>,
    /// Rejoin announcements read but not yet handed out.
    notices: std::collections::VecDeque<Rejoin>,
}

fn resolve(root: &str) -> Result<Vec<SocketAddr>> {
    let addrs: Vec<SocketAddr> =
        root.to_socket_addrs().context(|| format!("bootstrap: resolve REVERB_ROOT={root}"))?.collect();
    if addrs.is_empty() {
        return Err(TransportError::Bootstrap(format!("{root} resolves to no address")));
    }
    Ok(addrs)
}

impl TcpBootstrap {
    /// Connects to `root`, retrying until `timeout` (the server may start later), and
    /// presents the Hello. `timeout` also bounds each later collective.
    pub fn connect(job: JobInfo, root: &str, token: &str, timeout: Duration) -> Result<Self> {
        let deadline = Instant::now() + timeout;
        let addrs = resolve(root)?;
        let mut last_err = String::from("no attempt");
        let mut stream = 'outer: loop {
            for a in &addrs {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(TransportError::Bootstrap(format!(
                        "rank {}: no boot server at {root} within {timeout:?} (last error: {last_err})",
                        job.rank
                    )));
                }
                match TcpStream::connect_timeout(a, left.min(Duration::from_secs(5))) {
                    Ok(s) => break 'outer s,
                    Err(e) => last_err = e.to_string(),
                }
            }
            std::thread::sleep(
                Duration::from_millis(50).min(deadline.saturating_duration_since(Instant::now())),
            );
        };
        stream
            .set_read_timeout(Some(TICK))
            .and_then(|_| stream.set_write_timeout(Some(timeout)))
            .and_then(|_| stream.set_nodelay(true))
            .context(|| "bootstrap: socket setup".into())?;
        let welcome_round;
        let hello = Frame::Hello {
            token: token.as_bytes().to_vec(),
            rank: job.rank,
            size: job.size,
            incarnation: job.incarnation,
        };
        std::io::Write::write_all(&mut stream, &wire::encode(&hello)?)
            .context(|| format!("bootstrap: send Hello to {root}"))?;
        let never = || false;
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_secs(1));
        let wait = Wait { idle_deadline: Some(Instant::now() + left), frame_timeout: left, cancel: &never };
        match wire::read_frame(&mut stream, wire::MAX_HELLO, &wait)? {
            Read1::Frame(Frame::Welcome { size, round }) if size == job.size => welcome_round = round,
            Read1::Frame(Frame::Refused { reason }) => {
                return Err(TransportError::Bootstrap(format!(
                    "boot server at {root} refused rank {}: {reason}",
                    job.rank
                )))
            }
            Read1::Frame(f) => {
                return Err(TransportError::Bootstrap(format!(
                    "boot server at {root} answered {} to Hello",
                    f.kind_name()
                )))
            }
            Read1::Eof => {
                return Err(TransportError::Bootstrap(format!("boot server at {root} closed the connection")))
            }
        }
        Ok(TcpBootstrap {
            job,
            stream,
            root: root.to_string(),
            timeout,
            round: welcome_round,
            broken: None,
            server: None,
            notices: Default::default(),
        })
    }

    /// Job from the environment, root and token from `REVERB_ROOT` / `REVERB_JOB_TOKEN`.
    /// Rank 0 starts the server at `REVERB_ROOT` unless `REVERB_BOOT_SERVER=external`.
    pub fn connect_from_env() -> Result<TcpBootstrap> {
        let job = JobInfo::from_env()?.ok_or_else(|| {
            TransportError::Config(
                "no job environment: set REVERB_RANK/REVERB_SIZE (or run under reverb run, Slurm, mpirun or PMI)".into(),
            )
        })?;
        let p = BootParams::from_env()?;
        TcpBootstrap::connect_with(job, &p)
    }

    /// As [`TcpBootstrap::connect_from_env`], with explicit parameters.
    pub fn connect_with(job: JobInfo, p: &BootParams) -> Result<TcpBootstrap> {
        let server = if !p.external_server && job.rank == 0 {
            let s = match BootServer::start(&p.root, job.size, &p.token) {
                Ok(s) => s,
                // The root name may resolve to an address not bindable here: any interface.
                Err(first) => {
                    let port = p.root.rsplit_once(':').map(|(_, port)| port).unwrap_or("0");
                    BootServer::start(&format!("0.0.0.0:{port}"), job.size, &p.token).map_err(|_| first)?
                }
            };
            Some(s)
        } else {
            None
        };
        let mut b = TcpBootstrap::connect(job, &p.root, &p.token, p.timeout)?;
        b.server = server;
        Ok(b)
    }

    /// The `host:port` of the rendezvous server this client talks to.
    pub fn root(&self) -> &str {
        &self.root
    }

    fn lost_server(&self, e: impl std::fmt::Display) -> TransportError {
        TransportError::Bootstrap(format!(
            "rank {}: lost the boot server at {}: {e}",
            self.job.rank, self.root
        ))
    }

    fn send_frame(&mut self, frame: &Frame) -> Result<()> {
        let bytes = wire::encode(frame)?;
        std::io::Write::write_all(&mut self.stream, &bytes).map_err(|e| self.lost_server(e))
    }

    /// Reads one frame, waiting for its first byte until `deadline`; rejoin announcements
    /// are queued, not returned.
    fn read_one(&mut self, deadline: Instant) -> Result<Option<Read1>> {
        let never = || false;
        let wait = Wait { idle_deadline: Some(deadline), frame_timeout: self.timeout, cancel: &never };
        match wire::read_frame(&mut self.stream, wire::MAX_FRAME, &wait)? {
            Read1::Frame(Frame::Rejoined { rank, incarnation, address }) => {
                if rank < self.job.size {
                    self.notices.push_back(Rejoin { rank, incarnation, address });
                }
                Ok(None)
            }
            other => Ok(Some(other)),
        }
    }

    /// The next frame that is not a rejoin announcement.
    fn next_reply(&mut self, deadline: Instant) -> Result<Read1> {
        loop {
            if let Some(r) = self.read_one(deadline)? {
                return Ok(r);
            }
        }
    }

    /// Whether a byte is waiting on the socket (never blocks).
    fn readable(&mut self) -> Result<bool> {
        self.stream.set_nonblocking(true).context(|| "bootstrap: set_nonblocking".into())?;
        let mut byte = [0u8; 1];
        let r = self.stream.peek(&mut byte);
        self.stream.set_nonblocking(false).context(|| "bootstrap: set_nonblocking".into())?;
        match r {
            Ok(0) => Err(TransportError::Bootstrap(format!(
                "rank {}: the boot server at {} closed the connection",
                self.job.rank, self.root
            ))),
            Ok(_) => Ok(true),
            Err(e)
                if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted) =>
            {
                Ok(false)
            }
            Err(e) => Err(self.lost_server(e)),
        }
    }

    /// Reads every frame already waiting; announcements are queued, replies of collectives
    /// abandoned earlier (after a timeout or abort) are dropped.
    fn drain_waiting(&mut self) -> Result<()> {
        while self.readable()? {
            match self.read_one(Instant::now() + self.timeout)? {
                None | Some(Read1::Frame(Frame::Gathered { .. } | Frame::Abort { .. })) => {}
                Some(Read1::Eof) => return Err(self.lost_server("connection closed")),
                Some(Read1::Frame(f)) => {
                    return Err(TransportError::Malformed {
                        what: "bootstrap notice",
                        detail: format!("unexpected {} frame", f.kind_name()),
                    })
                }
            }
        }
        Ok(())
    }

    fn gather_once(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let round = self.round;
        let frame = wire::encode(&Frame::Contribute { round, data: data.to_vec() })?;
        std::io::Write::write_all(&mut self.stream, &frame).map_err(|e| {
            TransportError::Bootstrap(format!(
                "rank {}: lost the boot server at {}: {e}",
                self.job.rank, self.root
            ))
        })?;
        let reply = match self.next_reply(Instant::now() + self.timeout) {
            Ok(r) => r,
            Err(TransportError::Timeout(_)) => {
                return Err(TransportError::Bootstrap(format!(
                    "rank {}: allgather round {round} timed out after {:?} (a rank is missing or slow)",
                    self.job.rank, self.timeout
                )))
            }
            Err(e) => return Err(e),
        };
        match reply {
            Read1::Frame(Frame::Gathered { round: r, parts }) if r == round => {
                if parts.len() != self.job.size as usize {
                    return Err(TransportError::Malformed {
                        what: "allgather result",
                        detail: format!("{} parts for {} ranks", parts.len(), self.job.size),
                    });
                }
                self.round += 1;
                Ok(parts)
            }
            Read1::Frame(Frame::Abort { rank: Some(r), reason: _ }) => Err(TransportError::PeerDead(r)),
            Read1::Frame(Frame::Abort { rank: None, reason }) => Err(TransportError::Bootstrap(reason)),
            Read1::Frame(f) => Err(TransportError::Malformed {
                what: "allgather reply",
                detail: format!("unexpected {} frame", f.kind_name()),
            }),
            Read1::Eof => Err(TransportError::Bootstrap(format!(
                "rank {}: the boot server at {} closed the connection",
                self.job.rank, self.root
            ))),
        }
    }
}

impl Bootstrap for TcpBootstrap {
    fn job(&self) -> &JobInfo {
        &self.job
    }

    fn publish(&mut self, address: &[u8]) -> Result<()> {
        self.send_frame(&Frame::Publish { address: address.to_vec() })
    }

    fn lookup(&mut self) -> Result<Vec<PeerAddress>> {
        self.send_frame(&Frame::Lookup)?;
        let deadline = Instant::now() + self.timeout;
        loop {
            let reply = match self.next_reply(deadline) {
                Ok(r) => r,
                Err(TransportError::Timeout(_)) => {
                    return Err(TransportError::Bootstrap(format!(
                        "rank {}: lookup timed out after {:?}",
                        self.job.rank, self.timeout
                    )))
                }
                Err(e) => return Err(e),
            };
            match reply {
                Read1::Frame(Frame::Addresses { entries }) => {
                    let in_order = entries.len() == self.job.size as usize
                        && entries.iter().enumerate().all(|(i, e)| e.rank as usize == i);
                    if !in_order {
                        return Err(TransportError::Malformed {
                            what: "address table",
                            detail: format!("{} entries for {} ranks", entries.len(), self.job.size),
                        });
                    }
                    return Ok(entries);
                }
                // Replies to a collective abandoned earlier.
                Read1::Frame(Frame::Gathered { .. } | Frame::Abort { .. }) => {}
                Read1::Frame(f) => {
                    return Err(TransportError::Malformed {
                        what: "lookup reply",
                        detail: format!("unexpected {} frame", f.kind_name()),
                    })
                }
                Read1::Eof => return Err(self.lost_server("connection closed")),
            }
        }
    }

    fn poll_rejoins(&mut self) -> Result<Vec<Rejoin>> {
        self.drain_waiting()?;
        Ok(self.notices.drain(..).collect())
    }

    fn wait_rejoin(&mut self, rank: u32, timeout: Duration) -> Result<Rejoin> {
        let deadline = Instant::now() + timeout;
        loop {
            self.drain_waiting()?;
            if let Some(i) = self.notices.iter().position(|n| n.rank == rank) {
                if let Some(n) = self.notices.remove(i) {
                    return Ok(n);
                }
            }
            if Instant::now() >= deadline {
                return Err(TransportError::Timeout(timeout));
            }
            // Sleep on the socket until something arrives (or a tick passes).
            match self.read_one(deadline) {
                Ok(None) => {}
                Ok(Some(Read1::Frame(Frame::Gathered { .. } | Frame::Abort { .. }))) => {}
                Ok(Some(Read1::Eof)) => return Err(self.lost_server("connection closed")),
                Ok(Some(Read1::Frame(f))) => {
                    return Err(TransportError::Malformed {
                        what: "bootstrap notice",
                        detail: format!("unexpected {} frame", f.kind_name()),
                    })
                }
                Err(TransportError::Timeout(_)) => return Err(TransportError::Timeout(timeout)),
                Err(e) => return Err(e),
            }
        }
    }

    /// Fails with `PeerDead(rank)` while a rank is lost (pending and later calls); once every
    /// lost rank has rejoined, collectives work again, rejoined ranks included. Any other
    /// failure (timeout, lost server, protocol error) is final.
    fn allgather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        if let Some(e) = &self.broken {
            return Err(e.clone());
        }
        let r = self.gather_once(data);
        match &r {
            // The server aborted the round without advancing it: we are still in step.
            Err(TransportError::PeerDead(_)) | Ok(_) => {}
            Err(e) => self.broken = Some(e.clone()),
        }
        r
    }
}

impl Drop for TcpBootstrap {
    fn drop(&mut self) {
        let _ = self.stream.set_write_timeout(Some(Duration::from_secs(1)));
        if let Ok(b) = wire::encode(&Frame::Bye) {
            let _ = std::io::Write::write_all(&mut self.stream, &b);
        }
        let _ = self.stream.shutdown(Shutdown::Write);
        if let Some(s) = self.server.take() {
            s.shutdown_graceful(self.timeout);
        }
    }
}
