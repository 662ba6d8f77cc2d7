//! The completion queue's C entry points. Reading a CQ progresses the endpoints bound to it
//! (manual progress); `fi_cq_sread` blocks in their provider a slice at a time, up to the
//! consumer's timeout.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void};
use std::rc::Rc;

use crate::abi::*;
use crate::bound::{self, Bound};
use crate::core::{CqRef, CqState, Entry};
use crate::fabric::ops_ptr;
use crate::obj::{self, Table, NO_OP};

pub(crate) struct Cq {
    pub(crate) state: CqRef,
    format: c_int,
    /// The endpoints that report here: reads progress them.
    pub(crate) eps: Bound,
    /// The text of the last error read, for `fi_cq_strerror` (NUL-terminated).
    last_error: Vec<u8>,
}

impl Cq {
    fn progress(&mut self) {
        self.eps.progress();
    }

    fn entry_size(&self) -> usize {
        match self.format {
            FI_CQ_FORMAT_CONTEXT => 8,
            FI_CQ_FORMAT_MSG => 24,
            FI_CQ_FORMAT_DATA => 40,
            _ => std::mem::size_of::<fi_cq_tagged_entry>(),
        }
    }

    /// Copies up to `count` entries to `buf` (and their sources to `src`): how many, or
    /// -FI_EAVAIL when an error waits first, -FI_EAGAIN when nothing does.
    fn read(&mut self, buf: *mut c_void, count: usize, src: *mut fi_addr_t) -> isize {
        self.progress();
        let mut state = self.state.borrow_mut();
        if !state.errors.is_empty() {
            return -(FI_EAVAIL as isize);
        }
        let n = count.min(state.entries.len());
        if n == 0 {
            return -(FI_EAGAIN as isize);
        }
        let size = self.entry_size();
        for (i, e) in state.entries.drain(..n).enumerate() {
            write_entry(buf as usize + i * size, size, &e);
            if !src.is_null() {
                // SAFETY: the consumer's array has room for `count` addresses.
                unsafe { src.add(i).write(e.src) };
            }
        }
        n as isize
    }
}

fn write_entry(at: usize, size: usize, e: &Entry) {
    let full = fi_cq_tagged_entry {
        op_context: e.context as *mut c_void,
        flags: e.flags,
        len: e.len,
        buf: e.buf as *mut c_void,
        data: e.data,
        tag: e.tag,
    };
    // SAFETY: viewing a plain repr(C) struct's bytes; the formats are its prefixes.
    let bytes = unsafe {
        std::slice::from_raw_parts(&full as *const fi_cq_tagged_entry as *const u8, size_of_val(&full))
    };
    obj::copy_to_lent(at, size, &bytes[..size]);
}

unsafe extern "C" fn close(f: *mut fid) -> c_int {
    // SAFETY: the fid libfabric got from `open`; free checks its ops table.
    obj::close_status(unsafe { obj::free::<fid_cq, Cq>(f, ops_ptr(&FI_OPS)) })
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

static CQ_OPS: Table<fi_ops_cq> = Table(fi_ops_cq {
    size: std::mem::size_of::<fi_ops_cq>(),
    read: Some(read),
    readfrom: Some(readfrom),
    readerr: Some(readerr),
    sread: Some(sread),
    sreadfrom: Some(sreadfrom),
    signal: NO_OP,
    strerror: Some(strerror),
});

/// The CQ behind `cq`, if it is one of ours.
///
/// # Safety
/// `cq` is null or a live fid.
pub(crate) unsafe fn state_of(cq: *mut fid) -> Option<&'static mut Cq> {
    // SAFETY: the caller's contract; the ops table names the type.
    unsafe { obj::state::<fid_cq, Cq>(cq, ops_ptr(&FI_OPS)) }
}

/// `fi_cq_open` (the domain's `cq_open`): any format, no wait object beyond sread's.
pub(crate) unsafe extern "C" fn open(
    _domain: *mut fid_domain,
    attr: *mut fi_cq_attr,
    out: *mut *mut fid_cq,
    context: *mut c_void,
) -> c_int {
    // SAFETY: the consumer's attributes, null or valid.
    let Some(attr) = (unsafe { attr.as_ref() }) else { return -FI_EINVAL };
    let format = if attr.format == FI_CQ_FORMAT_UNSPEC { FI_CQ_FORMAT_CONTEXT } else { attr.format };
    if out.is_null()
        || !(FI_CQ_FORMAT_CONTEXT..=FI_CQ_FORMAT_TAGGED).contains(&format)
        || !matches!(attr.wait_obj, FI_WAIT_NONE | FI_WAIT_UNSPEC)
    {
        return -FI_ENOSYS;
    }
    let c = fid_cq { fid: fid { fclass: FI_CLASS_CQ, context, ops: &FI_OPS.0 }, ops: &CQ_OPS.0 };
    let state = Cq {
        state: Rc::new(RefCell::new(CqState::default())),
        format,
        eps: Bound::default(),
        last_error: vec![0],
    };
    // SAFETY: `out` checked non-null.
    unsafe { out.write(obj::into_raw(c, state) as *mut fid_cq) };
    0
}

