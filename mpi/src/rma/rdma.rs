//! The provider's one-sided path: a put or get to a target this rank does not map goes as the
//! provider's own put or get (RDMA WRITE or READ on verbs; on tcp the target's provider serves
//! it, its helper thread while the target computes) onto the window memory every rank
//! registered when the window was made, so the target takes no part. Only without logging: a
//! replay could not repeat what no message carried, so under a logging protocol every
//! operation stays a logged request. Each contiguous run of the target is one operation.
//!
//! The provider moves registered memory only, so the program's bytes pass through a registered
//! staging ring: a put's are copied in before it is posted, a get's land there and are copied
//! out when its last piece completes. Ring space is reused once everything in flight is done.
//! Accumulates stay requests the target applies (their atomicity); MPI makes a put or get that
//! overlaps an accumulate without a synchronization between them erroneous (MPI 4.0, 12.7), and
//! every synchronization waits for both kinds (`Win::idle`).

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::OnceLock;

use reverb_transport::{
    Access, Capabilities, Completion, OpId, Owner, Provider, ProviderKind, Region, RemoteRegion, Rma, Signal,
};

use crate::abi::*;
use crate::coll;
use crate::errors::{MpiError, MpiResult};
use crate::state::State;

use super::ops::{count_of, mismatch, target_runs, OriginArgs, Resolved, TargetArgs};
use super::sync::{check_alive_of, target_rank, wait_for};
use super::win::Landing;

/// The staging ring's smallest size; a larger operation grows it (once nothing is in flight).
const RING_MIN: usize = 1 << 20;
/// Ring slots start on cache lines.
const ALIGN: usize = 64;
/// Target runs an operation may have on this path: one with more small pieces (a transposing
/// datatype: a million 4-byte runs) goes as one request the target applies instead.
const MAX_RUNS: usize = 64;
/// Provider operations in flight before a new one waits for them all: each holds provider
/// state (a tcp transmit queue entry, a send queue slot).
const MAX_INFLIGHT: usize = 1024;

/// The one completion owner of every window's operations (owners are never reused, windows
/// come and go).
static OWNER: OnceLock<Owner> = OnceLock::new();

/// A get waiting for its pieces: where its bytes land in the ring, and in the program.
struct PendingGet {
    ring: Region,
    at: usize,
    len: usize,
    pieces: usize,
    into: Landing,
}

/// A window's provider path, as an origin and as a target.
pub struct Rdma {
    /// This rank's window memory as the provider registered it: peers write and read it
    /// while the window lives (it is dropped before the memory).
    _own: Option<Region>,
    /// Per window rank, its registered window memory where operations on it take this path.
    remote: Vec<Option<RemoteRegion>>,
    ring: Option<Region>,
    head: usize,
    /// Operations in flight: the target, and the get they are a piece of.
    inflight: HashMap<OpId, (usize, Option<u64>)>,
    gets: HashMap<u64, PendingGet>,
    next_get: u64,
    /// Operations in flight per target.
    pub due: Vec<u64>,
}

impl Rdma {
    pub fn idle(&self) -> bool {
        self.inflight.is_empty()
    }
}

fn transport(what: &str, e: impl std::fmt::Display) -> MpiError {
    MpiError::new(MPI_ERR_OTHER, format!("{what}: {e}"))
}

fn provider(s: &mut State) -> MpiResult<&mut dyn Provider> {
    s.rt.one_sided().ok_or_else(|| MpiError::new(MPI_ERR_INTERN, "the one-sided path without its provider"))
}

fn owner(p: &mut dyn Provider) -> MpiResult<Owner> {
    if let Some(&o) = OWNER.get() {
        return Ok(o);
    }
    let o = p.open_owner().map_err(|e| transport("one-sided completions", e))?;
    Ok(*OWNER.get_or_init(|| o))
}

/// Whether this job's provider takes the path at all: one that registers window memory for
/// puts and gets (not shm's or loopback's, whose same-host peers map the memory, `direct`).
fn usable(p: &dyn Provider) -> bool {
    p.capabilities().contains(Capabilities::PUT | Capabilities::GET)
        && ![ProviderKind::SHM, ProviderKind::LOOPBACK].contains(&p.kind())
}

