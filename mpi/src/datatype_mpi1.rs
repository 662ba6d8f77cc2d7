//! MPI-1's datatype calls that MPI-2 deprecated and MPI-3 removed but MPICH still exports (and
//! its Fortran binding calls: `MPI_TYPE_HINDEXED` of MPICH's tests), each as its successor
//! (`MPI_Type_lb` and `_ub` are with the other bounds, in `datatype_api.rs`).

use std::ffi::{c_int, c_long};

use crate::datatype_api::mpi_type_create_hindexed;
use crate::ffi::{In, Out};

pub(crate) unsafe fn mpi_type_hindexed(
    count: c_int,
    lens: In<'_, c_int>,
    displs: In<'_, c_long>,
    old: c_int,
    newtype: Out<'_, c_int>,
) -> c_int {
    // SAFETY: this call's pointer arguments, passed on under the same contract.
    unsafe { mpi_type_create_hindexed(count, lens, displs, old, newtype) }
}
