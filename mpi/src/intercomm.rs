//! Intercommunicators: two disjoint groups joined by their leaders (MPI_Intercomm_create),
//! point-to-point between them (`Comm::peers` is the remote group), their duplicates and
//! merges, and the collectives across them, each built from the local group's collective and
//! an exchange between the two leaders (rank 0 of each group).

use std::ffi::c_int;

use reverb_transport::Source;

use crate::abi::*;
use crate::coll::{self, Group, Pieces, Reduction};
use crate::comm::Comm;
use crate::datatype::Datatype;
use crate::errors::{MpiError, MpiResult};
use crate::ffi;
use crate::ffi::{Out, UserBuf};
use crate::frag;
use crate::state::{call, State};
use crate::tags;

/// An intercommunicator as a collective needs it: the local group, and the remote one.
pub(crate) struct Inter {
    pub(crate) local: Group,
    pub(crate) remote: Vec<u32>,
}

impl Inter {
    pub(crate) fn of(s: &State, comm: c_int) -> MpiResult<Option<Inter>> {
        let c = s.comm(comm)?;
        Ok(c.remote.as_ref().map(|remote| Inter {
            local: Group { context: c.context, ranks: c.ranks.clone(), me: c.me as usize, seq: s.coll_seq },
            remote: remote.clone(),
        }))
    }

    fn send_remote(&self, s: &mut State, to: usize, bytes: &[u8]) -> MpiResult<()> {
        frag::send(&mut s.rt, self.remote[to], self.local.tag(), bytes)
    }

    fn recv_remote(&self, s: &mut State, from: usize) -> MpiResult<Vec<u8>> {
        let tag = tags::coll_match(self.local.context, self.local.seq, 0);
        Ok(crate::coll::coll_recv(s, Source::Rank(self.remote[from]), tag)?.payload.into_vec())
    }

    /// The leaders swap `mine` for the other group's; every member gets the other group's.
    fn swap(&self, s: &mut State, mine: Vec<u8>) -> MpiResult<Vec<u8>> {
        let theirs = if self.local.me == 0 {
            self.send_remote(s, 0, &mine)?;
            self.recv_remote(s, 0)?
        } else {
            Vec::new()
        };
        coll::bcast(s, &self.local, 0, theirs)
    }
}

impl State {
    /// A context id both groups of intercommunicator `comm` agree on (collective on both).
    fn agree_across(&mut self, comm: c_int) -> MpiResult<u32> {
        let inter =
            Inter::of(self, comm)?.ok_or_else(|| MpiError::new(MPI_ERR_COMM, "not an intercommunicator"))?;
        let local = self.new_context(comm)?;
        let theirs = inter.swap(self, local.to_le_bytes().to_vec())?;
        let theirs = theirs.get(..4).and_then(|b| b.try_into().ok()).map_or(0, u32::from_le_bytes);
        let agreed = local.max(theirs);
        self.next_context = self.next_context.max(agreed + 1);
        Ok(agreed)
    }

    /// A new intercommunicator: this group's `ranks` and the remote group, on `context`.
    fn new_inter(&mut self, errhandler_of: c_int, ranks: Vec<u32>, remote: Vec<u32>, context: u32) -> c_int {
        let me = ranks.iter().position(|&w| w == self.rt.rank()).unwrap_or(0) as u32;
        let errhandler = self.comms.get(errhandler_of).map_or(MPI_ERRORS_ARE_FATAL, |c| c.errhandler);
        self.comms.insert(Comm { context, ranks, me, errhandler, name: String::new(), remote: Some(remote) })
    }

    /// MPI_Comm_dup of an intercommunicator.
    pub(crate) fn dup_inter(&mut self, comm: c_int) -> MpiResult<c_int> {
        let c = self.comm(comm)?;
        let (ranks, remote) = (c.ranks.clone(), c.remote.clone().unwrap_or_default());
        let context = self.agree_across(comm)?;
        Ok(self.new_inter(comm, ranks, remote, context))
    }
}

