//! Endpoints that find each other by address instead of through a job's bootstrap (the
//! libfabric way: `fi_getname` on one side, `fi_av_insert` on the other).
//!
//! Every endpoint of a host *space* (a name every process that wants to talk agrees on) claims
//! one of [`HOST_SLOTS`] slots with an exclusive file `/dev/shm/reverb-slot.<space>.<slot>` that
//! holds its address; the slot is its rank in the space. It accepts incarnation 0 of every slot
//! from the start, so a peer that learnt its address may send at once. A message from a slot
//! this endpoint never connected to is admitted by reading that slot's file and mapping the
//! sender's segment ([`ShmProvider::admit`]), so a receiver needs no address of its senders.

use std::io::Write;
use std::path::PathBuf;

use super::*;

/// Endpoints one host space holds; every endpoint of a space has this many peer slots.
pub const HOST_SLOTS: u32 = 256;
/// The slot number before the shm address in a host address.
const HOST_ADDRESS_LEN: usize = 4 + 20;
const WHAT: &str = "shm host address";

/// The slot file this endpoint claimed; removed when the endpoint drops.
pub(super) struct SlotClaim {
    path: PathBuf,
}

impl Drop for SlotClaim {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn slot_path(job_tag: &str, slot: u32) -> PathBuf {
    shmfile::shm_dir().join(format!("reverb-slot.{job_tag}.{slot}"))
}

/// The pid a slot file's address names (its creator), for the stale-file check.
fn slot_creator(path: &std::path::Path) -> Option<u32> {
    let bytes = std::fs::read(path).ok()?;
    decode_host_address(&bytes).ok().map(|(_, shm)| u32::from_le_bytes([shm[0], shm[1], shm[2], shm[3]]))
}

/// Splits a host address into (slot, shm address), from untrusted bytes.
fn decode_host_address(bytes: &[u8]) -> Result<(Rank, &[u8])> {
    if bytes.len() != HOST_ADDRESS_LEN {
        return Err(TransportError::Malformed {
            what: WHAT,
            detail: format!("{} bytes, expected {HOST_ADDRESS_LEN}", bytes.len()),
        });
    }
    let (slot, shm) = bytes.split_at(4);
    let slot = u32::from_le_bytes([slot[0], slot[1], slot[2], slot[3]]);
    if slot >= HOST_SLOTS {
        return Err(TransportError::Malformed { what: WHAT, detail: format!("slot {slot} of {HOST_SLOTS}") });
    }
    Ok((slot, shm))
}

impl ShmProvider {
    /// Opens an endpoint of host space `space` that peers reach by its
    /// [`Provider::peer_address`] ([`Provider::connect_peer`]); see the module doc.
    /// `Config` when all [`HOST_SLOTS`] slots are taken by live endpoints.
    pub fn open_by_address(config: TransportConfig, space: &str) -> Result<ShmProvider> {
        let job_tag = shmfile::sanitize_job_id(space);
        shmfile::sweep_stale();
        let (slot, mut file, path) = claim_slot(&job_tag)?;
        let claim = SlotClaim { path };
        let job = JobInfo {
            rank: slot,
            size: HOST_SLOTS,
            node: 0,
            local_rank: slot,
            ranks_per_node: HOST_SLOTS,
            job_id: space.to_string(),
            incarnation: 0,
        };
        let (mut provider, address) = ShmProvider::create(config, job, SubCore::default())?;
        let mut host_address = slot.to_le_bytes().to_vec();
        host_address.extend_from_slice(&address);
        file.write_all(&host_address).map_err(|e| TransportError::io("shm: write the slot file", e))?;
        for peer in (0..HOST_SLOTS).filter(|&p| p != slot) {
            provider.own.accept(peer, Some(0));
        }
        provider.slot = Some(claim);
        Ok(provider)
    }

    /// This endpoint's host address (slot, then shm address); `Unsupported` for a job's rank.
    pub(super) fn host_address(&self) -> Result<Vec<u8>> {
        if self.slot.is_none() {
            return Err(TransportError::Unsupported("peer addresses outside a host space".into()));
        }
        let mut out = self.job.rank.to_le_bytes().to_vec();
        out.extend_from_slice(&self.address());
        Ok(out)
    }

