//! Collectives over the runtime's logged point-to-point messages, on each communicator's
//! collective context (apart from its point-to-point traffic). Every algorithm has a fixed
//! shape (dissemination barrier, binomial broadcast and reduction, linear gathers and
//! all-to-all), so a reduction adds in the same order every run: a recovered run's answer is
//! bit-identical.

use std::ffi::c_int;

use reverb_runtime::{Contributions, McastKey};
use reverb_transport::Source;

use crate::abi::*;
use crate::datatype::{offset, Datatype};
use crate::errors::{MpiError, MpiResult};
use crate::ffi;
use crate::ffi::{In, UserBuf};
use crate::frag;
use crate::intercomm::{self, Inter};
use crate::op::{self, Op};
use crate::state::{call, State};
use crate::tags;

/// The part of a communicator a collective needs, copied out of the state.
pub(crate) struct Group {
    pub(crate) context: u32,
    pub(crate) ranks: Vec<u32>,
    pub(crate) me: usize,
}

impl Group {
    pub(crate) fn of(s: &State, comm: c_int) -> MpiResult<Group> {
        let c = s.comm(comm)?;
        Ok(Group { context: c.context, ranks: c.ranks.clone(), me: c.me as usize })
    }

    pub(crate) fn size(&self) -> usize {
        self.ranks.len()
    }

    pub(crate) fn tag(&self) -> u64 {
        tags::tag(self.context, tags::COLL, 0)
    }

    pub(crate) fn send(&self, s: &mut State, to: usize, bytes: &[u8]) -> MpiResult<()> {
        frag::send(&mut s.rt, self.ranks[to], self.tag(), bytes)
    }

    /// The next collective message from `from`. With point-to-point operations outstanding
    /// it waits by progressing them too: a receive posted before the collective must still
    /// match (and acknowledge a synchronous send) while this rank waits here.
    pub(crate) fn recv(&self, s: &mut State, from: usize) -> MpiResult<Vec<u8>> {
        let (source, tag) = (Source::Rank(self.ranks[from]), tags::coll_match(self.context));
        let m = if s.p2p_outstanding() {
            let mut got = None;
            s.wait_until("a collective", |s| {
                got = s.rt.take_collected(source, tag)?;
                Ok(got.is_some())
            })?;
            got.ok_or_else(|| MpiError::new(MPI_ERR_INTERN, "a collective message vanished"))?
        } else {
            s.rt.recv_matching(source, tag)?
        };
        Ok(frag::complete(&mut s.rt, m)?.payload.into_vec())
    }

    pub(crate) fn check_root(&self, root: c_int) -> MpiResult<usize> {
        usize::try_from(root).ok().filter(|&r| r < self.size()).ok_or_else(|| {
            MpiError::new(MPI_ERR_ROOT, format!("root {root} outside a communicator of {}", self.size()))
        })
    }
}

pub(crate) fn barrier(s: &mut State, g: &Group) -> MpiResult<()> {
    let n = g.size();
    let mut k = 1;
    while k < n {
        g.send(s, (g.me + k) % n, &[])?;
        g.recv(s, (g.me + n - k) % n)?;
        k <<= 1;
    }
    Ok(())
}

/// Binomial broadcast of `data` from `root`; every rank returns the root's bytes. Under
/// collective-aware logging the bytes travel behind their multicast key, which forwarders
/// pass on: the root logs them once, every tree send logs a stub.
pub(crate) fn bcast(s: &mut State, g: &Group, root: usize, data: Vec<u8>) -> MpiResult<Vec<u8>> {
    if !s.rt.caml() {
        return bcast_tree(s, g, root, data, false);
    }
    let keyed = if g.me == root {
        let len = McastKey::WIRE_LEN + data.len();
        let pieces = frag::pieces(len, s.rt.config().log.max_message);
        let key =
            s.rt.multicast_key(pieces)?.ok_or_else(|| MpiError::new(MPI_ERR_INTERN, "no multicast key"))?;
        let mut keyed = Vec::with_capacity(len);
        keyed.extend_from_slice(&key.to_bytes());
        keyed.extend_from_slice(&data);
        keyed
    } else {
        Vec::new()
    };
    let mut keyed = bcast_tree(s, g, root, keyed, true)?;
    if keyed.len() < McastKey::WIRE_LEN {
        return Err(MpiError::new(MPI_ERR_INTERN, "a broadcast without its multicast key"));
    }
    Ok(keyed.split_off(McastKey::WIRE_LEN))
}

