//! Reed-Solomon parity for level-3 checkpoints: k data shards plus m parity shards, any k of the
//! k + m rebuild the rest.
//!
//! Encoding uses reverb's own GF(2^8) kernels ([`EncodeKernel`]): for each block of `block_len`
//! bytes, one pass over all k data shards produces a whole group of parity rows (up to 8 with
//! AVX-512 + GFNI, 4 with AVX2), accumulated in registers, like ISA-L's `gf_Nvect_dot_prod`.
//! The coefficients are `reed-solomon-erasure` 6's systematic Vandermonde matrix, read from that
//! library once per codec, so parity is byte-identical to it ([`ParityFormat::Gf8VandermondeV1`]).
//! Reconstruction still goes through `reed-solomon-erasure`.

mod gf;
#[cfg(target_arch = "x86_64")]
mod kernel_x86;

use std::ops::Range;

use reed_solomon_erasure::galois_8::ReedSolomon;

use crate::error::CkptError;
use gf::NibbleTable;

/// Bytes of each shard encoded per block. Only matters when m needs more than one row group (m > 8
/// on AVX-512, m > 4 on AVX2): the later groups re-read the block's k data slices, which should
/// still be in L2 (1 MiB per core here). Measured on the loaded 2-core EPYC, 1 MiB shards,
/// `RS_BENCH_INTERLEAVED=reverb-16k,...,reverb-1024k,isa-l` (benches/benches/rs.rs), best GB/s:
/// at 20+10, 16/32/64 KiB gave 9.6/9.5/9.5, 128 KiB 9.3, 256 KiB 8.6, 1 MiB 7.6; at 4+2, 8+2
/// and 16+4 (one group, each byte read once) every length was within noise. 32 KiB keeps the
/// k slices of a block (640 KiB at k = 20) inside L2 with room to spare.
pub const DEFAULT_BLOCK_LEN: usize = 32 << 10;

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

/// The encode kernel a codec runs. All produce the same bytes; they differ only in speed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EncodeKernel {
    /// x86_64 AVX-512BW + GFNI: `vgf2p8affineqb` with an 8x8 bit matrix per coefficient, 64 bytes
    /// per instruction, up to 8 parity rows per pass.
    Avx512Gfni,
    /// x86_64 AVX2: split-nibble `vpshufb` product tables, 64 bytes per step, up to 4 rows per pass.
    Avx2,
    /// Portable: a 256-byte product table per coefficient (built from log/exp tables).
    Scalar,
}

impl EncodeKernel {
    /// Every kernel, fastest first.
    pub const ALL: [EncodeKernel; 3] = [EncodeKernel::Avx512Gfni, EncodeKernel::Avx2, EncodeKernel::Scalar];

    /// The fastest kernel this CPU runs (runtime feature detection).
    pub fn detect() -> Self {
        Self::ALL.into_iter().find(|kernel| kernel.is_supported()).unwrap_or(EncodeKernel::Scalar)
    }

    /// Whether this CPU (and build target) can run the kernel.
    pub fn is_supported(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            EncodeKernel::Avx512Gfni => kernel_x86::avx512_gfni_detected(),
            #[cfg(target_arch = "x86_64")]
            EncodeKernel::Avx2 => kernel_x86::avx2_detected(),
            #[cfg(not(target_arch = "x86_64"))]
            EncodeKernel::Avx512Gfni | EncodeKernel::Avx2 => false,
            EncodeKernel::Scalar => true,
        }
    }

    /// Short lowercase name for logs and bench tables.
    pub fn name(self) -> &'static str {
        match self {
            EncodeKernel::Avx512Gfni => "avx512-gfni",
            EncodeKernel::Avx2 => "avx2",
            EncodeKernel::Scalar => "scalar",
        }
    }

    /// Parity rows one pass over the data accumulates.
    fn max_rows(self) -> usize {
        match self {
            #[cfg(target_arch = "x86_64")]
            EncodeKernel::Avx512Gfni => kernel_x86::MAX_ROWS_AVX512,
            #[cfg(target_arch = "x86_64")]
            EncodeKernel::Avx2 => kernel_x86::MAX_ROWS_AVX2,
            // Never selected off x86_64 (is_supported is false); any bound works.
            #[cfg(not(target_arch = "x86_64"))]
            EncodeKernel::Avx512Gfni | EncodeKernel::Avx2 => 1,
            // The scalar kernel handles one row at a time anyway; grouping only bounds the tables.
            EncodeKernel::Scalar => 8,
        }
    }
}

