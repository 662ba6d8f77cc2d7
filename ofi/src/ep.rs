//! The RDM endpoint's C entry points: open (a reverb shm endpoint of this user's host space),
//! bind, enable, `fi_getname`, and the message and tagged calls, each translated into
//! [`crate::core::EpCore`].

use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::rc::Rc;

use reverb_transport::config::TransportConfig;
use reverb_transport::error::TransportError;
use reverb_transport::shm::ShmProvider;
use reverb_transport::tcp::TcpProvider;
use reverb_transport::Provider;

use crate::name::Carrier;

use crate::abi::*;
use crate::core::{Binding, EpCore, EpRef, RecvArgs, SendArgs};
use crate::error::{to_c, OfiError, Result};
use crate::fabric::ops_ptr;
use crate::obj::{self, Table, NO_OP};

pub(crate) struct Ep {
    core: EpRef,
    /// The service this endpoint publishes its address under (a server's).
    _service: Option<crate::service::Claim>,
}

fn open_core(info: Option<&fi_info>) -> Result<EpCore> {
    let config = TransportConfig::from_env()?;
    let provider: Box<dyn Provider> = match Carrier::from_env()? {
        Carrier::Shm => Box::new(ShmProvider::open_by_address(config, &crate::service::host_space())?),
        Carrier::Tcp => Box::new(TcpProvider::open_by_address(config)?),
    };
    let caps = info.map_or(crate::info::PRIMARY_CAPS, |i| i.caps);
    // SAFETY: the tx attributes of the consumer's fi_info: null or valid.
    let tx_op_flags = info.and_then(|i| unsafe { i.tx_attr.as_ref() }).map_or(0, |tx| tx.op_flags);
    // SAFETY: as above, the rx attributes.
    let rx_op_flags = info.and_then(|i| unsafe { i.rx_attr.as_ref() }).map_or(0, |rx| rx.op_flags);
    Ok(EpCore::new(provider, caps, [tx_op_flags, rx_op_flags]))
}

/// Publishes the endpoint's address under the service its info names (see `service`).
///
/// # Safety
/// `info` is None or a valid fi_info whose `src_addr` holds `src_addrlen` bytes.
unsafe fn publish_service(info: Option<&fi_info>, core: &EpCore) -> Result<Option<crate::service::Claim>> {
    let Some(info) = info else { return Ok(None) };
    // SAFETY: the caller's contract.
    let src = unsafe { obj::lent(info.src_addr, info.src_addrlen) };
    let Some(service) = crate::service::named_in(src) else { return Ok(None) };
    match crate::service::publish(&service, &core.name()?) {
        Ok(claim) => Ok(Some(claim)),
        // Another live endpoint holds the service (consumers open several from one info):
        // this one is reached by its address alone.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(None),
        Err(e) => Err(OfiError::Transport(TransportError::io(format!("publish service {service}"), e))),
    }
}

/// `fi_endpoint` (the domain's `endpoint`).
pub(crate) unsafe extern "C" fn open(
    domain: *mut fid_domain,
    info: *mut fi_info,
    out: *mut *mut fid_ep,
    context: *mut c_void,
) -> c_int {
    if out.is_null() {
        return -FI_EINVAL;
    }
    // SAFETY: the consumer's fi_info (from our getinfo): null or valid.
    let mut core = match open_core(unsafe { info.as_ref() }) {
        Ok(core) => core,
        Err(e) => return -e.errno(),
    };
    // SAFETY: the consumer's domain, a live fid (the lookup checks it is ours).
    core.mrs = unsafe { crate::fabric::mr_table_of(domain as *mut fid) };
    let c = fid_ep {
        fid: fid { fclass: FI_CLASS_EP, context, ops: &FI_OPS.0 },
        ops: &EP_OPS.0,
        cm: &CM_OPS.0,
        msg: &MSG_OPS.0,
        rma: &crate::rma_ops::RMA_OPS.0,
        tagged: &TAGGED_OPS.0,
        atomic: std::ptr::null(),
        collective: std::ptr::null(),
    };
    // SAFETY: as above.
    let service = match unsafe { publish_service(info.as_ref(), &core) } {
        Ok(service) => service,
        Err(e) => return -e.errno(),
    };
    let state = Ep { core: Rc::new(RefCell::new(core)), _service: service };
    // SAFETY: `out` checked non-null.
    unsafe { out.write(obj::into_raw(c, state) as *mut fid_ep) };
    0
}