fn words(ranks: &[u32]) -> Vec<u8> {
    ranks.iter().flat_map(|r| r.to_le_bytes()).collect()
}

fn unwords(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]])).collect()
}

pub(crate) unsafe fn mpi_intercomm_create(
    local_comm: c_int,
    local_leader: c_int,
    peer_comm: c_int,
    remote_leader: c_int,
    tag: c_int,
    newintercomm: Out<'_, c_int>,
) -> c_int {
    call("MPI_Intercomm_create", local_comm, |s| {
        let local = Group::of(s, local_comm)?;
        let leader = local.check_root(local_leader)?;
        let agreed = s.new_context(local_comm)?;
        // The leaders trade (agreed context, group) over the peer communicator, under `tag`.
        let mut mine = agreed.to_le_bytes().to_vec();
        mine.extend(words(&local.ranks));
        let theirs = if local.me == leader {
            let peer = s.comm(peer_comm)?;
            let (peer_context, other) = (peer.context, peer.world_of(remote_leader)?);
            frag::send(&mut s.rt, other, tags::tag(peer_context, 0, tag), &mine)?;
            s.tick_once()?;
            let m = s.rt.recv_matching(Source::Rank(other), tags::p2p_match(peer_context, tag))?;
            frag::complete(&mut s.rt, m)?.payload.into_vec()
        } else {
            Vec::new()
        };
        let theirs = coll::bcast(s, &local, leader, theirs)?;
        let bad = || MpiError::new(MPI_ERR_INTERN, "a malformed intercommunicator handshake");
        let their_context =
            theirs.get(..4).and_then(|b| b.try_into().ok()).map(u32::from_le_bytes).ok_or_else(bad)?;
        let remote = unwords(&theirs[4..]);
        if remote.is_empty() || remote.iter().any(|r| local.ranks.contains(r)) {
            return Err(MpiError::new(
                MPI_ERR_COMM,
                "the two groups of an intercommunicator must be disjoint and not empty",
            ));
        }
        let context = agreed.max(their_context);
        s.next_context = s.next_context.max(context + 1);
        let h = s.new_inter(local_comm, local.ranks, remote, context);
        ffi::out(newintercomm, h, "newintercomm")
    })
}

/// The union of both groups: the group passing `high` = false first (on a tie, the group whose
/// first member has the lower world rank).
/// A context kept for the agreement of MPI_Intercomm_create_from_groups (the top
/// `AGREEMENT_CONTEXTS` below the flags, which `new_context` never gives): one per string
/// tag, so concurrent creations with different tags keep apart.
fn agreement_context(stringtag: &[u8]) -> u32 {
    let hash = stringtag.iter().fold(0x811c_9dc5u32, |h, &b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
    tags::MAX_CONTEXT - hash % tags::AGREEMENT_CONTEXTS
}

/// MPI 4: an intercommunicator from two disjoint groups, with no parent communicator. Every
/// member of both groups takes part: they agree on a context over the union of the groups
/// (world ranks in order), apart from other traffic by the string tag.
#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_intercomm_create_from_groups(
    local_group: c_int,
    _local_leader: c_int,
    remote_group: c_int,
    _remote_leader: c_int,
    stringtag: *const std::ffi::c_char,
    _info: c_int,
    errhandler: c_int,
    newintercomm: Out<'_, c_int>,
) -> c_int {
    call("MPI_Intercomm_create_from_groups", MPI_COMM_WORLD, |s| {
        let (local, remote) = (s.group(local_group)?.clone(), s.group(remote_group)?.clone());
        let me = s.rt.rank();
        if !local.contains(&me) || remote.is_empty() || remote.iter().any(|r| local.contains(r)) {
            return Err(MpiError::new(
                MPI_ERR_GROUP,
                "the local group must hold this rank, the remote one be disjoint from it and not empty",
            ));
        }
        // SAFETY: a string argument of this call: NUL-terminated (the FFI contract).
        let tag = unsafe { ffi::string_in(stringtag) }?;
        let mut union: Vec<u32> = local.iter().chain(&remote).copied().collect();
        union.sort_unstable();
        let scratch = s.comms.insert(Comm {
            context: agreement_context(tag.as_bytes()),
            me: union.iter().position(|&w| w == me).unwrap_or(0) as u32,
            ranks: union,
            errhandler: MPI_ERRORS_ARE_FATAL,
            name: String::new(),
            remote: None,
        });
        let context = s.new_context(scratch);
        s.comms.remove(scratch);
        let h = s.new_inter(MPI_COMM_WORLD, local, remote, context?);
        if let Some(c) = s.comms.get_mut(h) {
            c.errhandler = errhandler;
        }
        ffi::out(newintercomm, h, "newintercomm")
    })
}

