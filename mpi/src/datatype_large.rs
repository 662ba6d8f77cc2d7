//! MPI 4's large-count datatype calls (`_c`, and the `_x` extents): MPI_Count counts and
//! bounds, over the same constructors as `datatype_api.rs`.

use std::ffi::{c_int, c_long};

use crate::abi::*;
use crate::datatype::{self, Datatype};
use crate::datatype_api::{self as api, new_type};
use crate::errors::{MpiError, MpiResult};
use crate::ffi;
use crate::ffi::{In, Out};
use crate::state::{call, State};
use crate::type_contents::*;

fn count_of(n: c_long) -> MpiResult<usize> {
    usize::try_from(n).map_err(|_| MpiError::new(MPI_ERR_COUNT, format!("count {n}")))
}

/// An MPI_Count as MPI_Type_get_contents's `int`s report it: clipped where it does not fit
/// (MPI_Type_get_contents_c is not provided).
fn int_of(n: c_long) -> c_int {
    c_int::try_from(n).unwrap_or(if n < 0 { c_int::MIN } else { c_int::MAX })
}

fn ints_of(v: &[c_long]) -> Vec<c_int> {
    v.iter().map(|&n| int_of(n)).collect()
}

/// `n` MPI_Counts from a C array.
///
/// # Safety
/// `p` points to `n` readable MPI_Counts (the FFI contract).
unsafe fn counts<'a>(p: In<'a, c_long>, n: usize, what: &str) -> MpiResult<&'a [c_long]> {
    // SAFETY: the caller's promise.
    unsafe { ffi::array(p, n, what) }
}

pub(crate) unsafe fn mpi_type_contiguous_c(count: c_long, old: c_int, newtype: Out<'_, c_int>) -> c_int {
    new_type("MPI_Type_contiguous_c", newtype, |s| {
        let t = datatype::contiguous(count_of(count)?, &s.datatype(old)?);
        Ok((t, Contents::new(s, MPI_COMBINER_CONTIGUOUS, vec![int_of(count)], vec![], vec![old])))
    })
}

/// A vector whose stride is in bytes (`hvector`) or in extents of `old`.
fn vector(s: &State, args: [c_long; 3], old: c_int, bytes: bool) -> MpiResult<(Datatype, Contents)> {
    let [count, blocklen, stride] = args;
    let t = s.datatype(old)?;
    let step = if bytes { stride as isize } else { stride as isize * t.extent };
    let made = datatype::hvector(count_of(count)?, count_of(blocklen)?, step, &t);
    let c = match bytes {
        true => Contents::new(s, MPI_COMBINER_HVECTOR, ints_of(&args[..2]), vec![stride as isize], vec![old]),
        false => Contents::new(s, MPI_COMBINER_VECTOR, ints_of(&args), vec![], vec![old]),
    };
    Ok((made, c))
}

pub(crate) unsafe fn mpi_type_vector_c(
    count: c_long,
    blocklen: c_long,
    stride: c_long,
    old: c_int,
    newtype: Out<'_, c_int>,
) -> c_int {
    new_type("MPI_Type_vector_c", newtype, |s| vector(s, [count, blocklen, stride], old, false))
}

pub(crate) unsafe fn mpi_type_create_hvector_c(
    count: c_long,
    blocklen: c_long,
    stride: c_long,
    old: c_int,
    newtype: Out<'_, c_int>,
) -> c_int {
    new_type("MPI_Type_create_hvector_c", newtype, |s| vector(s, [count, blocklen, stride], old, true))
}

/// Blocks of `lens[i]` copies of `old` at `displs[i]`, in bytes or in extents of `old`.
fn indexed(
    s: &State,
    combiner: c_int,
    lens: &[c_long],
    displs: &[c_long],
    old: c_int,
    bytes: bool,
) -> MpiResult<(Datatype, Contents)> {
    let t = s.datatype(old)?;
    let unit = if bytes { 1 } else { t.extent };
    let at: Vec<isize> = displs.iter().map(|&d| d as isize * unit).collect();
    let made = datatype::hindexed(lens, &at, &t)?;
    let mut ints = vec![int_of(lens.len() as c_long)];
    match combiner {
        MPI_COMBINER_INDEXED_BLOCK | MPI_COMBINER_HINDEXED_BLOCK => {
            ints.push(int_of(lens.first().copied().unwrap_or(0)))
        }
        _ => ints.extend(ints_of(lens)),
    }
    let aints = if bytes {
        at
    } else {
        ints.extend(ints_of(displs));
        vec![]
    };
    Ok((made, Contents::new(s, combiner, ints, aints, vec![old])))
}

pub(crate) unsafe fn mpi_type_indexed_c(
    count: c_long,
    lens: In<'_, c_long>,
    displs: In<'_, c_long>,
    old: c_int,
    newtype: Out<'_, c_int>,
) -> c_int {
    new_type("MPI_Type_indexed_c", newtype, |s| {
        let n = count_of(count)?;
        // SAFETY: the arrays are as long as this call's count says (the FFI contract).
        let (lens, displs) =
            unsafe { (counts(lens, n, "blocklengths")?, counts(displs, n, "displacements")?) };
        indexed(s, MPI_COMBINER_INDEXED, lens, displs, old, false)
    })
}

