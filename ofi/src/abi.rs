//! libfabric 1.17's C ABI, as much of it as the provider fills or reads: the structs declared
//! by hand from `<rdma/fabric.h>` and friends (no libclang here for bindgen); the tests compare
//! every offset with what the C compiler makes of the installed headers (`abi/layout.c`).
//! Operation slots the provider leaves unimplemented are plain pointers ([`Slot`]).

#![allow(non_camel_case_types, missing_docs)]

use std::ffi::{c_char, c_int, c_void};

pub type fi_addr_t = u64;
/// An operation slot the provider does not implement: it points at [`crate::obj::no_op`].
pub type Slot = *const c_void;

pub const fn fi_version(major: u32, minor: u32) -> u32 {
    major << 16 | minor
}

// Capabilities and operation flags.
pub const FI_MSG: u64 = 0x2;
pub const FI_RMA: u64 = 0x4;
pub const FI_TAGGED: u64 = 0x8;
pub const FI_ATOMIC: u64 = 0x10;
pub const FI_READ: u64 = 0x100;
pub const FI_WRITE: u64 = 0x200;
pub const FI_RECV: u64 = 0x400;
pub const FI_SEND: u64 = 0x800;
pub const FI_TRANSMIT: u64 = FI_SEND;
pub const FI_REMOTE_READ: u64 = 0x1000;
pub const FI_REMOTE_WRITE: u64 = 0x2000;
pub const FI_REMOTE_CQ_DATA: u64 = 0x20000;
pub const FI_PEEK: u64 = 0x80000;
pub const FI_COMPLETION: u64 = 0x100_0000;
pub const FI_INJECT: u64 = 0x200_0000;
pub const FI_INJECT_COMPLETE: u64 = 0x400_0000;
pub const FI_TRANSMIT_COMPLETE: u64 = 0x800_0000;
pub const FI_DELIVERY_COMPLETE: u64 = 0x1000_0000;
pub const FI_LOCAL_COMM: u64 = 0x8_0000_0000_0000;
pub const FI_REMOTE_COMM: u64 = 0x10_0000_0000_0000;
pub const FI_SOURCE: u64 = 0x200_0000_0000_0000;
pub const FI_DIRECTED_RECV: u64 = 0x800_0000_0000_0000;
pub const FI_CLAIM: u64 = 0x800_0000_0000_0000;
pub const FI_DISCARD: u64 = 0x400_0000_0000_0000;
pub const FI_SELECTIVE_COMPLETION: u64 = 0x800_0000_0000_0000;
pub const FI_ORDER_SAS: u64 = 0x100;
// Memory registration modes (`domain_attr.mr_mode`).
pub const FI_MR_BASIC: c_int = 1;
pub const FI_MR_VIRT_ADDR: c_int = 1 << 4;
pub const FI_MR_PROV_KEY: c_int = 1 << 6;
pub const FI_ADDR_UNSPEC: fi_addr_t = u64::MAX;
pub const FI_ADDR_NOTAVAIL: fi_addr_t = u64::MAX;

// Enumerations.
pub const FI_EP_UNSPEC: c_int = 0;
pub const FI_EP_RDM: c_int = 3;
pub const FI_THREAD_UNSPEC: c_int = 0;
pub const FI_THREAD_SAFE: c_int = 1;
pub const FI_THREAD_DOMAIN: c_int = 3;
pub const FI_PROGRESS_UNSPEC: c_int = 0;
pub const FI_PROGRESS_AUTO: c_int = 1;
pub const FI_PROGRESS_MANUAL: c_int = 2;
pub const FI_RM_ENABLED: c_int = 2;
pub const FI_AV_UNSPEC: c_int = 0;
pub const FI_AV_MAP: c_int = 1;
pub const FI_AV_TABLE: c_int = 2;
pub const FI_FORMAT_UNSPEC: u32 = 0;
pub const FI_CLASS_FABRIC: usize = 1;
pub const FI_CLASS_DOMAIN: usize = 2;
pub const FI_CLASS_EP: usize = 3;
pub const FI_CLASS_AV: usize = 11;
pub const FI_CLASS_MR: usize = 12;
pub const FI_CLASS_EQ: usize = 13;
pub const FI_CLASS_CQ: usize = 14;
pub const FI_CLASS_CNTR: usize = 15;
pub const FI_CNTR_EVENTS_COMP: c_int = 0;
pub const FI_CQ_FORMAT_UNSPEC: c_int = 0;
pub const FI_CQ_FORMAT_CONTEXT: c_int = 1;
pub const FI_CQ_FORMAT_MSG: c_int = 2;
pub const FI_CQ_FORMAT_DATA: c_int = 3;
pub const FI_CQ_FORMAT_TAGGED: c_int = 4;
pub const FI_WAIT_NONE: c_int = 0;
pub const FI_WAIT_UNSPEC: c_int = 1;
pub const FI_ENABLE: c_int = 6;

