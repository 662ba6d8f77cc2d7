//! Memory regions: page-aligned anonymous memory registered with the least access it needs.

use std::any::Any;
use std::sync::Arc;

use ibverbs_sys as ffi;
use memmap2::MmapMut;

use super::pd::ProtectionDomain;
use crate::api::{Access, Rank, RemoteRegion};
use crate::error::{IoContext, Result, TransportError};
use crate::region::Region;

/// The key layout every provider shares, so one descriptor works whichever provider carries
/// the peer: bits 48..63 the owner's incarnation (its low 16 bits), 32..47 free for another
/// provider's use (shm's table index under `auto`; 0 from verbs alone), 0..31 the rkey.
const KEY_INCARNATION_SHIFT: u32 = 48;

/// A descriptor key for `rkey`, issued by an owner at `incarnation`.
pub(super) fn key(incarnation: u32, rkey: u32) -> u64 {
    (u64::from(incarnation as u16) << KEY_INCARNATION_SHIFT) | u64::from(rkey)
}

/// The rkey a descriptor key carries.
pub(super) fn rkey_of(key: u64) -> u32 {
    key as u32
}

/// Whether `key` was issued by the owner's `incarnation` (compared on its low 16 bits): an
/// initiator refuses, before posting, the descriptors of an incarnation it no longer talks to
/// (rkeys of two processes may collide).
pub(super) fn key_of_incarnation(key: u64, incarnation: u32) -> bool {
    (key >> KEY_INCARNATION_SHIFT) as u16 == incarnation as u16
}

/// A memory registration; deregisters on drop.
struct Mr {
    mr: *mut ffi::ibv_mr,
    _pd: Arc<ProtectionDomain>,
}

// SAFETY: the MR pointer is only used by ibv_dereg_mr in Drop; verbs objects are thread-safe.
unsafe impl Send for Mr {}
// SAFETY: as above.
unsafe impl Sync for Mr {}

impl Drop for Mr {
    fn drop(&mut self) {
        // SAFETY: registered by `Mr::new` and deregistered exactly once.
        unsafe { ffi::ibv_dereg_mr(self.mr) };
    }
}

impl Mr {
    /// Registers `ptr..ptr+len` in `pd`; returns the registration, its lkey and its rkey.
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay mapped while the returned registration lives.
    unsafe fn new(
        pd: &Arc<ProtectionDomain>,
        ptr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<(Mr, u32, u32)> {
        // SAFETY: the caller keeps the memory mapped for the registration's life.
        let mr =
            unsafe { ffi::ibv_reg_mr(pd.raw, ptr as *mut libc::c_void, len, access_flags(access) as i32) };
        if mr.is_null() {
            return Err(TransportError::io(
                format!("ibv_reg_mr({len} bytes)"),
                std::io::Error::last_os_error(),
            ));
        }
        // SAFETY: ibv_reg_mr returned a valid MR.
        let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        Ok((Mr { mr, _pd: pd.clone() }, lkey, rkey))
    }
}

/// Keeps the memory and its registration; deregisters before unmapping (fields drop in order).
struct MrBacking {
    _mr: Mr,
    _memory: MmapMut,
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

/// Allocates `len` bytes and registers them in `pd`, under a [`key`] of the owner's
/// incarnation.
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
    // SAFETY: the memory is mapped and outlives the MR (both live in MrBacking, MR first).
    let (mr, lkey, rkey) = unsafe { Mr::new(pd, ptr, len, access)? };
    let remote = RemoteRegion { owner, addr: ptr as u64, len: len as u64, key: key(incarnation, rkey) };
    let backing = MrBacking { _mr: mr, _memory: memory };
    // SAFETY: ptr..ptr+len stays mapped while the backing lives inside the Region.
    Ok(unsafe { Region::new(ptr, len, access, remote, lkey, Box::new(backing)) })
}

/// Registers `len` bytes at `ptr`, which the caller owns, for `access`, as `rank` at
/// `incarnation` (`Provider::register_memory`).
///
/// # Safety
/// The memory stays valid, and is touched only as `access` allows, while the region lives.
pub unsafe fn register_caller_memory(
    pd: &Arc<ProtectionDomain>,
    (rank, incarnation): (Rank, u32),
    ptr: *mut u8,
    len: usize,
    access: Access,
) -> Result<Region> {
    // SAFETY: the caller's promise passes on.
    let borrowed = unsafe { Region::borrowed(ptr, len, access, rank) };
    register_borrowed(pd, incarnation, &borrowed)
}

/// Registers the memory of `region`, which its caller owns (no provider registered it): the
/// region again, under a [`key`] of `incarnation`.
fn register_borrowed(pd: &Arc<ProtectionDomain>, incarnation: u32, region: &Region) -> Result<Region> {
    let (backing, lkey, rkey) = register_existing(pd, region)?;
    let remote = RemoteRegion { key: key(incarnation, rkey), ..region.remote() };
    // SAFETY: the clone of `region` inside `backing` keeps the memory valid.
    Ok(unsafe { Region::new(region.as_ptr(), region.len(), region.access(), remote, lkey, backing) })
}

/// Registers the memory of `region`, which another provider allocated, with `region`'s
/// access: the registration (it keeps `region` alive and deregisters on drop), its lkey and
/// its rkey.
pub fn register_existing(
    pd: &Arc<ProtectionDomain>,
    region: &Region,
) -> Result<(Box<dyn Any + Send + Sync>, u32, u32)> {
    if region.is_empty() {
        return Err(TransportError::Config("cannot register an empty region".into()));
    }
    // SAFETY: the clone of `region` kept next to the MR (dropped after it) keeps the memory
    // mapped.
    let (mr, lkey, rkey) = unsafe { Mr::new(pd, region.as_ptr(), region.len(), region.access())? };
    Ok((Box::new((mr, region.clone())), lkey, rkey))
}
