//! RC queue pairs: creation, the INIT → RTR → RTS handshake (from exchanged addresses, or in
//! two steps for on-demand connections), and posting work requests. Addressing works on InfiniBand (LID) and RoCE v2 (GRH with GID).

use std::sync::Arc;

use ibverbs_sys as ffi;

use super::cq::CompletionQueue;
use super::pd::ProtectionDomain;
use super::srq::SharedReceiveQueue;
use crate::error::{Result, TransportError};

/// What a peer needs to connect to one of our QPs (from its address and the wireup exchange).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpAddress {
    pub qpn: u32,
    pub psn: u32,
    pub lid: u16,
    pub gid: [u8; 16],
    pub gid_index: u8,
    pub mtu: u8,
}

/// Local path parameters for the handshake.
#[derive(Debug, Clone, Copy)]
pub struct PathParams {
    pub port: u8,
    pub gid_index: u8,
    pub mtu: u8,
    /// RoCE: route by GRH; InfiniBand: by LID (a GRH too if the peer is on another subnet).
    pub use_grh: bool,
    pub max_rd_atomic: u8,
    /// Local ACK timeout exponent: 4.096 µs × 2^timeout per try.
    pub timeout: u8,
    pub retry_count: u8,
}

#[derive(Debug, Clone, Copy)]
pub enum Opcode {
    Send,
    Write,
    WriteImm(u32),
    Read,
}

/// One scatter/gather element: registered local memory (or any memory when inline).
#[derive(Debug, Clone, Copy)]
pub struct Sge {
    pub addr: u64,
    pub len: u32,
    pub lkey: u32,
}

/// Inline bytes asked of every QP (a device may grant less: `QueuePair::max_inline`).
pub const INLINE_WANTED: u32 = 256;

pub struct QueuePair {
    raw: *mut ffi::ibv_qp,
    pub max_inline: u32,
    _pd: Arc<ProtectionDomain>,
}

// SAFETY: the provider owns its QPs and posts from one thread at a time (&mut self).
unsafe impl Send for QueuePair {}

/// `ibv_modify_qp` with its errno as an error naming the transition (`what`); shared with the
/// UD wireup QP (`ud.rs`).
pub(super) fn modify(qp: *mut ffi::ibv_qp, attr: &mut ffi::ibv_qp_attr, mask: u32, what: &str) -> Result<()> {
    // SAFETY: qp is valid; attr lives on the caller's stack for the call.
    let rc = unsafe { ffi::ibv_modify_qp(qp, attr, mask as i32) };
    if rc != 0 {
        return Err(TransportError::io(
            format!("ibv_modify_qp({what})"),
            std::io::Error::from_raw_os_error(rc),
        ));
    }
    Ok(())
}

impl QueuePair {
    /// Creates an RC QP on `cq` that takes its receives from `srq`. Asks for `inline` bytes of
    /// inline data and falls back to less if the device refuses, so the limit is the device's,
    /// not an assumption.
    pub fn new(
        pd: &Arc<ProtectionDomain>,
        cq: &CompletionQueue,
        srq: &SharedReceiveQueue,
        send_depth: u32,
        inline: u32,
    ) -> Result<Self> {
        let mut last_err = None;
        for want_inline in [inline, 64, 0] {
            let mut init = ffi::ibv_qp_init_attr {
                qp_context: std::ptr::null_mut(),
                send_cq: cq.raw,
                recv_cq: cq.raw,
                srq: srq.raw,
                cap: ffi::ibv_qp_cap {
                    max_send_wr: send_depth,
                    max_recv_wr: 0,
                    max_send_sge: 2,
                    max_recv_sge: 1,
                    max_inline_data: want_inline,
                },
                qp_type: ffi::ibv_qp_type::IBV_QPT_RC,
                sq_sig_all: 0,
            };
            // SAFETY: pd and cq are valid; init lives on our stack.
            let raw = unsafe { ffi::ibv_create_qp(pd.raw, &mut init) };
            if !raw.is_null() {
                // The device writes back the capabilities it granted.
                return Ok(QueuePair { raw, max_inline: init.cap.max_inline_data, _pd: pd.clone() });
            }
            last_err = Some(std::io::Error::last_os_error());
        }
        Err(TransportError::io(
            format!("ibv_create_qp(send {send_depth}, shared receive queue)"),
            last_err.unwrap_or_else(|| std::io::Error::other("unknown")),
        ))
    }

