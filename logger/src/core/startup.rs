//! How a logger starts: the loggers' start-up exchange (a collective: heartbeat regions and
//! hosted rings), or hellos with every related logger for a respawned logger and when a
//! logger was lost during the exchange.

use reverb_transport::codec::{CodecError, Reader, Writer};
use reverb_transport::{Rank, RemoteRegion, TransportError};

use super::fault;
use super::peers::PeerLife;
use super::segment::{self, DeathCause, Status};
use super::session::Session;
use super::CoreError;
use crate::logring::LogRingWriter;

impl Session<'_> {
    /// Learns the related loggers' heartbeat regions and the buddy's ring, one way or the other.
    pub(super) fn start_up(&mut self) -> Result<(), CoreError> {
        if self.boot.job().incarnation > 0 {
            // A respawned logger: the others are running, so no collective. Each related
            // logger answers our hello with its heartbeat region and our new ring.
            self.hello_to_all(None);
            self.core.segment.set(Status::BuddyState, segment::BUDDY_UNKNOWN);
            tracing::info!(
                "reverb logger-core node {}: incarnation {} rejoined; awaiting the hellos of nodes {:?}",
                self.me,
                self.boot.job().incarnation,
                self.related
            );
            return Ok(());
        }
        let mine = encode_contribution(&self.heartbeat_in.remote(), &self.hosted_remotes());
        match self.start_up_exchange(&mine)? {
            Ok(all) => self.apply_exchange(&all),
            Err(lost) => {
                self.fall_back_to_hellos(lost);
                Ok(())
            }
        }
    }

    fn hosted_remotes(&self) -> Vec<(Rank, RemoteRegion)> {
        self.hosted.iter().map(|(c, ring)| (*c, ring.remote())).collect()
    }

    /// Marks every related logger awaited and says hello to each but `skip`.
    fn hello_to_all(&mut self, skip: Option<Rank>) {
        let incarnation = self.boot.job().incarnation;
        let heartbeat = self.heartbeat_in.remote();
        for w in self.watched.iter_mut() {
            if w.life == PeerLife::Alive {
                w.life = PeerLife::Awaiting;
            }
            w.hello_sent = Some(w.incarnation);
            if Some(w.node) == skip {
                continue;
            }
            self.hellos.send_or_await(self.provider, self.me, w.node, incarnation, &heartbeat, &self.hosted);
        }
    }

    /// A logger failed during the start-up exchange, a collective its respawned incarnation
    /// never joins: trade hellos with every related logger instead, as a respawned one does.
    /// The others that fell back answer alike; the lost one's next incarnation says hello
    /// once the launcher has restarted it.
    fn fall_back_to_hellos(&mut self, lost: Rank) {
        tracing::warn!(
            "reverb logger-core node {}: node {lost} failed during the loggers' start-up exchange; trading \
             hellos with nodes {:?} instead",
            self.me,
            self.related
        );
        self.report_dead(lost, "lost during the loggers' start-up exchange", DeathCause::Transport);
        self.hello_to_all(Some(lost));
        if self.core.segment.get(Status::BuddyState) != segment::BUDDY_REJOINING {
            self.core.segment.set(Status::BuddyState, segment::BUDDY_UNKNOWN);
        }
    }

    /// Every logger's contribution: the heartbeat regions, and the ring our buddy hosts for us.
    fn apply_exchange(&mut self, all: &[Vec<u8>]) -> Result<(), CoreError> {
        let (me, target) = (self.me, self.target);
        let parsed: Vec<(RemoteRegion, Vec<(Rank, RemoteRegion)>)> =
            all.iter().map(|b| parse_contribution(b)).collect::<Result<_, _>>()?;
        let nodes = self.boot.job().size;
        if parsed.len() != nodes as usize {
            return Err(CoreError::Malformed {
                what: "loggers' exchange",
                detail: format!("{} contributions for {nodes} nodes", parsed.len()),
            });
        }
        let ring_remote = parsed
            .get(target as usize)
            .and_then(|(_, rings)| rings.iter().find(|(c, _)| *c == me))
            .map(|(_, r)| *r)
            .ok_or_else(|| CoreError::Malformed {
                what: "loggers' exchange",
                detail: format!("node {target} hosts no ring for node {me}"),
            })?;
        self.path.writer = Some(LogRingWriter::new(self.provider, ring_remote)?);
        self.path.remote = Some(ring_remote);
        for w in self.watched.iter_mut() {
            w.heartbeat_region = Some(parsed[w.node as usize].0);
        }
        self.core.segment.set(Status::BuddyState, segment::BUDDY_ALIVE);
        Ok(())
    }

    /// The loggers' start-up exchange (a collective): every contribution, or the logger lost
    /// during it (`Err`) when the launcher respawns failed nodes. A logger already lost or
    /// back at a newer incarnation before it begins is taken as lost during it too: its new
    /// incarnation never joins the collective. With fault injection, `REVERB_LOGGER_FAULT_STARTUP=NODE`
    /// makes that node's first incarnation SIGKILL itself here, once its ranks have attached.
    fn start_up_exchange(&mut self, mine: &[u8]) -> Result<Result<Vec<Vec<u8>>, Rank>, CoreError> {
        let me = self.me;
        let cfg = &self.core.cfg;
        fault::startup_exchange(&self.core.segment, me, self.boot.job().incarnation, cfg.rejoin_timeout)?;
        if cfg.expect_rejoin {
            let gone = self
                .boot
                .lookup()?
                .into_iter()
                .find(|a| a.rank != me && (a.address.is_none() || a.incarnation > 0));
            if let Some(a) = gone {
                return Ok(Err(a.rank));
            }
        }
        match self.boot.allgather(mine) {
            Ok(all) => Ok(Ok(all)),
            Err(TransportError::PeerDead(lost)) if cfg.expect_rejoin => Ok(Err(lost)),
            Err(e) => Err(e.into()),
        }
    }
}

