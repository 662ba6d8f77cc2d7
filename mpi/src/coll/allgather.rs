//! Gathers: every rank's bytes at a root (linear), or at every rank (recursive doubling on a
//! power of two, a ring otherwise or for large totals: `tuning::allgather`).

use std::ffi::c_int;

use super::bcast::wrap;
use super::frame::{frame, unframe};
use super::tuning::{self, Allgather};
use super::Group;
use crate::abi::*;
use crate::errors::{MpiError, MpiResult};
use crate::ffi::UserBuf;
use crate::state::State;

/// Every rank's bytes at `root`, in rank order.
pub(crate) fn gather(s: &mut State, g: &Group, root: usize, mine: &[u8]) -> MpiResult<Option<Vec<Vec<u8>>>> {
    if g.me != root {
        g.send(s, root, mine)?;
        return Ok(None);
    }
    let mut all = Vec::with_capacity(g.size());
    for r in 0..g.size() {
        all.push(if r == root { mine.to_vec() } else { g.recv(s, r)? });
    }
    Ok(Some(all))
}

/// Every rank's bytes at every rank, in rank order. `total`: the bytes of all of them, alike
/// at every rank (0 where only the ranks' own lengths are known: small setup exchanges).
pub(crate) fn allgather(s: &mut State, g: &Group, mine: &[u8], total: usize) -> MpiResult<Vec<Vec<u8>>> {
    match tuning::allgather(total, g.size()) {
        Allgather::RecursiveDoubling => recursive_doubling(s, g, mine, false),
        Allgather::Ring => ring(s, g, mine),
    }
}

/// Round k (n a power of two), ranks 2^k apart swap the 2^k pieces each holds: framed, or
/// (`alike`: every rank's piece as long as this one's, MPI_Allgather's) one after another.
fn recursive_doubling(s: &mut State, g: &Group, mine: &[u8], alike: bool) -> MpiResult<Vec<Vec<u8>>> {
    let n = g.size();
    let mut all = vec![Vec::new(); n];
    all[g.me] = mine.to_vec();
    let mut mask = 1;
    while mask < n {
        let partner = g.me ^ mask;
        let (base, theirs) = (g.me & !(mask - 1), partner & !(mask - 1));
        let ours = &all[base..base + mask];
        let got = g.shift(s, partner, partner, &if alike { ours.concat() } else { frame(ours) })?;
        let pieces = match alike {
            false => unframe(&got, mask)?,
            true if got.len() == mask * mine.len() => {
                got.chunks(mine.len().max(1)).map(<[u8]>::to_vec).collect()
            }
            true => return Err(g.too_long(got.len(), mask * mine.len())),
        };
        for (i, piece) in pieces.into_iter().take(mask).enumerate() {
            all[theirs + i] = piece;
        }
        mask <<= 1;
    }
    Ok(all)
}

/// n - 1 rounds: each rank passes the piece it got last to its right.
fn ring(s: &mut State, g: &Group, mine: &[u8]) -> MpiResult<Vec<Vec<u8>>> {
    let n = g.size();
    let (right, left) = ((g.me + 1) % n, (g.me + n - 1) % n);
    let mut all = vec![Vec::new(); n];
    all[g.me] = mine.to_vec();
    for step in 0..n - 1 {
        let got = g.shift(s, right, left, &all[wrap(g.me, step, n)])?;
        all[wrap(g.me, step + 1, n)] = got;
    }
    Ok(all)
}

/// MPI_Allgather's (`uniform`: every rank's block alike) or MPI_Allgatherv's algorithm: the
/// tuned one for the first, a ring for the second (whose blocks may lie anywhere). Every rank
/// computes the same from the call's arguments, whichever of `allgather_blocks` and
/// `allgather_in_place` its receive datatype takes.
fn call_algorithm(total: usize, n: usize, uniform: bool) -> Allgather {
    if uniform {
        tuning::allgather(total, n)
    } else {
        Allgather::Ring
    }
}

/// MPI_Allgather(v) of packed blocks: `call_algorithm`, each message the blocks themselves (a
/// round of recursive doubling sends its blocks one after another, as `allgather_in_place`).
pub(crate) fn allgather_blocks(
    s: &mut State,
    g: &Group,
    mine: &[u8],
    total: usize,
    uniform: bool,
) -> MpiResult<Vec<Vec<u8>>> {
    match call_algorithm(total, g.size(), uniform) {
        Allgather::Ring => ring(s, g, mine),
        Allgather::RecursiveDoubling => recursive_doubling(s, g, mine, true),
    }
}

