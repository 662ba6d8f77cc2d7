//! Registering a rank's slots and exchanging their descriptors with the job (`new`, `rejoin`).

use reverb_transport::codec::{CodecError, Reader, Writer};
use reverb_transport::{Access, Bootstrap, Provider, Rank, Region, RemoteRegion};

use super::parity_meta::ParityMeta;
use super::{alloc, shard_stride, CheckpointStats, Checkpointer, CkptConfig};
use crate::error::CkptError;
use crate::image::{self, HEADER_LEN};
use crate::placement::Placement;

/// The regions a peer registered: its own slots, the copies it keeps, its parity slots.
#[derive(Debug, Clone, Copy)]
pub(super) struct PeerRegions {
    pub(super) local: RemoteRegion,
    pub(super) hosted: Option<RemoteRegion>,
    pub(super) parity: Option<RemoteRegion>,
}

const DESC_LEN: usize = 1 + 3 * RemoteRegion::WIRE_LEN + 16;

/// A rank's slot descriptor for the all-gather: `flags | local | hosted | parity | slot_len |
/// chunk_len` (an absent region is written as zeros; a flag bit says which are there).
fn encode_descriptor(regions: [Option<RemoteRegion>; 3], slot_len: usize, chunk_len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(DESC_LEN);
    let mut w = Writer::new(&mut out);
    w.u8(u8::from(regions[1].is_some()) | (u8::from(regions[2].is_some()) << 1));
    for region in regions {
        match region {
            Some(r) => r.write(&mut w),
            None => {
                w.zeros(RemoteRegion::WIRE_LEN);
            }
        }
    }
    w.u64(slot_len as u64).u64(chunk_len as u64);
    out
}

/// [`encode_descriptor`] of this rank's registered regions.
fn own_descriptor(regions: [Option<&Region>; 3], config: &CkptConfig) -> Vec<u8> {
    encode_descriptor(regions.map(|r| r.map(Region::remote)), config.slot_len, config.chunk_len)
}

impl PeerRegions {
    /// Parses `rank`'s slot descriptor (see [`encode_descriptor`]) from the all-gather; its
    /// sizes must match this rank's own descriptor `mine`.
    fn parse(rank: usize, blob: &[u8], mine: &[u8]) -> Result<PeerRegions, CkptError> {
        // A retired rank (a masked copy under partial redundancy) contributes nothing: it
        // keeps no copies any more, and nobody reads its own slots.
        if blob.is_empty() {
            let nothing = RemoteRegion { owner: rank as Rank, addr: 0, len: 0, key: 0 };
            return Ok(PeerRegions { local: nothing, hosted: None, parity: None });
        }
        let malformed = |e: CodecError| {
            CkptError::InvalidArgument(format!(
                "rank {rank} sent a malformed checkpoint slot descriptor: {e}"
            ))
        };
        let mut r = Reader::new(blob, "checkpoint slot descriptor");
        let flags = r.u8("flags").map_err(malformed)?;
        let local = RemoteRegion::read(&mut r).map_err(malformed)?;
        let hosted = RemoteRegion::read(&mut r).map_err(malformed)?;
        let parity = RemoteRegion::read(&mut r).map_err(malformed)?;
        let sizes = r.array::<16>("slot and chunk lengths").map_err(malformed)?;
        r.finish().map_err(malformed)?;
        if mine.len() != DESC_LEN || sizes[..] != mine[DESC_LEN - 16..] {
            return Err(CkptError::InvalidArgument(format!(
                "rank {rank} registered checkpoint slots of another size or chunk length"
            )));
        }
        Ok(PeerRegions {
            local,
            hosted: Some(hosted).filter(|_| flags & 1 != 0),
            parity: Some(parity).filter(|_| flags & 2 != 0),
        })
    }
}

impl Checkpointer {
    /// Collective over the whole job: registers this rank's slots and exchanges descriptors.
    pub fn new(
        provider: &mut dyn Provider,
        boot: &mut dyn Bootstrap,
        config: CkptConfig,
    ) -> Result<Checkpointer, CkptError> {
        let job = boot.job().clone();
        let node_of: Vec<u32> = (0..job.size).map(|r| job.node_of(r)).collect();
        Self::with_buddy_units(provider, boot, config, &node_of)
    }

