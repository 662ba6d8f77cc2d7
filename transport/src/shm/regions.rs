//! Registered regions: each a segment file in `/dev/shm` that peers map, entered in this rank's
//! registration table (key, address, length, access) which peers check before every access.

use std::sync::atomic::Ordering;

use super::control::{self, ControlView, KEY_RESERVED};
use super::segment::OwnedSegment;
use super::ShmProvider;
use crate::api::{Access, RemoteRegion};
use crate::error::{Result, TransportError};
use crate::region::Region;
use crate::sys::shmfile::segment_path;

/// Keeps a registered region's file mapped and its table entry claimed; clears both on drop.
struct RegionBacking {
    segment: OwnedSegment,
    table: ControlView,
    index: usize,
}

/// The file name part of a region's segment: what the key's top half holds (incarnation, table
/// index), which `rekey` leaves alone, so peers find the file from any key the region had.
pub(super) fn region_file(key: u64) -> String {
    format!("r{:08x}", key >> 32)
}

impl Drop for RegionBacking {
    fn drop(&mut self) {
        // The name goes before the index is freed: a region taking the index next reuses it.
        self.segment.unlink();
        if let Some(entry) = self.table.entry(self.index) {
            entry.key.store(0, Ordering::Release);
        }
    }
}

impl ShmProvider {
    /// A fresh segment in `/dev/shm`, entered in this rank's registration table.
    pub(super) fn register_segment(&mut self, len: usize, access: Access) -> Result<Region> {
        if len == 0 {
            return Err(TransportError::Config("cannot register an empty region".into()));
        }
        let index = self.own.claim_entry().ok_or_else(|| {
            TransportError::Config(format!("registration table full ({} regions)", control::TABLE_ENTRIES))
        })?;
        // Random low bits until `auto` puts a network provider's key there (`rekey`).
        let key = loop {
            let k = control::make_key(self.job.incarnation, index, rand::random::<u32>());
            if k != KEY_RESERVED && k as u32 != 0 {
                break k;
            }
        };
        let path = segment_path(&self.job_tag, self.job.rank, self.pid, &region_file(key));
        let segment = match OwnedSegment::create(path, len) {
            Ok(s) => s,
            Err(e) => {
                if let Some(entry) = self.own.entry(index) {
                    entry.key.store(0, Ordering::Release);
                }
                return Err(e);
            }
        };
        let ptr = segment.map.as_ptr() as *mut u8;
        let remote = RemoteRegion { owner: self.job.rank, addr: ptr as u64, len: len as u64, key };
        if let Some(entry) = self.own.entry(index) {
            entry.addr.store(remote.addr, Ordering::Relaxed);
            entry.len.store(remote.len, Ordering::Relaxed);
            entry.access.store(access.0 as u32, Ordering::Relaxed);
            entry.key.store(key, Ordering::Release);
        }
        let backing = RegionBacking { segment, table: self.own.clone(), index };
        // SAFETY: ptr..ptr+len is the segment's mapping, which `backing` keeps alive.
        Ok(unsafe { Region::new(ptr, len, access, remote, 0, Box::new(backing)) })
    }

    /// Gives `region` (allocated here, not yet shown to any peer) the key `low` in its low 32
    /// bits: what the `auto` provider does once a network provider has registered the same
    /// memory under its own key (a verbs rkey). Returns the new key.
    pub(crate) fn rekey(&mut self, region: &Region, low: u32) -> Result<u64> {
        let old = region.remote().key;
        let index = control::key_index(old);
        let key = (old & !0xffff_ffff) | u64::from(low);
        let entry = self.own.entry(index).filter(|e| e.key.load(Ordering::Acquire) == old);
        let Some(entry) = entry.filter(|_| low != 0 && key != KEY_RESERVED) else {
            return Err(TransportError::InvalidKey { op: "rekey", owner: self.job.rank, key: old });
        };
        entry.key.store(key, Ordering::Release);
        Ok(key)
    }
}
