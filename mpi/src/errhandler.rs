//! A program's error handlers (`MPI_Comm_create_errhandler`, `MPI_Comm_call_errhandler`, and
//! the window and file forms) and its own error classes, codes and strings
//! (`MPI_Add_error_class`, `_code`, `_string`).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::{c_char, c_int};

use crate::abi::*;
use crate::errors::{MpiError, MpiResult};
use crate::ffi;
use crate::ffi::Out;
use crate::state::call;

/// `MPI_Comm_errhandler_function` (also the window and file forms): (handle *, code *, ...);
/// called with the two fixed arguments only, as MPICH does.
pub type HandlerFn = unsafe extern "C" fn(*mut c_int, *mut c_int);

/// Handles of the program's error handlers (MPICH's dynamic errhandler kind).
const HANDLER_BASE: c_int = 0x9400_0000_u32 as c_int;
/// The program's error classes and codes are numbered from here: above `MPI_ERR_LASTCODE`, so
/// `MPI_LASTUSEDCODE` is never below it (as MPICH, whose `baseattrf` test checks it).
const FIRST_DYNAMIC: c_int = MPI_ERR_LASTCODE + 1;

#[derive(Default)]
struct Registry {
    /// Error handlers by handle. A freed one stays: communicators set to it keep calling it
    /// (MPI frees it when the last goes), and each is a pointer's worth of memory.
    handlers: BTreeMap<c_int, HandlerFn>,
    /// Every dynamic class and code → its class (a class is its own).
    classes: BTreeMap<c_int, c_int>,
    strings: BTreeMap<c_int, String>,
}

thread_local! {
    // Per thread like the library's state: MPI is funneled through one thread.
    static REGISTRY: RefCell<Registry> = RefCell::new(Registry::default());
}

/// A program's handler named by `h`, if `h` is one.
pub fn user_handler(h: c_int) -> Option<HandlerFn> {
    REGISTRY.with(|r| r.borrow().handlers.get(&h).copied())
}

/// Whether `h` names an error handler (predefined or the program's).
pub fn is_handler(h: c_int) -> bool {
    [MPI_ERRORS_ARE_FATAL, MPI_ERRORS_RETURN, MPI_ERRORS_ABORT].contains(&h) || user_handler(h).is_some()
}

/// The class of `code`: a dynamic code's class, else the code (predefined codes are classes).
pub fn class_of(code: c_int) -> c_int {
    REGISTRY.with(|r| r.borrow().classes.get(&code).copied()).unwrap_or(code)
}

/// The string `MPI_Add_error_string` gave `code`; "" for a dynamic class or code without one.
pub fn dynamic_string(code: c_int) -> Option<String> {
    REGISTRY.with(|r| {
        let r = r.borrow();
        r.strings.get(&code).cloned().or_else(|| r.classes.contains_key(&code).then(String::new))
    })
}

/// The largest error code in use: `MPI_LASTUSEDCODE`'s value.
pub fn last_used_code() -> c_int {
    REGISTRY.with(|r| r.borrow().classes.keys().next_back().copied()).unwrap_or(MPI_ERR_LASTCODE)
}

fn new_code(class: Option<c_int>) -> MpiResult<c_int> {
    REGISTRY.with(|r| {
        let mut r = r.borrow_mut();
        let next = r.classes.keys().next_back().map_or(Some(FIRST_DYNAMIC), |&c| c.checked_add(1));
        let Some(code) = next else {
            return Err(MpiError::new(MPI_ERR_OTHER, "out of error codes"));
        };
        r.classes.insert(code, class.unwrap_or(code));
        Ok(code)
    })
}

fn create(function: &str, f: Option<HandlerFn>, out: Out<'_, c_int>) -> c_int {
    call(function, MPI_COMM_WORLD, |_| {
        let f = f.ok_or_else(|| MpiError::new(MPI_ERR_ARG, "a NULL error handler function"))?;
        let h = REGISTRY.with(|r| {
            let mut r = r.borrow_mut();
            let h = HANDLER_BASE + r.handlers.len() as c_int;
            r.handlers.insert(h, f);
            h
        });
        ffi::out(out, h, "errhandler")
    })
}

