//! RMA targets: a peer's region validated against its owner's registration table, mapped once.

use super::*;

impl ShmProvider {
    /// Validates an RMA against the owner's registration table and returns the mapped address
    /// of `remote_offset`. Nothing has been touched when this fails.
    pub(super) fn remote_ptr(&mut self, op: &'static str, rma: &Rma<'_>, need: Access) -> Result<*mut u8> {
        rma.local.check_bounds(op, rma.local_offset, rma.len)?;
        self.remote_range(op, rma.remote, rma.remote_offset, rma.len, need)
    }

    /// Validates `len` bytes at `remote_offset` of a peer's region against the owner's
    /// registration table and returns their mapped address.
    pub(super) fn remote_range(
        &mut self,
        op: &'static str,
        remote: &RemoteRegion,
        remote_offset: u64,
        len: usize,
        need: Access,
    ) -> Result<*mut u8> {
        let owner = remote.owner;
        let invalid = TransportError::InvalidKey { op, owner, key: remote.key };
        let peer = self.live_peer(owner)?;
        let index = control::key_index(remote.key);
        let entry = match peer.view.entry(index) {
            Some(e) if remote.key != 0 && remote.key != KEY_RESERVED => e,
            _ => return Err(invalid),
        };
        let slot = (owner, remote.key >> 32);
        if entry.key.load(Ordering::Acquire) != remote.key {
            if self.maps.get(&slot).is_some_and(|m| m.key == remote.key) {
                self.maps.remove(&slot);
            }
            self.last_map = None;
            return Err(invalid);
        }
        let (addr, region_len) = (entry.addr.load(Ordering::Relaxed), entry.len.load(Ordering::Relaxed));
        let access = Access(entry.access.load(Ordering::Relaxed) as u8);
        if addr != remote.addr {
            return Err(invalid);
        }
        // Bounds come from the owner's table, never from the (forgeable) descriptor.
        let limit = region_len.min(remote.len);
        match remote_offset.checked_add(len as u64) {
            Some(end) if end <= limit => {}
            _ => {
                return Err(TransportError::OutOfBounds {
                    op,
                    offset: remote_offset,
                    len: len as u64,
                    region_len: limit,
                })
            }
        }
        if !access.allows(need) {
            let needed = if need == Access::REMOTE_WRITE { "remote write" } else { "remote read" };
            return Err(TransportError::AccessDenied { op, needed });
        }
        let writable = access.allows(Access::REMOTE_WRITE);
        // Most loops name the same region again and again: skip the map lookup for it.
        let base = match self.last_map {
            Some((o, k, base)) if o == owner && k == remote.key => base,
            _ => {
                let map = match self.maps.get(&slot) {
                    Some(m) if m.key == remote.key && (m.writable || !writable) => m,
                    _ => {
                        let pid = peer.pid;
                        let path = shmfile::segment_path(
                            &self.job_tag,
                            owner,
                            pid,
                            &regions::region_file(remote.key),
                        );
                        let map = segment::map_peer(&path, region_len as usize, writable)
                            .map_err(|e| swept_means_dead(e, owner, pid))?;
                        // Replaces (unmaps) the slot's previous region, if any.
                        self.maps.insert(slot, RemoteMap { map, writable, key: remote.key });
                        &self.maps[&slot]
                    }
                };
                let base = map.map.as_mut_ptr();
                self.last_map = Some((owner, remote.key, base));
                base
            }
        };
        // SAFETY: remote_offset + len <= the mapped length (checked above).
        Ok(unsafe { base.add(remote_offset as usize) })
    }

    pub(super) fn local_ptr(rma: &Rma<'_>) -> *mut u8 {
        // SAFETY: remote_ptr checked local_offset + len against the local region.
        unsafe { rma.local.as_ptr().add(rma.local_offset) }
    }
}
