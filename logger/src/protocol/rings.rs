//! The buddy rings: the rings a rank hosts for its clients, the writer into its own ring at
//! its buddy, their collective set-up, and where determinants go ([`DeterminantSink`]).

use reverb_transport::codec::Writer;
use reverb_transport::spinwait::SpinWait;
use reverb_transport::{Bootstrap, Provider, Rank, Region, RemoteRegion, TransportConfig};

use super::config::LogConfig;
use crate::buddy::BuddyMap;
use crate::determinant::Determinant;
use crate::detqueue::DetQueue;
use crate::error::{LogError, Result};
use crate::logring::{self, LogRingWriter, RecordKind, RingScan};
use crate::oob::OobCollective;
use crate::stats::LogStats;
use crate::wire::Reader;

/// The ring a rank keeps for one client's log.
#[derive(Debug)]
pub struct HostedRing {
    pub client: Rank,
    pub region: Region,
}

impl HostedRing {
    /// Reads the ring from this rank's own memory and parses it.
    pub fn scan(&self) -> Result<RingScan> {
        logring::scan(&self.region.to_vec(0, self.region.len())?)
    }
}

/// The writer into this rank's ring at its buddy: frames and determinants (receiver-based),
/// or determinants only (sender-based).
#[derive(Debug)]
pub(crate) struct BuddyLog {
    pub buddy: Rank,
    pub writer: LogRingWriter,
}

/// Where this rank's determinants go: the seam the node logger core plugs into.
#[derive(Debug)]
pub enum DeterminantSink {
    /// Written by this rank with one-sided puts into its ring at the buddy; durable once the
    /// put completes.
    BuddyRing,
    /// Pushed into the node's shared queue; the logger core writes them to the buddy node and
    /// acknowledges them (the queue's `start` index passes the entry).
    NodeQueue(DetQueue),
}

/// Encodes this rank's hosted rings for the all-gather: `count u32 | (client u32 | region)*`.
pub(super) fn encode_hosted(hosted: &[HostedRing]) -> Vec<u8> {
    encode_remotes(hosted.iter().map(|h| (h.client, h.region.remote())))
}

/// `count u32 | (client u32 | region)*`, what `find_hosted` reads.
fn encode_remotes(rings: impl ExactSizeIterator<Item = (Rank, RemoteRegion)>) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + rings.len() * (4 + RemoteRegion::WIRE_LEN));
    let mut w = Writer::new(&mut out);
    w.u32(rings.len() as u32);
    for (client, remote) in rings {
        w.u32(client);
        remote.write(&mut w);
    }
    out
}

/// Finds `client`'s ring in what `host` contributed.
pub(super) fn find_hosted(bytes: &[u8], host: Rank, client: Rank) -> Result<RemoteRegion> {
    const WHAT: &str = "hosted ring list";
    let mut r = Reader::new(bytes, WHAT);
    let count = r.u32()?;
    for _ in 0..count {
        let c = r.u32()?;
        let remote = RemoteRegion::from_bytes(r.take(RemoteRegion::WIRE_LEN)?)?;
        if c == client {
            if remote.owner != host {
                return Err(LogError::malformed(
                    WHAT,
                    format!("ring of rank {host} owned by {}", remote.owner),
                ));
            }
            return Ok(remote);
        }
    }
    Err(LogError::malformed(WHAT, format!("buddy {host} hosts no ring for rank {client}")))
}

/// This rank's side of the buddy rings (empty under `none`).
#[derive(Debug, Default)]
pub(super) struct BuddyRings {
    /// The writer into this rank's ring at its buddy.
    pub log: Option<BuddyLog>,
    /// The rings this rank keeps for its clients.
    pub hosted: Vec<HostedRing>,
    /// Rings of restarted clients replaced by `rejoin`: their determinants stay collectable
    /// until the next checkpoint.
    pub retired: Vec<HostedRing>,
    /// Node id of every rank.
    pub node_of_rank: Vec<u32>,
    /// This rank's log buddy was retired from the job (`log` is then None, yet this rank
    /// takes part in the logger's collectives as before).
    pub buddy_retired: bool,
}