// Errors (returned negated).
pub const FI_ENOENT: c_int = 2;
pub const FI_EIO: c_int = 5;
pub const FI_EAGAIN: c_int = 11;
pub const FI_ENOMEM: c_int = 12;
pub const FI_EACCES: c_int = 13;
pub const FI_EBUSY: c_int = 16;
pub const FI_EINVAL: c_int = 22;
pub const FI_ENOSYS: c_int = 38;
pub const FI_ENOMSG: c_int = 42;
pub const FI_ENODATA: c_int = 61;
pub const FI_EMSGSIZE: c_int = 90;
pub const FI_ETIMEDOUT: c_int = 110;
pub const FI_EHOSTUNREACH: c_int = 113;
pub const FI_ECANCELED: c_int = 125;
pub const FI_EOTHER: c_int = 256;
pub const FI_ETOOSMALL: c_int = 257;
pub const FI_EAVAIL: c_int = 259;
pub const FI_ETRUNC: c_int = 265;

#[repr(C)]
pub struct fi_context {
    pub internal: [*mut c_void; 4],
}

#[repr(C)]
pub struct fi_provider {
    pub version: u32,
    pub fi_version: u32,
    pub context: fi_context,
    pub name: *const c_char,
    pub getinfo: Option<
        unsafe extern "C" fn(
            u32,
            *const c_char,
            *const c_char,
            u64,
            *const fi_info,
            *mut *mut fi_info,
        ) -> c_int,
    >,
    pub fabric: Option<unsafe extern "C" fn(*mut fi_fabric_attr, *mut *mut fid_fabric, *mut c_void) -> c_int>,
    pub cleanup: Option<unsafe extern "C" fn()>,
}

#[repr(C)]
pub struct fi_tx_attr {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub inject_size: usize,
    pub size: usize,
    pub iov_limit: usize,
    pub rma_iov_limit: usize,
    pub tclass: u32,
}

#[repr(C)]
pub struct fi_rx_attr {
    pub caps: u64,
    pub mode: u64,
    pub op_flags: u64,
    pub msg_order: u64,
    pub comp_order: u64,
    pub total_buffered_recv: usize,
    pub size: usize,
    pub iov_limit: usize,
}

#[repr(C)]
pub struct fi_ep_attr {
    pub type_: c_int,
    pub protocol: u32,
    pub protocol_version: u32,
    pub max_msg_size: usize,
    pub msg_prefix_size: usize,
    pub max_order_raw_size: usize,
    pub max_order_war_size: usize,
    pub max_order_waw_size: usize,
    pub mem_tag_format: u64,
    pub tx_ctx_cnt: usize,
    pub rx_ctx_cnt: usize,
    pub auth_key_size: usize,
    pub auth_key: *mut u8,
}

#[repr(C)]
pub struct fi_domain_attr {
    pub domain: *mut fid_domain,
    pub name: *mut c_char,
    pub threading: c_int,
    pub control_progress: c_int,
    pub data_progress: c_int,
    pub resource_mgmt: c_int,
    pub av_type: c_int,
    pub mr_mode: c_int,
    pub mr_key_size: usize,
    pub cq_data_size: usize,
    pub cq_cnt: usize,
    pub ep_cnt: usize,
    pub tx_ctx_cnt: usize,
    pub rx_ctx_cnt: usize,
    pub max_ep_tx_ctx: usize,
    pub max_ep_rx_ctx: usize,
    pub max_ep_stx_ctx: usize,
    pub max_ep_srx_ctx: usize,
    pub cntr_cnt: usize,
    pub mr_iov_limit: usize,
    pub caps: u64,
    pub mode: u64,
    pub auth_key: *mut u8,
    pub auth_key_size: usize,
    pub max_err_data: usize,
    pub mr_cnt: usize,
    pub tclass: u32,
}

