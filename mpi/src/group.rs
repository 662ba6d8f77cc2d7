//! Groups (ordered sets of world ranks) and the communicators made from them.

use std::ffi::c_int;

use crate::abi::*;
use crate::errors::{MpiError, MpiResult};
use crate::ffi;
use crate::ffi::{In, Out};
use crate::state::{call, State};

fn count_of(n: c_int) -> MpiResult<usize> {
    usize::try_from(n).map_err(|_| MpiError::new(MPI_ERR_ARG, format!("count {n}")))
}

fn new_group(function: &str, out: Out<'_, c_int>, make: impl FnOnce(&State) -> MpiResult<Vec<u32>>) -> c_int {
    call(function, MPI_COMM_WORLD, |s| {
        let g = make(s)?;
        // An empty result is the predefined empty group (programs compare handles).
        let h = if g.is_empty() { MPI_GROUP_EMPTY } else { s.groups.insert(g) };
        ffi::out(out, h, "newgroup")
    })
}

/// Member `r` of `g`; MPI_ERR_RANK outside it.
fn member(g: &[u32], r: c_int) -> MpiResult<u32> {
    usize::try_from(r)
        .ok()
        .and_then(|i| g.get(i).copied())
        .ok_or_else(|| MpiError::new(MPI_ERR_RANK, format!("rank {r} outside a group of {}", g.len())))
}

pub(crate) unsafe fn mpi_comm_group(comm: c_int, group: Out<'_, c_int>) -> c_int {
    call("MPI_Comm_group", comm, |s| {
        let ranks = s.comm(comm)?.ranks.clone();
        let h = s.groups.insert(ranks);
        ffi::out(group, h, "group")
    })
}

pub(crate) unsafe fn mpi_group_size(group: c_int, size: Out<'_, c_int>) -> c_int {
    call("MPI_Group_size", MPI_COMM_WORLD, |s| ffi::out(size, s.group(group)?.len() as c_int, "size"))
}

pub(crate) unsafe fn mpi_group_rank(group: c_int, rank: Out<'_, c_int>) -> c_int {
    call("MPI_Group_rank", MPI_COMM_WORLD, |s| {
        let me = s.rt.rank();
        let r = s.group(group)?.iter().position(|&w| w == me).map_or(MPI_UNDEFINED, |i| i as c_int);
        ffi::out(rank, r, "rank")
    })
}

pub(crate) unsafe fn mpi_group_free(group: Out<'_, c_int>) -> c_int {
    call("MPI_Group_free", MPI_COMM_WORLD, |s| {
        let h = ffi::read(group, "group")?;
        if h != MPI_GROUP_EMPTY {
            s.groups
                .remove(h)
                .ok_or_else(|| MpiError::new(MPI_ERR_GROUP, format!("invalid group {h:#x}")))?;
        }
        ffi::out(group, MPI_GROUP_NULL, "group")
    })
}

pub(crate) unsafe fn mpi_group_incl(
    group: c_int,
    n: c_int,
    ranks: In<'_, c_int>,
    newgroup: Out<'_, c_int>,
) -> c_int {
    new_group("MPI_Group_incl", newgroup, |s| {
        let g = s.group(group)?;
        // SAFETY: the array is as long as this call's counts say (the FFI contract).
        unsafe { ffi::array(ranks, count_of(n)?, "ranks") }?.iter().map(|&r| member(g, r)).collect()
    })
}

pub(crate) unsafe fn mpi_group_excl(
    group: c_int,
    n: c_int,
    ranks: In<'_, c_int>,
    newgroup: Out<'_, c_int>,
) -> c_int {
    new_group("MPI_Group_excl", newgroup, |s| {
        let g = s.group(group)?;
        // SAFETY: the array is as long as this call's counts say (the FFI contract).
        let out: Vec<c_int> = unsafe { ffi::array(ranks, count_of(n)?, "ranks") }?.to_vec();
        for &r in &out {
            member(g, r)?;
        }
        Ok(g.iter().enumerate().filter(|(i, _)| !out.contains(&(*i as c_int))).map(|(_, &w)| w).collect())
    })
}

/// The ranks `[first, last, stride]` triples name, in order.
fn ranges(g: &[u32], n: c_int, triples: In<'_, [c_int; 3]>) -> MpiResult<Vec<c_int>> {
    let mut out = Vec::new();
    // SAFETY: the array is as long as this call's counts say (the FFI contract).
    for &[first, last, stride] in unsafe { ffi::array(triples, count_of(n)?, "ranges") }? {
        if stride == 0 {
            return Err(MpiError::new(MPI_ERR_ARG, "a range with stride 0"));
        }
        let mut r = first;
        while (stride > 0 && r <= last) || (stride < 0 && r >= last) {
            member(g, r)?;
            out.push(r);
            r += stride;
        }
    }
    Ok(out)
}

pub(crate) unsafe fn mpi_group_range_incl(
    group: c_int,
    n: c_int,
    triples: In<'_, [c_int; 3]>,
    newgroup: Out<'_, c_int>,
) -> c_int {
    new_group("MPI_Group_range_incl", newgroup, |s| {
        let g = s.group(group)?;
        ranges(g, n, triples)?.iter().map(|&r| member(g, r)).collect()
    })
}

