//! Persistent collectives (MPI 4's `MPI_*_init`): each start runs the blocking collective to
//! completion, as the nonblocking ones (icoll.rs) do; the request is complete once started.
//! The arguments are kept as given: MPI requires the buffers and count arrays to stay valid
//! and unchanged until the request is freed.

use std::ffi::c_int;
use std::rc::Rc;

use crate::coll::*;
use crate::ffi::{In, Out, UserBuf};
use crate::persistent::persistent;
use crate::request::{CollRun, PersistentOp};

/// A persistent request over `comm` whose start runs `run`.
fn coll_init(
    function: &str,
    comm: c_int,
    request: Out<'_, c_int>,
    run: impl Fn() -> c_int + 'static,
) -> c_int {
    persistent(function, comm, |_| Ok(PersistentOp::Coll(CollRun(Rc::new(run)))), request)
}

pub(crate) unsafe fn mpi_barrier_init(comm: c_int, _info: c_int, request: Out<'_, c_int>) -> c_int {
    coll_init("MPI_Barrier_init", comm, request, move || mpi_barrier(comm))
}

pub(crate) unsafe fn mpi_bcast_init(
    buf: UserBuf,
    count: c_int,
    datatype: c_int,
    root: c_int,
    comm: c_int,
    _info: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    coll_init("MPI_Bcast_init", comm, request, move || {
        // SAFETY: a start of this persistent request, not freed yet: MPI keeps its buffers and
        // arrays valid and unchanged until it is freed (MPI 4.0, 6.13).
        unsafe { mpi_bcast(buf, count, datatype, root, comm) }
    })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_reduce_init(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    count: c_int,
    datatype: c_int,
    op: c_int,
    root: c_int,
    comm: c_int,
    _info: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    coll_init("MPI_Reduce_init", comm, request, move || {
        // SAFETY: a start of this persistent request, not freed yet: MPI keeps its buffers and
        // arrays valid and unchanged until it is freed (MPI 4.0, 6.13).
        unsafe { mpi_reduce(sendbuf, recvbuf, count, datatype, op, root, comm) }
    })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_allreduce_init(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    count: c_int,
    datatype: c_int,
    op: c_int,
    comm: c_int,
    _info: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    coll_init("MPI_Allreduce_init", comm, request, move || {
        // SAFETY: a start of this persistent request, not freed yet: MPI keeps its buffers and
        // arrays valid and unchanged until it is freed (MPI 4.0, 6.13).
        unsafe { mpi_allreduce(sendbuf, recvbuf, count, datatype, op, comm) }
    })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_scan_init(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    count: c_int,
    datatype: c_int,
    op: c_int,
    comm: c_int,
    _info: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    coll_init("MPI_Scan_init", comm, request, move || {
        // SAFETY: a start of this persistent request, not freed yet: MPI keeps its buffers and
        // arrays valid and unchanged until it is freed (MPI 4.0, 6.13).
        unsafe { mpi_scan(sendbuf, recvbuf, count, datatype, op, comm) }
    })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_exscan_init(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    count: c_int,
    datatype: c_int,
    op: c_int,
    comm: c_int,
    _info: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    coll_init("MPI_Exscan_init", comm, request, move || {
        // SAFETY: a start of this persistent request, not freed yet: MPI keeps its buffers and
        // arrays valid and unchanged until it is freed (MPI 4.0, 6.13).
        unsafe { mpi_exscan(sendbuf, recvbuf, count, datatype, op, comm) }
    })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_reduce_scatter_block_init(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    recvcount: c_int,
    datatype: c_int,
    op: c_int,
    comm: c_int,
    _info: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    coll_init("MPI_Reduce_scatter_block_init", comm, request, move || {
        // SAFETY: a start of this persistent request, not freed yet: MPI keeps its buffers and
        // arrays valid and unchanged until it is freed (MPI 4.0, 6.13).
        unsafe { mpi_reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm) }
    })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_reduce_scatter_init(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    recvcounts: In<'_, c_int>,
    datatype: c_int,
    op: c_int,
    comm: c_int,
    _info: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    let recvcounts = recvcounts.keep();
    coll_init("MPI_Reduce_scatter_init", comm, request, move || {
        // SAFETY: a start of this persistent request, not freed yet: MPI keeps its buffers and
        // arrays valid and unchanged until it is freed (MPI 4.0, 6.13).
        unsafe { mpi_reduce_scatter(sendbuf, recvbuf, recvcounts.get(), datatype, op, comm) }
    })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_gather_init(
    sendbuf: UserBuf,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcount: c_int,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
    _info: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    coll_init("MPI_Gather_init", comm, request, move || {
        // SAFETY: a start of this persistent request, not freed yet: MPI keeps its buffers and
        // arrays valid and unchanged until it is freed (MPI 4.0, 6.13).
        unsafe { mpi_gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm) }
    })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_gatherv_init(
    sendbuf: UserBuf,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcounts: In<'_, c_int>,
    displs: In<'_, c_int>,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
    _info: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    let recvcounts = recvcounts.keep();
    let displs = displs.keep();
    coll_init("MPI_Gatherv_init", comm, request, move || {
        // SAFETY: a start of this persistent request, not freed yet: MPI keeps its buffers and
        // arrays valid and unchanged until it is freed (MPI 4.0, 6.13).
        unsafe {
            mpi_gatherv(
                sendbuf,
                sendcount,
                sendtype,
                recvbuf,
                recvcounts.get(),
                displs.get(),
                recvtype,
                root,
                comm,
            )
        }
    })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_scatter_init(
    sendbuf: UserBuf,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcount: c_int,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
    _info: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    coll_init("MPI_Scatter_init", comm, request, move || {
        // SAFETY: a start of this persistent request, not freed yet: MPI keeps its buffers and
        // arrays valid and unchanged until it is freed (MPI 4.0, 6.13).
        unsafe { mpi_scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm) }
    })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_scatterv_init(
    sendbuf: UserBuf,
    sendcounts: In<'_, c_int>,
    displs: In<'_, c_int>,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcount: c_int,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
    _info: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    let sendcounts = sendcounts.keep();
    let displs = displs.keep();
    coll_init("MPI_Scatterv_init", comm, request, move || {
        // SAFETY: a start of this persistent request, not freed yet: MPI keeps its buffers and
        // arrays valid and unchanged until it is freed (MPI 4.0, 6.13).
        unsafe {
            mpi_scatterv(
                sendbuf,
                sendcounts.get(),
                displs.get(),
                sendtype,
                recvbuf,
                recvcount,
                recvtype,
                root,
                comm,
            )
        }
    })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_allgather_init(
    sendbuf: UserBuf,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcount: c_int,
    recvtype: c_int,
    comm: c_int,
    _info: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    coll_init("MPI_Allgather_init", comm, request, move || {
        // SAFETY: a start of this persistent request, not freed yet: MPI keeps its buffers and
        // arrays valid and unchanged until it is freed (MPI 4.0, 6.13).
        unsafe { mpi_allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm) }
    })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_allgatherv_init(
    sendbuf: UserBuf,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcounts: In<'_, c_int>,
    displs: In<'_, c_int>,
    recvtype: c_int,
    comm: c_int,
    _info: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    let recvcounts = recvcounts.keep();
    let displs = displs.keep();
    coll_init("MPI_Allgatherv_init", comm, request, move || {
        // SAFETY: a start of this persistent request, not freed yet: MPI keeps its buffers and
        // arrays valid and unchanged until it is freed (MPI 4.0, 6.13).
        unsafe {
            mpi_allgatherv(
                sendbuf,
                sendcount,
                sendtype,
                recvbuf,
                recvcounts.get(),
                displs.get(),
                recvtype,
                comm,
            )
        }
    })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_alltoall_init(
    sendbuf: UserBuf,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcount: c_int,
    recvtype: c_int,
    comm: c_int,
    _info: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    coll_init("MPI_Alltoall_init", comm, request, move || {
        // SAFETY: a start of this persistent request, not freed yet: MPI keeps its buffers and
        // arrays valid and unchanged until it is freed (MPI 4.0, 6.13).
        unsafe { mpi_alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm) }
    })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_alltoallv_init(
    sendbuf: UserBuf,
    sendcounts: In<'_, c_int>,
    sdispls: In<'_, c_int>,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcounts: In<'_, c_int>,
    rdispls: In<'_, c_int>,
    recvtype: c_int,
    comm: c_int,
    _info: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    let sendcounts = sendcounts.keep();
    let sdispls = sdispls.keep();
    let recvcounts = recvcounts.keep();
    let rdispls = rdispls.keep();
    coll_init("MPI_Alltoallv_init", comm, request, move || {
        // SAFETY: a start of this persistent request, not freed yet: MPI keeps its buffers and
        // arrays valid and unchanged until it is freed (MPI 4.0, 6.13).
        unsafe {
            mpi_alltoallv(
                sendbuf,
                sendcounts.get(),
                sdispls.get(),
                sendtype,
                recvbuf,
                recvcounts.get(),
                rdispls.get(),
                recvtype,
                comm,
            )
        }
    })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_alltoallw_init(
    sendbuf: UserBuf,
    sendcounts: In<'_, c_int>,
    sdispls: In<'_, c_int>,
    sendtypes: In<'_, c_int>,
    recvbuf: UserBuf,
    recvcounts: In<'_, c_int>,
    rdispls: In<'_, c_int>,
    recvtypes: In<'_, c_int>,
    comm: c_int,
    _info: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    let sendcounts = sendcounts.keep();
    let sdispls = sdispls.keep();
    let sendtypes = sendtypes.keep();
    let recvcounts = recvcounts.keep();
    let rdispls = rdispls.keep();
    let recvtypes = recvtypes.keep();
    coll_init("MPI_Alltoallw_init", comm, request, move || {
        // SAFETY: a start of this persistent request, not freed yet: MPI keeps its buffers and
        // arrays valid and unchanged until it is freed (MPI 4.0, 6.13).
        unsafe {
            mpi_alltoallw(
                sendbuf,
                sendcounts.get(),
                sdispls.get(),
                sendtypes.get(),
                recvbuf,
                recvcounts.get(),
                rdispls.get(),
                recvtypes.get(),
                comm,
            )
        }
    })
}
