//! Memory regions: page-aligned anonymous memory registered with the least access it needs.

use std::sync::Arc;

use ibverbs_sys as ffi;
use memmap2::MmapMut;

use super::pd::ProtectionDomain;
use crate::api::{Access, Rank, RemoteRegion};
use crate::error::{IoContext, Result, TransportError};
use crate::region::Region;

/// Keeps the memory and its registration; deregisters before unmapping.
struct MrBacking {
    mr: *mut ffi::ibv_mr,
    _pd: Arc<ProtectionDomain>,
    _memory: MmapMut,
}

// SAFETY: the MR pointer is only used by ibv_dereg_mr in Drop; verbs objects are thread-safe.
unsafe impl Send for MrBacking {}
// SAFETY: as above.
unsafe impl Sync for MrBacking {}

impl Drop for MrBacking {
    fn drop(&mut self) {
        // SAFETY: registered by `register` below and deregistered exactly once, before the
        // memory is unmapped (fields drop after this body).
        unsafe { ffi::ibv_dereg_mr(self.mr) };
    }
}

fn access_flags(access: Access) -> u32 {
    // Local write is needed for receives and RDMA read targets; remote rights only on request.
    let mut flags = ffi::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE.0;
    if access.allows(Access::REMOTE_WRITE) {
        flags |= ffi::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE.0;
    }
    if access.allows(Access::REMOTE_READ) {
        flags |= ffi::ibv_access_flags::IBV_ACCESS_REMOTE_READ.0;
    }
    flags
}

/// Allocates `len` bytes and registers them in `pd`. The descriptor's key is the rkey with
/// the owner's incarnation in the high 32 bits, so a peer can refuse a dead incarnation's
/// descriptors before posting (rkeys of two processes may collide).
pub fn register(
    pd: &Arc<ProtectionDomain>,
    owner: Rank,
    incarnation: u32,
    len: usize,
    access: Access,
) -> Result<Region> {
    if len == 0 {
        return Err(TransportError::Config("cannot register an empty region".into()));
    }
    let mut memory = MmapMut::map_anon(len).context(|| format!("allocate {len} bytes"))?;
    let ptr = memory.as_mut_ptr();
    // Children forked later must not share registered pages (verbs fork safety).
    // SAFETY: ptr..ptr+len is our fresh anonymous mapping.
    unsafe { libc::madvise(ptr as *mut libc::c_void, len, libc::MADV_DONTFORK) };
    // SAFETY: the memory is mapped and outlives the MR (both live in MrBacking).
    let mr = unsafe { ffi::ibv_reg_mr(pd.raw, ptr as *mut libc::c_void, len, access_flags(access) as i32) };
    if mr.is_null() {
        return Err(TransportError::io(format!("ibv_reg_mr({len} bytes)"), std::io::Error::last_os_error()));
    }
    // SAFETY: ibv_reg_mr returned a valid MR.
    let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
    let remote = RemoteRegion {
        owner,
        addr: ptr as u64,
        len: len as u64,
        key: (u64::from(incarnation) << 32) | u64::from(rkey),
    };
    let backing = MrBacking { mr, _pd: pd.clone(), _memory: memory };
    // SAFETY: ptr..ptr+len stays mapped while the backing lives inside the Region.
    Ok(unsafe { Region::new(ptr, len, access, remote, lkey, Box::new(backing)) })
}