/// The endpoint behind `ep`, if it is one of ours.
///
/// # Safety
/// `ep` is null or a live fid.
unsafe fn ep_of(ep: *mut fid) -> Option<&'static mut Ep> {
    // SAFETY: the caller's contract; the ops table names the type.
    unsafe { obj::state::<fid_ep, Ep>(ep, ops_ptr(&FI_OPS)) }
}

/// Runs `f` on the endpoint behind `ep`: its errno on failure, -FI_EINVAL for a foreign fid.
///
/// # Safety
/// `ep` is null or a live fid.
pub(crate) unsafe fn with_ep(ep: *mut fid_ep, f: impl FnOnce(&mut EpCore) -> Result<()>) -> isize {
    // SAFETY: the caller's contract.
    let Some(ep) = (unsafe { ep_of(ep as *mut fid) }) else { return -(FI_EINVAL as isize) };
    let Ok(mut core) = ep.core.try_borrow_mut() else { return -(FI_EBUSY as isize) };
    to_c(f(&mut core)) as isize
}

unsafe extern "C" fn close(f: *mut fid) -> c_int {
    // SAFETY: the fid libfabric got from `open`; free checks its ops table.
    if unsafe { obj::free::<fid_ep, Ep>(f, ops_ptr(&FI_OPS)) } {
        0
    } else {
        -FI_EINVAL
    }
}

/// The flags a counter may be bound with: transmits, receives, and RMA operations (this
/// endpoint's reads and writes, and its peers' into its regions).
const CNTR_BIND_FLAGS: u64 = FI_SEND | FI_RECV | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

/// Binds an AV, a counter, or a CQ for transmits and/or receives (FI_SELECTIVE_COMPLETION
/// honoured).
unsafe extern "C" fn bind(f: *mut fid, bfid: *mut fid, flags: u64) -> c_int {
    // SAFETY: the consumer's endpoint.
    let Some(ep) = (unsafe { ep_of(f) }) else { return -FI_EINVAL };
    let Ok(mut core) = ep.core.try_borrow_mut() else { return -FI_EBUSY };
    // SAFETY: the object to bind: a live fid of any class (the lookups check it is ours).
    if let Some(av) = unsafe { crate::av::state_of(bfid) } {
        core.av = Some(Rc::clone(&av.state));
        return 0;
    }
    // SAFETY: as above.
    if let Some(cntr) = unsafe { crate::cntr::state_of(bfid) } {
        if flags == 0 || flags & !CNTR_BIND_FLAGS != 0 {
            return -FI_EINVAL;
        }
        if flags & FI_SEND != 0 {
            core.tx_cntr = Some(Rc::clone(&cntr.state));
        }
        if flags & FI_RECV != 0 {
            core.rx_cntr = Some(Rc::clone(&cntr.state));
        }
        let rma = &mut core.rma_cntrs;
        for (flag, slot) in [
            (FI_READ, &mut rma.read),
            (FI_WRITE, &mut rma.write),
            (FI_REMOTE_READ, &mut rma.remote_read),
            (FI_REMOTE_WRITE, &mut rma.remote_write),
        ] {
            if flags & flag != 0 {
                *slot = Some(Rc::clone(&cntr.state));
            }
        }
        cntr.eps.add(&ep.core);
        return 0;
    }
    // SAFETY: as above.
    let Some(cq) = (unsafe { crate::cq::state_of(bfid) }) else { return -FI_EINVAL };
    let selective = flags & FI_SELECTIVE_COMPLETION != 0;
    if flags & (FI_TRANSMIT | FI_RECV) == 0 {
        return -FI_EINVAL;
    }
    if flags & FI_TRANSMIT != 0 {
        core.tx = Some(Binding { cq: Rc::clone(&cq.state), selective });
    }
    if flags & FI_RECV != 0 {
        core.rx = Some(Binding { cq: Rc::clone(&cq.state), selective });
    }
    cq.eps.add(&ep.core);
    0
}

