//! MPI errors: a class (mpi.h's `MPI_ERR_*`) and a message; what a communicator's error
//! handler does with them; and the stop for a call outside what reverb implements.

use std::cell::RefCell;
use std::ffi::{c_char, c_int};

use crate::abi::*;
use crate::ffi;
use crate::ffi::Out;

/// A failed MPI call: its class and what went wrong. Boxed, so that `MpiResult<()>` is one
/// word: every call returns one, and a wide `Ok` read back whole stalls store forwarding.
#[derive(Debug, Clone)]
pub struct MpiError(Box<ErrorParts>);

#[derive(Debug, Clone)]
pub struct ErrorParts {
    pub class: c_int,
    pub message: String,
}

impl MpiError {
    pub fn new(class: c_int, message: impl Into<String>) -> MpiError {
        MpiError(Box::new(ErrorParts { class, message: message.into() }))
    }

    /// The message, the error consumed.
    pub fn into_message(self) -> String {
        self.0.message
    }
}

impl std::ops::Deref for MpiError {
    type Target = ErrorParts;

    fn deref(&self) -> &ErrorParts {
        &self.0
    }
}

impl From<reverb_runtime::RuntimeError> for MpiError {
    fn from(e: reverb_runtime::RuntimeError) -> MpiError {
        MpiError::new(MPI_ERR_OTHER, reverb_transport::error::error_chain(&e))
    }
}

pub type MpiResult<T> = Result<T, MpiError>;

thread_local! {
    /// The last error's message per class, for `MPI_Error_string`.
    static LAST: RefCell<Vec<(c_int, String)>> = const { RefCell::new(Vec::new()) };
}

/// The name and meaning of an error class.
fn class_text(class: c_int) -> &'static str {
    match class {
        MPI_SUCCESS => "MPI_SUCCESS: no error",
        MPI_ERR_BUFFER => "MPI_ERR_BUFFER: invalid buffer pointer",
        MPI_ERR_COUNT => "MPI_ERR_COUNT: invalid count argument",
        MPI_ERR_TYPE => "MPI_ERR_TYPE: invalid datatype",
        MPI_ERR_TAG => "MPI_ERR_TAG: invalid tag",
        MPI_ERR_COMM => "MPI_ERR_COMM: invalid communicator",
        MPI_ERR_RANK => "MPI_ERR_RANK: invalid rank",
        MPI_ERR_ROOT => "MPI_ERR_ROOT: invalid root",
        MPI_ERR_GROUP => "MPI_ERR_GROUP: invalid group",
        MPI_ERR_OP => "MPI_ERR_OP: invalid reduction operation",
        MPI_ERR_ARG => "MPI_ERR_ARG: invalid argument",
        MPI_ERR_TRUNCATE => "MPI_ERR_TRUNCATE: message truncated on receive",
        MPI_ERR_REQUEST => "MPI_ERR_REQUEST: invalid request",
        MPI_ERR_IN_STATUS => "MPI_ERR_IN_STATUS: error code is in status",
        MPI_ERR_PENDING => "MPI_ERR_PENDING: pending request",
        MPI_ERR_UNSUPPORTED_OPERATION => "MPI_ERR_UNSUPPORTED_OPERATION: not supported by reverb",
        MPI_ERR_INTERN => "MPI_ERR_INTERN: internal error",
        _ => "MPI_ERR_OTHER: other error",
    }
}

/// What the error handler of the communicator a call was made on does with `e`: return its
/// class (`MPI_ERRORS_RETURN`), or print it and stop the job (the default, fatal).
pub fn handle(errhandler: c_int, function: &str, e: MpiError) -> c_int {
    handle_on(errhandler, MPI_COMM_WORLD, function, e)
}

/// As [`handle`], for an error on `comm`: a program's handler is called with `comm` and the
/// code, and the code returned.
pub fn handle_on(errhandler: c_int, comm: c_int, function: &str, e: MpiError) -> c_int {
    LAST.with(|l| {
        let mut l = l.borrow_mut();
        l.retain(|(c, _)| *c != e.class);
        l.push((e.class, format!("{function}: {}", e.message)));
    });
    if errhandler == MPI_ERRORS_RETURN {
        return e.class;
    }
    if let Some(f) = crate::errhandler::user_handler(errhandler) {
        let (mut comm, mut code) = (comm, e.class);
        ffi::errhandler_call(f, &mut comm, &mut code);
        return e.class;
    }
    eprintln!("reverb MPI: {function}: {} ({})", e.message, class_text(e.class));
    std::process::exit(1)
}

/// Stops the job: `function` is outside what reverb implements. Every MPI function of mpi.h
/// that this library does not define is a stub calling this.
pub fn unsupported(function: &str) -> ! {
    eprintln!(
        "reverb MPI: {function} is not supported by reverb (docs/mpi.md lists what is); stopping the job"
    );
    std::process::exit(1)
}

/// Stops the job: `function`, which the build's linker script makes an alias of `PMPI_*`, was
/// reached as itself, so the library was linked without that script (a linker that ignored it).
pub fn alias_unlinked(function: &str) -> ! {
    eprintln!(
        "reverb MPI: {function} was linked without its alias to P{function} (reverb-mpi's build \
         passes the linker aliases.ld); stopping the job"
    );
    std::process::exit(1)
}

pub(crate) unsafe fn mpi_error_string(code: c_int, string: *mut c_char, len: Out<'_, c_int>) -> c_int {
    if let Some(text) = crate::errhandler::dynamic_string(code) {
        // SAFETY: the program's string buffer has room for the `MPI_MAX_*` bytes given (the contract).
        return match unsafe { ffi::string_out(string, MPI_MAX_ERROR_STRING as usize, &text) }
            .and_then(|n| ffi::out(len, n, "resultlen"))
        {
            Ok(()) => MPI_SUCCESS,
            Err(e) => e.class,
        };
    }
    let detail = LAST.with(|l| l.borrow().iter().find(|(c, _)| *c == code).map(|(_, m)| m.clone()));
    let text = match detail {
        Some(d) => format!("{}: {d}", class_text(code)),
        None => class_text(code).to_string(),
    };
    // SAFETY: the program's string buffer has room for the `MPI_MAX_*` bytes given (the contract).
    match unsafe { ffi::string_out(string, MPI_MAX_ERROR_STRING as usize, &text) }
        .and_then(|n| ffi::out(len, n, "resultlen"))
    {
        Ok(()) => MPI_SUCCESS,
        Err(e) => e.class,
    }
}

pub(crate) unsafe fn mpi_error_class(code: c_int, class: Out<'_, c_int>) -> c_int {
    // Predefined codes are classes; the program's codes have theirs.
    match ffi::out(class, crate::errhandler::class_of(code), "errorclass") {
        Ok(()) => MPI_SUCCESS,
        Err(e) => e.class,
    }
}
