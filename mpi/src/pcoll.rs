//! Persistent collectives (MPI 4's `MPI_*_init`): each start runs the blocking collective to
//! completion, as the nonblocking ones (icoll.rs) do; the request is complete once started.
//! The arguments are kept as given: MPI requires the buffers and count arrays to stay valid
//! and unchanged until the request is freed.

use std::ffi::{c_int, c_void};
use std::rc::Rc;

use crate::coll::*;
use crate::persistent::persistent;
use crate::request::{CollRun, PersistentOp};

/// A persistent request over `comm` whose start runs `run`.
fn coll_init(function: &str, comm: c_int, request: *mut c_int, run: impl Fn() -> c_int + 'static) -> c_int {
    persistent(function, comm, |_| Ok(PersistentOp::Coll(CollRun(Rc::new(run)))), request)
}

#[no_mangle]
pub extern "C" fn MPI_Barrier_init(comm: c_int, _info: c_int, request: *mut c_int) -> c_int {
    coll_init("MPI_Barrier_init", comm, request, move || MPI_Barrier(comm))
}

#[no_mangle]
pub extern "C" fn MPI_Bcast_init(
    buf: *mut c_void,
    count: c_int,
    datatype: c_int,
    root: c_int,
    comm: c_int,
    _info: c_int,
    request: *mut c_int,
) -> c_int {
    coll_init("MPI_Bcast_init", comm, request, move || MPI_Bcast(buf, count, datatype, root, comm))
}

#[no_mangle]
pub extern "C" fn MPI_Reduce_init(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: c_int,
    op: c_int,
    root: c_int,
    comm: c_int,
    _info: c_int,
    request: *mut c_int,
) -> c_int {
    coll_init("MPI_Reduce_init", comm, request, move || {
        MPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Allreduce_init(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: c_int,
    op: c_int,
    comm: c_int,
    _info: c_int,
    request: *mut c_int,
) -> c_int {
    coll_init("MPI_Allreduce_init", comm, request, move || {
        MPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Scan_init(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: c_int,
    op: c_int,
    comm: c_int,
    _info: c_int,
    request: *mut c_int,
) -> c_int {
    coll_init("MPI_Scan_init", comm, request, move || MPI_Scan(sendbuf, recvbuf, count, datatype, op, comm))
}

#[no_mangle]
pub extern "C" fn MPI_Exscan_init(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: c_int,
    datatype: c_int,
    op: c_int,
    comm: c_int,
    _info: c_int,
    request: *mut c_int,
) -> c_int {
    coll_init("MPI_Exscan_init", comm, request, move || {
        MPI_Exscan(sendbuf, recvbuf, count, datatype, op, comm)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Reduce_scatter_block_init(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: c_int,
    datatype: c_int,
    op: c_int,
    comm: c_int,
    _info: c_int,
    request: *mut c_int,
) -> c_int {
    coll_init("MPI_Reduce_scatter_block_init", comm, request, move || {
        MPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Reduce_scatter_init(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    datatype: c_int,
    op: c_int,
    comm: c_int,
    _info: c_int,
    request: *mut c_int,
) -> c_int {
    coll_init("MPI_Reduce_scatter_init", comm, request, move || {
        MPI_Reduce_scatter(sendbuf, recvbuf, recvcounts, datatype, op, comm)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Gather_init(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
    _info: c_int,
    request: *mut c_int,
) -> c_int {
    coll_init("MPI_Gather_init", comm, request, move || {
        MPI_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Gatherv_init(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
    _info: c_int,
    request: *mut c_int,
) -> c_int {
    coll_init("MPI_Gatherv_init", comm, request, move || {
        MPI_Gatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Scatter_init(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
    _info: c_int,
    request: *mut c_int,
) -> c_int {
    coll_init("MPI_Scatter_init", comm, request, move || {
        MPI_Scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Scatterv_init(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    displs: *const c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
    _info: c_int,
    request: *mut c_int,
) -> c_int {
    coll_init("MPI_Scatterv_init", comm, request, move || {
        MPI_Scatterv(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Allgather_init(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    comm: c_int,
    _info: c_int,
    request: *mut c_int,
) -> c_int {
    coll_init("MPI_Allgather_init", comm, request, move || {
        MPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Allgatherv_init(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: c_int,
    comm: c_int,
    _info: c_int,
    request: *mut c_int,
) -> c_int {
    coll_init("MPI_Allgatherv_init", comm, request, move || {
        MPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Alltoall_init(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: c_int,
    comm: c_int,
    _info: c_int,
    request: *mut c_int,
) -> c_int {
    coll_init("MPI_Alltoall_init", comm, request, move || {
        MPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Alltoallv_init(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtype: c_int,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtype: c_int,
    comm: c_int,
    _info: c_int,
    request: *mut c_int,
) -> c_int {
    coll_init("MPI_Alltoallv_init", comm, request, move || {
        MPI_Alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Alltoallw_init(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtypes: *const c_int,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtypes: *const c_int,
    comm: c_int,
    _info: c_int,
    request: *mut c_int,
) -> c_int {
    coll_init("MPI_Alltoallw_init", comm, request, move || {
        MPI_Alltoallw(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm)
    })
}
