//! A fault-tolerant 1-D heat stencil on `reverb_runtime::Runtime`.
//!
//! Every rank owns `CELLS` cells of a rod whose left end is held at 100 and right end at 0;
//! each iteration trades edge cells with the neighbours (tagged messages) and averages. The
//! state is checkpointed every `CKPT_EVERY` iterations; a rank restarted after a failure gets
//! it back from `restore_or_else` and carries on. There is no recovery code here: under
//! `reverb run --respawn N` with a logging protocol the runtime replays what the restarted
//! ranks missed. Rank 0 prints `checksum: <hex>`, the same with or without a failure.
//!
//! Arguments: ITERS (default 100), CKPT_EVERY (default 10).
//!
//! ```sh
//! REVERB_LOG=causal reverb run -n 4 --ranks-per-node 2 --respawn 1 -- target/release/stencil_ft 100 10
//! ```

use std::process::ExitCode;

use reverb_examples::{arg_or, fnv1a, report, ExampleError, Result, FNV_SEED};
use reverb_runtime::{Runtime, FIRST_USER_ENTRY};

const CELLS: usize = 64;
const TAG_TO_LEFT: u64 = 0x11;
const TAG_TO_RIGHT: u64 = 0x12;
const TAG_CHECKSUM: u64 = 0x13;
const LEFT_END: f64 = 100.0;
const RIGHT_END: f64 = 0.0;
/// A second protected buffer (`Runtime::protect`): how many halos this rank has received.
const ENTRY_HALOS: u32 = FIRST_USER_ENTRY;

fn main() -> ExitCode {
    report("stencil_ft", run())
}

/// The checkpointed state: the iteration it has reached, then the cells.
struct State {
    iter: u64,
    cells: Vec<f64>,
}

impl State {
    fn encode(&self) -> Vec<u8> {
        let mut out = self.iter.to_le_bytes().to_vec();
        self.cells.iter().for_each(|c| out.extend_from_slice(&c.to_le_bytes()));
        out
    }

    fn decode(bytes: &[u8]) -> Result<State> {
        if bytes.len() != 8 + CELLS * 8 {
            return Err(ExampleError::Check(format!("a state of {} bytes", bytes.len())));
        }
        let word = |i: usize| -> [u8; 8] { bytes[i * 8..i * 8 + 8].try_into().unwrap_or([0; 8]) };
        let cells = (1..=CELLS).map(|i| f64::from_le_bytes(word(i))).collect();
        Ok(State { iter: u64::from_le_bytes(word(0)), cells })
    }
}

fn run() -> Result<()> {
    let (iters, ckpt_every) = (arg_or(1, 100)?, arg_or(2, 10)?);
    // Joins the job, sets up logging and checkpoints from the REVERB_* settings; a restarted
    // rank recovers inside init.
    let mut rt = Runtime::init()?;
    let initial = State { iter: 0, cells: vec![0.0; CELLS] };
    let mut state = State::decode(&rt.restore_or_else(|| initial.encode()))?;
    let mut halos = match rt.restored(ENTRY_HALOS) {
        Some(bytes) => u64::from_le_bytes(bytes.try_into().unwrap_or([0; 8])),
        None => 0,
    };
    if rt.restarted() {
        eprintln!("stencil_ft: rank {} restarted at iteration {}", rt.rank(), state.iter);
    }
    while state.iter < iters {
        halos += step(&mut rt, &mut state)?;
        state.iter += 1;
        // At the end of an iteration: everything sent to this rank so far has arrived.
        if ckpt_every > 0 && state.iter % ckpt_every == 0 && state.iter < iters {
            rt.protect(ENTRY_HALOS, &halos.to_le_bytes())?;
            rt.checkpoint(&state.encode())?;
        }
    }
    let neighbours = u64::from(rt.rank() > 0) + u64::from(rt.rank() + 1 < rt.size());
    if halos != iters * neighbours {
        return Err(ExampleError::Check(format!("{halos} halos received, expected {}", iters * neighbours)));
    }
    let mine = fnv1a(fnv1a(FNV_SEED, &state.encode()), &halos.to_le_bytes());
    let checksum = combine(&mut rt, mine)?;
    rt.finalize()?;
    if let Some(sum) = checksum {
        println!("checksum: {sum:016x}");
    }
    Ok(())
}

/// One Jacobi step: trade edge cells with the neighbours, then average. Returns the number of
/// halos received.
fn step(rt: &mut Runtime, state: &mut State) -> Result<u64> {
    let (me, size) = (rt.rank(), rt.size());
    let first = state.cells[0];
    let last = state.cells[CELLS - 1];
    if me > 0 {
        rt.send(me - 1, TAG_TO_LEFT, &first.to_le_bytes())?;
    }
    if me + 1 < size {
        rt.send(me + 1, TAG_TO_RIGHT, &last.to_le_bytes())?;
    }
    let left = if me > 0 { halo(rt, me - 1, TAG_TO_RIGHT)? } else { LEFT_END };
    let right = if me + 1 < size { halo(rt, me + 1, TAG_TO_LEFT)? } else { RIGHT_END };
    let old = state.cells.clone();
    for (i, cell) in state.cells.iter_mut().enumerate() {
        let l = if i == 0 { left } else { old[i - 1] };
        let r = if i == CELLS - 1 { right } else { old[i + 1] };
        *cell = (l + old[i] + r) / 3.0;
    }
    Ok(u64::from(me > 0) + u64::from(me + 1 < size))
}

fn halo(rt: &mut Runtime, from: u32, tag: u64) -> Result<f64> {
    let msg = rt.recv_from(from, tag)?;
    let bytes: [u8; 8] = msg.payload.as_slice().try_into().map_err(|_| {
        ExampleError::Check(format!("a halo of {} bytes from rank {from}", msg.payload.len()))
    })?;
    Ok(f64::from_le_bytes(bytes))
}

/// Rank 0 folds every rank's checksum in rank order; the others send theirs to it.
fn combine(rt: &mut Runtime, mine: u64) -> Result<Option<u64>> {
    if rt.rank() != 0 {
        rt.send(0, TAG_CHECKSUM, &mine.to_le_bytes())?;
        return Ok(None);
    }
    let mut all = fnv1a(FNV_SEED, &mine.to_le_bytes());
    for r in 1..rt.size() {
        all = fnv1a(all, &rt.recv_from(r, TAG_CHECKSUM)?.payload);
    }
    Ok(Some(all))
}
