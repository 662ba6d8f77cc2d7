//! Memory registration: `fi_mr_reg`, `fi_mr_regv`, `fi_mr_regattr` (one iov entry) and
//! `fi_close` of a region. A domain keeps its regions in an [`MrTable`] by key: the key is the
//! provider's (`FI_MR_PROV_KEY`), 64 random bits, and remote addresses are virtual ones
//! (`FI_MR_VIRT_ADDR`). A target looks a peer's request up here ([`MrTable::check`]).

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::rc::Rc;

use crate::abi::*;
use crate::fabric::ops_ptr;
use crate::obj::{self, Table, NO_OP};

/// The registration modes an RMA consumer must accept.
pub const MR_MODE: c_int = FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
/// Regions a domain offers (`mr_cnt`): nominal, a region costs a map entry.
pub const MR_CNT: usize = 1 << 16;

/// One registered region: `len` bytes at `base` in this process, and the remote access allowed.
#[derive(Clone, Copy, Debug)]
pub struct Region {
    pub base: usize,
    pub len: usize,
    pub access: u64,
}

/// A domain's registered regions, by key.
#[derive(Default)]
pub struct MrTable {
    regions: HashMap<u64, Region>,
}

pub type MrTableRef = Rc<RefCell<MrTable>>;

/// Why a target refuses a request: the errno the origin's error completion carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No region has the key, or the range lies outside it (FI_EINVAL).
    NoSuchRange,
    /// The region does not allow this kind of remote access (FI_EACCES).
    Denied,
}

impl Refusal {
    pub fn errno(self) -> c_int {
        match self {
            Refusal::NoSuchRange => FI_EINVAL,
            Refusal::Denied => FI_EACCES,
        }
    }
}

impl MrTable {
    /// Registers `region` under a fresh random key.
    fn insert(&mut self, region: Region) -> u64 {
        loop {
            let key = random_key();
            if let std::collections::hash_map::Entry::Vacant(v) = self.regions.entry(key) {
                v.insert(region);
                return key;
            }
        }
    }

    fn remove(&mut self, key: u64) {
        self.regions.remove(&key);
    }

    /// The local address of `len` bytes at remote address `addr` of region `key`, if the region
    /// holds them and allows `access` (FI_REMOTE_READ or FI_REMOTE_WRITE).
    pub fn check(&self, key: u64, addr: u64, len: usize, access: u64) -> Result<usize, Refusal> {
        let r = self.regions.get(&key).ok_or(Refusal::NoSuchRange)?;
        let start = usize::try_from(addr).map_err(|_| Refusal::NoSuchRange)?;
        let end = start.checked_add(len).ok_or(Refusal::NoSuchRange)?;
        if start < r.base || end > r.base.saturating_add(r.len) {
            return Err(Refusal::NoSuchRange);
        }
        if r.access & access != access {
            return Err(Refusal::Denied);
        }
        Ok(start)
    }
}

/// 64 bits from the kernel's generator; the clock and the pid if it fails (keys need to be
/// hard to guess, not secret against the local user).
fn random_key() -> u64 {
    let mut key = 0u64;
    // SAFETY: getrandom writes at most 8 bytes into the u64.
    let n = unsafe { libc::getrandom((&mut key as *mut u64).cast(), 8, 0) };
    if n != 8 {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        key = (now.as_nanos() as u64) ^ (u64::from(std::process::id()) << 32);
    }
    key
}

/// A region object: its table and key, to take it out at close.
struct Mr {
    table: MrTableRef,
    key: u64,
}

unsafe extern "C" fn close(f: *mut fid) -> c_int {
    // SAFETY: the fid libfabric got from `register`; state checks its ops table.
    if let Some(mr) = unsafe { obj::state::<fid_mr, Mr>(f, ops_ptr(&FI_OPS)) } {
        mr.table.borrow_mut().remove(mr.key);
    }
    // SAFETY: as above.
    obj::close_status(unsafe { obj::free::<fid_mr, Mr>(f, ops_ptr(&FI_OPS)) })
}

static FI_OPS: Table<fi_ops> = Table(fi_ops {
    size: std::mem::size_of::<fi_ops>(),
    close: Some(close),
    bind: Some(obj::no_bind),
    control: Some(obj::no_control),
    ops_open: NO_OP,
    tostr: NO_OP,
    ops_set: NO_OP,
});

