//! `reverb bench memcpy`: what one core can copy, the physical reference for shared memory.
//! Hot: the same source and destination every time (cache-resident when they fit, like
//! ucx_perftest's put_bw buffers). Cold: a rotation through 256 MiB pools, far above the
//! last-level cache, so every copy reads and writes memory.

use std::hint::black_box;
use std::time::Instant;

use anyhow::Result;

use super::engine::{Op, Output, Params, MIB};

const COLD_POOL_BYTES: usize = 256 << 20;

pub fn main(params: &Params) -> Result<()> {
    let out =
        Output { json: params.json, progress: params.progress, provider: "none".to_string(), op: Op::Put };
    out.header(
        "memcpy bandwidth (one core, the physical reference)",
        &[
            "hot: same buffers each copy; cold: rotating through 256 MiB pools".to_string(),
            "MiB/s = 2^20 bytes per second".to_string(),
        ],
        " #bytes     #iters      hot[MiB/s]    cold[MiB/s]",
    );
    for &size in &params.sizes {
        let iters = params.iters.unwrap_or_else(|| ((2u64 << 30) / size as u64).clamp(1000, 2_000_000));
        out.progress(&format!("memcpy {size} B: {iters} copies"));
        let hot = hot_copy(size, iters);
        let cold = cold_copy(size, iters);
        out.memcpy_row(size, iters, hot, cold);
    }
    Ok(())
}

fn hot_copy(size: usize, iters: u64) -> f64 {
    let src = vec![0x5Au8; size];
    let mut dst = vec![0u8; size];
    dst.copy_from_slice(&src);
    let start = Instant::now();
    for _ in 0..iters {
        dst.copy_from_slice(black_box(&src));
        black_box(&mut dst);
    }
    rate(size, iters, start)
}

fn cold_copy(size: usize, iters: u64) -> f64 {
    let pool = COLD_POOL_BYTES.max(4 * size);
    let slots = pool / size;
    // Filled (not just allocated) so page faults stay out of the measurement.
    let src = vec![0xA5u8; slots * size];
    let mut dst = vec![1u8; slots * size];
    let start = Instant::now();
    for i in 0..iters as usize {
        let at = (i % slots) * size;
        dst[at..at + size].copy_from_slice(black_box(&src[at..at + size]));
        black_box(&mut dst);
    }
    rate(size, iters, start)
}

fn rate(size: usize, iters: u64, start: Instant) -> f64 {
    let secs = start.elapsed().as_secs_f64().max(f64::MIN_POSITIVE);
    size as f64 * iters as f64 / secs / MIB
}
