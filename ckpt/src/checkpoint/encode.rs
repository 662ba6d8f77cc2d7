//! Level 3: a group's encoder gathers its members' level-1 images, encodes them and places
//! the parity blocks.

use reverb_transport::{Provider, Rank, Region};

use super::parity_meta::{ParityMeta, META_ID, SHARD_ID};
use super::transfer::Dir;
use super::{shard_stride, Checkpointer};
use crate::error::CkptError;
use crate::image::{self, Epoch, ImageHeader, ImageKind, ProtectSet, HEADER_LEN};
use crate::mem;
use crate::placement::Group;
use crate::rs::ParityCodec;

impl Checkpointer {
    /// Level 3 for this rank's group: only the encoder works; the others return at once.
    /// Inline today; an offload to the node's logger core would take over this step.
    pub(super) fn encode_group(
        &mut self,
        provider: &mut dyn Provider,
        slot: usize,
        epoch: Epoch,
    ) -> Result<(), CkptError> {
        let Some(group) = self.placement.group_of(self.me).cloned() else { return Ok(()) };
        if group.encoder() != Some(self.me) {
            return Ok(());
        }
        let staging =
            self.staging.clone().ok_or(CkptError::InvalidArgument("encoder without staging".into()))?;
        let (k, m) = (group.members.len(), group.parity_hosts.len());
        let slot_len = self.config.slot_len;
        let stride = shard_stride(slot_len);
        let lens = self.gather_group_images(provider, &group, &staging, slot, epoch)?;
        let shard_len = lens.iter().copied().max().unwrap_or(0).div_ceil(64) * 64;
        for (i, &len) in lens.iter().enumerate() {
            mem::bytes_mut(&staging, i * stride + len, shard_len - len)?.fill(0);
        }
        let codec = ParityCodec::new(k, m)?;
        let mut parity: Vec<Vec<u8>> = vec![vec![0u8; shard_len]; m];
        {
            let data: Vec<&[u8]> =
                (0..k).map(|i| mem::bytes(&staging, i * stride, shard_len)).collect::<Result<_, _>>()?;
            let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
            codec.encode(&data, &mut outs)?;
        }
        let members: Vec<(Rank, usize)> = group.members.iter().copied().zip(lens.iter().copied()).collect();
        let parity_base = k * stride;
        for (p, &host) in group.parity_hosts.iter().enumerate() {
            if self.is_retired(host) {
                continue; // its block counts as lost at a restore
            }
            let meta = ParityMeta {
                format: codec.format(),
                parity_shards: m,
                index: p,
                shard_len,
                members: members.clone(),
            }
            .to_bytes();
            let mut set = ProtectSet::new();
            set.protect(META_ID, &meta)?.protect(SHARD_ID, &parity[p])?;
            let at = parity_base + p * self.parity_slot_len;
            let out = mem::bytes_mut(&staging, at, self.parity_slot_len)?;
            let header =
                image::write_image(out, ImageKind::Parity, host, epoch, self.config.chunk_len, &set)?;
            let len = header.image_len();
            self.place_parity_block(provider, &staging, at, len, host, slot)?;
        }
        Ok(())
    }

    /// Copies the group members' level-1 images of `epoch` (own slot `slot`) into `staging`, one
    /// per stride, and returns their lengths.
    fn gather_group_images(
        &mut self,
        provider: &mut dyn Provider,
        group: &Group,
        staging: &Region,
        slot: usize,
        epoch: Epoch,
    ) -> Result<Vec<usize>, CkptError> {
        let slot_len = self.config.slot_len;
        let stride = shard_stride(slot_len);
        let mut lens = Vec::with_capacity(group.members.len());
        for (i, &member) in group.members.iter().enumerate() {
            let at = i * stride;
            if self.is_retired(member) {
                // An empty image: a shard of zeros, which a restore knows without reading.
                lens.push(0);
                continue;
            }
            if member == self.me {
                let bytes = mem::bytes(&self.local, slot * slot_len, slot_len)?;
                let header = ImageHeader::parse(bytes, "own level-1 copy")?;
                let own = bytes.get(..header.image_len()).ok_or(CkptError::Truncated {
                    what: "own level-1 copy".into(),
                    have: slot_len,
                    need: header.image_len(),
                })?;
                mem::bytes_mut(staging, at, own.len())?.copy_from_slice(own);
                lens.push(header.image_len());
                continue;
            }
            let remote = self.peers[member as usize].local;
            let off = (slot * slot_len) as u64;
            self.transfer(provider, Dir::Get, staging, at, &remote, off, HEADER_LEN)?;
            let what = format!("rank {member}'s level-1 copy");
            let header = ImageHeader::parse(mem::bytes(staging, at, HEADER_LEN)?, &what)?;
            if header.epoch != epoch || header.rank != member || header.image_len() > slot_len {
                return Err(CkptError::WrongEpoch {
                    what,
                    rank: member,
                    epoch,
                    found_rank: header.rank,
                    found_epoch: header.epoch,
                });
            }
            let body = header.image_len() - HEADER_LEN;
            self.transfer(
                provider,
                Dir::Get,
                staging,
                at + HEADER_LEN,
                &remote,
                off + HEADER_LEN as u64,
                body,
            )?;
            lens.push(header.image_len());
        }
        Ok(lens)
    }

    /// Writes parity block image `at..at + len` of `staging` into `host`'s parity slot `slot`:
    /// the header cleared first and written last, so a torn write never reads as valid.
    fn place_parity_block(
        &mut self,
        provider: &mut dyn Provider,
        staging: &Region,
        at: usize,
        len: usize,
        host: Rank,
        slot: usize,
    ) -> Result<(), CkptError> {
        if host == self.me {
            let own =
                self.parity.clone().ok_or(CkptError::InvalidArgument("parity host without slots".into()))?;
            let dst = slot * self.parity_slot_len;
            own.fill(dst, HEADER_LEN, 0).map_err(|e| CkptError::transport("clearing a parity header", e))?;
            mem::bytes_mut(&own, dst + HEADER_LEN, len - HEADER_LEN)?.copy_from_slice(mem::bytes(
                staging,
                at + HEADER_LEN,
                len - HEADER_LEN,
            )?);
            mem::bytes_mut(&own, dst, HEADER_LEN)?.copy_from_slice(mem::bytes(staging, at, HEADER_LEN)?);
            return Ok(());
        }
        let remote = self.peers[host as usize]
            .parity
            .ok_or_else(|| CkptError::InvalidArgument(format!("parity host {host} registered no slots")))?;
        let dst = (slot * self.parity_slot_len) as u64;
        let zero = self.zero_header.clone();
        self.transfer(provider, Dir::Put, &zero, 0, &remote, dst, HEADER_LEN)?;
        self.transfer(
            provider,
            Dir::Put,
            staging,
            at + HEADER_LEN,
            &remote,
            dst + HEADER_LEN as u64,
            len - HEADER_LEN,
        )?;
        self.transfer(provider, Dir::Put, staging, at, &remote, dst, HEADER_LEN)?;
        Ok(())
    }
}
