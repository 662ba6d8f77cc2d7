//! `reverb bench ckpt`: checkpoint throughput next to put bandwidth, on the same provider, ranks
//! and sizes. Per size: the engine's windowed put bandwidth (as `reverb bench bw --op put`), then
//! coordinated checkpoints in which rank 0 protects `size` bytes and rank 1 nothing (one
//! direction, as bw), rank 1 being rank 0's buddy on the other simulated node.
//!
//! A checkpoint pipelines levels 1 and 2 per 256 KiB chunk: copy into the local slot, CRC32C, put
//! to the buddy; then, once every put completed, the header flip. Columns:
//! - buddy: the buddy copy, i.e. the time in the transport (posting and completing the puts, the
//!   flip), as `bw` times its puts;
//! - L1+L2: local copy + CRC32C + buddy copy;
//! - ckpt: the whole call (L1+L2, the level-1 reports and the agreement round).

use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use reverb_ckpt::image::image_len;
use reverb_ckpt::{Checkpointer, CkptConfig, ProtectSet};

use super::engine::{run_in_job, Op, Output, Params, Role};

/// Bytes per put of the buddy copy (and per CRC chunk): the checkpointer's default.
const TRANSFER_LEN: usize = reverb_ckpt::image::DEFAULT_CHUNK_LEN;

pub fn main(params: &Params) -> Result<()> {
    let mut params = params.clone();
    // The buddy must sit on another node: one rank per simulated node unless told otherwise.
    params.ranks_per_node.get_or_insert(1);
    let params = &params;
    run_in_job(params, |session| {
        let out = Output {
            json: params.json,
            progress: params.progress,
            provider: session.provider().kind().to_string(),
            op: Op::Put,
        };
        if session.role() == Role::Initiator && !params.json {
            let notes = [
                format!(
                    "provider: {}   ranks: 0 -> 1 (buddy on the other node)   put window: {}   cq_mod: {}",
                    out.provider, params.window, params.cq_mod
                ),
                format!(
                    "checkpoint: rank 0 protects #bytes, levels 1-2 (no parity), {} KiB puts and CRC chunks, window 16",
                    TRANSFER_LEN >> 10
                ),
                format!("per {} KiB chunk: copy to the local slot, CRC32C, put to the buddy; then the header flip", TRANSFER_LEN >> 10),
                "buddy = time in the transport (puts, completions, flip); L1+L2 = copy + CRC32C + buddy".into(),
                "ckpt = whole checkpoint call (L1+L2 + agreement round)".into(),
                "GB/s = 10^9 bytes/s; put GB/s = bench bw --op put average".into(),
            ];
            out.header(
                "reverb checkpoint throughput vs put bandwidth",
                &notes,
                " #bytes     put[GB/s]  buddy[GB/s]  ratio  L1+L2[GB/s]  ratio   ckpt[GB/s]  ratio  #ckpts",
            );
        }
        let max = params.max_size();
        let config = CkptConfig {
            slot_len: image_len(max + 64, TRANSFER_LEN).max(4096),
            chunk_len: TRANSFER_LEN,
            transfer_len: TRANSFER_LEN,
            buddy: true,
            parity: None,
            timeout: params.timeout,
            team: None,
        };
        let mut ckpt = {
            let (provider, boot) = session.parts();
            Checkpointer::new(provider, boot, config).context("setting up the checkpointer")?
        };
        let data = vec![0xa5u8; max];
        for &size in &params.sizes {
            let (iters, warmup) = params.bw_counts(size);
            out.progress(&format!("ckpt {size} B: {iters} puts, then checkpoints"));
            session.verify(Op::Put, size, true)?;
            let put = session.bandwidth(Op::Put, size, iters, warmup, params.window, params.cq_mod)?;
            let checkpoints = params.iters.unwrap_or_else(|| ((1u64 << 30) / size as u64).clamp(5, 1000));
            let (mut buddy, mut write, mut total) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
            let initiator = session.role() == Role::Initiator;
            let (provider, _) = session.parts();
            let mut set = ProtectSet::new();
            if initiator {
                set.protect(1, &data[..size])?;
            }
            for i in 0..checkpoints + 2 {
                let start = std::time::Instant::now();
                ckpt.checkpoint(provider, &set).with_context(|| format!("checkpoint of {size} bytes"))?;
                // The first two fault in both slots; they are not measured.
                if i >= 2 {
                    total += start.elapsed();
                    buddy += ckpt.last_stats().buddy;
                    write += ckpt.last_stats().write;
                }
            }
            if initiator {
                let put = put.ok_or_else(|| anyhow!("the initiator measured no put bandwidth"))?;
                let put_gbs = put.avg_mib_s * (1 << 20) as f64 / 1e9;
                let bytes = (size as u64 * checkpoints) as f64;
                let gbs = |d: Duration| bytes / d.as_secs_f64().max(1e-12) / 1e9;
                let rates = Rates { put: put_gbs, buddy: gbs(buddy), write: gbs(write), ckpt: gbs(total) };
                row(params.json, &out.provider, size, rates, checkpoints);
            }
        }
        Ok(())
    })
}

/// GB/s of one size.
struct Rates {
    put: f64,
    buddy: f64,
    write: f64,
    ckpt: f64,
}

fn row(json: bool, provider: &str, size: usize, r: Rates, checkpoints: u64) {
    let ratio = |x: f64| if r.put > 0.0 { x / r.put } else { 0.0 };
    if json {
        let row = serde_json::json!({
            "test": "ckpt", "provider": provider, "bytes": size, "put_gb_s": r.put,
            "buddy_gb_s": r.buddy, "buddy_over_put": ratio(r.buddy),
            "l1_l2_gb_s": r.write, "l1_l2_over_put": ratio(r.write),
            "ckpt_gb_s": r.ckpt, "ckpt_over_put": ratio(r.ckpt), "checkpoints": checkpoints,
        });
        println!("{row}");
    } else {
        println!(
            " {size:<10} {:>9.2} {:>12.2} {:>6.2} {:>12.2} {:>6.2} {:>12.2} {:>6.2}  {checkpoints}",
            r.put,
            r.buddy,
            ratio(r.buddy),
            r.write,
            ratio(r.write),
            r.ckpt,
            ratio(r.ckpt)
        );
    }
}
