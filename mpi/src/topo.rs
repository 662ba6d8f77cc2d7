//! Cartesian process topologies (`MPI_Cart_*`, `MPI_Dims_create`, `MPI_Topo_test`): what
//! stencil codes use to find their neighbours (`neighbor.rs` reaches them). Ranks are never
//! reordered.

use std::ffi::c_int;

use crate::abi::*;
use crate::errors::{MpiError, MpiResult};
use crate::ffi;
use crate::ffi::{In, Out};
use crate::state::{call, State};

/// MPICH's `MPI_CART` (a member of mpi.h's `MPIR_Topo_type` enum, which the build's constant
/// scan does not read).
const MPI_CART: c_int = 2;

/// A communicator's Cartesian grid: extent and periodicity of each dimension, row-major.
#[derive(Debug, Clone)]
pub struct Cart {
    pub dims: Vec<c_int>,
    pub periods: Vec<bool>,
}

impl Cart {
    /// The coordinates of `rank`.
    pub fn coords(&self, rank: c_int) -> Vec<c_int> {
        let mut left = rank;
        let mut out = vec![0; self.dims.len()];
        for (i, &d) in self.dims.iter().enumerate().rev() {
            out[i] = left % d.max(1);
            left /= d.max(1);
        }
        out
    }

    /// The rank at `coords` (periodic dimensions wrap); None off a non-periodic edge.
    pub fn rank(&self, coords: &[c_int]) -> Option<c_int> {
        let mut rank = 0;
        for ((&c, &d), &periodic) in coords.iter().zip(&self.dims).zip(&self.periods) {
            let c = if periodic { c.rem_euclid(d.max(1)) } else { c };
            if !(0..d).contains(&c) {
                return None;
            }
            rank = rank * d + c;
        }
        Some(rank)
    }

    /// `MPI_Cart_shift` of `me`: (source, dest) along `dim` by `disp`, MPI_PROC_NULL off an edge.
    pub fn shift(&self, me: c_int, dim: usize, disp: c_int) -> (c_int, c_int) {
        let at = |delta: c_int| {
            let mut c = self.coords(me);
            c[dim] += delta;
            self.rank(&c).unwrap_or(MPI_PROC_NULL)
        };
        (at(-disp), at(disp))
    }

    /// The neighbours in MPI's order: per dimension, the one below, then the one above.
    pub fn neighbours(&self, me: c_int) -> Vec<c_int> {
        (0..self.dims.len())
            .flat_map(|d| {
                let (lo, hi) = self.shift(me, d, 1);
                [lo, hi]
            })
            .collect()
    }
}

/// The `k` factors of `n`, largest first, that MPICH's `MPI_Dims_create` picks: the least
/// spread (largest minus smallest), then the largest smallest factor, then the largest next
/// smallest, and so on (MPICH's `topo/dims5` table, 75 000 cases, agrees).
fn most_balanced(n: i64, k: usize) -> Vec<c_int> {
    if k == 0 {
        return Vec::new();
    }
    let mut best: Option<(Vec<i64>, Vec<i64>)> = None;
    search(n, k, n, &mut Vec::with_capacity(k), &mut best);
    best.map_or_else(|| vec![1; k], |(_, d)| d.into_iter().map(|x| x as c_int).collect())
}

/// `root`-th root of `m`, rounded down.
fn iroot(m: i64, root: usize) -> i64 {
    let mut r = (m as f64).powf(1.0 / root as f64).round() as i64;
    while r > 1 && r.checked_pow(root as u32).is_none_or(|p| p > m) {
        r -= 1;
    }
    while (r + 1).checked_pow(root as u32).is_some_and(|p| p <= m) {
        r += 1;
    }
    r.max(1)
}

/// The ordering key: spread, then the factors from the smallest up, larger first.
fn balance_key(d: &[i64]) -> Vec<i64> {
    let spread = d.first().copied().unwrap_or(1) - d.last().copied().unwrap_or(1);
    std::iter::once(spread).chain(d.iter().rev().map(|&x| -x)).collect()
}

