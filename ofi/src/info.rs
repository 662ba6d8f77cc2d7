//! `fi_getinfo` for the provider: what it offers, checked against the consumer's hints, and
//! written into an `fi_info` that libfabric allocates (`fi_dupinfo`) and frees.

use std::ffi::{c_char, c_int, c_void, CStr};

use crate::abi::*;
use crate::core::MEM_TAG_FORMAT;
use crate::name::Carrier;

pub const FABRIC_NAME: &CStr = c"reverb";

/// The domain's name: what carries its endpoints.
pub fn domain_name(carrier: Carrier) -> &'static CStr {
    match carrier {
        Carrier::Shm => c"shm",
        Carrier::Tcp => c"tcp",
    }
}

/// Primary capabilities offered, and the secondary ones always on.
pub const PRIMARY_CAPS: u64 = FI_MSG | FI_TAGGED | FI_SEND | FI_RECV | FI_DIRECTED_RECV | FI_SOURCE;
pub const SECONDARY_CAPS: u64 = FI_LOCAL_COMM;
/// RMA, offered to consumers that ask for it and accept [`crate::mr::MR_MODE`].
pub const RMA_CAPS: u64 = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
const RMA_DIRECTIONS: u64 = FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;

/// The secondary capabilities of endpoints `carrier` carries: tcp reaches other hosts too.
pub fn secondary_caps(carrier: Carrier) -> u64 {
    match carrier {
        Carrier::Shm => SECONDARY_CAPS,
        Carrier::Tcp => SECONDARY_CAPS | FI_REMOTE_COMM,
    }
}
/// Largest message; also the ceiling of `inject`.
pub const MAX_MSG_SIZE: usize = 64 << 20;
pub const INJECT_SIZE: usize = 4096;
pub const QUEUE_SIZE: usize = 1024;
/// Counters a domain offers (`cntr_cnt`): they cost a few words each, so the bound is nominal.
pub const CNTR_CNT: usize = 256;

/// The parts of the hints the provider looks at, read out of the C structs.
#[derive(Clone, Copy)]
pub struct Hints {
    pub caps: u64,
    pub ep_type: c_int,
    pub threading: c_int,
    pub control_progress: c_int,
    pub data_progress: c_int,
    pub av_type: c_int,
    pub tx_op_flags: u64,
    pub rx_op_flags: u64,
    /// Message orders asked of transmits and receives.
    pub msg_order: u64,
    pub domain_caps: u64,
    /// Counters asked for (`domain_attr.cntr_cnt`); 0 for no wish.
    pub cntr_cnt: usize,
    /// The registration modes the consumer supports (`domain_attr.mr_mode`).
    pub mr_mode: c_int,
    pub names_other_fabric: bool,
    /// What carries the endpoints (sets the domain's name and the secondary capabilities).
    pub carrier: Carrier,
}

impl Default for Hints {
    fn default() -> Hints {
        Hints {
            caps: 0,
            ep_type: 0,
            threading: 0,
            control_progress: 0,
            data_progress: 0,
            av_type: 0,
            tx_op_flags: 0,
            rx_op_flags: 0,
            msg_order: 0,
            domain_caps: 0,
            cntr_cnt: 0,
            mr_mode: 0,
            names_other_fabric: false,
            carrier: Carrier::Shm,
        }
    }
}

/// What the provider answers to `hints`, or None (FI_ENODATA) when it cannot meet them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offer {
    pub caps: u64,
    pub av_type: c_int,
    pub tx_op_flags: u64,
    pub rx_op_flags: u64,
    pub carrier: Carrier,
    /// The registration modes required: [`crate::mr::MR_MODE`] with RMA, else none.
    pub mr_mode: c_int,
}

