//! A LeanMD-like collective pattern on the runtime's collectives: every iteration each rank
//! in turn multicasts its cell (`size` bytes of f64) to all (`Runtime::broadcast`), every
//! rank folds the cells it saw into local forces (one per value of its cell), and an
//! all-reduce sums the forces over the ranks. Under collective-aware logging
//! (`REVERB_LOG_CAML=1`) each cell is logged once, at its root, instead of at every
//! inter-node tree send, and a force contribution to a parent other than the all-reduce's
//! root leaves the sender log once the sum is known. With `--msg-bytes` a cell is broadcast
//! as that many bytes (its values, then filler), in pieces above the runtime's largest message.

use anyhow::Result;
use reverb_runtime::Runtime;

use super::{combine_checksums, fnv1a, msg, u64_at, AppArgs, FNV_SEED};

const TAG_CELL: u64 = 0x71;
const TAG_FORCE: u64 = 0x72;
const WHAT: &str = "collectives: a cell";

fn encode(iter: u64, cell: &[f64]) -> Vec<u8> {
    let mut out = iter.to_le_bytes().to_vec();
    out.extend(cell.iter().flat_map(|v| v.to_le_bytes()));
    out
}

fn decode(bytes: &[u8], into: &mut [f64]) -> Result<()> {
    super::read_f64s("collectives: a cell", bytes, into)
}

pub fn run(rt: &mut Runtime, args: &AppArgs) -> Result<Option<u64>> {
    let (me, size) = (rt.rank(), rt.size());
    let values = (args.size / 8).max(1);
    let initial = || {
        let cell: Vec<f64> = (0..values).map(|i| f64::from(me) + i as f64 * 1e-3).collect();
        encode(0, &cell)
    };
    let state = rt.restore_or_else(initial);
    let mut cell = vec![0.0; values];
    decode(state.get(8..).unwrap_or_default(), &mut cell)?;
    let mut iter = u64_at(&state, 0)?;
    let mut theirs = vec![0.0; values];
    // A cell as broadcast: its values, then filler up to --msg-bytes.
    let cell_len = if args.msg_bytes > 0 { args.msg_bytes } else { values * 8 };
    while iter < args.iters {
        let mut force = vec![0.0; values];
        for root in 0..size {
            let mine = match root == me {
                true => msg::pad(WHAT, &encode(iter, &cell)[8..], args.msg_bytes, msg::salt(me, TAG_CELL))?,
                false => Vec::new(),
            };
            let got = msg::broadcast(rt, root, TAG_CELL, &mine, cell_len)?;
            decode(msg::unpad(WHAT, &got, values * 8, msg::salt(root, TAG_CELL))?, &mut theirs)?;
            force.iter_mut().zip(&theirs).zip(&cell).for_each(|((f, t), c)| *f += t * c * 1e-6);
        }
        let total = msg::allreduce_sum(rt, TAG_FORCE, &force)?;
        for (c, f) in cell.iter_mut().zip(&total) {
            *c = *c * 0.999 + 1e-3 * f64::from(me + 1) + f * 1e-3;
        }
        iter += 1;
        if args.ckpt_every > 0 && iter % args.ckpt_every == 0 && iter < args.iters {
            rt.checkpoint(&encode(iter, &cell))?;
        }
    }
    Ok(combine_checksums(rt, fnv1a(FNV_SEED, &encode(iter, &cell)))?)
}