pub(crate) unsafe fn mpi_group_range_excl(
    group: c_int,
    n: c_int,
    triples: In<'_, [c_int; 3]>,
    newgroup: Out<'_, c_int>,
) -> c_int {
    new_group("MPI_Group_range_excl", newgroup, |s| {
        let g = s.group(group)?;
        let out = ranges(g, n, triples)?;
        Ok(g.iter().enumerate().filter(|(i, _)| !out.contains(&(*i as c_int))).map(|(_, &w)| w).collect())
    })
}

pub(crate) unsafe fn mpi_group_union(a: c_int, b: c_int, newgroup: Out<'_, c_int>) -> c_int {
    new_group("MPI_Group_union", newgroup, |s| {
        let mut g = s.group(a)?.clone();
        g.extend(s.group(b)?.iter().filter(|w| !s.group(a).is_ok_and(|x| x.contains(w))));
        Ok(g)
    })
}

pub(crate) unsafe fn mpi_group_intersection(a: c_int, b: c_int, newgroup: Out<'_, c_int>) -> c_int {
    new_group("MPI_Group_intersection", newgroup, |s| {
        let other = s.group(b)?;
        Ok(s.group(a)?.iter().copied().filter(|w| other.contains(w)).collect())
    })
}

pub(crate) unsafe fn mpi_group_difference(a: c_int, b: c_int, newgroup: Out<'_, c_int>) -> c_int {
    new_group("MPI_Group_difference", newgroup, |s| {
        let other = s.group(b)?;
        Ok(s.group(a)?.iter().copied().filter(|w| !other.contains(w)).collect())
    })
}

pub(crate) unsafe fn mpi_group_translate_ranks(
    a: c_int,
    n: c_int,
    ranks: In<'_, c_int>,
    b: c_int,
    out: Out<'_, c_int>,
) -> c_int {
    call("MPI_Group_translate_ranks", MPI_COMM_WORLD, |s| {
        let n = count_of(n)?;
        let (ga, gb) = (s.group(a)?, s.group(b)?);
        // SAFETY: the array is as long as this call's counts say (the FFI contract); no other slice of it lives.
        let translated = unsafe { ffi::array_mut(out, n, "ranks2") }?;
        // SAFETY: the array is as long as this call's counts say (the FFI contract).
        for (i, &r) in unsafe { ffi::array(ranks, n, "ranks1") }?.iter().enumerate() {
            translated[i] = if r == MPI_PROC_NULL {
                MPI_PROC_NULL
            } else {
                let w = member(ga, r)?;
                gb.iter().position(|&x| x == w).map_or(MPI_UNDEFINED, |i| i as c_int)
            };
        }
        Ok(())
    })
}

pub(crate) unsafe fn mpi_group_compare(a: c_int, b: c_int, result: Out<'_, c_int>) -> c_int {
    call("MPI_Group_compare", MPI_COMM_WORLD, |s| {
        let (ga, gb) = (s.group(a)?, s.group(b)?);
        let r = if ga == gb {
            MPI_IDENT
        } else if ga.len() == gb.len() && ga.iter().all(|w| gb.contains(w)) {
            MPI_SIMILAR
        } else {
            MPI_UNEQUAL
        };
        ffi::out(result, r, "result")
    })
}

/// A communicator of `group`'s members (collective on `comm`); MPI_COMM_NULL outside it.
fn comm_of_group(s: &mut State, comm: c_int, group: &[u32]) -> MpiResult<c_int> {
    let context = s.new_context(comm)?;
    if !group.contains(&s.rt.rank()) {
        return Ok(MPI_COMM_NULL);
    }
    Ok(s.derive(comm, group.to_vec(), context))
}

pub(crate) unsafe fn mpi_comm_create(comm: c_int, group: c_int, newcomm: Out<'_, c_int>) -> c_int {
    call("MPI_Comm_create", comm, |s| {
        let g = s.group(group)?.clone();
        if s.comm(comm)?.remote.is_some() {
            let h = s.create_inter(comm, g)?;
            return ffi::out(newcomm, h, "newcomm");
        }
        let h = comm_of_group(s, comm, &g)?;
        ffi::out(newcomm, h, "newcomm")
    })
}

/// Collective over the group's members only: they agree on a context among themselves.
pub(crate) unsafe fn mpi_comm_create_group(
    comm: c_int,
    group: c_int,
    _tag: c_int,
    newcomm: Out<'_, c_int>,
) -> c_int {
    call("MPI_Comm_create_group", comm, |s| {
        let g = s.group(group)?.clone();
        if !g.contains(&s.rt.rank()) {
            return ffi::out(newcomm, MPI_COMM_NULL, "newcomm");
        }
        // A temporary communicator of the members carries the agreement.
        let me = g.iter().position(|&w| w == s.rt.rank()).unwrap_or(0) as u32;
        let parent_context = s.comm(comm)?.context;
        let scratch = s.comms.insert(crate::comm::Comm {
            context: parent_context,
            ranks: g.clone(),
            me,
            errhandler: MPI_ERRORS_ARE_FATAL,
            name: String::new(),
            remote: None,
        });
        let context = s.new_context(scratch);
        s.comms.remove(scratch);
        let h = s.derive(comm, g, context?);
        ffi::out(newcomm, h, "newcomm")
    })
}
