//! x86_64 SIMD encode kernels: all of a row group's parity outputs in one pass over the data.
//!
//! For each vector-wide column of bytes the kernel loads every data shard once and folds it into
//! one accumulator register per parity row (ISA-L's `gf_Nvect_dot_prod` scheme), so the data is
//! read once per row group instead of once per (row, data shard) pair. The only `unsafe` of the
//! codec lives here; the safe entry points check what the intrinsics rely on.

use std::arch::x86_64::*;
use std::ops::Range;

use super::gf::NibbleTable;

/// Most parity rows one AVX-512 pass accumulates: 2 x 8 accumulators + 2 data vectors use 18 of
/// the 32 zmm registers.
pub(super) const MAX_ROWS_AVX512: usize = 8;
/// Most parity rows one AVX2 pass accumulates: 2 x 4 accumulators + mask + 4 data nibble vectors
/// + temporaries fit the 16 ymm registers (the tables come straight from memory).
pub(super) const MAX_ROWS_AVX2: usize = 4;
/// Bytes ahead of the loads that the SIMD kernels prefetch in every data shard. k + m
/// concurrent streams (20 at 16+4) are more than the hardware prefetchers follow well; measured
/// interleaved against no prefetch on the loaded 2-core EPYC (1 MiB shards, best of 40 slices),
/// 1 KiB ahead gave 4+2 21.0 vs 17.1 GB/s, 8+2 22.4 vs 16.8, 16+4 12.7 vs 8.0; 512 B was
/// clearly less, 1.5-2 KiB within noise of 1 KiB.
const PREFETCH_AHEAD: usize = 1024;

pub(super) fn avx512_gfni_detected() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("gfni")
}

pub(super) fn avx2_detected() -> bool {
    is_x86_feature_detected!("avx2")
}

/// Checks the shape every kernel relies on: `tables` holds `data.len() * parity.len()` entries
/// (data-major: entry `j * rows + r` is for data shard j into parity row r) and `range` lies
/// inside every shard.
fn check_shape<T>(tables: &[T], data: &[&[u8]], parity: &[&mut [u8]], max_rows: usize, range: &Range<usize>) {
    assert!(!parity.is_empty() && parity.len() <= max_rows, "{} parity rows in one pass", parity.len());
    assert_eq!(tables.len(), data.len() * parity.len(), "one table per (data shard, parity row)");
    assert!(range.start <= range.end, "inverted range {range:?}");
    let shorter =
        data.iter().map(|s| s.len()).chain(parity.iter().map(|s| s.len())).any(|len| len < range.end);
    assert!(!shorter, "range {range:?} runs past a shard");
}

/// `parity[r][range] = XOR_j data[j][range] * c(j, r)`, with `matrices[j * rows + r]` the
/// `gf2p8affineqb` matrix of c(j, r) ([`super::gf::affine_matrix`]).
///
/// Panics if the CPU lacks AVX-512BW + GFNI or the shapes disagree (callers check both first).
pub(super) fn encode_avx512_gfni(
    matrices: &[u64],
    data: &[&[u8]],
    parity: &mut [&mut [u8]],
    range: Range<usize>,
) {
    assert!(avx512_gfni_detected(), "AVX-512BW + GFNI kernel on a CPU without them");
    check_shape(matrices, data, parity, MAX_ROWS_AVX512, &range);
    macro_rules! dispatch {
        ($($rows:literal)*) => {
            match parity.len() {
                // SAFETY: the CPU has avx512f/avx512bw/gfni (asserted above); matrices has k * rows
                // entries and range.end <= every shard's length (check_shape).
                $($rows => unsafe { gfni_rows::<$rows>(matrices, data, parity, range) },)*
                _ => unreachable!("check_shape bounds the row count"),
            }
        };
    }
    dispatch!(1 2 3 4 5 6 7 8);
}

/// Same contract as [`encode_avx512_gfni`] with split-nibble `vpshufb` tables.
pub(super) fn encode_avx2(
    tables: &[NibbleTable],
    data: &[&[u8]],
    parity: &mut [&mut [u8]],
    range: Range<usize>,
) {
    assert!(avx2_detected(), "AVX2 kernel on a CPU without AVX2");
    check_shape(tables, data, parity, MAX_ROWS_AVX2, &range);
    macro_rules! dispatch {
        ($($rows:literal)*) => {
            match parity.len() {
                // SAFETY: the CPU has avx2 (asserted above); tables has k * rows entries and
                // range.end <= every shard's length (check_shape).
                $($rows => unsafe { avx2_rows::<$rows>(tables, data, parity, range) },)*
                _ => unreachable!("check_shape bounds the row count"),
            }
        };
    }
    dispatch!(1 2 3 4);
}

