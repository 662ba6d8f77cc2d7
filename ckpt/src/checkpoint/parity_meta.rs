//! The metadata entry of a parity image: the codec format, the block's index and the members'
//! image lengths.

use reverb_transport::Rank;

use crate::error::CkptError;
use crate::rs::ParityFormat;

pub(super) const META_ID: u32 = 0;
pub(super) const SHARD_ID: u32 = 1;

/// Parity metadata stored as entry 0 of a parity image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ParityMeta {
    pub(super) format: ParityFormat,
    pub(super) parity_shards: usize,
    pub(super) index: usize,
    pub(super) shard_len: usize,
    pub(super) members: Vec<(Rank, usize)>,
}

/// What a restore read of a group's parity blocks found.
pub(super) struct ParityBlocks {
    /// Block p, or `None` where unreadable or inconsistent with the others.
    pub(super) blocks: Vec<Option<Vec<u8>>>,
    /// The metadata the readable blocks agree on (`None`: no block was readable).
    pub(super) meta: Option<ParityMeta>,
    /// The hosts whose block was used.
    pub(super) hosts: Vec<Rank>,
}

impl ParityMeta {
    pub(super) fn max_len() -> usize {
        16 + 256 * 12
    }

    pub(super) fn to_bytes(&self) -> Vec<u8> {
        let mut out = vec![self.format.version_byte(), self.members.len() as u8, self.parity_shards as u8];
        out.push(self.index as u8);
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&(self.shard_len as u64).to_le_bytes());
        for &(rank, len) in &self.members {
            out.extend_from_slice(&rank.to_le_bytes());
            out.extend_from_slice(&(len as u64).to_le_bytes());
        }
        out
    }

    pub(super) fn parse(bytes: &[u8], what: &str) -> Result<ParityMeta, CkptError> {
        let bad =
            |detail: &str| CkptError::HeaderCorrupt { what: what.to_string(), detail: detail.to_string() };
        if bytes.len() < 16 {
            return Err(bad("parity metadata too short"));
        }
        let format = ParityFormat::from_version_byte(bytes[0])?;
        let k = bytes[1] as usize;
        let u64_at = |o: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[o..o + 8]);
            u64::from_le_bytes(b)
        };
        let shard_len = usize::try_from(u64_at(8)).map_err(|_| bad("shard length"))?;
        if bytes.len() != 16 + k * 12 {
            return Err(bad("parity metadata length does not match its member count"));
        }
        let members = (0..k)
            .map(|i| {
                let o = 16 + i * 12;
                let rank = u32::from_le_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]);
                (rank, usize::try_from(u64_at(o + 4)).unwrap_or(usize::MAX))
            })
            .collect::<Vec<_>>();
        if members.iter().any(|&(_, len)| len > shard_len) {
            return Err(bad("a member image is longer than the shard"));
        }
        Ok(ParityMeta {
            format,
            parity_shards: bytes[2] as usize,
            index: bytes[3] as usize,
            shard_len,
            members,
        })
    }
}