pub(crate) unsafe fn mpi_intercomm_merge(
    intercomm: c_int,
    high: c_int,
    newintracomm: Out<'_, c_int>,
) -> c_int {
    call("MPI_Intercomm_merge", intercomm, |s| {
        let inter = Inter::of(s, intercomm)?
            .ok_or_else(|| MpiError::new(MPI_ERR_COMM, "not an intercommunicator"))?;
        let theirs = inter.swap(s, vec![u8::from(high != 0)])?;
        let their_high = theirs.first().copied().unwrap_or(0) != 0;
        let mine_first = match (high != 0, their_high) {
            (false, true) => true,
            (true, false) => false,
            _ => inter.local.ranks.first() < inter.remote.first(),
        };
        let ranks = if mine_first {
            [inter.local.ranks.clone(), inter.remote.clone()].concat()
        } else {
            [inter.remote.clone(), inter.local.ranks.clone()].concat()
        };
        let context = s.agree_across(intercomm)?;
        let h = s.derive(intercomm, ranks, context);
        ffi::out(newintracomm, h, "newintracomm")
    })
}

pub(crate) unsafe fn mpi_comm_remote_size(comm: c_int, size: Out<'_, c_int>) -> c_int {
    call("MPI_Comm_remote_size", comm, |s| {
        let n = s
            .comm(comm)?
            .remote
            .as_ref()
            .map(Vec::len)
            .ok_or_else(|| MpiError::new(MPI_ERR_COMM, "not an intercommunicator"))?;
        ffi::out(size, n as c_int, "size")
    })
}

pub(crate) unsafe fn mpi_comm_remote_group(comm: c_int, group: Out<'_, c_int>) -> c_int {
    call("MPI_Comm_remote_group", comm, |s| {
        let remote = s
            .comm(comm)?
            .remote
            .clone()
            .ok_or_else(|| MpiError::new(MPI_ERR_COMM, "not an intercommunicator"))?;
        let h = s.groups.insert(remote);
        ffi::out(group, h, "group")
    })
}

// ---- collectives across the two groups ----

/// Which side of a rooted collective this rank is on.
enum Side {
    /// The root (`MPI_ROOT`).
    Root,
    /// The root's group, not the root (`MPI_PROC_NULL`).
    Idle,
    /// The other group; the root's rank in it.
    Other(usize),
}

fn side(inter: &Inter, root: c_int) -> MpiResult<Side> {
    match root {
        MPI_ROOT => Ok(Side::Root),
        MPI_PROC_NULL => Ok(Side::Idle),
        r => usize::try_from(r).ok().filter(|&r| r < inter.remote.len()).map(Side::Other).ok_or_else(|| {
            MpiError::new(
                MPI_ERR_ROOT,
                format!("root {r} outside the remote group of {}", inter.remote.len()),
            )
        }),
    }
}

pub(crate) fn barrier(s: &mut State, inter: &Inter) -> MpiResult<()> {
    coll::barrier(s, &inter.local)?;
    inter.swap(s, Vec::new())?;
    Ok(())
}