/// The broadcast tree; `keyed`: `data` starts with its multicast key.
fn bcast_tree(s: &mut State, g: &Group, root: usize, mut data: Vec<u8>, keyed: bool) -> MpiResult<Vec<u8>> {
    let n = g.size();
    let vr = (g.me + n - root) % n;
    let mut mask = 1;
    while mask < n {
        if vr & mask != 0 {
            data = g.recv(s, (vr - mask + root) % n)?;
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    let key = if keyed {
        Some(McastKey::from_bytes(&data).map_err(|e| MpiError::new(MPI_ERR_INTERN, e.to_string()))?)
    } else {
        None
    };
    while mask > 0 {
        if vr + mask < n {
            let to = (vr + mask + root) % n;
            match key {
                Some(key) => frag::send_multicast(&mut s.rt, g.ranks[to], g.tag(), &data, key)?,
                None => g.send(s, to, &data)?,
            }
        }
        mask >>= 1;
    }
    Ok(data)
}

/// What a reduction combines.
pub(crate) struct Reduction<'a> {
    pub(crate) op: Op,
    pub(crate) dt: &'a Datatype,
    pub(crate) dt_handle: c_int,
    pub(crate) count: usize,
}

/// Binomial reduction to `root`: Some(result) there. Ranks are combined in rank order (lower
/// ranks' partial results on the left), so a non-commutative operation is reduced to rank 0
/// first and then handed to the root.
pub(crate) fn reduce(
    s: &mut State,
    g: &Group,
    root: usize,
    mine: Vec<u8>,
    r: &Reduction<'_>,
) -> MpiResult<Option<Vec<u8>>> {
    reduce_logged(s, g, root, mine, r, None)
}

/// `reduce`, with the contributions under collective-aware logging when `c` is given (to
/// root 0, whose result every rank then holds: `MPI_Allreduce`).
fn reduce_logged(
    s: &mut State,
    g: &Group,
    root: usize,
    mine: Vec<u8>,
    r: &Reduction<'_>,
    mut c: Option<&mut Contributions>,
) -> MpiResult<Option<Vec<u8>>> {
    let n = g.size();
    let tree_root = if r.op.commutative() { root } else { 0 };
    let vr = (g.me + n - tree_root) % n;
    let mut acc = mine;
    let mut mask = 1;
    let mut holder = true;
    while mask < n {
        if vr & mask == 0 {
            let src = vr | mask;
            if src < n {
                let from = (src + tree_root) % n;
                let got = g.recv(s, from)?;
                let theirs = match c.as_deref_mut() {
                    Some(c) => c.take(g.ranks[from], &got)?.map(<[u8]>::to_vec),
                    None => Some(got),
                };
                // None: a tombstone, so this rank's partial result is one too.
                if let Some(mut theirs) = theirs {
                    op::apply(r.op, r.dt, r.dt_handle, r.count, &acc, &mut theirs)?;
                    acc = theirs;
                }
            }
        } else {
            let to = ((vr & !mask) + tree_root) % n;
            match c.as_deref_mut() {
                Some(c) => {
                    let (parent, tag, payload) = (g.ranks[to], g.tag(), c.payload(&acc));
                    s.rt.send_contribution(c, parent, |rt| frag::send(rt, parent, tag, &payload))?;
                }
                None => g.send(s, to, &acc)?,
            }
            holder = false;
            break;
        }
        mask <<= 1;
    }
    if tree_root == root {
        return Ok(holder.then_some(acc));
    }
    if g.me == tree_root {
        g.send(s, root, &acc)?;
    }
    if g.me == root {
        return Ok(Some(g.recv(s, tree_root)?));
    }
    Ok(None)
}

/// Every rank's bytes at `root`, in rank order.
pub(crate) fn gather(s: &mut State, g: &Group, root: usize, mine: &[u8]) -> MpiResult<Option<Vec<Vec<u8>>>> {
    if g.me != root {
        g.send(s, root, mine)?;
        return Ok(None);
    }
    let mut all = Vec::with_capacity(g.size());
    for r in 0..g.size() {
        all.push(if r == root { mine.to_vec() } else { g.recv(s, r)? });
    }
    Ok(Some(all))
}

pub(crate) fn frame(parts: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for p in parts {
        out.extend_from_slice(&(p.len() as u64).to_le_bytes());
        out.extend_from_slice(p);
    }
    out
}

pub(crate) fn unframe(bytes: &[u8], n: usize) -> MpiResult<Vec<Vec<u8>>> {
    let bad = || MpiError::new(MPI_ERR_INTERN, "a malformed allgather result");
    let mut parts = Vec::with_capacity(n);
    let mut at = 0;
    for _ in 0..n {
        let len: [u8; 8] = bytes.get(at..at + 8).and_then(|b| b.try_into().ok()).ok_or_else(bad)?;
        let len = usize::try_from(u64::from_le_bytes(len)).map_err(|_| bad())?;
        at += 8;
        parts.push(bytes.get(at..at + len).ok_or_else(bad)?.to_vec());
        at += len;
    }
    Ok(parts)
}

pub(crate) fn allgather(s: &mut State, g: &Group, mine: &[u8]) -> MpiResult<Vec<Vec<u8>>> {
    let framed = gather(s, g, 0, mine)?.map(|all| frame(&all)).unwrap_or_default();
    let framed = bcast(s, g, 0, framed)?;
    unframe(&framed, g.size())
}

/// Every member's `mine`, in rank order, for communicator creation: journaled
/// (`crate::journal`), and answered from the journal while a restarted rank re-executes its
/// setup.
pub fn allgather_bytes(s: &mut State, comm: c_int, mine: &[u8]) -> MpiResult<Vec<Vec<u8>>> {
    let g = Group::of(s, comm)?;
    if let Some(all) = s.journal.replay_next() {
        // Only the shape is checked: a rank respawned on another host gives another host
        // name to MPI_Comm_split_type, and must still get the grouping its peers have.
        if all.len() != g.size() {
            return Err(MpiError::new(
                MPI_ERR_OTHER,
                "a restarted rank's setup differs from its first run: communicators must be created \
                 in the same order, with the same arguments, before MPIX_Reverb_restore",
            ));
        }
        s.journal.record(&all);
        return Ok(all);
    }
    let all = allgather(s, &g, mine)?;
    s.journal.record(&all);
    Ok(all)
}

pub(crate) fn count_of(count: c_int) -> MpiResult<usize> {
    usize::try_from(count).map_err(|_| MpiError::new(MPI_ERR_COUNT, format!("count {count}")))
}

pub(crate) fn in_place(p: UserBuf) -> bool {
    p.is_in_place()
}

#[export_name = "PMPI_Barrier"]
pub extern "C" fn MPI_Barrier(comm: c_int) -> c_int {
    call("MPI_Barrier", comm, |s| {
        if let Some(inter) = Inter::of(s, comm)? {
            return intercomm::barrier(s, &inter);
        }
        let g = Group::of(s, comm)?;
        barrier(s, &g)
    })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `buf`: message buffers, each spanning its count of its datatype, for the call.
#[export_name = "PMPI_Bcast"]
pub unsafe extern "C" fn MPI_Bcast(
    buf: UserBuf,
    count: c_int,
    datatype: c_int,
    root: c_int,
    comm: c_int,
) -> c_int {
    call("MPI_Bcast", comm, |s| {
        if let Some(inter) = Inter::of(s, comm)? {
            return intercomm::bcast(s, &inter, buf, count_of(count)?, datatype, root);
        }
        let g = Group::of(s, comm)?;
        let root = g.check_root(root)?;
        let (count, dt) = (count_of(count)?, s.datatype(datatype)?);
        // SAFETY: MPI's buffer rule: the program's send buffer spans these elements of this datatype, readable until the call returns or its request completes.
        let data = if g.me == root { unsafe { dt.pack(&buf, count) }?.into_owned() } else { Vec::new() };
        let data = bcast(s, &g, root, data)?;
        if g.me != root {
            // SAFETY: MPI's buffer rule: the program's receive buffer spans these elements of this datatype, writable and left alone until the call returns or its request completes.
            unsafe { dt.unpack(&data, buf, count) }?;
        }
        Ok(())
    })
}

#[allow(clippy::too_many_arguments)]
fn reduce_call(
    s: &mut State,
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    count: c_int,
    datatype: c_int,
    op: c_int,
    root: Option<c_int>,
    comm: c_int,
) -> MpiResult<()> {
    if let Some(inter) = Inter::of(s, comm)? {
        let (io, n) = ((sendbuf, recvbuf), count_of(count)?);
        return match root {
            Some(r) => intercomm::reduce(s, &inter, io, n, (datatype, op), r),
            None => intercomm::allreduce(s, &inter, io, n, (datatype, op)),
        };
    }
    let g = Group::of(s, comm)?;
    let root_rank = match root {
        Some(r) => g.check_root(r)?,
        None => 0,
    };
    let (n, dt, op) = (count_of(count)?, s.datatype(datatype)?, s.op(op)?);
    let source = if in_place(sendbuf) { recvbuf } else { sendbuf };
    // SAFETY: MPI's buffer rule: the program's send buffer spans these elements of this datatype, readable until the call returns or its request completes.
    let mine = unsafe { dt.pack(&source, n) }?.into_owned();
    let r = Reduction { op, dt: &dt, dt_handle: datatype, count: n };
    let result = match root {
        Some(_) => reduce(s, &g, root_rank, mine, &r)?,
        // Allreduce: the same bytes everywhere; each rank's contribution is logged until then.
        None => {
            let mut c = s.rt.begin_reduction(g.ranks[0]);
            let result = reduce_logged(s, &g, 0, mine, &r, Some(&mut c))?;
            let result = bcast(s, &g, 0, result.unwrap_or_default())?;
            s.rt.end_reduction(c)?;
            Some(result)
        }
    };
    if let Some(bytes) = result {
        // SAFETY: MPI's buffer rule: the program's receive buffer spans these elements of this datatype, writable and left alone until the call returns or its request completes.
        unsafe { dt.unpack(&bytes, recvbuf, n) }?;
    }
    Ok(())
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, for the call.
#[export_name = "PMPI_Reduce"]
pub unsafe extern "C" fn MPI_Reduce(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    count: c_int,
    datatype: c_int,
    op: c_int,
    root: c_int,
    comm: c_int,
) -> c_int {
    call("MPI_Reduce", comm, |s| reduce_call(s, sendbuf, recvbuf, count, datatype, op, Some(root), comm))
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, for the call.
#[export_name = "PMPI_Allreduce"]
pub unsafe extern "C" fn MPI_Allreduce(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    count: c_int,
    datatype: c_int,
    op: c_int,
    comm: c_int,
) -> c_int {
    call("MPI_Allreduce", comm, |s| reduce_call(s, sendbuf, recvbuf, count, datatype, op, None, comm))
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `inbuf`, `inoutbuf`: message buffers, each spanning its count of its datatype, for the call.
#[export_name = "PMPI_Reduce_local"]
pub unsafe extern "C" fn MPI_Reduce_local(
    inbuf: UserBuf,
    inoutbuf: UserBuf,
    count: c_int,
    datatype: c_int,
    op: c_int,
) -> c_int {
    call("MPI_Reduce_local", MPI_COMM_WORLD, |s| {
        let (n, dt, op) = (count_of(count)?, s.datatype(datatype)?, s.op(op)?);
        // SAFETY: MPI's buffer rule: the program's send buffer spans these elements of this datatype, readable until the call returns or its request completes.
        let input = unsafe { dt.pack(&inbuf, n) }?.into_owned();
        // SAFETY: MPI's buffer rule: the program's send buffer spans these elements of this datatype, readable until the call returns or its request completes.
        let mut acc = unsafe { dt.pack(&inoutbuf, n) }?.into_owned();
        op::apply(op, &dt, datatype, n, &input, &mut acc)?;
        // SAFETY: MPI's buffer rule: the program's receive buffer spans these elements of this datatype, writable and left alone until the call returns or its request completes.
        unsafe { dt.unpack(&acc, inoutbuf, n) }
    })
}

/// The layout of one rank's piece in a gather's or scatter's buffer.
pub(crate) struct Pieces {
    pub(crate) counts: Vec<usize>,
    /// Displacements in elements of the type.
    pub(crate) displs: Vec<isize>,
}

impl Pieces {
    pub(crate) fn uniform(n: usize, count: usize) -> Pieces {
        Pieces { counts: vec![count; n], displs: (0..n).map(|i| (i * count) as isize).collect() }
    }

    pub(crate) fn varying(n: usize, counts: In<'_, c_int>, displs: In<'_, c_int>) -> MpiResult<Pieces> {
        let counts =
            // SAFETY: the array is as long as this call's counts say (the FFI contract).
            unsafe { ffi::array(counts, n, "counts") }?.iter().map(|&c| count_of(c)).collect::<MpiResult<_>>()?;
        // SAFETY: the array is as long as this call's counts say (the FFI contract).
        let displs = unsafe { ffi::array(displs, n, "displs") }?.iter().map(|&d| d as isize).collect();
        Ok(Pieces { counts, displs })
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
    let layout = pieces(g.size())?;
    let rt = s.datatype(recvtype)?;
    let mine = if in_place(sendbuf) {
        // SAFETY: MPI's buffer rule: the program's send buffer spans these elements of this datatype, readable until the call returns or its request completes.
        unsafe { rt.pack(&layout.at(recvbuf, &rt, g.me), layout.counts[g.me]) }?.into_owned()
    } else {
        // SAFETY: MPI's buffer rule: the program's send buffer spans these elements of this datatype, readable until the call returns or its request completes.
        unsafe { s.datatype(sendtype)?.pack(&sendbuf, count_of(sendcount)?) }?.into_owned()
    };
    let all = match root {
        Some(_) => gather(s, &g, root_rank, &mine)?,
        None => Some(allgather(s, &g, &mine)?),
    };
    let Some(all) = all else { return Ok(()) };
    for (i, bytes) in all.iter().enumerate() {
        // SAFETY: MPI's buffer rule: the program's receive buffer spans these elements of this datatype, writable and left alone until the call returns or its request completes.
        unsafe { rt.unpack(bytes, layout.at(recvbuf, &rt, i), layout.counts[i]) }?;
    }
    Ok(())
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, for the call.
#[export_name = "PMPI_Gather"]
pub unsafe extern "C" fn MPI_Gather(
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

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, for the call;
/// `recvcounts`, `displs`: null or readable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Gatherv"]
pub unsafe extern "C" fn MPI_Gatherv(
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

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, for the call.
#[export_name = "PMPI_Allgather"]
pub unsafe extern "C" fn MPI_Allgather(
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

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, for the call;
/// `recvcounts`, `displs`: null or readable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Allgatherv"]
pub unsafe extern "C" fn MPI_Allgatherv(
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

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, for the call.
#[export_name = "PMPI_Scatter"]
pub unsafe extern "C" fn MPI_Scatter(
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

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, for the call;
/// `sendcounts`, `displs`: null or readable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Scatterv"]
pub unsafe extern "C" fn MPI_Scatterv(
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
) -> MpiResult<()> {
    if let Some(inter) = Inter::of(s, comm)? {
        let n = inter.remote.len();
        let (st, sl, rt, rl) = (s.datatype(sendtype)?, send(n)?, s.datatype(recvtype)?, recv(n)?);
        return intercomm::alltoall(s, &inter, (sendbuf, &sl, &st), (recvbuf, &rl, &rt));
    }
    let g = Group::of(s, comm)?;
    let n = g.size();
    let (rt, rl) = (s.datatype(recvtype)?, recv(n)?);
    let (st, sl, src) = if in_place(sendbuf) {
        (rt.clone(), Pieces { counts: rl.counts.clone(), displs: rl.displs.clone() }, recvbuf)
    } else {
        (s.datatype(sendtype)?, send(n)?, sendbuf)
    };
    // Every piece is taken before any is written: MPI_IN_PLACE reads and writes one buffer.
    // SAFETY: MPI's buffer rule: the program's send buffer spans these elements of this datatype, readable until the call returns or its request completes.
    let own = unsafe { st.pack(&sl.at(src, &st, g.me), sl.counts[g.me]) }?.into_owned();
    for step in 1..n {
        let to = (g.me + step) % n;
        // SAFETY: MPI's buffer rule: the program's send buffer spans these elements of this datatype, readable until the call returns or its request completes.
        let bytes = unsafe { st.pack(&sl.at(src, &st, to), sl.counts[to]) }?.into_owned();
        g.send(s, to, &bytes)?;
    }
    // SAFETY: MPI's buffer rule: the program's receive buffer spans these elements of this datatype, writable and left alone until the call returns or its request completes.
    unsafe { rt.unpack(&own, rl.at(recvbuf, &rt, g.me), rl.counts[g.me]) }?;
    for step in 1..n {
        let from = (g.me + n - step) % n;
        let bytes = g.recv(s, from)?;
        // SAFETY: MPI's buffer rule: the program's receive buffer spans these elements of this datatype, writable and left alone until the call returns or its request completes.
        unsafe { rt.unpack(&bytes, rl.at(recvbuf, &rt, from), rl.counts[from]) }?;
    }
    Ok(())
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, for the call.
#[export_name = "PMPI_Alltoall"]
pub unsafe extern "C" fn MPI_Alltoall(
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
        alltoall_call(s, sendbuf, send, sendtype, recvbuf, recv, recvtype, comm)
    })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, for the call;
/// `sendcounts`, `sdispls`, `recvcounts`, `rdispls`: null or readable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Alltoallv"]
pub unsafe extern "C" fn MPI_Alltoallv(
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
        alltoall_call(s, sendbuf, send, sendtype, recvbuf, recv, recvtype, comm)
    })
}

/// Inclusive (or exclusive) prefix reduction along the ranks, in rank order.
#[allow(clippy::too_many_arguments)]
fn scan_call(
    s: &mut State,
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    count: c_int,
    datatype: c_int,
    op: c_int,
    comm: c_int,
    exclusive: bool,
) -> MpiResult<()> {
    let g = Group::of(s, comm)?;
    let (n, dt, op) = (count_of(count)?, s.datatype(datatype)?, s.op(op)?);
    let source = if in_place(sendbuf) { recvbuf } else { sendbuf };
    // SAFETY: MPI's buffer rule: the program's send buffer spans these elements of this datatype, readable until the call returns or its request completes.
    let mine = unsafe { dt.pack(&source, n) }?.into_owned();
    let before = if g.me > 0 { Some(g.recv(s, g.me - 1)?) } else { None };
    let through_me = match &before {
        Some(prefix) => {
            let mut acc = mine.clone();
            op::apply(op, &dt, datatype, n, prefix, &mut acc)?;
            acc
        }
        None => mine,
    };
    if g.me + 1 < g.size() {
        g.send(s, g.me + 1, &through_me)?;
    }
    match (exclusive, before) {
        // SAFETY: MPI's buffer rule: the program's receive buffer spans these elements of this datatype, writable and left alone until the call returns or its request completes.
        (false, _) => unsafe { dt.unpack(&through_me, recvbuf, n) },
        // SAFETY: MPI's buffer rule: the program's receive buffer spans these elements of this datatype, writable and left alone until the call returns or its request completes.
        (true, Some(prefix)) => unsafe { dt.unpack(&prefix, recvbuf, n) },
        // Rank 0's exclusive result is undefined: its buffer is left alone.
        (true, None) => Ok(()),
    }
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, for the call.
#[export_name = "PMPI_Scan"]
pub unsafe extern "C" fn MPI_Scan(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    count: c_int,
    datatype: c_int,
    op: c_int,
    comm: c_int,
) -> c_int {
    call("MPI_Scan", comm, |s| scan_call(s, sendbuf, recvbuf, count, datatype, op, comm, false))
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, for the call.
#[export_name = "PMPI_Exscan"]
pub unsafe extern "C" fn MPI_Exscan(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    count: c_int,
    datatype: c_int,
    op: c_int,
    comm: c_int,
) -> c_int {
    call("MPI_Exscan", comm, |s| scan_call(s, sendbuf, recvbuf, count, datatype, op, comm, true))
}

/// Reduce to rank 0 over all the counts, then scatter each rank its block.
fn reduce_scatter_call(
    s: &mut State,
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    counts: Vec<usize>,
    datatype: c_int,
    op: c_int,
    comm: c_int,
) -> MpiResult<()> {
    if let Some(inter) = Inter::of(s, comm)? {
        return intercomm::reduce_scatter(s, &inter, (sendbuf, recvbuf), &counts, (datatype, op));
    }
    let g = Group::of(s, comm)?;
    let (dt, op) = (s.datatype(datatype)?, s.op(op)?);
    let total: usize = counts.iter().sum();
    let source = if in_place(sendbuf) { recvbuf } else { sendbuf };
    // SAFETY: MPI's buffer rule: the program's send buffer spans these elements of this datatype, readable until the call returns or its request completes.
    let mine = unsafe { dt.pack(&source, total) }?.into_owned();
    let r = Reduction { op, dt: &dt, dt_handle: datatype, count: total };
    let result = reduce(s, &g, 0, mine, &r)?;
    let piece = if g.me == 0 {
        let all = result.unwrap_or_default();
        let mut at = 0;
        let mut own = Vec::new();
        for (rank, &c) in counts.iter().enumerate() {
            let bytes = all.get(at..at + dt.bytes_for(c)).unwrap_or_default();
            at += dt.bytes_for(c);
            if rank == 0 {
                own = bytes.to_vec();
            } else {
                g.send(s, rank, bytes)?;
            }
        }
        own
    } else {
        g.recv(s, 0)?
    };
    // SAFETY: MPI's buffer rule: the program's receive buffer spans these elements of this datatype, writable and left alone until the call returns or its request completes.
    unsafe { dt.unpack(&piece, recvbuf, counts[g.me]) }
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, for the call.
#[export_name = "PMPI_Reduce_scatter_block"]
pub unsafe extern "C" fn MPI_Reduce_scatter_block(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    recvcount: c_int,
    datatype: c_int,
    op: c_int,
    comm: c_int,
) -> c_int {
    call("MPI_Reduce_scatter_block", comm, |s| {
        let n = s.comm(comm)?.size() as usize;
        let counts = vec![count_of(recvcount)?; n];
        reduce_scatter_call(s, sendbuf, recvbuf, counts, datatype, op, comm)
    })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, for the call;
/// `recvcounts`: null or readable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Reduce_scatter"]
pub unsafe extern "C" fn MPI_Reduce_scatter(
    sendbuf: UserBuf,
    recvbuf: UserBuf,
    recvcounts: In<'_, c_int>,
    datatype: c_int,
    op: c_int,
    comm: c_int,
) -> c_int {
    call("MPI_Reduce_scatter", comm, |s| {
        let n = s.comm(comm)?.size() as usize;
        // SAFETY: the array is as long as this call's counts say (the FFI contract).
        let counts = unsafe { ffi::array(recvcounts, n, "recvcounts") }?
            .iter()
            .map(|&c| count_of(c))
            .collect::<MpiResult<_>>()?;
        reduce_scatter_call(s, sendbuf, recvbuf, counts, datatype, op, comm)
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
    let tag = tags::tag(context, tags::COLL, 0);
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
            let m = s.rt.recv_matching(Source::Rank(peers[j]), tags::coll_match(context))?;
            frag::complete(&mut s.rt, m)?.payload.into_vec()
        };
        // SAFETY: MPI's buffer rule: the program's receive buffer spans these elements of this datatype, writable and left alone until the call returns or its request completes.
        unsafe { rt[j].unpack(&bytes, offset(recvbuf, rd[j]), rc[j]) }?;
    }
    Ok(())
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, for the call;
/// `sendcounts`, `sdispls`, `sendtypes`, `recvcounts`, `rdispls`, `recvtypes`: null or readable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Alltoallw"]
pub unsafe extern "C" fn MPI_Alltoallw(
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
