//! The only place C pointers become Rust references: each helper checks for null and states
//! what the caller promised (reverb.h documents every pointer's contract).

use std::ffi::c_void;
use std::mem::MaybeUninit;

use crate::status::CError;

/// `*p` as a mutable reference; `what` names the argument in the error.
pub(crate) fn handle<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T, CError> {
    // SAFETY: a non-null handle was returned by this library's constructor and not freed
    // (reverb.h: handles are used from one thread at a time and never after their free).
    unsafe { p.as_mut() }.ok_or_else(|| CError::invalid(format!("{what} is NULL")))
}

/// `*p` as a shared reference.
pub(crate) fn read<'a, T>(p: *const T, what: &str) -> Result<&'a T, CError> {
    // SAFETY: the caller passes a valid, aligned object (a handle of ours, or a struct it
    // filled) that outlives the call.
    unsafe { p.as_ref() }.ok_or_else(|| CError::invalid(format!("{what} is NULL")))
}

/// Stores `value` through an out-pointer.
pub(crate) fn write<T>(p: *mut T, value: T, what: &str) -> Result<(), CError> {
    if p.is_null() {
        return Err(CError::invalid(format!("{what} is NULL")));
    }
    // SAFETY: non-null and, per reverb.h, pointing at writable memory for one `T`.
    unsafe { p.write(value) };
    Ok(())
}

/// An out-pointer is usable (checked before work that would be lost if it were not).
pub(crate) fn check_out<T>(p: *mut T, what: &str) -> Result<(), CError> {
    if p.is_null() {
        return Err(CError::invalid(format!("{what} is NULL")));
    }
    Ok(())
}

/// `len` bytes at `p` (NULL is allowed for 0 bytes).
pub(crate) fn bytes<'a>(p: *const c_void, len: usize, what: &str) -> Result<&'a [u8], CError> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(CError::invalid(format!("{what} is NULL with a length of {len}")));
    }
    // SAFETY: the caller promises `len` readable bytes at `p` for the duration of the call.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

/// `len` writable bytes at `p` (NULL is allowed for 0 bytes).
pub(crate) fn bytes_mut<'a>(p: *mut c_void, len: usize, what: &str) -> Result<&'a mut [u8], CError> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(CError::invalid(format!("{what} is NULL with a length of {len}")));
    }
    // SAFETY: the caller promises `len` writable bytes at `p`, not aliased by another live
    // reference, until the operation using them is done (reverb.h says when).
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) })
}

/// `max` writable entries at `p` (NULL is allowed for 0), to be written, never read.
pub(crate) fn entries<'a, T>(p: *mut T, max: usize, what: &str) -> Result<&'a mut [MaybeUninit<T>], CError> {
    if max == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(CError::invalid(format!("{what} is NULL with room for {max}")));
    }
    // SAFETY: the caller promises room for `max` entries at `p`; MaybeUninit reads nothing.
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<MaybeUninit<T>>(), max) })
}

/// Takes back a handle this library boxed and gave out; NULL is no handle.
pub(crate) fn take<T>(p: *mut T) -> Option<Box<T>> {
    // SAFETY: a non-null `p` came from `Box::into_raw` in this library and is freed only here
    // (reverb.h: each handle is freed once).
    (!p.is_null()).then(|| unsafe { Box::from_raw(p) })
}
