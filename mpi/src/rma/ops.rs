//! Communication: `MPI_Put`, `MPI_Get` and their request forms (`MPI_Rput`, `MPI_Rget`,
//! whose requests are complete when returned: the call waits for the target's reply). The
//! origin packs its buffer and names the target's bytes as runs of its window, computed from
//! the target datatype here (MPI: it must be valid at the origin); the target applies them.

use std::ffi::{c_int, c_long};

use crate::abi::*;
use crate::datatype::Datatype;
use crate::errors::{MpiError, MpiResult};
use crate::ffi::{self, Out, UserBuf};
use crate::request::{Request, Status};
use crate::state::State;

use super::serve::send;
use super::sync::{check_alive, check_alive_of, target_rank, wait_for};
use super::win::{win_call, Landing};
use super::wire::{Msg, OpKind, OpReq};

/// The target side of an operation: where, how many, of which datatype.
#[derive(Clone, Copy)]
pub struct TargetArgs {
    pub rank: c_int,
    pub disp: isize,
    pub count: c_int,
    pub datatype: c_int,
}

/// An origin buffer: `count` elements of `datatype` at `buf`.
#[derive(Clone, Copy)]
pub struct OriginArgs {
    pub buf: UserBuf,
    pub count: c_int,
    pub datatype: c_int,
}

pub fn count_of(count: c_int) -> MpiResult<usize> {
    usize::try_from(count).map_err(|_| MpiError::new(MPI_ERR_COUNT, format!("count {count}")))
}

/// An operation's target resolved: its window rank, byte runs (from the window base) and
/// datatype.
pub struct Resolved {
    pub rank: usize,
    pub runs: Vec<(u64, u64)>,
    pub dt: Datatype,
}

/// The target of `t`; `None` for `MPI_PROC_NULL`.
pub fn target_runs(s: &State, win: c_int, t: &TargetArgs) -> MpiResult<Option<Resolved>> {
    let w = s.win(win)?;
    let Some(rank) = target_rank(w, t.rank)? else { return Ok(None) };
    let dt = s.datatype(t.datatype)?;
    let start = (t.disp as i128) * i128::from(w.disp_units[rank]);
    let runs = dt
        .repeated(count_of(t.count)?, dt.extent)
        .into_iter()
        .filter(|r| r.1 > 0)
        .map(|(off, len)| {
            u64::try_from(start + off as i128).map(|at| (at, len as u64)).map_err(|_| {
                MpiError::new(MPI_ERR_RMA_RANGE, format!("target displacement {} before the window", t.disp))
            })
        })
        .collect::<MpiResult<Vec<_>>>()?;
    Ok(Some(Resolved { rank, runs, dt }))
}

/// The origin buffer's bytes.
///
/// # Safety
/// `o` is a buffer under the FFI contract, readable, for the call.
pub unsafe fn origin_bytes(s: &State, o: &OriginArgs) -> MpiResult<Vec<u8>> {
    let dt = s.datatype(o.datatype)?;
    // SAFETY: the caller's promise.
    Ok(unsafe { dt.pack(&o.buf, count_of(o.count)?) }?.into_owned())
}

/// Sends one request to window rank `target`; its reply is due from now on.
pub fn issue(
    s: &mut State,
    win: c_int,
    target: usize,
    mut req: OpReq,
    into: Option<Landing>,
) -> MpiResult<()> {
    check_alive(s, win)?;
    if let Some(to) = s.win(win)?.reach.get(target).copied().flatten() {
        return super::direct::apply(s, to, req, into);
    }
    let o = &mut s.win_mut(win)?.origin;
    req.id = o.next_id;
    o.next_id += 1;
    o.pending.insert(req.id, (target, into));
    o.due[target] += 1;
    send(s, win, target, &Msg::Op(req))
}

/// A put or get of predefined types to a target this rank maps: the bytes go straight
/// between the program's buffer and the target's memory, no runs, packing or request built.
/// `None` where that does not apply; the general path then runs (and reports what is wrong).
///
/// # Safety
/// `o.buf` spans its elements, readable for a put, writable for a get, for the call.
unsafe fn plain_direct(
    s: &State,
    win: c_int,
    o: &OriginArgs,
    t: &TargetArgs,
    put: bool,
) -> MpiResult<Option<usize>> {
    let (Some(osize), Some(tsize)) = (Datatype::plain_size(o.datatype), Datatype::plain_size(t.datatype))
    else {
        return Ok(None);
    };
    let (Ok(ocount), Ok(tcount)) = (usize::try_from(o.count), usize::try_from(t.count)) else {
        return Ok(None);
    };
    let w = s.win(win)?;
    let len = ocount.saturating_mul(osize);
    let Some(rank) = usize::try_from(t.rank).ok().filter(|&r| r < w.reach.len()) else { return Ok(None) };
    let Some(to) = w.reach[rank] else { return Ok(None) };
    let start = (t.disp as i128) * i128::from(w.disp_units[rank]);
    let Ok(off) = u64::try_from(start) else { return Ok(None) };
    if len != tcount.saturating_mul(tsize) || off.checked_add(len as u64).is_none_or(|e| e > to.size as u64) {
        return Ok(None);
    }
    check_alive_of(s, w, win)?;
    // SAFETY: the caller's promise.
    unsafe { super::direct::copy_plain(to, off, o.buf, len, put) }?;
    Ok(Some(rank))
}

/// An origin of `origin` bytes for a target of `target`: MPI_ERR_TYPE.
pub(super) fn mismatch(origin: usize, target: usize) -> MpiError {
    MpiError::new(MPI_ERR_TYPE, format!("{origin} origin bytes for {target} target bytes"))
}