/// Per-coefficient tables of one row group, data-major (entry `j * rows + r`), in the form the
/// group's kernel reads.
#[derive(Clone)]
enum GroupTables {
    Affine(Vec<u64>),
    Nibble(Vec<NibbleTable>),
    Products(Vec<[u8; 256]>),
}

/// Parity rows `rows` computed together in one pass over the data.
#[derive(Clone)]
struct RowGroup {
    rows: Range<usize>,
    tables: GroupTables,
}

/// Encoder/decoder for one k + m geometry. Cheap to share: `&self` methods only.
pub struct ParityCodec {
    inner: ReedSolomon,
    data_shards: usize,
    parity_shards: usize,
    block_len: usize,
    /// m x k, row-major: `parity[i] = sum_j coefficients[i * k + j] * data[j]`.
    coefficients: Vec<u8>,
    kernel: EncodeKernel,
    groups: Vec<RowGroup>,
}

impl std::fmt::Debug for ParityCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParityCodec")
            .field("data_shards", &self.data_shards)
            .field("parity_shards", &self.parity_shards)
            .field("block_len", &self.block_len)
            .field("kernel", &self.kernel)
            .field("format", &self.format())
            .finish()
    }
}

impl ParityCodec {
    /// A codec for `data_shards` (k) + `parity_shards` (m); k, m >= 1 and k + m <= 256. Encodes
    /// with the fastest kernel this CPU supports ([`EncodeKernel::detect`]).
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
        let coefficients = coefficients_of(&inner, data_shards, parity_shards)?;
        let mut codec = Self {
            inner,
            data_shards,
            parity_shards,
            block_len: DEFAULT_BLOCK_LEN,
            coefficients,
            kernel: EncodeKernel::Scalar,
            groups: Vec::new(),
        };
        codec.set_kernel(EncodeKernel::detect());
        Ok(codec)
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

    /// Same codec encoding with `kernel` instead of the detected one (tests, benches);
    /// `Unsupported` if this CPU can't run it.
    pub fn with_kernel(mut self, kernel: EncodeKernel) -> Result<Self, CkptError> {
        if !kernel.is_supported() {
            return Err(CkptError::Unsupported(format!(
                "Reed-Solomon kernel {} needs CPU features this machine lacks",
                kernel.name()
            )));
        }
        self.set_kernel(kernel);
        Ok(self)
    }