pub fn offer(h: &Hints) -> Option<Offer> {
    let secondary = secondary_caps(h.carrier);
    let rma = h.caps & RMA_CAPS != 0;
    let mr_mode_ok = h.mr_mode == FI_MR_BASIC || h.mr_mode & crate::mr::MR_MODE == crate::mr::MR_MODE;
    let unmet = h.caps & !(PRIMARY_CAPS | RMA_CAPS | secondary) != 0
        || (rma && !mr_mode_ok)
        || h.domain_caps & !secondary != 0
        || h.msg_order & !FI_ORDER_SAS != 0
        || h.cntr_cnt > CNTR_CNT;
    if unmet || h.names_other_fabric {
        return None;
    }
    if !matches!(h.ep_type, FI_EP_UNSPEC | FI_EP_RDM)
        || !matches!(h.threading, FI_THREAD_UNSPEC | FI_THREAD_DOMAIN)
        || !matches!(h.control_progress, FI_PROGRESS_UNSPEC | FI_PROGRESS_MANUAL)
        || !matches!(h.data_progress, FI_PROGRESS_UNSPEC | FI_PROGRESS_MANUAL)
        || !matches!(h.av_type, FI_AV_UNSPEC | FI_AV_MAP | FI_AV_TABLE)
    {
        return None;
    }
    let caps = if h.caps & (PRIMARY_CAPS | RMA_CAPS) == 0 {
        PRIMARY_CAPS | secondary
    } else {
        // Asked for MSG or TAGGED without a direction: both directions; RMA likewise.
        let directions = if h.caps & (FI_SEND | FI_RECV) == 0 { FI_SEND | FI_RECV } else { 0 };
        let rma_directions = if rma && h.caps & RMA_DIRECTIONS == 0 { RMA_DIRECTIONS } else { 0 };
        h.caps | directions | rma_directions | if rma { FI_RMA } else { 0 } | secondary
    };
    let av_type = if h.av_type == FI_AV_UNSPEC { FI_AV_TABLE } else { h.av_type };
    let op_flags =
        FI_COMPLETION | FI_INJECT | FI_INJECT_COMPLETE | FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE;
    Some(Offer {
        caps,
        av_type,
        tx_op_flags: h.tx_op_flags & op_flags,
        rx_op_flags: h.rx_op_flags & FI_COMPLETION,
        carrier: h.carrier,
        // FI_MR_BASIC (the old enum) is answered in its own terms: it means MR_MODE.
        mr_mode: match (rma, h.mr_mode) {
            (false, _) => 0,
            (true, FI_MR_BASIC) => FI_MR_BASIC,
            (true, _) => crate::mr::MR_MODE,
        },
    })
}

/// Reads the hints the provider checks, for endpoints `carrier` carries; a null pointer is
/// no hints.
///
/// # Safety
/// `hints` is null or a valid `fi_info` whose attribute pointers are null or valid.
pub unsafe fn read_hints(hints: *const fi_info, carrier: Carrier) -> Hints {
    let mut h = Hints { carrier, ..Hints::default() };
    // SAFETY: the caller's contract, for every pointer read below.
    unsafe {
        let Some(info) = hints.as_ref() else { return h };
        h.caps = info.caps;
        if let Some(ep) = info.ep_attr.as_ref() {
            h.ep_type = ep.type_;
        }
        if let Some(d) = info.domain_attr.as_ref() {
            h.threading = d.threading;
            h.control_progress = d.control_progress;
            h.data_progress = d.data_progress;
            h.av_type = d.av_type;
            h.domain_caps = d.caps;
            h.cntr_cnt = d.cntr_cnt;
            h.mr_mode = d.mr_mode;
            h.names_other_fabric |= !d.name.is_null() && CStr::from_ptr(d.name) != domain_name(carrier);
        }
        if let Some(f) = info.fabric_attr.as_ref() {
            h.names_other_fabric |= !f.name.is_null() && CStr::from_ptr(f.name) != FABRIC_NAME;
        }
        if let Some(tx) = info.tx_attr.as_ref() {
            h.tx_op_flags = tx.op_flags;
            h.msg_order |= tx.msg_order;
        }
        if let Some(rx) = info.rx_attr.as_ref() {
            h.rx_op_flags = rx.op_flags;
            h.msg_order |= rx.msg_order;
        }
    }
    h
}

fn dup(s: &CStr) -> *mut c_char {
    // SAFETY: a valid C string; libfabric frees the copy with free().
    unsafe { libc::strdup(s.as_ptr()) }
}

