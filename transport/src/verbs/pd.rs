//! Protection domain: every MR and QP of the provider lives in one.

use std::sync::Arc;

use ibverbs_sys as ffi;

use super::device::Context;
use crate::error::{Result, TransportError};

pub struct ProtectionDomain {
    pub(crate) raw: *mut ffi::ibv_pd,
    _ctx: Arc<Context>,
}

// SAFETY: verbs objects are thread-safe; the pointer is only passed to verbs calls.
unsafe impl Send for ProtectionDomain {}
// SAFETY: as above.
unsafe impl Sync for ProtectionDomain {}

impl ProtectionDomain {
    pub fn new(ctx: &Arc<Context>) -> Result<Arc<ProtectionDomain>> {
        // SAFETY: the context is open.
        let raw = unsafe { ffi::ibv_alloc_pd(ctx.raw) };
        if raw.is_null() {
            return Err(TransportError::io("ibv_alloc_pd", std::io::Error::last_os_error()));
        }
        Ok(Arc::new(ProtectionDomain { raw, _ctx: ctx.clone() }))
    }
}

impl Drop for ProtectionDomain {
    fn drop(&mut self) {
        // SAFETY: MRs and QPs hold an Arc<ProtectionDomain>, so none is alive any more.
        unsafe { ffi::ibv_dealloc_pd(self.raw) };
    }
}
