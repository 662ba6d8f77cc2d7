//! Accumulates: `MPI_Accumulate`, `MPI_Get_accumulate`, `MPI_Fetch_and_op`,
//! `MPI_Compare_and_swap` and the request forms. The target applies the predefined
//! operation itself (`serve`), one request at a time: element-wise atomic with respect to
//! every other accumulate on the window, as MPI asks.

use std::ffi::{c_int, c_long};

use crate::abi::*;
use crate::datatype::{Elem, PairValue};
use crate::errors::{MpiError, MpiResult};
use crate::ffi::{Out, UserBuf};
use crate::state::State;

use super::ops::{
    completed_request, count_of, issue, mismatch, origin_bytes, target_runs, OriginArgs, Resolved, TargetArgs,
};
use super::win::win_call;
use super::wire::{OpKind, OpReq};

/// A predefined datatype whose elements are `elem`: what the target reduces with.
fn elem_handle(elem: Elem) -> c_int {
    match elem {
        Elem::I8 => MPI_SIGNED_CHAR,
        Elem::U8 => MPI_UNSIGNED_CHAR,
        Elem::I16 => MPI_SHORT,
        Elem::U16 => MPI_UNSIGNED_SHORT,
        Elem::I32 => MPI_INT,
        Elem::U32 => MPI_UNSIGNED,
        Elem::I64 => MPI_LONG,
        Elem::U64 => MPI_UNSIGNED_LONG,
        Elem::F32 => MPI_FLOAT,
        Elem::F64 => MPI_DOUBLE,
        Elem::Bool => MPI_C_BOOL,
        Elem::Pair(PairValue::F32, _) => MPI_FLOAT_INT,
        Elem::Pair(PairValue::F64, _) => MPI_DOUBLE_INT,
        Elem::Pair(PairValue::I64, _) => MPI_LONG_INT,
        Elem::Pair(PairValue::I32, _) => MPI_2INT,
        Elem::Pair(PairValue::I16, _) => MPI_SHORT_INT,
        Elem::LongDouble => MPI_LONG_DOUBLE,
        Elem::LongDoubleInt => MPI_LONG_DOUBLE_INT,
        Elem::ComplexF32 => MPI_C_FLOAT_COMPLEX,
        Elem::ComplexF64 => MPI_C_DOUBLE_COMPLEX,
        Elem::Opaque => MPI_BYTE,
    }
}

fn check_op(op: c_int) -> MpiResult<()> {
    if (MPI_MAX..=MPI_NO_OP).contains(&op) {
        return Ok(());
    }
    Err(MpiError::new(
        MPI_ERR_OP,
        format!("operation {op:#x}: one-sided accumulates take predefined operations only"),
    ))
}

/// Where a fetching accumulate's old values go.
#[derive(Clone, Copy)]
struct ResultArgs {
    buf: UserBuf,
    count: c_int,
    datatype: c_int,
}