/// A fresh `fi_info` describing `offer`, allocated by libfabric; null when out of memory.
pub fn build(offer: &Offer, api_version: u32) -> *mut fi_info {
    // SAFETY: fi_dupinfo(NULL) allocates an info with every attribute struct, zeroed.
    let info = unsafe { fi_dupinfo(std::ptr::null()) };
    // SAFETY: non-null results of fi_dupinfo(NULL) have all five attribute pointers set.
    let Some(i) = (unsafe { info.as_mut() }) else { return info };
    i.caps = offer.caps;
    i.mode = 0;
    i.addr_format = FI_FORMAT_UNSPEC;
    // SAFETY: allocated by fi_dupinfo above (see its contract).
    let (tx, rx, ep, dom, fab) = unsafe {
        (&mut *i.tx_attr, &mut *i.rx_attr, &mut *i.ep_attr, &mut *i.domain_attr, &mut *i.fabric_attr)
    };
    // Each side's capabilities are the info's that concern it.
    tx.caps = offer.caps & (FI_MSG | FI_TAGGED | FI_SEND | FI_RMA | FI_READ | FI_WRITE);
    tx.op_flags = offer.tx_op_flags;
    tx.msg_order = FI_ORDER_SAS;
    tx.comp_order = 0;
    tx.inject_size = INJECT_SIZE;
    tx.size = QUEUE_SIZE;
    tx.iov_limit = 1;
    tx.rma_iov_limit = 1;
    rx.caps = offer.caps
        & (FI_MSG
            | FI_TAGGED
            | FI_RECV
            | FI_DIRECTED_RECV
            | FI_SOURCE
            | FI_RMA
            | FI_REMOTE_READ
            | FI_REMOTE_WRITE);
    rx.op_flags = offer.rx_op_flags;
    rx.msg_order = FI_ORDER_SAS;
    rx.size = QUEUE_SIZE;
    rx.iov_limit = 1;
    ep.type_ = FI_EP_RDM;
    ep.max_msg_size = MAX_MSG_SIZE;
    ep.mem_tag_format = MEM_TAG_FORMAT;
    ep.tx_ctx_cnt = 1;
    ep.rx_ctx_cnt = 1;
    dom.name = dup(domain_name(offer.carrier));
    dom.threading = FI_THREAD_DOMAIN;
    dom.control_progress = FI_PROGRESS_MANUAL;
    dom.data_progress = FI_PROGRESS_MANUAL;
    dom.resource_mgmt = FI_RM_ENABLED;
    dom.av_type = offer.av_type;
    dom.mr_mode = offer.mr_mode;
    dom.mr_key_size = 8;
    dom.mr_iov_limit = 1;
    dom.mr_cnt = crate::mr::MR_CNT;
    dom.cq_data_size = 8;
    dom.cq_cnt = 256;
    dom.cntr_cnt = CNTR_CNT;
    dom.ep_cnt = reverb_transport::shm::HOST_SLOTS as usize;
    dom.tx_ctx_cnt = 1;
    dom.rx_ctx_cnt = 1;
    dom.max_ep_tx_ctx = 1;
    dom.max_ep_rx_ctx = 1;
    dom.caps = secondary_caps(offer.carrier);
    fab.name = dup(FABRIC_NAME);
    fab.api_version = api_version;
    info
}

/// A malloc'd copy of `bytes` (libfabric frees info addresses with free()); null for none.
fn malloc_copy(bytes: &[u8]) -> Option<*mut c_void> {
    if bytes.is_empty() {
        return Some(std::ptr::null_mut());
    }
    // SAFETY: malloc of a non-zero size; null is checked.
    let p = unsafe { libc::malloc(bytes.len()) };
    if p.is_null() {
        return None;
    }
    crate::obj::copy_to_lent(p as usize, bytes.len(), bytes);
    Some(p)
}

