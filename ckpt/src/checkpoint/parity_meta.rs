//! The metadata entry of a parity image: the codec format, the block's index and the members'
//! image lengths.

use reverb_transport::codec::{CodecError, Reader, Writer};
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
        let mut out = Vec::with_capacity(16 + 12 * self.members.len());
        let mut w = Writer::new(&mut out);
        w.u8(self.format.version_byte()).u8(self.members.len() as u8).u8(self.parity_shards as u8);
        w.u8(self.index as u8).zeros(4).u64(self.shard_len as u64);
        for &(rank, len) in &self.members {
            w.u32(rank).u64(len as u64);
        }
        out
    }

    /// Decodes [`ParityMeta::to_bytes`] output read back from a parity image (`what` names
    /// it in errors): any length but `16 + 12 * members` or an unknown format is an error.
    pub(super) fn parse(bytes: &[u8], what: &str) -> Result<ParityMeta, CkptError> {
        let bad = |detail: String| CkptError::HeaderCorrupt { what: what.to_string(), detail };
        let codec = |e: CodecError| bad(e.detail());
        let mut r = Reader::new(bytes, "parity metadata");
        let version = r.u8("format").map_err(codec)?;
        let k = r.u8("member count").map_err(codec)? as usize;
        let parity_shards = r.u8("parity shards").map_err(codec)? as usize;
        let index = r.u8("block index").map_err(codec)? as usize;
        r.skip(4, "padding").map_err(codec)?;
        let shard_len = r.u64("shard length").map_err(codec)?;
        let format = ParityFormat::from_version_byte(version)?;
        let shard_len = usize::try_from(shard_len).map_err(|_| bad("shard length".into()))?;
        let mut members = Vec::with_capacity(k);
        for _ in 0..k {
            let rank = r.u32("member rank").map_err(codec)?;
            let len = r.u64("member image length").map_err(codec)?;
            members.push((rank, usize::try_from(len).unwrap_or(usize::MAX)));
        }
        r.finish().map_err(codec)?;
        if members.iter().any(|&(_, len)| len > shard_len) {
            return Err(bad("a member image is longer than the shard".into()));
        }
        Ok(ParityMeta { format, parity_shards, index, shard_len, members })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn meta(members: Vec<(Rank, usize)>, shard_len: usize) -> ParityMeta {
        ParityMeta { format: ParityFormat::Gf8VandermondeV1, parity_shards: 2, index: 1, shard_len, members }
    }

    #[test]
    fn bytes_are_pinned() {
        let bytes = meta(vec![(3, 5)], 9).to_bytes();
        let mut want = vec![1, 1, 2, 1, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0];
        want.extend_from_slice(&[3, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(bytes, want);
        assert_eq!(bytes.len(), 16 + 12);
    }

    #[test]
    fn wrong_lengths_formats_and_members_are_refused() {
        let good = meta(vec![(0, 4), (1, 8)], 8).to_bytes();
        for cut in [0, 15, 16, good.len() - 1] {
            assert!(matches!(ParityMeta::parse(&good[..cut], "t"), Err(CkptError::HeaderCorrupt { .. })));
        }
        let mut long = good.clone();
        long.push(0);
        assert!(matches!(ParityMeta::parse(&long, "t"), Err(CkptError::HeaderCorrupt { .. })));
        let mut format = good.clone();
        format[0] = 9;
        assert!(matches!(ParityMeta::parse(&format, "t"), Err(CkptError::UnknownParityFormat(9))));
        let longer = meta(vec![(0, 9)], 8).to_bytes();
        assert!(matches!(ParityMeta::parse(&longer, "t"), Err(CkptError::HeaderCorrupt { .. })));
    }

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = ParityMeta::parse(&bytes, "fuzz");
        }

        #[test]
        fn round_trips(
            shard_len in 0usize..1 << 40,
            lens in proptest::collection::vec((any::<u32>(), any::<u64>()), 0..20),
            parity_shards in 1usize..8,
            index in 0usize..8,
        ) {
            let members: Vec<(Rank, usize)> =
                lens.into_iter().map(|(r, l)| (r, (l as usize) % (shard_len + 1))).collect();
            let m = ParityMeta { parity_shards, index, ..meta(members, shard_len) };
            prop_assert_eq!(ParityMeta::parse(&m.to_bytes(), "rt").ok(), Some(m));
        }
    }
}
