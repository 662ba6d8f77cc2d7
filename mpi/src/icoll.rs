//! Nonblocking collectives: each runs to completion when it is called and returns a request
//! that is complete (MPI lets an implementation do so; every rank must still call it in the
//! same order, which MPI requires anyway). Progress while the program computes between the
//! call and its wait is not overlapped.

use std::ffi::c_int;

use crate::abi::*;
use crate::ffi;
use crate::ffi::Out;
use crate::request::{Request, Status};
use crate::state::call;

/// Runs the blocking collective; on success, a complete request in `*request`.
pub(crate) fn completed(function: &str, comm: c_int, request: Out<'_, c_int>, rc: c_int) -> c_int {
    if rc != MPI_SUCCESS {
        return rc;
    }
    call(function, comm, |s| {
        let h = s.requests.insert(Request::Done(Status::empty()));
        ffi::out(request, h, "request")
    })
}
