//! `MPI_Type_create_subarray` and `MPI_Type_create_darray`: the elements of an
//! n-dimensional array that a box, or a process's share of a distribution, selects. As in
//! MPICH, the type's lower bound is 0 and its extent the whole array's; its elements come in
//! the array's own order (C: last index fastest, Fortran: first).

use std::ffi::c_int;

use crate::abi::*;
use crate::datatype::{self, Datatype};
use crate::datatype_api::new_type;
use crate::errors::{MpiError, MpiResult};
use crate::ffi;
use crate::ffi::{In, Out};
use crate::type_contents::{Contents, MPI_COMBINER_DARRAY, MPI_COMBINER_SUBARRAY};

/// The type selecting, in each dimension d, the indices `picked[d]` of an array of `sizes`
/// elements of `old` stored in `order`.
fn selection(sizes: &[c_int], picked: &[Vec<isize>], order: c_int, old: &Datatype) -> MpiResult<Datatype> {
    let n = sizes.len();
    // Byte strides per dimension, and the dimensions from slowest to fastest.
    let mut strides = vec![0isize; n];
    let mut stride = old.extent;
    let dims: Vec<usize> = if order == MPI_ORDER_FORTRAN { (0..n).rev().collect() } else { (0..n).collect() };
    for &d in dims.iter().rev() {
        strides[d] = stride;
        stride *= sizes[d] as isize;
    }
    let total = stride;
    let mut displs = vec![0isize];
    for &d in &dims {
        displs = {
            let step = strides[d];
            displs.iter().flat_map(|&base| picked[d].iter().map(move |&i| base + i * step)).collect()
        };
    }
    if picked.iter().any(Vec::is_empty) {
        displs.clear();
    }
    let mut t = datatype::hindexed(&vec![1; displs.len()], &displs, old)?;
    (t.lb, t.extent, t.sticky) = (0, total, (Some(0), Some(total)));
    Ok(t)
}

fn dims_of(ndims: c_int) -> MpiResult<usize> {
    usize::try_from(ndims)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| MpiError::new(MPI_ERR_DIMS, format!("ndims {ndims}")))
}

fn check_order(order: c_int) -> MpiResult<()> {
    if order == MPI_ORDER_C || order == MPI_ORDER_FORTRAN {
        return Ok(());
    }
    Err(MpiError::new(MPI_ERR_ARG, format!("order {order}")))
}

pub(crate) unsafe fn mpi_type_create_subarray(
    ndims: c_int,
    sizes: In<'_, c_int>,
    subsizes: In<'_, c_int>,
    starts: In<'_, c_int>,
    order: c_int,
    old: c_int,
    newtype: Out<'_, c_int>,
) -> c_int {
    new_type("MPI_Type_create_subarray", newtype, |s| {
        let n = dims_of(ndims)?;
        check_order(order)?;
        // SAFETY: the arrays have `ndims` entries (the FFI contract).
        let (sizes, subsizes, starts) = unsafe {
            (
                ffi::array(sizes, n, "sizes")?,
                ffi::array(subsizes, n, "subsizes")?,
                ffi::array(starts, n, "starts")?,
            )
        };
        let mut picked = Vec::with_capacity(n);
        for d in 0..n {
            let (size, sub, start) = (sizes[d], subsizes[d], starts[d]);
            if size <= 0 || sub <= 0 || start < 0 || start + sub > size {
                return Err(MpiError::new(
                    MPI_ERR_ARG,
                    format!("dimension {d}: size {size}, subsize {sub}, start {start}"),
                ));
            }
            picked.push((start as isize..(start + sub) as isize).collect());
        }
        let t = selection(sizes, &picked, order, &s.datatype(old)?)?;
        let ints = [&[ndims], sizes, subsizes, starts, &[order]].concat();
        Ok((t, Contents::new(s, MPI_COMBINER_SUBARRAY, ints, vec![], vec![old])))
    })
}

