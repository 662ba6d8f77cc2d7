//! Endpoints opened by address instead of through a job's bootstrap (the libfabric way:
//! `fi_getname` on one side, `fi_av_insert` on the other).
//!
//! An endpoint's address is its listening socket plus a random key, which is also its
//! identity. It is rank 0 to itself; every peer it dials ([`Core::connect_peer`]) or that
//! dials it gets the next rank, so ranks are local numbers. A dialer presents its hello (the
//! listener's key) and then an intro with its own address, so the listener files the peer
//! under its key at once: a receiver needs no address of its senders, and connecting to one
//! later returns the rank its first message came with. When two endpoints dial each other
//! at once, each writes on the connection it dialled and reads both (`Peer::second`).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::time::Duration;

use super::conn::{Read1, Rx, Tx};
use super::connect::{self, Handshake};
use super::core::{Core, Link, Peer};
use super::io::READ_BUDGET;
use super::wire::{self, Address, Hello};
use crate::api::Rank;
use crate::bootstrap::JobInfo;
use crate::config::TransportConfig;
use crate::error::{Result, TransportError};
use crate::subcore::SubCore;

/// Peers one endpoint may know (ranks are never reused: a new endpoint has a new key).
pub const MAX_PEERS: usize = 1 << 16;
/// The shortest bound on dialling a peer (the peer timeout when longer).
const MIN_DIAL: Duration = Duration::from_secs(2);

/// The address to listen on: `REVERB_TCP_ADDR`, else `REVERB_TCP_IFACE`'s IPv4 address, else
/// the one this host routes out of (no packet is sent), else loopback.
fn listen_ip(config: &TransportConfig) -> Result<IpAddr> {
    if let Some(ip) = config.tcp_addr {
        return Ok(ip);
    }
    if let Some(iface) = &config.tcp_iface {
        return super::iface::ipv4_of(iface).map(IpAddr::V4);
    }
    let routed = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))
        .and_then(|s| s.connect((Ipv4Addr::new(192, 0, 2, 1), 9)).map(|()| s))
        .and_then(|s| s.local_addr())
        .map(|a| a.ip());
    Ok(routed.ok().filter(|ip| !ip.is_unspecified()).unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST)))
}

impl Core {
    /// An endpoint that peers reach by its address (see the module doc).
    pub(super) fn by_address(config: TransportConfig, core: SubCore) -> Result<Core> {
        config.validate()?;
        let job = JobInfo::single("tcp-by-address");
        let ip = listen_ip(&config)?;
        let mut p = Core::create_at(config, job, ip, core)?;
        p.book = Some(HashMap::new());
        Ok(p)
    }

    /// This endpoint's address; `Unsupported` for a job's rank.
    pub(super) fn peer_address(&self) -> Result<Vec<u8>> {
        match self.book {
            Some(_) => Ok(self.address.clone()),
            None => Err(TransportError::Unsupported("peer addresses of a job's tcp rank".into())),
        }
    }

    /// The rank of the endpoint at `address`, dialling it the first time. `Malformed` for
    /// bytes that are no address, `PeerDead` for an endpoint that is gone or nobody there.
    pub(super) fn connect_peer(&mut self, bytes: &[u8]) -> Result<Rank> {
        if self.book.is_none() {
            return Err(TransportError::Unsupported("connecting by address to a job's tcp rank".into()));
        }
        let address = Address::decode(bytes, wire::BY_ADDRESS)?;
        if address.key == self.key {
            return Ok(self.job.rank);
        }
        // A connection it opened to us may be waiting: use it rather than dial a second one.
        self.poll_accepts();
        if let Some(rank) = self.rank_of(address.key) {
            self.live(rank)?;
            return Ok(rank);
        }
        let rank = self.add_peer(address.key)?;
        let mut first = wire::hello(&Hello { rank: wire::BY_ADDRESS, incarnation: 0, key: address.key });
        let own = Address::decode(&self.address, self.job.rank)?;
        first.extend_from_slice(&wire::intro(&own));
        let timeout = self.config.peer_timeout.max(MIN_DIAL);
        match connect::dial_with(address.socket, rank, &first, &self.config, timeout) {
            Ok(stream) => {
                self.watch.add(&stream);
                self.peers[rank as usize].link = Link::Up(stream);
                Ok(rank)
            }
            Err(e) => {
                // The rank was the last one added, under this lock: take it back.
                self.peers.pop();
                self.job.size -= 1;
                if let Some(book) = &mut self.book {
                    book.remove(&address.key);
                }
                Err(e)
            }
        }
    }

    fn rank_of(&self, key: u64) -> Option<Rank> {
        self.book.as_ref().and_then(|b| b.get(&key).copied())
    }

    /// A new rank for the endpoint whose key is `key`, Dead until its link is set.
    fn add_peer(&mut self, key: u64) -> Result<Rank> {
        if self.peers.len() >= MAX_PEERS {
            return Err(TransportError::Config(format!("tcp: an endpoint knows at most {MAX_PEERS} peers")));
        }
        let rank = self.peers.len() as Rank;
        self.peers.push(Peer {
            incarnation: 0,
            known: true,
            link: Link::Dead,
            tx: Tx::default(),
            rx: Rx::new(self.max_body),
            second: None,
        });
        self.job.size += 1;
        if let Some(book) = &mut self.book {
            book.insert(key, rank);
        }
        Ok(rank)
    }

    /// An accepted connection of an endpoint dialling by address: a new peer, or the second
    /// connection of one this endpoint dialled meanwhile.
    pub(super) fn route_intro(&mut self, hello: Hello, h: Handshake) -> Result<()> {
        if hello.rank != wire::BY_ADDRESS {
            return Err(TransportError::Malformed {
                what: "tcp hello",
                detail: format!("rank {} dialled an endpoint opened by address", hello.rank),
            });
        }
        let address = wire::decode_intro(h.intro())?;
        let stream = h.into_stream(self.config.peer_timeout)?;
        let rank = match self.rank_of(address.key) {
            Some(rank) => rank,
            None => self.add_peer(address.key)?,
        };
        self.watch.add(&stream);
        let peer = &mut self.peers[rank as usize];
        match peer.link {
            Link::Dead if peer.second.is_none() && peer.tx.is_empty() => {
                peer.link = Link::Up(stream);
            }
            Link::Up(_) if peer.second.is_none() => peer.second = Some((stream, Rx::new(self.max_body))),
            _ => {
                return Err(TransportError::Malformed {
                    what: "tcp hello",
                    detail: format!("a third connection from rank {rank}"),
                })
            }
        }
        Ok(())
    }

    /// Reads and handles what arrived on `rank`'s second connection; its end is the peer's.
    pub(super) fn pump_second(&mut self, rank: Rank) {
        let Some((mut stream, mut rx)) = self.peers[rank as usize].second.take() else { return };
        let mut read = 0;
        while read < READ_BUDGET {
            match rx.read(&mut stream) {
                Ok(Read1::Idle) => break,
                Ok(Read1::Bytes(n)) => {
                    read += n;
                    self.bytes_read += n as u64;
                }
                Ok(Read1::Eof) => return self.lost(rank, std::io::ErrorKind::UnexpectedEof.into()),
                Err(e) => return self.lost(rank, e),
            }
            if !self.handle_frames(rank, &mut rx) {
                return;
            }
        }
        let peer = &mut self.peers[rank as usize];
        if peer.alive() {
            peer.second = Some((stream, rx));
        }
        self.kick(rank);
    }
}
