//! MPI 4's large-count (`_c`) collectives, over the `int` ones: counts that fit in an `int`
//! run as those do; a larger one fails with MPI_ERR_COUNT (reverb's collectives take `int`
//! counts and displacements yet). The nonblocking `MPI_I<x>_c` derive from these (build.rs).

use std::ffi::{c_int, c_long};

use super::{alltoall, api, api_gather};
use crate::abi::*;
use crate::errors::{MpiError, MpiResult};
use crate::ffi::{self, In, Out, UserBuf};
use crate::state::call;

/// An MPI_Count as the `int` collectives take it: -1 (MPI_ERR_COUNT there) beyond `int`.
pub(crate) fn int(n: c_long) -> c_int {
    c_int::try_from(n).unwrap_or(-1)
}

/// An array of a `_c` collective as `int`s (`n` of them), where it is significant and given;
/// None (a null array) elsewhere.
///
/// # Safety
/// `p` is null or holds `n` readable MPI_Counts or MPI_Aints (the FFI contract).
unsafe fn ints(p: In<'_, c_long>, n: usize, significant: bool) -> Option<Vec<c_int>> {
    if !significant || p.is_null() {
        return None;
    }
    // SAFETY: the caller's promise.
    let given = unsafe { ffi::array(p, n, "counts") }.ok()?;
    Some(given.iter().map(|&v| int(v)).collect())
}

/// `n` MPI_Counts or MPI_Aints of a `_c` call as the `int` call's array; MPI_ERR_COUNT for a
/// value beyond `int`.
///
/// # Safety
/// `p` holds `n` readable values (the FFI contract).
pub(crate) unsafe fn fitted(p: In<'_, c_long>, n: usize, what: &str) -> MpiResult<Option<Vec<c_int>>> {
    // SAFETY: the caller's promise.
    let given = unsafe { ffi::array(p, n, what) }?;
    let ints = given.iter().map(|&v| c_int::try_from(v).ok()).collect::<Option<Vec<_>>>();
    let too_large = || MpiError::new(MPI_ERR_COUNT, format!("{what}: a value beyond int"));
    ints.map(Some).ok_or_else(too_large)
}

/// The displacements of a `_c` collective as `int`s where significant and given; Err with
/// the code of `comm`'s error handler (run) for one beyond `int`, which no `int` stands for
/// (-1, a count's stand-in, is a valid displacement).
///
/// # Safety
/// As `ints`.
unsafe fn displacements(
    function: &str,
    comm: c_int,
    p: In<'_, c_long>,
    n: usize,
    significant: bool,
) -> Result<Option<Vec<c_int>>, c_int> {
    if !significant || p.is_null() {
        return Ok(None);
    }
    let mut found = None;
    let rc = call(function, comm, |_| {
        // SAFETY: the caller's promise.
        found = unsafe { fitted(p, n, "displacements") }?;
        Ok(())
    });
    found.filter(|_| rc == MPI_SUCCESS).map(Some).ok_or(rc)
}

/// The four arrays of an all-to-all `_c` (send counts and displacements, receive counts and
/// displacements) as `int`s, the send ones unread for MPI_IN_PLACE (`send` false).
///
/// # Safety
/// Each array holds one entry per peer of `comm` (the FFI contract).
unsafe fn pairwise(
    function: &str,
    comm: c_int,
    [sendcounts, sdispls, recvcounts, rdispls]: [In<'_, c_long>; 4],
    send: bool,
) -> Result<[Option<Vec<c_int>>; 4], c_int> {
    let n = shape(function, comm, None)?.peers;
    // SAFETY: the caller's promise.
    unsafe {
        let sd = displacements(function, comm, sdispls, n, send)?;
        let rd = displacements(function, comm, rdispls, n, true)?;
        Ok([ints(sendcounts, n, send), sd, ints(recvcounts, n, true), rd])
    }
}

/// A converted array as the `int` collective's argument (null for None).
pub(crate) fn arg(v: &Option<Vec<c_int>>) -> In<'_, c_int> {
    let p = v.as_ref().map_or(std::ptr::null_mut(), |v| v.as_ptr().cast_mut());
    // SAFETY: null or a live vector of the counts; only read (`as_in`), while `v` is borrowed.
    unsafe { Out::from_raw(p) }.as_in()
}

