//! MPI's completion calls: wait, test (one, all, any, some), cancel and free a request.

use std::ffi::c_int;

use crate::abi::*;
use crate::errors::{MpiError, MpiResult};
use crate::ffi;
use crate::ffi::{Out, StatusOut};
use crate::recv_api::truncation;
use crate::request::{write_status, write_status_at, Request, Status};
use crate::state::{call, State};

pub(crate) unsafe fn mpi_wait(request: Out<'_, c_int>, status: StatusOut<'_>) -> c_int {
    call("MPI_Wait", MPI_COMM_WORLD, |s| {
        let h = ffi::read(request, "request")?;
        let st = s.wait_request(h)?;
        ffi::out(request, s.after_completion(h), "request")?;
        write_status(status, st)?;
        truncation(st)
    })
}

pub(crate) unsafe fn mpi_test(request: Out<'_, c_int>, flag: Out<'_, c_int>, status: StatusOut<'_>) -> c_int {
    call("MPI_Test", MPI_COMM_WORLD, |s| {
        let h = ffi::read(request, "request")?;
        match s.test_request_settled(h)? {
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

pub(crate) unsafe fn mpi_waitall(count: c_int, requests: Out<'_, c_int>, statuses: StatusOut<'_>) -> c_int {
    call("MPI_Waitall", MPI_COMM_WORLD, |s| {
        let n = usize::try_from(count).map_err(|_| MpiError::new(MPI_ERR_COUNT, format!("count {count}")))?;
        // SAFETY: the array is as long as this call's counts say (the FFI contract); no other slice of it lives.
        let reqs = unsafe { ffi::array_mut(requests, n, "requests") }?;
        // Requests are collected in order, each once it is complete: a request left in the
        // table a while longer changes nothing (progress completes it there), and a round
        // costs what it collects, not a look at every request still pending.
        let mut next = 0;
        let mut failed = false;
        // wait_until progresses between rounds: a round only collects what completed.
        s.wait_until("MPI_Waitall", |s| {
            while let Some(h) = reqs.get_mut(next) {
                let Some(st) = s.test_request_now(*h)? else { return Ok(false) };
                *h = s.after_completion(*h);
                // SAFETY: the status array has an entry per request of this call (the contract).
                unsafe { write_status_at(statuses, next, st) }?;
                failed |= st.error != MPI_SUCCESS;
                next += 1;
            }
            Ok(true)
        })?;
        if failed {
            return Err(MpiError::new(MPI_ERR_IN_STATUS, "a request failed (see its status)"));
        }
        Ok(())
    })
}

pub(crate) unsafe fn mpi_testall(
    count: c_int,
    requests: Out<'_, c_int>,
    flag: Out<'_, c_int>,
    statuses: StatusOut<'_>,
) -> c_int {
    call("MPI_Testall", MPI_COMM_WORLD, |s| {
        let n = usize::try_from(count).map_err(|_| MpiError::new(MPI_ERR_COUNT, format!("count {count}")))?;
        // SAFETY: the array is as long as this call's counts say (the FFI contract); no other slice of it lives.
        let reqs = unsafe { ffi::array_mut(requests, n, "requests") }?;
        s.progress_settled()?;
        // All or nothing: requests are completed only when every one is.
        let all = reqs.iter().all(|&h| s.complete_now(h));
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
    *all_null = reqs.iter().all(|&h| s.inert(h));
    if *all_null {
        return Ok(None);
    }
    s.progress_settled()?;
    for (i, h) in reqs.iter_mut().enumerate() {
        if s.inert(*h) {
            continue;
        }
        if let Some(st) = s.test_request_now(*h)? {
            *h = s.after_completion(*h);
            return Ok(Some((i, st)));
        }
    }
    Ok(None)
}

pub(crate) unsafe fn mpi_waitany(
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

pub(crate) unsafe fn mpi_testany(
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
        if reqs.iter().all(|&h| s.inert(h)) {
            return ffi::out(outcount, MPI_UNDEFINED, "outcount");
        }
        let mut got: Vec<(usize, Status)> = Vec::new();
        let mut collect = |s: &mut State| -> MpiResult<bool> {
            s.progress_settled()?;
            for (i, h) in reqs.iter_mut().enumerate() {
                if s.inert(*h) {
                    continue;
                }
                if let Some(st) = s.test_request_now(*h)? {
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

pub(crate) unsafe fn mpi_waitsome(
    incount: c_int,
    requests: Out<'_, c_int>,
    outcount: Out<'_, c_int>,
    indices: Out<'_, c_int>,
    statuses: StatusOut<'_>,
) -> c_int {
    some("MPI_Waitsome", true, incount, requests, outcount, indices, statuses)
}

pub(crate) unsafe fn mpi_testsome(
    incount: c_int,
    requests: Out<'_, c_int>,
    outcount: Out<'_, c_int>,
    indices: Out<'_, c_int>,
    statuses: StatusOut<'_>,
) -> c_int {
    some("MPI_Testsome", false, incount, requests, outcount, indices, statuses)
}

/// Cancels a receive not yet matched (its status says so); a send cannot be cancelled once
/// the runtime took it, and completes as usual.
pub(crate) unsafe fn mpi_cancel(request: Out<'_, c_int>) -> c_int {
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
            s.pending_recvs.remove_request(h);
            let st = Status { cancelled: true, ..Status::empty() };
            if let Some(r) = s.requests.get_mut(h) {
                *r = Request::Done(st);
            }
        }
        Ok(())
    })
}

pub(crate) unsafe fn mpi_request_free(request: Out<'_, c_int>) -> c_int {
    call("MPI_Request_free", MPI_COMM_WORLD, |s| {
        let h = ffi::read(request, "request")?;
        match s.requests.remove(h) {
            Some(Request::Persistent(p)) => {
                if let Some(inner) = p.active {
                    s.pending_recvs.remove_request(inner);
                    if let Some(Request::Coll) = s.requests.remove(inner) {
                        s.forget_coll(inner);
                    }
                }
            }
            Some(Request::Generalized(g)) => {
                if let Some(free) = g.free {
                    ffi::grequest_free(free, g.extra_state);
                }
            }
            // Its bytes must still leave: the progress loop and MPI_Finalize see to it.
            Some(Request::LentSend(op)) => s.freed_lent.push(op),
            Some(Request::Coll) => s.forget_coll(h),
            _ => s.pending_recvs.remove_request(h),
        }
        ffi::out(request, MPI_REQUEST_NULL, "request")
    })
}

pub(crate) unsafe fn mpi_request_get_status(
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
