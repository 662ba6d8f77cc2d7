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
            let h = s.requests.insert(r)?;
            s.wait_request(h)?;
        }
        Ok(())
    })
}

fn isend(function: &str, mode: SendMode, a: SendArgs, request: Out<'_, c_int>) -> c_int {
    call(function, a.comm, |s| {
        let r = s.start_send_as(&a, mode)?;
        let h = s.requests.insert(r)?;
        ffi::out(request, h, "request")
    })
}

// Ready sends are standard sends (their bytes lent until the request completes); buffered
// ones are copied at once, their buffer free on return.

pub(crate) unsafe fn mpi_send(
    buf: UserBuf,
    count: c_int,
    datatype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
) -> c_int {
    send("MPI_Send", SendMode::Lent, SendArgs { buf, count: count.into(), datatype, dest, tag, comm })
}

pub(crate) unsafe fn mpi_isend(
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

pub(crate) unsafe fn mpi_ssend(
    buf: UserBuf,
    count: c_int,
    datatype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
) -> c_int {
    send("MPI_Ssend", SendMode::Sync, SendArgs { buf, count: count.into(), datatype, dest, tag, comm })
}

pub(crate) unsafe fn mpi_issend(
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

pub(crate) unsafe fn mpi_rsend(
    buf: UserBuf,
    count: c_int,
    datatype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
) -> c_int {
    send("MPI_Rsend", SendMode::Lent, SendArgs { buf, count: count.into(), datatype, dest, tag, comm })
}

pub(crate) unsafe fn mpi_irsend(
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

pub(crate) unsafe fn mpi_bsend(
    buf: UserBuf,
    count: c_int,
    datatype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
) -> c_int {
    send("MPI_Bsend", SendMode::Copied, SendArgs { buf, count: count.into(), datatype, dest, tag, comm })
}

pub(crate) unsafe fn mpi_ibsend(
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

pub(crate) unsafe fn mpi_buffer_attach(buffer: *mut c_void, size: c_int) -> c_int {
    call("MPI_Buffer_attach", MPI_COMM_WORLD, |s| {
        s.attached = Some((buffer as usize, size));
        Ok(())
    })
}

pub(crate) unsafe fn mpi_buffer_detach(buffer: *mut c_void, size: Out<'_, c_int>) -> c_int {
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

pub(crate) unsafe fn mpi_send_c(
    buf: UserBuf,
    count: c_long,
    datatype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
) -> c_int {
    send("MPI_Send_c", SendMode::Lent, SendArgs { buf, count, datatype, dest, tag, comm })
}

pub(crate) unsafe fn mpi_ssend_c(
    buf: UserBuf,
    count: c_long,
    datatype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
) -> c_int {
    send("MPI_Ssend_c", SendMode::Sync, SendArgs { buf, count, datatype, dest, tag, comm })
}

pub(crate) unsafe fn mpi_rsend_c(
    buf: UserBuf,
    count: c_long,
    datatype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
) -> c_int {
    send("MPI_Rsend_c", SendMode::Lent, SendArgs { buf, count, datatype, dest, tag, comm })
}

pub(crate) unsafe fn mpi_bsend_c(
    buf: UserBuf,
    count: c_long,
    datatype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
) -> c_int {
    send("MPI_Bsend_c", SendMode::Copied, SendArgs { buf, count, datatype, dest, tag, comm })
}

pub(crate) unsafe fn mpi_isend_c(
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

pub(crate) unsafe fn mpi_issend_c(
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

pub(crate) unsafe fn mpi_irsend_c(
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

pub(crate) unsafe fn mpi_ibsend_c(
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