impl BuddyRings {
    /// The rings this rank hosts and retired for `client`.
    pub fn held_for(&self, client: Rank) -> impl Iterator<Item = &HostedRing> {
        self.hosted.iter().chain(&self.retired).filter(move |h| h.client == client)
    }
}

/// Collective: every rank's node id. A restarted rank's (or a survivor's) first recovery
/// collective: it may meet ranks in their final barrier.
pub(super) fn gather_node_ids(boot: &mut dyn Bootstrap) -> Result<Vec<u32>> {
    let node = boot.job().node;
    let nodes = boot.allgather_past_final_barrier(&node.to_le_bytes())?;
    let job = boot.job();
    // A retired rank (a masked copy under partial redundancy) contributes nothing: it ran
    // where the launcher's block placement put it.
    let node_of = |(r, b): (usize, &Vec<u8>)| match b.is_empty() {
        true => Ok(job.node_of(r as Rank)),
        false => Reader::new(b, "node id").u32(),
    };
    nodes.iter().enumerate().map(node_of).collect()
}

/// Opens a writer into `client`'s ring at `buddy`, found in the all-gathered hosted lists.
pub(super) fn open_writer_at(
    provider: &mut dyn Provider,
    all: &[Vec<u8>],
    buddy: Rank,
    client: Rank,
) -> Result<LogRingWriter> {
    let theirs = all
        .get(buddy as usize)
        .ok_or_else(|| LogError::malformed("hosted ring list", format!("none from buddy {buddy}")))?;
    LogRingWriter::new(provider, find_hosted(theirs, buddy, client)?)
}

impl BuddyRings {
    /// Picks buddies from the real node ids (team ids for teams of whole nodes), registers the
    /// rings this rank hosts and opens a writer into its own ring at its buddy.
    pub(super) fn set_up(
        provider: &mut dyn Provider,
        boot: &mut dyn Bootstrap,
        config: &LogConfig,
    ) -> Result<Self> {
        let rank = boot.job().rank;
        // A restarted rank's first collective.
        let node_of_rank = gather_node_ids(boot)?;
        // Teams of whole nodes fail as one: buddies are then picked in another team.
        let map = BuddyMap::from_nodes(&config.failure_units(&node_of_rank))?;
        let buddy = map
            .buddy_of(rank)
            .ok_or_else(|| LogError::InvalidArgument(format!("rank {rank} outside the buddy map")))?;
        let hosted = map
            .clients_of(rank)
            .into_iter()
            .map(|client| {
                Ok(HostedRing { client, region: logring::create_ring(provider, config.ring_capacity)? })
            })
            .collect::<Result<Vec<_>>>()?;
        let all = boot.allgather(&encode_hosted(&hosted))?;
        // A retired buddy (a masked copy under partial redundancy) hosts nothing: no log.
        let buddy_retired = all.get(buddy as usize).is_some_and(Vec::is_empty);
        let log = match buddy_retired {
            true => None,
            false => Some(BuddyLog { buddy, writer: open_writer_at(provider, &all, buddy, rank)? }),
        };
        Ok(BuddyRings { log, hosted, retired: Vec::new(), node_of_rank, buddy_retired })
    }
}

impl BuddyLog {
    /// Writes the frame (if any) and the determinant (if any) into the buddy's ring and waits
    /// until both are durable.
    pub(super) fn record(
        &mut self,
        provider: &mut dyn Provider,
        frame: Option<&[u8]>,
        determinant: Option<Determinant>,
        config: &LogConfig,
        stats: &LogStats,
    ) -> Result<()> {
        let mut lens = Vec::with_capacity(2);
        lens.extend(frame.map(<[u8]>::len));
        lens.extend(determinant.map(|_| Determinant::WIRE_LEN));
        if lens.is_empty() {
            return Ok(());
        }
        // Check room for both records first, so a full ring never logs half a delivery.
        let needed = self.writer.bytes_needed(&lens);
        if needed > self.writer.free() {
            self.writer.poll(provider)?;
            if needed > self.writer.free() {
                LogStats::bump(&stats.back_pressure_events, 1);
                return Err(LogError::RingFull { needed, free: self.writer.free() });
            }
        }
        let mut ticket = 0;
        if let Some(frame) = frame {
            ticket = self.writer.append(provider, RecordKind::Payload, frame)?;
            LogStats::bump(&stats.payload_bytes_logged, frame.len() as u64);
        }
        LogStats::bump(&stats.library_bytes_sent, needed);
        if let Some(d) = determinant {
            ticket = self.writer.append_determinants(provider, &[d])?;
            LogStats::bump(&stats.determinant_bytes_logged, Determinant::WIRE_LEN as u64);
            LogStats::bump(&stats.determinants_logged, 1);
            LogStats::bump(&stats.determinant_writes, 1);
        }
        self.writer.wait_durable(provider, ticket, config.durable_timeout)
    }