/// Extends `prefix` (non-increasing) with `j` factors of `m`, none above `max`.
fn search(m: i64, j: usize, max: i64, prefix: &mut Vec<i64>, best: &mut Option<(Vec<i64>, Vec<i64>)>) {
    if j == 1 {
        if m <= max {
            prefix.push(m);
            let key = balance_key(prefix);
            if best.as_ref().is_none_or(|(k, _)| key < *k) {
                *best = Some((key, prefix.clone()));
            }
            prefix.pop();
        }
        return;
    }
    // The largest of the remaining factors is at least the j-th root; the smallest at most.
    let floor = iroot(m, j);
    let lowest = if floor.checked_pow(j as u32) == Some(m) { floor } else { floor + 1 };
    for f in lowest..=max.min(m) {
        let top = prefix.first().copied().unwrap_or(f);
        if best.as_ref().is_some_and(|(k, _)| top - floor > k[0]) {
            return; // Every larger f spreads at least as far.
        }
        if m % f == 0 {
            prefix.push(f);
            search(m / f, j - 1, f, prefix, best);
            prefix.pop();
        }
    }
}

/// `MPI_Dims_create`'s balanced factorisation: the zero entries of `dims` filled so that the
/// product is `nodes`, as close to each other as can be, in non-increasing order.
pub fn balanced_dims(nodes: c_int, dims: &[c_int]) -> MpiResult<Vec<c_int>> {
    let fixed: c_int = dims.iter().filter(|&&d| d > 0).product();
    if dims.iter().any(|&d| d < 0) || fixed == 0 || nodes % fixed != 0 {
        return Err(MpiError::new(MPI_ERR_DIMS, format!("{nodes} nodes do not fill dims {dims:?}")));
    }
    let free = dims.iter().filter(|&&d| d == 0).count();
    if free == 0 {
        return if nodes == fixed {
            Ok(dims.to_vec())
        } else {
            Err(MpiError::new(MPI_ERR_DIMS, "no free dimension"))
        };
    }
    let mut filled = most_balanced(i64::from(nodes / fixed), free);
    filled.sort_unstable_by(|a, b| b.cmp(a));
    let mut next = filled.into_iter();
    Ok(dims.iter().map(|&d| if d == 0 { next.next().unwrap_or(1) } else { d }).collect())
}

impl State {
    pub fn cart(&self, comm: c_int) -> MpiResult<&Cart> {
        self.comm(comm)?;
        self.carts
            .get(&comm)
            .ok_or_else(|| MpiError::new(MPI_ERR_TOPOLOGY, "the communicator has no Cartesian topology"))
    }
}

pub(crate) unsafe fn mpi_dims_create(nnodes: c_int, ndims: c_int, dims: Out<'_, c_int>) -> c_int {
    call("MPI_Dims_create", MPI_COMM_WORLD, |_| {
        let n = usize::try_from(ndims).map_err(|_| MpiError::new(MPI_ERR_DIMS, format!("ndims {ndims}")))?;
        // SAFETY: the array is as long as this call's counts say (the FFI contract).
        let given = unsafe { ffi::array(dims, n, "dims") }?.to_vec();
        let filled = balanced_dims(nnodes, &given)?;
        // SAFETY: the array is as long as this call's counts say (the FFI contract); no other slice of it lives.
        unsafe { ffi::array_mut(dims, n, "dims") }?.copy_from_slice(&filled);
        Ok(())
    })
}

pub(crate) unsafe fn mpi_cart_create(
    comm_old: c_int,
    ndims: c_int,
    dims: In<'_, c_int>,
    periods: In<'_, c_int>,
    _reorder: c_int,
    comm_cart: Out<'_, c_int>,
) -> c_int {
    call("MPI_Cart_create", comm_old, |s| {
        let n = usize::try_from(ndims).map_err(|_| MpiError::new(MPI_ERR_DIMS, format!("ndims {ndims}")))?;
        // SAFETY: the array is as long as this call's counts say (the FFI contract).
        let dims = unsafe { ffi::array(dims, n, "dims") }?.to_vec();
        // SAFETY: the array is as long as this call's counts say (the FFI contract).
        let periods: Vec<bool> =
            unsafe { ffi::array(periods, n, "periods") }?.iter().map(|&p| p != 0).collect();
        let cells: usize = dims.iter().map(|&d| usize::try_from(d).unwrap_or(0)).product();
        let parent = s.comm(comm_old)?;
        if parent.remote.is_some() || dims.iter().any(|&d| d <= 0) || cells > parent.size() as usize {
            return Err(MpiError::new(
                MPI_ERR_DIMS,
                format!("dims {dims:?} on a communicator of {}", parent.size()),
            ));
        }
        let (ranks, inside) = (parent.ranks[..cells].to_vec(), (parent.me as usize) < cells);
        let context = s.new_context(comm_old)?;
        if !inside {
            return ffi::out(comm_cart, MPI_COMM_NULL, "comm_cart");
        }
        let h = s.derive(comm_old, ranks, context);
        s.carts.insert(h, Cart { dims, periods });
        ffi::out(comm_cart, h, "comm_cart")
    })
}

