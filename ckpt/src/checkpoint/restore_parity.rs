//! Level-3 restore: Reed-Solomon reconstruction of a lost member from its group's surviving
//! images and parity blocks.

use reverb_transport::{PeerState, Provider, Rank, RemoteRegion};

use super::parity_meta::{ParityBlocks, ParityMeta, META_ID, SHARD_ID};
use super::{Checkpointer, RestoreSource};
use crate::error::CkptError;
use crate::image::{self, Epoch, ImageKind, RestoredImage};
use crate::placement::Group;
use crate::rs::ParityCodec;

impl Checkpointer {
    pub(super) fn restore_from_parity(
        &mut self,
        provider: &mut dyn Provider,
        rank: Rank,
        epoch: Epoch,
    ) -> Result<(RestoredImage, RestoreSource), CkptError> {
        let group: Group =
            self.placement.group_of(rank).cloned().ok_or(CkptError::InvalidArgument("no group".into()))?;
        let (k, m) = (group.members.len(), group.parity_hosts.len());
        let lost_index =
            group.index_of(rank).ok_or(CkptError::InvalidArgument("rank not in its group".into()))?;
        let mut notes = Vec::new();
        // Parity blocks first: their metadata names the members' image lengths.
        let ParityBlocks { blocks: parity, meta, hosts: hosts_used } =
            self.read_parity_blocks(provider, &group, epoch, &mut notes)?;
        let Some(meta) = meta else {
            return Err(CkptError::Unrecoverable { rank, epoch, attempts: notes.join("; ") });
        };
        let codec = ParityCodec::new(k, m)?;
        if codec.format() != meta.format {
            return Err(CkptError::UnknownParityFormat(meta.format.version_byte()));
        }
        let (mut shards, members_used) =
            self.read_data_shards(provider, &group, lost_index, &meta, epoch, &mut notes);
        shards.extend(parity);
        let present = shards.iter().filter(|s| s.is_some()).count();
        if present < k {
            notes.push(format!("{present} of {} shards survive, {k} needed", k + m));
            return Err(CkptError::Unrecoverable { rank, epoch, attempts: notes.join("; ") });
        }
        codec.reconstruct(&mut shards)?;
        let rebuilt = shards[lost_index].take().unwrap_or_default();
        let len = meta.members[lost_index].1.min(rebuilt.len());
        let image = image::validate_image(
            &rebuilt[..len],
            "Reed-Solomon reconstruction",
            (ImageKind::Data, rank, epoch),
        )?;
        Ok((image, RestoreSource::Parity { members: members_used, parity_hosts: hosts_used }))
    }

    /// Reads the group's parity blocks of `epoch` from their live hosts. What failed goes into
    /// `notes`.
    fn read_parity_blocks(
        &self,
        provider: &mut dyn Provider,
        group: &Group,
        epoch: Epoch,
        notes: &mut Vec<String>,
    ) -> Result<ParityBlocks, CkptError> {
        let m = group.parity_hosts.len();
        let mut parity: Vec<Option<Vec<u8>>> = vec![None; m];
        let mut meta: Option<ParityMeta> = None;
        let mut hosts_used = Vec::new();
        for (p, &host) in group.parity_hosts.iter().enumerate() {
            if host != self.me && provider.peer_state(host) == PeerState::Dead {
                notes.push(format!("parity host {host} dead"));
                continue;
            }
            let remote = self.peers[host as usize].parity.ok_or_else(|| {
                CkptError::InvalidArgument(format!("parity host {host} registered no slots"))
            })?;
            match self.read_parity_block(provider, group, p, host, &remote, epoch) {
                Ok((parsed, shard)) => {
                    if meta.as_ref().is_some_and(|known| {
                        known.members != parsed.members || known.shard_len != parsed.shard_len
                    }) {
                        notes.push(format!("parity block {p} disagrees with the others"));
                        continue;
                    }
                    meta.get_or_insert(parsed);
                    parity[p] = Some(shard);
                    hosts_used.push(host);
                }
                Err(e) => notes.push(format!("parity block {p} on rank {host}: {e}")),
            }
        }
        Ok(ParityBlocks { blocks: parity, meta, hosts: hosts_used })
    }

    /// Reads parity block `p` from `host` and checks that its metadata describes `group`.
    fn read_parity_block(
        &self,
        provider: &mut dyn Provider,
        group: &Group,
        p: usize,
        host: Rank,
        remote: &RemoteRegion,
        epoch: Epoch,
    ) -> Result<(ParityMeta, Vec<u8>), CkptError> {
        let m = group.parity_hosts.len();
        let (image, _) = self.read_slots(
            provider,
            host,
            remote,
            0,
            self.parity_slot_len,
            (ImageKind::Parity, host, epoch),
        )?;
        let what = format!("parity block {p} on rank {host}");
        let parsed = ParityMeta::parse(image.entry(META_ID).unwrap_or(&[]), &what)?;
        let shard = image.entry(SHARD_ID).unwrap_or(&[]).to_vec();
        let expected: Vec<Rank> = parsed.members.iter().map(|&(r, _)| r).collect();
        if parsed.index != p
            || parsed.parity_shards != m
            || expected != group.members
            || shard.len() != parsed.shard_len
        {
            return Err(CkptError::HeaderCorrupt {
                what,
                detail: "metadata does not match the group".into(),
            });
        }
        Ok((parsed, shard))
    }

    /// Reads the surviving members' images of `epoch` as data shards (`None` for the lost member
    /// and for any image that is unreadable or not the length the parity names), and the members
    /// read. What failed goes into `notes`.
    fn read_data_shards(
        &self,
        provider: &mut dyn Provider,
        group: &Group,
        lost_index: usize,
        meta: &ParityMeta,
        epoch: Epoch,
        notes: &mut Vec<String>,
    ) -> (Vec<Option<Vec<u8>>>, Vec<Rank>) {
        let mut shards: Vec<Option<Vec<u8>>> =
            Vec::with_capacity(group.members.len() + group.parity_hosts.len());
        let mut members_used = Vec::new();
        for (i, &member) in group.members.iter().enumerate() {
            if i != lost_index && meta.members[i].1 == 0 {
                // A member retired before this epoch (dead): encoded as zeros, as no image is
                // empty, so its shard is known, not lost.
                shards.push(Some(vec![0; meta.shard_len]));
                continue;
            }
            if i == lost_index || (member != self.me && provider.peer_state(member) == PeerState::Dead) {
                shards.push(None);
                continue;
            }
            let remote = self.peers[member as usize].local;
            let expect = (ImageKind::Data, member, epoch);
            match self.read_slots(provider, member, &remote, 0, self.config.slot_len, expect) {
                Ok((_, mut bytes)) if bytes.len() == meta.members[i].1 => {
                    // A checked image of this epoch: its exact bytes are the data shard.
                    bytes.resize(meta.shard_len, 0);
                    shards.push(Some(bytes));
                    members_used.push(member);
                }
                Ok((_, bytes)) => {
                    let expected = meta.members[i].1;
                    notes.push(format!(
                        "member {member}: image of {} bytes, parity says {expected}",
                        bytes.len()
                    ));
                    shards.push(None);
                }
                Err(e) => {
                    notes.push(format!("member {member}: {e}"));
                    shards.push(None);
                }
            }
        }
        (shards, members_used)
    }
}
