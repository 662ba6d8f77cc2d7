//! The C entry points of the synchronizing and reducing collectives: barrier, broadcast,
//! reduce, all-reduce, local reduce, scans and reduce-scatter.

use std::ffi::c_int;

use super::{
    allreduce, allreduce_in_place, allreduce_runs_in_place, barrier, bcast_in_place, bcast_sized, count_of,
    in_place, reduce, reduce_in_place, reduce_runs_in_place, Group, ReduceAt, Reduction,
};
use crate::abi::*;
use crate::datatype::Datatype;
use crate::errors::{MpiError, MpiResult};
use crate::ffi;
use crate::ffi::{In, UserBuf};
use crate::intercomm::{self, Inter};
use crate::op::{self, Op};
use crate::state::{call, State};

pub(crate) fn mpi_barrier(comm: c_int) -> c_int {
    call("MPI_Barrier", comm, |s| {
        if let Some(inter) = Inter::of(s, comm)? {
            return intercomm::barrier(s, &inter);
        }
        let g = Group::of(s, comm)?;
        barrier(s, &g)
    })
}

pub(crate) unsafe fn mpi_bcast(
    buf: UserBuf,
    count: c_int,
    datatype: c_int,
    root: c_int,
    comm: c_int,
) -> c_int {
    call("MPI_Bcast", comm, |s| {
        if let Some(inter) = Inter::of(s, comm)? {
            return intercomm::bcast(s, &inter, buf, count_of(count)?, datatype, root);
        }
        let g = Group::of(s, comm)?;
        let root = g.check_root(root)?;
        let (count, dt) = (count_of(count)?, s.datatype(datatype)?);
        if dt.is_contiguous() && count > 0 {
            // SAFETY: MPI's buffer rule: the program's buffer spans these elements of this
            // contiguous datatype (its bytes_for(count) bytes), readable at the root and
            // writable at the others until the call returns.
            let bytes = unsafe { buf.bytes_mut(dt.bytes_for(count)) }?;
            if bcast_in_place(s, &g, root, bytes)? {
                return Ok(());
            }
        }
        // SAFETY: MPI's buffer rule: the program's send buffer spans these elements of this datatype, readable until the call returns or its request completes.
        let data = if g.me == root { unsafe { dt.pack(&buf, count) }?.into_owned() } else { Vec::new() };
        let data = bcast_sized(s, &g, root, data, dt.bytes_for(count))?;
        if g.me != root {
            // SAFETY: MPI's buffer rule: the program's receive buffer spans these elements of this datatype, writable and left alone until the call returns or its request completes.
            unsafe { dt.unpack(&data, buf, count) }?;
        }
        Ok(())
    })
}

/// A reduction's datatype and operation, and this rank's contribution: `n` elements of
/// `sendbuf`, or of `recvbuf` under MPI_IN_PLACE, packed.
fn contribution(
    s: &State,
    (sendbuf, recvbuf): (UserBuf, UserBuf),
    n: usize,
    datatype: c_int,
    op: c_int,
) -> MpiResult<(Datatype, Op, Vec<u8>)> {
    let (dt, op) = (s.datatype(datatype)?, s.op(op)?);
    let source = if in_place(sendbuf) { recvbuf } else { sendbuf };
    // SAFETY: MPI's buffer rule: the program's send buffer spans these elements of this datatype, readable until the call returns or its request completes.
    let mine = unsafe { dt.pack(&source, n) }?.into_owned();
    Ok((dt, op, mine))
}

