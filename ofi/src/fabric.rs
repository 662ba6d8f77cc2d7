//! The fabric, domain and event-queue objects. The provider raises no event of its own (an
//! RDM endpoint needs no connection events); an EQ holds what the consumer writes into it.

use std::ffi::{c_int, c_void, CStr};

use crate::abi::*;
use crate::info;
use crate::name::Carrier;
use crate::obj::{self, Table, NO_OP};

struct Fabric;
/// A domain: the memory regions its endpoints serve to peers.
struct Domain {
    mrs: crate::mr::MrTableRef,
}
/// Events written and not read yet: (event, its bytes).
#[derive(Default)]
struct Eq {
    events: std::collections::VecDeque<(u32, Vec<u8>)>,
}

/// Longest slice a blocked `fi_eq_sread` sleeps between looks.
const EQ_SLICE: std::time::Duration = std::time::Duration::from_millis(1);

unsafe extern "C" fn fabric_close(f: *mut fid) -> c_int {
    // SAFETY: libfabric passes the fid it got from `open`; free checks its ops table.
    obj::close_status(unsafe { obj::free::<fid_fabric, Fabric>(f, ops_ptr(&FABRIC_FI_OPS)) })
}

unsafe extern "C" fn domain_close(f: *mut fid) -> c_int {
    // SAFETY: as fabric_close.
    obj::close_status(unsafe { obj::free::<fid_domain, Domain>(f, ops_ptr(&DOMAIN_FI_OPS)) })
}

unsafe extern "C" fn eq_close(f: *mut fid) -> c_int {
    // SAFETY: as fabric_close.
    obj::close_status(unsafe { obj::free::<fid_eq, Eq>(f, ops_ptr(&EQ_FI_OPS)) })
}

/// The `fi_ops` pointer that marks an object type (see `obj::state`).
pub(crate) fn ops_ptr(t: &'static Table<fi_ops>) -> *const c_void {
    &t.0 as *const fi_ops as *const c_void
}

const fn base_ops(close: unsafe extern "C" fn(*mut fid) -> c_int) -> Table<fi_ops> {
    Table(fi_ops {
        size: std::mem::size_of::<fi_ops>(),
        close: Some(close),
        bind: Some(obj::no_bind),
        control: Some(obj::no_control),
        ops_open: NO_OP,
        tostr: NO_OP,
        ops_set: NO_OP,
    })
}

static FABRIC_FI_OPS: Table<fi_ops> = base_ops(fabric_close);
static DOMAIN_FI_OPS: Table<fi_ops> = base_ops(domain_close);
static EQ_FI_OPS: Table<fi_ops> = base_ops(eq_close);

static FABRIC_OPS: Table<fi_ops_fabric> = Table(fi_ops_fabric {
    size: std::mem::size_of::<fi_ops_fabric>(),
    domain: Some(domain_open),
    passive_ep: NO_OP,
    eq_open: Some(eq_open),
    wait_open: NO_OP,
    trywait: NO_OP,
    domain2: NO_OP,
});

static DOMAIN_OPS: Table<fi_ops_domain> = Table(fi_ops_domain {
    size: std::mem::size_of::<fi_ops_domain>(),
    av_open: Some(crate::av::open),
    cq_open: Some(crate::cq::open),
    endpoint: Some(crate::ep::open),
    scalable_ep: NO_OP,
    cntr_open: Some(crate::cntr::open),
    poll_open: NO_OP,
    stx_ctx: NO_OP,
    srx_ctx: NO_OP,
    query_atomic: NO_OP,
    query_collective: NO_OP,
    endpoint2: NO_OP,
});

/// The region table of the domain `domain`, if it is one of ours.
///
/// # Safety
/// `domain` is null or a live fid.
pub(crate) unsafe fn mr_table_of(domain: *mut fid) -> Option<crate::mr::MrTableRef> {
    // SAFETY: the caller's contract; the ops table names the type.
    let d = unsafe { obj::state::<fid_domain, Domain>(domain, ops_ptr(&DOMAIN_FI_OPS)) }?;
    Some(std::rc::Rc::clone(&d.mrs))
}

/// The EQ behind `eq`, if it is one of ours.
///
/// # Safety
/// `eq` is null or a live fid.
unsafe fn eq_of(eq: *mut fid_eq) -> Option<&'static mut Eq> {
    // SAFETY: the caller's contract; the ops table names the type.
    unsafe { obj::state::<fid_eq, Eq>(eq as *mut fid, ops_ptr(&EQ_FI_OPS)) }
}

/// Takes (or, with FI_PEEK, copies) the oldest event: its size, or -FI_EAGAIN.
unsafe extern "C" fn eq_read(
    eq: *mut fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    flags: u64,
) -> isize {
    // SAFETY: the consumer's EQ.
    let Some(eq) = (unsafe { eq_of(eq) }) else { return -(FI_EINVAL as isize) };
    let Some((kind, bytes)) = eq.events.front() else { return -(FI_EAGAIN as isize) };
    if len < bytes.len() {
        return -(FI_ETOOSMALL as isize);
    }
    // SAFETY: `event` is null or the consumer's word.
    unsafe { obj::put(event, *kind) };
    obj::copy_to_lent(buf as usize, len, bytes);
    let n = bytes.len() as isize;
    if flags & FI_PEEK == 0 {
        eq.events.pop_front();
    }
    n
}