/// An accumulate (`result`: none) or a fetching one; `compare`: a compare-and-swap's.
///
/// # Safety
/// `o.buf` (and `compare`'s) readable for the call; `result`'s writable until the epoch's
/// synchronization.
unsafe fn accumulate(
    s: &mut State,
    win: c_int,
    o: &OriginArgs,
    t: &TargetArgs,
    op: c_int,
    result: Option<ResultArgs>,
    compare: Option<UserBuf>,
) -> MpiResult<Option<usize>> {
    check_op(op)?;
    let Some(Resolved { rank, runs, dt: tdt }) = target_runs(s, win, t)? else { return Ok(None) };
    let span: usize = runs.iter().map(|r| r.1 as usize).sum();
    let mut data = if op == MPI_NO_OP {
        Vec::new()
    } else {
        // SAFETY: the caller's promise.
        unsafe { origin_bytes(s, o) }?
    };
    if op != MPI_NO_OP && data.len() != span {
        return Err(mismatch(data.len(), span));
    }
    if let Some(c) = compare {
        let with = OriginArgs { buf: c, ..*o };
        // SAFETY: the caller's promise.
        data.extend_from_slice(&unsafe { origin_bytes(s, &with) }?);
    }
    let kind = match (compare, result) {
        (Some(_), _) => OpKind::Cas,
        (None, Some(_)) => OpKind::GetAcc,
        (None, None) => OpKind::Acc,
    };
    let into = match result {
        Some(r) => Some((r.buf, s.datatype(r.datatype)?, count_of(r.count)?)),
        None => None,
    };
    let req = OpReq { kind, id: 0, op, elem: elem_handle(tdt.elem), runs, data };
    issue(s, win, rank, req, into)?;
    Ok(Some(rank))
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_accumulate(
    origin_addr: UserBuf,
    origin_count: c_int,
    origin_datatype: c_int,
    target_rank: c_int,
    target_disp: c_long,
    target_count: c_int,
    target_datatype: c_int,
    op: c_int,
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
    win_call("MPI_Accumulate", win, |s| unsafe { accumulate(s, win, &o, &t, op, None, None) }.map(|_| ()))
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_raccumulate(
    origin_addr: UserBuf,
    origin_count: c_int,
    origin_datatype: c_int,
    target_rank: c_int,
    target_disp: c_long,
    target_count: c_int,
    target_datatype: c_int,
    op: c_int,
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
    win_call("MPI_Raccumulate", win, |s| {
        // SAFETY: the contract above.
        let rank = unsafe { accumulate(s, win, &o, &t, op, None, None) }?;
        completed_request(s, win, rank, request)
    })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_get_accumulate(
    origin_addr: UserBuf,
    origin_count: c_int,
    origin_datatype: c_int,
    result_addr: UserBuf,
    result_count: c_int,
    result_datatype: c_int,
    target_rank: c_int,
    target_disp: c_long,
    target_count: c_int,
    target_datatype: c_int,
    op: c_int,
    win: c_int,
) -> c_int {
    let o = OriginArgs { buf: origin_addr, count: origin_count, datatype: origin_datatype };
    let r = ResultArgs { buf: result_addr, count: result_count, datatype: result_datatype };
    let t = TargetArgs {
        rank: target_rank,
        disp: target_disp as isize,
        count: target_count,
        datatype: target_datatype,
    };
    // SAFETY: the contract above.
    win_call("MPI_Get_accumulate", win, |s| {
        unsafe { accumulate(s, win, &o, &t, op, Some(r), None) }.map(|_| ())
    })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_rget_accumulate(
    origin_addr: UserBuf,
    origin_count: c_int,
    origin_datatype: c_int,
    result_addr: UserBuf,
    result_count: c_int,
    result_datatype: c_int,
    target_rank: c_int,
    target_disp: c_long,
    target_count: c_int,
    target_datatype: c_int,
    op: c_int,
    win: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    let o = OriginArgs { buf: origin_addr, count: origin_count, datatype: origin_datatype };
    let r = ResultArgs { buf: result_addr, count: result_count, datatype: result_datatype };
    let t = TargetArgs {
        rank: target_rank,
        disp: target_disp as isize,
        count: target_count,
        datatype: target_datatype,
    };
    win_call("MPI_Rget_accumulate", win, |s| {
        // SAFETY: the contract above.
        let rank = unsafe { accumulate(s, win, &o, &t, op, Some(r), None) }?;
        completed_request(s, win, rank, request)
    })
}

pub(crate) unsafe fn mpi_fetch_and_op(
    origin_addr: UserBuf,
    result_addr: UserBuf,
    datatype: c_int,
    target_rank: c_int,
    target_disp: c_long,
    op: c_int,
    win: c_int,
) -> c_int {
    let o = OriginArgs { buf: origin_addr, count: 1, datatype };
    let r = ResultArgs { buf: result_addr, count: 1, datatype };
    let t = TargetArgs { rank: target_rank, disp: target_disp as isize, count: 1, datatype };
    // SAFETY: the contract above.
    win_call("MPI_Fetch_and_op", win, |s| {
        unsafe { accumulate(s, win, &o, &t, op, Some(r), None) }.map(|_| ())
    })
}

pub(crate) unsafe fn mpi_compare_and_swap(
    origin_addr: UserBuf,
    compare_addr: UserBuf,
    result_addr: UserBuf,
    datatype: c_int,
    target_rank: c_int,
    target_disp: c_long,
    win: c_int,
) -> c_int {
    let o = OriginArgs { buf: origin_addr, count: 1, datatype };
    let r = ResultArgs { buf: result_addr, count: 1, datatype };
    let t = TargetArgs { rank: target_rank, disp: target_disp as isize, count: 1, datatype };
    win_call("MPI_Compare_and_swap", win, |s| {
        // SAFETY: the contract above.
        unsafe { accumulate(s, win, &o, &t, MPI_REPLACE, Some(r), Some(compare_addr)) }.map(|_| ())
    })
}
