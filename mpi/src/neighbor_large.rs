//! The large-count neighbourhood collectives (`MPI_Neighbor_<x>_c`), over the `int` ones as
//! coll/large.rs does for the others: counts and displacements that fit in an `int` run as
//! those do; a larger one fails with MPI_ERR_COUNT. Their nonblocking and persistent forms
//! derive from these (build/derived.rs).

use std::ffi::{c_int, c_long};

use crate::abi::*;
use crate::coll::large::{arg, fitted, int};
use crate::errors::MpiResult;
use crate::ffi::{In, UserBuf};
use crate::neighbor;
use crate::state::{call, State};

/// Reads a `_c` call's arrays on `comm`, given its (indegree, outdegree); Err: the code of
/// `comm`'s error handler, already run.
fn read_arrays<T>(
    function: &str,
    comm: c_int,
    read: impl FnOnce(&State, usize, usize) -> MpiResult<T>,
) -> Result<T, c_int> {
    let mut found = None;
    let rc = call(function, comm, |s| {
        let (ins, outs) = s.degrees(comm)?;
        found = Some(read(s, ins, outs)?);
        Ok(())
    });
    found.filter(|_| rc == MPI_SUCCESS).ok_or(rc)
}

pub(crate) unsafe fn mpi_neighbor_allgather_c(
    sendbuf: UserBuf,
    sendcount: c_long,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcount: c_long,
    recvtype: c_int,
    comm: c_int,
) -> c_int {
    let (sc, rc) = (int(sendcount), int(recvcount));
    // SAFETY: this call's arguments, passed on under the same contract.
    unsafe { neighbor::mpi_neighbor_allgather(sendbuf, sc, sendtype, recvbuf, rc, recvtype, comm) }
}

pub(crate) unsafe fn mpi_neighbor_alltoall_c(
    sendbuf: UserBuf,
    sendcount: c_long,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcount: c_long,
    recvtype: c_int,
    comm: c_int,
) -> c_int {
    let (sc, rc) = (int(sendcount), int(recvcount));
    // SAFETY: this call's arguments, passed on under the same contract.
    unsafe { neighbor::mpi_neighbor_alltoall(sendbuf, sc, sendtype, recvbuf, rc, recvtype, comm) }
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_neighbor_allgatherv_c(
    sendbuf: UserBuf,
    sendcount: c_long,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcounts: In<'_, c_long>,
    displs: In<'_, c_long>,
    recvtype: c_int,
    comm: c_int,
) -> c_int {
    // SAFETY: the arrays have an entry per source (the FFI contract).
    let read = |_: &State, ins, _| unsafe {
        Ok((fitted(recvcounts, ins, "recvcounts")?, fitted(displs, ins, "displs")?))
    };
    let (counts, displs) = match read_arrays("MPI_Neighbor_allgatherv_c", comm, read) {
        Ok(arrays) => arrays,
        Err(rc) => return rc,
    };
    let sc = int(sendcount);
    // SAFETY: this call's arguments, passed on under the same contract.
    unsafe {
        neighbor::mpi_neighbor_allgatherv(
            sendbuf,
            sc,
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
pub(crate) unsafe fn mpi_neighbor_alltoallv_c(
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
    // SAFETY: the arrays have an entry per neighbour (the FFI contract).
    let read = |_: &State, ins, outs| unsafe {
        Ok((
            fitted(sendcounts, outs, "sendcounts")?,
            fitted(sdispls, outs, "sdispls")?,
            fitted(recvcounts, ins, "recvcounts")?,
            fitted(rdispls, ins, "rdispls")?,
        ))
    };
    let (sc, sd, rc, rd) = match read_arrays("MPI_Neighbor_alltoallv_c", comm, read) {
        Ok(arrays) => arrays,
        Err(rc) => return rc,
    };
    // SAFETY: this call's arguments, passed on under the same contract.
    unsafe {
        neighbor::mpi_neighbor_alltoallv(
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

/// The `int` form takes MPI_Aint displacements already: only the counts are narrowed.
#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_neighbor_alltoallw_c(
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
    // SAFETY: the arrays have an entry per neighbour (the FFI contract).
    let read = |_: &State, ins, outs| unsafe {
        Ok((fitted(sendcounts, outs, "sendcounts")?, fitted(recvcounts, ins, "recvcounts")?))
    };
    let (sc, rc) = match read_arrays("MPI_Neighbor_alltoallw_c", comm, read) {
        Ok(arrays) => arrays,
        Err(rc) => return rc,
    };
    // SAFETY: this call's arguments, passed on under the same contract.
    unsafe {
        neighbor::mpi_neighbor_alltoallw(
            sendbuf,
            arg(&sc),
            sdispls,
            sendtypes,
            recvbuf,
            arg(&rc),
            rdispls,
            recvtypes,
            comm,
        )
    }
}