/// # Safety
/// `o.buf` spans its elements, readable, for the call.
unsafe fn put(s: &mut State, win: c_int, o: &OriginArgs, t: &TargetArgs) -> MpiResult<Option<usize>> {
    // SAFETY: the caller's promise.
    if let Some(rank) = unsafe { plain_direct(s, win, o, t, true) }? {
        return Ok(Some(rank));
    }
    // SAFETY: the caller's promise.
    if let Some(rank) = unsafe { super::cross::transfer(s, win, o, t, true) }? {
        return Ok(Some(rank));
    }
    // SAFETY: the caller's promise.
    if let Some(rank) = unsafe { super::rdma::put(s, win, o, t) }? {
        return Ok(Some(rank));
    }
    let Some(Resolved { rank, runs, .. }) = target_runs(s, win, t)? else { return Ok(None) };
    // SAFETY: the caller's promise.
    let data = unsafe { origin_bytes(s, o) }?;
    let span: u64 = runs.iter().map(|r| r.1).sum();
    if data.len() as u64 != span {
        return Err(mismatch(data.len(), span as usize));
    }
    let req = OpReq { kind: OpKind::Put, id: 0, op: MPI_REPLACE, elem: MPI_BYTE, runs, data };
    issue(s, win, rank, req, None)?;
    Ok(Some(rank))
}

/// # Safety
/// `o.buf` spans its elements, writable and left alone until the epoch's synchronization.
unsafe fn get(s: &mut State, win: c_int, o: &OriginArgs, t: &TargetArgs) -> MpiResult<Option<usize>> {
    // SAFETY: the caller's promise.
    if let Some(rank) = unsafe { plain_direct(s, win, o, t, false) }? {
        return Ok(Some(rank));
    }
    // SAFETY: the caller's promise.
    if let Some(rank) = unsafe { super::cross::transfer(s, win, o, t, false) }? {
        return Ok(Some(rank));
    }
    // SAFETY: the caller's promise.
    if let Some(rank) = unsafe { super::rdma::get(s, win, o, t) }? {
        return Ok(Some(rank));
    }
    let Some(Resolved { rank, runs, .. }) = target_runs(s, win, t)? else { return Ok(None) };
    let dt = s.datatype(o.datatype)?;
    let count = count_of(o.count)?;
    let span: u64 = runs.iter().map(|r| r.1).sum();
    if dt.bytes_for(count) as u64 != span {
        return Err(mismatch(dt.bytes_for(count), span as usize));
    }
    let req = OpReq { kind: OpKind::Get, id: 0, op: MPI_NO_OP, elem: MPI_BYTE, runs, data: Vec::new() };
    issue(s, win, rank, req, Some((o.buf, dt, count)))?;
    Ok(Some(rank))
}

/// A request-form operation's request: the operation is waited for, then a done request.
pub fn completed_request(
    s: &mut State,
    win: c_int,
    rank: Option<usize>,
    request: Out<'_, c_int>,
) -> MpiResult<()> {
    if let Some(r) = rank {
        wait_for(s, win, "a request-based one-sided operation", |w| w.idle(r))?;
    }
    let h = s.requests.insert(Request::Done(Status::empty()))?;
    ffi::out(request, h, "request")
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_put(
    origin_addr: UserBuf,
    origin_count: c_int,
    origin_datatype: c_int,
    target_rank: c_int,
    target_disp: c_long,
    target_count: c_int,
    target_datatype: c_int,
    win: c_int,
) -> c_int {
    let o = OriginArgs { buf: origin_addr, count: origin_count, datatype: origin_datatype };
    let t = TargetArgs {
        rank: target_rank,
        disp: target_disp as isize,
        count: target_count,
        datatype: target_datatype,
    };
    // SAFETY: the contract above.
    win_call("MPI_Put", win, |s| unsafe { put(s, win, &o, &t) }.map(|_| ()))
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_get(
    origin_addr: UserBuf,
    origin_count: c_int,
    origin_datatype: c_int,
    target_rank: c_int,
    target_disp: c_long,
    target_count: c_int,
    target_datatype: c_int,
    win: c_int,
) -> c_int {
    let o = OriginArgs { buf: origin_addr, count: origin_count, datatype: origin_datatype };
    let t = TargetArgs {
        rank: target_rank,
        disp: target_disp as isize,
        count: target_count,
        datatype: target_datatype,
    };
    // SAFETY: the contract above.
    win_call("MPI_Get", win, |s| unsafe { get(s, win, &o, &t) }.map(|_| ()))
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_rput(
    origin_addr: UserBuf,
    origin_count: c_int,
    origin_datatype: c_int,
    target_rank: c_int,
    target_disp: c_long,
    target_count: c_int,
    target_datatype: c_int,
    win: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    let o = OriginArgs { buf: origin_addr, count: origin_count, datatype: origin_datatype };
    let t = TargetArgs {
        rank: target_rank,
        disp: target_disp as isize,
        count: target_count,
        datatype: target_datatype,
    };
    win_call("MPI_Rput", win, |s| {
        // SAFETY: the contract above.
        let rank = unsafe { put(s, win, &o, &t) }?;
        completed_request(s, win, rank, request)
    })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_rget(
    origin_addr: UserBuf,
    origin_count: c_int,
    origin_datatype: c_int,
    target_rank: c_int,
    target_disp: c_long,
    target_count: c_int,
    target_datatype: c_int,
    win: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    let o = OriginArgs { buf: origin_addr, count: origin_count, datatype: origin_datatype };
    let t = TargetArgs {
        rank: target_rank,
        disp: target_disp as isize,
        count: target_count,
        datatype: target_datatype,
    };
    win_call("MPI_Rget", win, |s| {
        // SAFETY: the contract above.
        let rank = unsafe { get(s, win, &o, &t) }?;
        completed_request(s, win, rank, request)
    })
}
