//! MPI-1's datatype calls that MPI-2 deprecated and MPI-3 removed but MPICH still exports (and
//! its Fortran binding calls: `MPI_TYPE_HINDEXED` of MPICH's tests), each as its successor.

use std::ffi::{c_int, c_long};

use crate::abi::*;
use crate::datatype_api::MPI_Type_create_hindexed;
use crate::ffi::{self, In, Out};
use crate::state::call;

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `lens`, `displs`: null or readable for the call (arrays as long as the counts say);
/// `newtype`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Type_hindexed"]
pub unsafe extern "C" fn MPI_Type_hindexed(
    count: c_int,
    lens: In<'_, c_int>,
    displs: In<'_, c_long>,
    old: c_int,
    newtype: Out<'_, c_int>,
) -> c_int {
    // SAFETY: this call's pointer arguments, passed on under the same contract.
    unsafe { MPI_Type_create_hindexed(count, lens, displs, old, newtype) }
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `lb`: null or writable for the call.
#[export_name = "PMPI_Type_lb"]
pub unsafe extern "C" fn MPI_Type_lb(datatype: c_int, lb: Out<'_, c_long>) -> c_int {
    call("MPI_Type_lb", MPI_COMM_WORLD, |s| ffi::out(lb, s.datatype(datatype)?.lb as c_long, "displacement"))
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `ub`: null or writable for the call.
#[export_name = "PMPI_Type_ub"]
pub unsafe extern "C" fn MPI_Type_ub(datatype: c_int, ub: Out<'_, c_long>) -> c_int {
    call("MPI_Type_ub", MPI_COMM_WORLD, |s| {
        let t = s.datatype(datatype)?;
        ffi::out(ub, (t.lb + t.extent) as c_long, "displacement")
    })
}
