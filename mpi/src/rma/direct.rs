//! Direct access to a same-host target's window memory. `MPI_Win_allocate` puts each rank's
//! memory in a /dev/shm file (a header page holding a lock word and a token, then the window)
//! that every rank able to open it maps, so an origin on the target's host applies its
//! operations itself, under the target's lock word: no message, and no wait for a target
//! computing outside MPI. The target takes the same lock for the requests it serves (from
//! origins that could not map it), so accumulates stay atomic with respect to each other.
//! The window's lock (`MPI_Win_lock`) is a word of the header too: same-host origins take it
//! themselves, the target takes it for the origins that ask it by message.
//! A rank whose file cannot be made (no room in /dev/shm) keeps private memory and is
//! reached by messages only.

use std::ffi::c_int;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use reverb_transport::sys::shmfile;

use crate::abi::*;
use crate::coll;
use crate::errors::{MpiError, MpiResult};
use crate::ffi::UserBuf;
use crate::state::State;

use super::mem::{copy_run, Allocated};
use super::serve::apply_at;
use super::shared::{io, map, Mapping};
use super::win::Landing;
use super::wire::OpReq;

/// The header before the window memory: the lock word at 0, the window lock's word at
/// `STATE`, the token at `TOKEN`.
const HEADER: usize = 4096;
const STATE: usize = 4;
const TOKEN: usize = 8;
/// The window lock's word: this bit for an exclusive holder, else the count of shared ones.
const EXCLUSIVE: u32 = 1 << 31;
/// Lock attempts between yields (and clock reads, for the bound).
const SPINS: u32 = 64;

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A target's window memory as this rank maps it.
#[derive(Clone, Copy, Debug)]
pub struct Reach {
    pub base: usize,
    pub size: usize,
    /// The address of the target's lock word (in a mapping the window keeps).
    pub lock: usize,
}

impl Reach {
    fn state(&self) -> &AtomicU32 {
        // SAFETY: the second word of the header page (see `locked`), touched only atomically.
        unsafe { &*((self.lock + STATE) as *const AtomicU32) }
    }

    /// Takes the window's passive-target lock (`MPI_Win_lock`) if it is free; true if taken.
    pub fn try_lock(&self, exclusive: bool) -> bool {
        let state = self.state();
        let now = state.load(Ordering::Relaxed);
        let next = match exclusive {
            true if now == 0 => EXCLUSIVE,
            false if now & EXCLUSIVE == 0 => now + 1,
            _ => return false,
        };
        state.compare_exchange(now, next, Ordering::Acquire, Ordering::Relaxed).is_ok()
    }

    /// Gives back a lock `try_lock` took.
    pub fn unlock(&self, exclusive: bool) {
        if exclusive {
            self.state().store(0, Ordering::Release);
        } else {
            self.state().fetch_sub(1, Ordering::Release);
        }
    }
}

/// This rank's window memory: a shared file's mapping (and its path until the peers mapped
/// it), or private memory.
pub struct Own {
    memory: Result<Mapping, Allocated>,
    path: String,
    token: [u8; 16],
    size: usize,
}

impl Own {
    /// `size` zeroed bytes, in /dev/shm if it has room, else private. Named as reverb's other
    /// segments (the pid in the name), so a later start sweeps one a crash left before
    /// `connect` unlinked it.
    pub fn new(size: usize, rank: u32) -> MpiResult<Own> {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = shmfile::segment_path("mpiwin", rank, std::process::id(), &format!("wina{n}"));
        let path = path.to_string_lossy().into_owned();
        let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let mut token = [0; 16];
        token[..8].copy_from_slice(&(nanos as u64).to_le_bytes());
        token[8..12].copy_from_slice(&std::process::id().to_le_bytes());
        token[12..].copy_from_slice(&(n as u32).to_le_bytes());
        let memory = match shared_file(&path, HEADER + size) {
            Ok(m) => {
                // SAFETY: the header page of a fresh mapping of HEADER + size bytes.
                unsafe { std::ptr::copy_nonoverlapping(token.as_ptr(), (m.addr() + TOKEN) as *mut u8, 16) };
                Ok(m)
            }
            Err(_) => Err(Allocated::new(size)?),
        };
        Ok(Own { memory, path, token, size })
    }

