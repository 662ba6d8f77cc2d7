//! The completion counter's C entry points (`fi_cntr_open` and its ops). An endpoint bound to
//! a counter with FI_SEND or FI_RECV counts every completion of that side there, selected for
//! its CQ or not; a failed operation counts as an error. FI_WRITE and FI_READ count its RMA
//! operations, FI_REMOTE_WRITE and FI_REMOTE_READ the peers' it served (see `rma`). Reading
//! or waiting on a counter progresses the endpoints bound to it (manual progress).

use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::rc::Rc;

use crate::abi::*;
use crate::bound::{self, Bound};
use crate::core::{CntrRef, CntrState};
use crate::fabric::ops_ptr;
use crate::obj::{self, Table, NO_OP};

pub(crate) struct Cntr {
    pub(crate) state: CntrRef,
    /// The endpoints that count here: reads progress them.
    pub(crate) eps: Bound,
}

unsafe extern "C" fn close(f: *mut fid) -> c_int {
    // SAFETY: the fid libfabric got from `open`; free checks its ops table.
    obj::close_status(unsafe { obj::free::<fid_cntr, Cntr>(f, ops_ptr(&FI_OPS)) })
}

pub(crate) static FI_OPS: Table<fi_ops> = Table(fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(close),
    bind: Some(obj::no_bind),
    control: Some(obj::no_control),
    ops_open: NO_OP,
    tostr: NO_OP,
    ops_set: NO_OP,
});

static CNTR_OPS: Table<fi_ops_cntr> = Table(fi_ops_cntr {
    size: std::mem::size_of::<fi_ops_cntr>(),
    read: Some(read),
    readerr: Some(readerr),
    add: Some(add),
    set: Some(set),
    wait: Some(wait),
    adderr: Some(adderr),
    seterr: Some(seterr),
});

/// The counter behind `cntr`, if it is one of ours.
///
/// # Safety
/// `cntr` is null or a live fid.
pub(crate) unsafe fn state_of(cntr: *mut fid) -> Option<&'static mut Cntr> {
    // SAFETY: the caller's contract; the ops table names the type.
    unsafe { obj::state::<fid_cntr, Cntr>(cntr, ops_ptr(&FI_OPS)) }
}

/// `fi_cntr_open` (the domain's `cntr_open`): completion events, no wait object beyond
/// `fi_cntr_wait`'s own (FI_WAIT_NONE or FI_WAIT_UNSPEC); null attributes are those.
pub(crate) unsafe extern "C" fn open(
    _domain: *mut fid_domain,
    attr: *mut fi_cntr_attr,
    out: *mut *mut fid_cntr,
    context: *mut c_void,
) -> c_int {
    if out.is_null() {
        return -FI_EINVAL;
    }
    // SAFETY: the consumer's attributes, null or valid.
    if let Some(attr) = unsafe { attr.as_ref() } {
        if attr.events != FI_CNTR_EVENTS_COMP || !matches!(attr.wait_obj, FI_WAIT_NONE | FI_WAIT_UNSPEC) {
            return -FI_ENOSYS;
        }
    }
    let c = fid_cntr { fid: fid { fclass: FI_CLASS_CNTR, context, ops: &FI_OPS.0 }, ops: &CNTR_OPS.0 };
    let state = Cntr { state: Rc::new(RefCell::new(CntrState::default())), eps: Bound::default() };
    // SAFETY: `out` checked non-null.
    unsafe { out.write(obj::into_raw(c, state) as *mut fid_cntr) };
    0
}

/// Runs `f` on the counter behind `cntr`; -FI_EINVAL for a foreign fid.
///
/// # Safety
/// `cntr` is null or a live fid.
unsafe fn with(cntr: *mut fid_cntr, f: impl FnOnce(&mut CntrState)) -> c_int {
    // SAFETY: the caller's contract.
    let Some(c) = (unsafe { state_of(cntr as *mut fid) }) else { return -FI_EINVAL };
    f(&mut c.state.borrow_mut());
    0
}

/// The counter's (count, errors) after progressing its endpoints; zeros for a foreign fid.
///
/// # Safety
/// `cntr` is null or a live fid.
unsafe fn progressed(cntr: *mut fid_cntr) -> (u64, u64) {
    // SAFETY: the caller's contract.
    let Some(c) = (unsafe { state_of(cntr as *mut fid) }) else { return (0, 0) };
    c.eps.progress();
    let s = c.state.borrow();
    (s.count, s.errors)
}

unsafe extern "C" fn read(cntr: *mut fid_cntr) -> u64 {
    // SAFETY: the consumer's counter.
    unsafe { progressed(cntr) }.0
}

unsafe extern "C" fn readerr(cntr: *mut fid_cntr) -> u64 {
    // SAFETY: the consumer's counter.
    unsafe { progressed(cntr) }.1
}

unsafe extern "C" fn add(cntr: *mut fid_cntr, value: u64) -> c_int {
    // SAFETY: the consumer's counter.
    unsafe { with(cntr, |s| s.count = s.count.wrapping_add(value)) }
}

unsafe extern "C" fn set(cntr: *mut fid_cntr, value: u64) -> c_int {
    // SAFETY: the consumer's counter.
    unsafe { with(cntr, |s| s.count = value) }
}

unsafe extern "C" fn adderr(cntr: *mut fid_cntr, value: u64) -> c_int {
    // SAFETY: the consumer's counter.
    unsafe { with(cntr, |s| s.errors = s.errors.wrapping_add(value)) }
}

unsafe extern "C" fn seterr(cntr: *mut fid_cntr, value: u64) -> c_int {
    // SAFETY: the consumer's counter.
    unsafe { with(cntr, |s| s.errors = value) }
}

/// Waits until the count reaches `threshold` (0), an operation fails meanwhile (-FI_EAVAIL),
/// or `timeout` ms pass (-FI_ETIMEDOUT; negative: no end, a bounded slice at a time).
unsafe extern "C" fn wait(cntr: *mut fid_cntr, threshold: u64, timeout: c_int) -> c_int {
    // SAFETY: the consumer's counter.
    let Some(c) = (unsafe { state_of(cntr as *mut fid) }) else { return -FI_EINVAL };
    let deadline = bound::deadline(timeout);
    let errors = c.state.borrow().errors;
    loop {
        c.eps.progress();
        let s = c.state.borrow();
        if s.count >= threshold {
            return 0;
        }
        if s.errors != errors {
            return -FI_EAVAIL;
        }
        drop(s);
        let Some(slice) = bound::next_slice(deadline) else { return -FI_ETIMEDOUT };
        c.eps.block(slice);
    }
}
