//! Restore: the first level that holds a valid copy (own copy, buddy copy, parity), and the
//! checked read of a slot pair.

use reverb_transport::error::error_chain;
use reverb_transport::{Access, PeerState, Provider, Rank, RemoteRegion};

use super::transfer::Dir;
use super::{alloc, Checkpointer, RestoreSource, Restored};
use crate::error::CkptError;
use crate::image::{self, Epoch, ImageHeader, ImageKind, RestoredImage, HEADER_LEN};

impl Checkpointer {
    /// Restores `rank`'s checkpoint of `epoch` from the first level that has a valid copy:
    /// its own level-1 copy (if alive), its buddy's copy, then Reed-Solomon reconstruction.
    /// Never returns unchecked bytes: every candidate passes the header and chunk CRC32Cs.
    pub fn restore(
        &mut self,
        provider: &mut dyn Provider,
        rank: Rank,
        epoch: Epoch,
    ) -> Result<Restored, CkptError> {
        if rank as usize >= self.peers.len() {
            return Err(CkptError::InvalidArgument(format!("rank {rank} is not in this job")));
        }
        let mut skipped = Vec::new();
        let expect = (ImageKind::Data, rank, epoch);
        if rank == self.me || provider.peer_state(rank) == PeerState::Alive {
            match self.read_slots(
                provider,
                rank,
                &self.peers[rank as usize].local.clone(),
                0,
                self.config.slot_len,
                expect,
            ) {
                Ok((image, _)) => return Ok(Restored { image, source: RestoreSource::Local, skipped }),
                Err(e) => skipped.push(("level 1 (own copy)", e)),
            }
        } else {
            skipped
                .push(("level 1 (own copy)", CkptError::PeerDead { rank, during: "reading its own copy" }));
        }
        if self.config.buddy {
            match self.restore_from_buddy(provider, rank, epoch) {
                Ok((image, buddy)) => {
                    return Ok(Restored { image, source: RestoreSource::Buddy(buddy), skipped })
                }
                Err(e) => skipped.push(("level 2 (buddy copy)", e)),
            }
        }
        if self.placement.group_of(rank).is_some() {
            match self.restore_from_parity(provider, rank, epoch) {
                Ok((image, source)) => return Ok(Restored { image, source, skipped }),
                Err(e) => skipped.push(("level 3 (Reed-Solomon)", e)),
            }
        }
        let attempts = skipped
            .iter()
            .map(|(level, e)| format!("{level}: {}", error_chain(e)))
            .collect::<Vec<_>>()
            .join("; ");
        Err(CkptError::Unrecoverable {
            rank,
            epoch,
            attempts: if attempts.is_empty() { "no level configured".into() } else { attempts },
        })
    }

    fn restore_from_buddy(
        &mut self,
        provider: &mut dyn Provider,
        rank: Rank,
        epoch: Epoch,
    ) -> Result<(RestoredImage, Rank), CkptError> {
        let buddy = self.placement.buddy_of(rank).ok_or(CkptError::InvalidArgument("no buddy".into()))?;
        if buddy != self.me && provider.peer_state(buddy) == PeerState::Dead {
            return Err(CkptError::PeerDead { rank: buddy, during: "reading the buddy copy" });
        }
        let remote = self.peers[buddy as usize]
            .hosted
            .ok_or_else(|| CkptError::InvalidArgument(format!("rank {buddy} keeps no copies")))?;
        let index = self.placement.clients_of(buddy).iter().position(|&c| c == rank).ok_or_else(|| {
            CkptError::InvalidArgument(format!("rank {buddy} does not keep rank {rank}'s copy"))
        })?;
        let base = self.hosted_offset(index, 0) as usize;
        let (image, _) = self.read_slots(
            provider,
            buddy,
            &remote,
            base,
            self.config.slot_len,
            (ImageKind::Data, rank, epoch),
        )?;
        Ok((image, buddy))
    }

    /// Reads the slot pair at `base` of `remote` (owned by `owner`) and returns the slot holding
    /// the expected image, checked. Reads locally when `owner` is this rank.
    pub(super) fn read_slots(
        &self,
        provider: &mut dyn Provider,
        owner: Rank,
        remote: &RemoteRegion,
        base: usize,
        slot_len: usize,
        expect: (ImageKind, Rank, Epoch),
    ) -> Result<(RestoredImage, Vec<u8>), CkptError> {
        let what = |slot: usize| format!("rank {owner}'s copy of rank {} (slot {slot})", expect.1);
        let mut errors = Vec::new();
        for slot in 0..2 {
            let at = base + slot * slot_len;
            let header_bytes = self.fetch(provider, owner, remote, at, HEADER_LEN)?;
            let header = match ImageHeader::parse(&header_bytes, &what(slot)) {
                Ok(h) => h,
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            if header.epoch != expect.2 || header.rank != expect.1 || header.kind != expect.0 {
                errors.push(CkptError::WrongEpoch {
                    what: what(slot),
                    rank: expect.1,
                    epoch: expect.2,
                    found_rank: header.rank,
                    found_epoch: header.epoch,
                });
                continue;
            }
            // A header promising more than the slot holds is a truncated copy.
            let len = header.image_len().min(slot_len);
            let bytes = self.fetch(provider, owner, remote, at, len)?;
            return image::validate_image(&bytes, &what(slot), expect).map(|image| (image, bytes));
        }
        // Prefer an integrity error over "other epoch" when both slots failed.
        let pick = errors.iter().position(|e| !matches!(e, CkptError::WrongEpoch { .. })).unwrap_or(0);
        Err(errors.swap_remove(pick))
    }

    /// Copies `len` bytes at `offset` of a (possibly remote) region into a fresh buffer.
    fn fetch(
        &self,
        provider: &mut dyn Provider,
        owner: Rank,
        remote: &RemoteRegion,
        offset: usize,
        len: usize,
    ) -> Result<Vec<u8>, CkptError> {
        if owner == self.me {
            let region = [Some(&self.local), self.hosted.as_ref(), self.parity.as_ref()]
                .into_iter()
                .flatten()
                .find(|r| r.remote() == *remote)
                .ok_or(CkptError::InvalidArgument("no such local region".into()))?;
            return region.to_vec(offset, len).map_err(|e| CkptError::transport("reading a local slot", e));
        }
        let staging = alloc(provider, len, Access::LOCAL, "registering a restore buffer")?;
        self.transfer(provider, Dir::Get, &staging, 0, remote, offset as u64, len)?;
        staging.to_vec(0, len).map_err(|e| CkptError::transport("reading a restore buffer", e))
    }
}
