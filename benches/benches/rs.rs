//! Reed-Solomon encode throughput, GB/s of input (data) bytes, in one run and on the same data:
//! reverb-ckpt's `ParityCodec` ("reverb": reverb's own GF(2^8) kernel, the one detected for this
//! CPU; "reverb-avx2": the AVX2 kernel forced, when the CPU has a faster one), raw
//! reed-solomon-erasure + simd-accel (whole shards in one call), reed-solomon-simd (GF(2^16)),
//! ISA-L's `ec_encode_data` (when `libisal-dev` was found at build time) and memcpy of the data as
//! the memory-bandwidth yardstick.
//!
//! Geometries 4+2, 8+2, 16+4 with 1 MiB and 64 KiB shards. Cold-ish: each iteration encodes the
//! next stripe set of a 256 MiB data pool (parity and memcpy targets rotate too), so inputs come
//! from DRAM rather than the 32 MiB L3. ISA-L is given reed-solomon-erasure's coefficients and
//! its parity is checked byte-equal before timing; reed-solomon-simd parity stays in the encoder's
//! own buffer (no copy out), which slightly favours it.
//!
//! After criterion's own report a table of mean GB/s (10^9 B/s) per library is printed.
//! `RS_BENCH_QUICK=1` shortens warm-up and measurement; `RS_BENCH_SHARD_PAD=BYTES` spaces shard
//! starts by shard size + BYTES instead of exactly the (power-of-two) shard size.
//! `RS_BENCH_BLOCK_SWEEP=1` measures only reverb's codec at block lengths 16 KiB..1 MiB
//! ("reverb-16k" ...) next to ISA-L, adding the 20+10 geometry whose m = 10 needs two passes per
//! block. `RS_BENCH_INTERLEAVED=reverb,isa-l,...` skips criterion and lets the engines take turns
//! in short slices (see `interleaved`): the fairest comparison on a loaded machine.
//!
//! Block length (`DEFAULT_BLOCK_LEN` = 32 KiB), chosen with
//! `RS_BENCH_INTERLEAVED=reverb-16k,reverb-32k,reverb-64k,reverb-128k,reverb-256k,reverb-1024k,isa-l`:
//! with one row group (m <= 8 on AVX-512) every block length was within noise, since each data
//! byte is read once whatever the block; at 20+10 (two groups re-reading each block) 16-64 KiB
//! gave 9.5-9.6 GB/s, 256 KiB 8.6 and 1 MiB 7.6: the block's k slices should stay in L2.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use rand::{rngs::StdRng, Rng, SeedableRng};
use reed_solomon_erasure::galois_8::ReedSolomon;
use reverb_benches::isal::{self, IsalEncoder};
use reverb_ckpt::rs::EncodeKernel;
use reverb_ckpt::ParityCodec;

const POOL_BYTES: usize = 256 << 20;
const GEOMETRIES: [(usize, usize); 3] = [(4, 2), (8, 2), (16, 4)];
const SHARD_LENS: [usize; 2] = [1 << 20, 64 << 10];
/// reverb uses the codec's defaults; reverb-avx2 forces the AVX2 kernel; isa-l-64k calls
/// ec_encode_data once per 64 KiB stripe (the cache-blocking trick applied to ISA-L).
const LIBRARIES: [&str; 7] = ["reverb", "reverb-avx2", "rse-raw", "rs-simd", "isa-l", "isa-l-64k", "memcpy"];
const ISAL_STRIPE_LEN: usize = 64 << 10;
/// RS_BENCH_BLOCK_SWEEP=1: reverb's codec at these block lengths, on these geometries.
const SWEEP_BLOCK_LENS: [(&str, usize); 6] = [
    ("reverb-16k", 16 << 10),
    ("reverb-32k", 32 << 10),
    ("reverb-64k", 64 << 10),
    ("reverb-128k", 128 << 10),
    ("reverb-256k", 256 << 10),
    ("reverb-1m", 1 << 20),
];
const SWEEP_GEOMETRIES: [(usize, usize); 4] = [(4, 2), (8, 2), (16, 4), (20, 10)];

/// Buffers shared by every measurement; touched up front so no page faults land in a timing.
struct Pools {
    data: Vec<u8>,
    /// Parity of every stripe set; m/k <= 1/2 for all geometries.
    parity: Vec<u8>,
    copy_target: Vec<u8>,
}