#[repr(C)]
pub struct fi_fabric_attr {
    pub fabric: *mut fid_fabric,
    pub name: *mut c_char,
    pub prov_name: *mut c_char,
    pub prov_version: u32,
    pub api_version: u32,
}

#[repr(C)]
pub struct fi_info {
    pub next: *mut fi_info,
    pub caps: u64,
    pub mode: u64,
    pub addr_format: u32,
    pub src_addrlen: usize,
    pub dest_addrlen: usize,
    pub src_addr: *mut c_void,
    pub dest_addr: *mut c_void,
    pub handle: *mut fid,
    pub tx_attr: *mut fi_tx_attr,
    pub rx_attr: *mut fi_rx_attr,
    pub ep_attr: *mut fi_ep_attr,
    pub domain_attr: *mut fi_domain_attr,
    pub fabric_attr: *mut fi_fabric_attr,
    pub nic: *mut c_void,
}

#[repr(C)]
pub struct fid {
    pub fclass: usize,
    pub context: *mut c_void,
    pub ops: *const fi_ops,
}

#[repr(C)]
pub struct fi_ops {
    pub size: usize,
    pub close: Option<unsafe extern "C" fn(*mut fid) -> c_int>,
    pub bind: Option<unsafe extern "C" fn(*mut fid, *mut fid, u64) -> c_int>,
    pub control: Option<unsafe extern "C" fn(*mut fid, c_int, *mut c_void) -> c_int>,
    pub ops_open: Slot,
    pub tostr: Slot,
    pub ops_set: Slot,
}

#[repr(C)]
pub struct fi_ops_fabric {
    pub size: usize,
    pub domain: Option<
        unsafe extern "C" fn(*mut fid_fabric, *mut fi_info, *mut *mut fid_domain, *mut c_void) -> c_int,
    >,
    pub passive_ep: Slot,
    pub eq_open: Option<
        unsafe extern "C" fn(*mut fid_fabric, *mut fi_eq_attr, *mut *mut fid_eq, *mut c_void) -> c_int,
    >,
    pub wait_open: Slot,
    pub trywait: Slot,
    pub domain2: Slot,
}

#[repr(C)]
pub struct fid_fabric {
    pub fid: fid,
    pub ops: *const fi_ops_fabric,
    pub api_version: u32,
}

#[repr(C)]
pub struct fi_ops_domain {
    pub size: usize,
    pub av_open: Option<
        unsafe extern "C" fn(*mut fid_domain, *mut fi_av_attr, *mut *mut fid_av, *mut c_void) -> c_int,
    >,
    pub cq_open: Option<
        unsafe extern "C" fn(*mut fid_domain, *mut fi_cq_attr, *mut *mut fid_cq, *mut c_void) -> c_int,
    >,
    pub endpoint:
        Option<unsafe extern "C" fn(*mut fid_domain, *mut fi_info, *mut *mut fid_ep, *mut c_void) -> c_int>,
    pub scalable_ep: Slot,
    pub cntr_open: Option<
        unsafe extern "C" fn(*mut fid_domain, *mut fi_cntr_attr, *mut *mut fid_cntr, *mut c_void) -> c_int,
    >,
    pub poll_open: Slot,
    pub stx_ctx: Slot,
    pub srx_ctx: Slot,
    pub query_atomic: Slot,
    pub query_collective: Slot,
    pub endpoint2: Slot,
}

pub type MrRegFn = unsafe extern "C" fn(
    *mut fid,
    *const c_void,
    usize,
    u64,
    u64,
    u64,
    u64,
    *mut *mut fid_mr,
    *mut c_void,
) -> c_int;
pub type MrRegvFn = unsafe extern "C" fn(
    *mut fid,
    *const iovec,
    usize,
    u64,
    u64,
    u64,
    u64,
    *mut *mut fid_mr,
    *mut c_void,
) -> c_int;

#[repr(C)]
pub struct fi_ops_mr {
    pub size: usize,
    pub reg: Option<MrRegFn>,
    pub regv: Option<MrRegvFn>,
    pub regattr: Option<unsafe extern "C" fn(*mut fid, *const fi_mr_attr, u64, *mut *mut fid_mr) -> c_int>,
}

#[repr(C)]
pub struct fid_mr {
    pub fid: fid,
    pub mem_desc: *mut c_void,
    pub key: u64,
}

