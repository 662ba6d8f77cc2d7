//! Reed-Solomon parity for level-3 checkpoints: k data shards plus m parity shards, any k of the
//! k + m rebuild the rest.
//!
//! Backed by `reed-solomon-erasure` (GF(2^8), `simd-accel` C kernels). Encoding walks the shards in
//! stripes of `block_len` bytes so the m parity outputs, which that library rewrites once per data
//! shard, stay in cache instead of streaming through memory k times.

use reed_solomon_erasure::galois_8::ReedSolomon;

use crate::error::CkptError;

/// Bytes of each shard encoded per stripe. Keeps the m parity outputs (4 MiB for m = 4) well inside
/// the 32 MiB L3 for any shard size. Not smaller: the library reads one input at a time, and
/// measured on the 2-core EPYC (benches/benches/rs.rs, 1 MiB shards) 64 KiB stripes were 10-15%
/// slower than 256 KiB, and 16 KiB ones slower still; long sequential runs beat L2 residency.
pub const DEFAULT_BLOCK_LEN: usize = 1 << 20;

/// On-disk/in-memory parity format, stored as one version byte in the checkpoint header.
///
/// Parity bytes depend on the field and on the exact generator matrix, so parity written by one
/// format can't be used to rebuild under another. GF(2^16) codes (e.g. `reed-solomon-simd`) and
/// GF(2^8) codes with another matrix (e.g. ISA-L's Cauchy matrix) need their own byte. Byte 0 is
/// never used so that a zeroed header is rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ParityFormat {
    /// GF(2^8) with polynomial 0x11D and `reed-solomon-erasure` 6's systematic Vandermonde matrix.
    Gf8VandermondeV1 = 1,
}

impl ParityFormat {
    /// The byte the checkpoint header stores.
    pub const fn version_byte(self) -> u8 {
        self as u8
    }

    /// Parses a header byte; unknown bytes are an error, never a guess.
    pub fn from_version_byte(byte: u8) -> Result<Self, CkptError> {
        match byte {
            1 => Ok(ParityFormat::Gf8VandermondeV1),
            other => Err(CkptError::UnknownParityFormat(other)),
        }
    }
}

/// Encoder/decoder for one k + m geometry. Cheap to share: `&self` methods only.
pub struct ParityCodec {
    inner: ReedSolomon,
    data_shards: usize,
    parity_shards: usize,
    block_len: usize,
}

impl std::fmt::Debug for ParityCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParityCodec")
            .field("data_shards", &self.data_shards)
            .field("parity_shards", &self.parity_shards)
            .field("block_len", &self.block_len)
            .field("format", &self.format())
            .finish()
    }
}

impl ParityCodec {
    /// A codec for `data_shards` (k) + `parity_shards` (m); k, m >= 1 and k + m <= 256.
    pub fn new(data_shards: usize, parity_shards: usize) -> Result<Self, CkptError> {
        let invalid = |reason| CkptError::InvalidGeometry { data_shards, parity_shards, reason };
        if data_shards == 0 {
            return Err(invalid("need at least one data shard"));
        }
        if parity_shards == 0 {
            return Err(invalid("need at least one parity shard"));
        }
        if data_shards + parity_shards > 256 {
            return Err(invalid("GF(2^8) allows at most 256 shards in total"));
        }
        let inner =
            ReedSolomon::new(data_shards, parity_shards).map_err(|e| CkptError::Codec(e.to_string()))?;
        Ok(Self { inner, data_shards, parity_shards, block_len: DEFAULT_BLOCK_LEN })
    }

    /// Same codec with another stripe length (bytes of each shard per encoding step).
    pub fn with_block_len(mut self, block_len: usize) -> Result<Self, CkptError> {
        if block_len == 0 {
            return Err(CkptError::InvalidGeometry {
                data_shards: self.data_shards,
                parity_shards: self.parity_shards,
                reason: "block length must be at least 1 byte",
            });
        }
        self.block_len = block_len;
        Ok(self)
    }

    pub fn data_shards(&self) -> usize {
        self.data_shards
    }

    pub fn parity_shards(&self) -> usize {
        self.parity_shards
    }

    pub fn block_len(&self) -> usize {
        self.block_len
    }

    /// The format tag to store next to the parity this codec writes.
    pub fn format(&self) -> ParityFormat {
        ParityFormat::Gf8VandermondeV1
    }

