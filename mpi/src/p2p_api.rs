//! MPI's point-to-point calls, over `p2p.rs`.

use std::ffi::{c_int, c_long, c_void};

use crate::abi::*;
use crate::errors::{MpiError, MpiResult};
use crate::ffi;
use crate::ffi::{In, Out, StatusOut, UserBuf};
use crate::p2p::{SendArgs, SendMode};
use crate::request::{write_status, write_status_at, CStatus, Request, Status};
use crate::state::{call, State};

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
/// `buf`: message buffers, each spanning its count of its datatype, for the call;
/// `status`: null, `MPI_STATUS(ES)_IGNORE`, or writable statuses.
#[export_name = "PMPI_Recv"]
pub unsafe extern "C" fn MPI_Recv(
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
        // With windows open, a blocking receive waits by progressing: it serves them.
        let st = if s.pending_recvs.is_empty() && s.wins.items.is_empty() {
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

fn truncation(st: Status) -> MpiResult<()> {
    if st.error == MPI_ERR_TRUNCATE {
        return Err(MpiError::new(MPI_ERR_TRUNCATE, "the message is longer than the receive buffer"));
    }
    Ok(())
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `buf`: message buffers, each spanning its count of its datatype, until the request completes;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Irecv"]
pub unsafe extern "C" fn MPI_Irecv(
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

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, for the call;
/// `status`: null, `MPI_STATUS(ES)_IGNORE`, or writable statuses.
#[export_name = "PMPI_Sendrecv"]
pub unsafe extern "C" fn MPI_Sendrecv(
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
        let h = post_sendrecv(s, &send, &recv)?;
        let st = s.wait_request(h)?;
        write_status(status, st)?;
        truncation(st)
    })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `buf`: message buffers, each spanning its count of its datatype, for the call;
/// `status`: null, `MPI_STATUS(ES)_IGNORE`, or writable statuses.
#[export_name = "PMPI_Sendrecv_replace"]
pub unsafe extern "C" fn MPI_Sendrecv_replace(
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

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `request`: null or writable for the call (arrays as long as the counts say);
/// `status`: null, `MPI_STATUS(ES)_IGNORE`, or writable statuses.
#[export_name = "PMPI_Wait"]
pub unsafe extern "C" fn MPI_Wait(request: Out<'_, c_int>, status: StatusOut<'_>) -> c_int {
    call("MPI_Wait", MPI_COMM_WORLD, |s| {
        let h = ffi::read(request, "request")?;
        let st = s.wait_request(h)?;
        ffi::out(request, s.after_completion(h), "request")?;
        write_status(status, st)?;
        truncation(st)
    })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `request`, `flag`: null or writable for the call (arrays as long as the counts say);
/// `status`: null, `MPI_STATUS(ES)_IGNORE`, or writable statuses.
#[export_name = "PMPI_Test"]
pub unsafe extern "C" fn MPI_Test(
    request: Out<'_, c_int>,
    flag: Out<'_, c_int>,
    status: StatusOut<'_>,
) -> c_int {
    call("MPI_Test", MPI_COMM_WORLD, |s| {
        let h = ffi::read(request, "request")?;
        match s.test_request(h)? {
            Some(st) => {
                ffi::out(request, s.after_completion(h), "request")?;
                ffi::out(flag, 1, "flag")?;
                write_status(status, st)?;
                truncation(st)
            }
            None => ffi::out(flag, 0, "flag"),
        }
    })
}

/// Completes every request it can of `reqs`; how many completed now.
fn complete_ready(
    s: &mut State,
    reqs: &mut [c_int],
    statuses: StatusOut<'_>,
    done: &mut [bool],
) -> MpiResult<usize> {
    let mut n = 0;
    for (i, h) in reqs.iter_mut().enumerate() {
        if done[i] {
            continue;
        }
        if let Some(st) = s.test_request(*h)? {
            *h = s.after_completion(*h);
            // SAFETY: the status array has an entry per request of this call (the contract).
            unsafe { write_status_at(statuses, i, st) }?;
            done[i] = true;
            n += 1;
        }
    }
    Ok(n)
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `requests`: null or writable for the call (arrays as long as the counts say);
/// `statuses`: null, `MPI_STATUS(ES)_IGNORE`, or writable statuses.
#[export_name = "PMPI_Waitall"]
pub unsafe extern "C" fn MPI_Waitall(
    count: c_int,
    requests: Out<'_, c_int>,
    statuses: StatusOut<'_>,
) -> c_int {
    call("MPI_Waitall", MPI_COMM_WORLD, |s| {
        let n = usize::try_from(count).map_err(|_| MpiError::new(MPI_ERR_COUNT, format!("count {count}")))?;
        // SAFETY: the array is as long as this call's counts say (the FFI contract); no other slice of it lives.
        let reqs = unsafe { ffi::array_mut(requests, n, "requests") }?;
        let mut done = vec![false; n];
        let mut errors = Vec::new();
        s.wait_until("MPI_Waitall", |s| {
            for (i, h) in reqs.iter_mut().enumerate() {
                if done[i] {
                    continue;
                }
                if let Some(st) = s.test_request(*h)? {
                    *h = s.after_completion(*h);
                    // SAFETY: the status array has an entry per request of this call (the contract).
                    unsafe { write_status_at(statuses, i, st) }?;
                    done[i] = true;
                    if st.error != MPI_SUCCESS {
                        errors.push(st.error);
                    }
                }
            }
            Ok(done.iter().all(|&d| d))
        })?;
        if !errors.is_empty() {
            return Err(MpiError::new(MPI_ERR_IN_STATUS, "a request failed (see its status)"));
        }
        Ok(())
    })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `requests`, `flag`: null or writable for the call (arrays as long as the counts say);
/// `statuses`: null, `MPI_STATUS(ES)_IGNORE`, or writable statuses.
#[export_name = "PMPI_Testall"]
pub unsafe extern "C" fn MPI_Testall(
    count: c_int,
    requests: Out<'_, c_int>,
    flag: Out<'_, c_int>,
    statuses: StatusOut<'_>,
) -> c_int {
    call("MPI_Testall", MPI_COMM_WORLD, |s| {
        let n = usize::try_from(count).map_err(|_| MpiError::new(MPI_ERR_COUNT, format!("count {count}")))?;
        // SAFETY: the array is as long as this call's counts say (the FFI contract); no other slice of it lives.
        let reqs = unsafe { ffi::array_mut(requests, n, "requests") }?;
        s.progress()?;
        // All or nothing: requests are completed only when every one is.
        let all = reqs
            .iter()
            .all(|&h| h == MPI_REQUEST_NULL || s.requests.get(h).and_then(Request::done).is_some());
        if all {
            let mut done = vec![false; n];
            complete_ready(s, reqs, statuses, &mut done)?;
        }
        ffi::out(flag, c_int::from(all), "flag")
    })
}

/// The first active request of `reqs` complete now: (index, status), or None; `all_null` is
/// set when no request is active.
fn any_done(s: &mut State, reqs: &mut [c_int], all_null: &mut bool) -> MpiResult<Option<(usize, Status)>> {
    *all_null = reqs.iter().all(|&h| h == MPI_REQUEST_NULL);
    if *all_null {
        return Ok(None);
    }
    s.progress()?;
    for (i, h) in reqs.iter_mut().enumerate() {
        if *h == MPI_REQUEST_NULL {
            continue;
        }
        if let Some(st) = s.test_request(*h)? {
            *h = s.after_completion(*h);
            return Ok(Some((i, st)));
        }
    }
    Ok(None)
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `requests`, `index`: null or writable for the call (arrays as long as the counts say);
/// `status`: null, `MPI_STATUS(ES)_IGNORE`, or writable statuses.
#[export_name = "PMPI_Waitany"]
pub unsafe extern "C" fn MPI_Waitany(
    count: c_int,
    requests: Out<'_, c_int>,
    index: Out<'_, c_int>,
    status: StatusOut<'_>,
) -> c_int {
    call("MPI_Waitany", MPI_COMM_WORLD, |s| {
        let n = usize::try_from(count).map_err(|_| MpiError::new(MPI_ERR_COUNT, format!("count {count}")))?;
        // SAFETY: the array is as long as this call's counts say (the FFI contract); no other slice of it lives.
        let reqs = unsafe { ffi::array_mut(requests, n, "requests") }?;
        let mut found = None;
        let mut all_null = false;
        s.wait_until("MPI_Waitany", |s| {
            found = any_done(s, reqs, &mut all_null)?;
            Ok(found.is_some() || all_null)
        })?;
        match found {
            Some((i, st)) => {
                ffi::out(index, i as c_int, "index")?;
                write_status(status, st)?;
                truncation(st)
            }
            None => {
                ffi::out(index, MPI_UNDEFINED, "index")?;
                write_status(status, Status::empty())
            }
        }
    })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `requests`, `index`, `flag`: null or writable for the call (arrays as long as the counts say);
/// `status`: null, `MPI_STATUS(ES)_IGNORE`, or writable statuses.
#[export_name = "PMPI_Testany"]
pub unsafe extern "C" fn MPI_Testany(
    count: c_int,
    requests: Out<'_, c_int>,
    index: Out<'_, c_int>,
    flag: Out<'_, c_int>,
    status: StatusOut<'_>,
) -> c_int {
    call("MPI_Testany", MPI_COMM_WORLD, |s| {
        let n = usize::try_from(count).map_err(|_| MpiError::new(MPI_ERR_COUNT, format!("count {count}")))?;
        // SAFETY: the array is as long as this call's counts say (the FFI contract); no other slice of it lives.
        let reqs = unsafe { ffi::array_mut(requests, n, "requests") }?;
        let mut all_null = false;
        match any_done(s, reqs, &mut all_null)? {
            Some((i, st)) => {
                ffi::out(index, i as c_int, "index")?;
                ffi::out(flag, 1, "flag")?;
                write_status(status, st)
            }
            None => {
                ffi::out(index, MPI_UNDEFINED, "index")?;
                ffi::out(flag, c_int::from(all_null), "flag")?;
                if all_null {
                    write_status(status, Status::empty())?;
                }
                Ok(())
            }
        }
    })
}

fn some(
    function: &str,
    wait: bool,
    incount: c_int,
    requests: Out<'_, c_int>,
    outcount: Out<'_, c_int>,
    indices: Out<'_, c_int>,
    statuses: StatusOut<'_>,
) -> c_int {
    call(function, MPI_COMM_WORLD, |s| {
        let n =
            usize::try_from(incount).map_err(|_| MpiError::new(MPI_ERR_COUNT, format!("count {incount}")))?;
        // SAFETY: the array is as long as this call's counts say (the FFI contract); no other slice of it lives.
        let reqs = unsafe { ffi::array_mut(requests, n, "requests") }?;
        if reqs.iter().all(|&h| h == MPI_REQUEST_NULL) {
            return ffi::out(outcount, MPI_UNDEFINED, "outcount");
        }
        let mut got: Vec<(usize, Status)> = Vec::new();
        let mut collect = |s: &mut State| -> MpiResult<bool> {
            s.progress()?;
            for (i, h) in reqs.iter_mut().enumerate() {
                if *h == MPI_REQUEST_NULL {
                    continue;
                }
                if let Some(st) = s.test_request(*h)? {
                    *h = s.after_completion(*h);
                    got.push((i, st));
                }
            }
            Ok(!got.is_empty())
        };
        if wait {
            s.wait_until(function, &mut collect)?;
        } else {
            collect(s)?;
        }
        // SAFETY: the array is as long as this call's counts say (the FFI contract); no other slice of it lives.
        let idx = unsafe { ffi::array_mut(indices, got.len(), "indices") }?;
        for (k, (i, st)) in got.iter().enumerate() {
            idx[k] = *i as c_int;
            // SAFETY: the status array has an entry per request of this call (the contract).
            unsafe { write_status_at(statuses, k, *st) }?;
        }
        ffi::out(outcount, got.len() as c_int, "outcount")
    })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `requests`, `outcount`, `indices`: null or writable for the call (arrays as long as the counts say);
/// `statuses`: null, `MPI_STATUS(ES)_IGNORE`, or writable statuses.
#[export_name = "PMPI_Waitsome"]
pub unsafe extern "C" fn MPI_Waitsome(
    incount: c_int,
    requests: Out<'_, c_int>,
    outcount: Out<'_, c_int>,
    indices: Out<'_, c_int>,
    statuses: StatusOut<'_>,
) -> c_int {
    some("MPI_Waitsome", true, incount, requests, outcount, indices, statuses)
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `requests`, `outcount`, `indices`: null or writable for the call (arrays as long as the counts say);
/// `statuses`: null, `MPI_STATUS(ES)_IGNORE`, or writable statuses.
#[export_name = "PMPI_Testsome"]
pub unsafe extern "C" fn MPI_Testsome(
    incount: c_int,
    requests: Out<'_, c_int>,
    outcount: Out<'_, c_int>,
    indices: Out<'_, c_int>,
    statuses: StatusOut<'_>,
) -> c_int {
    some("MPI_Testsome", false, incount, requests, outcount, indices, statuses)
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `status`: null, `MPI_STATUS(ES)_IGNORE`, or writable statuses.
#[export_name = "PMPI_Probe"]
pub unsafe extern "C" fn MPI_Probe(source: c_int, tag: c_int, comm: c_int, status: StatusOut<'_>) -> c_int {
    call("MPI_Probe", comm, |s| {
        let mut found = None;
        s.wait_until("MPI_Probe", |s| {
            found = s.probe_now(source, tag, comm)?;
            Ok(found.is_some())
        })?;
        write_status(status, found.unwrap_or_else(Status::empty))
    })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `flag`: null or writable for the call (arrays as long as the counts say);
/// `status`: null, `MPI_STATUS(ES)_IGNORE`, or writable statuses.
#[export_name = "PMPI_Iprobe"]
pub unsafe extern "C" fn MPI_Iprobe(
    source: c_int,
    tag: c_int,
    comm: c_int,
    flag: Out<'_, c_int>,
    status: StatusOut<'_>,
) -> c_int {
    call("MPI_Iprobe", comm, |s| {
        s.progress()?;
        match s.probe_now(source, tag, comm)? {
            Some(st) => {
                ffi::out(flag, 1, "flag")?;
                write_status(status, st)
            }
            None => ffi::out(flag, 0, "flag"),
        }
    })
}

/// Cancels a receive not yet matched (its status says so); a send cannot be cancelled once
/// the runtime took it, and completes as usual.
///
/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Cancel"]
pub unsafe extern "C" fn MPI_Cancel(request: Out<'_, c_int>) -> c_int {
    call("MPI_Cancel", MPI_COMM_WORLD, |s| {
        let h = ffi::read(request, "request")?;
        if let Some(Request::Generalized(g)) = s.requests.get(h) {
            if let Some(cancel) = g.cancel {
                let rc = ffi::grequest_cancel(cancel, g.extra_state, g.complete);
                if rc != MPI_SUCCESS {
                    return Err(MpiError::new(rc, "the generalized request's cancel function failed"));
                }
            }
            return Ok(());
        }
        if let Some(Request::Recv(_)) = s.requests.get(h) {
            s.pending_recvs.retain(|&p| p != h);
            let st = Status { cancelled: true, ..Status::empty() };
            if let Some(r) = s.requests.get_mut(h) {
                *r = Request::Done(st);
            }
        }
        Ok(())
    })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `status`: null or readable for the call (arrays as long as the counts say);
/// `flag`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Test_cancelled"]
pub unsafe extern "C" fn MPI_Test_cancelled(status: In<'_, CStatus>, flag: Out<'_, c_int>) -> c_int {
    call("MPI_Test_cancelled", MPI_COMM_WORLD, |_| {
        let st = ffi::read(status, "status")?;
        ffi::out(flag, st.count_hi_and_cancelled & 1, "flag")
    })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Request_free"]
pub unsafe extern "C" fn MPI_Request_free(request: Out<'_, c_int>) -> c_int {
    call("MPI_Request_free", MPI_COMM_WORLD, |s| {
        let h = ffi::read(request, "request")?;
        match s.requests.remove(h) {
            Some(Request::Persistent(p)) => {
                if let Some(inner) = p.active {
                    s.pending_recvs.retain(|&r| r != inner);
                    s.requests.remove(inner);
                }
            }
            Some(Request::Generalized(g)) => {
                if let Some(free) = g.free {
                    ffi::grequest_free(free, g.extra_state);
                }
            }
            // Its bytes must still leave: the progress loop and MPI_Finalize see to it.
            Some(Request::LentSend(op)) => s.freed_lent.push(op),
            _ => s.pending_recvs.retain(|&p| p != h),
        }
        ffi::out(request, MPI_REQUEST_NULL, "request")
    })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `flag`: null or writable for the call (arrays as long as the counts say);
/// `status`: null, `MPI_STATUS(ES)_IGNORE`, or writable statuses.
#[export_name = "PMPI_Request_get_status"]
pub unsafe extern "C" fn MPI_Request_get_status(
    request: c_int,
    flag: Out<'_, c_int>,
    status: StatusOut<'_>,
) -> c_int {
    call("MPI_Request_get_status", MPI_COMM_WORLD, |s| {
        if request == MPI_REQUEST_NULL {
            ffi::out(flag, 1, "flag")?;
            return write_status(status, Status::empty());
        }
        s.progress()?;
        let inner = match s.requests.get(request) {
            Some(Request::Persistent(p)) => p.active.unwrap_or(MPI_REQUEST_NULL),
            _ => request,
        };
        match s.requests.get(inner).and_then(Request::done) {
            Some(st) => {
                ffi::out(flag, 1, "flag")?;
                write_status(status, st)
            }
            None if s.complete_now(inner) => {
                ffi::out(flag, 1, "flag")?;
                write_status(status, Status::empty())
            }
            None => ffi::out(flag, 0, "flag"),
        }
    })
}

fn elements(status: In<'_, CStatus>, datatype: c_int, count: Out<'_, c_int>, function: &str) -> c_int {
    call(function, MPI_COMM_WORLD, |s| {
        let st = ffi::read(status, "status")?;
        let size = s.datatype(datatype)?.size;
        let bytes = st.bytes();
        let n = match size {
            0 => 0,
            _ if bytes % size != 0 => MPI_UNDEFINED,
            _ => c_int::try_from(bytes / size).unwrap_or(MPI_UNDEFINED),
        };
        ffi::out(count, n, "count")
    })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `status`: null or readable for the call (arrays as long as the counts say);
/// `count`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Get_count"]
pub unsafe extern "C" fn MPI_Get_count(
    status: In<'_, CStatus>,
    datatype: c_int,
    count: Out<'_, c_int>,
) -> c_int {
    elements(status, datatype, count, "MPI_Get_count")
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `status`: null or readable for the call (arrays as long as the counts say);
/// `count`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Get_elements"]
pub unsafe extern "C" fn MPI_Get_elements(
    status: In<'_, CStatus>,
    datatype: c_int,
    count: Out<'_, c_int>,
) -> c_int {
    elements(status, datatype, count, "MPI_Get_elements")
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

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `sendbuf`, `recvbuf`: message buffers, each spanning its count of its datatype, until the request completes;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Isendrecv"]
pub unsafe extern "C" fn MPI_Isendrecv(
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

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `buf`: message buffers, each spanning its count of its datatype, until the request completes;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Isendrecv_replace"]
pub unsafe extern "C" fn MPI_Isendrecv_replace(
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

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `buf`: message buffers, each spanning its count of its datatype, for the call;
/// `status`: null, `MPI_STATUS(ES)_IGNORE`, or writable statuses.
#[export_name = "PMPI_Recv_c"]
pub unsafe extern "C" fn MPI_Recv_c(
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

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `buf`: message buffers, each spanning its count of its datatype, until the request completes;
/// `request`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Irecv_c"]
pub unsafe extern "C" fn MPI_Irecv_c(
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

fn elements_wide(status: In<'_, CStatus>, datatype: c_int, count: Out<'_, c_long>, function: &str) -> c_int {
    call(function, MPI_COMM_WORLD, |s| {
        let st = ffi::read(status, "status")?;
        let size = s.datatype(datatype)?.size;
        let bytes = st.bytes();
        let n = match size {
            0 => 0,
            _ if bytes % size != 0 => c_long::from(MPI_UNDEFINED),
            _ => (bytes / size) as c_long,
        };
        ffi::out(count, n, "count")
    })
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `status`: null or readable for the call (arrays as long as the counts say);
/// `count`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Get_count_c"]
pub unsafe extern "C" fn MPI_Get_count_c(
    status: In<'_, CStatus>,
    datatype: c_int,
    count: Out<'_, c_long>,
) -> c_int {
    elements_wide(status, datatype, count, "MPI_Get_count_c")
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `status`: null or readable for the call (arrays as long as the counts say);
/// `count`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Get_elements_c"]
pub unsafe extern "C" fn MPI_Get_elements_c(
    status: In<'_, CStatus>,
    datatype: c_int,
    count: Out<'_, c_long>,
) -> c_int {
    elements_wide(status, datatype, count, "MPI_Get_elements_c")
}

/// # Safety
///
/// Pointer arguments follow the FFI contract (`ffi.rs`):
/// `status`: null or readable for the call (arrays as long as the counts say);
/// `count`: null or writable for the call (arrays as long as the counts say).
#[export_name = "PMPI_Get_elements_x"]
pub unsafe extern "C" fn MPI_Get_elements_x(
    status: In<'_, CStatus>,
    datatype: c_int,
    count: Out<'_, c_long>,
) -> c_int {
    elements_wide(status, datatype, count, "MPI_Get_elements_x")
}