#[repr(C)]
pub struct fi_mr_attr {
    pub mr_iov: *const iovec,
    pub iov_count: usize,
    pub access: u64,
    pub offset: u64,
    pub requested_key: u64,
    pub context: *mut c_void,
    pub auth_key_size: usize,
    pub auth_key: *mut u8,
    pub iface: c_int,
    pub device: u64,
}

#[repr(C)]
pub struct fid_domain {
    pub fid: fid,
    pub ops: *const fi_ops_domain,
    pub mr: *const fi_ops_mr,
}

#[repr(C)]
pub struct fi_eq_attr {
    pub size: usize,
    pub flags: u64,
    pub wait_obj: c_int,
    pub signaling_vector: c_int,
    pub wait_set: *mut c_void,
}

#[repr(C)]
pub struct fi_ops_eq {
    pub size: usize,
    pub read: Option<unsafe extern "C" fn(*mut fid_eq, *mut u32, *mut c_void, usize, u64) -> isize>,
    /// Takes a `struct fi_eq_err_entry *`, which the provider never fills.
    pub readerr: Option<unsafe extern "C" fn(*mut fid_eq, *mut c_void, u64) -> isize>,
    pub write: Option<unsafe extern "C" fn(*mut fid_eq, u32, *const c_void, usize, u64) -> isize>,
    pub sread: Option<unsafe extern "C" fn(*mut fid_eq, *mut u32, *mut c_void, usize, c_int, u64) -> isize>,
    pub strerror: Slot,
}

#[repr(C)]
pub struct fid_eq {
    pub fid: fid,
    pub ops: *const fi_ops_eq,
}

#[repr(C)]
pub struct fi_av_attr {
    pub type_: c_int,
    pub rx_ctx_bits: c_int,
    pub count: usize,
    pub ep_per_node: usize,
    pub name: *const c_char,
    pub map_addr: *mut c_void,
    pub flags: u64,
}

#[repr(C)]
pub struct fi_ops_av {
    pub size: usize,
    pub insert: Option<
        unsafe extern "C" fn(*mut fid_av, *const c_void, usize, *mut fi_addr_t, u64, *mut c_void) -> c_int,
    >,
    pub insertsvc: Slot,
    pub insertsym: Slot,
    pub remove: Option<unsafe extern "C" fn(*mut fid_av, *mut fi_addr_t, usize, u64) -> c_int>,
    pub lookup: Option<unsafe extern "C" fn(*mut fid_av, fi_addr_t, *mut c_void, *mut usize) -> c_int>,
    pub straddr:
        Option<unsafe extern "C" fn(*mut fid_av, *const c_void, *mut c_char, *mut usize) -> *const c_char>,
    pub av_set: Slot,
}

#[repr(C)]
pub struct fid_av {
    pub fid: fid,
    pub ops: *const fi_ops_av,
}