    /// As `new`, with buddy copies paired over `unit_of_rank` (indexed by rank) instead of
    /// nodes: failure units of whole nodes (teams) keep their copies outside the unit.
    pub fn with_buddy_units(
        provider: &mut dyn Provider,
        boot: &mut dyn Bootstrap,
        config: CkptConfig,
        unit_of_rank: &[u32],
    ) -> Result<Checkpointer, CkptError> {
        if config.slot_len < HEADER_LEN * 2 || config.chunk_len == 0 || config.transfer_len == 0 {
            return Err(CkptError::InvalidArgument(format!(
                "slot_len {} (at least {}), chunk_len {}, transfer_len {} (at least 1)",
                config.slot_len,
                HEADER_LEN * 2,
                config.chunk_len,
                config.transfer_len
            )));
        }
        let job = boot.job().clone();
        let me = provider.rank();
        let node_of: Vec<u32> = (0..job.size).map(|r| job.node_of(r)).collect();
        let placement = Placement::with_buddy_units(&node_of, unit_of_rank, config.parity)?;
        let team = match &config.team {
            None => (0..job.size).collect::<Vec<Rank>>(),
            Some(members) => {
                let mut team = members.clone();
                team.sort_unstable();
                team.dedup();
                if !team.contains(&me) || team.iter().any(|&r| r >= job.size) {
                    return Err(CkptError::InvalidArgument(format!(
                        "rank {me}: team {members:?} must contain this rank and only ranks of the job (size {})",
                        job.size
                    )));
                }
                for &r in &team {
                    if let Some(g) = placement.group_of(r) {
                        if let Some(outside) = g.members.iter().find(|m| !team.contains(m)) {
                            return Err(CkptError::Unsupported(format!(
                                "Reed-Solomon group {:?} of rank {r} reaches rank {outside} outside the team \
                                 {team:?}: teams must hold whole groups (align teams with group_nodes)",
                                g.members
                            )));
                        }
                    }
                }
                team
            }
        };
        let clients = if config.buddy { placement.clients_of(me) } else { Vec::new() };
        let parity_slot_len = image::image_len(
            16 + ParityMeta::max_len() + 16 + shard_stride(config.slot_len),
            config.chunk_len,
        );
        let local = alloc(provider, 2 * config.slot_len, Access::REMOTE_READ, "registering the local slots")?;
        let hosted = if clients.is_empty() {
            None
        } else {
            Some(alloc(
                provider,
                clients.len() * 2 * config.slot_len,
                Access::REMOTE_RW,
                "registering buddy slots",
            )?)
        };
        let group = placement.group_of(me).cloned();
        let parity = match &group {
            Some(g) if g.parity_hosts.contains(&me) => {
                Some(alloc(provider, 2 * parity_slot_len, Access::REMOTE_RW, "registering the parity slots")?)
            }
            _ => None,
        };
        let staging = match &group {
            Some(g) if g.encoder() == Some(me) => Some(alloc(
                provider,
                g.members.len() * shard_stride(config.slot_len) + g.parity_hosts.len() * parity_slot_len,
                Access::LOCAL,
                "registering the encoding staging area",
            )?),
            _ => None,
        };
        let mine = own_descriptor([Some(&local), hosted.as_ref(), parity.as_ref()], &config);
        let all =
            boot.allgather(&mine).map_err(|e| CkptError::transport("exchanging checkpoint slots", e))?;
        let mut peers = Vec::with_capacity(all.len());
        for (rank, blob) in all.iter().enumerate() {
            peers.push(PeerRegions::parse(rank, blob, &mine)?);
        }
        let owner =
            provider.open_owner().map_err(|e| CkptError::transport("opening a completion owner", e))?;
        Ok(Checkpointer {
            me,
            owner,
            team,
            placement,
            local,
            hosted,
            #[cfg(feature = "fault-injection")]
            clients,
            parity,
            parity_slot_len,
            peers,
            committed: None,
            next_epoch: 1,
            staging,
            zero_header: alloc(provider, HEADER_LEN, Access::LOCAL, "registering a header buffer")?,
            #[cfg(feature = "fault-injection")]
            fault_hook: None,
            stats: CheckpointStats::default(),
            retired: Vec::new(),
            config,
        })
    }

