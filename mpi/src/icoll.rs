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

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Ibarrier"]
pub unsafe extern "C" fn MPI_Ibarrier(comm: c_int, request: Out<'_, c_int>) -> c_int {
    completed("MPI_Ibarrier", comm, request, MPI_Barrier(comm))
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `buf`: message buffers, each spanning its count of its datatype, until the request completes;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Ibcast"]
pub unsafe extern "C" fn MPI_Ibcast(
    buf: UserBuf,
    count: c_int,
    datatype: c_int,
    root: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    // SAFETY: this call's pointer arguments, passed on under the same contract.
    completed("MPI_Ibcast", comm, request, unsafe { MPI_Bcast(buf, count, datatype, root, comm) })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request completes;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Ireduce"]
pub unsafe extern "C" fn MPI_Ireduce(
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
        MPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm)
    })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request completes;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Iallreduce"]
pub unsafe extern "C" fn MPI_Iallreduce(
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
        MPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm)
    })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request completes;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Igather"]
pub unsafe extern "C" fn MPI_Igather(
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
        unsafe { MPI_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm) },
    )
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request completes;
/// `recvcounts`, `displs`: null or readable for the call (arrays as long as the counts say);
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Igatherv"]
pub unsafe extern "C" fn MPI_Igatherv(
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
            MPI_Gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm)
        },
    )
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request completes;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Iscatter"]
pub unsafe extern "C" fn MPI_Iscatter(
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
        unsafe { MPI_Scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm) },
    )
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request completes;
/// `sendcounts`, `displs`: null or readable for the call (arrays as long as the counts say);
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Iscatterv"]
pub unsafe extern "C" fn MPI_Iscatterv(
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
            MPI_Scatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm)
        },
    )
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request completes;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Iallgather"]
pub unsafe extern "C" fn MPI_Iallgather(
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
        unsafe { MPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm) },
    )
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request completes;
/// `recvcounts`, `displs`: null or readable for the call (arrays as long as the counts say);
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Iallgatherv"]
pub unsafe extern "C" fn MPI_Iallgatherv(
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
        unsafe { MPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm) },
    )
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request completes;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Ialltoall"]
pub unsafe extern "C" fn MPI_Ialltoall(
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
        unsafe { MPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm) },
    )
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request completes;
/// `sendcounts`, `sdispls`, `recvcounts`, `rdispls`: null or readable for the call (arrays as long as the counts say);
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Ialltoallv"]
pub unsafe extern "C" fn MPI_Ialltoallv(
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
            MPI_Alltoallv(
                sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm,
            )
        },
    )
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request completes;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Iscan"]
pub unsafe extern "C" fn MPI_Iscan(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    count: c_int,
    datatype: c_int,
    op: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    // SAFETY: this call's pointer arguments, passed on under the same contract.
    completed("MPI_Iscan", comm, request, unsafe { MPI_Scan(sendbuf, recvbuf, count, datatype, op, comm) })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request completes;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Iexscan"]
pub unsafe extern "C" fn MPI_Iexscan(
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
        MPI_Exscan(sendbuf, recvbuf, count, datatype, op, comm)
    })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request completes;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Ireduce_scatter_block"]
pub unsafe extern "C" fn MPI_Ireduce_scatter_block(
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
        unsafe { MPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm) },
    )
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request completes;
/// `recvcounts`: null or readable for the call (arrays as long as the counts say);
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Ireduce_scatter"]
pub unsafe extern "C" fn MPI_Ireduce_scatter(
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
        unsafe { MPI_Reduce_scatter(sendbuf, recvbuf, recvcounts, datatype, op, comm) },
    )
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request completes;
/// `sendcounts`, `sdispls`, `sendtypes`, `recvcounts`, `rdispls`, `recvtypes`: null or readable for the call (arrays as long as the counts say);
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Ialltoallw"]
pub unsafe extern "C" fn MPI_Ialltoallw(
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
        unsafe { MPI_Alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm) };
    completed("MPI_Ialltoallw", comm, request, rc)
}