/// MPI_Allgather(v) in the program's receive buffer, for a contiguous receive datatype: rank
/// i's block is `blocks[i]` (its address and bytes); each block is sent from where it lies and
/// received where it goes (no packing, framing or allocation). This rank's block is filled
/// already, or is `mine` (the program's send buffer, apart from the receive buffer): the
/// first round sends it from there, lent like any exchange between separate buffers, and it
/// is copied into place after that round, so the peer reads clean memory rather than a block
/// this rank has just written. Recursive doubling needs MPI_Allgather's blocks, one after
/// another in rank order (a round's blocks are then one run).
pub(crate) fn allgather_in_place(
    s: &mut State,
    g: &Group,
    blocks: &[(UserBuf, usize)],
    mut mine: Option<&[u8]>,
    uniform: bool,
) -> MpiResult<()> {
    let n = g.size();
    let total = blocks.iter().map(|b| b.1).sum();
    // The first round: `out` (rank, run), or this rank's own block from `mine`.
    let mut first_round = |s: &mut State,
                           to: usize,
                           out: (UserBuf, usize),
                           from: usize,
                           into: (UserBuf, usize)| {
        let Some(own) = mine.take() else {
            return g.shift_into_buffers(s, (to, out), (from, into));
        };
        let (a, b) = (own.as_ptr() as usize, into.0.addr());
        if !own.is_empty() && into.1 > 0 && a < b.saturating_add(into.1) && b < a.saturating_add(own.len()) {
            return Err(super::api::aliased());
        }
        // SAFETY: MPI's buffer rule: the receive buffer spans `into`, writable and left alone
        // until the call returns; `own` is apart from it (checked above).
        let landing = unsafe { into.0.bytes_mut(into.1) }?;
        g.shift_apart(s, to, from, own, landing)?;
        place_own(g, blocks, own)
    };
    match call_algorithm(total, n, uniform) {
        Allgather::RecursiveDoubling => {
            let mut mask = 1;
            while mask < n {
                let partner = g.me ^ mask;
                let (base, theirs) = (g.me & !(mask - 1), partner & !(mask - 1));
                let run =
                    |first: usize| (blocks[first].0, blocks[first..first + mask].iter().map(|b| b.1).sum());
                if mask == 1 {
                    first_round(s, partner, run(base), partner, run(theirs))?;
                } else {
                    g.shift_into_buffers(s, (partner, run(base)), (partner, run(theirs)))?;
                }
                mask <<= 1;
            }
        }
        Allgather::Ring => {
            let (right, left) = ((g.me + 1) % n, (g.me + n - 1) % n);
            for step in 0..n - 1 {
                let (out, into) = (blocks[wrap(g.me, step, n)], blocks[wrap(g.me, step + 1, n)]);
                if step == 0 {
                    first_round(s, right, out, left, into)?;
                } else {
                    g.shift_into_buffers(s, (right, out), (left, into))?;
                }
            }
        }
    }
    // Alone (no round), the block is still to be placed.
    match mine {
        Some(own) => place_own(g, blocks, own),
        None => Ok(()),
    }
}

/// Copies this rank's block `own` into its place in the receive buffer.
fn place_own(g: &Group, blocks: &[(UserBuf, usize)], own: &[u8]) -> MpiResult<()> {
    let (at, len) = blocks[g.me];
    // SAFETY: MPI's buffer rule: the receive buffer spans this rank's block, writable until
    // the call returns; the caller checked it is apart from `own`.
    let place = unsafe { at.bytes_mut(len) }?;
    let room = place.len();
    place.get_mut(..own.len()).ok_or_else(|| g.too_long(own.len(), room))?.copy_from_slice(own);
    Ok(())
}

/// Every member's `mine`, in rank order, for communicator creation: journaled in start order
/// (`crate::journal`), and answered from the journal while a restarted rank re-executes its
/// setup.
pub fn allgather_bytes(s: &mut State, comm: c_int, mine: &[u8]) -> MpiResult<Vec<Vec<u8>>> {
    let g = Group::of(s, comm)?;
    if let Some(all) = s.journal.replay_next() {
        // Only the shape is checked: a rank respawned on another host gives another host
        // name to MPI_Comm_split_type, and must still get the grouping its peers have.
        if all.len() != g.size() {
            return Err(MpiError::new(
                MPI_ERR_OTHER,
                "a restarted rank's setup differs from its first run: communicators must be created \
                 in the same order, with the same arguments, before MPIX_Reverb_restore",
            ));
        }
        s.journal.record(&all);
        return Ok(all);
    }
    let slot = s.journal.reserve();
    let all = allgather(s, &g, mine, 0)?;
    s.journal.fill(slot, &all);
    Ok(all)
}
