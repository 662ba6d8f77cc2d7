//! The neighbourhood collectives (`MPI_Neighbor_allgather(v)`, `_alltoall(v,w)`; their
//! nonblocking and persistent forms derive from these, build/derived.rs) on Cartesian, graph
//! and distributed-graph topologies: block k goes to destination k, block k comes from source k.

use std::ffi::{c_int, c_long};

use reverb_transport::Source;

use crate::abi::*;
use crate::coll::count_of;
use crate::datatype::{offset, Datatype};
use crate::errors::MpiResult;
use crate::ffi;
use crate::ffi::{In, UserBuf};
use crate::frag;
use crate::state::{call, State};
use crate::tags;

/// Who this rank exchanges with: destinations with the tag each message carries, sources with
/// the tag each receive expects. On a grid, the block sent to the neighbour above is that
/// neighbour's block from below (k ^ 1), which sorts out a neighbour that is both (2 ranks,
/// periodic). In a graph the j-th edge to a rank meets that rank's j-th edge from this one.
struct Neighbourhood {
    dests: Vec<(c_int, c_int)>,
    sources: Vec<(c_int, c_int)>,
}

/// Tags by occurrence: the j-th appearance of a rank in `ranks` gets j + 1.
fn by_occurrence(ranks: &[c_int]) -> Vec<(c_int, c_int)> {
    ranks
        .iter()
        .enumerate()
        .map(|(k, &r)| (r, ranks[..k].iter().filter(|&&x| x == r).count() as c_int + 1))
        .collect()
}

impl State {
    fn neighbourhood(&self, comm: c_int) -> MpiResult<Neighbourhood> {
        let me = self.comm(comm)?.me;
        if let Ok(cart) = self.cart(comm) {
            let n = cart.neighbours(me as c_int);
            let dests = n.iter().enumerate().map(|(k, &r)| (r, (k ^ 1) as c_int + 1)).collect();
            let sources = n.iter().enumerate().map(|(k, &r)| (r, k as c_int + 1)).collect();
            return Ok(Neighbourhood { dests, sources });
        }
        let (sources, dests) = self.graph(comm)?.adjacency(me as usize);
        Ok(Neighbourhood { dests: by_occurrence(&dests), sources: by_occurrence(&sources) })
    }

    /// Sends `outgoing[k]` to destination k and unpacks what source k sent into `incoming[k]`
    /// (buffer, count, datatype); MPI_PROC_NULL neighbours are skipped.
    fn neighbour_exchange(
        &mut self,
        comm: c_int,
        outgoing: impl Fn(&mut State, usize) -> MpiResult<Vec<u8>>,
        incoming: impl Fn(&State, usize) -> MpiResult<(UserBuf, usize, Datatype)>,
    ) -> MpiResult<()> {
        let hood = self.neighbourhood(comm)?;
        let c = self.comm(comm)?;
        let (context, peers, seq) = (c.context, c.ranks.clone(), self.coll_seq);
        for (k, &(r, tag)) in hood.dests.iter().enumerate().filter(|(_, d)| d.0 != MPI_PROC_NULL) {
            let bytes = outgoing(self, k)?;
            frag::send(&mut self.rt, peers[r as usize], tags::coll(context, seq, tag as u32), &bytes)?;
        }
        for (k, &(r, tag)) in hood.sources.iter().enumerate().filter(|(_, d)| d.0 != MPI_PROC_NULL) {
            let want = tags::coll_match(context, seq, tag as u32);
            let msg = crate::coll::coll_recv(self, Source::Rank(peers[r as usize]), want)?;
            let (buf, n, t) = incoming(self, k)?;
            // SAFETY: MPI's buffer rule: the program's receive buffer spans these elements of
            // this datatype, writable and left alone until the call returns.
            unsafe { t.unpack(&msg.payload, buf, n) }?;
        }
        Ok(())
    }

    pub(crate) fn degrees(&self, comm: c_int) -> MpiResult<(usize, usize)> {
        let h = self.neighbourhood(comm)?;
        Ok((h.sources.len(), h.dests.len()))
    }
}

/// `count` elements of `t` at `buf`, as bytes to send.
fn packed(buf: UserBuf, count: usize, t: &Datatype) -> MpiResult<Vec<u8>> {
    // SAFETY: MPI's buffer rule: the program's send buffer spans these elements of this
    // datatype, readable until the call returns.
    unsafe { t.pack(&buf, count) }.map(|b| b.into_owned())
}

