//! Applications on the fault-tolerant runtime, run as `reverb app NAME` under `reverb run`.
//! Each prints `checksum: <hex>` of its final state from rank 0 (and writes it to
//! `$REVERB_RUNTIME_REPORT/checksum` when set), so a run with failures can be compared
//! with a failure-free one.

mod collectives;
mod master_worker;
mod msg;
mod ring;
mod stencil;

use anyhow::{Context, Result};
use reverb_runtime::{run_objects, Runtime, RuntimeConfig, RuntimeError};
use reverb_transport::config::env_path;

#[derive(clap::Args, Debug)]
pub struct AppArgs {
    /// stencil (Jacobi 2D, halo exchange by tag), master-worker (any-source receives) or ring
    /// (ring plus all-to-all exchange) or collectives (every rank multicasts its cell to all,
    /// then an all-reduce: LeanMD-like, for collective-aware logging).
    #[arg(value_parser = ["stencil", "master-worker", "ring", "collectives"])]
    pub name: String,
    /// Iterations (stencil, ring) or task rounds (master-worker), 1..=100000000.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub iters: u64,
    /// Grid edge (stencil, at most 4096: its grid is edge^2 doubles), work per task
    /// (master-worker) or payload bytes (ring, collectives), 1..=1048576.
    #[arg(long, default_value_t = 256, value_parser = crate::usage::int::<usize>(1, 1 << 20))]
    pub size: usize,
    /// Checkpoint every this many iterations (0: never), 0..=100000000.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(0..=100_000_000))]
    pub ckpt_every: u64,
    /// Bytes of each of the app's main messages (stencil halos, ring blocks, master-worker
    /// requests and tasks, collectives' cells): its data, then filler the receiver checks; in
    /// pieces above `REVERB_LOG_MAX_MESSAGE`. The answer does not depend on it. 0: the data
    /// alone.
    #[arg(long, default_value_t = 0)]
    pub msg_bytes: usize,
}

/// FNV-1a over bytes: the checksum of a final state.
pub(crate) fn fnv1a(seed: u64, bytes: &[u8]) -> u64 {
    let mut h = seed;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

pub(crate) const FNV_SEED: u64 = 0xcbf2_9ce4_8422_2325;
const TAG_CHECKSUM: u64 = 0xC5;

/// Rank 0 combines every rank's checksum in rank order; returns it there.
pub(crate) fn combine_checksums(rt: &mut Runtime, mine: u64) -> Result<Option<u64>, RuntimeError> {
    if rt.rank() != 0 {
        rt.send(0, TAG_CHECKSUM, &mine.to_le_bytes())?;
        return Ok(None);
    }
    let mut all = FNV_SEED;
    all = fnv1a(all, &mine.to_le_bytes());
    for r in 1..rt.size() {
        let m = rt.recv_from(r, TAG_CHECKSUM)?;
        all = fnv1a(all, &m.payload);
    }
    Ok(Some(all))
}

/// Fills `into` with the little-endian f64s of `bytes` (a peer's): `what` of the wrong length
/// is an error.
pub(crate) fn read_f64s(what: &str, bytes: &[u8], into: &mut [f64]) -> Result<()> {
    if bytes.len() != into.len() * 8 {
        anyhow::bail!("{what} of {} bytes, expected {}", bytes.len(), into.len() * 8);
    }
    for (v, b) in into.iter_mut().zip(bytes.chunks_exact(8)) {
        *v = f64::from_le_bytes(b.try_into()?);
    }
    Ok(())
}

/// Decodes a little-endian u64 at `at`, as an error if the bytes are short.
pub(crate) fn u64_at(bytes: &[u8], at: usize) -> Result<u64> {
    bytes
        .get(at..at + 8)
        .and_then(|s| s.try_into().ok())
        .map(u64::from_le_bytes)
        .with_context(|| format!("state of {} bytes has no u64 at {at}", bytes.len()))
}

/// Runs the app as every rank this process hosts: one, or its objects under
/// `reverb run --objects` (the same code for both).
pub fn main(args: AppArgs) -> Result<()> {
    reverb_transport::diag::init_stderr().context("diagnostics")?;
    let config = RuntimeConfig::from_env().context("runtime settings")?;
    let result = run_objects(config, |rt| run_rank(rt, &args)).map(|_| ());
    if let Some(cause) = result.as_ref().err().and_then(unrecoverable) {
        // One line: `reverb run` takes it and says the job's cause once for all ranks.
        eprintln!("{cause}");
        std::process::exit(1);
    }
    result
}

/// The runtime's unrecoverable report in `e`'s chain ("unrecoverable failure: ...").
fn unrecoverable(e: &anyhow::Error) -> Option<String> {
    e.chain().map(|c| c.to_string()).find(|t| t.starts_with("unrecoverable failure: "))
}

/// One rank: the app, the runtime's shutdown, the checksum at rank 0.
fn run_rank(mut rt: Runtime, args: &AppArgs) -> Result<()> {
    let checksum = match args.name.as_str() {
        "stencil" => stencil::run(&mut rt, args)?,
        "master-worker" => master_worker::run(&mut rt, args)?,
        "collectives" => collectives::run(&mut rt, args)?,
        _ => ring::run(&mut rt, args)?,
    };
    let report_dir = env_path("REVERB_RUNTIME_REPORT")?;
    let restarted = rt.restarted();
    let rank = rt.rank();
    rt.finalize().context("runtime finalize")?;
    if let Some(sum) = checksum {
        println!("checksum: {sum:016x}");
        if let Some(dir) = report_dir {
            let path = dir.join("checksum");
            std::fs::write(&path, format!("{sum:016x}\n"))
                .with_context(|| format!("writing {}", path.display()))?;
        }
    }
    if restarted {
        eprintln!("rank {rank}: restarted incarnation finished");
    }
    Ok(())
}