    /// Recovery, a survivor's side of the collective a restarted rank runs in
    /// [`Checkpointer::new`]: exchanges slot descriptors again (this rank's regions are
    /// unchanged) and takes the restarted ranks' new ones. The copies this rank keeps stay.
    pub fn rejoin(&mut self, boot: &mut dyn Bootstrap) -> Result<(), CkptError> {
        let mine =
            own_descriptor([Some(&self.local), self.hosted.as_ref(), self.parity.as_ref()], &self.config);
        let all = boot
            .allgather(&mine)
            .map_err(|e| CkptError::transport("exchanging checkpoint slots again", e))?;
        if all.len() != self.peers.len() {
            return Err(CkptError::InvalidArgument(format!(
                "{} slot descriptors for a job of {}",
                all.len(),
                self.peers.len()
            )));
        }
        for (rank, blob) in all.iter().enumerate() {
            self.peers[rank] = PeerRegions::parse(rank, blob, &mine)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn region(owner: Rank, key: u64) -> RemoteRegion {
        RemoteRegion { owner, addr: 0x1000, len: 64, key }
    }

    #[test]
    fn descriptor_bytes_are_pinned() {
        let d = encode_descriptor([Some(region(2, 7)), None, Some(region(2, 9))], 256, 32);
        assert_eq!(d.len(), DESC_LEN);
        assert_eq!(d[0], 0b10, "parity flag only");
        assert_eq!(&d[1..29], &region(2, 7).to_bytes());
        assert_eq!(&d[29..57], &[0; 28]);
        assert_eq!(&d[85..93], &256u64.to_le_bytes());
        assert_eq!(&d[93..101], &32u64.to_le_bytes());
    }

    #[test]
    fn other_sizes_and_malformed_descriptors_are_refused() {
        let mine = encode_descriptor([Some(region(0, 1)), None, None], 256, 32);
        let other = encode_descriptor([Some(region(1, 1)), None, None], 512, 32);
        assert!(matches!(PeerRegions::parse(1, &other, &mine), Err(CkptError::InvalidArgument(_))));
        for cut in [1, DESC_LEN - 1] {
            assert!(matches!(PeerRegions::parse(1, &mine[..cut], &mine), Err(CkptError::InvalidArgument(_))));
        }
        // Empty: a retired rank's part, which keeps nothing.
        let retired = PeerRegions::parse(1, &[], &mine).unwrap();
        assert!(retired.hosted.is_none() && retired.parity.is_none() && retired.local.len == 0);
    }

    fn arb_region() -> impl Strategy<Value = RemoteRegion> {
        (any::<u32>(), any::<u64>(), any::<u64>(), any::<u64>())
            .prop_map(|(owner, addr, len, key)| RemoteRegion { owner, addr, len, key })
    }

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..160)) {
            let mine = encode_descriptor([Some(region(0, 1)), None, None], 256, 32);
            let _ = PeerRegions::parse(3, &bytes, &mine);
        }

        #[test]
        fn round_trips(
            local in arb_region(),
            hosted in proptest::option::of(arb_region()),
            parity in proptest::option::of(arb_region()),
            slot_len in any::<u32>(),
            chunk_len in any::<u32>(),
        ) {
            let (slot_len, chunk_len) = (slot_len as usize, chunk_len as usize);
            let blob = encode_descriptor([Some(local), hosted, parity], slot_len, chunk_len);
            let mine = encode_descriptor([Some(region(0, 1)), None, None], slot_len, chunk_len);
            let got = PeerRegions::parse(1, &blob, &mine).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!((got.local, got.hosted, got.parity), (local, hosted, parity));
        }
    }
}
