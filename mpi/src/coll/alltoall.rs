//! All-to-alls: Bruck's log n rounds for small blocks of `MPI_Alltoall`, pairwise exchange
//! otherwise (`tuning::alltoall`), and their C entry points.

use std::ffi::c_int;

use reverb_transport::Source;

use super::frame::{frame, unframe};
use super::tuning::{self, Alltoall};
use super::{count_of, in_place, Group, Pieces};
use crate::datatype::{offset, Datatype};
use crate::errors::MpiResult;
use crate::ffi;
use crate::ffi::{In, UserBuf};
use crate::frag;
use crate::intercomm::{self, Inter};
use crate::state::{call, State};
use crate::tags;

#[allow(clippy::too_many_arguments)]
fn alltoall_call(
    s: &mut State,
    sendbuf: UserBuf,
    send: impl FnOnce(usize) -> MpiResult<Pieces>,
    sendtype: c_int,
    recvbuf: UserBuf,
    recv: impl FnOnce(usize) -> MpiResult<Pieces>,
    recvtype: c_int,
    comm: c_int,
    uniform: bool,
) -> MpiResult<()> {
    if let Some(inter) = Inter::of(s, comm)? {
        let n = inter.remote.len();
        let (st, sl, rt, rl) = (s.datatype(sendtype)?, send(n)?, s.datatype(recvtype)?, recv(n)?);
        return intercomm::alltoall(s, &inter, (sendbuf, &sl, &st), (recvbuf, &rl, &rt));
    }
    let g = Group::of(s, comm)?;
    let n = g.size();
    let (rt, rl) = (s.datatype(recvtype)?, recv(n)?);
    let direct = !in_place(sendbuf) && uniform_or_pairwise(uniform, &rt, &rl, n) == Alltoall::Pairwise;
    if direct {
        let st = s.datatype(sendtype)?;
        if st.is_contiguous() && rt.is_contiguous() {
            let sl = send(n)?;
            return pairwise_direct(s, &g, (sendbuf, &sl, &st), (recvbuf, &rl, &rt));
        }
    }
    let (st, sl, src) = if in_place(sendbuf) {
        (
            rt.clone(),
            Pieces { counts: rl.counts.clone(), displs: rl.displs.clone(), uniform: rl.uniform },
            recvbuf,
        )
    } else {
        (s.datatype(sendtype)?, send(n)?, sendbuf)
    };
    // Every piece is taken before any is written: MPI_IN_PLACE reads and writes one buffer.
    let outgoing = (0..n)
        // SAFETY: MPI's buffer rule: the program's send buffer spans these elements of this datatype, readable until the call returns or its request completes.
        .map(|j| unsafe { st.pack(&sl.at(src, &st, j), sl.counts[j]) }.map(|b| b.into_owned()))
        .collect::<MpiResult<Vec<_>>>()?;
    let incoming = match uniform_or_pairwise(uniform, &rt, &rl, n) {
        Alltoall::Bruck => bruck(s, &g, outgoing)?,
        Alltoall::Pairwise => pairwise(s, &g, outgoing)?,
    };
    for (from, bytes) in incoming.iter().enumerate() {
        // SAFETY: MPI's buffer rule: the program's receive buffer spans these elements of this datatype, writable and left alone until the call returns or its request completes.
        unsafe { rt.unpack(bytes, rl.at(recvbuf, &rt, from), rl.counts[from]) }?;
    }
    Ok(())
}

/// The algorithm: MPI_Alltoall's by its one block size (the receive side's, alike at every
/// rank), pairwise for the v and w forms.
fn uniform_or_pairwise(uniform: bool, rt: &Datatype, rl: &Pieces, n: usize) -> Alltoall {
    match rl.counts.first() {
        Some(&count) if uniform => tuning::alltoall(rt.bytes_for(count), n),
        _ => Alltoall::Pairwise,
    }
}

