//! Persistent requests (MPI_*_init, MPI_Start) and generalized requests (MPI_Grequest_*), and
//! the status setters they come with.

use std::ffi::{c_int, c_long, c_void};

use crate::abi::*;
use crate::errors::{MpiError, MpiResult};
use crate::ffi;
use crate::ffi::{Out, UserBuf};
use crate::p2p::{SendArgs, SendMode};
use crate::request::{
    CStatus, CancelFn, CollRun, FreeFn, Generalized, Persistent, PersistentOp, QueryFn, Request, Status,
};
use crate::state::{call, State};

impl State {
    /// A persistent request whose run ended: inactive again.
    pub fn deactivate(&mut self, h: c_int) {
        if let Some(Request::Persistent(p)) = self.requests.get_mut(h) {
            p.active = None;
        }
    }

    /// Starts persistent request `h` (MPI_ERR_REQUEST if it is not one, or is active); a
    /// collective starts as a nonblocking one.
    fn start(&mut self, h: c_int) -> MpiResult<()> {
        let op = match self.requests.get(h) {
            Some(Request::Persistent(Persistent { op, active: None })) => (**op).clone(),
            Some(Request::Persistent(_)) => {
                return Err(MpiError::new(MPI_ERR_REQUEST, "MPI_Start on a persistent request still active"))
            }
            _ => return Err(MpiError::new(MPI_ERR_REQUEST, format!("{h:#x} is not a persistent request"))),
        };
        let inner = match op {
            PersistentOp::Send { buf, count, datatype, dest, tag, comm, sync } => {
                let args =
                    SendArgs { buf, count: count.into(), datatype: MPI_DATATYPE_NULL, dest, tag, comm };
                let r = self.start_send_typed(&args, &datatype, SendMode::copied_or_sync(sync))?;
                self.requests.insert(r)?
            }
            PersistentOp::Recv { buf, count, datatype, source, tag, comm } => {
                self.post_recv_typed(buf, count.into(), datatype, source, tag, comm)?
            }
            PersistentOp::Coll(CollRun { run, seq }) => self.start_coll(seq, move || run())?.0,
        };
        if let Some(Request::Persistent(p)) = self.requests.get_mut(h) {
            p.active = Some(inner);
        }
        Ok(())
    }

    /// Whether request `h` would complete now without waiting (inactive persistent requests
    /// and null ones do).
    pub fn complete_now(&self, h: c_int) -> bool {
        match self.requests.get(h) {
            None => h == MPI_REQUEST_NULL,
            Some(Request::Done(_)) => true,
            Some(Request::Persistent(p)) => p.active.is_none_or(|inner| self.complete_now(inner)),
            Some(Request::Generalized(g)) => g.complete,
            Some(_) => false,
        }
    }

    /// Whether `h` is MPI_REQUEST_NULL or an inactive persistent request: MPI's Waitany,
    /// Testany, Waitsome and Testsome pass over both alike (an inactive one is never
    /// reported complete again).
    pub fn inert(&self, h: c_int) -> bool {
        match self.requests.get(h) {
            None => h == MPI_REQUEST_NULL,
            Some(Request::Persistent(p)) => p.active.is_none(),
            Some(_) => false,
        }
    }

    pub fn generalized_complete(&self, h: c_int) -> bool {
        matches!(self.requests.get(h), Some(Request::Generalized(g)) if g.complete)
    }

    /// A completed generalized request's status (from its query function); it is freed.
    pub fn finish_generalized(&mut self, h: c_int) -> MpiResult<Status> {
        let Some(Request::Generalized(g)) = self.requests.remove(h) else {
            return Err(MpiError::new(MPI_ERR_REQUEST, format!("{h:#x} is not a generalized request")));
        };
        let mut c = CStatus { source: MPI_ANY_SOURCE, tag: MPI_ANY_TAG, ..CStatus::default() };
        if let Some(query) = g.query {
            let rc = ffi::grequest_query(query, g.extra_state, &mut c);
            if rc != MPI_SUCCESS {
                return Err(MpiError::new(rc, "the generalized request's query function failed"));
            }
        }
        if let Some(free) = g.free {
            ffi::grequest_free(free, g.extra_state);
        }
        Ok(Status {
            source: c.source,
            tag: c.tag,
            bytes: c.bytes(),
            error: c.error,
            cancelled: c.count_hi_and_cancelled & 1 == 1,
        })
    }
}

pub(crate) fn persistent(
    function: &str,
    comm: c_int,
    op: impl FnOnce(&mut State) -> MpiResult<PersistentOp>,
    request: Out<'_, c_int>,
) -> c_int {
    call(function, comm, |s| {
        s.comm(comm)?;
        let op = op(s)?;
        let h = s.requests.insert(Request::Persistent(Persistent { op: Box::new(op), active: None }))?;
        ffi::out(request, h, "request")
    })
}

macro_rules! send_init {
    ($name:literal, $sync:expr, $buf:ident, $count:ident, $datatype:ident, $dest:ident, $tag:ident, $comm:ident, $request:ident) => {
        persistent(
            $name,
            $comm,
            |s| {
                let datatype = s.datatype($datatype)?;
                Ok(PersistentOp::Send {
                    buf: $buf,
                    count: $count,
                    datatype,
                    dest: $dest,
                    tag: $tag,
                    comm: $comm,
                    sync: $sync,
                })
            },
            $request,
        )
    };
}