/// Waits up to `timeout` ms (negative: until an event comes, a slice at a time) for an event.
unsafe extern "C" fn eq_sread(
    eq: *mut fid_eq,
    event: *mut u32,
    buf: *mut c_void,
    len: usize,
    timeout: c_int,
    flags: u64,
) -> isize {
    let deadline = u64::try_from(timeout)
        .ok()
        .map(|ms| std::time::Instant::now() + std::time::Duration::from_millis(ms));
    loop {
        // SAFETY: fi_eq_sread's arguments are fi_eq_read's.
        let n = unsafe { eq_read(eq, event, buf, len, flags) };
        let expired = deadline.is_some_and(|d| std::time::Instant::now() >= d);
        if n != -(FI_EAGAIN as isize) || expired {
            return n;
        }
        std::thread::sleep(EQ_SLICE);
    }
}

/// The consumer's event, copied in: its length.
unsafe extern "C" fn eq_write(
    eq: *mut fid_eq,
    event: u32,
    buf: *const c_void,
    len: usize,
    _flags: u64,
) -> isize {
    // SAFETY: the consumer's EQ.
    let Some(eq) = (unsafe { eq_of(eq) }) else { return -(FI_EINVAL as isize) };
    // SAFETY: `len` readable bytes at `buf` (fi_eq_write's contract).
    eq.events.push_back((event, unsafe { obj::lent(buf, len) }.to_vec()));
    len as isize
}

/// No error events are ever queued.
unsafe extern "C" fn eq_readerr(_: *mut fid_eq, _: *mut c_void, _: u64) -> isize {
    -(FI_EAGAIN as isize)
}

static EQ_OPS: Table<fi_ops_eq> = Table(fi_ops_eq {
    size: std::mem::size_of::<fi_ops_eq>(),
    read: Some(eq_read),
    readerr: Some(eq_readerr),
    write: Some(eq_write),
    sread: Some(eq_sread),
    strerror: NO_OP,
});

fn header(fclass: usize, context: *mut c_void, ops: &'static Table<fi_ops>) -> fid {
    fid { fclass, context, ops: &ops.0 }
}

/// `fi_fabric` for the provider (its `fabric` entry).
pub unsafe extern "C" fn open(
    attr: *mut fi_fabric_attr,
    out: *mut *mut fid_fabric,
    context: *mut c_void,
) -> c_int {
    // SAFETY: libfabric passes the consumer's attributes: null or valid, name null or a C string.
    let named_ours = unsafe { attr.as_ref() }
        .is_some_and(|a| a.name.is_null() || unsafe { CStr::from_ptr(a.name) } == info::FABRIC_NAME);
    if !named_ours || out.is_null() {
        return -FI_EINVAL;
    }
    let api_version = unsafe { (*attr).api_version };
    let c =
        fid_fabric { fid: header(FI_CLASS_FABRIC, context, &FABRIC_FI_OPS), ops: &FABRIC_OPS.0, api_version };
    // SAFETY: `out` checked non-null; the consumer reads the object from it.
    unsafe { out.write(obj::into_raw(c, Fabric) as *mut fid_fabric) };
    0
}

unsafe extern "C" fn domain_open(
    _fabric: *mut fid_fabric,
    info: *mut fi_info,
    out: *mut *mut fid_domain,
    context: *mut c_void,
) -> c_int {
    // SAFETY: the consumer's fi_info (from our getinfo): null or valid with valid attributes.
    let names_ours = unsafe { info.as_ref().and_then(|i| i.domain_attr.as_ref()) }.is_none_or(|d| {
        // SAFETY: a C string when not null.
        d.name.is_null()
            || [Carrier::Shm, Carrier::Tcp]
                .iter()
                .any(|&c| unsafe { CStr::from_ptr(d.name) } == info::domain_name(c))
    });
    if !names_ours || out.is_null() {
        return -FI_EINVAL;
    }
    let c = fid_domain {
        fid: header(FI_CLASS_DOMAIN, context, &DOMAIN_FI_OPS),
        ops: &DOMAIN_OPS.0,
        mr: &crate::mr::MR_OPS.0,
    };
    let state = Domain { mrs: Default::default() };
    // SAFETY: `out` checked non-null.
    unsafe { out.write(obj::into_raw(c, state) as *mut fid_domain) };
    0
}

unsafe extern "C" fn eq_open(
    _fabric: *mut fid_fabric,
    _attr: *mut fi_eq_attr,
    out: *mut *mut fid_eq,
    context: *mut c_void,
) -> c_int {
    if out.is_null() {
        return -FI_EINVAL;
    }
    let c = fid_eq { fid: header(FI_CLASS_EQ, context, &EQ_FI_OPS), ops: &EQ_OPS.0 };
    // SAFETY: `out` checked non-null.
    unsafe { out.write(obj::into_raw(c, Eq::default()) as *mut fid_eq) };
    0
}
