//! Master-worker: rank 0 hands out tasks to whichever worker asks first (any-source
//! receives, so the delivery order is nondeterministic and replays from determinants).
//! Results are kept by task id, so the checksum does not depend on who computed what.
//! Each round ends with every worker told so, then a checkpoint. With `--msg-bytes` requests
//! and tasks are that many bytes (their data, then filler).

use anyhow::{bail, Result};
use reverb_runtime::Runtime;

use super::{combine_checksums, fnv1a, msg, u64_at, AppArgs, FNV_SEED};

const TAG_REQUEST: u64 = 0x71;
const TAG_TASK: u64 = 0x72;
/// A task id meaning "the round is over".
const ROUND_OVER: u64 = u64::MAX;

fn compute(task: u64, work: usize) -> u64 {
    let mut h = task.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for _ in 0..work {
        h ^= h << 13;
        h ^= h >> 7;
        h ^= h << 17;
    }
    h
}

pub fn run(rt: &mut Runtime, args: &AppArgs) -> Result<Option<u64>> {
    let (me, size) = (rt.rank(), rt.size());
    if size < 2 {
        bail!("master-worker: needs a master and at least one worker");
    }
    let workers = u64::from(size - 1);
    let per_round = workers * 4;
    let total = args.iters * per_round;
    // Master state: round | results by task. Worker state: round | sum of its results.
    let initial = || {
        let mut s = 0u64.to_le_bytes().to_vec();
        if me == 0 {
            s.resize(8 + 8 * total as usize, 0);
        } else {
            s.extend_from_slice(&0u64.to_le_bytes());
        }
        s
    };
    let mut state = rt.restore_or_else(initial);
    let mut round = u64_at(&state, 0)?;
    let expect = if me == 0 { 8 + 8 * total as usize } else { 16 };
    if state.len() != expect {
        bail!("master-worker: state of {} bytes, expected {expect}", state.len());
    }
    // Without --msg-bytes a request is a task id and its result, a task its id.
    let (request_len, task_len) = match args.msg_bytes {
        0 => (16, 8),
        n => (n, n),
    };
    while round < args.iters {
        if me == 0 {
            let mut next = round * per_round;
            let end = next + per_round;
            let mut told = 0;
            while told < workers {
                let (source, req) = msg::recv_any(rt, TAG_REQUEST, request_len)?;
                let req = msg::unpad("master-worker: a request", &req, 16, msg::salt(source, TAG_REQUEST))?;
                let (task, result) = (u64_at(req, 0)?, u64_at(req, 8)?);
                if task != ROUND_OVER {
                    let at = 8 + 8 * usize::try_from(task)?;
                    match state.get_mut(at..at + 8) {
                        Some(slot) => slot.copy_from_slice(&result.to_le_bytes()),
                        None => bail!("master-worker: result for unknown task {task}"),
                    }
                }
                let reply = if next < end {
                    next += 1;
                    next - 1
                } else {
                    told += 1;
                    ROUND_OVER
                };
                let reply = msg::pad(
                    "master-worker: a task",
                    &reply.to_le_bytes(),
                    args.msg_bytes,
                    msg::salt(0, TAG_TASK),
                )?;
                msg::send(rt, source, TAG_TASK, &reply)?;
            }
        } else {
            let mut last = (ROUND_OVER, 0u64);
            loop {
                let mut req = last.0.to_le_bytes().to_vec();
                req.extend_from_slice(&last.1.to_le_bytes());
                let req =
                    msg::pad("master-worker: a request", &req, args.msg_bytes, msg::salt(me, TAG_REQUEST))?;
                msg::send(rt, 0, TAG_REQUEST, &req)?;
                let task = msg::recv_from(rt, 0, TAG_TASK, task_len)?;
                let task = u64_at(msg::unpad("master-worker: a task", &task, 8, msg::salt(0, TAG_TASK))?, 0)?;
                if task == ROUND_OVER {
                    break;
                }
                let result = compute(task, args.size);
                let sum = u64_at(&state, 8)?.wrapping_add(result);
                state[8..16].copy_from_slice(&sum.to_le_bytes());
                last = (task, result);
            }
        }
        round += 1;
        state[..8].copy_from_slice(&round.to_le_bytes());
        if args.ckpt_every > 0 && round % args.ckpt_every == 0 && round < args.iters {
            rt.checkpoint(&state)?;
        }
    }
    // The master's results are the answer; a worker's sum only depends on the schedule.
    let mine = if me == 0 { fnv1a(FNV_SEED, &state[8..]) } else { 0 };
    Ok(combine_checksums(rt, mine)?)
}
