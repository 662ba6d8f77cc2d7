//! Shared-memory windows (`MPI_Win_allocate_shared`, `MPI_Win_shared_query`): one file in
//! /dev/shm that every rank of the communicator maps, each rank's part after the previous
//! one's, so a rank loads and stores its neighbours' parts directly. Operations on such a
//! window still go through the target (`serve`), which sees the same memory. The ranks must
//! share a host (MPI asks for a communicator whose ranks can share memory).

use std::ffi::{c_int, c_long, c_void};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::abi::*;
use crate::coll;
use crate::errors::{MpiError, MpiResult};
use crate::ffi::{self, Out};
use crate::state::{call, State};

use super::win::{create, win_call, FLAVOR_SHARED};

/// A shared mapping, unmapped on drop.
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    pub fn addr(&self) -> usize {
        self.ptr as usize
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: mapped by `map` with this length, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

pub(super) fn io(what: &str, e: std::io::Error) -> MpiError {
    MpiError::new(MPI_ERR_NO_MEM, format!("a shared window's memory: {what}: {e}"))
}

/// Maps `len` bytes of the file at `path` shared.
pub(super) fn map(path: &str, len: usize) -> MpiResult<Mapping> {
    let file = std::fs::OpenOptions::new().read(true).write(true).open(path).map_err(|e| io(path, e))?;
    // SAFETY: a fresh mapping of an open file the size of `len` (set by its creator); the
    // kernel picks the address.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return Err(io("mmap", std::io::Error::last_os_error()));
    }
    Ok(Mapping { ptr: ptr.cast(), len })
}

fn le_u64(b: &[u8]) -> MpiResult<u64> {
    let bad = || MpiError::new(MPI_ERR_INTERN, "a shared window's size of the wrong length");
    b.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes).ok_or_else(bad)
}

static NEXT: AtomicU64 = AtomicU64::new(0);

/// The collective part: sizes agreed, rank 0's file created, mapped everywhere, unlinked.
fn allocate(s: &mut State, comm: c_int, size: usize, disp_unit: c_int) -> MpiResult<(c_int, usize)> {
    super::win::refuse_restarted(s, comm, FLAVOR_SHARED)?;
    let sizes = coll::allgather_bytes(s, comm, &(size as u64).to_le_bytes())?;
    let sizes = sizes.iter().map(|b| le_u64(b).map(|n| n as usize)).collect::<MpiResult<Vec<_>>>()?;
    let me = s.comm(comm)?.me as usize;
    let total = sizes.iter().sum::<usize>().max(1).next_multiple_of(4096);
    // The creator's pid: unique among the jobs on this host.
    let path = format!("/dev/shm/reverb-win-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
    let mut created = Ok(());
    if me == 0 {
        let file = std::fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path);
        created = file.and_then(|f| f.set_len(total as u64)).map_err(|e| io(&path, e));
    }
    // An empty name tells the others rank 0 could not create the file.
    let shared_name = if created.is_ok() { path.as_bytes() } else { &[][..] };
    let names = coll::allgather_bytes(s, comm, shared_name)?;
    created?;
    let path = String::from_utf8_lossy(names.first().map_or(&[][..], Vec::as_slice)).into_owned();
    if path.is_empty() {
        return Err(MpiError::new(MPI_ERR_NO_MEM, "rank 0 could not create a shared window's memory"));
    }
    let mapping = map(&path, total);
    let g = coll::Group::of(s, comm)?;
    coll::barrier(s, &g)?;
    if me == 0 {
        let _ = std::fs::remove_file(&path);
    }
    let mapping = mapping?;
    let offsets: Vec<usize> = sizes.iter().scan(0, |at, &n| Some(std::mem::replace(at, *at + n))).collect();
    let base = mapping.ptr as usize + offsets[me];
    let h = create(s, comm, base, size, disp_unit, FLAVOR_SHARED)?;
    let w = s.win_mut(h)?;
    w.shared = offsets.iter().zip(&sizes).map(|(&o, &n)| (mapping.ptr as usize + o, n)).collect();
    w.keep(Box::new(mapping));
    Ok((h, base))
}

pub(crate) unsafe fn mpi_win_allocate_shared(
    size: c_long,
    disp_unit: c_int,
    _info: c_int,
    comm: c_int,
    baseptr: Out<'_, *mut c_void>,
    win: Out<'_, c_int>,
) -> c_int {
    call("MPI_Win_allocate_shared", comm, |s| {
        let size =
            usize::try_from(size).map_err(|_| MpiError::new(MPI_ERR_SIZE, format!("window size {size}")))?;
        let (h, base) = allocate(s, comm, size, disp_unit)?;
        ffi::out(baseptr, base as *mut c_void, "baseptr")?;
        ffi::out(win, h, "win")
    })
}

pub(crate) unsafe fn mpi_win_shared_query(
    win: c_int,
    rank: c_int,
    size: Out<'_, c_long>,
    disp_unit: Out<'_, c_int>,
    baseptr: Out<'_, *mut c_void>,
) -> c_int {
    win_call("MPI_Win_shared_query", win, |s| {
        let w = s.win(win)?;
        if w.shared.is_empty() {
            return Err(MpiError::new(
                MPI_ERR_RMA_FLAVOR,
                "MPI_Win_shared_query on a window not made shared",
            ));
        }
        let r = if rank == MPI_PROC_NULL {
            w.shared.iter().position(|p| p.1 > 0).unwrap_or(0)
        } else {
            usize::try_from(rank).ok().filter(|&r| r < w.shared.len()).ok_or_else(|| {
                MpiError::new(MPI_ERR_RANK, format!("rank {rank} outside a window of {}", w.shared.len()))
            })?
        };
        let ((addr, n), unit) = (w.shared[r], w.disp_units[r]);
        ffi::out(size, n as c_long, "size")?;
        ffi::out(disp_unit, unit, "disp_unit")?;
        ffi::out(baseptr, addr as *mut c_void, "baseptr")
    })
}
