//! The server's front: [`BootServer`], its shared state, the events its threads send the
//! coordinator, and the accept loop.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam::channel::{self, Receiver, Sender};

use super::coordinator::Coordinator;
use crate::bootstrap::wire;
use crate::error::{IoContext, Result, TransportError};

/// Limits of a [`BootServer`]; the defaults (10 s hello, 30 s I/O, 256 pending) suit jobs.
/// A connection counts as pending until its Hello has passed the token check.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// A new connection must present its whole Hello within this of its accept, or is dropped.
    pub hello_timeout: Duration,
    /// Bound on every write, and on receiving a frame once it has started.
    pub io_timeout: Duration,
    /// Connections waiting in their handshake at most: past this, a new one evicts the
    /// oldest that has sent nothing (else the oldest). Authenticated ranks do not count.
    pub max_pending: usize,
    /// Agents' control connections are queued from the start for a controller that takes them
    /// ([`BootServer::agent_connections`]), not refused until it asks: an agent that connects
    /// as soon as the port opens is not turned away.
    pub agents: bool,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            hello_timeout: Duration::from_secs(10),
            io_timeout: Duration::from_secs(30),
            max_pending: 256,
            agents: false,
        }
    }
}

pub(super) struct Shared {
    pub(super) stop: AtomicBool,
    pub(super) token: Vec<u8>,
    pub(super) size: u32,
    pub(super) opts: ServerOptions,
    pub(super) next_conn: AtomicU64,
    /// (ranks connected now, ranks that ever connected); for a graceful shutdown.
    pub(super) presence: Mutex<(u32, u32)>,
    pub(super) presence_cv: Condvar,
    /// Agent connections go here once a controller asked for them (else they are refused).
    pub(super) agents: Sender<AgentConn>,
    pub(super) agents_wanted: AtomicBool,
}

impl Shared {
    pub(super) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

/// What every [`BootServer`] of this process has sent so far (see [`traffic`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Collective rounds completed (allgathers and barriers).
    pub rounds: u64,
    /// Bytes written to ranks as collective results.
    pub round_bytes: u64,
    /// The most bytes one round wrote (over all its ranks).
    pub max_round_bytes: u64,
    /// Bytes written to ranks in all (Welcome, results, lookups, aborts).
    pub bytes: u64,
}

static ROUNDS: AtomicU64 = AtomicU64::new(0);
static ROUND_BYTES: AtomicU64 = AtomicU64::new(0);
static MAX_ROUND_BYTES: AtomicU64 = AtomicU64::new(0);
static BYTES: AtomicU64 = AtomicU64::new(0);

/// Totals over every boot server this process has run; for benchmarks (`reverb bench boot`),
/// which take the difference around a job.
pub fn traffic() -> Traffic {
    Traffic {
        rounds: ROUNDS.load(Ordering::Relaxed),
        round_bytes: ROUND_BYTES.load(Ordering::Relaxed),
        max_round_bytes: MAX_ROUND_BYTES.load(Ordering::Relaxed),
        bytes: BYTES.load(Ordering::Relaxed),
    }
}

/// Counts `n` bytes written to a rank.
pub(super) fn count_sent(n: usize) {
    BYTES.fetch_add(n as u64, Ordering::Relaxed);
}

/// Counts a completed round that wrote `n` bytes in all.
pub(super) fn count_round(n: u64) {
    ROUNDS.fetch_add(1, Ordering::Relaxed);
    ROUND_BYTES.fetch_add(n, Ordering::Relaxed);
    MAX_ROUND_BYTES.fetch_max(n, Ordering::Relaxed);
}

pub(super) fn log_line(msg: std::fmt::Arguments<'_>) {
    tracing::info!("reverb boot server: {msg}");
}

/// The rendezvous server; runs in background threads and stops on drop.
pub struct BootServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    events: Sender<Event>,
    agents: Receiver<AgentConn>,
    threads: Vec<JoinHandle<()>>,
}