    pub fn qpn(&self) -> u32 {
        // SAFETY: raw is a valid QP.
        unsafe { (*self.raw).qp_num }
    }

    /// RESET → INIT: where a QP waits until its peer's QPN is known.
    pub fn init(&self, local: &PathParams) -> Result<()> {
        use ffi::ibv_qp_attr_mask as m;
        let mut attr = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_INIT,
            pkey_index: 0,
            port_num: local.port,
            qp_access_flags: (ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0
                | ffi::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0
                | ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0),
            ..Default::default()
        };
        modify(
            self.raw,
            &mut attr,
            (m::IBV_QP_STATE | m::IBV_QP_PKEY_INDEX | m::IBV_QP_PORT | m::IBV_QP_ACCESS_FLAGS).0,
            "INIT",
        )
    }

    /// INIT → RTR → RTS towards `remote`.
    pub fn connect_from_init(&self, local: &PathParams, local_psn: u32, remote: &QpAddress) -> Result<()> {
        use ffi::ibv_qp_attr_mask as m;
        let mut attr = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_RTR,
            path_mtu: local.mtu.min(remote.mtu) as ffi::ibv_mtu,
            dest_qp_num: remote.qpn,
            rq_psn: remote.psn,
            max_dest_rd_atomic: local.max_rd_atomic,
            min_rnr_timer: 12,
            ..Default::default()
        };
        attr.ah_attr.dlid = remote.lid;
        attr.ah_attr.sl = 0;
        attr.ah_attr.src_path_bits = 0;
        attr.ah_attr.port_num = local.port;
        if local.use_grh {
            attr.ah_attr.is_global = 1;
            attr.ah_attr.grh.dgid.raw = remote.gid;
            attr.ah_attr.grh.sgid_index = local.gid_index;
            attr.ah_attr.grh.hop_limit = 64;
        }
        modify(
            self.raw,
            &mut attr,
            (m::IBV_QP_STATE
                | m::IBV_QP_AV
                | m::IBV_QP_PATH_MTU
                | m::IBV_QP_DEST_QPN
                | m::IBV_QP_RQ_PSN
                | m::IBV_QP_MAX_DEST_RD_ATOMIC
                | m::IBV_QP_MIN_RNR_TIMER)
                .0,
            "RTR",
        )?;

        let mut attr = ffi::ibv_qp_attr {
            qp_state: ffi::ibv_qp_state::IBV_QPS_RTS,
            sq_psn: local_psn,
            timeout: local.timeout,
            retry_cnt: local.retry_count,
            // Bounded: 7 would mean "retry forever" on receiver-not-ready.
            rnr_retry: 6,
            max_rd_atomic: local.max_rd_atomic,
            ..Default::default()
        };
        modify(
            self.raw,
            &mut attr,
            (m::IBV_QP_STATE
                | m::IBV_QP_TIMEOUT
                | m::IBV_QP_RETRY_CNT
                | m::IBV_QP_RNR_RETRY
                | m::IBV_QP_SQ_PSN
                | m::IBV_QP_MAX_QP_RD_ATOMIC)
                .0,
            "RTS",
        )
    }

    /// Takes a used QP back to RESET (through ERROR, which flushes what it still held), so
    /// `connect` can point it at a new remote QP while its own QPN, the one peers know,
    /// stays the same. Completions the flush raises carry the old wr_ids.
    pub fn reset(&self) -> Result<()> {
        use ffi::ibv_qp_attr_mask as m;
        for (state, what) in
            [(ffi::ibv_qp_state::IBV_QPS_ERR, "ERR"), (ffi::ibv_qp_state::IBV_QPS_RESET, "RESET")]
        {
            let mut attr = ffi::ibv_qp_attr { qp_state: state, ..Default::default() };
            modify(self.raw, &mut attr, m::IBV_QP_STATE.0, what)?;
        }
        Ok(())
    }

    /// Posts `wrs` as one linked list: one call (one doorbell) for all of them. With
    /// `inline`, a WR's bytes are copied at post time, so its SGEs may point at any memory.
    pub fn post_send(&mut self, wrs: &[SendWr<'_>]) -> Result<()> {
        const MAX: usize = 2;
        if wrs.is_empty() || wrs.len() > MAX || wrs.iter().any(|w| w.sges.len() > 2) {
            return Err(TransportError::Config(format!(
                "{} WRs in one post, at most {MAX} of 2 SGEs",
                wrs.len()
            )));
        }
        let mut lists: [[ffi::ibv_sge; 2]; MAX] = Default::default();
        let mut raw: [ffi::ibv_send_wr; MAX] = [Default::default(); MAX];
        for (i, w) in wrs.iter().enumerate() {
            for (dst, s) in lists[i].iter_mut().zip(w.sges) {
                *dst = ffi::ibv_sge { addr: s.addr, length: s.len, lkey: s.lkey };
            }
            fill(&mut raw[i], w);
        }
        let (base, sge_base) = (raw.as_mut_ptr(), lists.as_mut_ptr());
        for i in 0..wrs.len() {
            // SAFETY: i < wrs.len() <= MAX: every pointer stays inside its array.
            unsafe {
                (*base.add(i)).sg_list = (*sge_base.add(i)).as_mut_ptr();
                if i + 1 < wrs.len() {
                    (*base.add(i)).next = base.add(i + 1);
                }
            }
        }
        let mut bad = std::ptr::null_mut();
        // SAFETY: post_send is static inline in verbs.h, so it is reached through the context's
        // op table; the QP is valid; the WRs and their SGE lists live on our stack for the call
        // (inline data is copied during it, other SGEs name registered memory kept alive by the
        // caller).
        let rc = unsafe {
            let ctx = (*self.raw).context;
            let post = (*ctx)
                .ops
                .post_send
                .ok_or_else(|| TransportError::Unavailable("verbs", "no post_send op".into()))?;
            post(self.raw, base, &mut bad)
        };
        if rc != 0 {
            return Err(TransportError::io("ibv_post_send", std::io::Error::from_raw_os_error(rc)));
        }
        Ok(())
    }
}