impl Pools {
    fn new() -> Self {
        let mut data = vec![0u8; POOL_BYTES];
        StdRng::seed_from_u64(0x5eed).fill(&mut data[..]);
        Self { data, parity: vec![1u8; POOL_BYTES / 2], copy_target: vec![1u8; POOL_BYTES] }
    }
}

/// One geometry and shard size carved out of the pools.
#[derive(Clone, Copy)]
struct Layout {
    data_shards: usize,
    parity_shards: usize,
    shard_len: usize,
    /// Distance between shard starts: shard_len plus RS_BENCH_SHARD_PAD bytes (default 0).
    shard_stride: usize,
    stripe_sets: usize,
}

impl Layout {
    fn data_shards_of<'a>(&self, pool: &'a [u8], set: usize) -> Vec<&'a [u8]> {
        let set_bytes = self.data_shards * self.shard_stride;
        let shards = pool[set * set_bytes..(set + 1) * set_bytes].chunks_exact(self.shard_stride);
        shards.map(|chunk| &chunk[..self.shard_len]).collect()
    }

    fn parity_shards_of<'a>(&self, pool: &'a mut [u8], set: usize) -> Vec<&'a mut [u8]> {
        let set_bytes = self.parity_shards * self.shard_stride;
        let shards = pool[set * set_bytes..(set + 1) * set_bytes].chunks_exact_mut(self.shard_stride);
        shards.map(|chunk| &mut chunk[..self.shard_len]).collect()
    }

    fn input_bytes(&self) -> usize {
        self.data_shards * self.shard_len
    }
}

/// Per (geometry, shard size, library), over all criterion calls (warm-up included).
#[derive(Default)]
struct Totals {
    time: Duration,
    input_bytes: u64,
    /// Fastest single call in bytes/s: the figure least disturbed by other load on a shared machine.
    best_rate: f64,
}

type TotalsByCase = BTreeMap<(usize, usize, usize, &'static str), Totals>;

fn main() {
    let quick = std::env::var_os("RS_BENCH_QUICK").is_some_and(|v| v == "1");
    let (warm_up, measurement) = if quick { (0.3, 1.0) } else { (1.0, 3.0) };
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_secs_f64(warm_up))
        .measurement_time(Duration::from_secs_f64(measurement))
        .sample_size(10)
        .configure_from_args();
    // Power-of-two shard strides make all k + m streams alias to the same cache sets; a pad
    // (e.g. 4160 = 4 KiB + 64) shows how much of the cost that is.
    let shard_pad: usize = std::env::var("RS_BENCH_SHARD_PAD").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    println!("rs bench: shard stride = shard size + {shard_pad} B");
    let isal_skip_reason = isal::unavailable_reason();
    if let Some(reason) = isal_skip_reason {
        println!("rs bench: skipping ISA-L: {reason}");
    }

    let plan = if std::env::var_os("RS_BENCH_BLOCK_SWEEP").is_some_and(|v| v == "1") {
        let mut libraries: Vec<&'static str> = SWEEP_BLOCK_LENS.iter().map(|(name, _)| *name).collect();
        libraries.push("isa-l");
        Plan { geometries: SWEEP_GEOMETRIES.to_vec(), shard_lens: vec![1 << 20], libraries }
    } else {
        Plan {
            geometries: GEOMETRIES.to_vec(),
            shard_lens: SHARD_LENS.to_vec(),
            libraries: LIBRARIES.to_vec(),
        }
    };
    println!("rs bench: reverb kernel on this CPU: {}", EncodeKernel::detect().name());

    let mut pools = Pools::new();
    if let Ok(engines) = std::env::var("RS_BENCH_INTERLEAVED") {
        interleaved(
            &mut pools,
            &engines,
            if engines.contains("k,") { &SWEEP_GEOMETRIES } else { &GEOMETRIES },
        );
        return;
    }
    let totals = RefCell::new(TotalsByCase::new());
    for &(data_shards, parity_shards) in &plan.geometries {
        for &shard_len in &plan.shard_lens {
            let layout = Layout {
                data_shards,
                parity_shards,
                shard_len,
                shard_stride: shard_len + shard_pad,
                stripe_sets: POOL_BYTES / (data_shards * (shard_len + shard_pad)),
            };
            bench_layout(
                &mut criterion,
                &mut pools,
                layout,
                &totals,
                &plan.libraries,
                isal_skip_reason.is_none(),
            );
        }
    }
    criterion.final_summary();
    print_table(&plan, &totals.borrow());
}

