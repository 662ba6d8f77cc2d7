//! What a status says: element counts, cancellation.

use std::ffi::{c_int, c_long};

use crate::abi::*;
use crate::ffi;
use crate::ffi::{In, Out};
use crate::request::CStatus;
use crate::state::call;

pub(crate) unsafe fn mpi_test_cancelled(status: In<'_, CStatus>, flag: Out<'_, c_int>) -> c_int {
    call("MPI_Test_cancelled", MPI_COMM_WORLD, |_| {
        let st = ffi::read(status, "status")?;
        ffi::out(flag, st.count_hi_and_cancelled & 1, "flag")
    })
}

/// The whole elements of `datatype` a status's bytes make; `None` when they make no whole
/// number of them (MPI_UNDEFINED). A datatype of size 0 makes 0.
fn whole_elements(
    s: &crate::state::State,
    status: In<'_, CStatus>,
    datatype: c_int,
) -> crate::errors::MpiResult<Option<usize>> {
    let st = ffi::read(status, "status")?;
    let size = s.datatype(datatype)?.size;
    let bytes = st.bytes();
    Ok(match size {
        0 => Some(0),
        _ if bytes % size != 0 => None,
        _ => Some(bytes / size),
    })
}

fn elements(status: In<'_, CStatus>, datatype: c_int, count: Out<'_, c_int>, function: &str) -> c_int {
    call(function, MPI_COMM_WORLD, |s| {
        let n = whole_elements(s, status, datatype)?.and_then(|n| c_int::try_from(n).ok());
        ffi::out(count, n.unwrap_or(MPI_UNDEFINED), "count")
    })
}

pub(crate) unsafe fn mpi_get_count(status: In<'_, CStatus>, datatype: c_int, count: Out<'_, c_int>) -> c_int {
    elements(status, datatype, count, "MPI_Get_count")
}

pub(crate) unsafe fn mpi_get_elements(
    status: In<'_, CStatus>,
    datatype: c_int,
    count: Out<'_, c_int>,
) -> c_int {
    elements(status, datatype, count, "MPI_Get_elements")
}

fn elements_wide(status: In<'_, CStatus>, datatype: c_int, count: Out<'_, c_long>, function: &str) -> c_int {
    call(function, MPI_COMM_WORLD, |s| {
        let n = whole_elements(s, status, datatype)?.map(|n| n as c_long);
        ffi::out(count, n.unwrap_or(c_long::from(MPI_UNDEFINED)), "count")
    })
}

pub(crate) unsafe fn mpi_get_count_c(
    status: In<'_, CStatus>,
    datatype: c_int,
    count: Out<'_, c_long>,
) -> c_int {
    elements_wide(status, datatype, count, "MPI_Get_count_c")
}

pub(crate) unsafe fn mpi_get_elements_c(
    status: In<'_, CStatus>,
    datatype: c_int,
    count: Out<'_, c_long>,
) -> c_int {
    elements_wide(status, datatype, count, "MPI_Get_elements_c")
}

pub(crate) unsafe fn mpi_get_elements_x(
    status: In<'_, CStatus>,
    datatype: c_int,
    count: Out<'_, c_long>,
) -> c_int {
    elements_wide(status, datatype, count, "MPI_Get_elements_x")
}
