//! Same-host targets of `MPI_Win_create` windows, reached by cross-memory attach (Linux
//! `process_vm_writev`/`_readv`, the shm provider's `cma`): the window is the program's own
//! memory, which no other process maps, so an origin on the target's host puts and gets with
//! one system call and one copy, without the target (Open MPI's vader calls it single copy).
//! Only without logging (a replay repeats requests, not these). Probed per peer when the window
//! is made (a token of the target's read back), so a kernel that refuses (Yama, seccomp) leaves
//! the requests. Accumulates stay requests: the target's atomicity.

use std::ffi::c_int;
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use reverb_transport::shm::cma;
use reverb_transport::ProviderKind;

use crate::abi::*;
use crate::coll;
use crate::datatype::Datatype;
use crate::errors::{MpiError, MpiResult};
use crate::state::State;

use super::ops::{count_of, mismatch, target_runs, OriginArgs, Resolved, TargetArgs};
use super::sync::{check_alive_of, target_rank};

/// A target datatype of more runs than this goes as one request instead.
const MAX_RUNS: usize = 64;

/// A same-host target's window as this rank reaches it.
#[derive(Clone, Copy, Debug)]
pub struct Peer {
    pid: u32,
    base: u64,
    size: u64,
}

/// This process's token: peers read it back to know that a pid is this process, reachable.
fn token() -> &'static [u8; 16] {
    static TOKEN: OnceLock<[u8; 16]> = OnceLock::new();
    TOKEN.get_or_init(|| {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let mut t = [0; 16];
        t[..8].copy_from_slice(&(nanos as u64).to_le_bytes());
        t[8..12].copy_from_slice(&std::process::id().to_le_bytes());
        t[12..].copy_from_slice(b"rvbw");
        t
    })
}

fn card(base: usize, size: usize) -> Vec<u8> {
    let mut b = Vec::with_capacity(44);
    b.extend_from_slice(&std::process::id().to_le_bytes());
    b.extend_from_slice(&(base as u64).to_le_bytes());
    b.extend_from_slice(&(size as u64).to_le_bytes());
    b.extend_from_slice(&(token().as_ptr() as u64).to_le_bytes());
    b.extend_from_slice(token());
    b
}

/// A peer's card, if its token reads back through the kernel.
fn reach(card: &[u8]) -> Option<Peer> {
    let word = |at: usize| card.get(at..at + 8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes);
    let pid = u32::from_le_bytes(card.get(..4)?.try_into().ok()?);
    let (base, size, at) = (word(4)?, word(12)?, word(20)?);
    let expect = card.get(28..44)?;
    cma::probe(pid, at, expect).then_some(Peer { pid, base, size })
}

/// Collective on window `h` (an `MPI_Win_create` window): the ranks exchange (pid, base, size)
/// and each keeps the peers on its host (shm's, under `auto`) that it can reach.
pub fn connect(s: &mut State, h: c_int) -> MpiResult<()> {
    let (base, size, comm, ranks, me) = {
        let w = s.win(h)?;
        (w.base, w.size, w.comm, w.ranks.clone(), w.me)
    };
    let Some(p) = s.rt.one_sided() else { return Ok(()) };
    let same_host: Vec<bool> = ranks.iter().map(|&r| p.provider_for(r) == ProviderKind::SHM).collect();
    // Every rank of a job on shm or `auto` counts itself as on its host: all or none exchange.
    if !same_host.iter().any(|&same| same) {
        return Ok(());
    }
    let cards = coll::allgather_bytes(s, comm, &card(base, size))?;
    let peers = cards
        .iter()
        .enumerate()
        .map(|(r, c)| if r != me && same_host[r] { reach(c) } else { None })
        .collect();
    s.win_mut(h)?.cross = peers;
    Ok(())
}

fn range(len: u64, off: u64, to: &Peer, rank: usize) -> MpiResult<()> {
    match off.checked_add(len) {
        Some(end) if end <= to.size => Ok(()),
        _ => Err(MpiError::new(
            MPI_ERR_RMA_RANGE,
            format!("{len} bytes at {off} outside the {} bytes of rank {rank}'s window", to.size),
        )),
    }
}

