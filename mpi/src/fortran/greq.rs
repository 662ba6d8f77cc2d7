//! Generalized requests started from Fortran. libmpichfort's `MPI_GREQUEST_START` passes the
//! program's Fortran subroutines as the C callbacks and then calls
//! `MPII_Grequest_set_lang_f77`: from then on they are called as Fortran calls them, every
//! argument by reference and the error code in a last `ierror` argument. Here the request's
//! callbacks become shims that make those calls, and its `extra_state` the shims' record of
//! the subroutines and the program's state (freed by the free shim, which runs once).

use std::ffi::{c_int, c_void};

use crate::abi::*;
use crate::request::{CStatus, CancelFn, FreeFn, QueryFn, Request};
use crate::state::call;

/// `SUBROUTINE GREQUEST_QUERY_FUNCTION(EXTRA_STATE, STATUS, IERROR)`.
type FortranQuery = unsafe extern "C" fn(*mut c_void, *mut CStatus, *mut c_int);
/// `SUBROUTINE GREQUEST_FREE_FUNCTION(EXTRA_STATE, IERROR)`.
type FortranFree = unsafe extern "C" fn(*mut c_void, *mut c_int);
/// `SUBROUTINE GREQUEST_CANCEL_FUNCTION(EXTRA_STATE, COMPLETE, IERROR)`.
type FortranCancel = unsafe extern "C" fn(*mut c_void, *mut c_int, *mut c_int);

/// A Fortran request's subroutines and the address of its `EXTRA_STATE` variable.
struct Subroutines {
    query: Option<FortranQuery>,
    free: Option<FortranFree>,
    cancel: Option<FortranCancel>,
    extra_state: *mut c_void,
}

/// Marks generalized request `request` as started from Fortran (MPICH's helper; `void`).
#[no_mangle]
pub extern "C" fn MPII_Grequest_set_lang_f77(request: c_int) {
    let _ignored = call("MPI_Grequest_start", MPI_COMM_WORLD, |s| {
        if let Some(Request::Generalized(g)) = s.requests.get_mut(request) {
            // SAFETY: libmpichfort passed Fortran subroutines of these shapes as the C
            // callbacks; only the shims call them, and as Fortran subroutines.
            let subroutines = unsafe {
                Subroutines {
                    query: g.query.map(|f| std::mem::transmute::<QueryFn, FortranQuery>(f)),
                    free: g.free.map(|f| std::mem::transmute::<FreeFn, FortranFree>(f)),
                    cancel: g.cancel.map(|f| std::mem::transmute::<CancelFn, FortranCancel>(f)),
                    extra_state: g.extra_state,
                }
            };
            g.extra_state = Box::into_raw(Box::new(subroutines)).cast();
            g.query = Some(query_shim);
            g.free = Some(free_shim);
            g.cancel = Some(cancel_shim);
        }
        Ok(())
    });
}

/// # Safety
///
/// `state` is the record `MPII_Grequest_set_lang_f77` made, not yet freed; `status` is
/// readable and writable for the call.
unsafe extern "C" fn query_shim(state: *mut c_void, status: *mut CStatus) -> c_int {
    // SAFETY: the record this request's extra state points at (the caller's promise).
    let s = unsafe { &*state.cast::<Subroutines>() };
    let Some(query) = s.query else { return MPI_SUCCESS };
    // A Fortran status is a C status, integer for integer (MPICH): no conversion.
    // SAFETY: the status the library passes is valid for the call (the caller's promise).
    let mut f_status = unsafe { status.read() };
    let mut ierror = MPI_SUCCESS;
    // SAFETY: the program's query subroutine, its state and two variables, by reference.
    unsafe { query(s.extra_state, &mut f_status, &mut ierror) };
    if ierror == MPI_SUCCESS {
        // SAFETY: as above.
        unsafe { status.write(f_status) };
    }
    ierror
}

/// # Safety
///
/// `state` is the record `MPII_Grequest_set_lang_f77` made, not yet freed; it is freed here.
unsafe extern "C" fn free_shim(state: *mut c_void) -> c_int {
    // SAFETY: the record, made by `Box::into_raw`, and this is its one free (the library calls
    // a generalized request's free function once).
    let s = unsafe { Box::from_raw(state.cast::<Subroutines>()) };
    let Some(free) = s.free else { return MPI_SUCCESS };
    let mut ierror = MPI_SUCCESS;
    // SAFETY: the program's free subroutine, its state and a variable, by reference.
    unsafe { free(s.extra_state, &mut ierror) };
    ierror
}

/// # Safety
///
/// `state` is the record `MPII_Grequest_set_lang_f77` made, not yet freed.
unsafe extern "C" fn cancel_shim(state: *mut c_void, complete: c_int) -> c_int {
    // SAFETY: the record this request's extra state points at (the caller's promise).
    let s = unsafe { &*state.cast::<Subroutines>() };
    let Some(cancel) = s.cancel else { return MPI_SUCCESS };
    // LOGICAL COMPLETE: gfortran's .TRUE. is 1.
    let (mut complete, mut ierror) = (c_int::from(complete != 0), MPI_SUCCESS);
    // SAFETY: the program's cancel subroutine, its state and two variables, by reference.
    unsafe { cancel(s.extra_state, &mut complete, &mut ierror) };
    ierror
}
