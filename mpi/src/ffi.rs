//! The only place C pointers become Rust references or are written through (every `unsafe`
//! of the library): each helper checks for null and states what MPI's API promises.

use std::ffi::{c_char, c_int, c_void};

use crate::abi::MPI_ERR_ARG;
use crate::errors::MpiError;

/// The special pointer values of mpi.h (`MPI_STATUS_IGNORE`, `MPI_IN_PLACE`).
pub const STATUS_IGNORE: usize = 1;
pub const IN_PLACE: usize = usize::MAX;

/// Stores `value` through an out-argument.
pub fn out<T>(p: *mut T, value: T, what: &str) -> Result<(), MpiError> {
    if p.is_null() {
        return Err(MpiError::new(MPI_ERR_ARG, format!("{what} is NULL")));
    }
    // SAFETY: non-null and, per the MPI standard, pointing at writable memory for one `T`.
    unsafe { p.write(value) };
    Ok(())
}

/// Reads an in-argument passed by pointer.
pub fn read<T: Copy>(p: *const T, what: &str) -> Result<T, MpiError> {
    if p.is_null() {
        return Err(MpiError::new(MPI_ERR_ARG, format!("{what} is NULL")));
    }
    // SAFETY: non-null and pointing at an initialized `T` (MPI's contract for in-arguments).
    Ok(unsafe { p.read() })
}

/// `len` bytes at `p` (anything for 0 bytes).
pub fn bytes<'a>(p: *const c_void, len: usize) -> Result<&'a [u8], MpiError> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(MpiError::new(crate::abi::MPI_ERR_BUFFER, format!("a NULL buffer of {len} bytes")));
    }
    // SAFETY: MPI's contract: the buffer holds `len` readable bytes until the call (or the
    // request) completes.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

/// `len` writable bytes at `p`.
pub fn bytes_mut<'a>(p: *mut c_void, len: usize) -> Result<&'a mut [u8], MpiError> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(MpiError::new(crate::abi::MPI_ERR_BUFFER, format!("a NULL buffer of {len} bytes")));
    }
    // SAFETY: MPI's contract: the buffer holds `len` writable bytes, untouched by the program,
    // until the call (or the request) completes.
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) })
}

/// `n` elements of an array argument (`MPI_Waitall`'s requests, `MPI_Gatherv`'s counts).
pub fn array<'a, T>(p: *const T, n: usize, what: &str) -> Result<&'a [T], MpiError> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(MpiError::new(MPI_ERR_ARG, format!("{what} is NULL")));
    }
    // SAFETY: the caller passes `n` initialized elements (MPI's contract).
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// `n` writable elements of an array argument.
pub fn array_mut<'a, T>(p: *mut T, n: usize, what: &str) -> Result<&'a mut [T], MpiError> {
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(MpiError::new(MPI_ERR_ARG, format!("{what} is NULL")));
    }
    // SAFETY: the caller passes `n` initialized, writable elements (MPI's contract).
    Ok(unsafe { std::slice::from_raw_parts_mut(p, n) })
}

/// Copies `text` into a caller's string buffer of `max` bytes (NUL-terminated, cut to fit)
/// and returns the length written without the NUL.
pub fn string_out(p: *mut c_char, max: usize, text: &str) -> Result<c_int, MpiError> {
    let n = text.len().min(max.saturating_sub(1));
    let dest = bytes_mut(p.cast(), n + 1)?;
    dest[..n].copy_from_slice(&text.as_bytes()[..n]);
    dest[n] = 0;
    Ok(n as c_int)
}

