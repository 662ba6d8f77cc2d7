//! Nonblocking collectives: each runs to completion when it is called and returns a request
//! that is complete (MPI lets an implementation do so; every rank must still call it in the
//! same order, which MPI requires anyway). Progress while the program computes between the
//! call and its wait is not overlapped.

use std::ffi::{c_int, c_void};

use crate::abi::*;
use crate::coll::*;
use crate::ffi;
use crate::request::{Request, Status};
use crate::state::call;

/// Runs the blocking collective; on success, a complete request in `*request`.
fn completed(function: &str, comm: c_int, request: *mut c_int, rc: c_int) -> c_int {
    if rc != MPI_SUCCESS {
        return rc;
    }
    call(function, comm, |s| {
        let h = s.requests.insert(Request::Done(Status::empty()));
        ffi::out(request, h, "request")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Ibarrier(comm: c_int, request: *mut c_int) -> c_int {
    completed("MPI_Ibarrier", comm, request, MPI_Barrier(comm))
}

#[no_mangle]
pub extern "C" fn MPI_Ibcast(
    buf: *mut c_void,
    count: c_int,
    datatype: c_int,
    root: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    completed("MPI_Ibcast", comm, request, MPI_Bcast(buf, count, datatype, root, comm))
}

#[no_mangle]
pub extern "C" fn MPI_Ireduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: c_int,
    op: c_int,
    root: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    completed("MPI_Ireduce", comm, request, MPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm))
}

#[no_mangle]
pub extern "C" fn MPI_Iallreduce(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: c_int,
    op: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    completed("MPI_Iallreduce", comm, request, MPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm))
}

#[no_mangle]
pub extern "C" fn MPI_Igather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    completed(
        "MPI_Igather",
        comm,
        request,
        MPI_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm),
    )
}

#[no_mangle]
pub extern "C" fn MPI_Igatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    completed(
        "MPI_Igatherv",
        comm,
        request,
        MPI_Gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm),
    )
}

#[no_mangle]
pub extern "C" fn MPI_Iscatter(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    completed(
        "MPI_Iscatter",
        comm,
        request,
        MPI_Scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm),
    )
}

#[no_mangle]
pub extern "C" fn MPI_Iscatterv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    displs: *const c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    completed(
        "MPI_Iscatterv",
        comm,
        request,
        MPI_Scatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm),
    )
}

#[no_mangle]
pub extern "C" fn MPI_Iallgather(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    completed(
        "MPI_Iallgather",
        comm,
        request,
        MPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm),
    )
}

#[no_mangle]
pub extern "C" fn MPI_Iallgatherv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    completed(
        "MPI_Iallgatherv",
        comm,
        request,
        MPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm),
    )
}

#[no_mangle]
pub extern "C" fn MPI_Ialltoall(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    completed(
        "MPI_Ialltoall",
        comm,
        request,
        MPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm),
    )
}

#[no_mangle]
pub extern "C" fn MPI_Ialltoallv(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtype: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    completed(
        "MPI_Ialltoallv",
        comm,
        request,
        MPI_Alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm),
    )
}

#[no_mangle]
pub extern "C" fn MPI_Iscan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: c_int,
    op: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    completed("MPI_Iscan", comm, request, MPI_Scan(sendbuf, recvbuf, count, datatype, op, comm))
}

#[no_mangle]
pub extern "C" fn MPI_Iexscan(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: c_int,
    op: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    completed("MPI_Iexscan", comm, request, MPI_Exscan(sendbuf, recvbuf, count, datatype, op, comm))
}

#[no_mangle]
pub extern "C" fn MPI_Ireduce_scatter_block(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: c_int,
    datatype: c_int,
    op: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    completed(
        "MPI_Ireduce_scatter_block",
        comm,
        request,
        MPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm),
    )
}

#[no_mangle]
pub extern "C" fn MPI_Ireduce_scatter(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    datatype: c_int,
    op: c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    completed(
        "MPI_Ireduce_scatter",
        comm,
        request,
        MPI_Reduce_scatter(sendbuf, recvbuf, recvcounts, datatype, op, comm),
    )
}

#[no_mangle]
pub extern "C" fn MPI_Ialltoallw(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtypes: *const c_int,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtypes: *const c_int,
    comm: c_int,
    request: *mut c_int,
) -> c_int {
    let rc =
        MPI_Alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm);
    completed("MPI_Ialltoallw", comm, request, rc)
}
