//! The tcp provider's registered memory: heap blocks (the loopback provider's [`Memory`]) in
//! a registration table that the target's progress checks every RMA frame against (key,
//! address, bounds, access) before a byte moves, as the NIC does for verbs. The only `unsafe`
//! of the provider lives here.

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::api::{Access, RemoteRegion};
use crate::error::TransportError;
use crate::loopback::memory::Memory;
use crate::region::Region;
use crate::tcp::wire::{status, Target};

/// Random bits of a key, under the owner's incarnation (its low 16 bits).
const KEY_RANDOM_BITS: u32 = 48;
const KEY_RANDOM: u64 = (1 << KEY_RANDOM_BITS) - 1;

/// The owner incarnation a key was issued by (its low 16 bits): an initiator refuses, at the
/// post, a descriptor of an incarnation it is no longer connected to.
pub(crate) fn incarnation_of(key: u64) -> u16 {
    (key >> KEY_RANDOM_BITS) as u16
}

#[derive(Clone)]
struct Registered {
    memory: Arc<Memory>,
    access: Access,
}

/// The regions this rank registered, by key. Shared with each region's backing, which takes
/// its key out when the last handle drops.
#[derive(Default)]
pub(crate) struct Table {
    regions: Mutex<HashMap<u64, Registered>>,
}

/// Deregisters a region when the last handle on it drops.
struct Registration {
    table: Weak<Table>,
    key: u64,
    _memory: Arc<Memory>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(table) = self.table.upgrade() {
            table.lock().remove(&self.key);
        }
    }
}

/// Why the target refused an RMA frame; travels back as an acknowledgement status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    InvalidKey,
    OutOfBounds { limit: u64 },
    AccessDenied,
}

impl Refusal {
    /// The status code and limit an acknowledgement carries.
    pub(crate) fn code(self) -> (u32, u64) {
        match self {
            Refusal::InvalidKey => (status::INVALID_KEY, 0),
            Refusal::OutOfBounds { limit } => (status::OUT_OF_BOUNDS, limit),
            Refusal::AccessDenied => (status::ACCESS_DENIED, 0),
        }
    }

    /// The initiator's error for a refused `op` on `remote` at `offset`, `len` bytes.
    pub(crate) fn error(
        code: u32,
        limit: u64,
        op: &'static str,
        remote: &RemoteRegion,
        offset: u64,
        len: u64,
    ) -> TransportError {
        match code {
            status::OUT_OF_BOUNDS => TransportError::OutOfBounds { op, offset, len, region_len: limit },
            status::ACCESS_DENIED => TransportError::AccessDenied {
                op,
                needed: if op == "get" || op == "rendezvous read" { "remote read" } else { "remote write" },
            },
            _ => TransportError::InvalidKey { op, owner: remote.owner, key: remote.key },
        }
    }
}

impl Table {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Registered>> {
        // Every critical section is one insert, remove or lookup: a poisoned table is whole.
        self.regions.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers a zeroed block of `len` (> 0) bytes for `owner` at `incarnation` and returns
    /// its region. The key's top bits carry the incarnation ([`incarnation_of`]).
    pub(crate) fn register(
        self: &Arc<Self>,
        owner: u32,
        incarnation: u32,
        len: usize,
        access: Access,
    ) -> Region {
        self.register_memory(owner, incarnation, Memory::zeroed(len), access)
    }

    /// Registers the memory of `region`, which its caller owns (no provider registered it),
    /// under a fresh key of `incarnation`, as [`register`](Self::register) does.
    pub(crate) fn register_borrowed(
        self: &Arc<Self>,
        owner: u32,
        incarnation: u32,
        region: &Region,
    ) -> Region {
        self.register_memory(owner, incarnation, Memory::of_region(region), region.access())
    }

    fn register_memory(
        self: &Arc<Self>,
        owner: u32,
        incarnation: u32,
        memory: Arc<Memory>,
        access: Access,
    ) -> Region {
        let key = loop {
            let key =
                (rand::random::<u64>() & KEY_RANDOM) | (u64::from(incarnation as u16) << KEY_RANDOM_BITS);
            let mut regions = self.lock();
            if key & KEY_RANDOM != 0 && !regions.contains_key(&key) {
                regions.insert(key, Registered { memory: Arc::clone(&memory), access });
                break key;
            }
        };
        let (ptr, len) = (memory.ptr(), memory.len());
        let remote = RemoteRegion { owner, addr: ptr as u64, len: len as u64, key };
        let backing = Registration { table: Arc::downgrade(self), key, _memory: memory };
        // SAFETY: ptr..ptr+len is the memory `backing` keeps alive (a block, or a region).
        unsafe { Region::new(ptr, len, access, remote, 0, Box::new(backing)) }
    }