pub(crate) static MR_OPS: Table<fi_ops_mr> = Table(fi_ops_mr {
    size: std::mem::size_of::<fi_ops_mr>(),
    reg: Some(reg),
    regv: Some(regv),
    regattr: Some(regattr),
});

/// Registers `len` bytes at `buf` of the domain `domain` (its table) and hands out the object.
///
/// # Safety
/// `domain` is null or a live fid; `out` is null or valid for a write.
unsafe fn register(
    domain: *mut fid,
    buf: *const c_void,
    len: usize,
    access: u64,
    out: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    // SAFETY: the caller's contract.
    let Some(table) = (unsafe { crate::fabric::mr_table_of(domain) }) else { return -FI_EINVAL };
    if out.is_null() || (buf.is_null() && len != 0) {
        return -FI_EINVAL;
    }
    let key = table.borrow_mut().insert(Region { base: buf as usize, len, access });
    let c = fid_mr {
        fid: fid { fclass: FI_CLASS_MR, context, ops: &FI_OPS.0 },
        mem_desc: std::ptr::null_mut(),
        key,
    };
    // SAFETY: `out` checked non-null.
    unsafe { out.write(obj::into_raw(c, Mr { table, key }) as *mut fid_mr) };
    0
}

/// `fi_mr_reg`: the requested key and offset are not used (FI_MR_PROV_KEY, FI_MR_VIRT_ADDR).
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn reg(
    domain: *mut fid,
    buf: *const c_void,
    len: usize,
    access: u64,
    _offset: u64,
    _requested_key: u64,
    _flags: u64,
    out: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    // SAFETY: fi_mr_reg's contract.
    unsafe { register(domain, buf, len, access, out, context) }
}

/// `fi_mr_regv` of one iov entry (`mr_iov_limit` is 1).
#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn regv(
    domain: *mut fid,
    iov: *const iovec,
    count: usize,
    access: u64,
    _offset: u64,
    _requested_key: u64,
    _flags: u64,
    out: *mut *mut fid_mr,
    context: *mut c_void,
) -> c_int {
    if count != 1 {
        return -FI_EINVAL;
    }
    // SAFETY: fi_mr_regv's contract: `iov` holds `count` entries.
    let Some(v) = (unsafe { iov.as_ref() }) else { return -FI_EINVAL };
    // SAFETY: as above.
    unsafe { register(domain, v.iov_base, v.iov_len, access, out, context) }
}

/// `fi_mr_regattr` of one iov entry in host memory.
unsafe extern "C" fn regattr(
    domain: *mut fid,
    attr: *const fi_mr_attr,
    _flags: u64,
    out: *mut *mut fid_mr,
) -> c_int {
    // SAFETY: fi_mr_regattr's contract: `attr` null or valid.
    let Some(a) = (unsafe { attr.as_ref() }) else { return -FI_EINVAL };
    if a.iface != 0 {
        return -FI_ENOSYS;
    }
    // SAFETY: as above; the attributes' iov holds `iov_count` entries.
    unsafe { regv(domain, a.mr_iov, a.iov_count, a.access, a.offset, a.requested_key, 0, out, a.context) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_checks_key_bounds_and_access() {
        let mut t = MrTable::default();
        let key = t.insert(Region { base: 0x1000, len: 0x100, access: FI_REMOTE_WRITE });
        assert_eq!(t.check(key, 0x1000, 0x100, FI_REMOTE_WRITE), Ok(0x1000));
        assert_eq!(t.check(key, 0x10f0, 0x10, FI_REMOTE_WRITE), Ok(0x10f0));
        assert_eq!(t.check(key, 0x10f0, 0x11, FI_REMOTE_WRITE), Err(Refusal::NoSuchRange));
        assert_eq!(t.check(key, 0xfff, 1, FI_REMOTE_WRITE), Err(Refusal::NoSuchRange));
        assert_eq!(t.check(key, u64::MAX, 2, FI_REMOTE_WRITE), Err(Refusal::NoSuchRange));
        assert_eq!(t.check(key ^ 1, 0x1000, 1, FI_REMOTE_WRITE), Err(Refusal::NoSuchRange));
        assert_eq!(t.check(key, 0x1000, 1, FI_REMOTE_READ), Err(Refusal::Denied));
        t.remove(key);
        assert_eq!(t.check(key, 0x1000, 1, FI_REMOTE_WRITE), Err(Refusal::NoSuchRange));
    }
}
