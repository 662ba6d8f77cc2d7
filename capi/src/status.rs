//! Return codes, the per-thread last error message, and the guard every entry point runs in:
//! no Rust panic and no error value crosses the C boundary, only a code and a message.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use reverb_runtime::RuntimeError;
use reverb_transport::error::error_chain as chain;
use reverb_transport::TransportError;

/// Success.
pub const REVERB_OK: c_int = 0;
/// A null pointer, a bad length, a call out of order (the message says which).
pub const REVERB_ERR_INVALID_ARGUMENT: c_int = 1;
/// A bad setting (a `REVERB_*` variable, no job in the environment).
pub const REVERB_ERR_CONFIG: c_int = 2;
/// A bounded wait ended without what it waited for.
pub const REVERB_ERR_TIMEOUT: c_int = 3;
/// A peer died or cannot be reached.
pub const REVERB_ERR_PEER_DEAD: c_int = 4;
/// A message longer than the receive buffer (the buffer holds its first bytes).
pub const REVERB_ERR_TRUNCATED: c_int = 5;
/// An RMA outside a region, a wrong or stale remote key, or a region without the access.
pub const REVERB_ERR_ACCESS: c_int = 6;
/// A failure the job cannot survive; the message says what was lost.
pub const REVERB_ERR_UNRECOVERABLE: c_int = 7;
/// Not supported by this provider or build.
pub const REVERB_ERR_UNSUPPORTED: c_int = 8;
/// Any other transport, logging or checkpoint failure (the message has the chain of causes).
pub const REVERB_ERR_FAILED: c_int = 9;
/// A bug in reverb (a Rust panic, stopped at the boundary); the message has its text.
pub const REVERB_ERR_INTERNAL: c_int = 10;

/// The error a C caller sees: a code and a message.
#[derive(Debug)]
pub(crate) struct CError {
    pub(crate) code: c_int,
    pub(crate) message: String,
}

impl CError {
    pub(crate) fn invalid(message: impl Into<String>) -> CError {
        CError { code: REVERB_ERR_INVALID_ARGUMENT, message: message.into() }
    }
}

impl From<TransportError> for CError {
    fn from(e: TransportError) -> CError {
        let code = match &e {
            TransportError::OutOfBounds { .. }
            | TransportError::InvalidKey { .. }
            | TransportError::AccessDenied { .. } => REVERB_ERR_ACCESS,
            TransportError::InvalidRank(..) => REVERB_ERR_INVALID_ARGUMENT,
            TransportError::PeerDead(_) => REVERB_ERR_PEER_DEAD,
            TransportError::Timeout(_) => REVERB_ERR_TIMEOUT,
            TransportError::Truncated { .. } => REVERB_ERR_TRUNCATED,
            TransportError::Config(_) | TransportError::Env(_) => REVERB_ERR_CONFIG,
            TransportError::Unsupported(_) | TransportError::Unavailable(..) => REVERB_ERR_UNSUPPORTED,
            _ => REVERB_ERR_FAILED,
        };
        CError { code, message: chain(&e) }
    }
}

impl From<RuntimeError> for CError {
    fn from(e: RuntimeError) -> CError {
        let code = match &e {
            RuntimeError::Transport(t) => CError::from(t.clone()).code,
            RuntimeError::Unrecoverable(_) => REVERB_ERR_UNRECOVERABLE,
            RuntimeError::Unsupported(_) => REVERB_ERR_UNSUPPORTED,
            RuntimeError::Config(_)
            | RuntimeError::Diagnostics(_)
            | RuntimeError::NoFaultInjection { .. } => REVERB_ERR_CONFIG,
            RuntimeError::InvalidArgument(_) => REVERB_ERR_INVALID_ARGUMENT,
            RuntimeError::Timeout { .. } => REVERB_ERR_TIMEOUT,
            _ if e.dead_peer().is_some() => REVERB_ERR_PEER_DEAD,
            _ => REVERB_ERR_FAILED,
        };
        CError { code, message: chain(&e) }
    }
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(message: &str) {
    // An interior NUL cannot be in a C string: cut there.
    let bytes: Vec<u8> = message.bytes().take_while(|&b| b != 0).collect();
    let text = CString::new(bytes).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = text);
}

/// Makes `e` this thread's last error without failing the call (a failed completion).
pub(crate) fn note(e: &CError) {
    set_last_error(&e.message);
}

/// Runs an entry point's body: its error becomes a code and this thread's last error; a panic
/// is stopped here and reported as `REVERB_ERR_INTERNAL`.
pub(crate) fn guard(body: impl FnOnce() -> Result<(), CError>) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => REVERB_OK,
        Ok(Err(e)) => {
            set_last_error(&e.message);
            e.code
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            set_last_error(&format!("internal error in reverb: {what}"));
            REVERB_ERR_INTERNAL
        }
    }
}

/// The message of the last call that failed on this thread ("" if none did). The pointer stays
/// valid until this thread's next failing call.
#[no_mangle]
pub extern "C" fn reverb_last_error() -> *const c_char {
    LAST_ERROR.with(|l| l.borrow().as_ptr())
}

/// A short name of a return code (`"REVERB_ERR_TIMEOUT"`), or `"unknown"`.
#[no_mangle]
pub extern "C" fn reverb_status_name(code: c_int) -> *const c_char {
    let name: &'static [u8] = match code {
        REVERB_OK => b"REVERB_OK\0",
        REVERB_ERR_INVALID_ARGUMENT => b"REVERB_ERR_INVALID_ARGUMENT\0",
        REVERB_ERR_CONFIG => b"REVERB_ERR_CONFIG\0",
        REVERB_ERR_TIMEOUT => b"REVERB_ERR_TIMEOUT\0",
        REVERB_ERR_PEER_DEAD => b"REVERB_ERR_PEER_DEAD\0",
        REVERB_ERR_TRUNCATED => b"REVERB_ERR_TRUNCATED\0",
        REVERB_ERR_ACCESS => b"REVERB_ERR_ACCESS\0",
        REVERB_ERR_UNRECOVERABLE => b"REVERB_ERR_UNRECOVERABLE\0",
        REVERB_ERR_UNSUPPORTED => b"REVERB_ERR_UNSUPPORTED\0",
        REVERB_ERR_FAILED => b"REVERB_ERR_FAILED\0",
        REVERB_ERR_INTERNAL => b"REVERB_ERR_INTERNAL\0",
        _ => b"unknown\0",
    };
    name.as_ptr().cast()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last() -> String {
        // SAFETY: reverb_last_error returns this thread's live, NUL-terminated message.
        unsafe { CStr::from_ptr(reverb_last_error()) }.to_string_lossy().into_owned()
    }

    #[test]
    fn errors_become_codes_and_messages() {
        let code = guard(|| Err(TransportError::PeerDead(3).into()));
        assert_eq!(code, REVERB_ERR_PEER_DEAD);
        assert!(last().contains("peer rank 3"), "{}", last());
        let code = guard(|| Err(TransportError::Truncated { len: 9, capacity: 4 }.into()));
        assert_eq!(code, REVERB_ERR_TRUNCATED);
        assert_eq!(guard(|| Ok(())), REVERB_OK);
    }

    #[test]
    fn a_panic_stops_at_the_boundary() {
        let code = guard(|| panic!("boom"));
        assert_eq!(code, REVERB_ERR_INTERNAL);
        assert!(last().contains("boom"));
    }

    #[test]
    fn messages_with_a_nul_are_cut_there() {
        guard(|| Err(CError::invalid("before\0after")));
        assert_eq!(last(), "before");
    }
}