/// FI_ENABLE: an RDM endpoint needs an AV, and a CQ or a counter for each side first.
unsafe extern "C" fn control(f: *mut fid, command: c_int, _arg: *mut c_void) -> c_int {
    // SAFETY: the consumer's endpoint.
    let Some(ep) = (unsafe { ep_of(f) }) else { return -FI_EINVAL };
    if command != FI_ENABLE {
        return -FI_ENOSYS;
    }
    let core = ep.core.borrow();
    let tx = core.tx.is_some() || core.tx_cntr.is_some();
    let rx = core.rx.is_some() || core.rx_cntr.is_some();
    if core.av.is_none() || !tx || !rx {
        return -FI_ENOENT;
    }
    0
}

unsafe extern "C" fn getname(f: *mut fid, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    // SAFETY: the consumer's endpoint.
    let Some(ep) = (unsafe { ep_of(f) }) else { return -FI_EINVAL };
    if addrlen.is_null() {
        return -FI_EINVAL;
    }
    let name = match ep.core.borrow().name() {
        Ok(name) => name,
        Err(e) => return -e.errno(),
    };
    // SAFETY: addrlen checked non-null; it holds the buffer's size on entry.
    let room = unsafe { addrlen.read() };
    // SAFETY: as above.
    unsafe { addrlen.write(name.len()) };
    if room < name.len() {
        return -FI_ETOOSMALL;
    }
    obj::copy_to_lent(addr as usize, room, &name);
    0
}

/// `fi_cancel`: a receive no message matched yet completes in error, FI_ECANCELED (see
/// [`EpCore::cancel`]).
unsafe extern "C" fn cancel(f: *mut fid, context: *mut c_void) -> isize {
    // SAFETY: the consumer's endpoint (fi_cancel passes its fid).
    unsafe { with_ep(f as *mut fid_ep, |core| core.cancel(context as usize)) }
}

pub(crate) static FI_OPS: Table<fi_ops> = Table(fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(close),
    bind: Some(bind),
    control: Some(control),
    ops_open: NO_OP,
    tostr: NO_OP,
    ops_set: NO_OP,
});

static EP_OPS: Table<fi_ops_ep> = Table(fi_ops_ep {
    size: std::mem::size_of::<fi_ops_ep>(),
    cancel: Some(cancel),
    getopt: NO_OP,
    setopt: NO_OP,
    tx_ctx: NO_OP,
    rx_ctx: NO_OP,
    rx_size_left: NO_OP,
    tx_size_left: NO_OP,
});

static CM_OPS: Table<fi_ops_cm> = Table(fi_ops_cm {
    size: std::mem::size_of::<fi_ops_cm>(),
    setname: NO_OP,
    getname: Some(getname),
    getpeer: NO_OP,
    connect: NO_OP,
    listen: NO_OP,
    accept: NO_OP,
    reject: NO_OP,
    shutdown: NO_OP,
    join: NO_OP,
});

static MSG_OPS: Table<fi_ops_msg> = Table(fi_ops_msg {
    size: std::mem::size_of::<fi_ops_msg>(),
    recv: Some(recv),
    recvv: NO_OP,
    recvmsg: Some(recvmsg),
    send: Some(send),
    sendv: NO_OP,
    sendmsg: Some(sendmsg),
    inject: Some(inject),
    senddata: Some(senddata),
    injectdata: Some(injectdata),
});

static TAGGED_OPS: Table<fi_ops_tagged> = Table(fi_ops_tagged {
    size: std::mem::size_of::<fi_ops_tagged>(),
    recv: Some(trecv),
    recvv: NO_OP,
    recvmsg: Some(trecvmsg),
    send: Some(tsend),
    sendv: NO_OP,
    sendmsg: Some(tsendmsg),
    inject: Some(tinject),
    senddata: Some(tsenddata),
    injectdata: Some(tinjectdata),
});

