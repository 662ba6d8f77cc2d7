//! The accept thread: new connections wait here, non-blocking, until their whole Hello has
//! arrived and carries the job's token; only then do they get a thread (a rank) or go to the
//! controller (an agent).
//!
//! A connection that sends nothing costs a socket and no thread, and is dropped when its
//! handshake deadline passes ([`ServerOptions::hello_timeout`] from accept, for the whole
//! Hello: a peer trickling bytes gains nothing). At most [`ServerOptions::max_pending`] wait
//! at once; a new one past that evicts the oldest that has sent nothing (else the oldest), so
//! a flood of idle connections can delay a rank's connection but never refuse it. Connections
//! that passed the token check are not counted here: they are the job's own ranks, at most a
//! rank's slot each, and a respawned rank's rejoin always finds room.

use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam::channel::Sender;
use rustix::event::{poll, PollFd, PollFlags, Timespec};

use super::conn::{hand_to_controller, serve_rank};
use super::server::{log_line, Event, Shared};
use super::TICK;
use crate::bootstrap::wire::{self, Frame};

/// Connections accepted per pass before the pending ones are read again.
const ACCEPT_BURST: usize = 64;

/// A connection that has not presented a whole Hello yet.
struct Pending {
    stream: TcpStream,
    peer: SocketAddr,
    deadline: Instant,
    /// The Hello's bytes so far; never more than the Hello (what follows is the reader's).
    buf: Vec<u8>,
}

/// What reading a pending connection came to.
enum Progress {
    /// More bytes are needed.
    Waiting,
    Hello(Frame),
    Refuse(String),
}

impl Pending {
    /// Bytes the Hello needs in all, once its header is known (`Err`: a bad header).
    fn want(&self) -> Result<usize, String> {
        let Some(hdr) = self.buf.first_chunk::<{ wire::HEADER_LEN }>() else {
            return Ok(wire::HEADER_LEN);
        };
        let (_, len) = wire::parse_header(hdr, wire::MAX_HELLO).map_err(|e| format!("bad Hello: {e}"))?;
        Ok(wire::HEADER_LEN + len)
    }