/// Caller guarantees: avx512f/avx512bw/gfni present, `matrices.len() == data.len() * ROWS`,
/// `parity.len() == ROWS`, `range.start <= range.end <= ` every shard's length.
#[target_feature(enable = "avx512f,avx512bw,gfni")]
unsafe fn gfni_rows<const ROWS: usize>(
    matrices: &[u64],
    data: &[&[u8]],
    parity: &mut [&mut [u8]],
    range: Range<usize>,
) {
    let mut outputs = [std::ptr::null_mut::<u8>(); ROWS];
    for (output, shard) in outputs.iter_mut().zip(parity.iter_mut()) {
        *output = shard.as_mut_ptr();
    }
    let mut pos = range.start;
    // Two vectors per step: twice the independent loads and affine ops in flight.
    while pos + 128 <= range.end {
        let mut acc_a = [_mm512_setzero_si512(); ROWS];
        let mut acc_b = [_mm512_setzero_si512(); ROWS];
        for (j, shard) in data.iter().enumerate() {
            let at = shard.as_ptr().wrapping_add(pos);
            // A hint, never a fault, even past the end of the shard (wrapping_add: no UB).
            let ahead = at.wrapping_add(PREFETCH_AHEAD).cast::<i8>();
            _mm_prefetch::<_MM_HINT_T0>(ahead);
            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(64));
            // SAFETY: pos + 128 <= range.end <= shard.len(); unaligned loads are allowed.
            let (a, b) = unsafe { (_mm512_loadu_si512(at.cast()), _mm512_loadu_si512(at.add(64).cast())) };
            for r in 0..ROWS {
                // SAFETY: j < k and r < ROWS, so j * ROWS + r < matrices.len() = k * ROWS.
                let matrix = _mm512_set1_epi64(unsafe { *matrices.get_unchecked(j * ROWS + r) } as i64);
                acc_a[r] = _mm512_xor_si512(acc_a[r], _mm512_gf2p8affine_epi64_epi8::<0>(a, matrix));
                acc_b[r] = _mm512_xor_si512(acc_b[r], _mm512_gf2p8affine_epi64_epi8::<0>(b, matrix));
            }
        }
        for r in 0..ROWS {
            // SAFETY: pos + 128 <= range.end <= parity shard length; the parity slices are
            // exclusive borrows distinct from the data.
            unsafe {
                _mm512_storeu_si512(outputs[r].add(pos).cast(), acc_a[r]);
                _mm512_storeu_si512(outputs[r].add(pos + 64).cast(), acc_b[r]);
            }
        }
        pos += 128;
    }
    // The last 1..=128 bytes, one vector at a time, masked past range.end.
    while pos < range.end {
        let len = (range.end - pos).min(64);
        let mask: __mmask64 = if len == 64 { u64::MAX } else { (1u64 << len) - 1 };
        let mut acc = [_mm512_setzero_si512(); ROWS];
        for (j, shard) in data.iter().enumerate() {
            // SAFETY: the mask enables only bytes pos..pos + len <= shard.len(); masked-off bytes
            // are not accessed (no fault even past the allocation).
            let x = unsafe { _mm512_maskz_loadu_epi8(mask, shard.as_ptr().add(pos).cast()) };
            for (r, acc) in acc.iter_mut().enumerate() {
                // SAFETY: j * ROWS + r < matrices.len(), as in the main loop.
                let matrix = _mm512_set1_epi64(unsafe { *matrices.get_unchecked(j * ROWS + r) } as i64);
                *acc = _mm512_xor_si512(*acc, _mm512_gf2p8affine_epi64_epi8::<0>(x, matrix));
            }
        }
        for (output, acc) in outputs.iter().zip(acc) {
            // SAFETY: the mask writes only bytes pos..pos + len of the exclusive parity shard.
            unsafe { _mm512_mask_storeu_epi8(output.add(pos).cast(), mask, acc) };
        }
        pos += len;
    }
}

