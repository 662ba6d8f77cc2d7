//! The unreliable-datagram QP of the wireup channel (`wireup.rs`) and its address handles:
//! creation, the INIT → RTR → RTS steps (no remote end), and single-SGE posts.

use std::sync::Arc;

use ibverbs_sys as ffi;

use super::cq::CompletionQueue;
use super::pd::ProtectionDomain;
use super::qp::{modify, Sge};
use crate::error::{Result, TransportError};

/// Bytes a UD receive buffer reserves in front of the payload for the GRH (present or not).
pub const GRH_LEN: usize = 40;

pub struct UdQueuePair {
    raw: *mut ffi::ibv_qp,
    _pd: Arc<ProtectionDomain>,
}

// SAFETY: the provider owns the QP and posts from one thread at a time (&mut self).
unsafe impl Send for UdQueuePair {}

impl UdQueuePair {
    /// Creates a UD QP on `cq` with its own receive queue of `depth` and a send queue of
    /// `depth`, and takes it to RTS: datagrams with `qkey` reach it from then on.
    pub fn new(
        pd: &Arc<ProtectionDomain>,
        cq: &CompletionQueue,
        depth: u32,
        port: u8,
        qkey: u32,
    ) -> Result<Self> {
        let mut init = ffi::ibv_qp_init_attr {
            qp_context: std::ptr::null_mut(),
            send_cq: cq.raw,
            recv_cq: cq.raw,
            srq: std::ptr::null_mut(),
            cap: ffi::ibv_qp_cap {
                max_send_wr: depth,
                max_recv_wr: depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: ffi::ibv_qp_type::IBV_QPT_UD,
            sq_sig_all: 1,
        };
        // SAFETY: pd and cq are valid; init lives on our stack.
        let raw = unsafe { ffi::ibv_create_qp(pd.raw, &mut init) };
        if raw.is_null() {
            return Err(TransportError::io(
                format!("ibv_create_qp(UD, depth {depth})"),
                std::io::Error::last_os_error(),
            ));
        }
        let qp = UdQueuePair { raw, _pd: pd.clone() };
        qp.activate(port, qkey)?;
        Ok(qp)
    }

    fn activate(&self, port: u8, qkey: u32) -> Result<()> {
        use ffi::ibv_qp_attr_mask as m;
        let mut attr = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_INIT,
            pkey_index: 0,
            port_num: port,
            qkey,
            ..Default::default()
        };
        let mask = m::IBV_QP_STATE | m::IBV_QP_PKEY_INDEX | m::IBV_QP_PORT | m::IBV_QP_QKEY;
        modify(self.raw, &mut attr, mask.0, "UD INIT")?;
        let mut attr = ffi::ibv_qp_attr { qp_state: ffi::ibv_qp_state::IBV_QPS_RTR, ..Default::default() };
        modify(self.raw, &mut attr, m::IBV_QP_STATE.0, "UD RTR")?;
        let mut attr =
            ffi::ibv_qp_attr { qp_state: ffi::ibv_qp_state::IBV_QPS_RTS, sq_psn: 0, ..Default::default() };
        modify(self.raw, &mut attr, (m::IBV_QP_STATE | m::IBV_QP_SQ_PSN).0, "UD RTS")
    }

    pub fn qpn(&self) -> u32 {
        // SAFETY: raw is a valid QP.
        unsafe { (*self.raw).qp_num }
    }