/// What a per-host agent said of itself in its `AgentHello` (token and job size checked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentIntro {
    /// The host it runs on, as it names itself.
    pub host: String,
    /// Its ranks, `first..first+count`; empty for a spare.
    pub ranks: std::ops::Range<u32>,
    /// The incarnation its ranks start at.
    pub first_incarnation: u32,
    /// Node respawns it may take by itself: its ranks reach at most `first_incarnation + respawn`.
    pub respawn: u32,
}

/// A per-host agent's control connection, authenticated, handed over whole to the job's
/// controller (see [`BootServer::agent_connections`]); the server reads nothing more from it.
#[derive(Debug)]
pub struct AgentConn {
    /// Where it connected from.
    pub peer: SocketAddr,
    /// The connection, after the hello: heartbeats and control frames from here on.
    pub stream: TcpStream,
    /// What it said of itself.
    pub intro: AgentIntro,
}

/// Reports ranks failed to a running [`BootServer`], from any thread (see
/// [`BootServer::mark_failed`]).
#[derive(Clone)]
pub struct FailureReporter {
    shared: Arc<Shared>,
    events: Sender<Event>,
}

impl FailureReporter {
    /// As [`BootServer::mark_failed`].
    pub fn mark_failed(&self, rank: u32, incarnation: u32, reason: &str) -> Result<()> {
        let vrx = self.post_failed(rank, incarnation, reason, false)?;
        self.verdict(vrx, "mark_failed")
    }

    /// As [`BootServer::retire`].
    pub fn retire(&self, rank: u32, incarnation: u32, reason: &str) -> Result<()> {
        let vrx = self.post_failed(rank, incarnation, reason, true)?;
        self.verdict(vrx, "retire")
    }

    /// Partial redundancy: retires every `(rank, incarnation, mates)` of `copies` (their
    /// deaths masked) when each has a mate alive at the rendezvous (connected, or gone with a
    /// Bye) that is not itself in `copies`; otherwise changes nothing. All or none, applied at
    /// once: two copies of one rank asking together cannot both be retired. Returns whether
    /// they were.
    pub fn retire_if_mates_live(&self, copies: &[(u32, u32, Vec<u32>)], reason: &str) -> Result<bool> {
        if let Some(&(rank, _, _)) = copies.iter().find(|(r, _, _)| *r >= self.shared.size) {
            return Err(TransportError::InvalidRank(rank, self.shared.size));
        }
        let (vtx, vrx) = channel::bounded(1);
        let ev =
            Event::RetireIfMatesLive { copies: copies.to_vec(), reason: reason.to_string(), verdict: vtx };
        self.events.send(ev).map_err(|_| TransportError::Bootstrap("boot server stopped".into()))?;
        match vrx.recv_timeout(self.shared.opts.io_timeout) {
            Ok(retired) => Ok(retired),
            Err(_) => {
                Err(TransportError::Bootstrap("boot server did not answer retire_if_mates_live".into()))
            }
        }
    }

    fn verdict(&self, vrx: Receiver<std::result::Result<(), String>>, call: &str) -> Result<()> {
        match vrx.recv_timeout(self.shared.opts.io_timeout) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(reason)) => Err(TransportError::Bootstrap(reason)),
            Err(_) => Err(TransportError::Bootstrap(format!("boot server did not answer {call}"))),
        }
    }

    /// As [`FailureReporter::mark_failed`] without waiting for the server to apply it: for a
    /// caller that must keep its own pace (the controller's heartbeats). Reports from one
    /// thread are applied in order, and before any connection that arrives after them.
    pub fn report_failed(&self, rank: u32, incarnation: u32, reason: &str) -> Result<()> {
        self.post_failed(rank, incarnation, reason, false).map(drop)
    }

    /// Queues the report; the receiver gets the server's verdict once applied.
    fn post_failed(
        &self,
        rank: u32,
        incarnation: u32,
        reason: &str,
        retire: bool,
    ) -> Result<Receiver<std::result::Result<(), String>>> {
        if rank >= self.shared.size {
            return Err(TransportError::InvalidRank(rank, self.shared.size));
        }
        let (vtx, vrx) = channel::bounded(1);
        let ev = Event::MarkFailed { rank, incarnation, reason: reason.to_string(), retire, verdict: vtx };
        self.events.send(ev).map_err(|_| TransportError::Bootstrap("boot server stopped".into()))?;
        Ok(vrx)
    }
}

