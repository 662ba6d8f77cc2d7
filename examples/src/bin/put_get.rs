//! One-sided RMA on the transport layer: register a region, put, get and check.
//!
//! Ranks pair up (0 with 1, 2 with 3, ...). The even rank fills its region with a pattern and
//! `put_imm`s it into its partner's region; the immediate tells the partner the bytes are there.
//! The partner checks them, adds one to every byte in place and says so with a tagged message;
//! the even rank `get`s the region back and checks the result. Rank 0 prints a checksum.
//!
//! ```sh
//! reverb run -n 2 -- target/release/put_get
//! ```

use std::process::ExitCode;
use std::time::{Duration, Instant};

use reverb_examples::{fnv1a, report, ExampleError, Result, FNV_SEED};
use reverb_transport::bootstrap::TcpBootstrap;
use reverb_transport::{
    Access, Bootstrap, CompletionKind, Provider, RecvBuffer, Region, RemoteRegion, Rma, Signal, Source,
    TagMatch, TransportConfig,
};

/// Bytes moved each way: above the default eager threshold, below any provider's limit.
const LEN: usize = 64 << 10;
const WAIT: Duration = Duration::from_secs(30);
const TAG_DONE: u64 = 7;
/// The immediate that marks the put's arrival.
const IMM: u32 = 0x5eed;

fn main() -> ExitCode {
    report("put_get", run())
}

fn pattern(rank: u32) -> Vec<u8> {
    (0..LEN).map(|i| (i as u32).wrapping_mul(31).wrapping_add(rank * 7) as u8).collect()
}

fn run() -> Result<()> {
    let mut boot = TcpBootstrap::connect_from_env()?;
    let mut provider = reverb_transport::open(&TransportConfig::from_env()?, &mut boot)?;
    let (me, size) = (provider.rank(), provider.size());
    if size % 2 != 0 {
        return Err(ExampleError::Usage(format!("put_get pairs ranks: {size} is odd")));
    }
    // Peers may read and write this region; its descriptor goes to everyone out of band.
    let region = provider.alloc_region(LEN, Access::REMOTE_RW)?;
    let all = boot.allgather(&region.remote().to_bytes())?;
    let partner = me ^ 1;
    let theirs = RemoteRegion::from_bytes(&all[partner as usize])?;
    let p = provider.as_mut();
    let checksum = if me % 2 == 0 { initiate(p, &region, &theirs)? } else { respond(p, &region)? };
    // Rank 0 reports the checksums of every pair, in rank order.
    let sums = boot.allgather(&checksum.to_le_bytes())?;
    if me == 0 {
        let job = sums.iter().fold(FNV_SEED, |h, s| fnv1a(h, s));
        println!("put_get: {} pairs, {LEN} bytes each way, checked; checksum: {job:016x}", size / 2);
    }
    boot.barrier()?;
    Ok(())
}

/// Even rank: put the pattern, wait for the partner's word, get the result back and check it.
fn initiate(p: &mut dyn Provider, region: &Region, theirs: &RemoteRegion) -> Result<u64> {
    let sent = pattern(p.rank());
    region.write(0, &sent)?;
    let rma = Rma { local: region, local_offset: 0, remote: theirs, remote_offset: 0, len: LEN };
    let op = p.put_imm(rma, IMM, Signal::Yes)?;
    p.wait_op(op, WAIT)?.into_result()?;
    let op = p.post_recv(
        Source::Rank(theirs.owner),
        TagMatch::exact(TAG_DONE),
        RecvBuffer::Owned { capacity: 8 },
    )?;
    p.wait_op(op, WAIT)?.into_result()?;
    region.fill(0, LEN, 0)?;
    let op = p.get(rma, Signal::Yes)?;
    p.wait_op(op, WAIT)?.into_result()?;
    let expected: Vec<u8> = sent.iter().map(|b| b.wrapping_add(1)).collect();
    let got = region.to_vec(0, LEN)?;
    if got != expected {
        let at = got.iter().zip(&expected).position(|(a, b)| a != b).unwrap_or(0);
        return Err(ExampleError::Check(format!("get returned a wrong byte at offset {at}")));
    }
    Ok(fnv1a(FNV_SEED, &got))
}

/// Odd rank: wait for the put's immediate, check the bytes, add one to each, tell the partner.
fn respond(p: &mut dyn Provider, region: &Region) -> Result<u64> {
    let partner = p.rank() ^ 1;
    wait_for_imm(p)?;
    let mut data = region.to_vec(0, LEN)?;
    if data != pattern(partner) {
        return Err(ExampleError::Check("the put's bytes differ from the pattern".into()));
    }
    data.iter_mut().for_each(|b| *b = b.wrapping_add(1));
    region.write(0, &data)?;
    let op = p.send(partner, TAG_DONE, b"done")?;
    p.wait_op(op, WAIT)?.into_result()?;
    Ok(fnv1a(FNV_SEED, &data))
}

fn wait_for_imm(p: &mut dyn Provider) -> Result<()> {
    let start = Instant::now();
    let mut seen = Vec::new();
    while start.elapsed() < WAIT {
        p.wait(&mut seen, WAIT - start.elapsed())?;
        for c in seen.drain(..) {
            if let CompletionKind::Imm { imm, len, .. } = c.into_result()?.kind {
                if (imm, len) != (IMM, LEN) {
                    return Err(ExampleError::Check(format!("immediate {imm:#x} for {len} bytes")));
                }
                return Ok(());
            }
        }
    }
    Err(ExampleError::Check(format!("no put arrived in {WAIT:?}")))
}
