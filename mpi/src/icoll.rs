//! Nonblocking collectives (`MPI_I<x>`, `MPI_Comm_idup`, a persistent collective's start):
//! each runs its blocking collective as a coroutine (coro.rs) that suspends where the
//! blocking code would wait for a message, so the algorithm, and the messages it sends, are
//! the blocking one's. The call returns an incomplete request; MPI progress (every test,
//! wait and blocking call) resumes the started collectives in the order they were started.
//!
//! Each runs under its own tag sequence number on its communicator (`tags::coll`): MPI has
//! every member start a communicator's collectives in one order, so the n-th nonblocking
//! collective has the same number at every member, and concurrent collectives, on one
//! communicator or several, never take each other's messages. Blocking collectives use 0.

use std::ffi::c_int;

use crate::abi::*;
use crate::coro::{self, Step, Task};
use crate::errors::{MpiError, MpiResult};
use crate::ffi;
use crate::ffi::Out;
use crate::request::{Request, Status};
use crate::state::{call, State};
use crate::tags;

/// A started nonblocking collective: its request's handle, its tag sequence number and its
/// coroutine.
#[derive(Debug)]
pub struct Started {
    handle: c_int,
    seq: u32,
    task: Task,
}

/// Persistent collectives number from here (fixed at their `_init`); nonblocking ones below,
/// from 1 (wrapping), so neither reuses the other's numbers.
const PERSISTENT_SEQ: u32 = tags::SEQ_LIMIT / 2;

/// Starts `run` (the blocking collective on `comm`) as a nonblocking one; its request in
/// `*request`. An error found before it first waits (a bad argument) is returned here, as
/// the blocking call would.
pub(crate) fn start(
    function: &str,
    comm: c_int,
    request: Out<'_, c_int>,
    run: impl FnOnce() -> c_int + 'static,
) -> c_int {
    let mut first = MPI_SUCCESS;
    let rc = call(function, comm, |s| {
        let seq = s.next_coll_seq(comm, false)?;
        let (h, done) = s.start_coll(seq, run)?;
        first = done.unwrap_or(MPI_SUCCESS);
        ffi::out(request, h, "request")
    });
    // The collective's own error went through its communicator's handler already.
    if rc != MPI_SUCCESS {
        rc
    } else {
        first
    }
}

impl State {
    /// The tag sequence number of the next nonblocking (or, `persistent`, persistent)
    /// collective on `comm`.
    pub fn next_coll_seq(&mut self, comm: c_int, persistent: bool) -> MpiResult<u32> {
        let context = self.comm(comm)?.context;
        let (first, end) = if persistent { (PERSISTENT_SEQ, tags::SEQ_LIMIT) } else { (1, PERSISTENT_SEQ) };
        let next = self.coll_seqs.entry((context, persistent)).or_insert(first);
        let seq = *next;
        *next = if seq + 1 >= end { first } else { seq + 1 };
        Ok(seq)
    }

    /// Starts `run` under tag sequence number `seq` and runs it until it first waits: its
    /// request's handle, and its return code if it already finished.
    pub fn start_coll(
        &mut self,
        seq: u32,
        run: impl FnOnce() -> c_int + 'static,
    ) -> MpiResult<(c_int, Option<c_int>)> {
        if coro::in_task() {
            return Err(MpiError::new(MPI_ERR_OTHER, "a nonblocking collective started inside another"));
        }
        let mut started = Started { handle: 0, seq, task: Task::new(run)? };
        match self.step_coll(&mut started) {
            Step::Done(rc) => Ok((self.requests.insert(Request::Done(coll_status(rc)))?, Some(rc))),
            Step::Suspended(_) => {
                started.handle = self.requests.insert(Request::Coll)?;
                let h = started.handle;
                self.colls.push_back(started);
                Ok((h, None))
            }
        }
    }

    /// Forgets the request of started collective `h`, which the program freed (erroneous in
    /// MPI, which MPICH refuses; reverb frees it): its slot may be given out again, and the
    /// collective's end must not complete that new request.
    pub fn forget_coll(&mut self, h: c_int) {
        for started in self.colls.iter_mut().filter(|c| c.handle == h) {
            started.handle = MPI_REQUEST_NULL;
        }
    }

    fn step_coll(&mut self, started: &mut Started) -> Step {
        self.coll_seq = started.seq;
        let step = started.task.step(self);
        self.coll_seq = 0;
        step
    }

    /// Resumes every started collective once, in start order; true if any took a message or
    /// finished. Not from inside one (a coroutine resumes no other).
    pub fn progress_colls(&mut self) -> MpiResult<bool> {
        if self.colls.is_empty() || coro::in_task() {
            return Ok(false);
        }
        let mut colls = std::mem::take(&mut self.colls);
        let mut any = false;
        colls.retain_mut(|started| match self.step_coll(started) {
            Step::Done(rc) => {
                // A request the program freed is gone: nothing to complete.
                if let Some(r @ Request::Coll) = self.requests.get_mut(started.handle) {
                    *r = Request::Done(coll_status(rc));
                }
                any = true;
                false
            }
            Step::Suspended(advanced) => {
                any |= advanced;
                true
            }
        });
        colls.append(&mut self.colls);
        self.colls = colls;
        Ok(any)
    }

    /// Waits (bounded) until every started collective finished: before a checkpoint, which
    /// then numbers the next ones from 1 again (as a restarted rank does at its restore), and
    /// before the runtime stops.
    pub fn finish_colls(&mut self, what: &str) -> MpiResult<()> {
        if !self.colls.is_empty() {
            self.wait_until(what, |s| Ok(s.colls.is_empty()))?;
        }
        Ok(())
    }

    /// Nonblocking collectives number from 1 again on every communicator (persistent ones
    /// keep theirs): at a checkpoint, none running, and at a restarted rank's restore.
    pub fn renumber_colls(&mut self) {
        self.coll_seqs.retain(|&(_, persistent), _| persistent);
    }
}

/// A finished collective's status: its return code in MPI_ERROR.
fn coll_status(rc: c_int) -> Status {
    Status { error: rc, ..Status::empty() }
}