    /// Posts one receive of `sge` (which must leave [`GRH_LEN`] bytes in front of the payload).
    pub fn post_recv(&mut self, wr_id: u64, sge: Sge) -> Result<()> {
        let mut list = ffi::ibv_sge { addr: sge.addr, length: sge.len, lkey: sge.lkey };
        let mut wr = ffi::ibv_recv_wr { wr_id, next: std::ptr::null_mut(), sg_list: &mut list, num_sge: 1 };
        let mut bad = std::ptr::null_mut();
        // SAFETY: post_recv is static inline in verbs.h, reached through the context's op
        // table; the QP is valid; the WR and its SGE live on our stack for the call and name
        // registered memory the caller keeps alive.
        let rc = unsafe {
            let ctx = (*self.raw).context;
            let post = (*ctx)
                .ops
                .post_recv
                .ok_or_else(|| TransportError::Unavailable("verbs", "no post_recv op".into()))?;
            post(self.raw, &mut wr, &mut bad)
        };
        if rc != 0 {
            return Err(TransportError::io("ibv_post_recv(UD)", std::io::Error::from_raw_os_error(rc)));
        }
        Ok(())
    }

    /// Sends the datagram in `sge` to QP `qpn` behind `ah` (signaled: `sq_sig_all`).
    pub fn post_send(&mut self, wr_id: u64, sge: Sge, ah: &AddressHandle, qpn: u32, qkey: u32) -> Result<()> {
        let mut list = ffi::ibv_sge { addr: sge.addr, length: sge.len, lkey: sge.lkey };
        let mut wr = ffi::ibv_send_wr {
            wr_id,
            sg_list: &mut list,
            num_sge: 1,
            opcode: ffi::ibv_wr_opcode::IBV_WR_SEND,
            send_flags: ffi::ibv_send_flags::IBV_SEND_SIGNALED.0,
            ..Default::default()
        };
        wr.wr.ud =
            ffi::ibv_send_wr__bindgen_ty_2__bindgen_ty_3 { ah: ah.raw, remote_qpn: qpn, remote_qkey: qkey };
        let mut bad = std::ptr::null_mut();
        // SAFETY: as `post_recv`; the address handle outlives the call.
        let rc = unsafe {
            let ctx = (*self.raw).context;
            let post = (*ctx)
                .ops
                .post_send
                .ok_or_else(|| TransportError::Unavailable("verbs", "no post_send op".into()))?;
            post(self.raw, &mut wr, &mut bad)
        };
        if rc != 0 {
            return Err(TransportError::io("ibv_post_send(UD)", std::io::Error::from_raw_os_error(rc)));
        }
        Ok(())
    }
}

impl Drop for UdQueuePair {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_qp and destroyed once; its CQ outlives it.
        unsafe { ffi::ibv_destroy_qp(self.raw) };
    }
}

/// The route to one peer's UD QP.
pub struct AddressHandle {
    raw: *mut ffi::ibv_ah,
    _pd: Arc<ProtectionDomain>,
}

// SAFETY: only used by posts from the provider's thread, and destroyed once.
unsafe impl Send for AddressHandle {}

impl AddressHandle {
    /// RoCE (`use_grh`): routed by GID through our `gid_index`; InfiniBand: by LID.
    pub fn new(
        pd: &Arc<ProtectionDomain>,
        port: u8,
        use_grh: bool,
        gid_index: u8,
        gid: [u8; 16],
        lid: u16,
    ) -> Result<AddressHandle> {
        // SAFETY: ibv_ah_attr is plain data; all zeroes is a valid value.
        let mut attr: ffi::ibv_ah_attr = unsafe { std::mem::zeroed() };
        attr.dlid = lid;
        attr.port_num = port;
        if use_grh {
            attr.is_global = 1;
            attr.grh.dgid.raw = gid;
            attr.grh.sgid_index = gid_index;
            attr.grh.hop_limit = 64;
        }
        // SAFETY: the PD is valid; attr lives on our stack for the call.
        let raw = unsafe { ffi::ibv_create_ah(pd.raw, &mut attr) };
        if raw.is_null() {
            return Err(TransportError::io("ibv_create_ah", std::io::Error::last_os_error()));
        }
        Ok(AddressHandle { raw, _pd: pd.clone() })
    }
}

impl Drop for AddressHandle {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_ah and destroyed once.
        unsafe { ffi::ibv_destroy_ah(self.raw) };
    }
}