    /// The m x k parity coefficients, row-major: `parity[i] = sum_j coef[i * k + j] * data[j]` in
    /// GF(2^8). Lets another GF(2^8) engine (e.g. ISA-L's `ec_init_tables`) produce the same bytes.
    pub fn parity_coefficients(&self) -> Vec<u8> {
        let (k, m) = (self.data_shards, self.parity_shards);
        let mut coefficients = vec![0u8; m * k];
        // Encoding the unit vector e_j yields column j of the parity matrix.
        let mut data = vec![[0u8; 1]; k];
        let mut parity = vec![[0u8; 1]; m];
        for column in 0..k {
            data.iter_mut().enumerate().for_each(|(j, shard)| shard[0] = u8::from(j == column));
            // Shard sizes are 1 and counts match the codec, so this can't fail.
            if self.inner.encode_sep(&data, &mut parity).is_ok() {
                for (row, shard) in parity.iter().enumerate() {
                    coefficients[row * k + column] = shard[0];
                }
            }
        }
        coefficients
    }

    /// Computes the m parity shards from the k data shards. All shards must have the same,
    /// non-zero length.
    pub fn encode(&self, data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), CkptError> {
        check_count("data", self.data_shards, data.len())?;
        check_count("parity", self.parity_shards, parity.len())?;
        let shard_len = data[0].len();
        if shard_len == 0 {
            return Err(CkptError::EmptyShards);
        }
        let lengths = data.iter().map(|s| s.len()).chain(parity.iter().map(|s| s.len()));
        for (index, actual) in lengths.enumerate() {
            if actual != shard_len {
                return Err(CkptError::ShardSizeMismatch { index, expected: shard_len, actual });
            }
        }

        let mut data_stripe: Vec<&[u8]> = Vec::with_capacity(self.data_shards);
        let mut start = 0;
        while start < shard_len {
            let end = shard_len.min(start.saturating_add(self.block_len));
            data_stripe.clear();
            data_stripe.extend(data.iter().map(|shard| &shard[start..end]));
            let mut parity_stripe: Vec<&mut [u8]> =
                parity.iter_mut().map(|shard| &mut shard[start..end]).collect();
            self.inner
                .encode_sep(&data_stripe, &mut parity_stripe)
                .map_err(|e| CkptError::Codec(e.to_string()))?;
            start = end;
        }
        Ok(())
    }

    /// Rebuilds every `None` entry of `shards` (k data then m parity, in encoding order) from the
    /// present ones. Needs at least k present shards of equal length; on error nothing is changed.
    pub fn reconstruct(&self, shards: &mut [Option<Vec<u8>>]) -> Result<(), CkptError> {
        let total = self.data_shards + self.parity_shards;
        check_count("total", total, shards.len())?;
        let lost = shards.iter().filter(|s| s.is_none()).count();
        if lost > self.parity_shards {
            return Err(CkptError::TooManyLostShards { lost, total, parity_shards: self.parity_shards });
        }
        if lost == 0 {
            return Ok(());
        }
        let mut present = shards.iter().enumerate().filter_map(|(i, s)| s.as_ref().map(|s| (i, s.len())));
        // lost <= m < total, so at least one shard is present.
        let Some((_, shard_len)) = present.next() else {
            return Err(CkptError::TooManyLostShards { lost, total, parity_shards: self.parity_shards });
        };
        if shard_len == 0 {
            return Err(CkptError::EmptyShards);
        }
        if let Some((index, actual)) = present.find(|&(_, len)| len != shard_len) {
            return Err(CkptError::ShardSizeMismatch { index, expected: shard_len, actual });
        }
        self.inner.reconstruct(shards).map_err(|e| CkptError::Codec(e.to_string()))
    }
}

fn check_count(kind: &'static str, expected: usize, actual: usize) -> Result<(), CkptError> {
    if expected == actual {
        Ok(())
    } else {
        Err(CkptError::ShardCount { kind, expected, actual })
    }
}

#[cfg(test)]
mod tests {
    use rand::{rngs::StdRng, Rng, SeedableRng};

    use super::*;

