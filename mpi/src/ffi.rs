//! The only place C pointers become Rust references or are written through: the pointer
//! types the exported functions take, and the callbacks into the program.
//!
//! # Contract
//!
//! Every exported `MPI_*` function that takes a pointer is an `unsafe extern "C" fn`; its
//! `# Safety` section (generated with it from the C prototype, mpi/build/safety.rs) names each
//! pointer argument's kind, and the hand-written `mpi_*` function it calls takes the same
//! types. The kinds' rules are these (MPI's own, as the standard states them for C callers):
//!
//! - **`Out<'_, T>`** (an out-argument: a handle, a flag, an array the call fills) is null
//!   or valid for writing, aligned for `T`, for as many `T` as the call's counts say (one for
//!   a scalar), and not otherwise accessed during the call. Array out-arguments the call
//!   also reads (`dims` of `MPI_Dims_create`, `requests` of `MPI_Waitall`) hold initialized
//!   values.
//! - **`In<'_, T>`** (an in-argument by pointer: an array of counts, displacements, ranks,
//!   handles) is null or valid for reading that many initialized, aligned `T`.
//! - **`StatusOut<'_>`** is null, `MPI_STATUS(ES)_IGNORE`, or valid for writing as many
//!   `MPI_Status` as the call completes.
//! - **`UserBuf`** (a message buffer: `buf`, `sendbuf`, `recvbuf`, ...) is `MPI_IN_PLACE`
//!   where the call allows it, or spans `count` elements of `datatype` as the datatype lays
//!   them out (extent apart, from its lower bound); readable for a send, writable and not
//!   otherwise accessed for a receive. A blocking call needs it only until it returns; a
//!   nonblocking or persistent one (`MPI_Isend`, `MPI_Irecv`, `MPI_Send_init`, ...) until its
//!   request completes, untouched by the program meanwhile (MPI 4.0, 3.7.2).
//! - A `*const c_char` in-argument is a NUL-terminated string; a `*mut c_char` out-argument
//!   has room for the call's `MPI_MAX_*` bytes.
//! - A `*mut c_void` that is not a message buffer (an attribute value, `extra_state`) is
//!   opaque: stored and handed back, never dereferenced by the library.
//!
//! `Out`, `In` and `StatusOut` carry the call's lifetime (`'_` in the signature), so nothing
//! derived from them outlives the call; `UserBuf` carries none because a nonblocking call's
//! buffer outlives it, and is turned into a slice only at the moment of a copy.

use std::ffi::{c_char, c_int, c_long, c_void};
use std::marker::PhantomData;

use crate::abi::{MPI_ERR_ARG, MPI_ERR_COUNT};
use crate::errors::MpiError;
use crate::request::CStatus;

/// The special pointer values of mpi.h (`MPI_STATUS_IGNORE`, `MPI_IN_PLACE`).
pub const STATUS_IGNORE: usize = 1;
pub const IN_PLACE: usize = usize::MAX;

/// An out-argument by pointer, valid (or null) for the call it was passed to (see the
/// module's contract). Only the C ABI or [`Out::from_raw`] makes one.
#[repr(transparent)]
pub struct Out<'a, T>(*mut T, PhantomData<&'a mut T>);

impl<T> Clone for Out<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Out<'_, T> {}

impl<'a, T> Out<'a, T> {
    /// # Safety
    /// `p` is null or valid for writing one `T` (more for an array) for `'a`, as the
    /// module's contract says of an `Out` argument.
    pub unsafe fn from_raw(p: *mut T) -> Self {
        Out(p, PhantomData)
    }

    pub fn is_null(self) -> bool {
        self.0.is_null()
    }

    /// The pointer itself, for an argument written past its call (`MPI_Comm_idup`'s).
    pub fn as_ptr(self) -> *mut T {
        self.0
    }

    /// The same pointer, to read an in-out array.
    pub fn as_in(self) -> In<'a, T> {
        In(self.0, PhantomData)
    }
}

/// An in-argument by pointer, valid (or null) for reading during the call (see the module's
/// contract). Only the C ABI or [`In::from_raw`] makes one.
#[repr(transparent)]
pub struct In<'a, T>(*const T, PhantomData<&'a T>);

impl<T> Clone for In<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for In<'_, T> {}

