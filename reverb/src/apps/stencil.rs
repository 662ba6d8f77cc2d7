//! Jacobi 2D on an `size`×`size` grid, rows split over the ranks; halos by tag, so every
//! receive is named and the run is deterministic. The top edge is held at 100, the others at 0.
//! With `--msg-bytes` a halo is that many bytes (the row, then filler; see `msg`).

use anyhow::{bail, Result};
use reverb_runtime::Runtime;

use super::{combine_checksums, fnv1a, msg, u64_at, AppArgs, FNV_SEED};

const TAG_TO_UPPER: u64 = 0x51;
const TAG_TO_LOWER: u64 = 0x52;
const TOP_EDGE: f64 = 100.0;

fn rows_of(rank: u32, size: u32, n: usize) -> (usize, usize) {
    let (base, extra) = (n / size as usize, n % size as usize);
    let r = rank as usize;
    let rows = base + usize::from(r < extra);
    (r * base + r.min(extra), rows)
}

fn encode(iter: u64, grid: &[f64]) -> Vec<u8> {
    let mut out = iter.to_le_bytes().to_vec();
    for v in grid {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

fn row_bytes(row: &[f64]) -> Vec<u8> {
    row.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn read_row(bytes: &[u8], into: &mut [f64]) -> Result<()> {
    super::read_f64s("halo", bytes, into)
}

/// Sends `row` to `dest`: `--msg-bytes` bytes (the row, then filler), in pieces if large.
fn send_halo(rt: &mut Runtime, args: &AppArgs, dest: u32, tag: u64, row: &[f64]) -> Result<()> {
    let halo = msg::pad("stencil: a halo", &row_bytes(row), args.msg_bytes, msg::salt(rt.rank(), tag))?;
    msg::send(rt, dest, tag, &halo)
}

/// Receives a halo from `source` (as `send_halo` sent it) into `into`.
fn recv_halo(rt: &mut Runtime, args: &AppArgs, source: u32, tag: u64, into: &mut [f64]) -> Result<()> {
    let len = if args.msg_bytes > 0 { args.msg_bytes } else { into.len() * 8 };
    if args.msg_bytes == 0 && len <= msg::limit(rt) {
        // The row alone, read where it landed.
        return read_row(&rt.recv_from(source, tag)?.payload, into);
    }
    let halo = msg::recv_from(rt, source, tag, len)?;
    read_row(msg::unpad("stencil: a halo", &halo, into.len() * 8, msg::salt(source, tag))?, into)
}

/// The largest grid edge: 4096^2 doubles is 128 MiB.
const STENCIL_EDGE_MAX: usize = 4096;

pub fn run(rt: &mut Runtime, args: &AppArgs) -> Result<Option<u64>> {
    let n = args.size;
    let (me, size) = (rt.rank(), rt.size());
    if n < size as usize || n < 3 {
        bail!("stencil: grid edge {n} too small for {size} ranks");
    }
    if n > STENCIL_EDGE_MAX {
        bail!("stencil: grid edge {n} above {STENCIL_EDGE_MAX} (--size)");
    }
    let (first_row, rows) = rows_of(me, size, n);
    let cells = rows * n;
    let initial = || {
        let grid: Vec<f64> = (0..cells)
            .map(|c| {
                let (i, j) = (first_row + c / n, c % n);
                ((i * 31 + j * 17) % 97) as f64 / 97.0
            })
            .collect();
        encode(0, &grid)
    };
    let state = rt.restore_or_else(initial);
    let mut iter = u64_at(&state, 0)?;
    if state.len() != 8 + cells * 8 {
        bail!("stencil: state of {} bytes, expected {}", state.len(), 8 + cells * 8);
    }
    let mut grid = vec![0.0; cells];
    read_row(&state[8..], &mut grid)?;
    let mut next = vec![0.0; cells];
    let mut above = vec![TOP_EDGE; n];
    let mut below = vec![0.0; n];
    while iter < args.iters {
        if me > 0 {
            send_halo(rt, args, me - 1, TAG_TO_UPPER, &grid[..n])?;
        }
        if me + 1 < size {
            send_halo(rt, args, me + 1, TAG_TO_LOWER, &grid[cells - n..])?;
        }
        if me > 0 {
            recv_halo(rt, args, me - 1, TAG_TO_LOWER, &mut above)?;
        }
        if me + 1 < size {
            recv_halo(rt, args, me + 1, TAG_TO_UPPER, &mut below)?;
        }
        for i in 0..rows {
            for j in 0..n {
                let up = if i == 0 { above[j] } else { grid[(i - 1) * n + j] };
                let down = if i + 1 == rows { below[j] } else { grid[(i + 1) * n + j] };
                let left = if j == 0 { 0.0 } else { grid[i * n + j - 1] };
                let right = if j + 1 == n { 0.0 } else { grid[i * n + j + 1] };
                next[i * n + j] = 0.25 * (up + down + left + right);
            }
        }
        std::mem::swap(&mut grid, &mut next);
        iter += 1;
        if args.ckpt_every > 0 && iter % args.ckpt_every == 0 && iter < args.iters {
            rt.checkpoint(&encode(iter, &grid))?;
        }
    }
    let mine = fnv1a(FNV_SEED, &row_bytes(&grid));
    Ok(combine_checksums(rt, mine)?)
}