    /// Reads what has arrived, never past the Hello, without blocking.
    fn read(&mut self) -> Progress {
        let mut chunk = [0u8; 1024];
        loop {
            let want = match self.want() {
                Ok(w) => w,
                Err(reason) => return Progress::Refuse(reason),
            };
            // (A header's own length is wanted only until it has arrived.)
            if self.buf.len() == want {
                return match wire::decode(&self.buf) {
                    Ok((frame, _)) => Progress::Hello(frame),
                    Err(e) => Progress::Refuse(format!("bad Hello: {e}")),
                };
            }
            let n = (want - self.buf.len()).min(chunk.len());
            match std::io::Read::read(&mut self.stream, &mut chunk[..n]) {
                Ok(0) if self.buf.is_empty() => return Progress::Refuse("closed before Hello".into()),
                Ok(0) if self.buf.len() < wire::HEADER_LEN => {
                    let got = self.buf.len();
                    return Progress::Refuse(format!(
                        "bad Hello: connection closed inside a header ({got} bytes)"
                    ));
                }
                Ok(0) => {
                    let got = self.buf.len();
                    return Progress::Refuse(format!(
                        "bad Hello: connection closed inside a payload ({got} bytes)"
                    ));
                }
                Ok(k) => self.buf.extend_from_slice(&chunk[..k]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Progress::Waiting,
                Err(e) => return Progress::Refuse(format!("bad Hello: {e}")),
            }
        }
    }

    /// Why its deadline passed.
    fn overdue(&self, timeout: Duration) -> String {
        match self.want() {
            _ if self.buf.is_empty() => format!("no Hello within {timeout:?}"),
            Ok(want) => {
                format!("bad Hello: incomplete frame: {} of {want} bytes within {timeout:?}", self.buf.len())
            }
            Err(reason) => reason,
        }
    }
}

/// The accept loop and the handshakes: runs until the server stops, then joins the ranks'
/// reader threads it started.
pub(super) fn run(listener: TcpListener, shared: Arc<Shared>, tx: Sender<Event>) {
    let mut gate = Gate { shared, tx, pending: Vec::new(), readers: Vec::new() };
    while !gate.shared.stopping() {
        let ready = gate.wait(&listener);
        gate.service(&ready);
        gate.accept(&listener);
        gate.expire();
    }
    for p in gate.pending.drain(..) {
        let _ = p.stream.shutdown(Shutdown::Both);
    }
    // Readers see `stop` within a tick.
    for h in gate.readers {
        let _ = h.join();
    }
}

struct Gate {
    shared: Arc<Shared>,
    tx: Sender<Event>,
    /// In accept order (oldest first).
    pending: Vec<Pending>,
    readers: Vec<JoinHandle<()>>,
}

impl Gate {
    /// Sleeps in poll (at most a tick, or to the nearest deadline); returns which pending
    /// connections are readable (or closed).
    fn wait(&self, listener: &TcpListener) -> Vec<bool> {
        let mut fds = Vec::with_capacity(self.pending.len() + 1);
        fds.push(PollFd::from_borrowed_fd(listener.as_fd(), PollFlags::IN));
        for p in &self.pending {
            fds.push(PollFd::from_borrowed_fd(p.stream.as_fd(), PollFlags::IN));
        }
        let now = Instant::now();
        let nearest = self.pending.iter().map(|p| p.deadline.saturating_duration_since(now)).min();
        let t = nearest.map_or(TICK, |d| d.min(TICK));
        let timeout = Timespec { tv_sec: t.as_secs() as _, tv_nsec: t.subsec_nanos() as _ };
        // An interrupted or failed poll is a spurious wakeup: every step below re-checks.
        let _ = poll(&mut fds, Some(&timeout));
        fds[1..].iter().map(|f| !f.revents().is_empty()).collect()
    }

    /// Reads the readable pending connections; hands over or refuses those that are done.
    fn service(&mut self, ready: &[bool]) {
        let mut i = 0;
        let mut k = 0;
        while i < self.pending.len() {
            let readable = ready.get(k).copied().unwrap_or(false);
            k += 1;
            if !readable {
                i += 1;
                continue;
            }
            match self.pending[i].read() {
                Progress::Waiting => i += 1,
                Progress::Hello(frame) => {
                    let p = self.pending.remove(i);
                    self.hand_over(p, frame);
                }
                Progress::Refuse(reason) => {
                    let p = self.pending.remove(i);
                    self.refuse(p, &reason);
                }
            }
        }
    }

    /// Accepts what is waiting (a burst at most); a full gate evicts for each.
    fn accept(&mut self, listener: &TcpListener) {
        for _ in 0..ACCEPT_BURST {
            match listener.accept() {
                Ok((stream, peer)) => self.admit(stream, peer),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                    // Out of descriptors: an idle connection's makes room for the next.
                    if !self.evict("out of file descriptors") {
                        log_line(format_args!("accept: {e}"));
                        std::thread::sleep(TICK);
                    }
                    return;
                }
                Err(e) => {
                    log_line(format_args!("accept: {e}"));
                    std::thread::sleep(TICK);
                    return;
                }
            }
        }
    }

    fn admit(&mut self, stream: TcpStream, peer: SocketAddr) {
        if let Err(e) = stream.set_nonblocking(true) {
            log_line(format_args!("refused {peer}: set_nonblocking: {e}"));
            return;
        }
        if self.pending.len() >= self.shared.opts.max_pending.max(1) {
            self.evict("too many connections in handshake");
        }
        let deadline = Instant::now() + self.shared.opts.hello_timeout;
        self.pending.push(Pending { stream, peer, deadline, buf: Vec::new() });
    }