#[repr(C)]
pub struct fi_cq_attr {
    pub size: usize,
    pub flags: u64,
    pub format: c_int,
    pub wait_obj: c_int,
    pub signaling_vector: c_int,
    pub wait_cond: c_int,
    pub wait_set: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_cq_tagged_entry {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: usize,
    pub buf: *mut c_void,
    pub data: u64,
    pub tag: u64,
}

#[repr(C)]
#[derive(Debug)]
pub struct fi_cq_err_entry {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: usize,
    pub buf: *mut c_void,
    pub data: u64,
    pub tag: u64,
    pub olen: usize,
    pub err: c_int,
    pub prov_errno: c_int,
    pub err_data: *mut c_void,
    pub err_data_size: usize,
}

#[repr(C)]
pub struct fi_ops_cq {
    pub size: usize,
    pub read: Option<unsafe extern "C" fn(*mut fid_cq, *mut c_void, usize) -> isize>,
    pub readfrom: Option<unsafe extern "C" fn(*mut fid_cq, *mut c_void, usize, *mut fi_addr_t) -> isize>,
    pub readerr: Option<unsafe extern "C" fn(*mut fid_cq, *mut fi_cq_err_entry, u64) -> isize>,
    pub sread: Option<unsafe extern "C" fn(*mut fid_cq, *mut c_void, usize, *const c_void, c_int) -> isize>,
    pub sreadfrom: Option<
        unsafe extern "C" fn(*mut fid_cq, *mut c_void, usize, *mut fi_addr_t, *const c_void, c_int) -> isize,
    >,
    pub signal: Slot,
    pub strerror:
        Option<unsafe extern "C" fn(*mut fid_cq, c_int, *const c_void, *mut c_char, usize) -> *const c_char>,
}

#[repr(C)]
pub struct fid_cq {
    pub fid: fid,
    pub ops: *const fi_ops_cq,
}

#[repr(C)]
pub struct fi_cntr_attr {
    pub events: c_int,
    pub wait_obj: c_int,
    pub wait_set: *mut c_void,
    pub flags: u64,
}

#[repr(C)]
pub struct fi_ops_cntr {
    pub size: usize,
    pub read: Option<unsafe extern "C" fn(*mut fid_cntr) -> u64>,
    pub readerr: Option<unsafe extern "C" fn(*mut fid_cntr) -> u64>,
    pub add: Option<unsafe extern "C" fn(*mut fid_cntr, u64) -> c_int>,
    pub set: Option<unsafe extern "C" fn(*mut fid_cntr, u64) -> c_int>,
    pub wait: Option<unsafe extern "C" fn(*mut fid_cntr, u64, c_int) -> c_int>,
    pub adderr: Option<unsafe extern "C" fn(*mut fid_cntr, u64) -> c_int>,
    pub seterr: Option<unsafe extern "C" fn(*mut fid_cntr, u64) -> c_int>,
}

#[repr(C)]
pub struct fid_cntr {
    pub fid: fid,
    pub ops: *const fi_ops_cntr,
}

#[repr(C)]
pub struct iovec {
    pub iov_base: *mut c_void,
    pub iov_len: usize,
}

#[repr(C)]
pub struct fi_msg {
    pub msg_iov: *const iovec,
    pub desc: *mut *mut c_void,
    pub iov_count: usize,
    pub addr: fi_addr_t,
    pub context: *mut c_void,
    pub data: u64,
}

#[repr(C)]
pub struct fi_msg_tagged {
    pub msg_iov: *const iovec,
    pub desc: *mut *mut c_void,
    pub iov_count: usize,
    pub addr: fi_addr_t,
    pub tag: u64,
    pub ignore: u64,
    pub context: *mut c_void,
    pub data: u64,
}

#[repr(C)]
pub struct fi_ops_ep {
    pub size: usize,
    pub cancel: Option<unsafe extern "C" fn(*mut fid, *mut c_void) -> isize>,
    pub getopt: Slot,
    pub setopt: Slot,
    pub tx_ctx: Slot,
    pub rx_ctx: Slot,
    pub rx_size_left: Slot,
    pub tx_size_left: Slot,
}

#[repr(C)]
pub struct fi_ops_cm {
    pub size: usize,
    pub setname: Slot,
    pub getname: Option<unsafe extern "C" fn(*mut fid, *mut c_void, *mut usize) -> c_int>,
    pub getpeer: Slot,
    pub connect: Slot,
    pub listen: Slot,
    pub accept: Slot,
    pub reject: Slot,
    pub shutdown: Slot,
    pub join: Slot,
}

pub type RecvFn =
    unsafe extern "C" fn(*mut fid_ep, *mut c_void, usize, *mut c_void, fi_addr_t, *mut c_void) -> isize;
pub type SendFn =
    unsafe extern "C" fn(*mut fid_ep, *const c_void, usize, *mut c_void, fi_addr_t, *mut c_void) -> isize;
pub type InjectFn = unsafe extern "C" fn(*mut fid_ep, *const c_void, usize, fi_addr_t) -> isize;
pub type SendDataFn = unsafe extern "C" fn(
    *mut fid_ep,
    *const c_void,
    usize,
    *mut c_void,
    u64,
    fi_addr_t,
    *mut c_void,
) -> isize;
pub type InjectDataFn = unsafe extern "C" fn(*mut fid_ep, *const c_void, usize, u64, fi_addr_t) -> isize;

#[repr(C)]
pub struct fi_ops_msg {
    pub size: usize,
    pub recv: Option<RecvFn>,
    pub recvv: Slot,
    pub recvmsg: Option<unsafe extern "C" fn(*mut fid_ep, *const fi_msg, u64) -> isize>,
    pub send: Option<SendFn>,
    pub sendv: Slot,
    pub sendmsg: Option<unsafe extern "C" fn(*mut fid_ep, *const fi_msg, u64) -> isize>,
    pub inject: Option<InjectFn>,
    pub senddata: Option<SendDataFn>,
    pub injectdata: Option<InjectDataFn>,
}

pub type TRecvFn = unsafe extern "C" fn(
    *mut fid_ep,
    *mut c_void,
    usize,
    *mut c_void,
    fi_addr_t,
    u64,
    u64,
    *mut c_void,
) -> isize;
pub type TSendFn = unsafe extern "C" fn(
    *mut fid_ep,
    *const c_void,
    usize,
    *mut c_void,
    fi_addr_t,
    u64,
    *mut c_void,
) -> isize;
pub type TInjectFn = unsafe extern "C" fn(*mut fid_ep, *const c_void, usize, fi_addr_t, u64) -> isize;
pub type TSendDataFn = unsafe extern "C" fn(
    *mut fid_ep,
    *const c_void,
    usize,
    *mut c_void,
    u64,
    fi_addr_t,
    u64,
    *mut c_void,
) -> isize;
pub type TInjectDataFn =
    unsafe extern "C" fn(*mut fid_ep, *const c_void, usize, u64, fi_addr_t, u64) -> isize;

#[repr(C)]
pub struct fi_ops_tagged {
    pub size: usize,
    pub recv: Option<TRecvFn>,
    pub recvv: Slot,
    pub recvmsg: Option<unsafe extern "C" fn(*mut fid_ep, *const fi_msg_tagged, u64) -> isize>,
    pub send: Option<TSendFn>,
    pub sendv: Slot,
    pub sendmsg: Option<unsafe extern "C" fn(*mut fid_ep, *const fi_msg_tagged, u64) -> isize>,
    pub inject: Option<TInjectFn>,
    pub senddata: Option<TSendDataFn>,
    pub injectdata: Option<TInjectDataFn>,
}

#[repr(C)]
pub struct fi_rma_iov {
    pub addr: u64,
    pub len: usize,
    pub key: u64,
}

#[repr(C)]
pub struct fi_msg_rma {
    pub msg_iov: *const iovec,
    pub desc: *mut *mut c_void,
    pub iov_count: usize,
    pub addr: fi_addr_t,
    pub rma_iov: *const fi_rma_iov,
    pub rma_iov_count: usize,
    pub context: *mut c_void,
    pub data: u64,
}

/// fi_read: (ep, buf, len, desc, src, addr, key, context).
pub type RmaReadFn = unsafe extern "C" fn(
    *mut fid_ep,
    *mut c_void,
    usize,
    *mut c_void,
    fi_addr_t,
    u64,
    u64,
    *mut c_void,
) -> isize;
/// fi_readv and fi_writev: (ep, iov, desc, count, peer, addr, key, context).
pub type RmaIovFn = unsafe extern "C" fn(
    *mut fid_ep,
    *const iovec,
    *mut *mut c_void,
    usize,
    fi_addr_t,
    u64,
    u64,
    *mut c_void,
) -> isize;
pub type RmaMsgFn = unsafe extern "C" fn(*mut fid_ep, *const fi_msg_rma, u64) -> isize;
pub type RmaWriteFn = unsafe extern "C" fn(
    *mut fid_ep,
    *const c_void,
    usize,
    *mut c_void,
    fi_addr_t,
    u64,
    u64,
    *mut c_void,
) -> isize;
pub type RmaInjectFn = unsafe extern "C" fn(*mut fid_ep, *const c_void, usize, fi_addr_t, u64, u64) -> isize;
pub type RmaWriteDataFn = unsafe extern "C" fn(
    *mut fid_ep,
    *const c_void,
    usize,
    *mut c_void,
    u64,
    fi_addr_t,
    u64,
    u64,
    *mut c_void,
) -> isize;
pub type RmaInjectDataFn =
    unsafe extern "C" fn(*mut fid_ep, *const c_void, usize, u64, fi_addr_t, u64, u64) -> isize;

#[repr(C)]
pub struct fi_ops_rma {
    pub size: usize,
    pub read: Option<RmaReadFn>,
    pub readv: Option<RmaIovFn>,
    pub readmsg: Option<RmaMsgFn>,
    pub write: Option<RmaWriteFn>,
    pub writev: Option<RmaIovFn>,
    pub writemsg: Option<RmaMsgFn>,
    pub inject: Option<RmaInjectFn>,
    pub writedata: Option<RmaWriteDataFn>,
    pub injectdata: Option<RmaInjectDataFn>,
}

#[repr(C)]
pub struct fid_ep {
    pub fid: fid,
    pub ops: *const fi_ops_ep,
    pub cm: *const fi_ops_cm,
    pub msg: *const fi_ops_msg,
    pub rma: *const fi_ops_rma,
    pub tagged: *const fi_ops_tagged,
    pub atomic: *const c_void,
    pub collective: *const c_void,
}

#[link(name = "fabric")]
extern "C" {
    /// `fi_dupinfo(NULL)` allocates an empty info with every attribute, as `fi_allocinfo`.
    pub fn fi_dupinfo(info: *const fi_info) -> *mut fi_info;
    pub fn fi_freeinfo(info: *mut fi_info);
    pub fn fi_getinfo(
        version: u32,
        node: *const c_char,
        service: *const c_char,
        flags: u64,
        hints: *const fi_info,
        info: *mut *mut fi_info,
    ) -> c_int;
    pub fn fi_fabric(attr: *mut fi_fabric_attr, fabric: *mut *mut fid_fabric, context: *mut c_void) -> c_int;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    extern "C" {
        static reverb_fi_layout: [usize; LAYOUT_LEN];
    }
    const LAYOUT_LEN: usize = 58;

    /// Sizes and offsets in the order `abi/layout.c` lists them.
    fn rust_layout() -> [usize; LAYOUT_LEN] {
        [
            size_of::<fi_provider>(),
            offset_of!(fi_provider, getinfo),
            size_of::<fi_tx_attr>(),
            size_of::<fi_rx_attr>(),
            size_of::<fi_ep_attr>(),
            offset_of!(fi_ep_attr, mem_tag_format),
            size_of::<fi_domain_attr>(),
            offset_of!(fi_domain_attr, mr_key_size),
            offset_of!(fi_domain_attr, caps),
            offset_of!(fi_domain_attr, tclass),
            size_of::<fi_fabric_attr>(),
            size_of::<fi_info>(),
            offset_of!(fi_info, src_addrlen),
            offset_of!(fi_info, nic),
            size_of::<fid>(),
            size_of::<fi_ops>(),
            size_of::<fi_ops_fabric>(),
            size_of::<fid_fabric>(),
            size_of::<fi_ops_domain>(),
            size_of::<fid_domain>(),
            size_of::<fi_ops_mr>(),
            size_of::<fi_eq_attr>(),
            size_of::<fi_ops_eq>(),
            size_of::<fi_av_attr>(),
            offset_of!(fi_av_attr, flags),
            size_of::<fi_ops_av>(),
            size_of::<fi_cq_attr>(),
            offset_of!(fi_cq_attr, wait_set),
            size_of::<fi_cq_tagged_entry>(),
            size_of::<fi_cq_err_entry>(),
            offset_of!(fi_cq_err_entry, err),
            offset_of!(fi_cq_err_entry, err_data_size),
            size_of::<fi_ops_cq>(),
            size_of::<fi_cntr_attr>(),
            offset_of!(fi_cntr_attr, flags),
            size_of::<fi_ops_cntr>(),
            offset_of!(fi_ops_cntr, seterr),
            size_of::<fid_cntr>(),
            size_of::<fi_msg>(),
            size_of::<fi_msg_tagged>(),
            offset_of!(fi_msg_tagged, context),
            size_of::<fi_ops_ep>(),
            size_of::<fi_ops_cm>(),
            offset_of!(fi_ops_cm, getname),
            size_of::<fi_ops_msg>(),
            offset_of!(fi_ops_msg, injectdata),
            size_of::<fi_ops_tagged>(),
            offset_of!(fi_ops_tagged, inject),
            size_of::<fid_ep>(),
            offset_of!(fid_ep, tagged),
            size_of::<fi_context>(),
            size_of::<fid_mr>(),
            size_of::<fi_mr_attr>(),
            offset_of!(fi_mr_attr, iface),
            size_of::<fi_rma_iov>(),
            size_of::<fi_msg_rma>(),
            size_of::<fi_ops_rma>(),
            offset_of!(fi_ops_rma, injectdata),
        ]
    }

    #[test]
    fn hand_declared_structs_match_the_installed_headers() {
        // SAFETY: a constant array the C file defines with LAYOUT_LEN entries.
        let c = unsafe { reverb_fi_layout };
        let rust = rust_layout();
        for (i, (c, r)) in c.iter().zip(rust.iter()).enumerate() {
            assert_eq!(c, r, "entry {i} of abi/layout.c differs");
        }
    }
}
