//! Ring plus all-to-all: each iteration passes a block to the next rank, then every rank
//! sends a slice of its block to every other rank; blocks mix what arrives. Named receives.
//! With `--msg-bytes` the block passed on is that many bytes (the block, then filler).

use anyhow::{bail, Result};
use reverb_runtime::Runtime;

use super::{combine_checksums, fnv1a, msg, u64_at, AppArgs, FNV_SEED};

const TAG_RING: u64 = 0x61;
const TAG_ALL: u64 = 0x62;
/// Protected separately (`Runtime::protect`): the hash of the last block that came round.
const ENTRY_LAST_IN: u32 = reverb_runtime::FIRST_USER_ENTRY;

fn mix(block: &mut [u8], incoming: &[u8], salt: u64) {
    let mut h = fnv1a(FNV_SEED ^ salt, incoming);
    for b in block.iter_mut() {
        h = h.rotate_left(7).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        *b ^= (h >> 56) as u8;
    }
}

pub fn run(rt: &mut Runtime, args: &AppArgs) -> Result<Option<u64>> {
    let (me, size) = (rt.rank(), rt.size());
    let len = args.size.max(8);
    if size < 2 {
        bail!("ring: needs at least 2 ranks");
    }
    let initial = || {
        let mut s = 0u64.to_le_bytes().to_vec();
        s.extend((0..len).map(|i| (i as u32).wrapping_mul(me + 1) as u8));
        s
    };
    let mut state = rt.restore_or_else(initial);
    if state.len() != 8 + len {
        bail!("ring: state of {} bytes, expected {}", state.len(), 8 + len);
    }
    let mut iter = u64_at(&state, 0)?;
    let mut last_in = match rt.restored(ENTRY_LAST_IN) {
        Some(bytes) => u64_at(&bytes, 0)?,
        None => 0,
    };
    let (next, prev) = ((me + 1) % size, (me + size - 1) % size);
    while iter < args.iters {
        let block = msg::pad("ring: a block", &state[8..], args.msg_bytes, msg::salt(me, TAG_RING))?;
        msg::send(rt, next, TAG_RING, &block)?;
        let got = msg::recv_from(rt, prev, TAG_RING, block.len())?;
        let got = msg::unpad("ring: a block", &got, len, msg::salt(prev, TAG_RING))?;
        mix(&mut state[8..], got, iter);
        last_in = fnv1a(last_in, got);
        let slice = len / size as usize;
        for peer in (0..size).filter(|&p| p != me) {
            let at = peer as usize * slice;
            rt.send(peer, TAG_ALL, &state[8 + at..8 + at + slice])?;
        }
        for peer in (0..size).filter(|&p| p != me) {
            let got = rt.recv_from(peer, TAG_ALL)?;
            mix(&mut state[8..], &got.payload, iter ^ u64::from(peer));
        }
        iter += 1;
        state[..8].copy_from_slice(&iter.to_le_bytes());
        if args.ckpt_every > 0 && iter % args.ckpt_every == 0 && iter < args.iters {
            rt.protect(ENTRY_LAST_IN, &last_in.to_le_bytes())?;
            rt.checkpoint(&state)?;
        }
    }
    Ok(combine_checksums(rt, fnv1a(last_in, &state[8..]))?)
}
