//! MPI's receive calls: receives, send-receives and probes, over `p2p.rs`.

use std::ffi::{c_int, c_long};

use crate::abi::*;
use crate::errors::{MpiError, MpiResult};
use crate::ffi;
use crate::ffi::{Out, StatusOut, UserBuf};
use crate::p2p::{SendArgs, SendMode};
use crate::request::{write_status, Status};
use crate::state::{call, State};

pub(crate) unsafe fn mpi_recv(
    buf: UserBuf,
    count: c_int,
    datatype: c_int,
    source: c_int,
    tag: c_int,
    comm: c_int,
    status: StatusOut<'_>,
) -> c_int {
    recv("MPI_Recv", RecvArgs { buf, count: count.into(), datatype, source, tag, comm }, status)
}

/// What a receive names.
struct RecvArgs {
    buf: UserBuf,
    /// Elements (MPI_Count wide, as `SendArgs::count`).
    count: i64,
    datatype: c_int,
    source: c_int,
    tag: c_int,
    comm: c_int,
}

fn post(s: &mut State, r: &RecvArgs) -> MpiResult<c_int> {
    s.post_recv(r.buf, r.count, r.datatype, r.source, r.tag, r.comm)
}

/// A blocking receive (MPI_Recv, MPI_Recv_c).
fn recv(function: &str, r: RecvArgs, status: StatusOut<'_>) -> c_int {
    call(function, r.comm, |s| {
        // With windows open or collectives started, a blocking receive waits by progressing:
        // it serves them.
        let st = if s.pending_recvs.is_empty() && s.wins.items.is_empty() && s.colls.is_empty() {
            s.recv_direct(r.buf, r.count, r.datatype, r.source, r.tag, r.comm)?
        } else {
            let h = post(s, &r)?;
            s.wait_request(h)?
        };
        write_status(status, st)?;
        truncation(st)
    })
}

/// A nonblocking receive (MPI_Irecv, MPI_Irecv_c).
fn irecv(function: &str, r: RecvArgs, request: Out<'_, c_int>) -> c_int {
    call(function, r.comm, |s| {
        let h = post(s, &r)?;
        ffi::out(request, h, "request")
    })
}

/// The receive posted first, then the send (complete at once): the receive's request.
fn post_sendrecv(s: &mut State, send: &SendArgs, recv: &RecvArgs) -> MpiResult<c_int> {
    let h = post(s, recv)?;
    s.start_send(send, false)?;
    Ok(h)
}

pub(crate) fn truncation(st: Status) -> MpiResult<()> {
    if st.error == MPI_ERR_TRUNCATE {
        return Err(MpiError::new(MPI_ERR_TRUNCATE, "the message is longer than the receive buffer"));
    }
    Ok(())
}

pub(crate) unsafe fn mpi_irecv(
    buf: UserBuf,
    count: c_int,
    datatype: c_int,
    source: c_int,
    tag: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    irecv("MPI_Irecv", RecvArgs { buf, count: count.into(), datatype, source, tag, comm }, request)
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_sendrecv(
    sendbuf: UserBuf,
    sendcount: c_int,
    sendtype: c_int,
    dest: c_int,
    sendtag: c_int,
    recvbuf: UserBuf,
    recvcount: c_int,
    recvtype: c_int,
    source: c_int,
    recvtag: c_int,
    comm: c_int,
    status: StatusOut<'_>,
) -> c_int {
    call("MPI_Sendrecv", comm, |s| {
        let send =
            SendArgs { buf: sendbuf, count: sendcount.into(), datatype: sendtype, dest, tag: sendtag, comm };
        let recv = RecvArgs {
            buf: recvbuf,
            count: recvcount.into(),
            datatype: recvtype,
            source,
            tag: recvtag,
            comm,
        };
        // The receive posted first; the send lent (read in place from 16 KiB, as MPI_Send's),
        // and waited for even when the receive failed: its bytes are lent until then.
        let h = post(s, &recv)?;
        let sent = s.start_send_as(&send, SendMode::Lent)?;
        let sent = s.requests.insert(sent)?;
        let st = s.wait_request(h);
        s.wait_request(sent)?;
        let st = st?;
        write_status(status, st)?;
        truncation(st)
    })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_sendrecv_replace(
    buf: UserBuf,
    count: c_int,
    datatype: c_int,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    comm: c_int,
    status: StatusOut<'_>,
) -> c_int {
    call("MPI_Sendrecv_replace", comm, |s| {
        // The send takes its bytes before the receive is matched into the same buffer.
        let a = SendArgs { buf, count: count.into(), datatype, dest, tag: sendtag, comm };
        s.start_send(&a, false)?;
        let h = s.post_recv(buf, count.into(), datatype, source, recvtag, comm)?;
        let st = s.wait_request(h)?;
        write_status(status, st)?;
        truncation(st)
    })
}

pub(crate) unsafe fn mpi_probe(source: c_int, tag: c_int, comm: c_int, status: StatusOut<'_>) -> c_int {
    call("MPI_Probe", comm, |s| {
        let found = s.probe_blocking(source, tag, comm)?;
        write_status(status, found)
    })
}

pub(crate) unsafe fn mpi_iprobe(
    source: c_int,
    tag: c_int,
    comm: c_int,
    flag: Out<'_, c_int>,
    status: StatusOut<'_>,
) -> c_int {
    call("MPI_Iprobe", comm, |s| match s.iprobe(source, tag, comm)? {
        Some(st) => {
            ffi::out(flag, 1, "flag")?;
            write_status(status, st)
        }
        None => ffi::out(flag, 0, "flag"),
    })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_isendrecv(
    sendbuf: UserBuf,
    sendcount: c_int,
    sendtype: c_int,
    dest: c_int,
    sendtag: c_int,
    recvbuf: UserBuf,
    recvcount: c_int,
    recvtype: c_int,
    source: c_int,
    recvtag: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    call("MPI_Isendrecv", comm, |s| {
        let send =
            SendArgs { buf: sendbuf, count: sendcount.into(), datatype: sendtype, dest, tag: sendtag, comm };
        let recv = RecvArgs {
            buf: recvbuf,
            count: recvcount.into(),
            datatype: recvtype,
            source,
            tag: recvtag,
            comm,
        };
        let h = post_sendrecv(s, &send, &recv)?;
        ffi::out(request, h, "request")
    })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_isendrecv_replace(
    buf: UserBuf,
    count: c_int,
    datatype: c_int,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    call("MPI_Isendrecv_replace", comm, |s| {
        // The send takes its bytes before the receive can be matched into the same buffer.
        let a = SendArgs { buf, count: count.into(), datatype, dest, tag: sendtag, comm };
        s.start_send(&a, false)?;
        let h = s.post_recv(buf, count.into(), datatype, source, recvtag, comm)?;
        ffi::out(request, h, "request")
    })
}

pub(crate) unsafe fn mpi_recv_c(
    buf: UserBuf,
    count: c_long,
    datatype: c_int,
    source: c_int,
    tag: c_int,
    comm: c_int,
    status: StatusOut<'_>,
) -> c_int {
    recv("MPI_Recv_c", RecvArgs { buf, count, datatype, source, tag, comm }, status)
}

pub(crate) unsafe fn mpi_irecv_c(
    buf: UserBuf,
    count: c_long,
    datatype: c_int,
    source: c_int,
    tag: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    irecv("MPI_Irecv_c", RecvArgs { buf, count, datatype, source, tag, comm }, request)
}