#[allow(clippy::too_many_arguments)]
fn reduce_call(
    s: &mut State,
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    count: c_int,
    datatype: c_int,
    op: c_int,
    root: Option<c_int>,
    comm: c_int,
) -> MpiResult<()> {
    if let Some(inter) = Inter::of(s, comm)? {
        let (io, n) = ((sendbuf, recvbuf), count_of(count)?);
        return match root {
            Some(r) => intercomm::reduce(s, &inter, io, n, (datatype, op), r),
            None => intercomm::allreduce(s, &inter, io, n, (datatype, op)),
        };
    }
    let g = Group::of(s, comm)?;
    let root_rank = match root {
        Some(r) => g.check_root(r)?,
        None => 0,
    };
    let n = count_of(count)?;
    if root.is_none() && !in_place(sendbuf) {
        // MPICH refuses them too; copying the contribution out first would hide the error.
        let dt = s.datatype(datatype)?;
        let len = dt.bytes_for(n);
        if dt.is_contiguous() && sendbuf.overlaps(len, recvbuf, len) {
            return Err(aliased());
        }
    }
    if root.is_none() && allreduced_in_place(s, &g, (sendbuf, recvbuf), n, (datatype, op))? {
        return Ok(());
    }
    if root.is_some() && reduced_in_place(s, &g, root_rank, (sendbuf, recvbuf), n, (datatype, op))? {
        return Ok(());
    }
    let (dt, op, mine) = contribution(s, (sendbuf, recvbuf), n, datatype, op)?;
    let r = Reduction { op, dt: &dt, dt_handle: datatype, count: n };
    let result = match root {
        Some(_) => reduce(s, &g, root_rank, mine, &r)?,
        None => Some(allreduce(s, &g, mine, &r)?),
    };
    if let Some(bytes) = result {
        // SAFETY: MPI's buffer rule: the program's receive buffer spans these elements of this datatype, writable and left alone until the call returns or its request completes.
        unsafe { dt.unpack(&bytes, recvbuf, n) }?;
    }
    Ok(())
}

/// `MPI_Allreduce` of a contiguous datatype in the program's receive buffer (`sendbuf`
/// copied there first, unless MPI_IN_PLACE), where `allreduce_in_place` applies; false,
/// nothing done, elsewhere.
fn allreduced_in_place(
    s: &mut State,
    g: &Group,
    (sendbuf, recvbuf): (UserBuf, UserBuf),
    n: usize,
    (datatype, op): (c_int, c_int),
) -> MpiResult<bool> {
    let (dt, op) = (s.datatype(datatype)?, s.op(op)?);
    let r = Reduction { op, dt: &dt, dt_handle: datatype, count: n };
    if n == 0 || !allreduce_runs_in_place(s, g, &r) {
        return Ok(false);
    }
    // SAFETY: MPI's buffer rule for a reduction's buffers (the caller's contract).
    let acc = unsafe { contribution_in_place(sendbuf, &recvbuf, dt.bytes_for(n)) }?;
    allreduce_in_place(s, g, acc, &r).map(|()| true)
}

/// The receive buffer's `len` bytes, holding this rank's contribution: `sendbuf`'s copied
/// there unless MPI_IN_PLACE (MPI_ERR_BUFFER where the two overlap).
///
/// # Safety
/// MPI's buffer rule: the receive buffer spans `len` bytes, writable and left alone until the
/// call returns; the send buffer (unless MPI_IN_PLACE) `len` readable ones.
#[allow(clippy::mut_from_ref)] // The memory is the program's, not the `UserBuf`'s.
unsafe fn contribution_in_place(sendbuf: UserBuf, recvbuf: &UserBuf, len: usize) -> MpiResult<&mut [u8]> {
    if in_place(sendbuf) {
        // SAFETY: the caller's promise.
        return unsafe { recvbuf.bytes_mut(len) };
    }
    if sendbuf.overlaps(len, *recvbuf, len) {
        return Err(aliased());
    }
    // SAFETY: the caller's promise; the two do not overlap (above).
    let acc = unsafe { recvbuf.bytes_mut(len) }?;
    // SAFETY: as above.
    acc.copy_from_slice(unsafe { sendbuf.bytes(len) }?);
    Ok(acc)
}