/// The indices of one dimension of `gsize` elements that process coordinate `coord` of
/// `procs` holds under `distrib` with argument `darg`.
fn distributed(
    gsize: c_int,
    distrib: c_int,
    darg: c_int,
    procs: c_int,
    coord: c_int,
) -> MpiResult<Vec<isize>> {
    let (g, p, c) = (gsize as isize, procs.max(1) as isize, coord as isize);
    match distrib {
        MPI_DISTRIBUTE_NONE => Ok((0..g).collect()),
        MPI_DISTRIBUTE_BLOCK => {
            let b = if darg == MPI_DISTRIBUTE_DFLT_DARG { (g + p - 1) / p } else { darg as isize };
            if b <= 0 || b * p < g {
                return Err(MpiError::new(
                    MPI_ERR_ARG,
                    format!("block size {b} for {g} elements on {p} processes"),
                ));
            }
            Ok((c * b..((c + 1) * b).min(g)).collect())
        }
        MPI_DISTRIBUTE_CYCLIC => {
            let b = if darg == MPI_DISTRIBUTE_DFLT_DARG { 1 } else { darg as isize };
            if b <= 0 {
                return Err(MpiError::new(MPI_ERR_ARG, format!("cyclic block size {b}")));
            }
            let mut out = Vec::new();
            let mut start = c * b;
            while start < g {
                out.extend(start..(start + b).min(g));
                start += p * b;
            }
            Ok(out)
        }
        _ => Err(MpiError::new(MPI_ERR_ARG, format!("distribution {distrib}"))),
    }
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_type_create_darray(
    size: c_int,
    rank: c_int,
    ndims: c_int,
    gsizes: In<'_, c_int>,
    distribs: In<'_, c_int>,
    dargs: In<'_, c_int>,
    psizes: In<'_, c_int>,
    order: c_int,
    old: c_int,
    newtype: Out<'_, c_int>,
) -> c_int {
    new_type("MPI_Type_create_darray", newtype, |s| {
        let n = dims_of(ndims)?;
        check_order(order)?;
        // SAFETY: the arrays have `ndims` entries (the FFI contract).
        let (gsizes, distribs, dargs, psizes) = unsafe {
            (
                ffi::array(gsizes, n, "gsizes")?,
                ffi::array(distribs, n, "distribs")?,
                ffi::array(dargs, n, "dargs")?,
                ffi::array(psizes, n, "psizes")?,
            )
        };
        let grid: c_int = psizes.iter().product();
        if grid != size || !(0..size).contains(&rank) || gsizes.iter().any(|&g| g <= 0) {
            return Err(MpiError::new(MPI_ERR_ARG, format!("rank {rank} of {size} on a grid {psizes:?}")));
        }
        // The process grid is row-major whatever the array's order (MPI 4.0, 5.1.4).
        let mut coords = vec![0; n];
        let mut left = rank;
        for d in (0..n).rev() {
            coords[d] = left % psizes[d];
            left /= psizes[d];
        }
        let picked = (0..n)
            .map(|d| distributed(gsizes[d], distribs[d], dargs[d], psizes[d], coords[d]))
            .collect::<MpiResult<Vec<_>>>()?;
        let t = selection(gsizes, &picked, order, &s.datatype(old)?)?;
        let ints = [&[size, rank, ndims], gsizes, distribs, dargs, psizes, &[order]].concat();
        Ok((t, Contents::new(s, MPI_COMBINER_DARRAY, ints, vec![], vec![old])))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_and_cyclic_shares_cover_the_dimension_once() {
        let mut all: Vec<isize> = (0..3)
            .flat_map(|c| distributed(10, MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_DFLT_DARG, 3, c).unwrap())
            .collect();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
        assert_eq!(distributed(10, MPI_DISTRIBUTE_CYCLIC, 2, 3, 1).unwrap(), vec![2, 3, 8, 9]);
        all = (0..3).flat_map(|c| distributed(10, MPI_DISTRIBUTE_CYCLIC, 2, 3, c).unwrap()).collect();
        all.sort_unstable();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn a_subarray_lies_in_the_whole_array() {
        let int = Datatype::builtin(MPI_INT).unwrap();
        // Rows 1..3, columns 2..4 of a 4 x 5 C array of ints.
        let t = selection(&[4, 5], &[vec![1, 2], vec![2, 3]], MPI_ORDER_C, &int).unwrap();
        assert_eq!((t.lb, t.extent, t.size), (0, 80, 16));
        assert_eq!(t.repeated(1, 0), vec![(28, 8), (48, 8)]);
        let f = selection(&[4, 5], &[vec![1, 2], vec![2, 3]], MPI_ORDER_FORTRAN, &int).unwrap();
        assert_eq!(f.repeated(1, 0), vec![(36, 8), (52, 8)]);
    }
}
