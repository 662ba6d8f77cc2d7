//! Epochs and synchronization: `MPI_Win_fence`; passive target (`_lock`, `_unlock`,
//! `_lock_all`, `_unlock_all`, `_flush*`, `_sync`); general active target (`_post`,
//! `_start`, `_complete`, `_wait`, `_test`). An operation is complete at its target when the
//! target's reply came back, so every synchronization that completes operations waits for
//! the replies due (serving this rank's own window meanwhile). A target serves requests only
//! while it is inside an MPI call: a passive target that computes without calling MPI holds
//! its origins up until it calls MPI again, except those that map its memory (`direct`),
//! which apply their operations and take its lock themselves.

use std::ffi::c_int;

use crate::abi::*;
use crate::coll;
use crate::errors::{MpiError, MpiResult};
use crate::ffi::{self, Out};
use crate::state::State;

use super::serve::send;
use super::win::{win_call, Win};
use super::wire::Msg;

/// Stops with a clear error once a failure was recovered while a window that cannot be
/// recovered existed (`recover`): without logging, or shared or dynamic memory, going on
/// could answer wrongly.
pub fn check_alive(s: &State, win: c_int) -> MpiResult<()> {
    check_alive_of(s, s.win(win)?, win)
}

/// [`check_alive`] on window `win` already looked up as `w`.
pub fn check_alive_of(s: &State, w: &Win, win: c_int) -> MpiResult<()> {
    if s.rt.report().detected_ns.len() == w.failures_seen
        || (s.rt.logging() && super::recover::recoverable(w.flavor))
    {
        return Ok(());
    }
    Err(MpiError::new(
        MPI_ERR_UNSUPPORTED_OPERATION,
        format!(
            "{}: a rank failed and was recovered while it existed; reverb recovers windows of \
             MPI_Win_create and MPI_Win_allocate under a logging protocol, not this one of {}",
            w.label(win),
            super::recover::flavor_name(w.flavor)
        ),
    ))
}