pub(super) enum Event {
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
    /// From the launcher: `rank` at `incarnation` is gone (its node failed); for good, with
    /// the job going on without it, when `retire`.
    MarkFailed {
        rank: u32,
        incarnation: u32,
        reason: String,
        retire: bool,
        verdict: Sender<std::result::Result<(), String>>,
    },
    /// From a job's controller: `FailureReporter::retire_if_mates_live`.
    RetireIfMatesLive {
        copies: Vec<(u32, u32, Vec<u32>)>,
        reason: String,
        verdict: Sender<bool>,
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
        let (agents_tx, agents) = channel::unbounded();
        let agents_wanted = AtomicBool::new(opts.agents);
        let shared = Arc::new(Shared {
            stop: AtomicBool::new(false),
            token: token.as_bytes().to_vec(),
            size,
            opts,
            next_conn: AtomicU64::new(1),
            presence: Mutex::new((0, 0)),
            presence_cv: Condvar::new(),
            agents: agents_tx,
            agents_wanted,
        });
        let (tx, rx) = channel::unbounded();
        let coord = {
            let (shared, events) = (shared.clone(), tx.clone());
            std::thread::Builder::new()
                .name("reverb-boot-coord".into())
                .spawn(move || Coordinator::new(shared, events).run(rx))
                .context(|| "boot server: spawn".into())?
        };
        let events = tx.clone();
        let accept = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("reverb-boot-accept".into())
                .spawn(move || super::gate::run(listener, shared, tx))
                .context(|| "boot server: spawn".into())?
        };
        Ok(BootServer { addr, shared, events, agents, threads: vec![accept, coord] })
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
        self.failure_reporter().mark_failed(rank, incarnation, reason)
    }

    /// Records that `rank` at `incarnation` is gone for good and the job goes on without it
    /// (a copy of a replicated rank whose death is masked): as `mark_failed`, but no
    /// incarnation of it is admitted again, and collectives complete without it (its part of
    /// a gathered result is empty; a uniform result counts it as the others). Returns once
    /// the server has applied it (bounded).
    pub fn retire(&self, rank: u32, incarnation: u32, reason: &str) -> Result<()> {
        self.failure_reporter().retire(rank, incarnation, reason)
    }

    /// A handle that marks ranks failed from another thread (a job's controller).
    pub fn failure_reporter(&self) -> FailureReporter {
        FailureReporter { shared: self.shared.clone(), events: self.events.clone() }
    }

    /// Per-host agents' control connections (an `AgentHello` with the job's token and size),
    /// from now on: the caller is the job's controller. Until this is called they are refused.
    pub fn agent_connections(&self) -> Receiver<AgentConn> {
        self.shared.agents_wanted.store(true, Ordering::SeqCst);
        self.agents.clone()
    }

    /// Waits (at most `linger`) until every rank has connected and left, then stops. Rank 0
    /// uses this so that it does not cut off peers still reading the last result. A job
    /// whose ranks never connected (a program that does not use the rendezvous) does not wait.
    pub fn shutdown_graceful(self, linger: Duration) {
        let deadline = Instant::now() + linger;
        let size = self.shared.size;
        let mut g = match self.shared.presence.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        while !(g.0 == 0 && (g.1 >= size || g.1 == 0)) {
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