/// Collective on window `h`, made over its memory (`base`, `size`): every rank registers it
/// with the provider and the ranks exchange their descriptors. A rank that cannot register
/// (an empty window, a NIC refusing the memory) is reached by requests, as are the ranks this
/// one maps or shares a host with (shm reaches them under `auto`).
pub fn connect(s: &mut State, h: c_int) -> MpiResult<()> {
    let (base, size, comm) = {
        let w = s.win(h)?;
        (w.base, w.size, w.comm)
    };
    let Some(p) = s.rt.one_sided() else { return Ok(()) };
    if !usable(p) {
        return Ok(());
    }
    let own = match (base, size) {
        (0, _) | (_, 0) => None,
        // SAFETY: the window's memory stays mapped until the window is freed, and the region
        // goes with the window, before the memory (`Win`'s field order).
        _ => unsafe { p.register_memory(base as *mut u8, size, Access::REMOTE_RW) }.ok(),
    };
    let card = own.as_ref().map_or(Vec::new(), |r| r.remote().to_bytes().to_vec());
    let cards = coll::allgather_bytes(s, comm, &card)?;
    let ranks = s.win(h)?.ranks.clone();
    let p = provider(s)?;
    let by_shm: Vec<bool> = ranks.iter().map(|&r| p.provider_for(r) == ProviderKind::SHM).collect();
    let w = s.win(h)?;
    let remote: Vec<Option<RemoteRegion>> = cards
        .iter()
        .enumerate()
        .map(|(r, card)| {
            let elsewhere = r != w.me && w.reach.get(r).is_some_and(Option::is_none) && !by_shm[r];
            let at = RemoteRegion::from_bytes(card).ok().filter(|d| d.owner == w.ranks[r]);
            at.filter(|_| elsewhere)
        })
        .collect();
    if own.is_none() && remote.iter().all(Option::is_none) {
        return Ok(());
    }
    let n = remote.len();
    let rdma = Rdma {
        _own: own,
        remote,
        ring: None,
        head: 0,
        inflight: HashMap::new(),
        gets: HashMap::new(),
        next_get: 0,
        due: vec![0; n],
    };
    s.win_mut(h)?.rdma = Some(rdma);
    Ok(())
}

/// The target of `t` if operations on it take this path: its window rank, runs (checked
/// against its registered memory) and descriptor.
fn route(s: &State, win: c_int, t: &TargetArgs) -> MpiResult<Option<(Resolved, RemoteRegion)>> {
    let w = s.win(win)?;
    let Some(rdma) = &w.rdma else { return Ok(None) };
    let Some(rank) = target_rank(w, t.rank)? else { return Ok(None) };
    let Some(remote) = rdma.remote[rank] else { return Ok(None) };
    check_alive_of(s, w, win)?;
    let Some(resolved) = target_runs(s, win, t)? else { return Ok(None) };
    if resolved.runs.len() > MAX_RUNS {
        return Ok(None);
    }
    let outside = resolved.runs.iter().find(|r| r.0.checked_add(r.1).is_none_or(|e| e > remote.len));
    if let Some((off, len)) = outside {
        return Err(MpiError::new(
            MPI_ERR_RMA_RANGE,
            format!("{len} bytes at {off} outside the {} bytes of rank {rank}'s window", remote.len),
        ));
    }
    Ok(Some((resolved, remote)))
}