fn failed(rank: usize, e: std::io::Error) -> MpiError {
    MpiError::new(MPI_ERR_OTHER, format!("a one-sided operation on rank {rank} (cross-memory): {e}"))
}

/// Moves `len` bytes between `buf` here and offset `off` of `to`'s window.
///
/// # Safety
/// `buf` holds `len` bytes, readable for a put, writable for a get, for the call.
unsafe fn copy(to: &Peer, rank: usize, off: u64, buf: *mut u8, len: usize, put: bool) -> MpiResult<()> {
    range(len as u64, off, to, rank)?;
    if len == 0 {
        return Ok(());
    }
    let at = to.base + off;
    // SAFETY: the caller's promise; the kernel checks the far side against the target's mappings.
    let done = unsafe {
        match put {
            true => cma::write(to.pid, at, buf, len),
            false => cma::read(to.pid, at, buf, len),
        }
    };
    done.map_err(|e| failed(rank, e))
}

/// The target of `t` if reached this way: its window rank and how.
fn peer(s: &State, win: c_int, t: &TargetArgs) -> MpiResult<Option<(usize, Peer)>> {
    let w = s.win(win)?;
    if w.cross.is_empty() {
        return Ok(None);
    }
    let Some(rank) = target_rank(w, t.rank)? else { return Ok(None) };
    let Some(to) = w.cross[rank] else { return Ok(None) };
    check_alive_of(s, w, win)?;
    Ok(Some((rank, to)))
}

/// A put or get on this path; `None` where the target takes another.
///
/// # Safety
/// `o.buf` spans its elements, readable for a put, writable for a get, for the call.
pub unsafe fn transfer(
    s: &State,
    win: c_int,
    o: &OriginArgs,
    t: &TargetArgs,
    put: bool,
) -> MpiResult<Option<usize>> {
    let Some((rank, to)) = peer(s, win, t)? else { return Ok(None) };
    // Predefined types at both ends: one contiguous run, straight from or into the buffer.
    if let (Some(osize), Some(tsize)) = (Datatype::plain_size(o.datatype), Datatype::plain_size(t.datatype)) {
        let (len, tlen) = (count_of(o.count)? * osize, count_of(t.count)? * tsize);
        let unit = i128::from(s.win(win)?.disp_units[rank]);
        let off = u64::try_from(t.disp as i128 * unit)
            .map_err(|_| MpiError::new(MPI_ERR_RMA_RANGE, format!("target displacement {}", t.disp)))?;
        if len != tlen {
            return Err(mismatch(len, tlen));
        }
        // SAFETY: the caller's promise.
        unsafe { copy(&to, rank, off, o.buf.ptr().cast(), len, put) }?;
        return Ok(Some(rank));
    }
    let Some(Resolved { runs, .. }) = target_runs(s, win, t)? else { return Ok(None) };
    if runs.len() > MAX_RUNS {
        return Ok(None);
    }
    let dt = s.datatype(o.datatype)?;
    let count = count_of(o.count)?;
    let span: u64 = runs.iter().map(|r| r.1).sum();
    if dt.bytes_for(count) as u64 != span {
        return Err(mismatch(dt.bytes_for(count), span as usize));
    }
    runs.iter().try_for_each(|&(off, len)| range(len, off, &to, rank))?;
    if put {
        // SAFETY: the caller's promise.
        let mut data = unsafe { dt.pack(&o.buf, count) }?.into_owned();
        let mut at = 0;
        for &(off, len) in &runs {
            // SAFETY: `data` holds the runs' bytes, in order.
            unsafe { copy(&to, rank, off, data[at..].as_mut_ptr(), len as usize, true) }?;
            at += len as usize;
        }
    } else {
        let mut data = vec![0u8; span as usize];
        let mut at = 0;
        for &(off, len) in &runs {
            // SAFETY: as above, writable.
            unsafe { copy(&to, rank, off, data[at..].as_mut_ptr(), len as usize, false) }?;
            at += len as usize;
        }
        // SAFETY: the caller's promise.
        unsafe { dt.unpack(&data, o.buf, count) }?;
    }
    Ok(Some(rank))
}
