//! MPI-1's datatype calls that MPI-2 deprecated and MPI-3 removed but MPICH still exports (and
//! its Fortran binding calls: `MPI_TYPE_HINDEXED` of MPICH's tests), each as its successor
//! (`MPI_Type_lb` and `_ub` are with the other bounds, in `datatype_api.rs`).

use std::ffi::{c_int, c_long};

use crate::datatype_api::MPI_Type_create_hindexed;
use crate::ffi::{In, Out};

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