pub(crate) fn bcast(
    s: &mut State,
    inter: &Inter,
    buf: UserBuf,
    count: usize,
    dt: c_int,
    root: c_int,
) -> MpiResult<()> {
    let dt = s.datatype(dt)?;
    match side(inter, root)? {
        // SAFETY: MPI's buffer rule: the program's send buffer spans these elements of this datatype, readable until the call returns or its request completes.
        Side::Root => inter.send_remote(s, 0, &unsafe { dt.pack(&buf, count) }?),
        Side::Idle => Ok(()),
        Side::Other(r) => {
            let data = if inter.local.me == 0 { inter.recv_remote(s, r)? } else { Vec::new() };
            let data = coll::bcast(s, &inter.local, 0, data)?;
            // SAFETY: MPI's buffer rule: the program's receive buffer spans these elements of this datatype, writable and left alone until the call returns or its request completes.
            unsafe { dt.unpack(&data, buf, count) }
        }
    }
}

pub(crate) fn reduce(
    s: &mut State,
    inter: &Inter,
    io: (UserBuf, UserBuf),
    count: usize,
    (dt_handle, op): (c_int, c_int),
    root: c_int,
) -> MpiResult<()> {
    let (dt, op) = (s.datatype(dt_handle)?, s.op(op)?);
    match side(inter, root)? {
        Side::Root => {
            let bytes = inter.recv_remote(s, 0)?;
            // SAFETY: MPI's buffer rule: the program's receive buffer spans these elements of this datatype, writable and left alone until the call returns or its request completes.
            unsafe { dt.unpack(&bytes, io.1, count) }
        }
        Side::Idle => Ok(()),
        Side::Other(r) => {
            // SAFETY: MPI's buffer rule: the program's send buffer spans these elements of this datatype, readable until the call returns or its request completes.
            let mine = unsafe { dt.pack(&io.0, count) }?.into_owned();
            let red = Reduction { op, dt: &dt, dt_handle, count };
            if let Some(result) = coll::reduce(s, &inter.local, 0, mine, &red)? {
                inter.send_remote(s, r, &result)?;
            }
            Ok(())
        }
    }
}

/// Each group's reduction goes to the other group: everyone gets the remote group's result.
pub(crate) fn allreduce(
    s: &mut State,
    inter: &Inter,
    io: (UserBuf, UserBuf),
    count: usize,
    (dt_handle, op): (c_int, c_int),
) -> MpiResult<()> {
    let (dt, op) = (s.datatype(dt_handle)?, s.op(op)?);
    // SAFETY: MPI's buffer rule: the program's send buffer spans these elements of this datatype, readable until the call returns or its request completes.
    let mine = unsafe { dt.pack(&io.0, count) }?.into_owned();
    let red = Reduction { op, dt: &dt, dt_handle, count };
    let local = coll::reduce(s, &inter.local, 0, mine, &red)?.unwrap_or_default();
    let theirs = inter.swap(s, local)?;
    // SAFETY: MPI's buffer rule: the program's receive buffer spans these elements of this datatype, writable and left alone until the call returns or its request completes.
    unsafe { dt.unpack(&theirs, io.1, count) }
}