/// `len` bytes of staging ring; where they start. Waits for everything in flight when the
/// ring has no room left or too much is in flight (and grows the ring then, for an operation
/// larger than it).
fn reserve(s: &mut State, win: c_int, len: usize) -> MpiResult<(Region, usize)> {
    let len = len.max(1);
    let fits = |r: &Rdma| {
        r.inflight.len() < MAX_INFLIGHT && r.ring.as_ref().is_some_and(|ring| r.head + len <= ring.len())
    };
    if !fits(rdma_of(s, win)?) {
        wait_for(s, win, "a one-sided operation's staging", |w| w.rdma.as_ref().is_none_or(Rdma::idle))?;
        let small = rdma_of(s, win)?.ring.as_ref().is_none_or(|ring| ring.len() < len);
        if small {
            let bytes = len.next_power_of_two().max(RING_MIN);
            let ring =
                provider(s)?.alloc_region(bytes, Access::LOCAL).map_err(|e| transport("staging", e))?;
            rdma_mut(s, win)?.ring = Some(ring);
        }
        rdma_mut(s, win)?.head = 0;
    }
    let r = rdma_mut(s, win)?;
    let at = r.head;
    r.head = (at + len).next_multiple_of(ALIGN);
    let ring = r.ring.clone().ok_or_else(|| MpiError::new(MPI_ERR_INTERN, "no staging ring"))?;
    Ok((ring, at))
}

fn rdma_of(s: &State, win: c_int) -> MpiResult<&Rdma> {
    s.win(win)?.rdma.as_ref().ok_or_else(|| MpiError::new(MPI_ERR_INTERN, "no one-sided path"))
}

fn rdma_mut(s: &mut State, win: c_int) -> MpiResult<&mut Rdma> {
    s.win_mut(win)?.rdma.as_mut().ok_or_else(|| MpiError::new(MPI_ERR_INTERN, "no one-sided path"))
}

/// Posts one provider operation per run, from or into the ring at `at`; records those posted
/// (a failed post leaves the ones before it in flight) as pieces of `get`.
fn post(
    s: &mut State,
    win: c_int,
    (rank, remote): (usize, RemoteRegion),
    runs: &[(u64, u64)],
    (ring, at): (&Region, usize),
    get: Option<u64>,
) -> MpiResult<()> {
    let p = provider(s)?;
    let owner = owner(p)?;
    let mut posted = Vec::with_capacity(runs.len());
    let mut local = at;
    let mut failed = None;
    for &(off, len) in runs {
        let rma =
            Rma { local: ring, local_offset: local, remote: &remote, remote_offset: off, len: len as usize };
        let op = match get {
            Some(_) => p.get_for(owner, rma, Signal::Yes),
            None => p.put_for(owner, rma, Signal::Yes),
        };
        match op {
            Ok(op) => posted.push(op),
            Err(e) => {
                failed = Some(transport(&format!("a one-sided operation on rank {rank}"), e));
                break;
            }
        }
        local += len as usize;
    }
    let r = rdma_mut(s, win)?;
    r.due[rank] += posted.len() as u64;
    if let Some(g) = get.and_then(|g| r.gets.get_mut(&g)) {
        g.pieces = posted.len();
    }
    r.inflight.extend(posted.into_iter().map(|op| (op, (rank, get))));
    failed.map_or(Ok(()), Err)
}

/// A put on this path; `None` where the target takes another.
///
/// # Safety
/// `o.buf` spans its elements, readable, for the call.
pub unsafe fn put(s: &mut State, win: c_int, o: &OriginArgs, t: &TargetArgs) -> MpiResult<Option<usize>> {
    let Some((Resolved { rank, runs, .. }, remote)) = route(s, win, t)? else { return Ok(None) };
    let dt = s.datatype(o.datatype)?;
    // SAFETY: the caller's promise.
    let data = unsafe { dt.pack(&o.buf, count_of(o.count)?) }?;
    let span: u64 = runs.iter().map(|r| r.1).sum();
    if data.len() as u64 != span {
        return Err(mismatch(data.len(), span as usize));
    }
    let (ring, at) = reserve(s, win, data.len())?;
    ring.write(at, &data).map_err(|e| transport("staging a put", e))?;
    post(s, win, (rank, remote), &runs, (&ring, at), None)?;
    Ok(Some(rank))
}

