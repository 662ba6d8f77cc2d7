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

fn elements(status: In<'_, CStatus>, datatype: c_int, count: Out<'_, c_int>, function: &str) -> c_int {
    call(function, MPI_COMM_WORLD, |s| {
        let st = ffi::read(status, "status")?;
        let size = s.datatype(datatype)?.size;
        let bytes = st.bytes();
        let n = match size {
            0 => 0,
            _ if bytes % size != 0 => MPI_UNDEFINED,
            _ => c_int::try_from(bytes / size).unwrap_or(MPI_UNDEFINED),
        };
        ffi::out(count, n, "count")
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
        let st = ffi::read(status, "status")?;
        let size = s.datatype(datatype)?.size;
        let bytes = st.bytes();
        let n = match size {
            0 => 0,
            _ if bytes % size != 0 => c_long::from(MPI_UNDEFINED),
            _ => (bytes / size) as c_long,
        };
        ffi::out(count, n, "count")
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
