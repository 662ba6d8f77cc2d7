//! [`TcpBootstrap`]: a rank's connection to the rendezvous and its collectives.

use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use super::server::BootServer;
use super::{IDLE_TICK, TICK};
use crate::bootstrap::env::BootParams;
use crate::bootstrap::wire::{self, Frame, Read1, Wait};
use crate::bootstrap::{Bootstrap, JobInfo, PeerAddress, Rejoin};
use crate::error::{IoContext, Result, TransportError};

/// How often a collective that keeps this rank waiting says so.
const SLOW_NOTE_EVERY: Duration = Duration::from_secs(3);

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
        // Idle waits tick slowly (a deadline is overshot by at most IDLE_TICK); a nearer one sets the tick.
        let tick = deadline.saturating_duration_since(Instant::now()).clamp(TICK, IDLE_TICK);
        self.stream.set_read_timeout(Some(tick)).context(|| "bootstrap: set_read_timeout".into())?;
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
                None
                | Some(Read1::Frame(Frame::Gathered { .. } | Frame::Uniform { .. } | Frame::Abort { .. })) => {
                }
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

    /// A uniform result as one part per rank; bounded like a Gathered frame's parts.
    fn expand(&self, count: u32, part: Vec<u8>) -> Result<Vec<Vec<u8>>> {
        let total = (count as usize).saturating_mul(4 + part.len());
        if count != self.job.size || total > wire::MAX_FRAME {
            return Err(TransportError::Malformed {
                what: "allgather result",
                detail: format!(
                    "uniform result of {count} parts of {} bytes for {} ranks",
                    part.len(),
                    self.job.size
                ),
            });
        }
        Ok(vec![part; count as usize])
    }

    /// The round's reply within the boot timeout; a round that keeps this rank waiting says so
    /// every few seconds (a stalled job's log then shows who waits where).
    fn reply_noting_delay(&mut self, round: u64) -> Result<Read1> {
        let start = Instant::now();
        let deadline = start + self.timeout;
        loop {
            let slice = (Instant::now() + SLOW_NOTE_EVERY).min(deadline);
            match self.next_reply(slice) {
                Err(TransportError::Timeout(_)) if slice < deadline => {
                    let waited = start.elapsed().as_secs();
                    tracing::info!(
                        "bootstrap: rank {}: allgather round {round} still waiting ({waited} s)",
                        self.job.rank
                    );
                }
                other => return other,
            }
        }
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
        let reply = match self.reply_noting_delay(round) {
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
            Read1::Frame(Frame::Uniform { round: r, count, part }) if r == round => {
                let parts = self.expand(count, part)?;
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

    fn local_ip(&self) -> Option<std::net::IpAddr> {
        self.stream.local_addr().ok().map(|a| a.ip())
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
                Read1::Frame(Frame::Gathered { .. } | Frame::Uniform { .. } | Frame::Abort { .. }) => {}
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
                Ok(Some(Read1::Frame(
                    Frame::Gathered { .. } | Frame::Uniform { .. } | Frame::Abort { .. },
                ))) => {}
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