/// A get on this path; `None` where the target takes another.
///
/// # Safety
/// `o.buf` spans its elements, writable and left alone until the epoch's synchronization.
pub unsafe fn get(s: &mut State, win: c_int, o: &OriginArgs, t: &TargetArgs) -> MpiResult<Option<usize>> {
    let Some((Resolved { rank, runs, .. }, remote)) = route(s, win, t)? else { return Ok(None) };
    let dt = s.datatype(o.datatype)?;
    let count = count_of(o.count)?;
    let span: u64 = runs.iter().map(|r| r.1).sum();
    if dt.bytes_for(count) as u64 != span {
        return Err(mismatch(dt.bytes_for(count), span as usize));
    }
    let len = span as usize;
    let (ring, at) = reserve(s, win, len)?;
    let r = rdma_mut(s, win)?;
    let g = r.next_get;
    r.next_get += 1;
    let pending = PendingGet { ring: ring.clone(), at, len, pieces: 0, into: (o.buf, dt, count) };
    r.gets.insert(g, pending);
    let posted = post(s, win, (rank, remote), &runs, (&ring, at), Some(g));
    let r = rdma_mut(s, win)?;
    if r.gets.get(&g).is_some_and(|p| p.pieces == 0) {
        // Nothing posted (no runs, or the first post failed): nothing will complete it.
        if let (Some(p), Ok(())) = (r.gets.remove(&g), &posted) {
            land(&p)?;
        }
    }
    posted.map(|()| Some(rank))
}

/// A get's bytes, all arrived, into the program's buffer.
fn land(p: &PendingGet) -> MpiResult<()> {
    let bytes = p.ring.to_vec(p.at, p.len).map_err(|e| transport("a get's bytes", e))?;
    let (buf, dt, count) = &p.into;
    // SAFETY: the origin buffer of a get: MPI keeps it the library's until the epoch's
    // synchronization, which waits for this operation.
    unsafe { dt.unpack(&bytes, *buf, *count) }
}

/// Provider progress rounds a flush spins through by itself before it waits as every MPI wait
/// does (`wait_for`: all of MPI's progress, and the wait mode's naps).
const QUICK_ROUNDS: u32 = 4096;

/// Waits a short while for this rank's provider operations on `win` to target `t`, progressing
/// the provider alone, so that a flush costs what the provider's operation does and not a round
/// of all of MPI's progress per poll; true if they completed. False at once while a request of
/// this rank waits for `t`'s reply (only MPI's progress takes that in).
pub fn settle_quickly(s: &mut State, win: c_int, t: usize) -> MpiResult<bool> {
    for _ in 0..QUICK_ROUNDS {
        let w = s.win(win)?;
        if w.idle(t) {
            return Ok(true);
        }
        if w.origin.due[t] != 0 {
            return Ok(false);
        }
        provider(s)?.progress().map_err(|e| transport("one-sided progress", e))?;
        reap_all(s)?;
    }
    Ok(false)
}

/// Takes in the completions of every window's operations: an error is reported at the
/// window's next synchronization (as a refused request is), a get's bytes are copied out once
/// its last piece is in.
pub fn reap_all(s: &mut State) -> MpiResult<()> {
    let Some(&owner) = OWNER.get() else { return Ok(()) };
    if s.wins.items.values().all(|w| w.rdma.as_ref().is_none_or(Rdma::idle)) {
        return Ok(());
    }
    let done: Vec<Completion> = provider(s)?.completions_of(owner).drain(..).collect();
    for c in done {
        let Some(w) = s
            .wins
            .items
            .values_mut()
            .find(|w| w.rdma.as_ref().is_some_and(|r| r.inflight.contains_key(&c.op)))
        else {
            continue;
        };
        let Some(r) = w.rdma.as_mut() else { continue };
        let Some((rank, get)) = r.inflight.remove(&c.op) else { continue };
        r.due[rank] = r.due[rank].saturating_sub(1);
        if let Some(e) = c.error() {
            let e =
                MpiError::new(MPI_ERR_RMA_RANGE, format!("rank {rank} refused a one-sided operation: {e}"));
            w.origin.refused.get_or_insert(e);
        }
        let Some(g) = get else { continue };
        let last = r.gets.get_mut(&g).is_some_and(|p| {
            p.pieces = p.pieces.saturating_sub(1);
            p.pieces == 0
        });
        if let Some(p) = last.then(|| r.gets.remove(&g)).flatten() {
            if c.error().is_none() {
                land(&p)?;
            }
        }
    }
    Ok(())
}