/// One send-queue work request for [`QueuePair::post_send`].
pub struct SendWr<'a> {
    pub wr_id: u64,
    pub op: Opcode,
    pub sges: &'a [Sge],
    pub remote: Option<(u64, u32)>,
    pub signaled: bool,
    pub inline: bool,
}

/// Everything of `wr` but its SGE list and link.
fn fill(wr: &mut ffi::ibv_send_wr, w: &SendWr<'_>) {
    wr.wr_id = w.wr_id;
    wr.num_sge = w.sges.len() as i32;
    let mut flags = 0;
    if w.signaled {
        flags |= ffi::ibv_send_flags::IBV_SEND_SIGNALED.0;
    }
    if w.inline {
        flags |= ffi::ibv_send_flags::IBV_SEND_INLINE.0;
    }
    wr.send_flags = flags;
    wr.opcode = match w.op {
        Opcode::Send => ffi::ibv_wr_opcode::IBV_WR_SEND,
        Opcode::Write => ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE,
        Opcode::WriteImm(imm) => {
            wr.__bindgen_anon_1.imm_data = imm.to_be();
            ffi::ibv_wr_opcode::IBV_WR_RDMA_WRITE_WITH_IMM
        }
        Opcode::Read => ffi::ibv_wr_opcode::IBV_WR_RDMA_READ,
    };
    if let Some((addr, rkey)) = w.remote {
        wr.wr.rdma.remote_addr = addr;
        wr.wr.rdma.rkey = rkey;
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_qp and destroyed once; its CQ outlives it.
        unsafe { ffi::ibv_destroy_qp(self.raw) };
    }
}