/// `MPI_Reduce` of a contiguous datatype in the program's buffers (the root's `sendbuf`
/// copied into its receive buffer first, unless MPI_IN_PLACE), where `reduce_in_place`
/// applies; false, nothing done, elsewhere.
fn reduced_in_place(
    s: &mut State,
    g: &Group,
    root: usize,
    (sendbuf, recvbuf): (UserBuf, UserBuf),
    n: usize,
    (datatype, op): (c_int, c_int),
) -> MpiResult<bool> {
    let (dt, op) = (s.datatype(datatype)?, s.op(op)?);
    let r = Reduction { op, dt: &dt, dt_handle: datatype, count: n };
    if n == 0 || !reduce_runs_in_place(&r, root) || (g.me != root && in_place(sendbuf)) {
        return Ok(false);
    }
    let len = dt.bytes_for(n);
    if g.me != root {
        // SAFETY: MPI's buffer rule: the send buffer spans `n` elements of this contiguous
        // datatype, readable until the call returns.
        let mine = unsafe { sendbuf.bytes(len) }?;
        return reduce_in_place(s, g, root, ReduceAt::Other(mine), &r).map(|()| true);
    }
    // SAFETY: MPI's buffer rule for a reduction's buffers (the caller's contract).
    let acc = unsafe { contribution_in_place(sendbuf, &recvbuf, len) }?;
    reduce_in_place(s, g, root, ReduceAt::Root(acc), &r).map(|()| true)
}

/// Send and receive buffers that share bytes without MPI_IN_PLACE.
pub(crate) fn aliased() -> MpiError {
    MpiError::new(
        MPI_ERR_BUFFER,
        "the send and receive buffers overlap (MPI_IN_PLACE is the way to share one)",
    )
}

pub(crate) unsafe fn mpi_reduce(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    count: c_int,
    datatype: c_int,
    op: c_int,
    root: c_int,
    comm: c_int,
) -> c_int {
    call("MPI_Reduce", comm, |s| reduce_call(s, sendbuf, recvbuf, count, datatype, op, Some(root), comm))
}

pub(crate) unsafe fn mpi_allreduce(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    count: c_int,
    datatype: c_int,
    op: c_int,
    comm: c_int,
) -> c_int {
    call("MPI_Allreduce", comm, |s| reduce_call(s, sendbuf, recvbuf, count, datatype, op, None, comm))
}

pub(crate) unsafe fn mpi_reduce_local(
    inbuf: UserBuf,
    inoutbuf: UserBuf,
    count: c_int,
    datatype: c_int,
    op: c_int,
) -> c_int {
    call("MPI_Reduce_local", MPI_COMM_WORLD, |s| {
        let (n, dt, op) = (count_of(count)?, s.datatype(datatype)?, s.op(op)?);
        // SAFETY: MPI's buffer rule: the program's send buffer spans these elements of this datatype, readable until the call returns or its request completes.
        let input = unsafe { dt.pack(&inbuf, n) }?.into_owned();
        // SAFETY: MPI's buffer rule: the program's send buffer spans these elements of this datatype, readable until the call returns or its request completes.
        let mut acc = unsafe { dt.pack(&inoutbuf, n) }?.into_owned();
        op::apply(op, &dt, datatype, n, &input, &mut acc)?;
        // SAFETY: MPI's buffer rule: the program's receive buffer spans these elements of this datatype, writable and left alone until the call returns or its request completes.
        unsafe { dt.unpack(&acc, inoutbuf, n) }
    })
}

/// Inclusive (or exclusive) prefix reduction along the ranks, in rank order.
#[allow(clippy::too_many_arguments)]
fn scan_call(
    s: &mut State,
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    count: c_int,
    datatype: c_int,
    op: c_int,
    comm: c_int,
    exclusive: bool,
) -> MpiResult<()> {
    let g = Group::of(s, comm)?;
    let n = count_of(count)?;
    let (dt, op, mine) = contribution(s, (sendbuf, recvbuf), n, datatype, op)?;
    let before = if g.me > 0 { Some(g.recv(s, g.me - 1)?) } else { None };
    let through_me = match &before {
        Some(prefix) => {
            let mut acc = mine.clone();
            op::apply(op, &dt, datatype, n, prefix, &mut acc)?;
            acc
        }
        None => mine,
    };
    if g.me + 1 < g.size() {
        g.send(s, g.me + 1, &through_me)?;
    }
    match (exclusive, before) {
        // SAFETY: MPI's buffer rule: the program's receive buffer spans these elements of this datatype, writable and left alone until the call returns or its request completes.
        (false, _) => unsafe { dt.unpack(&through_me, recvbuf, n) },
        // SAFETY: MPI's buffer rule: the program's receive buffer spans these elements of this datatype, writable and left alone until the call returns or its request completes.
        (true, Some(prefix)) => unsafe { dt.unpack(&prefix, recvbuf, n) },
        // Rank 0's exclusive result is undefined: its buffer is left alone.
        (true, None) => Ok(()),
    }
}