    /// Drops the oldest pending connection that has sent nothing, else the oldest.
    fn evict(&mut self, why: &str) -> bool {
        let Some(i) =
            self.pending.iter().position(|p| p.buf.is_empty()).or((!self.pending.is_empty()).then_some(0))
        else {
            return false;
        };
        let p = self.pending.remove(i);
        self.refuse(p, &format!("dropped for a newer connection: {why}"));
        true
    }

    /// Refuses the connections whose handshake deadline has passed.
    fn expire(&mut self) {
        let now = Instant::now();
        let timeout = self.shared.opts.hello_timeout;
        let (overdue, keep): (Vec<Pending>, Vec<Pending>) =
            std::mem::take(&mut self.pending).into_iter().partition(|p| p.deadline <= now);
        self.pending = keep;
        for p in overdue {
            let why = p.overdue(timeout);
            self.refuse(p, &why);
        }
    }

    /// Says why (best effort: the frame is small and the socket's buffer empty) and closes.
    fn refuse(&self, mut p: Pending, reason: &str) {
        if self.shared.stopping() {
            return;
        }
        log_line(format_args!("refused {}: {reason}", p.peer));
        if let Ok(b) = wire::encode(&Frame::Refused { reason: reason.to_string() }) {
            let _ = std::io::Write::write_all(&mut p.stream, &b);
        }
        let _ = p.stream.shutdown(Shutdown::Both);
    }

    /// A whole Hello: checked here, then a rank gets its reader thread, an agent goes to the
    /// controller.
    fn hand_over(&mut self, p: Pending, hello: Frame) {
        if let Err(e) = blocking_setup(&p.stream, &self.shared) {
            return self.refuse(p, &format!("socket setup: {e}"));
        }
        let checked = match hello {
            Frame::AgentHello { .. } => {
                hand_to_controller(&p.stream, p.peer, &self.shared, hello).map(|()| None)
            }
            Frame::Hello { token, rank, size, incarnation } => {
                check_hello(&self.shared, &token, rank, size).map(|()| Some((rank, incarnation)))
            }
            other => Err(format!("expected Hello, got {}", other.kind_name())),
        };
        let (rank, incarnation) = match checked {
            Ok(Some(ri)) => ri,
            // The controller owns the agent's connection now.
            Ok(None) => return,
            Err(reason) => return self.refuse(p, &reason),
        };
        let (shared, tx, peer) = (self.shared.clone(), self.tx.clone(), p.peer);
        let stream = match p.stream.try_clone() {
            Ok(s) => s,
            Err(e) => return self.refuse(p, &format!("socket clone: {e}")),
        };
        let spawned = std::thread::Builder::new()
            .name("reverb-boot-conn".into())
            .spawn(move || serve_rank(stream, peer, rank, incarnation, shared, tx));
        match spawned {
            Ok(h) => self.readers.push(h),
            Err(e) => self.refuse(p, &format!("cannot spawn a thread: {e}")),
        }
        self.readers.retain(|h| !h.is_finished());
    }
}

/// The socket as the reader and the controller use it: blocking, with the tick as read timeout.
fn blocking_setup(stream: &TcpStream, shared: &Shared) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(TICK))?;
    stream.set_write_timeout(Some(shared.opts.io_timeout))?;
    stream.set_nodelay(true)
}

/// A rank's Hello against the job: token first, then size and rank.
fn check_hello(shared: &Shared, token: &[u8], rank: u32, size: u32) -> Result<(), String> {
    if !wire::ct_eq(token, &shared.token) {
        return Err(format!("wrong job token (claimed rank {rank})"));
    }
    if size != shared.size {
        return Err(format!("wrong job size {size} (the job has {})", shared.size));
    }
    if rank >= shared.size {
        return Err(format!("rank {rank} out of range (size {})", shared.size));
    }
    Ok(())
}