impl<T> In<'_, T> {
    pub fn is_null(self) -> bool {
        self.0.is_null()
    }

    /// The address, to compare with a special value (`MPI_F_STATUS_IGNORE`).
    pub fn addr(self) -> usize {
        self.0 as usize
    }
}

impl<'a, T> From<Out<'a, T>> for In<'a, T> {
    fn from(p: Out<'a, T>) -> Self {
        p.as_in()
    }
}

/// An array argument a persistent request keeps (`MPI_Alltoallv_init`'s counts): MPI requires
/// it valid and unchanged until the request is freed, past the call that gave it, so it holds
/// no lifetime; each start makes it an `In` again ([`Kept::get`]).
#[derive(Clone, Copy)]
pub struct Kept<T>(*const T);

impl<T> In<'_, T> {
    pub fn keep(self) -> Kept<T> {
        Kept(self.0)
    }
}

impl<T> Kept<T> {
    /// # Safety
    /// The persistent request that kept it is not freed yet (MPI's rule keeps it valid until
    /// then), and the `In` is used no longer than the start that asked for it.
    pub unsafe fn get<'a>(self) -> In<'a, T> {
        In(self.0, PhantomData)
    }
}

/// A status out-argument: null, `MPI_STATUS(ES)_IGNORE`, or writable statuses for the call.
#[repr(transparent)]
#[derive(Clone, Copy)]
pub struct StatusOut<'a>(*mut CStatus, PhantomData<&'a mut CStatus>);

impl StatusOut<'_> {
    /// Null or `MPI_STATUS(ES)_IGNORE`: nothing is written.
    pub fn ignored(self) -> bool {
        self.0.is_null() || self.0 as usize == STATUS_IGNORE
    }

    /// Writes the status's fields (MPI_ERROR only with `with_error`) unless ignored: field
    /// by field, so the one left alone is never read.
    pub fn write(self, s: CStatus, with_error: bool) {
        // SAFETY: index 0 exists in any status argument the contract allows.
        unsafe { self.write_at(0, s, with_error) }
    }

    /// Writes entry `i` of a status array unless ignored.
    ///
    /// # Safety
    /// The array has more than `i` entries (the call's count of requests).
    pub unsafe fn write_at(self, i: usize, s: CStatus, with_error: bool) {
        if self.ignored() {
            return;
        }
        // SAFETY: not ignored, so (the contract) writable statuses, `i` among them (ours).
        unsafe {
            let p = self.0.add(i);
            std::ptr::addr_of_mut!((*p).count_lo).write(s.count_lo);
            std::ptr::addr_of_mut!((*p).count_hi_and_cancelled).write(s.count_hi_and_cancelled);
            std::ptr::addr_of_mut!((*p).source).write(s.source);
            std::ptr::addr_of_mut!((*p).tag).write(s.tag);
            if with_error {
                std::ptr::addr_of_mut!((*p).error).write(s.error);
            }
        }
    }
}

/// A program's message buffer: an address, honest about being one. It holds no lifetime
/// because a nonblocking call's buffer outlives the call; MPI's rule (the module's contract)
/// keeps it valid until the call returns or its request completes, and it becomes a slice
/// only at the moment of a copy ([`UserBuf::bytes`], [`UserBuf::bytes_mut`]).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserBuf(*mut c_void);

impl UserBuf {
    /// # Safety
    /// `p` is a buffer under the module's contract for as long as the `UserBuf` (or a copy
    /// of it) is used.
    pub unsafe fn from_raw(p: *mut c_void) -> UserBuf {
        UserBuf(p)
    }

    /// `MPI_IN_PLACE`.
    pub fn is_in_place(self) -> bool {
        self.0 as usize == IN_PLACE
    }

    /// The address `off` bytes on (a datatype's layout arithmetic; nothing is accessed).
    pub fn at(self, off: isize) -> UserBuf {
        UserBuf(self.0.cast::<u8>().wrapping_offset(off).cast())
    }

    /// The address, as a pointer (for loops of copies that check the buffer once).
    pub fn ptr(self) -> *mut u8 {
        self.0.cast()
    }

    /// The address, as a number (to remember where a protected region is).
    pub fn addr(self) -> usize {
        self.0 as usize
    }

    /// Whether `len` bytes here and `other_len` bytes at `other` share any byte (an MPI
    /// program's error where the standard asks for distinct buffers: MPI_ERR_BUFFER).
    pub fn overlaps(self, len: usize, other: UserBuf, other_len: usize) -> bool {
        let (a, b) = (self.addr(), other.addr());
        len > 0 && other_len > 0 && a < b.saturating_add(other_len) && b < a.saturating_add(len)
    }