    /// `size` zeroed bytes of private memory: no peer maps it.
    pub fn private(size: usize) -> MpiResult<Own> {
        Ok(Own { memory: Err(Allocated::new(size)?), path: String::new(), token: [0; 16], size })
    }

    pub fn base(&self) -> usize {
        match &self.memory {
            Ok(m) => m.addr() + HEADER,
            Err(a) => a.addr(),
        }
    }

    fn reach(&self) -> Option<Reach> {
        let m = self.memory.as_ref().ok()?;
        Some(Reach { base: m.addr() + HEADER, size: self.size, lock: m.addr() })
    }

    /// What a peer needs to map it: token, size, path; empty for private memory.
    fn card(&self) -> Vec<u8> {
        if self.memory.is_err() {
            return Vec::new();
        }
        let mut b = self.token.to_vec();
        b.extend_from_slice(&(self.size as u64).to_le_bytes());
        b.extend_from_slice(self.path.as_bytes());
        b
    }
}

impl Drop for Own {
    /// The file goes if `connect` never took it away (a creation that failed halfway).
    fn drop(&mut self) {
        if self.memory.is_ok() {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// A new file at `path` of `len` bytes for this user alone (mode 0600), its blocks reserved (a
/// full /dev/shm fails here, not with SIGBUS at a later store), mapped; unlinked again if that
/// fails.
fn shared_file(path: &str, len: usize) -> MpiResult<Mapping> {
    let at = std::path::Path::new(path);
    let file = shmfile::create_private(at, |_| None).map_err(|e| io(path, e))?;
    if let Err(e) = shmfile::size_reserved(&file, at, len as u64) {
        let _ = std::fs::remove_file(path);
        return Err(io(path, e));
    }
    let mapped = map(path, len);
    if mapped.is_err() {
        let _ = std::fs::remove_file(path);
    }
    mapped
}

/// A peer's card mapped, if this rank can open its file and the token matches (the same
/// path on another host, or in another mount namespace, is another file).
fn reach_peer(card: &[u8]) -> Option<(Reach, Mapping)> {
    let token = card.get(..16)?;
    let size = usize::try_from(u64::from_le_bytes(card.get(16..24)?.try_into().ok()?)).ok()?;
    let path = std::str::from_utf8(card.get(24..)?).ok()?;
    let m = map(path, HEADER + size).ok()?;
    // SAFETY: the header page of the mapping just made (HEADER + size bytes).
    let theirs = unsafe { std::slice::from_raw_parts((m.addr() + TOKEN) as *const u8, 16) };
    (theirs == token).then(|| (Reach { base: m.addr() + HEADER, size, lock: m.addr() }, m))
}

/// Collective on window `h` (made over `own`'s memory): every rank maps the files of the
/// others it can open; then the files go from /dev/shm (the mappings stay).
pub fn connect(s: &mut State, h: c_int, own: Own) -> MpiResult<()> {
    let (comm, g) = (s.win(h)?.comm, s.win(h)?.group());
    let cards = coll::allgather_bytes(s, comm, &own.card())?;
    let mut reach = vec![None; g.ranks.len()];
    let mut peers = Vec::new();
    for (r, card) in cards.iter().enumerate() {
        if r == g.me {
            reach[r] = own.reach();
        } else if let Some((at, m)) = reach_peer(card) {
            reach[r] = Some(at);
            peers.push(m);
        }
    }
    coll::barrier(s, &g)?;
    if own.memory.is_ok() {
        let _ = std::fs::remove_file(&own.path);
    }
    let w = s.win_mut(h)?;
    w.reach = reach;
    w.keep(Box::new((own, peers)));
    Ok(())
}

/// Runs `f` holding the lock word at `lock`, waiting for it at most `bound`.
pub fn locked<R>(lock: usize, bound: Duration, f: impl FnOnce() -> MpiResult<R>) -> MpiResult<R> {
    // SAFETY: the page-aligned first word of a header page in a mapping the window keeps
    // for its lifetime; every rank touches it only atomically.
    let word = unsafe { &*(lock as *const AtomicU32) };
    let mut spins = 0u32;
    let mut since = None;
    while word.compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed).is_err() {
        spins += 1;
        if !spins.is_multiple_of(SPINS) {
            std::hint::spin_loop();
            continue;
        }
        // A holder descheduled (more ranks than cores) needs the core.
        std::thread::yield_now();
        if since.get_or_insert_with(Instant::now).elapsed() > bound {
            return Err(MpiError::new(
                MPI_ERR_OTHER,
                format!("a window's lock word stayed taken for {bound:?} (a rank died holding it?)"),
            ));
        }
    }
    let out = f();
    word.store(0, Ordering::Release);
    out
}

/// A put (`to_target`) or get of `len` contiguous bytes at `off` of the mapped target `to`,
/// copied straight between the program's buffer and the target's memory. Without the lock
/// word: MPI makes only accumulates atomic; a put or get that overlaps a concurrent update has
/// an undefined outcome (MPI 4.0, 12.7), as Open MPI's and MPICH's shared-memory paths leave it.
///
/// # Safety
/// `buf` holds `len` bytes, readable for a put, writable for a get, for the call.
pub unsafe fn copy_plain(to: Reach, off: u64, buf: UserBuf, len: usize, to_target: bool) -> MpiResult<()> {
    if off.checked_add(len as u64).is_none_or(|e| e > to.size as u64) {
        return Err(MpiError::new(
            MPI_ERR_RMA_RANGE,
            format!("{len} bytes at {off} outside the target window's {} bytes", to.size),
        ));
    }
    // SAFETY: the run is inside the target's window (above); the buffer is the caller's promise.
    unsafe { copy_run(to.base, off, buf, len, to_target) }
}

/// Applies `req` to the target memory at `to` now; a reply's bytes land in `into`.
pub fn apply(s: &State, to: Reach, req: OpReq, into: Option<Landing>) -> MpiResult<()> {
    let outside =
        req.runs.iter().find(|r| r.1 > 0 && r.0.checked_add(r.1).is_none_or(|e| e > to.size as u64));
    if let Some((off, len)) = outside {
        return Err(MpiError::new(
            MPI_ERR_RMA_RANGE,
            format!("{len} bytes at {off} outside the target window's {} bytes", to.size),
        ));
    }
    let data = locked(to.lock, s.rt.config().recv_timeout, || apply_at(to.base, req))?;
    if let Some((buf, dt, count)) = into {
        // SAFETY: the origin buffer of a get (or a fetching accumulate), the program's until
        // the epoch's synchronization, which this operation completes before.
        unsafe { dt.unpack(&data, buf, count) }?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_lock_word_admits_readers_or_one_writer() {
        let own = Own::new(64, 0).unwrap();
        let at = own.reach().expect("/dev/shm has room for a page");
        assert!(at.try_lock(false) && at.try_lock(false) && !at.try_lock(true));
        at.unlock(false);
        assert!(!at.try_lock(true));
        at.unlock(false);
        assert!(at.try_lock(true) && !at.try_lock(false) && !at.try_lock(true));
        at.unlock(true);
        assert!(at.try_lock(false));
    }

    #[test]
    fn a_peer_maps_the_file_only_with_its_token() {
        let own = Own::new(64, 0).unwrap();
        let card = own.card();
        let (peer, _mapping) = reach_peer(&card).expect("the same file, mapped again");
        assert_eq!((peer.size, peer.base % 4096), (64, 0));
        // A byte stored through one mapping is seen through the other.
        // SAFETY: byte 5 of the 64 window bytes, in both mappings (alive to the end).
        unsafe { *(own.base() as *mut u8).add(5) = 42 };
        // SAFETY: as above.
        assert_eq!(unsafe { *(peer.base as *const u8).add(5) }, 42);
        let mut forged = card.clone();
        forged[0] ^= 1;
        assert!(reach_peer(&forged).is_none());
        // The lock word taken through the peer's mapping is taken through the owner's too.
        let own_lock = own.reach().unwrap().lock;
        let inner = locked(peer.lock, Duration::from_secs(1), || {
            Ok(locked(own_lock, Duration::from_millis(20), || Ok(())))
        });
        assert!(inner.unwrap().is_err(), "a lock word held elsewhere times out");
    }
}