    fn random_shards(count: usize, len: usize, seed: u64) -> Vec<Vec<u8>> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..count)
            .map(|_| {
                let mut shard = vec![0u8; len];
                rng.fill(&mut shard[..]);
                shard
            })
            .collect()
    }

    fn encode_all(codec: &ParityCodec, data: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let len = data[0].len();
        let mut parity = vec![vec![0u8; len]; codec.parity_shards()];
        let data_refs: Vec<&[u8]> = data.iter().map(|s| s.as_slice()).collect();
        let mut parity_refs: Vec<&mut [u8]> = parity.iter_mut().map(|s| s.as_mut_slice()).collect();
        codec.encode(&data_refs, &mut parity_refs).expect("encode");
        parity
    }

    /// Every loss pattern of 1..=m shards is rebuilt byte for byte.
    fn round_trip_every_loss(k: usize, m: usize) {
        // A small block length and an odd shard size exercise several stripes and a short tail.
        let codec = ParityCodec::new(k, m).unwrap().with_block_len(256).unwrap();
        let data = random_shards(k, 1000, (k * 100 + m) as u64);
        let parity = encode_all(&codec, &data);
        let original: Vec<Vec<u8>> = data.into_iter().chain(parity).collect();
        let total = k + m;
        let mut patterns = 0;
        for lost_mask in 1u32..(1 << total) {
            if lost_mask.count_ones() as usize > m {
                continue;
            }
            let mut shards: Vec<Option<Vec<u8>>> = original
                .iter()
                .enumerate()
                .map(|(i, s)| if lost_mask & (1 << i) != 0 { None } else { Some(s.clone()) })
                .collect();
            codec.reconstruct(&mut shards).unwrap_or_else(|e| panic!("{k}+{m} mask {lost_mask:#x}: {e}"));
            for (i, shard) in shards.iter().enumerate() {
                assert_eq!(shard.as_ref(), Some(&original[i]), "{k}+{m} mask {lost_mask:#x} shard {i}");
            }
            patterns += 1;
        }
        let expected_patterns: usize = (1..=m).map(|lost| binomial(total, lost)).sum();
        assert_eq!(patterns, expected_patterns);
    }

    fn binomial(n: usize, r: usize) -> usize {
        (0..r).fold(1, |acc, i| acc * (n - i) / (i + 1))
    }

    #[test]
    fn round_trip_4_plus_2() {
        round_trip_every_loss(4, 2);
    }

    #[test]
    fn round_trip_8_plus_2() {
        round_trip_every_loss(8, 2);
    }

    #[test]
    fn round_trip_16_plus_4() {
        round_trip_every_loss(16, 4);
    }

    #[test]
    fn striped_encoding_matches_single_pass() {
        let data = random_shards(8, 200 * 1024 + 7, 7);
        let striped = encode_all(&ParityCodec::new(8, 2).unwrap().with_block_len(64 * 1024).unwrap(), &data);
        let single_pass =
            encode_all(&ParityCodec::new(8, 2).unwrap().with_block_len(usize::MAX).unwrap(), &data);
        assert_eq!(striped, single_pass);
    }

    #[test]
    fn parity_coefficients_reproduce_parity() {
        // Multiply in GF(2^8) (poly 0x11D) by shift-and-add, independent of the library's tables.
        fn gf_mul(mut a: u8, mut b: u8) -> u8 {
            let mut product = 0u8;
            while b != 0 {
                if b & 1 != 0 {
                    product ^= a;
                }
                let carry = a & 0x80 != 0;
                a <<= 1;
                if carry {
                    a ^= 0x1D;
                }
                b >>= 1;
            }
            product
        }
        let (k, m) = (4, 2);
        let codec = ParityCodec::new(k, m).unwrap();
        let coefficients = codec.parity_coefficients();
        let data = random_shards(k, 64, 3);
        let parity = encode_all(&codec, &data);
        for row in 0..m {
            for byte in 0..64 {
                let expected =
                    (0..k).fold(0u8, |acc, j| acc ^ gf_mul(coefficients[row * k + j], data[j][byte]));
                assert_eq!(parity[row][byte], expected);
            }
        }
    }

    #[test]
    fn wrong_shard_sizes_are_rejected() {
        let codec = ParityCodec::new(4, 2).unwrap();
        let data = random_shards(4, 100, 1);
        let short = vec![0u8; 99];
        let data_refs: Vec<&[u8]> = vec![&data[0], &data[1], &short, &data[3]];
        let mut parity = vec![vec![0u8; 100]; 2];
        let mut parity_refs: Vec<&mut [u8]> = parity.iter_mut().map(|s| s.as_mut_slice()).collect();
        let err = codec.encode(&data_refs, &mut parity_refs).unwrap_err();
        assert_eq!(err, CkptError::ShardSizeMismatch { index: 2, expected: 100, actual: 99 });
        assert!(err.to_string().contains("shard 2 is 99 bytes, expected 100"), "{err}");

        let data_refs: Vec<&[u8]> = data.iter().map(|s| s.as_slice()).collect();
        let mut small_parity = [vec![0u8; 100], vec![0u8; 50]];
        let mut parity_refs: Vec<&mut [u8]> = small_parity.iter_mut().map(|s| s.as_mut_slice()).collect();
        let err = codec.encode(&data_refs, &mut parity_refs).unwrap_err();
        assert_eq!(err, CkptError::ShardSizeMismatch { index: 5, expected: 100, actual: 50 });

        let mut shards: Vec<Option<Vec<u8>>> = data.iter().cloned().map(Some).collect();
        shards.push(None);
        shards.push(Some(vec![0u8; 101]));
        let err = codec.reconstruct(&mut shards).unwrap_err();
        assert_eq!(err, CkptError::ShardSizeMismatch { index: 5, expected: 100, actual: 101 });
    }

    #[test]
    fn wrong_shard_counts_and_empty_shards_are_rejected() {
        let codec = ParityCodec::new(4, 2).unwrap();
        let data = random_shards(3, 10, 2);
        let data_refs: Vec<&[u8]> = data.iter().map(|s| s.as_slice()).collect();
        let mut parity = vec![vec![0u8; 10]; 2];
        let mut parity_refs: Vec<&mut [u8]> = parity.iter_mut().map(|s| s.as_mut_slice()).collect();
        let err = codec.encode(&data_refs, &mut parity_refs).unwrap_err();
        assert_eq!(err, CkptError::ShardCount { kind: "data", expected: 4, actual: 3 });
        assert_eq!(err.to_string(), "expected 4 data shards, got 3");

        let empty: Vec<&[u8]> = vec![&[]; 4];
        let mut no_parity = [Vec::new(), Vec::new()];
        let mut parity_refs: Vec<&mut [u8]> = no_parity.iter_mut().map(|s| s.as_mut_slice()).collect();
        assert_eq!(codec.encode(&empty, &mut parity_refs).unwrap_err(), CkptError::EmptyShards);

        let mut five: Vec<Option<Vec<u8>>> = vec![Some(vec![1u8; 4]); 5];
        assert_eq!(
            codec.reconstruct(&mut five).unwrap_err(),
            CkptError::ShardCount { kind: "total", expected: 6, actual: 5 }
        );
    }

    #[test]
    fn too_many_losses_are_rejected_and_nothing_changes() {
        let codec = ParityCodec::new(4, 2).unwrap();
        let data = random_shards(4, 64, 5);
        let parity = encode_all(&codec, &data);
        let mut shards: Vec<Option<Vec<u8>>> = data.into_iter().chain(parity).map(Some).collect();
        shards[0] = None;
        shards[3] = None;
        shards[5] = None;
        let before = shards.clone();
        let err = codec.reconstruct(&mut shards).unwrap_err();
        assert_eq!(err, CkptError::TooManyLostShards { lost: 3, total: 6, parity_shards: 2 });
        assert_eq!(err.to_string(), "3 of 6 shards are lost but only 2 can be rebuilt");
        assert_eq!(shards, before);
    }

    #[test]
    fn invalid_geometries_are_rejected() {
        assert!(matches!(ParityCodec::new(0, 2), Err(CkptError::InvalidGeometry { .. })));
        assert!(matches!(ParityCodec::new(4, 0), Err(CkptError::InvalidGeometry { .. })));
        assert!(matches!(ParityCodec::new(250, 7), Err(CkptError::InvalidGeometry { .. })));
        assert!(ParityCodec::new(4, 2).unwrap().with_block_len(0).is_err());
    }

    #[test]
    fn parity_format_byte_round_trips_and_rejects_unknown() {
        let format = ParityCodec::new(8, 2).unwrap().format();
        assert_eq!(format.version_byte(), 1);
        assert_eq!(ParityFormat::from_version_byte(format.version_byte()), Ok(format));
        assert_eq!(ParityFormat::from_version_byte(0), Err(CkptError::UnknownParityFormat(0)));
        assert_eq!(ParityFormat::from_version_byte(2), Err(CkptError::UnknownParityFormat(2)));
    }
}
