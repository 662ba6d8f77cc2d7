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

/// What a status's bytes make of `datatype`: whole copies of it (MPI_Get_count) or basic
/// elements (MPI_Get_elements).
#[derive(Clone, Copy)]
enum Unit {
    Copies,
    Elements,
}

/// How many `unit`s of `datatype` a status's bytes make; `None` when they make no whole
/// number of them (MPI_UNDEFINED). A datatype of size 0 makes 0.
fn units(
    s: &crate::state::State,
    status: In<'_, CStatus>,
    datatype: c_int,
    unit: Unit,
) -> crate::errors::MpiResult<Option<u64>> {
    let st = ffi::read(status, "status")?;
    let t = s.datatype(datatype)?;
    let bytes = st.bytes() as u64;
    Ok(match (t.size as u64, unit) {
        (0, _) => Some(0),
        (size, Unit::Copies) => bytes.is_multiple_of(size).then_some(bytes / size),
        (_, Unit::Elements) => t.elems.in_bytes(bytes),
    })
}

fn elements(
    status: In<'_, CStatus>,
    datatype: c_int,
    count: Out<'_, c_int>,
    unit: Unit,
    function: &str,
) -> c_int {
    call(function, MPI_COMM_WORLD, |s| {
        let n = units(s, status, datatype, unit)?.and_then(|n| c_int::try_from(n).ok());
        ffi::out(count, n.unwrap_or(MPI_UNDEFINED), "count")
    })
}

pub(crate) unsafe fn mpi_get_count(status: In<'_, CStatus>, datatype: c_int, count: Out<'_, c_int>) -> c_int {
    elements(status, datatype, count, Unit::Copies, "MPI_Get_count")
}

pub(crate) unsafe fn mpi_get_elements(
    status: In<'_, CStatus>,
    datatype: c_int,
    count: Out<'_, c_int>,
) -> c_int {
    elements(status, datatype, count, Unit::Elements, "MPI_Get_elements")
}

fn elements_wide(
    status: In<'_, CStatus>,
    datatype: c_int,
    count: Out<'_, c_long>,
    unit: Unit,
    function: &str,
) -> c_int {
    call(function, MPI_COMM_WORLD, |s| {
        let n = units(s, status, datatype, unit)?.and_then(|n| c_long::try_from(n).ok());
        ffi::out(count, n.unwrap_or(c_long::from(MPI_UNDEFINED)), "count")
    })
}

pub(crate) unsafe fn mpi_get_count_c(
    status: In<'_, CStatus>,
    datatype: c_int,
    count: Out<'_, c_long>,
) -> c_int {
    elements_wide(status, datatype, count, Unit::Copies, "MPI_Get_count_c")
}

pub(crate) unsafe fn mpi_get_elements_c(
    status: In<'_, CStatus>,
    datatype: c_int,
    count: Out<'_, c_long>,
) -> c_int {
    elements_wide(status, datatype, count, Unit::Elements, "MPI_Get_elements_c")
}

pub(crate) unsafe fn mpi_get_elements_x(
    status: In<'_, CStatus>,
    datatype: c_int,
    count: Out<'_, c_long>,
) -> c_int {
    elements_wide(status, datatype, count, Unit::Elements, "MPI_Get_elements_x")
}
