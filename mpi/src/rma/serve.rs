//! A rank's side of the window protocol, run whenever it progresses: it applies the
//! requests aimed at its windows (puts, gets, accumulates: one at a time, so each is atomic
//! with respect to the others), answers lock requests, and takes in what targets sent back
//! (replies, grants, posts) and origins sent (unlocks, completes).

use std::ffi::c_int;
use std::time::Duration;

use reverb_transport::{Source, TagMatch};

use crate::abi::*;
use crate::datatype::Datatype;
use crate::errors::{MpiError, MpiResult};
use crate::frag;
use crate::op::{self, Op};
use crate::state::State;
use crate::tags;

use super::win::{Win, FLAVOR_DYNAMIC};
use super::wire::{Msg, OpKind, OpReq};
use super::{direct, mem};

/// The one tag of a window's messages (on its private context).
pub fn tag(context: u32) -> u64 {
    tags::tag(context, 0, 0)
}

/// Sends `msg` to window rank `to`.
pub fn send(s: &mut State, win: c_int, to: usize, msg: &Msg) -> MpiResult<()> {
    let w = s.win(win)?;
    let (dest, t) = (w.ranks[to], tag(w.context));
    frag::send(&mut s.rt, dest, t, &msg.encode())
}

/// Serves every window's arrivals; true if anything arrived. Under a logging protocol one
/// message at most: serving one sends (replies, grants), and the waiting call checks its
/// condition, and may send, before the next; so a replay, which finds every logged arrival
/// there at once, sends in the first run's order on each channel (the ssns survivors and
/// the replay plan name).
pub fn serve_all(s: &mut State) -> MpiResult<bool> {
    let wins: Vec<(c_int, u32)> = s.wins.items.iter().map(|(&h, w)| (h, w.context)).collect();
    super::rdma::reap_all(s)?;
    let one = s.rt.logging();
    let mut any = false;
    for (h, context) in wins {
        let matching = TagMatch { tag: tag(context), mask: !(u64::from(tags::BIG) << 32) };
        // During a replay only the delivery the log names next (its order was logged).
        while !(one && any) && s.may_take(Source::Any, matching)? {
            let Some(m) = s.rt.take_collected(Source::Any, matching)? else { break };
            let m = frag::complete(&mut s.rt, m)?;
            let from = s.win(h)?.rank_of_world(m.source);
            let from = from.ok_or_else(|| MpiError::new(MPI_ERR_INTERN, "a window message from outside"))?;
            handle(s, h, from, Msg::decode(&m.payload)?)?;
            any = true;
        }
        // A same-host origin's unlock sends nothing: the origins asking by message try again.
        let w = s.win(h)?;
        if !w.target.waiting.is_empty() && w.reach.get(w.me).is_some_and(Option::is_some) {
            grant_waiting(s, h)?;
        }
    }
    Ok(any)
}

fn handle(s: &mut State, h: c_int, from: usize, msg: Msg) -> MpiResult<()> {
    match msg {
        Msg::Op(req) => {
            let id = req.id;
            let bound = s.rt.config().recv_timeout;
            let reply = match apply(s.win(h)?, req, bound) {
                Ok(data) => Msg::Reply { id, error: None, data },
                Err(e) => Msg::Reply { id, error: Some(e.into_message()), data: Vec::new() },
            };
            send(s, h, from, &reply)
        }
        Msg::Reply { id, error, data } => replied(s, h, id, error, &data),
        Msg::Lock { exclusive } => {
            s.win_mut(h)?.target.waiting.push_back((from, exclusive));
            grant_waiting(s, h)
        }
        Msg::Unlock => {
            let w = s.win_mut(h)?;
            let own = w.reach.get(w.me).copied().flatten();
            let t = &mut w.target;
            let exclusive = t.exclusive == Some(from);
            if exclusive {
                t.exclusive = None;
            } else {
                t.shared = t.shared.saturating_sub(1);
            }
            if let Some(own) = own {
                own.unlock(exclusive);
            }
            // Under logging the origin waits for this: no window message is then left untaken
            // when either side reaches a checkpoint (the runtime's rule for MPIX_Reverb_checkpoint).
            if s.rt.logging() {
                send(s, h, from, &Msg::Unlocked)?;
            }
            grant_waiting(s, h)
        }
        Msg::Unlocked => {
            s.win_mut(h)?.origin.releasing[from] -= 1;
            Ok(())
        }
        Msg::Grant => {
            s.win_mut(h)?.origin.granted[from] = true;
            Ok(())
        }
        Msg::Post => {
            s.win_mut(h)?.origin.posts[from] += 1;
            Ok(())
        }
        Msg::Complete => {
            s.win_mut(h)?.target.completes[from] += 1;
            Ok(())
        }
    }
}

/// Grants the lock to every waiting origin it can, in arrival order (taking the lock word of
/// a window that same-host origins lock themselves). A shared request is granted whenever no
/// exclusive holder has the lock, even behind a waiting exclusive one, as MPICH does: an
/// origin inside `MPI_Win_lock_all` holds the shared locks it got while it waits for the
/// rest, so an exclusive request queued ahead of a shared one could close a cycle.
fn grant_waiting(s: &mut State, h: c_int) -> MpiResult<()> {
    let mut i = 0;
    loop {
        let w = s.win_mut(h)?;
        let own = w.reach.get(w.me).copied().flatten();
        let t = &mut w.target;
        let Some(&(origin, exclusive)) = t.waiting.get(i) else { return Ok(()) };
        let free = match own {
            Some(own) => own.try_lock(exclusive),
            None => t.exclusive.is_none() && (!exclusive || t.shared == 0),
        };
        if !free {
            i += 1;
            continue;
        }
        t.waiting.remove(i);
        if exclusive {
            t.exclusive = Some(origin);
        } else {
            t.shared += 1;
        }
        send(s, h, origin, &Msg::Grant)?;
    }
}