/// What one run measures.
struct Plan {
    geometries: Vec<(usize, usize)>,
    shard_lens: Vec<usize>,
    libraries: Vec<&'static str>,
}

fn bench_layout(
    criterion: &mut Criterion,
    pools: &mut Pools,
    layout: Layout,
    totals: &RefCell<TotalsByCase>,
    libraries: &[&'static str],
    with_isal: bool,
) {
    let Layout { data_shards: k, parity_shards: m, shard_len, stripe_sets, .. } = layout;
    let codec = ParityCodec::new(k, m).expect("valid geometry");
    // The AVX2 kernel only where the CPU has a faster default (otherwise it is "reverb" itself).
    let codec_avx2 = (codec.kernel() != EncodeKernel::Avx2)
        .then(|| ParityCodec::new(k, m).and_then(|c| c.with_kernel(EncodeKernel::Avx2)).ok())
        .flatten();
    let sweep_codecs: Vec<(&str, ParityCodec)> = SWEEP_BLOCK_LENS
        .iter()
        .filter(|(name, _)| libraries.contains(name))
        .map(|&(name, block_len)| (name, ParityCodec::new(k, m).and_then(|c| c.with_block_len(block_len))))
        .map(|(name, codec)| (name, codec.expect("valid geometry")))
        .collect();
    let raw = ReedSolomon::new(k, m).expect("valid geometry");
    let isal = with_isal.then(|| IsalEncoder::new(k, m, &codec.parity_coefficients()).expect("ISA-L init"));
    let mut simd = reed_solomon_simd::ReedSolomonEncoder::new(k, m, shard_len).expect("rs-simd geometry");
    let mut reverb_codecs: Vec<&ParityCodec> = vec![&codec];
    reverb_codecs.extend(codec_avx2.as_ref());
    reverb_codecs.extend(sweep_codecs.iter().map(|(_, codec)| codec));
    check_same_parity(&reverb_codecs, &raw, isal.as_ref(), layout, &pools.data);

    let mut group = criterion.benchmark_group(format!("rs_encode/{k}+{m}/{}KiB", shard_len >> 10));
    group.throughput(Throughput::Bytes(layout.input_bytes() as u64));
    for &library in libraries {
        let skip = match library {
            "isa-l" | "isa-l-64k" => isal.is_none(),
            "reverb-avx2" => codec_avx2.is_none(),
            _ => false,
        };
        if skip {
            continue;
        }
        let mut set = 0;
        group.bench_function(BenchmarkId::from_parameter(library), |b| {
            b.iter_custom(|iterations| {
                let start = Instant::now();
                for _ in 0..iterations {
                    set = (set + 1) % stripe_sets;
                    let data = layout.data_shards_of(&pools.data, set);
                    match library {
                        "reverb" => {
                            let mut parity = layout.parity_shards_of(&mut pools.parity, set);
                            codec.encode(&data, &mut parity).expect("encode");
                        }
                        "reverb-avx2" => {
                            let mut parity = layout.parity_shards_of(&mut pools.parity, set);
                            if let Some(codec) = &codec_avx2 {
                                codec.encode(&data, &mut parity).expect("encode");
                            }
                        }
                        name if name.starts_with("reverb-") => {
                            let mut parity = layout.parity_shards_of(&mut pools.parity, set);
                            if let Some((_, codec)) = sweep_codecs.iter().find(|(n, _)| *n == name) {
                                codec.encode(&data, &mut parity).expect("encode");
                            }
                        }
                        "rse-raw" => {
                            let mut parity = layout.parity_shards_of(&mut pools.parity, set);
                            raw.encode_sep(&data, &mut parity).expect("encode");
                        }
                        "rs-simd" => {
                            for shard in &data {
                                simd.add_original_shard(shard).expect("add shard");
                            }
                            let result = simd.encode().expect("encode");
                            black_box(result.recovery(0));
                        }
                        "isa-l" => {
                            let mut parity = layout.parity_shards_of(&mut pools.parity, set);
                            if let Some(isal) = &isal {
                                isal.encode(&data, &mut parity).expect("encode");
                            }
                        }
                        "isa-l-64k" => {
                            let mut parity = layout.parity_shards_of(&mut pools.parity, set);
                            if let Some(isal) = &isal {
                                encode_isal_striped(isal, &data, &mut parity);
                            }
                        }
                        _ => {
                            let bytes = layout.input_bytes();
                            pools.copy_target[set * bytes..(set + 1) * bytes]
                                .copy_from_slice(&pools.data[set * bytes..(set + 1) * bytes]);
                        }
                    }
                    black_box(&pools.parity);
                }
                let elapsed = start.elapsed();
                let mut totals = totals.borrow_mut();
                let entry = totals.entry((k, m, shard_len, library)).or_default();
                let bytes = iterations * layout.input_bytes() as u64;
                entry.time += elapsed;
                entry.input_bytes += bytes;
                entry.best_rate = entry.best_rate.max(bytes as f64 / elapsed.as_secs_f64().max(1e-9));
                elapsed
            })
        });
    }
    group.finish();
}

fn encode_isal_striped(isal: &IsalEncoder, data: &[&[u8]], parity: &mut [&mut [u8]]) {
    let shard_len = data[0].len();
    for start in (0..shard_len).step_by(ISAL_STRIPE_LEN) {
        let end = shard_len.min(start + ISAL_STRIPE_LEN);
        let data_stripe: Vec<&[u8]> = data.iter().map(|shard| &shard[start..end]).collect();
        let mut parity_stripe: Vec<&mut [u8]> =
            parity.iter_mut().map(|shard| &mut shard[start..end]).collect();
        isal.encode(&data_stripe, &mut parity_stripe).expect("encode");
    }
}

/// The GF(2^8) engines must write identical parity (same field, same matrix).
fn check_same_parity(
    codecs: &[&ParityCodec],
    raw: &ReedSolomon,
    isal: Option<&IsalEncoder>,
    layout: Layout,
    data_pool: &[u8],
) {
    let data = layout.data_shards_of(data_pool, 0);
    let mut outputs = Vec::new();
    for engine in 0..3 + codecs.len() {
        let mut parity = vec![vec![0u8; layout.shard_len]; layout.parity_shards];
        let mut parity_refs: Vec<&mut [u8]> = parity.iter_mut().map(|p| p.as_mut_slice()).collect();
        match (engine, isal) {
            (0, _) => raw.encode_sep(&data, &mut parity_refs).expect("encode"),
            (1, Some(isal)) => isal.encode(&data, &mut parity_refs).expect("encode"),
            (2, Some(isal)) => encode_isal_striped(isal, &data, &mut parity_refs),
            (1 | 2, None) => continue,
            (codec, _) => codecs[codec - 3].encode(&data, &mut parity_refs).expect("encode"),
        }
        outputs.push(parity);
    }
    assert!(outputs.windows(2).all(|w| w[0] == w[1]), "GF(2^8) engines disagree on parity");
}

fn print_table(plan: &Plan, totals: &TotalsByCase) {
    let mean_rate = |t: &Totals| t.input_bytes as f64 / t.time.as_secs_f64();
    print_rates(plan, totals, "best call", |t| t.best_rate);
    print_rates(plan, totals, "mean over all calls", mean_rate);
}

fn print_rates(plan: &Plan, totals: &TotalsByCase, what: &str, rate_of: impl Fn(&Totals) -> f64) {
    println!("\nReed-Solomon encode, GB/s of input data (10^9 B/s), {what}, {} MiB pool:", POOL_BYTES >> 20);
    print!("{:<16}", "geometry/shard");
    for &library in &plan.libraries {
        print!("{library:>12}");
    }
    println!("{:>13}{:>14}", "fastest", "reverb/isa-l");
    for &(k, m) in &plan.geometries {
        for &shard_len in &plan.shard_lens {
            print!("{:<16}", format!("{k}+{m} {}KiB", shard_len >> 10));
            let mut fastest = ("", 0.0);
            let rate =
                |library| totals.get(&(k, m, shard_len, library)).filter(|t| !t.time.is_zero()).map(&rate_of);
            let ratio = rate("reverb").zip(rate("isa-l")).map(|(reverb, isal)| reverb / isal);
            for &library in &plan.libraries {
                match totals.get(&(k, m, shard_len, library)) {
                    Some(t) if !t.time.is_zero() => {
                        let gb_per_s = rate_of(t) / 1e9;
                        print!("{gb_per_s:>12.2}");
                        if library != "memcpy" && gb_per_s > fastest.1 {
                            fastest = (library, gb_per_s);
                        }
                    }
                    _ => print!("{:>12}", "-"),
                }
            }
            match ratio {
                Some(ratio) => println!("{:>13}{ratio:>13.2}x", fastest.0),
                None => println!("{:>13}{:>14}", fastest.0, "-"),
            }
        }
    }
}

/// RS_BENCH_INTERLEAVED=engine,engine,...: the engines take turns in short slices (6 encodes of
/// 1 MiB shards each, 40 rounds), so a load spike on the shared machine hits all of them alike;
/// prints best, 75th-percentile and median GB/s per engine and the reverb/isa-l ratio of each.
/// Engines: reverb, reverb-avx2, reverb-<N>k (block length N KiB), isa-l, rse-raw.
fn interleaved(pools: &mut Pools, engines: &str, geometries: &[(usize, usize)]) {
    const ROUNDS: usize = 40;
    const ENCODES_PER_SLICE: usize = 6;
    let engines: Vec<&str> = engines.split(',').collect();
    for &(k, m) in geometries {
        let shard_len = 1 << 20;
        let layout = Layout {
            data_shards: k,
            parity_shards: m,
            shard_len,
            shard_stride: shard_len,
            stripe_sets: POOL_BYTES / (k * shard_len),
        };
        let default_codec = ParityCodec::new(k, m).expect("valid geometry");
        let isal = IsalEncoder::new(k, m, &default_codec.parity_coefficients()).ok();
        let raw = ReedSolomon::new(k, m).expect("valid geometry");
        let codecs: Vec<Option<ParityCodec>> = engines
            .iter()
            .map(|&engine| match engine {
                "reverb" => Some(ParityCodec::new(k, m).expect("valid geometry")),
                "reverb-avx2" => ParityCodec::new(k, m).and_then(|c| c.with_kernel(EncodeKernel::Avx2)).ok(),
                _ => {
                    let kib = engine.strip_prefix("reverb-")?.strip_suffix('k')?.parse::<usize>().ok()?;
                    ParityCodec::new(k, m).and_then(|c| c.with_block_len(kib << 10)).ok()
                }
            })
            .collect();
        let mut rates: Vec<Vec<f64>> = vec![Vec::new(); engines.len()];
        let mut set = 0;
        for _ in 0..ROUNDS {
            for (index, &engine) in engines.iter().enumerate() {
                let start = Instant::now();
                for _ in 0..ENCODES_PER_SLICE {
                    set = (set + 1) % layout.stripe_sets;
                    let data = layout.data_shards_of(&pools.data, set);
                    let mut parity = layout.parity_shards_of(&mut pools.parity, set);
                    match (engine, &codecs[index], &isal) {
                        (_, Some(codec), _) => codec.encode(&data, &mut parity).expect("encode"),
                        ("isa-l", _, Some(isal)) => isal.encode(&data, &mut parity).expect("encode"),
                        ("rse-raw", _, _) => raw.encode_sep(&data, &mut parity).expect("encode"),
                        _ => break,
                    }
                }
                let bytes = ENCODES_PER_SLICE * layout.input_bytes();
                rates[index].push(bytes as f64 / start.elapsed().as_secs_f64() / 1e9);
            }
        }
        let isal_index = engines.iter().position(|&e| e == "isa-l");
        println!("{k}+{m} 1024KiB, GB/s best / p75 / median (ratio to isa-l):");
        for rates in &mut rates {
            rates.sort_by(|a, b| b.total_cmp(a));
        }
        let summary = |rates: &[f64]| [rates[0], rates[rates.len() / 4], rates[rates.len() / 2]];
        for (index, engine) in engines.iter().enumerate() {
            let [best, p75, median] = summary(&rates[index]);
            print!("  {engine:<12} {best:>6.2} {p75:>6.2} {median:>6.2}");
            if let Some(isal) = isal_index.filter(|&i| i != index).map(|i| summary(&rates[i])) {
                print!("   ({:.2}x {:.2}x {:.2}x)", best / isal[0], p75 / isal[1], median / isal[2]);
            }
            println!();
        }
    }
}
