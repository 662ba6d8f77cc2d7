//! The unsafe plumbing every libfabric object shares: an object is a box whose first field is
//! the C struct the consumer sees (`fid_ep`, `fid_cq`, ...), so the `fid` pointer libfabric
//! hands back is the box; the Rust state follows it. Also the copies to and from memory the
//! consumer lends for the length of an operation.

use crate::abi::{fid, FI_EINVAL, FI_ENOSYS};
use std::ffi::{c_int, c_void};

/// One object: the C struct first, then the provider's state.
#[repr(C)]
pub struct Obj<C, S> {
    pub c: C,
    pub state: S,
}

/// An immutable operations table in a `static`: it holds only function pointers.
#[repr(transparent)]
pub struct Table<T>(pub T);
// SAFETY: a table is never written after its static initialiser, and it holds only pointers
// to functions, which any thread may call.
unsafe impl<T> Sync for Table<T> {}

/// What an unimplemented operation slot points at. Called through any slot's signature it
/// takes no argument and returns -FI_ENOSYS in the return register, which an `int` caller
/// reads as the same value (as libfabric's own `fi_no_*` stubs answer).
pub extern "C" fn no_op() -> isize {
    -(FI_ENOSYS as isize)
}

/// [`no_op`] as a slot value.
pub const NO_OP: *const c_void = no_op as *const c_void;

/// Boxes an object and returns the pointer the consumer holds.
pub fn into_raw<C, S>(c: C, state: S) -> *mut Obj<C, S> {
    Box::into_raw(Box::new(Obj { c, state }))
}

/// The state of the object at `ptr`, after checking that its ops table is `ops` (so a
/// foreign or wrong-class fid is refused rather than misread). None for a null pointer or
/// another object.
///
/// # Safety
/// `ptr` is null or points at a live `fid`; when its `ops` is `ops`, it was made by
/// [`into_raw`] with this `C` and `S` (each ops table belongs to one object type).
pub unsafe fn state<'a, C, S>(ptr: *mut fid, ops: *const c_void) -> Option<&'a mut S> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: non-null and live (the caller's contract).
    if unsafe { (*ptr).ops } as *const c_void != ops {
        return None;
    }
    // SAFETY: made by into_raw::<C, S> (the ops table names the type), so the cast is valid.
    Some(unsafe { &mut (*(ptr as *mut Obj<C, S>)).state })
}

/// Frees an object made by [`into_raw`].
///
/// # Safety
/// As [`state`]; the consumer does not use `ptr` again (it closed the object).
pub unsafe fn free<C, S>(ptr: *mut fid, ops: *const c_void) -> bool {
    // SAFETY: the caller's contract.
    if unsafe { state::<C, S>(ptr, ops) }.is_none() {
        return false;
    }
    // SAFETY: made by Box::into_raw in into_raw with these types.
    drop(unsafe { Box::from_raw(ptr as *mut Obj<C, S>) });
    true
}

/// The `len` bytes at `buf`, which the consumer lends for this call (a send's buffer).
///
/// # Safety
/// `buf` points at `len` readable bytes for the length of the call (null only with `len` 0).
pub unsafe fn lent<'a>(buf: *const c_void, len: usize) -> &'a [u8] {
    if len == 0 || buf.is_null() {
        return &[];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(buf as *const u8, len) }
}

/// Copies `bytes` to `dst`, a receive buffer the consumer lent until the receive completes
/// (libfabric's rule: it is the provider's until the completion is read).
pub fn copy_to_lent(dst: usize, capacity: usize, bytes: &[u8]) {
    let n = bytes.len().min(capacity);
    if n == 0 || dst == 0 {
        return;
    }
    // SAFETY: `dst` is the buffer of a receive still pending (its completion has not been
    // reported yet), `capacity` bytes long as the consumer posted it; n <= capacity.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), dst as *mut u8, n) };
}

/// Writes `value` to `out` unless it is null.
///
/// # Safety
/// `out` is null or valid for a write of `T`.
pub unsafe fn put<T>(out: *mut T, value: T) {
    if !out.is_null() {
        // SAFETY: the caller's contract.
        unsafe { out.write(value) };
    }
}

/// `fi_ops.bind` of an object that binds nothing.
///
/// # Safety
///
/// None: it reads no argument (`unsafe` as libfabric's slot type is).
pub unsafe extern "C" fn no_bind(_: *mut fid, _: *mut fid, _: u64) -> c_int {
    -FI_ENOSYS
}

/// `fi_ops.control` of an object with no controls.
///
/// # Safety
///
/// None: it reads no argument (`unsafe` as libfabric's slot type is).
pub unsafe extern "C" fn no_control(_: *mut fid, _: c_int, _: *mut c_void) -> c_int {
    -FI_ENOSYS
}

/// `fi_close`'s answer: 0 when [`free`] freed the object, -FI_EINVAL for a foreign fid.
pub fn close_status(freed: bool) -> c_int {
    if freed {
        0
    } else {
        -FI_EINVAL
    }
}