/// Waits (progressing, so serving every window) until `done` holds for window `win`; then
/// reports a request a target refused.
pub fn wait_for(s: &mut State, win: c_int, what: &str, done: impl Fn(&Win) -> bool) -> MpiResult<()> {
    s.wait_until(what, |s| Ok(done(s.win(win)?)))?;
    check_alive(s, win)?;
    match s.win_mut(win)?.origin.refused.take() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Waits until every reply due to this rank on `win` came back.
pub fn settle_all(s: &mut State, win: c_int, what: &str) -> MpiResult<()> {
    wait_for(s, win, what, Win::all_idle)
}

fn settle(s: &mut State, win: c_int, target: usize, what: &str) -> MpiResult<()> {
    wait_for(s, win, what, |w| w.idle(target))
}

/// A window rank argument: `None` for `MPI_PROC_NULL`.
pub fn target_rank(w: &Win, rank: c_int) -> MpiResult<Option<usize>> {
    if rank == MPI_PROC_NULL {
        return Ok(None);
    }
    usize::try_from(rank).ok().filter(|&r| r < w.size_of_group()).map(Some).ok_or_else(|| {
        MpiError::new(MPI_ERR_RANK, format!("rank {rank} outside a window of {}", w.size_of_group()))
    })
}

/// Collective: every operation any rank started on the window completes.
pub(crate) fn mpi_win_fence(_assert: c_int, win: c_int) -> c_int {
    win_call("MPI_Win_fence", win, |s| {
        settle_all(s, win, "MPI_Win_fence")?;
        let g = s.win(win)?.group();
        coll::barrier(s, &g)?;
        check_alive(s, win)
    })
}

/// Asks `target` for its lock. Under `MPI_MODE_NOCHECK` (the program promises no conflicting
/// lock) it is granted at once, the target not told; a target this rank maps (`direct`) has
/// its lock word taken here. Neither needs the target inside MPI.
fn lock(s: &mut State, win: c_int, target: usize, exclusive: bool, assert: c_int) -> MpiResult<()> {
    if assert & MPI_MODE_NOCHECK != 0 {
        let o = &mut s.win_mut(win)?.origin;
        o.granted[target] = true;
        o.unchecked[target] = true;
        return Ok(());
    }
    if let Some(to) = s.win(win)?.reach.get(target).copied().flatten() {
        wait_for(s, win, "MPI_Win_lock", |_| to.try_lock(exclusive))?;
        let o = &mut s.win_mut(win)?.origin;
        o.granted[target] = true;
        o.taken[target] = Some(exclusive);
        return Ok(());
    }
    send(s, win, target, &Msg::Lock { exclusive })
}

fn unlock(s: &mut State, win: c_int, target: usize) -> MpiResult<()> {
    settle(s, win, target, "MPI_Win_unlock")?;
    let o = &mut s.win_mut(win)?.origin;
    if !std::mem::take(&mut o.granted[target]) {
        return Err(MpiError::new(MPI_ERR_RMA_SYNC, format!("rank {target} of the window is not locked")));
    }
    if std::mem::take(&mut o.unchecked[target]) {
        return Ok(());
    }
    if let Some(exclusive) = o.taken[target].take() {
        if let Some(to) = s.win(win)?.reach.get(target).copied().flatten() {
            to.unlock(exclusive);
        }
        return Ok(());
    }
    if s.rt.logging() {
        s.win_mut(win)?.origin.releasing[target] += 1;
    }
    send(s, win, target, &Msg::Unlock)
}

/// Waits until every target this rank unlocked by message released its lock (under logging).
fn released(s: &mut State, win: c_int, what: &str) -> MpiResult<()> {
    wait_for(s, win, what, |w| w.origin.releasing.iter().all(|&r| r == 0))
}

pub(crate) fn mpi_win_lock(lock_type: c_int, rank: c_int, assert: c_int, win: c_int) -> c_int {
    win_call("MPI_Win_lock", win, |s| {
        check_alive(s, win)?;
        let Some(t) = target_rank(s.win(win)?, rank)? else { return Ok(()) };
        if s.win(win)?.origin.granted[t] {
            return Err(MpiError::new(
                MPI_ERR_RMA_SYNC,
                format!("rank {rank} of the window is locked already"),
            ));
        }
        lock(s, win, t, lock_type == MPI_LOCK_EXCLUSIVE, assert)?;
        wait_for(s, win, "MPI_Win_lock", |w| w.origin.granted[t])
    })
}

pub(crate) fn mpi_win_unlock(rank: c_int, win: c_int) -> c_int {
    win_call("MPI_Win_unlock", win, |s| {
        let Some(t) = target_rank(s.win(win)?, rank)? else { return Ok(()) };
        unlock(s, win, t)?;
        released(s, win, "MPI_Win_unlock")
    })
}

pub(crate) fn mpi_win_lock_all(assert: c_int, win: c_int) -> c_int {
    win_call("MPI_Win_lock_all", win, |s| {
        check_alive(s, win)?;
        let n = s.win(win)?.size_of_group();
        for t in 0..n {
            lock(s, win, t, false, assert)?;
        }
        wait_for(s, win, "MPI_Win_lock_all", |w| w.origin.granted.iter().all(|&g| g))
    })
}

pub(crate) fn mpi_win_unlock_all(win: c_int) -> c_int {
    win_call("MPI_Win_unlock_all", win, |s| {
        let n = s.win(win)?.size_of_group();
        (0..n).try_for_each(|t| unlock(s, win, t))?;
        released(s, win, "MPI_Win_unlock_all")
    })
}

fn flush(function: &str, rank: c_int, win: c_int) -> c_int {
    win_call(function, win, |s| {
        let w = s.win(win)?;
        let Some(t) = target_rank(w, rank)? else { return Ok(()) };
        // Nothing due (every operation on a mapped target is applied at once): no wait.
        if w.idle(t) && w.origin.refused.is_none() {
            return check_alive_of(s, w, win);
        }
        super::rdma::settle_quickly(s, win, t)?;
        settle(s, win, t, function)
    })
}

pub(crate) fn mpi_win_flush(rank: c_int, win: c_int) -> c_int {
    flush("MPI_Win_flush", rank, win)
}

pub(crate) fn mpi_win_flush_local(rank: c_int, win: c_int) -> c_int {
    flush("MPI_Win_flush_local", rank, win)
}

pub(crate) fn mpi_win_flush_all(win: c_int) -> c_int {
    win_call("MPI_Win_flush_all", win, |s| settle_all(s, win, "MPI_Win_flush_all"))
}

pub(crate) fn mpi_win_flush_local_all(win: c_int) -> c_int {
    win_call("MPI_Win_flush_local_all", win, |s| settle_all(s, win, "MPI_Win_flush_local_all"))
}

/// The unified model: public and private copies are one memory, nothing to synchronize.
pub(crate) fn mpi_win_sync(win: c_int) -> c_int {
    win_call("MPI_Win_sync", win, |s| s.win(win).map(|_| ()))
}

/// The window ranks of a group's members.
fn members(s: &State, win: c_int, group: c_int) -> MpiResult<Vec<usize>> {
    let w = s.win(win)?;
    let g = s.group(group)?;
    g.iter()
        .map(|&world| {
            w.rank_of_world(world).ok_or_else(|| {
                MpiError::new(MPI_ERR_GROUP, format!("world rank {world} is not in the window"))
            })
        })
        .collect()
}

pub(crate) fn mpi_win_post(group: c_int, _assert: c_int, win: c_int) -> c_int {
    win_call("MPI_Win_post", win, |s| {
        check_alive(s, win)?;
        let origins = members(s, win, group)?;
        for &o in &origins {
            send(s, win, o, &Msg::Post)?;
        }
        s.win_mut(win)?.target.exposure = origins;
        Ok(())
    })
}

pub(crate) fn mpi_win_start(group: c_int, _assert: c_int, win: c_int) -> c_int {
    win_call("MPI_Win_start", win, |s| {
        check_alive(s, win)?;
        let targets = members(s, win, group)?;
        let wanted = targets.clone();
        wait_for(s, win, "MPI_Win_start", |w| wanted.iter().all(|&t| w.origin.posts[t] > 0))?;
        let w = s.win_mut(win)?;
        for &t in &targets {
            w.origin.posts[t] -= 1;
        }
        w.origin.access = targets;
        Ok(())
    })
}

pub(crate) fn mpi_win_complete(win: c_int) -> c_int {
    win_call("MPI_Win_complete", win, |s| {
        let targets = std::mem::take(&mut s.win_mut(win)?.origin.access);
        let wanted = targets.clone();
        wait_for(s, win, "MPI_Win_complete", |w| wanted.iter().all(|&t| w.idle(t)))?;
        targets.into_iter().try_for_each(|t| send(s, win, t, &Msg::Complete))
    })
}

/// Ends the exposure epoch if every origin completed; true if it did.
fn exposure_done(s: &mut State, win: c_int) -> MpiResult<bool> {
    let t = &mut s.win_mut(win)?.target;
    if !t.exposure.iter().all(|&o| t.completes[o] > 0) {
        return Ok(false);
    }
    for o in std::mem::take(&mut t.exposure) {
        t.completes[o] -= 1;
    }
    Ok(true)
}

pub(crate) fn mpi_win_wait(win: c_int) -> c_int {
    win_call("MPI_Win_wait", win, |s| {
        wait_for(s, win, "MPI_Win_wait", |w| w.target.exposure.iter().all(|&o| w.target.completes[o] > 0))?;
        exposure_done(s, win).map(|_| ())
    })
}

pub(crate) unsafe fn mpi_win_test(win: c_int, flag: Out<'_, c_int>) -> c_int {
    win_call("MPI_Win_test", win, |s| {
        s.progress()?;
        check_alive(s, win)?;
        let done = exposure_done(s, win)?;
        ffi::out(flag, c_int::from(done), "flag")
    })
}