pub(crate) unsafe fn mpi_comm_create_errhandler(f: Option<HandlerFn>, errhandler: Out<'_, c_int>) -> c_int {
    create("MPI_Comm_create_errhandler", f, errhandler)
}

pub(crate) unsafe fn mpi_errhandler_create(f: Option<HandlerFn>, errhandler: Out<'_, c_int>) -> c_int {
    create("MPI_Errhandler_create", f, errhandler)
}

/// A window's handler: made like a communicator's, called with the window's handle.
pub(crate) unsafe fn mpi_win_create_errhandler(f: Option<HandlerFn>, errhandler: Out<'_, c_int>) -> c_int {
    create("MPI_Win_create_errhandler", f, errhandler)
}

/// A file's handler: made like a communicator's (reverb has no MPI-IO files yet).
pub(crate) unsafe fn mpi_file_create_errhandler(f: Option<HandlerFn>, errhandler: Out<'_, c_int>) -> c_int {
    create("MPI_File_create_errhandler", f, errhandler)
}

/// Invokes `comm`'s error handler on `code` as an error inside a call on `comm` would.
pub(crate) fn mpi_comm_call_errhandler(comm: c_int, code: c_int) -> c_int {
    let mut handler = MPI_ERRORS_ARE_FATAL;
    let rc = call("MPI_Comm_call_errhandler", comm, |s| {
        handler = s.comm(comm)?.errhandler;
        Ok(())
    });
    if rc != MPI_SUCCESS {
        return rc;
    }
    invoke_handler(handler, comm, code, "MPI_Comm_call_errhandler")
}

/// Runs `handler` on `code` for `object` (a communicator or window handle) from call `name`:
/// the call itself succeeds (MPI 4.0, 9.3.5) unless the handler stops the job.
pub(crate) fn invoke_handler(handler: c_int, object: c_int, code: c_int, name: &str) -> c_int {
    crate::errors::handle_on(handler, object, name, MpiError::new(code, name));
    MPI_SUCCESS
}

pub(crate) unsafe fn mpi_add_error_class(errorclass: Out<'_, c_int>) -> c_int {
    call("MPI_Add_error_class", MPI_COMM_WORLD, |_| ffi::out(errorclass, new_code(None)?, "errorclass"))
}

pub(crate) unsafe fn mpi_add_error_code(errorclass: c_int, errorcode: Out<'_, c_int>) -> c_int {
    call("MPI_Add_error_code", MPI_COMM_WORLD, |_| {
        let dynamic = REGISTRY.with(|r| r.borrow().classes.get(&errorclass) == Some(&errorclass));
        if !(dynamic || (MPI_SUCCESS..=MPI_ERR_VALUE_TOO_LARGE).contains(&errorclass)) {
            return Err(MpiError::new(MPI_ERR_ARG, format!("{errorclass} is not an error class")));
        }
        ffi::out(errorcode, new_code(Some(errorclass))?, "errorcode")
    })
}

pub(crate) unsafe fn mpi_add_error_string(errorcode: c_int, string: *const c_char) -> c_int {
    call("MPI_Add_error_string", MPI_COMM_WORLD, |_| {
        // SAFETY: a string argument of this call: NUL-terminated (the FFI contract).
        let text = unsafe { ffi::string_in(string) }?;
        if text.len() >= MPI_MAX_ERROR_STRING as usize {
            return Err(MpiError::new(MPI_ERR_ARG, format!("an error string of {} bytes", text.len())));
        }
        REGISTRY.with(|r| {
            let mut r = r.borrow_mut();
            if !r.classes.contains_key(&errorcode) {
                return Err(MpiError::new(MPI_ERR_ARG, format!("{errorcode} is not a program's error code")));
            }
            r.strings.insert(errorcode, text);
            Ok(())
        })
    })
}