/// What a `_c` collective on `comm` needs to read its arrays.
struct Shape {
    /// Entries of a per-peer array (an intercommunicator's remote group).
    peers: usize,
    /// The communicator's own size.
    size: usize,
    /// Whether this rank is the root (true for a rootless collective).
    root: bool,
}

/// The shape of `comm` for a collective rooted at `root` (None: rootless); Err: the code of
/// `comm`'s error handler, already run.
fn shape(function: &str, comm: c_int, root: Option<c_int>) -> Result<Shape, c_int> {
    let mut found = None;
    let rc = call(function, comm, |s| {
        let c = s.comm(comm)?;
        let root = match (root, &c.remote) {
            (None, _) => true,
            (Some(r), Some(_)) => r == MPI_ROOT,
            (Some(r), None) => r == c.me as c_int,
        };
        found = Some(Shape { peers: c.peers().len(), size: c.size() as usize, root });
        Ok(())
    });
    found.filter(|_| rc == MPI_SUCCESS).ok_or(rc)
}

pub(crate) unsafe fn mpi_allgather_c(
    sendbuf: UserBuf,
    sendcount: c_long,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcount: c_long,
    recvtype: c_int,
    comm: c_int,
) -> c_int {
    // SAFETY: this call's arguments, passed on under the same contract.
    unsafe {
        api_gather::mpi_allgather(sendbuf, int(sendcount), sendtype, recvbuf, int(recvcount), recvtype, comm)
    }
}

