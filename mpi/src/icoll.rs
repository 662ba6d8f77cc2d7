//! Nonblocking collectives: each runs to completion when it is called and returns a request
//! that is complete (MPI lets an implementation do so; every rank must still call it in the
//! same order, which MPI requires anyway). Progress while the program computes between the
//! call and its wait is not overlapped.

use std::ffi::c_int;

use crate::abi::*;
use crate::coll::*;
use crate::ffi;
use crate::ffi::{In, Out, UserBuf};
use crate::request::{Request, Status};
use crate::state::call;

/// Runs the blocking collective; on success, a complete request in `*request`.
fn completed(function: &str, comm: c_int, request: Out<'_, c_int>, rc: c_int) -> c_int {
    if rc != MPI_SUCCESS {
        return rc;
    }
    call(function, comm, |s| {
        let h = s.requests.insert(Request::Done(Status::empty()));
        ffi::out(request, h, "request")
    })
}

pub(crate) unsafe fn mpi_ibarrier(comm: c_int, request: Out<'_, c_int>) -> c_int {
    completed("MPI_Ibarrier", comm, request, mpi_barrier(comm))
}

pub(crate) unsafe fn mpi_ibcast(
    buf: UserBuf,
    count: c_int,
    datatype: c_int,
    root: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    // SAFETY: this call's pointer arguments, passed on under the same contract.
    completed("MPI_Ibcast", comm, request, unsafe { mpi_bcast(buf, count, datatype, root, comm) })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_ireduce(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    count: c_int,
    datatype: c_int,
    op: c_int,
    root: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    // SAFETY: this call's pointer arguments, passed on under the same contract.
    completed("MPI_Ireduce", comm, request, unsafe {
        mpi_reduce(sendbuf, recvbuf, count, datatype, op, root, comm)
    })
}

pub(crate) unsafe fn mpi_iallreduce(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    count: c_int,
    datatype: c_int,
    op: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    // SAFETY: this call's pointer arguments, passed on under the same contract.
    completed("MPI_Iallreduce", comm, request, unsafe {
        mpi_allreduce(sendbuf, recvbuf, count, datatype, op, comm)
    })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_igather(
    sendbuf: UserBuf,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcount: c_int,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    completed(
        "MPI_Igather",
        comm,
        request,
        // SAFETY: this call's pointer arguments, passed on under the same contract.
        unsafe { mpi_gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm) },
    )
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_igatherv(
    sendbuf: UserBuf,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcounts: In<'_, c_int>,
    displs: In<'_, c_int>,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    completed(
        "MPI_Igatherv",
        comm,
        request,
        // SAFETY: this call's pointer arguments, passed on under the same contract.
        unsafe {
            mpi_gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm)
        },
    )
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_iscatter(
    sendbuf: UserBuf,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcount: c_int,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    completed(
        "MPI_Iscatter",
        comm,
        request,
        // SAFETY: this call's pointer arguments, passed on under the same contract.
        unsafe { mpi_scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm) },
    )
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_iscatterv(
    sendbuf: UserBuf,
    sendcounts: In<'_, c_int>,
    displs: In<'_, c_int>,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcount: c_int,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    completed(
        "MPI_Iscatterv",
        comm,
        request,
        // SAFETY: this call's pointer arguments, passed on under the same contract.
        unsafe {
            mpi_scatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm)
        },
    )
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_iallgather(
    sendbuf: UserBuf,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcount: c_int,
    recvtype: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    completed(
        "MPI_Iallgather",
        comm,
        request,
        // SAFETY: this call's pointer arguments, passed on under the same contract.
        unsafe { mpi_allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm) },
    )
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_iallgatherv(
    sendbuf: UserBuf,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcounts: In<'_, c_int>,
    displs: In<'_, c_int>,
    recvtype: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    completed(
        "MPI_Iallgatherv",
        comm,
        request,
        // SAFETY: this call's pointer arguments, passed on under the same contract.
        unsafe { mpi_allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm) },
    )
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_ialltoall(
    sendbuf: UserBuf,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcount: c_int,
    recvtype: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    completed(
        "MPI_Ialltoall",
        comm,
        request,
        // SAFETY: this call's pointer arguments, passed on under the same contract.
        unsafe { mpi_alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm) },
    )
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_ialltoallv(
    sendbuf: UserBuf,
    sendcounts: In<'_, c_int>,
    sdispls: In<'_, c_int>,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcounts: In<'_, c_int>,
    rdispls: In<'_, c_int>,
    recvtype: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    completed(
        "MPI_Ialltoallv",
        comm,
        request,
        // SAFETY: this call's pointer arguments, passed on under the same contract.
        unsafe {
            mpi_alltoallv(
                sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm,
            )
        },
    )
}

pub(crate) unsafe fn mpi_iscan(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    count: c_int,
    datatype: c_int,
    op: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    // SAFETY: this call's pointer arguments, passed on under the same contract.
    completed("MPI_Iscan", comm, request, unsafe { mpi_scan(sendbuf, recvbuf, count, datatype, op, comm) })
}

pub(crate) unsafe fn mpi_iexscan(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    count: c_int,
    datatype: c_int,
    op: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    // SAFETY: this call's pointer arguments, passed on under the same contract.
    completed("MPI_Iexscan", comm, request, unsafe {
        mpi_exscan(sendbuf, recvbuf, count, datatype, op, comm)
    })
}

pub(crate) unsafe fn mpi_ireduce_scatter_block(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    recvcount: c_int,
    datatype: c_int,
    op: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    completed(
        "MPI_Ireduce_scatter_block",
        comm,
        request,
        // SAFETY: this call's pointer arguments, passed on under the same contract.
        unsafe { mpi_reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm) },
    )
}

pub(crate) unsafe fn mpi_ireduce_scatter(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    recvcounts: In<'_, c_int>,
    datatype: c_int,
    op: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    completed(
        "MPI_Ireduce_scatter",
        comm,
        request,
        // SAFETY: this call's pointer arguments, passed on under the same contract.
        unsafe { mpi_reduce_scatter(sendbuf, recvbuf, recvcounts, datatype, op, comm) },
    )
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_ialltoallw(
    sendbuf: UserBuf,
    sendcounts: In<'_, c_int>,
    sdispls: In<'_, c_int>,
    sendtypes: In<'_, c_int>,
    recvbuf: UserBuf,
    recvcounts: In<'_, c_int>,
    rdispls: In<'_, c_int>,
    recvtypes: In<'_, c_int>,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    let rc =
        // SAFETY: this call's pointer arguments, passed on under the same contract.
        unsafe { mpi_alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm) };
    completed("MPI_Ialltoallw", comm, request, rc)
}