pub(crate) unsafe fn mpi_send_init(
    buf: UserBuf,
    count: c_int,
    datatype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    send_init!("MPI_Send_init", false, buf, count, datatype, dest, tag, comm, request)
}

pub(crate) unsafe fn mpi_ssend_init(
    buf: UserBuf,
    count: c_int,
    datatype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    send_init!("MPI_Ssend_init", true, buf, count, datatype, dest, tag, comm, request)
}

pub(crate) unsafe fn mpi_rsend_init(
    buf: UserBuf,
    count: c_int,
    datatype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    send_init!("MPI_Rsend_init", false, buf, count, datatype, dest, tag, comm, request)
}

pub(crate) unsafe fn mpi_bsend_init(
    buf: UserBuf,
    count: c_int,
    datatype: c_int,
    dest: c_int,
    tag: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    send_init!("MPI_Bsend_init", false, buf, count, datatype, dest, tag, comm, request)
}

pub(crate) unsafe fn mpi_recv_init(
    buf: UserBuf,
    count: c_int,
    datatype: c_int,
    source: c_int,
    tag: c_int,
    comm: c_int,
    request: Out<'_, c_int>,
) -> c_int {
    let op = |s: &mut State| {
        Ok(PersistentOp::Recv { buf, count, datatype: s.datatype(datatype)?, source, tag, comm })
    };
    persistent("MPI_Recv_init", comm, op, request)
}

pub(crate) unsafe fn mpi_start(request: Out<'_, c_int>) -> c_int {
    start_all("MPI_Start", 1, request)
}

pub(crate) unsafe fn mpi_startall(count: c_int, requests: Out<'_, c_int>) -> c_int {
    start_all("MPI_Startall", count, requests)
}

/// Starts `count` persistent requests in their order; a collective's errors go through its
/// communicator's handler (its run's request completes with the error).
fn start_all(function: &str, count: c_int, requests: Out<'_, c_int>) -> c_int {
    call(function, MPI_COMM_WORLD, |s| {
        let n = usize::try_from(count).map_err(|_| MpiError::new(MPI_ERR_COUNT, format!("count {count}")))?;
        // SAFETY: the array is as long as this call's counts say (the FFI contract).
        for &h in unsafe { ffi::array(requests, n, "requests") }? {
            s.start(h)?;
        }
        Ok(())
    })
}

pub(crate) unsafe fn mpi_grequest_start(
    query: Option<QueryFn>,
    free: Option<FreeFn>,
    cancel: Option<CancelFn>,
    extra_state: *mut c_void,
    request: Out<'_, c_int>,
) -> c_int {
    call("MPI_Grequest_start", MPI_COMM_WORLD, |s| {
        let g = Generalized { query, free, cancel, extra_state, complete: false };
        let h = s.requests.insert(Request::Generalized(g))?;
        ffi::out(request, h, "request")
    })
}

pub(crate) fn mpi_grequest_complete(request: c_int) -> c_int {
    call("MPI_Grequest_complete", MPI_COMM_WORLD, |s| match s.requests.get_mut(request) {
        Some(Request::Generalized(g)) => {
            g.complete = true;
            Ok(())
        }
        _ => Err(MpiError::new(MPI_ERR_REQUEST, format!("{request:#x} is not a generalized request"))),
    })
}

// The status setters are called from generalized requests' query functions, that is from
// inside MPI_Wait / MPI_Test: they work without the state (predefined datatypes then).

pub(crate) unsafe fn mpi_status_set_cancelled(status: Out<'_, CStatus>, flag: c_int) -> c_int {
    let set = || -> MpiResult<()> {
        let mut st = ffi::read(status, "status")?;
        st.count_hi_and_cancelled = (st.count_hi_and_cancelled & !1) | c_int::from(flag != 0);
        ffi::out(status, st, "status")
    };
    set().map_or_else(|e| e.class, |()| MPI_SUCCESS)
}

fn set_elements(status: Out<'_, CStatus>, datatype: c_int, count: i64) -> c_int {
    let set = || -> MpiResult<()> {
        let t = crate::state::datatype_anywhere(datatype)?;
        let n = u64::try_from(count).map_err(|_| MpiError::new(MPI_ERR_COUNT, format!("count {count}")))?;
        let mut st = ffi::read(status, "status")?;
        // `count` basic elements (MPI_Get_elements gives it back; MPI_Get_count too when
        // they make whole copies).
        let bytes = t.elems.bytes_of(n);
        let cancelled = st.count_hi_and_cancelled & 1;
        st.count_lo = bytes as u32 as c_int;
        st.count_hi_and_cancelled = (((bytes >> 32) << 1) as c_int) | cancelled;
        ffi::out(status, st, "status")
    };
    set().map_or_else(|e| e.class, |()| MPI_SUCCESS)
}

pub(crate) unsafe fn mpi_status_set_elements(
    status: Out<'_, CStatus>,
    datatype: c_int,
    count: c_int,
) -> c_int {
    set_elements(status, datatype, i64::from(count))
}

pub(crate) unsafe fn mpi_status_set_elements_x(
    status: Out<'_, CStatus>,
    datatype: c_int,
    count: c_long,
) -> c_int {
    set_elements(status, datatype, count)
}