pub(crate) unsafe fn mpi_type_create_hindexed_c(
    count: c_long,
    lens: In<'_, c_long>,
    displs: In<'_, c_long>,
    old: c_int,
    newtype: Out<'_, c_int>,
) -> c_int {
    new_type("MPI_Type_create_hindexed_c", newtype, |s| {
        let n = count_of(count)?;
        // SAFETY: the arrays are as long as this call's count says (the FFI contract).
        let (lens, displs) =
            unsafe { (counts(lens, n, "blocklengths")?, counts(displs, n, "displacements")?) };
        indexed(s, MPI_COMBINER_HINDEXED, lens, displs, old, true)
    })
}

pub(crate) unsafe fn mpi_type_create_indexed_block_c(
    count: c_long,
    blocklen: c_long,
    displs: In<'_, c_long>,
    old: c_int,
    newtype: Out<'_, c_int>,
) -> c_int {
    new_type("MPI_Type_create_indexed_block_c", newtype, |s| {
        let n = count_of(count)?;
        // SAFETY: the array is as long as this call's count says (the FFI contract).
        let displs = unsafe { counts(displs, n, "displacements") }?;
        indexed(s, MPI_COMBINER_INDEXED_BLOCK, &vec![blocklen; n], displs, old, false)
    })
}

pub(crate) unsafe fn mpi_type_create_hindexed_block_c(
    count: c_long,
    blocklen: c_long,
    displs: In<'_, c_long>,
    old: c_int,
    newtype: Out<'_, c_int>,
) -> c_int {
    new_type("MPI_Type_create_hindexed_block_c", newtype, |s| {
        let n = count_of(count)?;
        // SAFETY: the array is as long as this call's count says (the FFI contract).
        let displs = unsafe { counts(displs, n, "displacements") }?;
        indexed(s, MPI_COMBINER_HINDEXED_BLOCK, &vec![blocklen; n], displs, old, true)
    })
}

pub(crate) unsafe fn mpi_type_create_struct_c(
    count: c_long,
    lens: In<'_, c_long>,
    displs: In<'_, c_long>,
    types: In<'_, c_int>,
    newtype: Out<'_, c_int>,
) -> c_int {
    new_type("MPI_Type_create_struct_c", newtype, |s| {
        let n = count_of(count)?;
        // SAFETY: the arrays are as long as this call's count says (the FFI contract).
        let (lens, displs, handles) = unsafe {
            (
                counts(lens, n, "blocklengths")?,
                counts(displs, n, "displacements")?,
                ffi::array(types, n, "types")?,
            )
        };
        let types = handles.iter().map(|&t| s.datatype(t)).collect::<MpiResult<Vec<_>>>()?;
        let at: Vec<isize> = displs.iter().map(|&d| d as isize).collect();
        let t = datatype::structure(lens, &at, &types)?;
        let ints = [vec![int_of(count)], ints_of(lens)].concat();
        Ok((t, Contents::new(s, MPI_COMBINER_STRUCT, ints, at, handles.to_vec())))
    })
}

pub(crate) unsafe fn mpi_type_create_resized_c(
    old: c_int,
    lb: c_long,
    extent: c_long,
    newtype: Out<'_, c_int>,
) -> c_int {
    // SAFETY: this call's pointer arguments, passed on under the same contract.
    unsafe { api::mpi_type_create_resized(old, lb, extent, newtype) }
}

fn extent_wide(
    function: &str,
    datatype: c_int,
    lb: Out<'_, c_long>,
    extent: Out<'_, c_long>,
    true_: bool,
) -> c_int {
    call(function, MPI_COMM_WORLD, |s| {
        let t = s.datatype(datatype)?;
        let (lo, span) = if true_ { true_bounds(&t) } else { (t.lb, t.extent) };
        ffi::out(lb, lo as c_long, "lb")?;
        ffi::out(extent, span as c_long, "extent")
    })
}

/// The least and the span of a type's data bytes.
pub fn true_bounds(t: &Datatype) -> (isize, isize) {
    let (lo, hi) = t.data_span(1);
    (lo, hi - lo)
}

pub(crate) unsafe fn mpi_type_get_extent_c(
    datatype: c_int,
    lb: Out<'_, c_long>,
    extent: Out<'_, c_long>,
) -> c_int {
    extent_wide("MPI_Type_get_extent_c", datatype, lb, extent, false)
}

pub(crate) unsafe fn mpi_type_get_extent_x(
    datatype: c_int,
    lb: Out<'_, c_long>,
    extent: Out<'_, c_long>,
) -> c_int {
    extent_wide("MPI_Type_get_extent_x", datatype, lb, extent, false)
}

pub(crate) unsafe fn mpi_type_get_true_extent_c(
    datatype: c_int,
    lb: Out<'_, c_long>,
    extent: Out<'_, c_long>,
) -> c_int {
    extent_wide("MPI_Type_get_true_extent_c", datatype, lb, extent, true)
}

pub(crate) unsafe fn mpi_type_get_true_extent_x(
    datatype: c_int,
    lb: Out<'_, c_long>,
    extent: Out<'_, c_long>,
) -> c_int {
    extent_wide("MPI_Type_get_true_extent_x", datatype, lb, extent, true)
}