/// `pairwise` between the program's buffers, for contiguous datatypes and separate send and
/// receive buffers: each block is sent from where it is and received where it goes (one copy
/// between two ranks on shared memory, where a large one is lent).
fn pairwise_direct(
    s: &mut State,
    g: &Group,
    (sendbuf, sl, st): (UserBuf, &Pieces, &Datatype),
    (recvbuf, rl, rt): (UserBuf, &Pieces, &Datatype),
) -> MpiResult<()> {
    let n = g.size();
    for step in 0..n {
        let (to, from) = ((g.me + step) % n, (g.me + n - step) % n);
        let (out, into) = (sl.at(sendbuf, st, to), rl.at(recvbuf, rt, from));
        let (out_len, into_len) = (st.bytes_for(sl.counts[to]), rt.bytes_for(rl.counts[from]));
        if out.overlaps(out_len, into, into_len) {
            return Err(super::api::aliased());
        }
        // SAFETY: MPI's buffer rule: the program's send buffer spans these elements of this
        // contiguous datatype, readable until the call returns, and its receive buffer these,
        // writable and left alone; the two do not overlap (checked above).
        let (out, into) = unsafe { (out.bytes(out_len)?, into.bytes_mut(into_len)?) };
        if step == 0 {
            let room = into.len();
            into.get_mut(..out.len()).ok_or_else(|| g.too_long(out.len(), room))?.copy_from_slice(out);
        } else {
            g.shift_apart(s, to, from, out, into)?;
        }
    }
    Ok(())
}

/// Round k, each rank sends rank me + k what it is owed (its pieces for me + k), and takes
/// rank me - k's: n - 1 messages, the pieces crossing whole.
fn pairwise(s: &mut State, g: &Group, mut outgoing: Vec<Vec<u8>>) -> MpiResult<Vec<Vec<u8>>> {
    let n = g.size();
    let mut incoming = vec![Vec::new(); n];
    incoming[g.me] = std::mem::take(&mut outgoing[g.me]);
    for step in 1..n {
        let (to, from) = ((g.me + step) % n, (g.me + n - step) % n);
        incoming[from] = g.shift(s, to, from, &outgoing[to])?;
    }
    Ok(incoming)
}

/// Bruck: slot j holds the piece bound for rank me + j; round k (k = 1, 2, 4, ...) every
/// slot whose index has bit k moves k ranks on. After ceil(log2 n) rounds slot j holds rank
/// me - j's piece for this rank.
fn bruck(s: &mut State, g: &Group, mut outgoing: Vec<Vec<u8>>) -> MpiResult<Vec<Vec<u8>>> {
    let n = g.size();
    let mut slots: Vec<Vec<u8>> = (0..n).map(|j| std::mem::take(&mut outgoing[(g.me + j) % n])).collect();
    let mut k = 1;
    while k < n {
        let moving: Vec<usize> = (0..n).filter(|j| j & k != 0).collect();
        let out: Vec<Vec<u8>> = moving.iter().map(|&j| std::mem::take(&mut slots[j])).collect();
        let got = g.shift(s, (g.me + k) % n, (g.me + n - k) % n, &frame(&out))?;
        for (&j, piece) in moving.iter().zip(unframe(&got, moving.len())?) {
            slots[j] = piece;
        }
        k <<= 1;
    }
    Ok((0..n).map(|from| std::mem::take(&mut slots[(g.me + n - from) % n])).collect())
}