    /// `len` bytes at this address (none for 0), borrowed no longer than `self` is.
    ///
    /// # Safety
    /// The program's buffer covers those bytes, readable, under MPI's rule that it stays
    /// valid until the call returns or its request completes, which has not happened yet.
    pub unsafe fn bytes(&self, len: usize) -> Result<&[u8], MpiError> {
        if len == 0 {
            return Ok(&[]);
        }
        if self.0.is_null() {
            return Err(null_buffer(len));
        }
        // SAFETY: the caller's promise, above.
        Ok(unsafe { std::slice::from_raw_parts(self.0.cast::<u8>(), len) })
    }

    /// `len` writable bytes at this address, borrowed no longer than `self` is.
    ///
    /// # Safety
    /// As for [`UserBuf::bytes`], and the buffer is a receive's (writable), not read or
    /// written by anything else while the slice lives.
    #[allow(clippy::mut_from_ref)] // The memory is the program's, not `self`'s.
    pub unsafe fn bytes_mut(&self, len: usize) -> Result<&mut [u8], MpiError> {
        if len == 0 {
            return Ok(&mut []);
        }
        if self.0.is_null() {
            return Err(null_buffer(len));
        }
        // SAFETY: the caller's promise, above.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.0.cast::<u8>(), len) })
    }
}

fn null_buffer(len: usize) -> MpiError {
    MpiError::new(crate::abi::MPI_ERR_BUFFER, format!("a NULL buffer of {len} bytes"))
}

fn null(what: &str) -> MpiError {
    MpiError::new(MPI_ERR_ARG, format!("{what} is NULL"))
}

/// Stores `value` through an out-argument.
pub fn out<T>(p: Out<'_, T>, value: T, what: &str) -> Result<(), MpiError> {
    if p.is_null() {
        return Err(null(what));
    }
    // SAFETY: non-null, so (the contract of `Out`) writable and aligned for a `T` now.
    unsafe { p.0.write(value) };
    Ok(())
}

/// Reads an in-argument passed by pointer.
pub fn read<'a, T: Copy + 'a>(p: impl Into<In<'a, T>>, what: &str) -> Result<T, MpiError> {
    let p = p.into();
    if p.is_null() {
        return Err(null(what));
    }
    // SAFETY: non-null, so (the contract of `In`) an initialized, aligned `T` now.
    Ok(unsafe { p.0.read() })
}

/// `n` elements of an array argument (`MPI_Waitall`'s requests, `MPI_Gatherv`'s counts),
/// borrowed for the call at most.
///
/// # Safety
/// `n` is the array's length as the call's arguments give it (MPI's contract for it).
pub unsafe fn array<'a, T: 'a>(p: impl Into<In<'a, T>>, n: usize, what: &str) -> Result<&'a [T], MpiError> {
    let p = p.into();
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(null(what));
    }
    // SAFETY: `n` initialized elements (the caller's promise and `In`'s contract).
    Ok(unsafe { std::slice::from_raw_parts(p.0, n) })
}

/// `n` writable elements of an array argument, borrowed for the call at most.
///
/// # Safety
/// As for [`array`], and no other slice of the same array lives meanwhile.
pub unsafe fn array_mut<'a, T>(p: Out<'a, T>, n: usize, what: &str) -> Result<&'a mut [T], MpiError> {
    if n == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(null(what));
    }
    // SAFETY: `n` initialized, writable elements (the caller's promise and `Out`'s contract).
    Ok(unsafe { std::slice::from_raw_parts_mut(p.0, n) })
}

/// Copies `text` into a caller's string buffer of `max` bytes (NUL-terminated, cut to fit)
/// and returns the length written without the NUL.
///
/// # Safety
/// `p` is null or has room for `max` bytes (the call's `MPI_MAX_*` constant).
pub unsafe fn string_out(p: *mut c_char, max: usize, text: &str) -> Result<c_int, MpiError> {
    let n = text.len().min(max.saturating_sub(1));
    if p.is_null() {
        return Err(null("a string buffer"));
    }
    // SAFETY: room for `max` >= n + 1 bytes (the caller's promise).
    let dest = unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), n + 1) };
    dest[..n].copy_from_slice(&text.as_bytes()[..n]);
    dest[n] = 0;
    Ok(n as c_int)
}