/// Each group's reduction of its members' vectors (`counts` summed: the same length on both
/// sides) is scattered over the other group: the local leaders swap their group's result,
/// every member takes its block of the remote one by `counts` (the local group's).
pub(crate) fn reduce_scatter(
    s: &mut State,
    inter: &Inter,
    io: (UserBuf, UserBuf),
    counts: &[usize],
    (dt_handle, op): (c_int, c_int),
) -> MpiResult<()> {
    let (dt, op) = (s.datatype(dt_handle)?, s.op(op)?);
    let total: usize = counts.iter().sum();
    // SAFETY: MPI's buffer rule: the program's send buffer spans these elements of this datatype, readable until the call returns or its request completes.
    let mine = unsafe { dt.pack(&io.0, total) }?.into_owned();
    let red = Reduction { op, dt: &dt, dt_handle, count: total };
    let local = coll::reduce(s, &inter.local, 0, mine, &red)?.unwrap_or_default();
    let theirs = inter.swap(s, local)?;
    let me = inter.local.me;
    let at = dt.bytes_for(counts[..me].iter().sum());
    let block = theirs.get(at..at + dt.bytes_for(counts[me])).ok_or_else(|| {
        MpiError::new(
            MPI_ERR_COUNT,
            "the two groups of the intercommunicator reduce vectors of different lengths",
        )
    })?;
    // SAFETY: MPI's buffer rule: the program's receive buffer spans these elements of this datatype, writable and left alone until the call returns or its request completes.
    unsafe { dt.unpack(block, io.1, counts[me]) }
}

/// A rooted or all-to-all gather across: `mine` packed; the root (or everyone, for
/// allgather) unpacks the remote group's pieces by `recv`'s layout.
pub(crate) fn gather(
    s: &mut State,
    inter: &Inter,
    mine: &[u8],
    recv: (UserBuf, &Pieces, &Datatype),
    root: Option<c_int>,
) -> MpiResult<()> {
    let unpack_all = |framed: &[u8]| -> MpiResult<()> {
        let (buf, layout, rt) = recv;
        for (i, piece) in coll::unframe(framed, inter.remote.len())?.iter().enumerate() {
            // SAFETY: MPI's buffer rule: the program's receive buffer spans these elements of this datatype, writable and left alone until the call returns or its request completes.
            unsafe { rt.unpack(piece, layout.at(buf, rt, i), layout.counts[i]) }?;
        }
        Ok(())
    };
    let Some(root) = root else {
        let local = coll::gather(s, &inter.local, 0, mine)?.map(|all| coll::frame(&all)).unwrap_or_default();
        let theirs = inter.swap(s, local)?;
        return unpack_all(&theirs);
    };
    match side(inter, root)? {
        Side::Root => {
            let framed = inter.recv_remote(s, 0)?;
            unpack_all(&framed)
        }
        Side::Idle => Ok(()),
        Side::Other(r) => {
            if let Some(all) = coll::gather(s, &inter.local, 0, mine)? {
                inter.send_remote(s, r, &coll::frame(&all))?;
            }
            Ok(())
        }
    }
}

/// A scatter across: the root packs a piece per remote member by `send`'s layout; the other
/// group's members unpack theirs (`count` elements of `rt`) into `buf`.
pub(crate) fn scatter(
    s: &mut State,
    inter: &Inter,
    send: (UserBuf, &Pieces, &Datatype),
    recv: (UserBuf, usize, &Datatype),
    root: c_int,
) -> MpiResult<()> {
    match side(inter, root)? {
        Side::Root => {
            let (buf, layout, st) = send;
            let pieces = (0..inter.remote.len())
                // SAFETY: MPI's buffer rule: the program's send buffer spans these elements of this datatype, readable until the call returns or its request completes.
                .map(|i| unsafe { st.pack(&layout.at(buf, st, i), layout.counts[i]) }.map(|b| b.into_owned()))
                .collect::<MpiResult<Vec<_>>>()?;
            inter.send_remote(s, 0, &coll::frame(&pieces))
        }
        Side::Idle => Ok(()),
        Side::Other(r) => {
            let mine = if inter.local.me == 0 {
                let pieces = coll::unframe(&inter.recv_remote(s, r)?, inter.local.size())?;
                for (i, p) in pieces.iter().enumerate().skip(1) {
                    inter.local.send(s, i, p)?;
                }
                pieces.into_iter().next().unwrap_or_default()
            } else {
                inter.local.recv(s, 0)?
            };
            // SAFETY: MPI's buffer rule: the program's receive buffer spans these elements of this datatype, writable and left alone until the call returns or its request completes.
            unsafe { recv.2.unpack(&mine, recv.0, recv.1) }
        }
    }
}