pub(crate) unsafe fn mpi_topo_test(comm: c_int, status: Out<'_, c_int>) -> c_int {
    call("MPI_Topo_test", comm, |s| {
        s.comm(comm)?;
        let kind = match s.graphs.get(&comm) {
            _ if s.carts.contains_key(&comm) => MPI_CART,
            Some(crate::graph::Graph::Whole { .. }) => crate::graph::MPI_GRAPH,
            Some(crate::graph::Graph::Dist { .. }) => crate::graph::MPI_DIST_GRAPH,
            None => MPI_UNDEFINED,
        };
        ffi::out(status, kind, "status")
    })
}

pub(crate) unsafe fn mpi_cartdim_get(comm: c_int, ndims: Out<'_, c_int>) -> c_int {
    call("MPI_Cartdim_get", comm, |s| ffi::out(ndims, s.cart(comm)?.dims.len() as c_int, "ndims"))
}

pub(crate) unsafe fn mpi_cart_get(
    comm: c_int,
    maxdims: c_int,
    dims: Out<'_, c_int>,
    periods: Out<'_, c_int>,
    coords: Out<'_, c_int>,
) -> c_int {
    call("MPI_Cart_get", comm, |s| {
        let me = s.comm(comm)?.me as c_int;
        let cart = s.cart(comm)?;
        let n = cart.dims.len();
        if usize::try_from(maxdims).map_or(true, |m| m < n) {
            return Err(MpiError::new(MPI_ERR_ARG, format!("maxdims {maxdims} below the grid's {n}")));
        }
        // SAFETY: the array is as long as this call's counts say (the FFI contract); no other slice of it lives.
        unsafe { ffi::array_mut(dims, n, "dims") }?.copy_from_slice(&cart.dims);
        let p: Vec<c_int> = cart.periods.iter().map(|&p| c_int::from(p)).collect();
        // SAFETY: the array is as long as this call's counts say (the FFI contract); no other slice of it lives.
        unsafe { ffi::array_mut(periods, n, "periods") }?.copy_from_slice(&p);
        // SAFETY: the array is as long as this call's counts say (the FFI contract); no other slice of it lives.
        unsafe { ffi::array_mut(coords, n, "coords") }?.copy_from_slice(&cart.coords(me));
        Ok(())
    })
}

pub(crate) unsafe fn mpi_cart_coords(
    comm: c_int,
    rank: c_int,
    maxdims: c_int,
    coords: Out<'_, c_int>,
) -> c_int {
    call("MPI_Cart_coords", comm, |s| {
        let size = s.comm(comm)?.size() as c_int;
        let cart = s.cart(comm)?;
        let n = cart.dims.len();
        if !(0..size).contains(&rank) || usize::try_from(maxdims).map_or(true, |m| m < n) {
            return Err(MpiError::new(
                MPI_ERR_RANK,
                format!("rank {rank} (maxdims {maxdims}) on a grid of {size}"),
            ));
        }
        // SAFETY: the array is as long as this call's counts say (the FFI contract); no other slice of it lives.
        unsafe { ffi::array_mut(coords, n, "coords") }?.copy_from_slice(&cart.coords(rank));
        Ok(())
    })
}

pub(crate) unsafe fn mpi_cart_rank(comm: c_int, coords: In<'_, c_int>, rank: Out<'_, c_int>) -> c_int {
    call("MPI_Cart_rank", comm, |s| {
        let cart = s.cart(comm)?;
        // SAFETY: the array is as long as this call's counts say (the FFI contract).
        let at = unsafe { ffi::array(coords, cart.dims.len(), "coords") }?;
        let r = cart
            .rank(at)
            .ok_or_else(|| MpiError::new(MPI_ERR_ARG, format!("coordinates {at:?} off the grid")))?;
        ffi::out(rank, r, "rank")
    })
}

