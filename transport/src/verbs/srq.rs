//! The shared receive queue: one pool of eager receive slots that every RC QP of the provider
//! takes its incoming SENDs (and write-with-immediate notifications) from, so receive memory
//! does not grow with the number of peers. Receives are posted as linked lists: one call (and
//! one lock in the driver) per refill batch.

use std::sync::Arc;

use ibverbs_sys as ffi;

use super::pd::ProtectionDomain;
use super::qp::Sge;
use crate::error::{Result, TransportError};

/// At most this many receives are linked into one `ibv_post_srq_recv` call.
const LIST_MAX: usize = 64;

pub struct SharedReceiveQueue {
    pub(crate) raw: *mut ffi::ibv_srq,
    /// The linked list of one post and its SGEs, kept to reuse their allocation.
    wrs: Vec<ffi::ibv_recv_wr>,
    sges: Vec<ffi::ibv_sge>,
    _pd: Arc<ProtectionDomain>,
}

// SAFETY: the provider owns the SRQ and posts from one thread at a time (&mut self).
unsafe impl Send for SharedReceiveQueue {}

impl SharedReceiveQueue {
    /// Creates an SRQ holding up to `depth` single-SGE receives.
    pub fn new(pd: &Arc<ProtectionDomain>, depth: u32) -> Result<SharedReceiveQueue> {
        let mut init = ffi::ibv_srq_init_attr {
            srq_context: std::ptr::null_mut(),
            attr: ffi::ibv_srq_attr { max_wr: depth, max_sge: 1, srq_limit: 0 },
        };
        // SAFETY: the PD is valid; init lives on our stack for the call.
        let raw = unsafe { ffi::ibv_create_srq(pd.raw, &mut init) };
        if raw.is_null() {
            return Err(TransportError::io(
                format!("ibv_create_srq({depth})"),
                std::io::Error::last_os_error(),
            ));
        }
        let (wrs, sges) = (Vec::with_capacity(LIST_MAX), Vec::with_capacity(LIST_MAX));
        Ok(SharedReceiveQueue { raw, wrs, sges, _pd: pd.clone() })
    }

    /// Posts one receive per `(wr_id, sge)`, linked in chunks of [`LIST_MAX`].
    pub fn post(&mut self, recvs: &[(u64, Sge)]) -> Result<()> {
        for chunk in recvs.chunks(LIST_MAX) {
            // Only the entries used are built: most refills are one or two receives.
            self.sges.clear();
            self.sges.extend(chunk.iter().map(|(_, s)| ffi::ibv_sge {
                addr: s.addr,
                length: s.len,
                lkey: s.lkey,
            }));
            self.wrs.clear();
            let sge_base = self.sges.as_mut_ptr();
            for (i, (wr_id, _)) in chunk.iter().enumerate() {
                // SAFETY: i < chunk.len() == sges.len(): inside the vector, which is not
                // touched again until the post below returns.
                let sg_list = unsafe { sge_base.add(i) };
                self.wrs.push(ffi::ibv_recv_wr {
                    wr_id: *wr_id,
                    next: std::ptr::null_mut(),
                    sg_list,
                    num_sge: 1,
                });
            }
            let base = self.wrs.as_mut_ptr();
            for i in 1..chunk.len() {
                // SAFETY: i < chunk.len() == wrs.len(): both pointers stay inside the vector.
                unsafe { (*base.add(i - 1)).next = base.add(i) };
            }
            let mut bad = std::ptr::null_mut();
            // SAFETY: post_srq_recv is static inline in verbs.h, so it is reached through the
            // context's op table; the SRQ is valid; the list and its SGEs live in our vectors
            // for the call and name registered memory the provider keeps alive.
            let rc = unsafe {
                let ctx = (*self.raw).context;
                let post = (*ctx)
                    .ops
                    .post_srq_recv
                    .ok_or_else(|| TransportError::Unavailable("verbs", "no post_srq_recv op".into()))?;
                post(self.raw, base, &mut bad)
            };
            if rc != 0 {
                return Err(TransportError::io("ibv_post_srq_recv", std::io::Error::from_raw_os_error(rc)));
            }
        }
        Ok(())
    }
}

impl Drop for SharedReceiveQueue {
    fn drop(&mut self) {
        // SAFETY: created by ibv_create_srq and destroyed once, after every QP using it (the
        // provider drops its QPs first).
        unsafe { ffi::ibv_destroy_srq(self.raw) };
    }
}