    /// Registers the memory of `region` (allocated and registered by another provider) under
    /// its own key, which must carry the owner's incarnation as [`register`](Self::register)'s
    /// do; returns what keeps the entry: dropping it deregisters.
    pub(crate) fn register_region(
        self: &Arc<Self>,
        region: &Region,
    ) -> Result<Box<dyn Any + Send + Sync>, TransportError> {
        let key = region.remote().key;
        let memory = Memory::of_region(region);
        let mut regions = self.lock();
        if key & KEY_RANDOM == 0 || regions.contains_key(&key) {
            return Err(TransportError::Config(format!("tcp: key {key:#x} cannot be registered twice")));
        }
        regions.insert(key, Registered { memory: Arc::clone(&memory), access: region.access() });
        Ok(Box::new(Registration { table: Arc::downgrade(self), key, _memory: memory }))
    }

    /// The registered memory `t` names, if its key, address, range and access all check out
    /// (bounds come from the table, never from the peer).
    pub(crate) fn check(&self, t: &Target, need: Access) -> Result<Arc<Memory>, Refusal> {
        let Registered { memory, access } = self.lock().get(&t.key).cloned().ok_or(Refusal::InvalidKey)?;
        if memory.ptr() as u64 != t.addr {
            return Err(Refusal::InvalidKey);
        }
        let limit = memory.len() as u64;
        match t.offset.checked_add(t.len) {
            Some(end) if end <= limit => {}
            _ => return Err(Refusal::OutOfBounds { limit }),
        }
        if !access.allows(need) {
            return Err(Refusal::AccessDenied);
        }
        Ok(memory)
    }
}

/// Copies `bytes` to `at` of `memory`; false (nothing written) when they do not fit.
pub(crate) fn write(memory: &Memory, at: u64, bytes: &[u8]) -> bool {
    let fits = at.checked_add(bytes.len() as u64).is_some_and(|end| end <= memory.len() as u64);
    if fits {
        // SAFETY: at + len <= the block's length (checked above); `bytes` is a separate buffer.
        unsafe { memory.write_from(at as usize, bytes.as_ptr(), bytes.len()) };
    }
    fits
}

/// Appends `len` bytes at `at` of `memory` to `out`; false (nothing appended) when they do
/// not fit.
pub(crate) fn append(memory: &Memory, at: usize, len: usize, out: &mut Vec<u8>) -> bool {
    let fits = at.checked_add(len).is_some_and(|end| end <= memory.len());
    if fits {
        out.reserve(len);
        let old = out.len();
        // SAFETY: at + len <= the block's length (checked above); `out` has `len` bytes of
        // spare capacity (reserved above), all of which the copy fills before `set_len`.
        unsafe {
            memory.read_into(at, out.as_mut_ptr().add(old), len);
            out.set_len(old + len);
        }
    }
    fits
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks_key_address_bounds_and_access_and_forgets_dropped_regions() {
        let table = Arc::new(Table::default());
        let r = table.register(0, 3, 4096, Access::REMOTE_READ);
        assert_eq!(incarnation_of(r.remote().key), 3);
        let remote = r.remote();
        let t = Target { cookie: 1, key: remote.key, addr: remote.addr, offset: 4000, len: 96 };
        assert!(table.check(&t, Access::REMOTE_READ).is_ok());
        assert_eq!(table.check(&t, Access::REMOTE_WRITE).err(), Some(Refusal::AccessDenied));
        assert_eq!(
            table.check(&Target { len: 97, ..t }, Access::REMOTE_READ).err(),
            Some(Refusal::OutOfBounds { limit: 4096 })
        );
        assert_eq!(
            table.check(&Target { offset: u64::MAX, ..t }, Access::REMOTE_READ).err(),
            Some(Refusal::OutOfBounds { limit: 4096 })
        );
        assert_eq!(
            table.check(&Target { addr: t.addr + 8, ..t }, Access::REMOTE_READ).err(),
            Some(Refusal::InvalidKey)
        );
        let memory = table.check(&t, Access::REMOTE_READ).unwrap();
        assert!(write(&memory, 4094, b"ab") && !write(&memory, 4095, b"ab"));
        let mut out = Vec::new();
        assert!(append(&memory, 4094, 2, &mut out) && !append(&memory, usize::MAX, 2, &mut out));
        assert_eq!(out, b"ab");
        drop(r);
        assert_eq!(table.check(&t, Access::REMOTE_READ).err(), Some(Refusal::InvalidKey));
    }
}
