//! What MPICH's Fortran binding needs of the C library besides the MPI functions. A Fortran
//! program built by `mpif77.mpich` / `mpif90.mpich` loads Debian's `libmpichfort.so.12`, whose
//! wrappers (`mpi_send_`, ...) call the C functions `MPI_X` of whichever `libmpich.so.12` is
//! loaded, so under `reverb run --mpi` reverb's. Beyond those functions it links:
//!
//! - data: `MPI_F_STATUS(ES)_IGNORE`, which its `mpirinitc_` sets to the addresses Fortran's
//!   `MPI_STATUS(ES)_IGNORE` have, `MPI_UNWEIGHTED` and `MPI_WEIGHTS_EMPTY`, which it passes
//!   for Fortran's, and `MPI_F08_STATUS(ES)_IGNORE` (here);
//! - MPICH's internal helpers: attributes whose values are Fortran integers and keyvals whose
//!   callbacks are Fortran subroutines (`fortran/attr.rs`), generalized requests whose
//!   callbacks are (`fortran/greq.rs`).
//!
//! Here too: the C calls that convert statuses between the languages (`MPI_Status_f2c`, ...)
//! and `MPI_File_f2c`/`_c2f`. The other handle conversions (`MPI_Comm_f2c`, ...) are macros
//! in MPICH's mpi.h: its handles are Fortran integers already.

pub(crate) mod attr;
mod greq;

use std::ffi::{c_int, c_void};
use std::ptr::{addr_of, null_mut};
use std::sync::atomic::{AtomicI32, AtomicPtr, Ordering};

use crate::abi::*;
use crate::errors::{MpiError, MpiResult};
use crate::ffi::{self, In, Out};
use crate::request::CStatus;

/// `MPI_Fint *MPI_F_STATUS_IGNORE` (mpi.h): Fortran's `MPI_STATUS_IGNORE` as C sees it, the
/// address of libmpichfort's common block; null until its first wrapper runs (`mpirinitc_`).
#[no_mangle]
pub static MPI_F_STATUS_IGNORE: AtomicPtr<c_int> = AtomicPtr::new(null_mut());
/// `MPI_Fint *MPI_F_STATUSES_IGNORE`, as `MPI_F_STATUS_IGNORE`.
#[no_mangle]
pub static MPI_F_STATUSES_IGNORE: AtomicPtr<c_int> = AtomicPtr::new(null_mut());

/// What `MPI_UNWEIGHTED` and `MPI_WEIGHTS_EMPTY` point at: two distinct addresses no array
/// of the program has (MPICH's `MPIR_C_MPI_UNWEIGHTED`, `_WEIGHTS_EMPTY`).
static UNWEIGHTED: AtomicI32 = AtomicI32::new(0);
static WEIGHTS_EMPTY: AtomicI32 = AtomicI32::new(0);

/// `int * const MPI_UNWEIGHTED` (mpi.h): a graph's weights are absent. Never stored to.
#[no_mangle]
pub static MPI_UNWEIGHTED: AtomicPtr<c_int> = AtomicPtr::new(addr_of!(UNWEIGHTED).cast_mut().cast());
/// `int * const MPI_WEIGHTS_EMPTY` (mpi.h): a rank has no edges whose weights to give.
#[no_mangle]
pub static MPI_WEIGHTS_EMPTY: AtomicPtr<c_int> = AtomicPtr::new(addr_of!(WEIGHTS_EMPTY).cast_mut().cast());

/// What `MPI_F08_STATUS(ES)_IGNORE` point at. MPICH points them at objects the `mpi_f08`
/// module shares with libmpichfort (which defines its own copies); reverb does not test the
/// F08 binding, and its special statuses may reach reverb as ordinary ones.
static F08_STATUS_IGNORE: AtomicI32 = AtomicI32::new(0);
static F08_STATUSES_IGNORE: AtomicI32 = AtomicI32::new(0);
/// `MPI_F08_status *MPI_F08_STATUS_IGNORE` (mpi.h).
#[no_mangle]
pub static MPI_F08_STATUS_IGNORE: AtomicPtr<c_void> =
    AtomicPtr::new(addr_of!(F08_STATUS_IGNORE).cast_mut().cast());