/// Caller guarantees: avx2 present, `tables.len() == data.len() * ROWS`, `parity.len() == ROWS`,
/// `range.start <= range.end <=` every shard's length.
#[target_feature(enable = "avx2")]
unsafe fn avx2_rows<const ROWS: usize>(
    tables: &[NibbleTable],
    data: &[&[u8]],
    parity: &mut [&mut [u8]],
    range: Range<usize>,
) {
    let low_nibbles = _mm256_set1_epi8(0x0F);
    let mut pos = range.start;
    // Two vectors (a whole cache line per shard) per step: each table pair loaded serves both.
    while pos + 64 <= range.end {
        let mut acc_a = [_mm256_setzero_si256(); ROWS];
        let mut acc_b = [_mm256_setzero_si256(); ROWS];
        for (j, shard) in data.iter().enumerate() {
            let at = shard.as_ptr().wrapping_add(pos);
            // A hint, never a fault, even past the end of the shard (wrapping_add: no UB).
            _mm_prefetch::<_MM_HINT_T0>(at.wrapping_add(PREFETCH_AHEAD).cast::<i8>());
            // SAFETY: pos + 64 <= range.end <= shard.len(); unaligned loads.
            let (a, b) = unsafe { (_mm256_loadu_si256(at.cast()), _mm256_loadu_si256(at.add(32).cast())) };
            let lo_a = _mm256_and_si256(a, low_nibbles);
            let hi_a = _mm256_and_si256(_mm256_srli_epi64::<4>(a), low_nibbles);
            let lo_b = _mm256_and_si256(b, low_nibbles);
            let hi_b = _mm256_and_si256(_mm256_srli_epi64::<4>(b), low_nibbles);
            for r in 0..ROWS {
                // SAFETY: j * ROWS + r < tables.len() = k * ROWS; each table is 64 bytes aligned
                // to 64, so both 32-byte aligned loads stay inside it.
                let (table_lo, table_hi) = unsafe {
                    let table = tables.get_unchecked(j * ROWS + r).0.as_ptr();
                    (_mm256_load_si256(table.cast()), _mm256_load_si256(table.add(32).cast()))
                };
                let product_a = _mm256_xor_si256(
                    _mm256_shuffle_epi8(table_lo, lo_a),
                    _mm256_shuffle_epi8(table_hi, hi_a),
                );
                let product_b = _mm256_xor_si256(
                    _mm256_shuffle_epi8(table_lo, lo_b),
                    _mm256_shuffle_epi8(table_hi, hi_b),
                );
                acc_a[r] = _mm256_xor_si256(acc_a[r], product_a);
                acc_b[r] = _mm256_xor_si256(acc_b[r], product_b);
            }
        }
        for (r, shard) in parity.iter_mut().enumerate() {
            // SAFETY: pos + 64 <= range.end <= shard.len(); exclusive parity borrow.
            unsafe {
                let at = shard.as_mut_ptr().add(pos);
                _mm256_storeu_si256(at.cast(), acc_a[r]);
                _mm256_storeu_si256(at.add(32).cast(), acc_b[r]);
            }
        }
        pos += 64;
    }
    if pos + 32 <= range.end {
        let mut acc = [_mm256_setzero_si256(); ROWS];
        for (j, shard) in data.iter().enumerate() {
            // SAFETY: pos + 32 <= range.end <= shard.len(); unaligned load.
            let x = unsafe { _mm256_loadu_si256(shard.as_ptr().add(pos).cast()) };
            let lo = _mm256_and_si256(x, low_nibbles);
            let hi = _mm256_and_si256(_mm256_srli_epi64::<4>(x), low_nibbles);
            for (r, acc) in acc.iter_mut().enumerate() {
                // SAFETY: as in the main loop.
                let (table_lo, table_hi) = unsafe {
                    let table = tables.get_unchecked(j * ROWS + r).0.as_ptr();
                    (_mm256_load_si256(table.cast()), _mm256_load_si256(table.add(32).cast()))
                };
                let product =
                    _mm256_xor_si256(_mm256_shuffle_epi8(table_lo, lo), _mm256_shuffle_epi8(table_hi, hi));
                *acc = _mm256_xor_si256(*acc, product);
            }
        }
        for (shard, acc) in parity.iter_mut().zip(acc) {
            // SAFETY: pos + 32 <= range.end <= shard.len(); exclusive parity borrow.
            unsafe { _mm256_storeu_si256(shard.as_mut_ptr().add(pos).cast(), acc) };
        }
        pos += 32;
    }
    // Fewer than 32 bytes left: the same tables, a byte at a time.
    for (r, shard) in parity.iter_mut().enumerate() {
        for i in pos..range.end {
            shard[i] = data.iter().enumerate().fold(0u8, |sum, (j, d)| sum ^ tables[j * ROWS + r].mul(d[i]));
        }
    }
}
