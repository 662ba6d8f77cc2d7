//! The C entry points of the gathers and scatters, and the layout of their pieces.

use std::ffi::c_int;

use super::{allgather_blocks, allgather_in_place, count_of, gather, in_place, Group};
use crate::abi::*;
use crate::datatype::{offset, Datatype};
use crate::errors::MpiResult;
use crate::ffi;
use crate::ffi::{In, UserBuf};
use crate::intercomm::{self, Inter};
use crate::state::{call, State};

/// The layout of one rank's piece in a gather's or scatter's buffer.
pub(crate) struct Pieces {
    pub(crate) counts: Vec<usize>,
    /// Displacements in elements of the type.
    pub(crate) displs: Vec<isize>,
    /// Every piece alike, one after another (MPI_Allgather's, not the v forms').
    pub(crate) uniform: bool,
}

impl Pieces {
    pub(crate) fn uniform(n: usize, count: usize) -> Pieces {
        Pieces {
            counts: vec![count; n],
            displs: (0..n).map(|i| (i * count) as isize).collect(),
            uniform: true,
        }
    }

    pub(crate) fn varying(n: usize, counts: In<'_, c_int>, displs: In<'_, c_int>) -> MpiResult<Pieces> {
        let counts =
            // SAFETY: the array is as long as this call's counts say (the FFI contract).
            unsafe { ffi::array(counts, n, "counts") }?.iter().map(|&c| count_of(c)).collect::<MpiResult<_>>()?;
        // SAFETY: the array is as long as this call's counts say (the FFI contract).
        let displs = unsafe { ffi::array(displs, n, "displs") }?.iter().map(|&d| d as isize).collect();
        Ok(Pieces { counts, displs, uniform: false })
    }

    pub(crate) fn at(&self, base: UserBuf, dt: &Datatype, i: usize) -> UserBuf {
        offset(base, self.displs[i] * dt.extent)
    }
}

#[allow(clippy::too_many_arguments)]
fn gather_call(
    s: &mut State,
    sendbuf: UserBuf,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: UserBuf,
    pieces: impl FnOnce(usize) -> MpiResult<Pieces>,
    recvtype: c_int,
    root: Option<c_int>,
    comm: c_int,
) -> MpiResult<()> {
    if let Some(inter) = Inter::of(s, comm)? {
        let (layout, rt) = (pieces(inter.remote.len())?, s.datatype(recvtype)?);
        let sending = !matches!(root, Some(MPI_ROOT) | Some(MPI_PROC_NULL));
        let mine = if sending {
            // SAFETY: MPI's buffer rule: the program's send buffer spans these elements of this datatype, readable until the call returns or its request completes.
            unsafe { s.datatype(sendtype)?.pack(&sendbuf, count_of(sendcount)?) }?.into_owned()
        } else {
            Vec::new()
        };
        return intercomm::gather(s, &inter, &mine, (recvbuf, &layout, &rt), root);
    }
    let g = Group::of(s, comm)?;
    let root_rank = match root {
        Some(r) => g.check_root(r)?,
        None => 0,
    };
    if root.is_some() && g.me != root_rank {
        // Only the root's receive arguments count (MPI_DATATYPE_NULL elsewhere is fine).
        // SAFETY: MPI's buffer rule: the program's send buffer spans these elements of this datatype, readable until the call returns or its request completes.
        let mine = unsafe { s.datatype(sendtype)?.pack(&sendbuf, count_of(sendcount)?) }?.into_owned();
        return gather(s, &g, root_rank, &mine).map(|_| ());
    }
    let layout = pieces(g.size())?;
    let rt = s.datatype(recvtype)?;
    if root.is_none() && rt.is_contiguous() {
        return allgather_direct(s, &g, (sendbuf, sendcount, sendtype), (recvbuf, &layout, &rt));
    }
    let mine = if in_place(sendbuf) {
        // SAFETY: MPI's buffer rule: the program's send buffer spans these elements of this datatype, readable until the call returns or its request completes.
        unsafe { rt.pack(&layout.at(recvbuf, &rt, g.me), layout.counts[g.me]) }?.into_owned()
    } else {
        // SAFETY: MPI's buffer rule: the program's send buffer spans these elements of this datatype, readable until the call returns or its request completes.
        unsafe { s.datatype(sendtype)?.pack(&sendbuf, count_of(sendcount)?) }?.into_owned()
    };
    let all = match root {
        Some(_) => gather(s, &g, root_rank, &mine)?,
        None => Some(allgather_blocks(
            s,
            &g,
            &mine,
            layout.counts.iter().sum::<usize>() * rt.size,
            layout.uniform,
        )?),
    };
    let Some(all) = all else { return Ok(()) };
    for (i, bytes) in all.iter().enumerate() {
        // SAFETY: MPI's buffer rule: the program's receive buffer spans these elements of this datatype, writable and left alone until the call returns or its request completes.
        unsafe { rt.unpack(bytes, layout.at(recvbuf, &rt, i), layout.counts[i]) }?;
    }
    Ok(())
}