/// Piece `j` of every member (by `send`'s layout) goes to remote member `j`.
pub(crate) fn alltoall(
    s: &mut State,
    inter: &Inter,
    send: (UserBuf, &Pieces, &Datatype),
    recv: (UserBuf, &Pieces, &Datatype),
) -> MpiResult<()> {
    let ((sbuf, sl, st), (rbuf, rl, rt)) = (send, recv);
    for j in 0..inter.remote.len() {
        // SAFETY: MPI's buffer rule: the program's send buffer spans these elements of this datatype, readable until the call returns or its request completes.
        let piece = unsafe { st.pack(&sl.at(sbuf, st, j), sl.counts[j]) }?.into_owned();
        inter.send_remote(s, j, &piece)?;
    }
    for j in 0..inter.remote.len() {
        let piece = inter.recv_remote(s, j)?;
        // SAFETY: MPI's buffer rule: the program's receive buffer spans these elements of this datatype, writable and left alone until the call returns or its request completes.
        unsafe { rt.unpack(&piece, rl.at(rbuf, rt, j), rl.counts[j]) }?;
    }
    Ok(())
}

/// The world ranks of `all`'s members (allgathered (color, key) pairs in `ranks` order) with
/// color `color`, ordered by (key, rank).
fn members_of(all: &[Vec<u8>], ranks: &[u32], color: c_int) -> Vec<u32> {
    let word = |b: &[u8], at: usize| {
        b.get(at..at + 4).and_then(|w| w.try_into().ok()).map_or(0, c_int::from_le_bytes)
    };
    let mut m: Vec<(c_int, usize)> =
        all.iter().enumerate().filter(|(_, b)| word(b, 0) == color).map(|(r, b)| (word(b, 4), r)).collect();
    m.sort();
    m.iter().map(|&(_, r)| ranks[r]).collect()
}

impl State {
    /// MPI_Comm_split of an intercommunicator: each group splits by color, and members of a
    /// color meet the other group's members of that color (MPI_COMM_NULL if either is empty).
    pub(crate) fn split_inter(&mut self, comm: c_int, color: c_int, key: c_int) -> MpiResult<c_int> {
        let inter =
            Inter::of(self, comm)?.ok_or_else(|| MpiError::new(MPI_ERR_COMM, "not an intercommunicator"))?;
        let mut mine = color.to_le_bytes().to_vec();
        mine.extend_from_slice(&key.to_le_bytes());
        let local_all = coll::allgather(self, &inter.local, &mine, 0)?;
        let theirs = coll::unframe(&inter.swap(self, coll::frame(&local_all))?, inter.remote.len())?;
        let context = self.agree_across(comm)?;
        if color == MPI_UNDEFINED {
            return Ok(MPI_COMM_NULL);
        }
        let (ranks, remote) =
            (members_of(&local_all, &inter.local.ranks, color), members_of(&theirs, &inter.remote, color));
        if remote.is_empty() {
            return Ok(MPI_COMM_NULL);
        }
        Ok(self.new_inter(comm, ranks, remote, context))
    }

    /// MPI_Comm_create of an intercommunicator: this group's `group` meets the other group's.
    pub(crate) fn create_inter(&mut self, comm: c_int, group: Vec<u32>) -> MpiResult<c_int> {
        let inter =
            Inter::of(self, comm)?.ok_or_else(|| MpiError::new(MPI_ERR_COMM, "not an intercommunicator"))?;
        let remote = unwords(&inter.swap(self, words(&group))?);
        let context = self.agree_across(comm)?;
        if !group.contains(&self.rt.rank()) || remote.is_empty() {
            return Ok(MPI_COMM_NULL);
        }
        Ok(self.new_inter(comm, group, remote, context))
    }
}
