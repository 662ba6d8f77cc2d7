//! MPI's send calls (every mode, blocking and not, and the `_c` forms), over `p2p.rs`; the
//! buffer of buffered sends.

use std::ffi::{c_int, c_long, c_void};

use crate::abi::*;
use crate::ffi;
use crate::ffi::{Out, UserBuf};
use crate::p2p::{SendArgs, SendMode};
use crate::request::Request;
use crate::state::call;

fn send(function: &str, mode: SendMode, a: SendArgs) -> c_int {
    call(function, a.comm, |s| {
        let r = s.start_send_as(&a, mode)?;
        if let Request::SyncSend(_) | Request::LentSend(_) = r {
            let h = s.requests.insert(r);
            s.wait_request(h)?;
        }
        Ok(())
    })
}

fn isend(function: &str, mode: SendMode, a: SendArgs, request: Out<'_, c_int>) -> c_int {
    call(function, a.comm, |s| {
        let r = s.start_send_as(&a, mode)?;
        let h = s.requests.insert(r);
        ffi::out(request, h, "request")
    })
}

// Ready sends are standard sends (their bytes lent until the request completes); buffered
// ones are copied at once, their buffer free on return.

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `buf`: message buffers, each spanning its count of its datatype, for the call.
#[export_name = "PMPI_Send"]
pub unsafe extern "C" fn MPI_Send(
    buf: UserBuf,
    count: c_int,
    datatype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
) -> c_int {
    send("MPI_Send", SendMode::Lent, SendArgs { buf, count: count.into(), datatype, dest, tag, comm })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `buf`: message buffers, each spanning its count of its datatype, until the request completes;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Isend"]
pub unsafe extern "C" fn MPI_Isend(
    buf: UserBuf,
    count: c_int,
    datatype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    isend(
        "MPI_Isend",
        SendMode::Lent,
        SendArgs { buf, count: count.into(), datatype, dest, tag, comm },
        request,
    )
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `buf`: message buffers, each spanning its count of its datatype, for the call.
#[export_name = "PMPI_Ssend"]
pub unsafe extern "C" fn MPI_Ssend(
    buf: UserBuf,
    count: c_int,
    datatype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
) -> c_int {
    send("MPI_Ssend", SendMode::Sync, SendArgs { buf, count: count.into(), datatype, dest, tag, comm })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `buf`: message buffers, each spanning its count of its datatype, until the request completes;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Issend"]
pub unsafe extern "C" fn MPI_Issend(
    buf: UserBuf,
    count: c_int,
    datatype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    isend(
        "MPI_Issend",
        SendMode::Sync,
        SendArgs { buf, count: count.into(), datatype, dest, tag, comm },
        request,
    )
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `buf`: message buffers, each spanning its count of its datatype, for the call.
#[export_name = "PMPI_Rsend"]
pub unsafe extern "C" fn MPI_Rsend(
    buf: UserBuf,
    count: c_int,
    datatype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
) -> c_int {
    send("MPI_Rsend", SendMode::Lent, SendArgs { buf, count: count.into(), datatype, dest, tag, comm })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `buf`: message buffers, each spanning its count of its datatype, until the request completes;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Irsend"]
pub unsafe extern "C" fn MPI_Irsend(
    buf: UserBuf,
    count: c_int,
    datatype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    isend(
        "MPI_Irsend",
        SendMode::Lent,
        SendArgs { buf, count: count.into(), datatype, dest, tag, comm },
        request,
    )
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `buf`: message buffers, each spanning its count of its datatype, for the call.
#[export_name = "PMPI_Bsend"]
pub unsafe extern "C" fn MPI_Bsend(
    buf: UserBuf,
    count: c_int,
    datatype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
) -> c_int {
    send("MPI_Bsend", SendMode::Copied, SendArgs { buf, count: count.into(), datatype, dest, tag, comm })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `buf`: message buffers, each spanning its count of its datatype, until the request completes;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Ibsend"]
pub unsafe extern "C" fn MPI_Ibsend(
    buf: UserBuf,
    count: c_int,
    datatype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    isend(
        "MPI_Ibsend",
        SendMode::Copied,
        SendArgs { buf, count: count.into(), datatype, dest, tag, comm },
        request,
    )
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `buffer`: opaque, never dereferenced here.
#[export_name = "PMPI_Buffer_attach"]
pub unsafe extern "C" fn MPI_Buffer_attach(buffer: *mut c_void, size: c_int) -> c_int {
    call("MPI_Buffer_attach", MPI_COMM_WORLD, |s| {
        s.attached = Some((buffer as usize, size));
        Ok(())
    })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `size`: null or writable for the call; `buffer`: null or writable for one `void *` for the
/// call (declared `void *`, used as `void **`).
#[export_name = "PMPI_Buffer_detach"]
pub unsafe extern "C" fn MPI_Buffer_detach(buffer: *mut c_void, size: Out<'_, c_int>) -> c_int {
    call("MPI_Buffer_detach", MPI_COMM_WORLD, |s| {
        let (addr, n) = s.attached.take().unwrap_or((0, 0));
        // `buffer` is a `void **` in C.
        // SAFETY: the contract above: `buffer` points at a `void *`.
        let buffer = unsafe { Out::from_raw(buffer.cast::<usize>()) };
        ffi::out(buffer, addr, "buffer")?;
        ffi::out(size, n, "size")
    })
}

// The large-count (`_c`) forms: MPI_Count counts.

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `buf`: message buffers, each spanning its count of its datatype, for the call.
#[export_name = "PMPI_Send_c"]
pub unsafe extern "C" fn MPI_Send_c(
    buf: UserBuf,
    count: c_long,
    datatype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
) -> c_int {
    send("MPI_Send_c", SendMode::Lent, SendArgs { buf, count, datatype, dest, tag, comm })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `buf`: message buffers, each spanning its count of its datatype, for the call.
#[export_name = "PMPI_Ssend_c"]
pub unsafe extern "C" fn MPI_Ssend_c(
    buf: UserBuf,
    count: c_long,
    datatype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
) -> c_int {
    send("MPI_Ssend_c", SendMode::Sync, SendArgs { buf, count, datatype, dest, tag, comm })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `buf`: message buffers, each spanning its count of its datatype, for the call.
#[export_name = "PMPI_Rsend_c"]
pub unsafe extern "C" fn MPI_Rsend_c(
    buf: UserBuf,
    count: c_long,
    datatype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
) -> c_int {
    send("MPI_Rsend_c", SendMode::Lent, SendArgs { buf, count, datatype, dest, tag, comm })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `buf`: message buffers, each spanning its count of its datatype, for the call.
#[export_name = "PMPI_Bsend_c"]
pub unsafe extern "C" fn MPI_Bsend_c(
    buf: UserBuf,
    count: c_long,
    datatype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
) -> c_int {
    send("MPI_Bsend_c", SendMode::Copied, SendArgs { buf, count, datatype, dest, tag, comm })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `buf`: message buffers, each spanning its count of its datatype, until the request completes;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Isend_c"]
pub unsafe extern "C" fn MPI_Isend_c(
    buf: UserBuf,
    count: c_long,
    datatype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    isend("MPI_Isend_c", SendMode::Lent, SendArgs { buf, count, datatype, dest, tag, comm }, request)
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `buf`: message buffers, each spanning its count of its datatype, until the request completes;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Issend_c"]
pub unsafe extern "C" fn MPI_Issend_c(
    buf: UserBuf,
    count: c_long,
    datatype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    isend("MPI_Issend_c", SendMode::Sync, SendArgs { buf, count, datatype, dest, tag, comm }, request)
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `buf`: message buffers, each spanning its count of its datatype, until the request completes;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Irsend_c"]
pub unsafe extern "C" fn MPI_Irsend_c(
    buf: UserBuf,
    count: c_long,
    datatype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    isend("MPI_Irsend_c", SendMode::Lent, SendArgs { buf, count, datatype, dest, tag, comm }, request)
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `buf`: message buffers, each spanning its count of its datatype, until the request completes;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Ibsend_c"]
pub unsafe extern "C" fn MPI_Ibsend_c(
    buf: UserBuf,
    count: c_long,
    datatype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    isend("MPI_Ibsend_c", SendMode::Copied, SendArgs { buf, count, datatype, dest, tag, comm }, request)
}