/// Our contribution to the exchange (the layout `parse_contribution` reads).
fn encode_contribution(heartbeat: &RemoteRegion, hosted: &[(Rank, RemoteRegion)]) -> Vec<u8> {
    let mut mine =
        Vec::with_capacity(RemoteRegion::WIRE_LEN + 4 + hosted.len() * (4 + RemoteRegion::WIRE_LEN));
    let mut w = Writer::new(&mut mine);
    heartbeat.write(&mut w);
    w.u32(hosted.len() as u32);
    for (c, ring) in hosted {
        w.u32(*c);
        ring.write(&mut w);
    }
    mine
}

/// `heartbeat descriptor | u32 count | count × (u32 client node | ring descriptor)`.
fn parse_contribution(bytes: &[u8]) -> Result<(RemoteRegion, Vec<(Rank, RemoteRegion)>), CoreError> {
    const WHAT: &str = "logger exchange";
    let mut r = Reader::new(bytes, WHAT);
    let heartbeat = RemoteRegion::read(&mut r)?;
    let count = r.u32("count")? as usize;
    // Checked before allocating: the count is the peer's word.
    if r.remaining() != count.saturating_mul(4 + RemoteRegion::WIRE_LEN) {
        let detail = format!("{} bytes for {count} rings", r.remaining());
        return Err(CoreError::Malformed { what: WHAT, detail });
    }
    let rings = (0..count)
        .map(|_| Ok((r.u32("client node")?, RemoteRegion::read(&mut r)?)))
        .collect::<Result<_, CodecError>>()?;
    Ok((heartbeat, rings))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn region(key: u64) -> RemoteRegion {
        RemoteRegion { owner: 1, addr: 0x1000 * key, len: 4096, key }
    }

    #[test]
    fn exchange_parses_and_rejects_garbage() {
        let mut bytes = region(1).to_bytes().to_vec();
        bytes.extend_from_slice(&2u32.to_le_bytes());
        for (node, key) in [(0u32, 2u64), (3, 3)] {
            bytes.extend_from_slice(&node.to_le_bytes());
            bytes.extend_from_slice(&region(key).to_bytes());
        }
        assert_eq!(encode_contribution(&region(1), &[(0, region(2)), (3, region(3))]), bytes, "pinned");
        let (hb, rings) = parse_contribution(&bytes).unwrap();
        assert_eq!(hb, region(1));
        assert_eq!(rings, vec![(0, region(2)), (3, region(3))]);
        for cut in [0, 10, RemoteRegion::WIRE_LEN + 3, bytes.len() - 1] {
            assert!(parse_contribution(&bytes[..cut]).is_err(), "cut {cut}");
        }
        let mut lying = bytes.clone();
        lying[RemoteRegion::WIRE_LEN] = 200; // claims 200 rings
        assert!(parse_contribution(&lying).is_err());
    }

    fn any_region() -> impl Strategy<Value = RemoteRegion> {
        any::<(u32, u64, u64, u64)>().prop_map(|(owner, addr, len, key)| RemoteRegion {
            owner,
            addr,
            len,
            key,
        })
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..160), count in 0u32..4) {
            let _ = parse_contribution(&bytes);
            let mut framed = region(1).to_bytes().to_vec();
            framed.extend_from_slice(&count.to_le_bytes());
            framed.extend_from_slice(&bytes);
            let _ = parse_contribution(&framed);
        }

        #[test]
        fn round_trips(heartbeat in any_region(), hosted in prop::collection::vec((any::<u32>(), any_region()), 0..6)) {
            let bytes = encode_contribution(&heartbeat, &hosted);
            prop_assert_eq!(parse_contribution(&bytes).unwrap(), (heartbeat, hosted));
        }
    }
}
