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

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`), those a start uses (buffers, count,
/// displacement and datatype arrays) until the request is freed:
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Barrier_init"]
pub unsafe extern "C" fn MPI_Barrier_init(comm: c_int, _info: c_int, request: Out<'_, c_int>) -> c_int {
    coll_init("MPI_Barrier_init", comm, request, move || MPI_Barrier(comm))
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`), those a start uses (buffers, count,
/// displacement and datatype arrays) until the request is freed:
/// `buf`: message buffers, each spanning its count of its datatype, until the request is freed;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Bcast_init"]
pub unsafe extern "C" fn MPI_Bcast_init(
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
        unsafe { MPI_Bcast(buf, count, datatype, root, comm) }
    })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`), those a start uses (buffers, count,
/// displacement and datatype arrays) until the request is freed:
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request is freed;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Reduce_init"]
pub unsafe extern "C" fn MPI_Reduce_init(
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
        unsafe { MPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm) }
    })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`), those a start uses (buffers, count,
/// displacement and datatype arrays) until the request is freed:
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request is freed;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Allreduce_init"]
pub unsafe extern "C" fn MPI_Allreduce_init(
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
        unsafe { MPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm) }
    })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`), those a start uses (buffers, count,
/// displacement and datatype arrays) until the request is freed:
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request is freed;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Scan_init"]
pub unsafe extern "C" fn MPI_Scan_init(
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
        unsafe { MPI_Scan(sendbuf, recvbuf, count, datatype, op, comm) }
    })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`), those a start uses (buffers, count,
/// displacement and datatype arrays) until the request is freed:
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request is freed;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Exscan_init"]
pub unsafe extern "C" fn MPI_Exscan_init(
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
        unsafe { MPI_Exscan(sendbuf, recvbuf, count, datatype, op, comm) }
    })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`), those a start uses (buffers, count,
/// displacement and datatype arrays) until the request is freed:
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request is freed;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Reduce_scatter_block_init"]
pub unsafe extern "C" fn MPI_Reduce_scatter_block_init(
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
        unsafe { MPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm) }
    })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`), those a start uses (buffers, count,
/// displacement and datatype arrays) until the request is freed:
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request is freed;
/// `recvcounts`: null or readable for the call (arrays as long as the counts say);
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Reduce_scatter_init"]
pub unsafe extern "C" fn MPI_Reduce_scatter_init(
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
        unsafe { MPI_Reduce_scatter(sendbuf, recvbuf, recvcounts.get(), datatype, op, comm) }
    })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`), those a start uses (buffers, count,
/// displacement and datatype arrays) until the request is freed:
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request is freed;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Gather_init"]
pub unsafe extern "C" fn MPI_Gather_init(
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
        unsafe { MPI_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm) }
    })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`), those a start uses (buffers, count,
/// displacement and datatype arrays) until the request is freed:
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request is freed;
/// `recvcounts`, `displs`: null or readable for the call (arrays as long as the counts say);
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Gatherv_init"]
pub unsafe extern "C" fn MPI_Gatherv_init(
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
            MPI_Gatherv(
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

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`), those a start uses (buffers, count,
/// displacement and datatype arrays) until the request is freed:
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request is freed;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Scatter_init"]
pub unsafe extern "C" fn MPI_Scatter_init(
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
        unsafe { MPI_Scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm) }
    })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`), those a start uses (buffers, count,
/// displacement and datatype arrays) until the request is freed:
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request is freed;
/// `sendcounts`, `displs`: null or readable for the call (arrays as long as the counts say);
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Scatterv_init"]
pub unsafe extern "C" fn MPI_Scatterv_init(
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
            MPI_Scatterv(
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

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`), those a start uses (buffers, count,
/// displacement and datatype arrays) until the request is freed:
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request is freed;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Allgather_init"]
pub unsafe extern "C" fn MPI_Allgather_init(
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
        unsafe { MPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm) }
    })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`), those a start uses (buffers, count,
/// displacement and datatype arrays) until the request is freed:
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request is freed;
/// `recvcounts`, `displs`: null or readable for the call (arrays as long as the counts say);
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Allgatherv_init"]
pub unsafe extern "C" fn MPI_Allgatherv_init(
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
            MPI_Allgatherv(
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

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`), those a start uses (buffers, count,
/// displacement and datatype arrays) until the request is freed:
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request is freed;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Alltoall_init"]
pub unsafe extern "C" fn MPI_Alltoall_init(
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
        unsafe { MPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm) }
    })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`), those a start uses (buffers, count,
/// displacement and datatype arrays) until the request is freed:
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request is freed;
/// `sendcounts`, `sdispls`, `recvcounts`, `rdispls`: null or readable for the call (arrays as long as the counts say);
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Alltoallv_init"]
pub unsafe extern "C" fn MPI_Alltoallv_init(
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
            MPI_Alltoallv(
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

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`), those a start uses (buffers, count,
/// displacement and datatype arrays) until the request is freed:
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request is freed;
/// `sendcounts`, `sdispls`, `sendtypes`, `recvcounts`, `rdispls`, `recvtypes`: null or readable for the call (arrays as long as the counts say);
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Alltoallw_init"]
pub unsafe extern "C" fn MPI_Alltoallw_init(
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
            MPI_Alltoallw(
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