/// `MPI_F08_status *MPI_F08_STATUSES_IGNORE` (mpi.h).
#[no_mangle]
pub static MPI_F08_STATUSES_IGNORE: AtomicPtr<c_void> =
    AtomicPtr::new(addr_of!(F08_STATUSES_IGNORE).cast_mut().cast());

/// A Fortran status (`INTEGER STATUS(MPI_STATUS_SIZE)`) and an `mpi_f08` one
/// (`TYPE(MPI_Status)`) are MPICH's C status, integer for integer: `MPI_Status_f2c` and the
/// others copy it, after checking that the source is not an "ignore" address, which has no
/// status to convert (MPI 4.0, 19.3.5).
fn convert(from: In<'_, CStatus>, to: Out<'_, CStatus>, ignore: *const c_void, what: &str) -> MpiResult<()> {
    let ignored = from.addr() == ffi::STATUS_IGNORE || (!ignore.is_null() && from.addr() == ignore as usize);
    if ignored {
        return Err(MpiError::new(
            MPI_ERR_OTHER,
            format!("{what} of MPI_STATUS_IGNORE: no status to convert"),
        ));
    }
    ffi::out(to, ffi::read(from, "status")?, "status")
}

/// The conversions need no state (they work before MPI_Init and inside callbacks), so an
/// error takes MPI's default handler: fatal.
fn status_call(what: &str, r: MpiResult<()>) -> c_int {
    r.map_or_else(|e| crate::errors::handle(MPI_ERRORS_ARE_FATAL, what, e), |()| MPI_SUCCESS)
}

pub(crate) unsafe fn mpi_status_c2f(c_status: In<'_, CStatus>, f_status: Out<'_, CStatus>) -> c_int {
    status_call("MPI_Status_c2f", convert(c_status, f_status, null_mut(), "MPI_Status_c2f"))
}

pub(crate) unsafe fn mpi_status_f2c(f_status: In<'_, CStatus>, c_status: Out<'_, CStatus>) -> c_int {
    let ignore = MPI_F_STATUS_IGNORE.load(Ordering::Relaxed).cast::<c_void>();
    status_call("MPI_Status_f2c", convert(f_status, c_status, ignore, "MPI_Status_f2c"))
}

pub(crate) unsafe fn mpi_status_c2f08(c_status: In<'_, CStatus>, f08_status: Out<'_, CStatus>) -> c_int {
    status_call("MPI_Status_c2f08", convert(c_status, f08_status, null_mut(), "MPI_Status_c2f08"))
}

pub(crate) unsafe fn mpi_status_f082c(f08_status: In<'_, CStatus>, c_status: Out<'_, CStatus>) -> c_int {
    let ignore = MPI_F08_STATUS_IGNORE.load(Ordering::Relaxed);
    status_call("MPI_Status_f082c", convert(f08_status, c_status, ignore, "MPI_Status_f082c"))
}

pub(crate) unsafe fn mpi_status_f082f(f08_status: In<'_, CStatus>, f_status: Out<'_, CStatus>) -> c_int {
    let ignore = MPI_F08_STATUS_IGNORE.load(Ordering::Relaxed);
    status_call("MPI_Status_f082f", convert(f08_status, f_status, ignore, "MPI_Status_f082f"))
}

pub(crate) unsafe fn mpi_status_f2f08(f_status: In<'_, CStatus>, f08_status: Out<'_, CStatus>) -> c_int {
    let ignore = MPI_F_STATUS_IGNORE.load(Ordering::Relaxed).cast::<c_void>();
    status_call("MPI_Status_f2f08", convert(f_status, f08_status, ignore, "MPI_Status_f2f08"))
}

/// `MPI_File_f2c`: reverb opens no files (MPI-IO is a stub), so every Fortran file handle is
/// `MPI_FILE_NULL`, a null `MPI_File`. libmpichfort's `MPI_FILE_*` wrappers convert first, then
/// reach the stub, which names the call.
pub(crate) fn mpi_file_f2c(_file: c_int) -> *mut c_void {
    null_mut()
}

/// `MPI_File_c2f`: the Fortran handle of `MPI_FILE_NULL`, the only file there is.
pub(crate) unsafe fn mpi_file_c2f(_file: *mut c_void) -> c_int {
    0
}
