//! Setting up connections: where to listen, the socket options every connection gets, and
//! the hello that opens each connection (who connects, presenting the key the listener
//! published). One connection per pair of ranks, always opened by the lower rank.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use crate::bootstrap::Bootstrap;
use crate::config::TransportConfig;
use crate::error::{IoContext, Result, TransportError};
use crate::tcp::wire::{self, Frame, Hello};

/// The address to listen on: `REVERB_TCP_ADDR`, else `REVERB_TCP_IFACE`'s IPv4 address,
/// else the address this rank reaches the bootstrap from, else loopback.
pub(crate) fn listen_ip(config: &TransportConfig, boot: &dyn Bootstrap) -> Result<IpAddr> {
    if let Some(ip) = config.tcp_addr {
        return Ok(ip);
    }
    if let Some(iface) = &config.tcp_iface {
        return super::iface::ipv4_of(iface).map(IpAddr::V4);
    }
    Ok(boot.local_ip().filter(|ip| !ip.is_unspecified()).unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST)))
}

/// A nonblocking listener on an ephemeral port of `ip`.
pub(crate) fn listen(ip: IpAddr) -> Result<TcpListener> {
    let listener = TcpListener::bind(SocketAddr::new(ip, 0)).context(|| format!("tcp: listen on {ip}"))?;
    listener.set_nonblocking(true).context(|| "tcp: nonblocking listener".into())?;
    Ok(listener)
}

/// Options of every connection: no Nagle delay (small messages go at once), and keepalive
/// probes plus a user timeout so that a peer host or link that vanished is reported within
/// about the peer timeout even when nothing is being sent (a peer process that exits or dies
/// closes its socket, which is seen at once).
pub(crate) fn configure(stream: &TcpStream, peer_timeout: Duration) -> Result<()> {
    use rustix::net::sockopt;
    let ms = u32::try_from(peer_timeout.as_millis()).unwrap_or(u32::MAX).max(1);
    let idle = Duration::from_secs(peer_timeout.as_secs().max(1));
    sockopt::set_tcp_nodelay(stream, true)
        .and_then(|()| sockopt::set_socket_keepalive(stream, true))
        .and_then(|()| sockopt::set_tcp_keepidle(stream, idle))
        .and_then(|()| sockopt::set_tcp_keepintvl(stream, Duration::from_secs(1)))
        .and_then(|()| sockopt::set_tcp_keepcnt(stream, 3))
        .and_then(|()| sockopt::set_tcp_user_timeout(stream, ms))
        .map_err(io::Error::from)
        .context(|| "tcp: socket options".into())?;
    stream.set_nonblocking(true).context(|| "tcp: nonblocking socket".into())
}

/// Connects to `to`, presents `hello` and returns the configured, nonblocking stream.
/// Bounded by `timeout`; refused or unreachable peers are `PeerDead(rank)`.
pub(crate) fn dial(
    to: SocketAddr,
    rank: u32,
    hello: &Hello,
    config: &TransportConfig,
    timeout: Duration,
) -> Result<TcpStream> {
    dial_with(to, rank, &wire::hello(hello), config, timeout)
}

/// [`dial`], presenting `first` (a hello, and an intro when dialling by address).
pub(crate) fn dial_with(
    to: SocketAddr,
    rank: u32,
    first: &[u8],
    config: &TransportConfig,
    timeout: Duration,
) -> Result<TcpStream> {
    let mut stream = TcpStream::connect_timeout(&to, timeout).map_err(|e| match e.kind() {
        io::ErrorKind::ConnectionRefused | io::ErrorKind::TimedOut | io::ErrorKind::HostUnreachable => {
            TransportError::PeerDead(rank)
        }
        _ => TransportError::io(format!("tcp: connect to rank {rank} at {to}"), e),
    })?;
    stream.set_write_timeout(Some(timeout)).context(|| "tcp: socket timeout".into())?;
    stream.write_all(first).map_err(|_| TransportError::PeerDead(rank))?;
    configure(&stream, config.peer_timeout)?;
    Ok(stream)
}

/// An accepted connection whose hello has not fully arrived.
pub(crate) struct Handshake {
    stream: TcpStream,
    got: Vec<u8>,
    /// Bytes the dialer presents: the hello, plus the intro for endpoints opened by address.
    want: usize,
    since: Instant,
}

/// How long an accepted connection may take to present its hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);

impl Handshake {
    /// Accepts every connection waiting on `listener`; each presents `want` bytes first.
    pub(crate) fn accept_all(listener: &TcpListener, want: usize, out: &mut Vec<Handshake>) -> Result<()> {
        loop {
            match listener.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(true).context(|| "tcp: nonblocking socket".into())?;
                    out.push(Handshake {
                        stream,
                        got: Vec::with_capacity(want),
                        want,
                        since: Instant::now(),
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e)
                    if matches!(e.kind(), io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted) => {}
                Err(e) => return Err(TransportError::io("tcp: accept", e)),
            }
        }
    }

    /// Reads what has arrived of the hello: `Ok(Some)` once whole and valid for a listener
    /// whose key is `key`, `Ok(None)` while incomplete, `Err` for a connection to drop
    /// (closed early, too slow, not a hello, a wrong key).
    pub(crate) fn poll(&mut self, key: u64) -> Result<Option<Hello>> {
        let mut buf = [0u8; wire::HELLO_LEN + wire::INTRO_LEN];
        let want = self.want - self.got.len();
        match self.stream.read(&mut buf[..want]) {
            Ok(0) => return Err(bad_hello("closed before its hello")),
            Ok(n) => self.got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {}
            Err(e) => return Err(TransportError::io("tcp: read a hello", e)),
        }
        if self.got.len() < self.want {
            if self.since.elapsed() > HELLO_TIMEOUT {
                return Err(bad_hello("no hello in time"));
            }
            return Ok(None);
        }
        match wire::decode(&self.got[wire::PREFIX..wire::HELLO_LEN])? {
            Frame::Hello(h) if h.key == key => Ok(Some(h)),
            Frame::Hello(h) => Err(bad_hello(&format!("rank {} presented a wrong key", h.rank))),
            _ => Err(bad_hello("first frame is not a hello")),
        }
    }

    /// What followed the hello (the intro of a dialer by address; empty otherwise).
    pub(crate) fn intro(&self) -> &[u8] {
        &self.got[wire::HELLO_LEN.min(self.got.len())..]
    }

    /// The socket, for `poll`.
    pub(crate) fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.stream.as_fd()
    }

    /// The stream, configured for use.
    pub(crate) fn into_stream(self, peer_timeout: Duration) -> Result<TcpStream> {
        configure(&self.stream, peer_timeout)?;
        Ok(self.stream)
    }
}

fn bad_hello(detail: &str) -> TransportError {
    TransportError::Malformed { what: "tcp hello", detail: detail.to_string() }
}