pub(crate) unsafe fn mpi_alltoall_c(
    sendbuf: UserBuf,
    sendcount: c_long,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcount: c_long,
    recvtype: c_int,
    comm: c_int,
) -> c_int {
    // SAFETY: this call's arguments, passed on under the same contract.
    unsafe {
        alltoall::mpi_alltoall(sendbuf, int(sendcount), sendtype, recvbuf, int(recvcount), recvtype, comm)
    }
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_gather_c(
    sendbuf: UserBuf,
    sendcount: c_long,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcount: c_long,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
) -> c_int {
    // SAFETY: this call's arguments, passed on under the same contract.
    unsafe {
        api_gather::mpi_gather(
            sendbuf,
            int(sendcount),
            sendtype,
            recvbuf,
            int(recvcount),
            recvtype,
            root,
            comm,
        )
    }
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_scatter_c(
    sendbuf: UserBuf,
    sendcount: c_long,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcount: c_long,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
) -> c_int {
    // SAFETY: this call's arguments, passed on under the same contract.
    unsafe {
        api_gather::mpi_scatter(
            sendbuf,
            int(sendcount),
            sendtype,
            recvbuf,
            int(recvcount),
            recvtype,
            root,
            comm,
        )
    }
}

pub(crate) unsafe fn mpi_bcast_c(
    buf: UserBuf,
    count: c_long,
    datatype: c_int,
    root: c_int,
    comm: c_int,
) -> c_int {
    // SAFETY: this call's arguments, passed on under the same contract.
    unsafe { api::mpi_bcast(buf, int(count), datatype, root, comm) }
}

pub(crate) unsafe fn mpi_allreduce_c(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    count: c_long,
    datatype: c_int,
    op: c_int,
    comm: c_int,
) -> c_int {
    // SAFETY: this call's arguments, passed on under the same contract.
    unsafe { api::mpi_allreduce(sendbuf, recvbuf, int(count), datatype, op, comm) }
}

pub(crate) unsafe fn mpi_scan_c(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    count: c_long,
    datatype: c_int,
    op: c_int,
    comm: c_int,
) -> c_int {
    // SAFETY: this call's arguments, passed on under the same contract.
    unsafe { api::mpi_scan(sendbuf, recvbuf, int(count), datatype, op, comm) }
}

pub(crate) unsafe fn mpi_exscan_c(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    count: c_long,
    datatype: c_int,
    op: c_int,
    comm: c_int,
) -> c_int {
    // SAFETY: this call's arguments, passed on under the same contract.
    unsafe { api::mpi_exscan(sendbuf, recvbuf, int(count), datatype, op, comm) }
}

pub(crate) unsafe fn mpi_reduce_scatter_block_c(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    recvcount: c_long,
    datatype: c_int,
    op: c_int,
    comm: c_int,
) -> c_int {
    // SAFETY: this call's arguments, passed on under the same contract.
    unsafe { api::mpi_reduce_scatter_block(sendbuf, recvbuf, int(recvcount), datatype, op, comm) }
}

pub(crate) unsafe fn mpi_reduce_c(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    count: c_long,
    datatype: c_int,
    op: c_int,
    root: c_int,
    comm: c_int,
) -> c_int {
    // SAFETY: this call's arguments, passed on under the same contract.
    unsafe { api::mpi_reduce(sendbuf, recvbuf, int(count), datatype, op, root, comm) }
}

pub(crate) unsafe fn mpi_reduce_local_c(
    inbuf: UserBuf,
    inoutbuf: UserBuf,
    count: c_long,
    datatype: c_int,
    op: c_int,
) -> c_int {
    // SAFETY: this call's arguments, passed on under the same contract.
    unsafe { api::mpi_reduce_local(inbuf, inoutbuf, int(count), datatype, op) }
}

pub(crate) unsafe fn mpi_reduce_scatter_c(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    recvcounts: In<'_, c_long>,
    datatype: c_int,
    op: c_int,
    comm: c_int,
) -> c_int {
    let n = match shape("MPI_Reduce_scatter_c", comm, None) {
        Ok(shape) => shape.size,
        Err(rc) => return rc,
    };
    // SAFETY: the array holds one count per member (the FFI contract).
    let counts = unsafe { ints(recvcounts, n, true) };
    // SAFETY: this call's arguments, passed on under the same contract.
    unsafe { api::mpi_reduce_scatter(sendbuf, recvbuf, arg(&counts), datatype, op, comm) }
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_allgatherv_c(
    sendbuf: UserBuf,
    sendcount: c_long,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcounts: In<'_, c_long>,
    displs: In<'_, c_long>,
    recvtype: c_int,
    comm: c_int,
) -> c_int {
    let n = match shape("MPI_Allgatherv_c", comm, None) {
        Ok(shape) => shape.peers,
        Err(rc) => return rc,
    };
    // SAFETY: the arrays hold one entry per peer (the FFI contract).
    let counts = unsafe { ints(recvcounts, n, true) };
    // SAFETY: as above.
    let displs = match unsafe { displacements("MPI_Allgatherv_c", comm, displs, n, true) } {
        Ok(d) => d,
        Err(rc) => return rc,
    };
    // SAFETY: this call's arguments, passed on under the same contract.
    unsafe {
        api_gather::mpi_allgatherv(
            sendbuf,
            int(sendcount),
            sendtype,
            recvbuf,
            arg(&counts),
            arg(&displs),
            recvtype,
            comm,
        )
    }
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_gatherv_c(
    sendbuf: UserBuf,
    sendcount: c_long,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcounts: In<'_, c_long>,
    displs: In<'_, c_long>,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
) -> c_int {
    let (n, at_root) = match shape("MPI_Gatherv_c", comm, Some(root)) {
        Ok(shape) => (shape.peers, shape.root),
        Err(rc) => return rc,
    };
    // SAFETY: at the root the arrays hold one entry per peer (the FFI contract).
    let counts = unsafe { ints(recvcounts, n, at_root) };
    // SAFETY: as above.
    let displs = match unsafe { displacements("MPI_Gatherv_c", comm, displs, n, at_root) } {
        Ok(d) => d,
        Err(rc) => return rc,
    };
    // SAFETY: this call's arguments, passed on under the same contract.
    unsafe {
        api_gather::mpi_gatherv(
            sendbuf,
            int(sendcount),
            sendtype,
            recvbuf,
            arg(&counts),
            arg(&displs),
            recvtype,
            root,
            comm,
        )
    }
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_scatterv_c(
    sendbuf: UserBuf,
    sendcounts: In<'_, c_long>,
    displs: In<'_, c_long>,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcount: c_long,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
) -> c_int {
    let (n, at_root) = match shape("MPI_Scatterv_c", comm, Some(root)) {
        Ok(shape) => (shape.peers, shape.root),
        Err(rc) => return rc,
    };
    // SAFETY: at the root the arrays hold one entry per peer (the FFI contract).
    let counts = unsafe { ints(sendcounts, n, at_root) };
    // SAFETY: as above.
    let displs = match unsafe { displacements("MPI_Scatterv_c", comm, displs, n, at_root) } {
        Ok(d) => d,
        Err(rc) => return rc,
    };
    // SAFETY: this call's arguments, passed on under the same contract.
    unsafe {
        api_gather::mpi_scatterv(
            sendbuf,
            arg(&counts),
            arg(&displs),
            sendtype,
            recvbuf,
            int(recvcount),
            recvtype,
            root,
            comm,
        )
    }
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_alltoallv_c(
    sendbuf: UserBuf,
    sendcounts: In<'_, c_long>,
    sdispls: In<'_, c_long>,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcounts: In<'_, c_long>,
    rdispls: In<'_, c_long>,
    recvtype: c_int,
    comm: c_int,
) -> c_int {
    let send = !sendbuf.is_in_place();
    // SAFETY: the arrays hold one entry per peer (the FFI contract); MPI_IN_PLACE's are unread.
    let arrays =
        unsafe { pairwise("MPI_Alltoallv_c", comm, [sendcounts, sdispls, recvcounts, rdispls], send) };
    let [sc, sd, rc, rd] = match arrays {
        Ok(a) => a,
        Err(code) => return code,
    };
    // SAFETY: this call's arguments, passed on under the same contract.
    unsafe {
        alltoall::mpi_alltoallv(
            sendbuf,
            arg(&sc),
            arg(&sd),
            sendtype,
            recvbuf,
            arg(&rc),
            arg(&rd),
            recvtype,
            comm,
        )
    }
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_alltoallw_c(
    sendbuf: UserBuf,
    sendcounts: In<'_, c_long>,
    sdispls: In<'_, c_long>,
    sendtypes: In<'_, c_int>,
    recvbuf: UserBuf,
    recvcounts: In<'_, c_long>,
    rdispls: In<'_, c_long>,
    recvtypes: In<'_, c_int>,
    comm: c_int,
) -> c_int {
    let send = !sendbuf.is_in_place();
    // SAFETY: the arrays hold one entry per peer (the FFI contract); MPI_IN_PLACE's are unread.
    let arrays =
        unsafe { pairwise("MPI_Alltoallw_c", comm, [sendcounts, sdispls, recvcounts, rdispls], send) };
    let [sc, sd, rc, rd] = match arrays {
        Ok(a) => a,
        Err(code) => return code,
    };
    // SAFETY: this call's arguments, passed on under the same contract.
    unsafe {
        alltoall::mpi_alltoallw(
            sendbuf,
            arg(&sc),
            arg(&sd),
            sendtypes,
            recvbuf,
            arg(&rc),
            arg(&rd),
            recvtypes,
            comm,
        )
    }
}
