//! The endpoint's `fi_ops_rma` entry points: `fi_write`, `fi_writev`, `fi_writemsg`,
//! `fi_inject_write`, `fi_writedata`, `fi_inject_writedata`, `fi_read`, `fi_readv`,
//! `fi_readmsg`, each translated into [`crate::rma`]'s calls (one iov entry, one RMA iov).

use std::ffi::c_void;

use crate::abi::*;
use crate::ep::{single_iov, with_ep};
use crate::info::{INJECT_SIZE, MAX_MSG_SIZE};
use crate::obj::{self, Table};
use crate::rma::RmaArgs;

pub(crate) static RMA_OPS: Table<fi_ops_rma> = Table(fi_ops_rma {
    size: std::mem::size_of::<fi_ops_rma>(),
    read: Some(read),
    readv: Some(readv),
    readmsg: Some(readmsg),
    write: Some(write),
    writev: Some(writev),
    writemsg: Some(writemsg),
    inject: Some(inject),
    writedata: Some(writedata),
    injectdata: Some(injectdata),
});

const EINVAL: isize = -(FI_EINVAL as isize);

/// The size checks every operation shares: max_msg_size, and inject_size for FI_INJECT.
fn too_long(a: &RmaArgs) -> Option<isize> {
    if a.len > MAX_MSG_SIZE {
        return Some(-(FI_EMSGSIZE as isize));
    }
    (a.flags & FI_INJECT != 0 && a.len > INJECT_SIZE).then_some(EINVAL)
}

/// One write of `a.len` bytes at `a.local`, copied before the call returns.
///
/// # Safety
/// `ep` is null or a live fid; `a.local` holds `a.len` readable bytes.
unsafe fn post_write(ep: *mut fid_ep, a: RmaArgs, inject_call: bool) -> isize {
    if let Some(rc) = too_long(&a) {
        return rc;
    }
    // SAFETY: the caller's contract.
    let payload = unsafe { obj::lent(a.local as *const c_void, a.len) };
    // SAFETY: the caller's contract.
    unsafe { with_ep(ep, |core| core.rma_write(a, payload, inject_call)) }
}

/// One read into `a.local`, which stays the provider's until the completion.
///
/// # Safety
/// `ep` is null or a live fid; `a.local` holds `a.len` writable bytes until the completion.
unsafe fn post_read(ep: *mut fid_ep, a: RmaArgs) -> isize {
    if let Some(rc) = too_long(&a) {
        return rc;
    }
    // SAFETY: the caller's contract.
    unsafe { with_ep(ep, |core| core.rma_read(a)) }
}

/// The arguments of an `fi_msg_rma`: one iov entry and one RMA iov of the same length.
///
/// # Safety
/// `msg` is null or valid, its iovs as long as it says.
unsafe fn msg_args(msg: *const fi_msg_rma, flags: u64) -> Option<RmaArgs> {
    // SAFETY: the caller's contract.
    let m = unsafe { msg.as_ref() }?;
    // SAFETY: as above.
    let (buf, len) = unsafe { single_iov(m.msg_iov, m.iov_count) }.ok()?;
    if m.rma_iov_count != 1 {
        return None;
    }
    // SAFETY: as above: one RMA iov.
    let remote = unsafe { m.rma_iov.as_ref() }?;
    if remote.len != len {
        return None;
    }
    let data = (flags & FI_REMOTE_CQ_DATA != 0).then_some(m.data);
    let (peer, addr, key, context) = (m.addr, remote.addr, remote.key, m.context as usize);
    Some(RmaArgs { peer, local: buf as usize, len, addr, key, data, context, flags })
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn read(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    let a = RmaArgs {
        peer: src,
        local: buf as usize,
        len,
        addr,
        key,
        data: None,
        context: context as usize,
        flags: 0,
    };
    // SAFETY: fi_read's contract.
    unsafe { post_read(ep, a) }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn readv(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    src: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: fi_readv's contract: `iov` holds `count` entries.
    let Ok((buf, len)) = (unsafe { single_iov(iov, count) }) else { return EINVAL };
    // SAFETY: as above.
    unsafe { read(ep, buf, len, std::ptr::null_mut(), src, addr, key, context) }
}

unsafe extern "C" fn readmsg(ep: *mut fid_ep, msg: *const fi_msg_rma, flags: u64) -> isize {
    // SAFETY: fi_readmsg's contract.
    let Some(a) = (unsafe { msg_args(msg, flags & !FI_REMOTE_CQ_DATA) }) else { return EINVAL };
    // SAFETY: as above.
    unsafe { post_read(ep, a) }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn write(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    let a = RmaArgs {
        peer: dest,
        local: buf as usize,
        len,
        addr,
        key,
        data: None,
        context: context as usize,
        flags: 0,
    };
    // SAFETY: fi_write's contract.
    unsafe { post_write(ep, a, false) }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn writev(
    ep: *mut fid_ep,
    iov: *const iovec,
    _desc: *mut *mut c_void,
    count: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: fi_writev's contract: `iov` holds `count` entries.
    let Ok((buf, len)) = (unsafe { single_iov(iov, count) }) else { return EINVAL };
    // SAFETY: as above.
    unsafe { write(ep, buf, len, std::ptr::null_mut(), dest, addr, key, context) }
}

unsafe extern "C" fn writemsg(ep: *mut fid_ep, msg: *const fi_msg_rma, flags: u64) -> isize {
    // SAFETY: fi_writemsg's contract.
    let Some(a) = (unsafe { msg_args(msg, flags) }) else { return EINVAL };
    // SAFETY: as above.
    unsafe { post_write(ep, a, false) }
}

unsafe extern "C" fn inject(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    let a =
        RmaArgs { peer: dest, local: buf as usize, len, addr, key, data: None, context: 0, flags: FI_INJECT };
    // SAFETY: fi_inject_write's contract.
    unsafe { post_write(ep, a, true) }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn writedata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
    context: *mut c_void,
) -> isize {
    let (local, context) = (buf as usize, context as usize);
    let a = RmaArgs { peer: dest, local, len, addr, key, data: Some(data), context, flags: 0 };
    // SAFETY: fi_writedata's contract.
    unsafe { post_write(ep, a, false) }
}

unsafe extern "C" fn injectdata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: fi_addr_t,
    addr: u64,
    key: u64,
) -> isize {
    let a = RmaArgs {
        peer: dest,
        local: buf as usize,
        len,
        addr,
        key,
        data: Some(data),
        context: 0,
        flags: FI_INJECT,
    };
    // SAFETY: fi_inject_writedata's contract.
    unsafe { post_write(ep, a, true) }
}