/// A reply to this rank's request `id`: its bytes go where the request said.
fn replied(s: &mut State, h: c_int, id: u64, error: Option<String>, data: &[u8]) -> MpiResult<()> {
    let w = s.win_mut(h)?;
    let Some((target, into)) = w.origin.pending.remove(&id) else {
        return Err(MpiError::new(MPI_ERR_INTERN, format!("a reply to no request ({id})")));
    };
    w.origin.due[target] = w.origin.due[target].saturating_sub(1);
    if let Some(why) = error {
        let e = MpiError::new(MPI_ERR_RMA_RANGE, format!("rank {target} refused an operation: {why}"));
        w.origin.refused.get_or_insert(e);
        return Ok(());
    }
    if let Some((buf, dt, count)) = into {
        // SAFETY: the origin buffer of a get (or a fetching accumulate): MPI keeps it the
        // library's until the epoch's synchronization completes, which waits for this reply.
        unsafe { dt.unpack(data, buf, count) }?;
    }
    Ok(())
}

/// Whether `[from, to)` lies in attached memory (adjacent attachments join up).
fn attached_cover(attached: &[(usize, usize)], from: usize, to: usize) -> bool {
    let mut at = from;
    while at < to {
        match attached.iter().find(|&&(b, n)| b <= at && at < b + n) {
            Some(&(b, n)) => at = b + n,
            None => return false,
        }
    }
    true
}

/// Checks that every run lies in the window's memory.
fn check_runs(w: &Win, runs: &[(u64, u64)]) -> MpiResult<()> {
    let inside = |&(off, len): &(u64, u64)| {
        let end = off.checked_add(len);
        if w.flavor == FLAVOR_DYNAMIC {
            end.is_some_and(|e| attached_cover(&w.attached, off as usize, e as usize))
        } else {
            end.is_some_and(|e| e <= w.size as u64)
        }
    };
    match runs.iter().find(|r| r.1 > 0 && !inside(r)) {
        Some((off, len)) => Err(MpiError::new(
            MPI_ERR_RMA_RANGE,
            format!("{len} bytes at {off} outside the window's {} bytes", w.size),
        )),
        None => Ok(()),
    }
}

/// Applies one request to the window (under its lock word if same-host origins reach it
/// directly); the bytes to send back.
fn apply(w: &Win, req: OpReq, bound: Duration) -> MpiResult<Vec<u8>> {
    check_runs(w, &req.runs)?;
    match w.reach.get(w.me).copied().flatten() {
        Some(own) => direct::locked(own.lock, bound, || apply_at(w.base, req)),
        None => apply_at(w.base, req),
    }
}

/// Applies one request to the memory at `base` (its runs checked); the bytes to send back.
pub fn apply_at(base: usize, req: OpReq) -> MpiResult<Vec<u8>> {
    let span: usize = req.runs.iter().map(|r| r.1 as usize).sum();
    let wrong = |what: &str| MpiError::new(MPI_ERR_INTERN, format!("a {what} of the wrong length"));
    match req.kind {
        OpKind::Put => {
            (req.data.len() == span).then_some(()).ok_or_else(|| wrong("put"))?;
            mem::scatter(base, &req.runs, &req.data)?;
            Ok(Vec::new())
        }
        OpKind::Get => mem::gather(base, &req.runs),
        OpKind::Acc | OpKind::GetAcc => {
            let old = mem::gather(base, &req.runs)?;
            if req.op != MPI_NO_OP {
                (req.data.len() == span).then_some(()).ok_or_else(|| wrong("accumulate"))?;
                let mut new = old.clone();
                let dt = Datatype::builtin(req.elem)
                    .ok_or_else(|| MpiError::new(MPI_ERR_TYPE, format!("datatype {:#x}", req.elem)))?;
                op::apply(Op::Builtin(req.op), &dt, req.elem, span / dt.size.max(1), &req.data, &mut new)?;
                mem::scatter(base, &req.runs, &new)?;
            }
            Ok(if req.kind == OpKind::GetAcc { old } else { Vec::new() })
        }
        OpKind::Cas => {
            (req.data.len() == 2 * span).then_some(()).ok_or_else(|| wrong("compare-and-swap"))?;
            let old = mem::gather(base, &req.runs)?;
            let (origin, compare) = req.data.split_at(span);
            if old == compare {
                mem::scatter(base, &req.runs, origin)?;
            }
            Ok(old)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::attached_cover;

    #[test]
    fn adjacent_attachments_cover_a_run_across_them() {
        let attached = [(1000, 100), (1100, 50), (2000, 10)];
        assert!(attached_cover(&attached, 1050, 1150) && attached_cover(&attached, 2000, 2010));
        assert!(!attached_cover(&attached, 1050, 1151) && !attached_cover(&attached, 990, 1010));
        assert!(!attached_cover(&attached, 1140, 2005));
    }
}