unsafe extern "C" fn read(cq: *mut fid_cq, buf: *mut c_void, count: usize) -> isize {
    // SAFETY: the consumer's CQ and a buffer for `count` entries of its format.
    unsafe { readfrom(cq, buf, count, std::ptr::null_mut()) }
}

unsafe extern "C" fn readfrom(cq: *mut fid_cq, buf: *mut c_void, count: usize, src: *mut fi_addr_t) -> isize {
    // SAFETY: the consumer's CQ object.
    let Some(cq) = (unsafe { state_of(cq as *mut fid) }) else { return -(FI_EINVAL as isize) };
    if buf.is_null() {
        return -(FI_EINVAL as isize);
    }
    cq.read(buf, count, src)
}

unsafe extern "C" fn sread(
    cq: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    cond: *const c_void,
    timeout: c_int,
) -> isize {
    // SAFETY: as read.
    unsafe { sreadfrom(cq, buf, count, std::ptr::null_mut(), cond, timeout) }
}

/// Reads, blocking up to `timeout` ms (negative: until a completion or an error comes, a
/// slice at a time, each slice bounded).
unsafe extern "C" fn sreadfrom(
    cq: *mut fid_cq,
    buf: *mut c_void,
    count: usize,
    src: *mut fi_addr_t,
    _cond: *const c_void,
    timeout: c_int,
) -> isize {
    // SAFETY: the consumer's CQ object.
    let Some(cq) = (unsafe { state_of(cq as *mut fid) }) else { return -(FI_EINVAL as isize) };
    if buf.is_null() {
        return -(FI_EINVAL as isize);
    }
    let deadline = bound::deadline(timeout);
    loop {
        let n = cq.read(buf, count, src);
        if n != -(FI_EAGAIN as isize) {
            return n;
        }
        let Some(slice) = bound::next_slice(deadline) else { return -(FI_EAGAIN as isize) };
        cq.eps.block(slice);
    }
}

unsafe extern "C" fn readerr(cq: *mut fid_cq, buf: *mut fi_cq_err_entry, _flags: u64) -> isize {
    // SAFETY: the consumer's CQ object.
    let Some(cq) = (unsafe { state_of(cq as *mut fid) }) else { return -(FI_EINVAL as isize) };
    // SAFETY: the consumer's error entry, null or valid.
    let Some(out) = (unsafe { buf.as_mut() }) else { return -(FI_EINVAL as isize) };
    cq.progress();
    let Some(e) = cq.state.borrow_mut().errors.pop_front() else { return -(FI_EAGAIN as isize) };
    out.op_context = e.entry.context as *mut c_void;
    out.flags = e.entry.flags;
    out.len = e.entry.len;
    out.buf = e.entry.buf as *mut c_void;
    out.data = e.entry.data;
    out.tag = e.entry.tag;
    out.olen = e.olen;
    out.err = e.err;
    out.prov_errno = e.prov_errno;
    // No provider error data: fi_cq_strerror explains the last error instead.
    out.err_data_size = 0;
    cq.last_error = e.text.into_bytes();
    cq.last_error.push(0);
    1
}

/// The text of the last error read (reverb's reason), copied to `buf` when one is given.
unsafe extern "C" fn strerror(
    cq: *mut fid_cq,
    _prov_errno: c_int,
    _err_data: *const c_void,
    buf: *mut c_char,
    len: usize,
) -> *const c_char {
    // SAFETY: the consumer's CQ object.
    let Some(cq) = (unsafe { state_of(cq as *mut fid) }) else { return c"invalid CQ".as_ptr() };
    if buf.is_null() || len == 0 {
        return cq.last_error.as_ptr() as *const c_char;
    }
    let n = cq.last_error.len().min(len);
    obj::copy_to_lent(buf as usize, len, &cq.last_error[..n]);
    obj::copy_to_lent(buf as usize + n - 1, 1, &[0]);
    buf
}