/// One send: `buf` is lent for the call only (the provider copies it).
///
/// # Safety
/// `ep` is null or a live fid; `buf` holds `len` readable bytes.
#[allow(clippy::too_many_arguments)]
unsafe fn post_send(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest: fi_addr_t,
    tag: Option<u64>,
    data: Option<u64>,
    context: *mut c_void,
    flags: u64,
    inject_call: bool,
) -> isize {
    // fi_inject and its kin (`inject_call`) raise no completion; FI_INJECT as a flag only
    // frees the buffer at once (which every send here does) and bounds the size.
    if flags & FI_INJECT != 0 && len > crate::info::INJECT_SIZE || len > crate::info::MAX_MSG_SIZE {
        return -(FI_EINVAL as isize);
    }
    // SAFETY: the caller's contract.
    let payload = unsafe { obj::lent(buf, len) };
    let args = SendArgs { dest, payload, tag, data, context: context as usize, flags };
    // SAFETY: the caller's contract.
    unsafe { with_ep(ep, |core| core.send(args, inject_call)) }
}

/// One receive into `buf`, which stays the provider's until its completion is read.
///
/// # Safety
/// `ep` is null or a live fid; `buf` holds `len` writable bytes until the completion.
unsafe fn post_recv(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    src: fi_addr_t,
    tag: Option<(u64, u64)>,
    context: *mut c_void,
    flags: u64,
) -> isize {
    if len > crate::info::MAX_MSG_SIZE {
        return -(FI_EINVAL as isize);
    }
    let args = RecvArgs { buf: buf as usize, len, src, tag, context: context as usize, flags };
    // SAFETY: the caller's contract.
    unsafe { with_ep(ep, |core| core.recv(args)) }
}

/// The single buffer of a one-entry iov (the provider's iov_limit is 1).
///
/// # Safety
/// `iov` is null or points at `count` iovecs.
pub(crate) unsafe fn single_iov(iov: *const iovec, count: usize) -> Result<(*mut c_void, usize)> {
    match count {
        0 => Ok((std::ptr::null_mut(), 0)),
        // SAFETY: the caller's contract.
        1 => unsafe { iov.as_ref() }.map(|v| (v.iov_base, v.iov_len)).ok_or(OfiError::Invalid("null iov")),
        _ => Err(OfiError::Invalid("more than one iov entry")),
    }
}

unsafe extern "C" fn recv(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src: fi_addr_t,
    context: *mut c_void,
) -> isize {
    // SAFETY: fi_recv's contract.
    unsafe { post_recv(ep, buf, len, src, None, context, 0) }
}

unsafe extern "C" fn recvmsg(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize {
    // SAFETY: fi_recvmsg's contract: msg null or valid.
    let Some(m) = (unsafe { msg.as_ref() }) else { return -(FI_EINVAL as isize) };
    // SAFETY: as above.
    let Ok((buf, len)) = (unsafe { single_iov(m.msg_iov, m.iov_count) }) else {
        return -(FI_EINVAL as isize);
    };
    // SAFETY: as above.
    unsafe { post_recv(ep, buf, len, m.addr, None, m.context, flags) }
}

unsafe extern "C" fn send(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: fi_addr_t,
    context: *mut c_void,
) -> isize {
    // SAFETY: fi_send's contract.
    unsafe { post_send(ep, buf, len, dest, None, None, context, 0, false) }
}

unsafe extern "C" fn sendmsg(ep: *mut fid_ep, msg: *const fi_msg, flags: u64) -> isize {
    // SAFETY: fi_sendmsg's contract: msg null or valid.
    let Some(m) = (unsafe { msg.as_ref() }) else { return -(FI_EINVAL as isize) };
    // SAFETY: as above.
    let Ok((buf, len)) = (unsafe { single_iov(m.msg_iov, m.iov_count) }) else {
        return -(FI_EINVAL as isize);
    };
    let data = (flags & FI_REMOTE_CQ_DATA != 0).then_some(m.data);
    // SAFETY: as above.
    unsafe { post_send(ep, buf, len, m.addr, None, data, m.context, flags, false) }
}

unsafe extern "C" fn inject(ep: *mut fid_ep, buf: *const c_void, len: usize, dest: fi_addr_t) -> isize {
    // SAFETY: fi_inject's contract.
    unsafe { post_send(ep, buf, len, dest, None, None, std::ptr::null_mut(), FI_INJECT, true) }
}

unsafe extern "C" fn senddata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest: fi_addr_t,
    context: *mut c_void,
) -> isize {
    // SAFETY: fi_senddata's contract.
    unsafe { post_send(ep, buf, len, dest, None, Some(data), context, 0, false) }
}