pub(crate) unsafe fn mpi_scan(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    count: c_int,
    datatype: c_int,
    op: c_int,
    comm: c_int,
) -> c_int {
    call("MPI_Scan", comm, |s| scan_call(s, sendbuf, recvbuf, count, datatype, op, comm, false))
}

pub(crate) unsafe fn mpi_exscan(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    count: c_int,
    datatype: c_int,
    op: c_int,
    comm: c_int,
) -> c_int {
    call("MPI_Exscan", comm, |s| scan_call(s, sendbuf, recvbuf, count, datatype, op, comm, true))
}

/// Reduce to rank 0 over all the counts, then scatter each rank its block.
fn reduce_scatter_call(
    s: &mut State,
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    counts: Vec<usize>,
    datatype: c_int,
    op: c_int,
    comm: c_int,
) -> MpiResult<()> {
    if let Some(inter) = Inter::of(s, comm)? {
        return intercomm::reduce_scatter(s, &inter, (sendbuf, recvbuf), &counts, (datatype, op));
    }
    let g = Group::of(s, comm)?;
    let total: usize = counts.iter().sum();
    let (dt, op, mine) = contribution(s, (sendbuf, recvbuf), total, datatype, op)?;
    let r = Reduction { op, dt: &dt, dt_handle: datatype, count: total };
    let result = reduce(s, &g, 0, mine, &r)?;
    let piece = if g.me == 0 {
        let all = result.unwrap_or_default();
        let mut at = 0;
        let mut own = Vec::new();
        for (rank, &c) in counts.iter().enumerate() {
            let bytes = all.get(at..at + dt.bytes_for(c)).unwrap_or_default();
            at += dt.bytes_for(c);
            if rank == 0 {
                own = bytes.to_vec();
            } else {
                g.send(s, rank, bytes)?;
            }
        }
        own
    } else {
        g.recv(s, 0)?
    };
    // SAFETY: MPI's buffer rule: the program's receive buffer spans these elements of this datatype, writable and left alone until the call returns or its request completes.
    unsafe { dt.unpack(&piece, recvbuf, counts[g.me]) }
}

pub(crate) unsafe fn mpi_reduce_scatter_block(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    recvcount: c_int,
    datatype: c_int,
    op: c_int,
    comm: c_int,
) -> c_int {
    call("MPI_Reduce_scatter_block", comm, |s| {
        let n = s.comm(comm)?.size() as usize;
        let counts = vec![count_of(recvcount)?; n];
        reduce_scatter_call(s, sendbuf, recvbuf, counts, datatype, op, comm)
    })
}

pub(crate) unsafe fn mpi_reduce_scatter(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    recvcounts: In<'_, c_int>,
    datatype: c_int,
    op: c_int,
    comm: c_int,
) -> c_int {
    call("MPI_Reduce_scatter", comm, |s| {
        let n = s.comm(comm)?.size() as usize;
        // SAFETY: the array is as long as this call's counts say (the FFI contract).
        let counts = unsafe { ffi::array(recvcounts, n, "recvcounts") }?
            .iter()
            .map(|&c| count_of(c))
            .collect::<MpiResult<_>>()?;
        reduce_scatter_call(s, sendbuf, recvbuf, counts, datatype, op, comm)
    })
}