/// A C string argument, lossily as UTF-8.
///
/// # Safety
/// `p` is null or a NUL-terminated string.
pub unsafe fn string_in(p: *const c_char) -> Result<String, MpiError> {
    if p.is_null() {
        return Err(MpiError::new(MPI_ERR_ARG, "a NULL string"));
    }
    // SAFETY: a non-null C string argument is NUL-terminated (the caller's promise).
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
    f: crate::op::UserFunction,
    input: &mut [u8],
    origin: isize,
    inout: &mut [u8],
    len: usize,
    datatype: c_int,
) -> Result<(), MpiError> {
    let mut datatype = datatype;
    let at = |b: &mut [u8]| b.as_mut_ptr().wrapping_offset(origin).cast();
    let too_large = || MpiError::new(MPI_ERR_COUNT, format!("{len} elements for a user operation"));
    match f {
        crate::op::UserFunction::Int(f) => {
            let mut len = c_int::try_from(len).map_err(|_| too_large())?;
            // SAFETY: the program's MPI_User_function, called as MPI specifies on buffers of
            // `len` elements of `datatype` (every block of them inside the slices from `origin`).
            unsafe { f(at(input), at(inout), &mut len, &mut datatype) }
        }
        crate::op::UserFunction::Large(f) => {
            let mut len = c_long::try_from(len).map_err(|_| too_large())?;
            // SAFETY: the program's MPI_User_function_c, called as above with an MPI_Count.
            unsafe { f(at(input), at(inout), &mut len, &mut datatype) }
        }
    }
    Ok(())
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

/// Calls a keyval's copy function through its language proxy (`MPII_Keyval_set_proxy`,
/// MPICH's Fortran binding): `attr` is the value's `MPIR_Attr_type` and the value as set.
#[allow(clippy::too_many_arguments)]
pub fn attr_copy_proxy(
    proxy: crate::attr::CopyProxy,
    f: crate::attr::CopyFn,
    comm: c_int,
    keyval: c_int,
    extra: *mut c_void,
    attr: (c_int, usize),
    out: &mut usize,
    flag: &mut c_int,
) -> c_int {
    let (kind, value) = attr;
    let out = std::ptr::from_mut(out).cast::<*mut c_void>();
    // SAFETY: the proxy MPICH's Fortran binding registered, called as `MPII_Attr_copy_proxy`
    // is: with the function and state the program gave and valid out-pointers.
    unsafe { proxy(f, comm, keyval, extra, kind, value as *mut c_void, out, flag) }
}

/// Calls a keyval's delete function through its language proxy: `attr` as for the copy.
pub fn attr_delete_proxy(
    proxy: crate::attr::DeleteProxy,
    f: crate::attr::DeleteFn,
    comm: c_int,
    keyval: c_int,
    attr: (c_int, usize),
    extra: *mut c_void,
) -> c_int {
    let (kind, value) = attr;
    // SAFETY: the proxy MPICH's Fortran binding registered, called as `MPII_Attr_delete_proxy`
    // is, once per value, with the function and state the program gave.
    unsafe { proxy(f, comm, keyval, kind, value as *mut c_void, extra) }
}

/// Calls a program's error handler with (the communicator, window or file; the code).
pub fn errhandler_call(f: crate::errhandler::HandlerFn, handle: &mut c_int, code: &mut c_int) {
    // SAFETY: the program's MPI_Comm_errhandler_function, called as MPI specifies with
    // pointers to a handle and a code that live for the call.
    unsafe { f(handle, code) }
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

#[cfg(test)]
mod tests {
    use super::UserBuf;

    #[test]
    fn buffers_overlap_when_they_share_a_byte() {
        let mut bytes = [0u8; 64];
        let base = bytes.as_mut_ptr().cast();
        // SAFETY: the addresses are only compared, never read.
        let (a, b) = unsafe { (UserBuf::from_raw(base), UserBuf::from_raw(base)) };
        let (a8, b16) = (a.at(8), b.at(16));
        assert!(a8.overlaps(9, b16, 4), "8..17 and 16..20 share byte 16");
        assert!(!a8.overlaps(8, b16, 4), "8..16 and 16..20 touch");
        assert!(b16.overlaps(4, a8, 9));
        assert!(!a8.overlaps(0, a8, 4), "an empty buffer shares nothing");
    }
}
