//! Attributes a program puts on windows: kept on the window's private communicator with the
//! communicators' keyvals (MPICH's C signatures are the same with a window handle). The
//! predefined window attributes are `win.rs`'s.

use std::ffi::{c_int, c_void};

use crate::abi::*;
use crate::attr::{self, CopyFn, DeleteFn};
use crate::ffi::Out;
use crate::state::call;

/// The private communicator of window `win` (MPI_COMM_NULL if it is none).
fn comm_of(win: c_int) -> c_int {
    let mut comm = MPI_COMM_NULL;
    call("MPI_Win_*_attr", MPI_COMM_WORLD, |s| {
        comm = s.wins.get(win).map_or(MPI_COMM_NULL, |w| w.comm);
        Ok(())
    });
    comm
}

pub(crate) unsafe fn mpi_win_create_keyval(
    copy: Option<CopyFn>,
    delete: Option<DeleteFn>,
    keyval: Out<'_, c_int>,
    extra_state: *mut c_void,
) -> c_int {
    // SAFETY: this call's pointer arguments, passed on under the same contract.
    unsafe { attr::mpi_comm_create_keyval(copy, delete, keyval, extra_state) }
}

pub(crate) unsafe fn mpi_win_free_keyval(keyval: Out<'_, c_int>) -> c_int {
    // SAFETY: this call's pointer arguments, passed on under the same contract.
    unsafe { attr::mpi_comm_free_keyval(keyval) }
}

pub(crate) unsafe fn mpi_win_set_attr(win: c_int, keyval: c_int, value: *mut c_void) -> c_int {
    let comm = comm_of(win);
    call("MPI_Win_set_attr", comm, |s| {
        s.win(win)?;
        attr::set_attribute(s, comm, keyval, value as usize, attr::AttrKind::Ptr)
    })
}

pub(crate) fn mpi_win_delete_attr(win: c_int, keyval: c_int) -> c_int {
    let comm = comm_of(win);
    if comm == MPI_COMM_NULL {
        return call("MPI_Win_delete_attr", comm, |s| s.win(win).map(|_| ()));
    }
    attr::mpi_comm_delete_attr(comm, keyval)
}