    /// Maps the endpoint `address` names, unless it is mapped already; returns its slot.
    pub(super) fn connect_host_peer(&mut self, address: &[u8]) -> Result<Rank> {
        if self.slot.is_none() {
            return Err(TransportError::Unsupported("peer addresses outside a host space".into()));
        }
        let (slot, shm) = decode_host_address(address)?;
        let (pid, _, _) = decode_peer_info(shm, slot)?;
        let peer = &self.peers[slot as usize];
        if slot == self.job.rank {
            return if pid == self.pid { Ok(slot) } else { Err(TransportError::PeerDead(slot)) };
        }
        if peer.mapped && !closed(peer) {
            if peer.pid == pid {
                return Ok(slot);
            }
            if liveness::pid_exists(peer.pid) {
                // The slot's holder is alive: `address` is an old one of a slot since reused.
                return Err(TransportError::PeerDead(slot));
            }
        }
        self.attach_host(slot, shm).map_err(|e| swept_means_dead(e, slot, pid))?;
        Ok(slot)
    }

    /// Maps the endpoint holding `slot` now, first dropping the one that held it before (gone,
    /// and its slot taken over by a new endpoint).
    fn attach_host(&mut self, slot: Rank, shm: &[u8]) -> Result<()> {
        if self.peers[slot as usize].mapped {
            if self.peers[slot as usize].state == PeerState::Alive {
                self.mark_dead(slot);
            }
            // What the old endpoint left unclaimed, and the rendezvous state kept with it, must
            // not look like the new one's (as after a reconnect).
            self.tagged.get().purge_unexpected_from(slot);
            self.peers[slot as usize].mapped = false;
        }
        self.attach(slot, 0, shm)
    }

    /// Whether a message stamped `stamped` from `source` comes from the endpoint mapped for it:
    /// in a host space, only while that endpoint is alive and has not closed (its slot may
    /// have a new holder).
    #[inline(always)]
    pub(super) fn sent_by_mapped(&self, source: Rank, stamped: u32) -> bool {
        self.peers.get(source as usize).is_some_and(|p| {
            p.mapped
                && p.incarnation == stamped
                && (self.slot.is_none() || (p.state == PeerState::Alive && !closed(p)))
        })
    }

    /// A message (or a claim) from `source` is in the FIFO: in a host space, maps a sender never
    /// connected to, or the new holder of a slot whose previous endpoint is dead, from its slot
    /// file. True when `source` is mapped now. Cold: a first message, or a dead peer's slot.
    #[cold]
    pub(super) fn admit(&mut self, source: Rank) -> bool {
        let Some(peer) = self.peers.get(source as usize) else { return false };
        let current = peer.mapped && peer.state == PeerState::Alive;
        if current || self.slot.is_none() {
            return peer.mapped;
        }
        let path = slot_path(&self.job_tag, source);
        let Ok(bytes) = std::fs::read(&path) else { return peer.mapped };
        let Ok((slot, shm)) = decode_host_address(&bytes) else { return peer.mapped };
        let Ok((pid, _, _)) = decode_peer_info(shm, slot) else { return peer.mapped };
        if slot != source || (peer.mapped && peer.pid == pid && !closed(peer)) {
            return peer.mapped;
        }
        self.attach_host(slot, shm).is_ok()
    }
}

/// Whether the endpoint `peer` maps closed its segment (it dropped; its slot may be reused).
fn closed(peer: &Peer) -> bool {
    peer.view.closed().load(Ordering::Acquire) != 0
}

/// Claims the first free slot of the space: (slot, its file, its path).
fn claim_slot(job_tag: &str) -> Result<(u32, std::fs::File, PathBuf)> {
    for slot in 0..HOST_SLOTS {
        let path = slot_path(job_tag, slot);
        match shmfile::create_private(&path, slot_creator) {
            Ok(file) => return Ok((slot, file, path)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(TransportError::io(format!("shm: claim {}", path.display()), e)),
        }
    }
    Err(TransportError::Config(format!("host space {job_tag:?}: all {HOST_SLOTS} endpoint slots are taken")))
}
