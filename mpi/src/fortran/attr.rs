//! MPICH's attribute helpers for its Fortran binding. libmpichfort's `MPI_COMM_SET_ATTR`
//! (`MPI_ATTR_PUT`) passes the integer value with its kind (`MPIR_Attr_type`: `INTEGER` or
//! `INTEGER(KIND=MPI_ADDRESS_KIND)`), `MPI_COMM_GET_ATTR` (`MPI_ATTR_GET`) asks for the value
//! as that kind (a predefined attribute's value itself, where C gets a pointer to it), and
//! every keyval created from Fortran has its callbacks called through the binding's proxies
//! (`MPII_Keyval_set_proxy`). Datatype and window attributes go to `MPI_Type_*_attr` /
//! `MPI_Win_*_attr` as they are: their values round-trip, Fortran to Fortran.

use std::ffi::{c_int, c_void};

use crate::abi::*;
use crate::attr::{self, AttrKind, CopyProxy, DeleteProxy};
use crate::ffi::{self, Out};
use crate::state::call;

pub(crate) unsafe fn mpii_comm_set_attr(
    comm: c_int,
    keyval: c_int,
    value: *mut c_void,
    kind: c_int,
) -> c_int {
    call("MPI_Comm_set_attr", comm, |s| {
        attr::set_attribute(s, comm, keyval, value as usize, AttrKind::from_mpich(kind)?)
    })
}

pub(crate) unsafe fn mpii_comm_get_attr(
    comm: c_int,
    keyval: c_int,
    value: Out<'_, usize>,
    flag: Out<'_, c_int>,
    kind: c_int,
) -> c_int {
    call("MPI_Comm_get_attr", comm, |s| {
        let kind = AttrKind::from_mpich(kind)?;
        let predefined = crate::init::predefined_attribute(s, keyval)?;
        s.comm(comm)?;
        let found = match predefined {
            // C gets a pointer to the value, Fortran the value (sign-extended, as MPICH).
            Some((at, _)) if kind == AttrKind::Ptr => Some(at as usize),
            Some((_, v)) => Some(v as isize as usize),
            None => attr::user_attribute(s, comm, keyval, kind),
        };
        match found {
            Some(v) => {
                ffi::out(value, v, "attribute_val")?;
                ffi::out(flag, 1, "flag")
            }
            None => ffi::out(flag, 0, "flag"),
        }
    })
}

/// Has `keyval`'s copy and delete callbacks called through MPICH's language proxies. MPICH
/// ignores a keyval it does not know, as here (a datatype's or window's).
#[no_mangle]
pub extern "C" fn MPII_Keyval_set_proxy(keyval: c_int, copy: Option<CopyProxy>, delete: Option<DeleteProxy>) {
    if let (Some(copy), Some(delete)) = (copy, delete) {
        let _ignored = call("MPII_Keyval_set_proxy", MPI_COMM_WORLD, |s| {
            if s.keyvals.keys.contains_key(&keyval) {
                attr::set_proxy(s, keyval, (copy, delete))?;
            }
            Ok(())
        });
    }
}

pub(crate) unsafe fn mpii_type_set_attr(
    datatype: c_int,
    keyval: c_int,
    value: *mut c_void,
    _kind: c_int,
) -> c_int {
    // SAFETY: MPI_Type_set_attr's own arguments, under the same contract.
    unsafe { crate::type_attr::mpi_type_set_attr(datatype, keyval, value) }
}

pub(crate) unsafe fn mpii_type_get_attr(
    datatype: c_int,
    keyval: c_int,
    value: Out<'_, usize>,
    flag: Out<'_, c_int>,
    _kind: c_int,
) -> c_int {
    // SAFETY: MPI_Type_get_attr's own arguments, under the same contract.
    unsafe { crate::type_attr::mpi_type_get_attr(datatype, keyval, value, flag) }
}

pub(crate) unsafe fn mpii_win_set_attr(win: c_int, keyval: c_int, value: *mut c_void, _kind: c_int) -> c_int {
    // SAFETY: MPI_Win_set_attr's own arguments, under the same contract.
    unsafe { crate::rma::attr::mpi_win_set_attr(win, keyval, value) }
}

pub(crate) unsafe fn mpii_win_get_attr(
    win: c_int,
    keyval: c_int,
    value: Out<'_, usize>,
    flag: Out<'_, c_int>,
    _kind: c_int,
) -> c_int {
    // SAFETY: MPI_Win_get_attr's own arguments, under the same contract.
    unsafe { crate::rma::win::mpi_win_get_attr(win, keyval, value, flag) }
}