/// Sets `info`'s source and destination addresses (empty: none). False when `info` is null
/// or memory ran out.
///
/// # Safety
/// `info` is null or a valid fi_info whose addresses are unset.
pub unsafe fn set_addresses(info: *mut fi_info, src: &[u8], dest: &[u8]) -> bool {
    // SAFETY: the caller's contract.
    let Some(i) = (unsafe { info.as_mut() }) else { return false };
    let (Some(s), Some(d)) = (malloc_copy(src), malloc_copy(dest)) else { return false };
    (i.src_addr, i.src_addrlen, i.dest_addr, i.dest_addrlen) = (s, src.len(), d, dest.len());
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rdm_tagged_manual_progress_is_offered_and_auto_progress_is_not() {
        let tagged = Hints { caps: FI_TAGGED, ep_type: FI_EP_RDM, ..Hints::default() };
        let got = offer(&tagged).unwrap();
        assert_eq!(got.caps & (FI_TAGGED | FI_SEND | FI_RECV), FI_TAGGED | FI_SEND | FI_RECV);
        assert_eq!(got.caps & FI_MSG, 0, "no primary capability beyond the hints");
        assert_eq!(got.av_type, FI_AV_TABLE);
        let map = Hints { av_type: FI_AV_MAP, ..tagged };
        assert_eq!(offer(&map).unwrap().av_type, FI_AV_MAP);
        assert!(offer(&Hints { data_progress: FI_PROGRESS_AUTO, ..tagged }).is_none());
        assert!(offer(&Hints { threading: FI_THREAD_SAFE, ..tagged }).is_none());
        assert!(offer(&Hints { caps: FI_RMA, ..tagged }).is_none(), "RMA without the mr_mode");
        assert!(offer(&Hints { msg_order: 0x1, ..tagged }).is_none(), "FI_ORDER_RAR");
        assert!(offer(&Hints { domain_caps: FI_REMOTE_COMM, ..tagged }).is_none());
        assert!(offer(&Hints { cntr_cnt: CNTR_CNT, ..tagged }).is_some(), "counters");
        assert!(offer(&Hints { cntr_cnt: CNTR_CNT + 1, ..tagged }).is_none());
        assert!(offer(&Hints { ep_type: 1, ..tagged }).is_none(), "FI_EP_MSG");
        assert_eq!(offer(&Hints::default()).unwrap().caps, PRIMARY_CAPS | SECONDARY_CAPS);
        // Open MPI's mtl asks for remote communication: tcp has it.
        let mpi = Hints { caps: FI_TAGGED | FI_DIRECTED_RECV | FI_LOCAL_COMM | FI_REMOTE_COMM, ..tagged };
        assert!(offer(&mpi).is_none());
        let over_tcp = offer(&Hints { carrier: Carrier::Tcp, ..mpi }).unwrap();
        assert_ne!(over_tcp.caps & FI_REMOTE_COMM, 0);
        assert_eq!(got.mr_mode, 0, "no registration without RMA");
    }

    #[test]
    fn rma_is_offered_to_consumers_that_accept_provider_keys_and_virtual_addresses() {
        let mr_mode = FI_MR_PROV_KEY | FI_MR_VIRT_ADDR | (1 << 2) | (1 << 5) | (1 << 9);
        let rma = Hints { caps: FI_MSG | FI_RMA, ep_type: FI_EP_RDM, mr_mode, ..Hints::default() };
        let got = offer(&rma).unwrap();
        assert_eq!(got.caps & RMA_CAPS, RMA_CAPS, "FI_RMA alone: every direction");
        assert_eq!(got.mr_mode, crate::mr::MR_MODE);
        let reads = offer(&Hints { caps: FI_RMA | FI_READ, ..rma }).unwrap();
        assert_eq!(reads.caps & RMA_CAPS, FI_RMA | FI_READ);
        assert_eq!(offer(&Hints { mr_mode: FI_MR_BASIC, ..rma }).unwrap().mr_mode, FI_MR_BASIC);
        assert!(offer(&Hints { mr_mode: FI_MR_VIRT_ADDR, ..rma }).is_none(), "user keys");
        assert_eq!(offer(&Hints { caps: FI_TAGGED, ..rma }).unwrap().mr_mode, 0);
    }
}