pub(crate) unsafe fn mpi_neighbor_allgather(
    sendbuf: UserBuf,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcount: c_int,
    recvtype: c_int,
    comm: c_int,
) -> c_int {
    call("MPI_Neighbor_allgather", comm, |s| {
        let mine = packed(sendbuf, count_of(sendcount)?, &s.datatype(sendtype)?)?;
        let (rt, rc) = (s.datatype(recvtype)?, count_of(recvcount)?);
        let block = |k: usize| offset(recvbuf, k as isize * rc as isize * rt.extent);
        s.neighbour_exchange(comm, |_, _| Ok(mine.clone()), |_, k| Ok((block(k), rc, rt.clone())))
    })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_neighbor_allgatherv(
    sendbuf: UserBuf,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcounts: In<'_, c_int>,
    displs: In<'_, c_int>,
    recvtype: c_int,
    comm: c_int,
) -> c_int {
    call("MPI_Neighbor_allgatherv", comm, |s| {
        let mine = packed(sendbuf, count_of(sendcount)?, &s.datatype(sendtype)?)?;
        let rt = s.datatype(recvtype)?;
        let (indegree, _) = s.degrees(comm)?;
        // SAFETY: the arrays have an entry per source (the FFI contract).
        let (counts, displs) = unsafe {
            (ffi::array(recvcounts, indegree, "recvcounts")?, ffi::array(displs, indegree, "displs")?)
        };
        s.neighbour_exchange(
            comm,
            |_, _| Ok(mine.clone()),
            |_, k| Ok((offset(recvbuf, displs[k] as isize * rt.extent), count_of(counts[k])?, rt.clone())),
        )
    })
}

pub(crate) unsafe fn mpi_neighbor_alltoall(
    sendbuf: UserBuf,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcount: c_int,
    recvtype: c_int,
    comm: c_int,
) -> c_int {
    call("MPI_Neighbor_alltoall", comm, |s| {
        let (st, sc) = (s.datatype(sendtype)?, count_of(sendcount)?);
        let (rt, rc) = (s.datatype(recvtype)?, count_of(recvcount)?);
        s.neighbour_exchange(
            comm,
            |_, k| packed(offset(sendbuf, k as isize * sc as isize * st.extent), sc, &st),
            |_, k| Ok((offset(recvbuf, k as isize * rc as isize * rt.extent), rc, rt.clone())),
        )
    })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_neighbor_alltoallv(
    sendbuf: UserBuf,
    sendcounts: In<'_, c_int>,
    sdispls: In<'_, c_int>,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcounts: In<'_, c_int>,
    rdispls: In<'_, c_int>,
    recvtype: c_int,
    comm: c_int,
) -> c_int {
    call("MPI_Neighbor_alltoallv", comm, |s| {
        let (st, rt) = (s.datatype(sendtype)?, s.datatype(recvtype)?);
        let (ins, outs) = s.degrees(comm)?;
        // SAFETY: the arrays have an entry per neighbour (the FFI contract).
        let (sc, sd) =
            unsafe { (ffi::array(sendcounts, outs, "sendcounts")?, ffi::array(sdispls, outs, "sdispls")?) };
        // SAFETY: as above.
        let (rc, rd) =
            unsafe { (ffi::array(recvcounts, ins, "recvcounts")?, ffi::array(rdispls, ins, "rdispls")?) };
        s.neighbour_exchange(
            comm,
            |_, k| packed(offset(sendbuf, sd[k] as isize * st.extent), count_of(sc[k])?, &st),
            |_, k| Ok((offset(recvbuf, rd[k] as isize * rt.extent), count_of(rc[k])?, rt.clone())),
        )
    })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_neighbor_alltoallw(
    sendbuf: UserBuf,
    sendcounts: In<'_, c_int>,
    sdispls: In<'_, c_long>,
    sendtypes: In<'_, c_int>,
    recvbuf: UserBuf,
    recvcounts: In<'_, c_int>,
    rdispls: In<'_, c_long>,
    recvtypes: In<'_, c_int>,
    comm: c_int,
) -> c_int {
    call("MPI_Neighbor_alltoallw", comm, |s| {
        let (ins, outs) = s.degrees(comm)?;
        // SAFETY: the arrays have an entry per neighbour (the FFI contract).
        let (sc, sd, stypes) = unsafe {
            (
                ffi::array(sendcounts, outs, "sendcounts")?,
                ffi::array(sdispls, outs, "sdispls")?,
                ffi::array(sendtypes, outs, "sendtypes")?,
            )
        };
        // SAFETY: as above.
        let (rc, rd, rtypes) = unsafe {
            (
                ffi::array(recvcounts, ins, "recvcounts")?,
                ffi::array(rdispls, ins, "rdispls")?,
                ffi::array(recvtypes, ins, "recvtypes")?,
            )
        };
        s.neighbour_exchange(
            comm,
            |s, k| packed(offset(sendbuf, sd[k] as isize), count_of(sc[k])?, &s.datatype(stypes[k])?),
            |s, k| Ok((offset(recvbuf, rd[k] as isize), count_of(rc[k])?, s.datatype(rtypes[k])?)),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_edges_are_told_apart_by_occurrence() {
        assert_eq!(by_occurrence(&[2, 1, 2, 2]), vec![(2, 1), (1, 1), (2, 2), (2, 3)]);
    }
}