/// A C string argument, lossily as UTF-8.
pub fn string_in(p: *const c_char) -> Result<String, MpiError> {
    if p.is_null() {
        return Err(MpiError::new(MPI_ERR_ARG, "a NULL string"));
    }
    // SAFETY: a non-null C string argument is NUL-terminated (MPI's contract).
    Ok(unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Calls a generalized request's free function with its state.
pub fn grequest_free(f: crate::request::FreeFn, state: *mut c_void) -> c_int {
    // SAFETY: the program's MPI_Grequest_free_function, called once with the state it gave.
    unsafe { f(state) }
}

/// Calls a generalized request's query function, which fills `status`.
pub fn grequest_query(
    f: crate::request::QueryFn,
    state: *mut c_void,
    status: &mut crate::request::CStatus,
) -> c_int {
    // SAFETY: the program's MPI_Grequest_query_function, with its state and a valid status.
    unsafe { f(state, status) }
}

/// Calls a generalized request's cancel function.
pub fn grequest_cancel(f: crate::request::CancelFn, state: *mut c_void, complete: bool) -> c_int {
    // SAFETY: the program's MPI_Grequest_cancel_function, with its state.
    unsafe { f(state, c_int::from(complete)) }
}

/// Calls a program's reduction function: `inout[i] = input[i] op inout[i]` over `len`
/// elements of `datatype`, whose layout starts `origin` bytes into each buffer (its lower
/// bound's negation; 0 for a contiguous one); both buffers hold that many elements.
pub fn user_op(
    f: crate::op::UserFn,
    input: &mut [u8],
    origin: isize,
    inout: &mut [u8],
    len: c_int,
    datatype: c_int,
) {
    let (mut len, mut datatype) = (len, datatype);
    let at = |b: &mut [u8]| b.as_mut_ptr().wrapping_offset(origin).cast();
    // SAFETY: the program's MPI_User_function, called as MPI specifies on buffers of `len`
    // elements of `datatype` (every block of them inside the slices from `origin`).
    unsafe { f(at(input), at(inout), &mut len, &mut datatype) }
}

/// Writes a status's fields through `p` (non-null, not MPI_STATUS_IGNORE), MPI_ERROR only
/// with `with_error`: field by field, so the one left alone is never read.
pub fn status_out(p: *mut crate::request::CStatus, s: crate::request::CStatus, with_error: bool) {
    // SAFETY: the caller checked `p` is a real status (MPI's contract: writable).
    unsafe {
        std::ptr::addr_of_mut!((*p).count_lo).write(s.count_lo);
        std::ptr::addr_of_mut!((*p).count_hi_and_cancelled).write(s.count_hi_and_cancelled);
        std::ptr::addr_of_mut!((*p).source).write(s.source);
        std::ptr::addr_of_mut!((*p).tag).write(s.tag);
        if with_error {
            std::ptr::addr_of_mut!((*p).error).write(s.error);
        }
    }
}

/// Calls an attribute's copy function: (oldcomm, keyval, extra, value_in, &value_out, &flag).
pub fn attr_copy(
    f: crate::attr::CopyFn,
    comm: c_int,
    keyval: c_int,
    extra: *mut c_void,
    value: usize,
    out: &mut usize,
    flag: &mut c_int,
) -> c_int {
    // SAFETY: the program's copy function, called as MPI specifies; `out` receives a pointer.
    unsafe { f(comm, keyval, extra, value as *mut c_void, (out as *mut usize).cast(), flag) }
}

/// Calls an attribute's delete function.
pub fn attr_delete(
    f: crate::attr::DeleteFn,
    comm: c_int,
    keyval: c_int,
    value: usize,
    extra: *mut c_void,
) -> c_int {
    // SAFETY: the program's delete function, called once per value, as MPI specifies.
    unsafe { f(comm, keyval, value as *mut c_void, extra) }
}

extern "C" {
    fn reverb_mpi_long_double_op(op: c_int, input: *const c_void, inout: *mut c_void, n: usize) -> c_int;
    fn reverb_mpi_long_double_loc(
        op: c_int,
        input: *const c_void,
        inout: *mut c_void,
        n: usize,
        stride: usize,
    ) -> c_int;
}

/// `csrc/long_double.c`'s operation codes.
pub const LD_MAX: c_int = 1;
pub const LD_MIN: c_int = 2;
pub const LD_SUM: c_int = 3;
pub const LD_PROD: c_int = 4;
pub const LD_MAXLOC: c_int = 5;
pub const LD_MINLOC: c_int = 6;

/// `inout = input op inout` over 16-byte `long double`s; false if `op` is not defined there.
pub fn long_double_op(op: c_int, input: &[u8], inout: &mut [u8]) -> bool {
    let n = input.len().min(inout.len()) / 16;
    // SAFETY: both buffers hold `n` 16-byte values; the C side reads and writes only those.
    unsafe { reverb_mpi_long_double_op(op, input.as_ptr().cast(), inout.as_mut_ptr().cast(), n) == 0 }
}

/// MAXLOC / MINLOC over packed (`long double`, `int`) pairs of 20 bytes.
pub fn long_double_loc(op: c_int, input: &[u8], inout: &mut [u8]) {
    let n = input.len().min(inout.len()) / 20;
    // SAFETY: both buffers hold `n` pairs of 20 bytes; the C side touches only those.
    unsafe { reverb_mpi_long_double_loc(op, input.as_ptr().cast(), inout.as_mut_ptr().cast(), n, 20) };
}