unsafe extern "C" fn injectdata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: fi_addr_t,
) -> isize {
    // SAFETY: fi_injectdata's contract.
    unsafe { post_send(ep, buf, len, dest, None, Some(data), std::ptr::null_mut(), FI_INJECT, true) }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn trecv(
    ep: *mut fid_ep,
    buf: *mut c_void,
    len: usize,
    _desc: *mut c_void,
    src: fi_addr_t,
    tag: u64,
    ignore: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: fi_trecv's contract.
    unsafe { post_recv(ep, buf, len, src, Some((tag, ignore)), context, 0) }
}

unsafe extern "C" fn trecvmsg(ep: *mut fid_ep, msg: *const fi_msg_tagged, flags: u64) -> isize {
    // SAFETY: fi_trecvmsg's contract: msg null or valid.
    let Some(m) = (unsafe { msg.as_ref() }) else { return -(FI_EINVAL as isize) };
    // SAFETY: as above.
    let Ok((buf, len)) = (unsafe { single_iov(m.msg_iov, m.iov_count) }) else {
        return -(FI_EINVAL as isize);
    };
    if flags & (FI_PEEK | FI_CLAIM | FI_DISCARD) != 0 {
        let tag = Some((m.tag, m.ignore));
        let args = RecvArgs { buf: buf as usize, len, src: m.addr, tag, context: m.context as usize, flags };
        // SAFETY: as above.
        return unsafe { with_ep(ep, |core| core.peek_or_claim(args)) };
    }
    // SAFETY: as above.
    unsafe { post_recv(ep, buf, len, m.addr, Some((m.tag, m.ignore)), m.context, flags) }
}

unsafe extern "C" fn tsend(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    dest: fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: fi_tsend's contract.
    unsafe { post_send(ep, buf, len, dest, Some(tag), None, context, 0, false) }
}

unsafe extern "C" fn tsendmsg(ep: *mut fid_ep, msg: *const fi_msg_tagged, flags: u64) -> isize {
    // SAFETY: fi_tsendmsg's contract: msg null or valid.
    let Some(m) = (unsafe { msg.as_ref() }) else { return -(FI_EINVAL as isize) };
    // SAFETY: as above.
    let Ok((buf, len)) = (unsafe { single_iov(m.msg_iov, m.iov_count) }) else {
        return -(FI_EINVAL as isize);
    };
    let data = (flags & FI_REMOTE_CQ_DATA != 0).then_some(m.data);
    // SAFETY: as above.
    unsafe { post_send(ep, buf, len, m.addr, Some(m.tag), data, m.context, flags, false) }
}

unsafe extern "C" fn tinject(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    dest: fi_addr_t,
    tag: u64,
) -> isize {
    // SAFETY: fi_tinject's contract.
    unsafe { post_send(ep, buf, len, dest, Some(tag), None, std::ptr::null_mut(), FI_INJECT, true) }
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn tsenddata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    _desc: *mut c_void,
    data: u64,
    dest: fi_addr_t,
    tag: u64,
    context: *mut c_void,
) -> isize {
    // SAFETY: fi_tsenddata's contract.
    unsafe { post_send(ep, buf, len, dest, Some(tag), Some(data), context, 0, false) }
}

unsafe extern "C" fn tinjectdata(
    ep: *mut fid_ep,
    buf: *const c_void,
    len: usize,
    data: u64,
    dest: fi_addr_t,
    tag: u64,
) -> isize {
    // SAFETY: fi_tinjectdata's contract.
    unsafe { post_send(ep, buf, len, dest, Some(tag), Some(data), std::ptr::null_mut(), FI_INJECT, true) }
}