pub(crate) unsafe fn mpi_cart_shift(
    comm: c_int,
    direction: c_int,
    disp: c_int,
    source: Out<'_, c_int>,
    dest: Out<'_, c_int>,
) -> c_int {
    call("MPI_Cart_shift", comm, |s| {
        let me = s.comm(comm)?.me as c_int;
        let cart = s.cart(comm)?;
        let dim = usize::try_from(direction)
            .ok()
            .filter(|&d| d < cart.dims.len())
            .ok_or_else(|| MpiError::new(MPI_ERR_ARG, format!("direction {direction}")))?;
        let (from, to) = cart.shift(me, dim, disp);
        ffi::out(source, from, "source")?;
        ffi::out(dest, to, "dest")
    })
}

/// The sub-grids keeping the dimensions `remain_dims` marks: one communicator per slice.
pub(crate) unsafe fn mpi_cart_sub(comm: c_int, remain_dims: In<'_, c_int>, newcomm: Out<'_, c_int>) -> c_int {
    call("MPI_Cart_sub", comm, |s| {
        let me = s.comm(comm)?.me as c_int;
        let cart = s.cart(comm)?.clone();
        let keep: Vec<bool> =
            // SAFETY: the array is as long as this call's counts say (the FFI contract).
            unsafe { ffi::array(remain_dims, cart.dims.len(), "remain_dims") }?.iter().map(|&k| k != 0).collect();
        let coords = cart.coords(me);
        // The slice: this rank's coordinates in the dropped dimensions, as one number.
        let color = coords
            .iter()
            .zip(&cart.dims)
            .zip(&keep)
            .filter(|(_, &k)| !k)
            .fold(0, |acc, ((&c, &d), _)| acc * d + c);
        let h = crate::comm::split(s, comm, color, me)?;
        let pick = |v: &[c_int]| -> Vec<c_int> {
            v.iter().zip(&keep).filter(|(_, &k)| k).map(|(&x, _)| x).collect()
        };
        let periods = cart.periods.iter().zip(&keep).filter(|(_, &k)| k).map(|(&p, _)| p).collect();
        s.carts.insert(h, Cart { dims: pick(&cart.dims), periods });
        ffi::out(newcomm, h, "newcomm")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dims_are_balanced_and_non_increasing() {
        assert_eq!(balanced_dims(12, &[0, 0]).unwrap(), vec![4, 3]);
        assert_eq!(balanced_dims(8, &[0, 0, 0]).unwrap(), vec![2, 2, 2]);
        assert_eq!(balanced_dims(12, &[0, 3, 0]).unwrap(), vec![2, 3, 2]);
        assert_eq!(balanced_dims(7, &[0, 0]).unwrap(), vec![7, 1]);
        assert!(balanced_dims(10, &[3, 0]).is_err());
        // MPICH's choices where the greedy split differs (topo/dims5).
        assert_eq!(balanced_dims(450, &[0, 0]).unwrap(), vec![25, 18]);
        assert_eq!(balanced_dims(70416, &[0, 0, 0, 0]).unwrap(), vec![163, 9, 8, 6]);
        assert_eq!(balanced_dims(712656, &[0, 0, 0, 0, 0]).unwrap(), vec![101, 14, 9, 8, 7]);
    }

    #[test]
    fn a_periodic_ring_wraps_and_an_open_one_ends() {
        let ring = Cart { dims: vec![4], periods: vec![true] };
        assert_eq!(ring.shift(0, 0, 1), (3, 1));
        let line = Cart { dims: vec![4], periods: vec![false] };
        assert_eq!(line.shift(0, 0, 1), (MPI_PROC_NULL, 1));
        let grid = Cart { dims: vec![2, 3], periods: vec![false, true] };
        assert_eq!(grid.coords(4), vec![1, 1]);
        assert_eq!(grid.rank(&[1, -1]), Some(5));
        assert_eq!(grid.neighbours(0), vec![MPI_PROC_NULL, 3, 2, 1]);
    }
}