    /// Builds the row groups and their tables for `kernel` (callers checked it is supported).
    fn set_kernel(&mut self, kernel: EncodeKernel) {
        let (k, m) = (self.data_shards, self.parity_shards);
        // Balanced groups: 10 rows on AVX-512 run as 5 + 5, not 8 + 2.
        let group_count = m.div_ceil(kernel.max_rows());
        let mut groups = Vec::with_capacity(group_count);
        let mut first = 0;
        for g in 0..group_count {
            let rows = first..first + (m - first).div_ceil(group_count - g);
            let coefficient = |j: usize, r: usize| self.coefficients[r * k + j];
            let data_major = (0..k).flat_map(|j| rows.clone().map(move |r| (j, r)));
            let tables = match kernel {
                EncodeKernel::Avx512Gfni => GroupTables::Affine(
                    data_major.map(|(j, r)| gf::affine_matrix(coefficient(j, r))).collect(),
                ),
                EncodeKernel::Avx2 => GroupTables::Nibble(
                    data_major.map(|(j, r)| NibbleTable::new(coefficient(j, r))).collect(),
                ),
                EncodeKernel::Scalar => GroupTables::Products(
                    data_major.map(|(j, r)| gf::product_row(coefficient(j, r))).collect(),
                ),
            };
            first = rows.end;
            groups.push(RowGroup { rows, tables });
        }
        self.kernel = kernel;
        self.groups = groups;
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

    /// The kernel [`encode`](Self::encode) runs.
    pub fn kernel(&self) -> EncodeKernel {
        self.kernel
    }

    /// The format tag to store next to the parity this codec writes.
    pub fn format(&self) -> ParityFormat {
        ParityFormat::Gf8VandermondeV1
    }

    /// The m x k parity coefficients, row-major: `parity[i] = sum_j coef[i * k + j] * data[j]` in
    /// GF(2^8). Lets another GF(2^8) engine (e.g. ISA-L's `ec_init_tables`) produce the same bytes.
    pub fn parity_coefficients(&self) -> Vec<u8> {
        self.coefficients.clone()
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

        let mut start = 0;
        while start < shard_len {
            let end = shard_len.min(start.saturating_add(self.block_len));
            for group in &self.groups {
                let outputs = &mut parity[group.rows.clone()];
                match &group.tables {
                    #[cfg(target_arch = "x86_64")]
                    GroupTables::Affine(matrices) => {
                        kernel_x86::encode_avx512_gfni(matrices, data, outputs, start..end)
                    }
                    #[cfg(target_arch = "x86_64")]
                    GroupTables::Nibble(tables) => kernel_x86::encode_avx2(tables, data, outputs, start..end),
                    GroupTables::Products(rows) => encode_scalar(rows, data, outputs, start..end),
                    // Off x86_64 only the scalar kernel is ever selected.
                    #[cfg(not(target_arch = "x86_64"))]
                    _ => unreachable!("SIMD tables on a target without SIMD kernels"),
                }
            }
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

/// Reads the parity matrix out of reed-solomon-erasure: encoding the unit vector e_j yields
/// column j.
fn coefficients_of(codec: &ReedSolomon, k: usize, m: usize) -> Result<Vec<u8>, CkptError> {
    let mut coefficients = vec![0u8; m * k];
    let mut data = vec![[0u8; 1]; k];
    let mut parity = vec![[0u8; 1]; m];
    for column in 0..k {
        data.iter_mut().enumerate().for_each(|(j, shard)| shard[0] = u8::from(j == column));
        codec.encode_sep(&data, &mut parity).map_err(|e| CkptError::Codec(e.to_string()))?;
        for (row, shard) in parity.iter().enumerate() {
            coefficients[row * k + column] = shard[0];
        }
    }
    Ok(coefficients)
}

/// The portable kernel: one row at a time, one table lookup per (byte, data shard).
fn encode_scalar(products: &[[u8; 256]], data: &[&[u8]], parity: &mut [&mut [u8]], range: Range<usize>) {
    let rows = parity.len();
    for (r, shard) in parity.iter_mut().enumerate() {
        let out = &mut shard[range.clone()];
        for (j, input) in data.iter().enumerate() {
            let table = &products[j * rows + r];
            let input = &input[range.clone()];
            if j == 0 {
                out.iter_mut().zip(input).for_each(|(o, &x)| *o = table[usize::from(x)]);
            } else {
                out.iter_mut().zip(input).for_each(|(o, &x)| *o ^= table[usize::from(x)]);
            }
        }
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

    /// Parity straight from reed-solomon-erasure, the reference for the format.
    fn reference_parity(k: usize, m: usize, data: &[&[u8]]) -> Vec<Vec<u8>> {
        let reference = ReedSolomon::new(k, m).unwrap();
        let mut parity = vec![vec![0u8; data[0].len()]; m];
        let mut parity_refs: Vec<&mut [u8]> = parity.iter_mut().map(|s| s.as_mut_slice()).collect();
        reference.encode_sep(data, &mut parity_refs).unwrap();
        parity
    }

    fn supported_kernels() -> Vec<EncodeKernel> {
        EncodeKernel::ALL.into_iter().filter(|kernel| kernel.is_supported()).collect()
    }

    /// Every kernel this CPU runs writes reed-solomon-erasure's bytes, for every geometry in use
    /// and odd lengths, with data and parity slices starting at odd addresses, in one block or
    /// many (several row groups re-read each block when m exceeds a kernel's pass width).
    #[test]
    fn every_supported_kernel_matches_reed_solomon_erasure() {
        let geometries = [(4, 2), (8, 2), (16, 4), (1, 1), (3, 5), (20, 10)];
        let lengths = [1, 2, 31, 32, 33, 63, 64, 65, 127, 128, 129, 4097, 70_001];
        let kernels = supported_kernels();
        assert!(kernels.contains(&EncodeKernel::Scalar));
        let mut rng = StdRng::seed_from_u64(11);
        for (k, m) in geometries {
            for len in lengths {
                // Carve shards out of one buffer at a random odd offset so none is aligned.
                let offset = 1 + 2 * rng.gen_range(0..31);
                let mut pool = vec![0u8; offset + k * (len + 3)];
                rng.fill(&mut pool[..]);
                let data: Vec<&[u8]> = pool[offset..].chunks_exact(len + 3).map(|c| &c[..len]).collect();
                let expected = reference_parity(k, m, &data);
                for kernel in &kernels {
                    for block_len in [DEFAULT_BLOCK_LEN, 100, 4096] {
                        let codec = ParityCodec::new(k, m)
                            .unwrap()
                            .with_kernel(*kernel)
                            .unwrap()
                            .with_block_len(block_len)
                            .unwrap();
                        let mut out_pool = vec![0xA5u8; offset + m * (len + 3)];
                        let mut parity: Vec<&mut [u8]> =
                            out_pool[offset..].chunks_exact_mut(len + 3).map(|c| &mut c[..len]).collect();
                        codec.encode(&data, &mut parity).unwrap();
                        for (row, (got, want)) in parity.iter().zip(&expected).enumerate() {
                            assert!(
                                got[..] == want[..],
                                "{k}+{m} len {len} kernel {} block {block_len}: parity row {row} differs",
                                kernel.name()
                            );
                        }
                        // The bytes between shards (and before the first) are untouched.
                        assert!(out_pool[..offset].iter().all(|&b| b == 0xA5));
                        for gap in out_pool[offset..].chunks_exact(len + 3) {
                            assert_eq!(&gap[len..], &[0xA5; 3], "{k}+{m} len {len} {}", kernel.name());
                        }
                    }
                }
            }
        }
    }

    /// The codec picks the fastest kernel the CPU has; on the AVX-512 + GFNI EPYC that is the
    /// one the rest of this module's tests (which use `ParityCodec::new`) go through.
    #[test]
    fn detected_kernel_is_the_fastest_supported() {
        let codec = ParityCodec::new(16, 4).unwrap();
        assert_eq!(codec.kernel(), supported_kernels()[0]);
        assert_eq!(codec.kernel(), EncodeKernel::detect());
        #[cfg(target_arch = "x86_64")]
        if std::is_x86_feature_detected!("avx512bw") && std::is_x86_feature_detected!("gfni") {
            assert_eq!(codec.kernel(), EncodeKernel::Avx512Gfni);
        } else if std::is_x86_feature_detected!("avx2") {
            assert_eq!(codec.kernel(), EncodeKernel::Avx2);
        }
        for kernel in EncodeKernel::ALL {
            let result = ParityCodec::new(4, 2).unwrap().with_kernel(kernel);
            if kernel.is_supported() {
                assert_eq!(result.unwrap().kernel(), kernel);
            } else {
                let err = result.unwrap_err();
                assert!(matches!(err, CkptError::Unsupported(_)), "{err}");
            }
        }
    }

    /// A shard rebuilt from k survivors equals the original, whichever kernel wrote the parity.
    #[test]
    fn every_kernel_parity_rebuilds_lost_shards() {
        let (k, m) = (16, 4);
        let data = random_shards(k, 1 << 20, 21);
        for kernel in supported_kernels() {
            let codec = ParityCodec::new(k, m).unwrap().with_kernel(kernel).unwrap();
            let parity = encode_all(&codec, &data);
            let original: Vec<Vec<u8>> = data.iter().cloned().chain(parity).collect();
            let mut shards: Vec<Option<Vec<u8>>> = original.iter().cloned().map(Some).collect();
            for lost in [0, 7, 15, 18] {
                shards[lost] = None;
            }
            codec.reconstruct(&mut shards).unwrap();
            for (i, shard) in shards.iter().enumerate() {
                assert_eq!(shard.as_ref(), Some(&original[i]), "kernel {} shard {i}", kernel.name());
            }
        }
    }

    #[test]
    fn parity_coefficients_reproduce_parity() {
        // Shift-and-add multiply in GF(2^8) (poly 0x11D), independent of every table.
        let gf_mul = super::gf::tests::mul_slow;
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