pub(crate) unsafe fn mpi_alltoall(
    sendbuf: UserBuf,
    sendcount: c_int,
    sendtype: c_int,
    recvbuf: UserBuf,
    recvcount: c_int,
    recvtype: c_int,
    comm: c_int,
) -> c_int {
    call("MPI_Alltoall", comm, |s| {
        let send = |n| Ok(Pieces::uniform(n, count_of(sendcount)?));
        let recv = |n| Ok(Pieces::uniform(n, count_of(recvcount)?));
        alltoall_call(s, sendbuf, send, sendtype, recvbuf, recv, recvtype, comm, true)
    })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_alltoallv(
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
    call("MPI_Alltoallv", comm, |s| {
        let send = |n| Pieces::varying(n, sendcounts, sdispls);
        let recv = |n| Pieces::varying(n, recvcounts, rdispls);
        alltoall_call(s, sendbuf, send, sendtype, recvbuf, recv, recvtype, comm, false)
    })
}

/// Alltoallw: each peer's piece with its own count, byte displacement and datatype. Peers are
/// the communicator's members (the remote group across an intercommunicator).
#[allow(clippy::too_many_arguments)]
fn alltoallw(
    s: &mut State,
    sendbuf: UserBuf,
    send: (In<'_, c_int>, In<'_, c_int>, In<'_, c_int>),
    recvbuf: UserBuf,
    recv: (In<'_, c_int>, In<'_, c_int>, In<'_, c_int>),
    comm: c_int,
) -> MpiResult<()> {
    let c = s.comm(comm)?;
    let (peers, context) = (c.peers().to_vec(), c.context);
    let me = if c.remote.is_none() { Some(c.me as usize) } else { None };
    let n = peers.len();
    let counts = |p: In<'_, c_int>, what| -> MpiResult<Vec<usize>> {
        // SAFETY: the array is as long as this call's counts say (the FFI contract).
        unsafe { ffi::array(p, n, what) }?.iter().map(|&c| count_of(c)).collect()
    };
    let displs = |p: In<'_, c_int>, what| -> MpiResult<Vec<isize>> {
        // SAFETY: the array is as long as this call's counts say (the FFI contract).
        Ok(unsafe { ffi::array(p, n, what) }?.iter().map(|&d| d as isize).collect())
    };
    let types = |p: In<'_, c_int>, what| -> MpiResult<Vec<Datatype>> {
        // SAFETY: the array is as long as this call's counts say (the FFI contract).
        unsafe { ffi::array(p, n, what) }?.iter().map(|&t| s.datatype(t)).collect()
    };
    let (rc, rd, rt) =
        (counts(recv.0, "recvcounts")?, displs(recv.1, "rdispls")?, types(recv.2, "recvtypes")?);
    // MPI_IN_PLACE: the receive side's layout is the send side's too; every piece is packed
    // before any is written.
    let (sendbuf, (sc, sd, st)) = if in_place(sendbuf) {
        (recvbuf, (rc.clone(), rd.clone(), rt.clone()))
    } else {
        (sendbuf, (counts(send.0, "sendcounts")?, displs(send.1, "sdispls")?, types(send.2, "sendtypes")?))
    };
    let (tag, seq) = (tags::coll(context, s.coll_seq, 0), s.coll_seq);
    let outgoing = (0..n)
        // SAFETY: MPI's buffer rule: the program's send buffer spans these elements of this datatype, readable until the call returns or its request completes.
        .map(|j| unsafe { st[j].pack(&offset(sendbuf, sd[j]), sc[j]) }.map(|b| b.into_owned()))
        .collect::<MpiResult<Vec<_>>>()?;
    let mut own = Vec::new();
    for (j, bytes) in outgoing.into_iter().enumerate() {
        if Some(j) == me {
            own = bytes;
        } else {
            frag::send(&mut s.rt, peers[j], tag, &bytes)?;
        }
    }
    for j in 0..n {
        let bytes = if Some(j) == me {
            std::mem::take(&mut own)
        } else {
            super::coll_recv(s, Source::Rank(peers[j]), tags::coll_match(context, seq, 0))?.payload.into_vec()
        };
        // SAFETY: MPI's buffer rule: the program's receive buffer spans these elements of this datatype, writable and left alone until the call returns or its request completes.
        unsafe { rt[j].unpack(&bytes, offset(recvbuf, rd[j]), rc[j]) }?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_alltoallw(
    sendbuf: UserBuf,
    sendcounts: In<'_, c_int>,
    sdispls: In<'_, c_int>,
    sendtypes: In<'_, c_int>,
    recvbuf: UserBuf,
    recvcounts: In<'_, c_int>,
    rdispls: In<'_, c_int>,
    recvtypes: In<'_, c_int>,
    comm: c_int,
) -> c_int {
    call("MPI_Alltoallw", comm, |s| {
        alltoallw(
            s,
            sendbuf,
            (sendcounts, sdispls, sendtypes),
            recvbuf,
            (recvcounts, rdispls, recvtypes),
            comm,
        )
    })
}