    /// Writes one determinant into the buddy's ring and waits until it is durable.
    pub(super) fn record_determinant(
        &mut self,
        provider: &mut dyn Provider,
        determinant: Determinant,
        config: &LogConfig,
        stats: &LogStats,
    ) -> Result<()> {
        let needed = self.writer.bytes_needed(&[Determinant::WIRE_LEN]);
        if needed > self.writer.free() {
            self.writer.poll(provider)?;
        }
        let ticket = match self.writer.append_determinants(provider, &[determinant]) {
            Ok(ticket) => ticket,
            Err(e @ LogError::RingFull { .. }) => {
                LogStats::bump(&stats.back_pressure_events, 1);
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        LogStats::bump(&stats.determinant_bytes_logged, Determinant::WIRE_LEN as u64);
        LogStats::bump(&stats.determinants_logged, 1);
        LogStats::bump(&stats.determinant_writes, 1);
        LogStats::bump(&stats.library_bytes_sent, needed);
        self.writer.wait_durable(provider, ticket, config.durable_timeout)
    }
}

/// Sender-based logging through the node queue: pushes the determinant and waits (bounded)
/// until the logger core acknowledged it.
pub(super) fn wait_queue_durable(
    queue: &DetQueue,
    det: Determinant,
    config: &LogConfig,
    transport: &TransportConfig,
    stats: &LogStats,
) -> Result<()> {
    let index = match queue.push(&det) {
        Ok(index) => index,
        Err(e @ LogError::QueueFull { .. }) => {
            LogStats::bump(&stats.back_pressure_events, 1);
            return Err(e);
        }
        Err(e) => return Err(e),
    };
    LogStats::bump(&stats.determinants_logged, 1);
    LogStats::bump(&stats.determinant_writes, 1);
    let mut wait = SpinWait::new(transport, config.durable_timeout);
    queue.wait_taken(index + 1, &mut wait)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hosted_list_round_trips_and_rejects_garbage() {
        let remote = RemoteRegion { owner: 3, addr: 0x1000, len: 4224, key: 9 };
        let mut bytes = 2u32.to_le_bytes().to_vec();
        for client in [1u32, 5] {
            bytes.extend_from_slice(&client.to_le_bytes());
            bytes.extend_from_slice(&remote.to_bytes());
        }
        assert_eq!(encode_remotes([(1, remote), (5, remote)].into_iter()), bytes, "pinned");
        assert_eq!(find_hosted(&bytes, 3, 5).ok(), Some(remote));
        assert!(find_hosted(&bytes, 4, 5).is_err(), "owner must be the host");
        assert!(find_hosted(&bytes, 3, 2).is_err());
        for cut in 0..bytes.len() {
            assert!(find_hosted(&bytes[..cut], 3, 5).is_err(), "cut {cut}");
        }
        assert!(find_hosted(&u32::MAX.to_le_bytes(), 3, 5).is_err());
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..160), client in 0u32..4) {
            let _ = find_hosted(&bytes, 3, client);
        }

        /// Every client's ring comes back from a list of distinct clients.
        #[test]
        fn round_trips(rings in prop::collection::btree_map(any::<u32>(), any::<(u64, u64, u64)>(), 0..6)) {
            let rings: Vec<(Rank, RemoteRegion)> = rings
                .into_iter()
                .map(|(client, (addr, len, key))| (client, RemoteRegion { owner: 3, addr, len, key }))
                .collect();
            let bytes = encode_remotes(rings.iter().copied());
            for (client, remote) in &rings {
                prop_assert_eq!(find_hosted(&bytes, 3, *client).ok(), Some(*remote));
            }
        }
    }
}