/// MPI_Allgather(v) into a contiguous receive datatype: the blocks exchanged in the receive
/// buffer itself, this rank's taken from the send buffer (unless `MPI_IN_PLACE`).
fn allgather_direct(
    s: &mut State,
    g: &Group,
    (sendbuf, sendcount, sendtype): (UserBuf, c_int, c_int),
    (recvbuf, layout, rt): (UserBuf, &Pieces, &Datatype),
) -> MpiResult<()> {
    let blocks: Vec<(UserBuf, usize)> =
        (0..g.size()).map(|i| (layout.at(recvbuf, rt, i), rt.bytes_for(layout.counts[i]))).collect();
    if in_place(sendbuf) {
        return allgather_in_place(s, g, &blocks, None, layout.uniform);
    }
    // SAFETY: MPI's buffer rule: the program's send buffer spans these elements of this datatype, readable until the call returns or its request completes.
    let mine = unsafe { s.datatype(sendtype)?.pack(&sendbuf, count_of(sendcount)?) }?;
    let (at, len) = blocks[g.me];
    if mine.len() != len {
        return Err(g.too_long(mine.len(), len));
    }
    let (a, b) = (at.addr(), mine.as_ptr() as usize);
    if len > 0 && a < b.saturating_add(len) && b < a.saturating_add(len) {
        return Err(super::api::aliased());
    }
    // Placed in the receive buffer by `allgather_in_place`, after its first round.
    allgather_in_place(s, g, &blocks, Some(&mine), layout.uniform)
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_gather(
    sendbuf: UserBuf,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcount: c_int,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
) -> c_int {
    call("MPI_Gather", comm, |s| {
        let pieces = |n| Ok(Pieces::uniform(n, count_of(recvcount).unwrap_or(0)));
        gather_call(s, sendbuf, sendcount, sendtype, recvbuf, pieces, recvtype, Some(root), comm)
    })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_gatherv(
    sendbuf: UserBuf,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcounts: In<'_, c_int>,
    displs: In<'_, c_int>,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
) -> c_int {
    call("MPI_Gatherv", comm, |s| {
        let c = s.comm(comm)?;
        // Across an intercommunicator the root says MPI_ROOT; `root` elsewhere names a remote rank.
        let at_root = root == MPI_ROOT || (c.remote.is_none() && c.me as c_int == root);
        let pieces =
            |n| if at_root { Pieces::varying(n, recvcounts, displs) } else { Ok(Pieces::uniform(n, 0)) };
        gather_call(s, sendbuf, sendcount, sendtype, recvbuf, pieces, recvtype, Some(root), comm)
    })
}

pub(crate) unsafe fn mpi_allgather(
    sendbuf: UserBuf,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcount: c_int,
    recvtype: c_int,
    comm: c_int,
) -> c_int {
    call("MPI_Allgather", comm, |s| {
        let pieces = |n| Ok(Pieces::uniform(n, count_of(recvcount)?));
        gather_call(s, sendbuf, sendcount, sendtype, recvbuf, pieces, recvtype, None, comm)
    })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_allgatherv(
    sendbuf: UserBuf,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcounts: In<'_, c_int>,
    displs: In<'_, c_int>,
    recvtype: c_int,
    comm: c_int,
) -> c_int {
    call("MPI_Allgatherv", comm, |s| {
        let pieces = |n| Pieces::varying(n, recvcounts, displs);
        gather_call(s, sendbuf, sendcount, sendtype, recvbuf, pieces, recvtype, None, comm)
    })
}

#[allow(clippy::too_many_arguments)]
fn scatter_call(
    s: &mut State,
    sendbuf: UserBuf,
    pieces: impl FnOnce(usize) -> MpiResult<Pieces>,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcount: c_int,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
) -> MpiResult<()> {
    if let Some(inter) = Inter::of(s, comm)? {
        let layout = if root == MPI_ROOT { pieces(inter.remote.len())? } else { Pieces::uniform(0, 0) };
        let (st, rt) = (
            if root == MPI_ROOT { s.datatype(sendtype)? } else { s.datatype(recvtype)? },
            s.datatype(recvtype)?,
        );
        let count = if root == MPI_ROOT { 0 } else { count_of(recvcount)? };
        return intercomm::scatter(s, &inter, (sendbuf, &layout, &st), (recvbuf, count, &rt), root);
    }
    let g = Group::of(s, comm)?;
    let root = g.check_root(root)?;
    let mine = if g.me == root {
        let layout = pieces(g.size())?;
        let st = s.datatype(sendtype)?;
        let mut own = Vec::new();
        for r in 0..g.size() {
            let piece = layout.at(sendbuf, &st, r);
            // SAFETY: MPI's buffer rule: the program's send buffer spans these elements of this datatype, readable until the call returns or its request completes.
            let bytes = unsafe { st.pack(&piece, layout.counts[r]) }?;
            if r == root {
                own = bytes.into_owned();
            } else {
                g.send(s, r, &bytes)?;
            }
        }
        // MPI_IN_PLACE at the root: its piece stays where it is.
        if in_place(recvbuf) {
            return Ok(());
        }
        own
    } else {
        g.recv(s, root)?
    };
    // SAFETY: MPI's buffer rule: the program's receive buffer spans these elements of this datatype, writable and left alone until the call returns or its request completes.
    unsafe { s.datatype(recvtype)?.unpack(&mine, recvbuf, count_of(recvcount)?) }
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_scatter(
    sendbuf: UserBuf,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcount: c_int,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
) -> c_int {
    call("MPI_Scatter", comm, |s| {
        let pieces = |n| Ok(Pieces::uniform(n, count_of(sendcount)?));
        scatter_call(s, sendbuf, pieces, sendtype, recvbuf, recvcount, recvtype, root, comm)
    })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_scatterv(
    sendbuf: UserBuf,
    sendcounts: In<'_, c_int>,
    displs: In<'_, c_int>,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcount: c_int,
    recvtype: c_int,
    root: c_int,
    comm: c_int,
) -> c_int {
    call("MPI_Scatterv", comm, |s| {
        let pieces = |n| Pieces::varying(n, sendcounts, displs);
        scatter_call(s, sendbuf, pieces, sendtype, recvbuf, recvcount, recvtype, root, comm)
    })
}
