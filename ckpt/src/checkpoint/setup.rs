//! Registering a rank's slots and exchanging their descriptors with the job (`new`, `rejoin`).

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

impl PeerRegions {
    /// Parses `rank`'s slot descriptor (`flags | local | hosted | parity | slot_len | chunk_len`)
    /// from the all-gather; its sizes must match this rank's own descriptor `mine`.
    fn parse(rank: usize, blob: &[u8], mine: &[u8]) -> Result<PeerRegions, CkptError> {
        if blob.len() != DESC_LEN || mine.len() != DESC_LEN || blob[DESC_LEN - 16..] != mine[DESC_LEN - 16..]
        {
            return Err(CkptError::InvalidArgument(format!(
                "rank {rank} registered checkpoint slots of another size or chunk length (or sent a \
                 malformed descriptor)"
            )));
        }
        let desc = |i: usize| {
            let at = 1 + i * RemoteRegion::WIRE_LEN;
            RemoteRegion::from_bytes(&blob[at..at + RemoteRegion::WIRE_LEN])
                .map_err(|e| CkptError::transport("reading a checkpoint slot descriptor", e))
        };
        Ok(PeerRegions {
            local: desc(0)?,
            hosted: if blob[0] & 1 != 0 { Some(desc(1)?) } else { None },
            parity: if blob[0] & 2 != 0 { Some(desc(2)?) } else { None },
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
        let mut mine = Vec::with_capacity(DESC_LEN);
        mine.push(u8::from(hosted.is_some()) | (u8::from(parity.is_some()) << 1));
        for region in [Some(&local), hosted.as_ref(), parity.as_ref()] {
            mine.extend_from_slice(&region.map(Region::remote).map(|r| r.to_bytes()).unwrap_or([0; 28]));
        }
        mine.extend_from_slice(&(config.slot_len as u64).to_le_bytes());
        mine.extend_from_slice(&(config.chunk_len as u64).to_le_bytes());
        let all =
            boot.allgather(&mine).map_err(|e| CkptError::transport("exchanging checkpoint slots", e))?;
        let mut peers = Vec::with_capacity(all.len());
        for (rank, blob) in all.iter().enumerate() {
            peers.push(PeerRegions::parse(rank, blob, &mine)?);
        }
        Ok(Checkpointer {
            me,
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
            config,
        })
    }

    /// Recovery, a survivor's side of the collective a restarted rank runs in
    /// [`Checkpointer::new`]: exchanges slot descriptors again (this rank's regions are
    /// unchanged) and takes the restarted ranks' new ones. The copies this rank keeps stay.
    pub fn rejoin(&mut self, boot: &mut dyn Bootstrap) -> Result<(), CkptError> {
        let mut mine = Vec::with_capacity(DESC_LEN);
        mine.push(u8::from(self.hosted.is_some()) | (u8::from(self.parity.is_some()) << 1));
        for region in [Some(&self.local), self.hosted.as_ref(), self.parity.as_ref()] {
            mine.extend_from_slice(&region.map(Region::remote).map(|r| r.to_bytes()).unwrap_or([0; 28]));
        }
        mine.extend_from_slice(&(self.config.slot_len as u64).to_le_bytes());
        mine.extend_from_slice(&(self.config.chunk_len as u64).to_le_bytes());
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
