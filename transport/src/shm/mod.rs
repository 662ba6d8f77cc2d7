//! The shared-memory provider: ranks are separate processes on one host.
//!
//! - Registered regions are files in /dev/shm; a peer maps one when it first names it, and
//!   validates key, bounds and access against the owner's registration table on every
//!   operation, before any byte moves (the NIC's job in verbs).
//! - Each rank owns a control segment with one receive FIFO that every source publishes into
//!   (multi-producer, single-consumer, fixed size: receive memory does not grow with the job);
//!   tagged messages, rendezvous control and put-with-immediate notifications travel there.
//! - Sleepers wait on a futex doorbell; producers ring it only when someone sleeps.
//! - Peer death is seen through pidfds and reported on that endpoint within the peer timeout.
//! - Recovery: a respawned rank opens with [`ShmProvider::rejoin`] (its own fresh segment,
//!   survivors' addresses from the bootstrap's lookup); everyone else calls `reconnect` with
//!   its new incarnation and address. Messages are stamped with the producer's incarnation, so
//!   nothing of the dead incarnation is ever read again (see `control`).

mod address;
pub mod cma;
mod control;
mod fifo;
mod futex;
mod host;
mod provider;
mod regions;
mod remote;
mod segment;
mod send;
mod share;
mod traffic;

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use memmap2::MmapRaw;

use crate::advert::{Direct, RndvStats};
use crate::api::*;
use crate::bootstrap::{Bootstrap, JobInfo};
use crate::completion::{CompletionQueues, Owner};
use crate::config::{TransportConfig, WaitMode};
use crate::error::{ErrorQueue, Result, TransportError};
use crate::region::{Region, RegionPool};
use crate::subcore::SubCore;
use crate::sys::clock::CoarseInstant;
use crate::sys::liveness::{self, ProcessWatch};
use crate::sys::shmfile;
use crate::tagged::{self, Fetch, TaggedHome, TaggedState};
use crate::tagmatch::PostedRecv;
use address::{decode_peer_info, encode_address};
use control::{kind, ControlView, Layout, SlotHeader, KEY_RESERVED};
use fifo::Slot;
use segment::OwnedSegment;

pub use host::HOST_SLOTS;

/// FIFO slots drained per progress call, so a progress call stays short.
const DRAIN_BATCH: u64 = 64;
/// Bytes of staging regions kept for reuse by slice sends above the rendezvous threshold.
const STAGING_POOL_BYTES: usize = 64 << 20;

/// A cheap hasher for (rank, region slot) pairs: a multiply spreads the slot numbers' few low
/// bits over the whole hash.
#[derive(Default)]
struct KeyHasher(u64);
impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.0 = self.0.rotate_left(32) ^ v as u64;
    }
    fn write_u64(&mut self, v: u64) {
        self.0 ^= v.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A peer's region mapped into this process, with the key it had when mapped.
struct RemoteMap {
    map: MmapRaw,
    writable: bool,
    key: u64,
}

struct Peer {
    pid: u32,
    /// The incarnation `view` belongs to (or, while `mapped` is false, the last one heard of).
    incarnation: u32,
    /// `view` is this incarnation's segment; false for a placeholder (a rank that had not
    /// rejoined yet when this one started), which is always Dead.
    mapped: bool,
    view: ControlView,
    watch: Option<ProcessWatch>,
    state: PeerState,
    /// The peer's accept word carried our incarnation once: we may write into its FIFO.
    tx_accepted: bool,
    /// The peer may sleep on its doorbell (read once from its header at open).
    may_sleep: bool,
    /// Messages that found the peer's FIFO full, in order, with the send they complete.
    backlog: VecDeque<Queued>,
}

/// A message waiting for FIFO space; `done` is the user send it completes once published.
struct Queued {
    header: SlotHeader,
    payload: Vec<u8>,
    done: Option<Completion>,
}

/// The shared-memory [`Provider`] of one rank (see the module doc); open it with
/// [`ShmProvider::open`], or [`ShmProvider::rejoin`] after a respawn.
pub struct ShmProvider {
    config: TransportConfig,
    job: JobInfo,
    job_tag: String,
    pid: u32,
    layout: Layout,
    own: ControlView,
    peers: Vec<Peer>,
    /// Completions, routed to their owners' queues; numbers operations too.
    cq: CompletionQueues,
    tagged: TaggedHome,
    /// Peers' regions mapped here, one per (owner, registration slot: the key's top half). A
    /// region that takes a freed slot replaces the mapping of the slot's last region, whose
    /// file is gone: kept, every send lent through a reused slot would add a mapping of dead
    /// memory until mmap fails (vm.max_map_count).
    maps: HashMap<(Rank, u64), RemoteMap, BuildHasherDefault<KeyHasher>>,
    /// The last region mapped through `maps`: (owner, key, base address).
    last_map: Option<(Rank, u64, *mut u8)>,
    progress_calls: u32,
    /// Messages in all peers' backlogs: progress skips the per-peer scan while it is 0.
    backlogged: usize,
    /// The last liveness check (the coarse clock: `liveness_due` is asked every progress).
    last_liveness: CoarseInstant,
    /// Malformed slots seen during progress, reported one per `progress` call.
    malformed: ErrorQueue,
    /// Staging regions for large slice sends, reused once their FIN came back.
    staging: RegionPool,
    /// Our lent sends announced with a slot of our segment, by slot (`share`).
    lent_out: Vec<Option<share::LentOut>>,
    /// How many of `lent_out` are Some (progress checks this, not the 64 entries).
    lent_in_use: usize,
    /// How our claims in peers' FIFOs name us.
    me: fifo::Owner,
    /// The next position of our FIFO to read.
    rx_tail: u64,
    /// Peers found dead whose last messages are being drained: their claims are not waited on.
    dying: Vec<Rank>,
    /// The slot of a host space this endpoint holds (opened by address, see `host`).
    slot: Option<host::SlotClaim>,
}

// SAFETY: the raw pointers inside (mappings) refer to process-shared memory that lives as
// long as the provider; the provider is used from one thread at a time (&mut self).
unsafe impl Send for ShmProvider {}

/// A peer's segment file gone with its process: the sweep of a restarted rank (or the
/// launcher's) removed it, so that incarnation of `rank` is dead (a newer one may be on its
/// way). Any other error stays as it is.
fn swept_means_dead(e: TransportError, rank: Rank, pid: u32) -> TransportError {
    match e {
        TransportError::Io { source, .. }
            if source.kind() == std::io::ErrorKind::NotFound && !liveness::pid_exists(pid) =>
        {
            TransportError::PeerDead(rank)
        }
        other => other,
    }
}

/// Maps `rank`'s control segment named by `address` and checks it is that incarnation's.
fn map_peer_segment(
    job_tag: &str,
    layout: Layout,
    rank: Rank,
    incarnation: u32,
    address: &[u8],
) -> Result<(u32, ControlView)> {
    let (pid, peer_layout, claimed) = decode_peer_info(address, rank)?;
    if peer_layout != layout {
        return Err(TransportError::Config(format!(
            "rank {rank} uses FIFO geometry {peer_layout:?}, this rank {layout:?}: \
             REVERB_SHM_FIFO_SLOTS and REVERB_RNDV_THRESH must match across the job"
        )));
    }
    if claimed != incarnation {
        return Err(TransportError::Malformed {
            what: "shm address",
            detail: format!("rank {rank}: address of incarnation {claimed}, expected {incarnation}"),
        });
    }
    let path = shmfile::segment_path(job_tag, rank, pid, "ctl");
    let map =
        segment::map_peer(&path, layout.total_len(), true).map_err(|e| swept_means_dead(e, rank, pid))?;
    let base = map.as_mut_ptr();
    // SAFETY: map_peer checked the file holds total_len bytes; the Arc keeps it mapped.
    let view = unsafe { ControlView::new(base, layout, Arc::new(map)) };
    view.validate_header(rank, pid, incarnation)?;
    Ok((pid, view))
}

fn check_incarnation(incarnation: u32) -> Result<()> {
    if incarnation > control::MAX_INCARNATION {
        return Err(TransportError::Config(format!(
            "incarnation {incarnation} exceeds the shm provider's limit {}",
            control::MAX_INCARNATION
        )));
    }
    Ok(())
}

impl ShmProvider {
    /// Creates this rank's control segment, exchanges addresses through `boot` and maps every
    /// peer's segment. Publishes the address too, for ranks that rejoin later.
    pub fn open(config: TransportConfig, boot: &mut dyn Bootstrap) -> Result<ShmProvider> {
        Self::open_sub(config, boot, SubCore::default())
    }

    /// [`ShmProvider::open`] sharing `core` with other sub-providers. Ranks whose address
    /// `boot` gives as empty are reached another way: they stay `Dead` here.
    pub(crate) fn open_sub(
        config: TransportConfig,
        boot: &mut dyn Bootstrap,
        core: SubCore,
    ) -> Result<ShmProvider> {
        let (mut provider, address) = ShmProvider::create(config, boot.job().clone(), core)?;
        let all = boot.allgather(&address)?;
        let job = provider.job.clone();
        if all.len() != job.size as usize {
            return Err(TransportError::Bootstrap(format!(
                "allgather returned {} entries for {} ranks",
                all.len(),
                job.size
            )));
        }
        for (rank, bytes) in all.iter().enumerate() {
            let rank = rank as Rank;
            if rank == job.rank || bytes.is_empty() {
                continue;
            }
            let (_, _, incarnation) = decode_peer_info(bytes, rank)?;
            provider.attach(rank, incarnation, bytes)?;
        }
        boot.publish(&address)?;
        // Everyone has mapped everyone: segments may now be unlinked at exit safely.
        boot.barrier()?;
        for peer in &mut provider.peers {
            peer.may_sleep = peer.view.may_sleep().load(Ordering::Acquire) != 0;
        }
        Ok(provider)
    }

    /// Opens a respawned rank (incarnation > 0) without a collective: maps the segments of
    /// the ranks that have an address at the rendezvous now (`Bootstrap::lookup`) and
    /// publishes its own. Ranks without an address yet (a node-mate still starting) stay
    /// `Dead` until `reconnect` is called with their `Rejoin`.
    pub fn rejoin(config: TransportConfig, boot: &mut dyn Bootstrap) -> Result<ShmProvider> {
        Self::rejoin_sub(config, boot, SubCore::default())
    }

    /// [`ShmProvider::rejoin`] sharing `core` with other sub-providers.
    pub(crate) fn rejoin_sub(
        config: TransportConfig,
        boot: &mut dyn Bootstrap,
        core: SubCore,
    ) -> Result<ShmProvider> {
        let (mut provider, address) = ShmProvider::create(config, boot.job().clone(), core)?;
        let me = provider.job.rank;
        for entry in boot.lookup()? {
            if entry.rank == me || entry.rank >= provider.job.size {
                continue;
            }
            if let Some(peer) = provider.peers.get_mut(entry.rank as usize) {
                peer.incarnation = entry.incarnation;
            }
            if let Some(bytes) = entry.address {
                provider.attach(entry.rank, entry.incarnation, &bytes)?;
            }
        }
        boot.publish(&address)?;
        Ok(provider)
    }

    /// This rank's segment, with every peer a Dead placeholder accepted by nobody; and
    /// the address to publish.
    fn create(config: TransportConfig, job: JobInfo, core: SubCore) -> Result<(ShmProvider, Vec<u8>)> {
        config.validate()?;
        if job.rank >= job.size {
            return Err(TransportError::InvalidRank(job.rank, job.size));
        }
        check_incarnation(job.incarnation)?;
        if job.size > fifo::MAX_SOURCES {
            return Err(TransportError::Config(format!(
                "{} ranks exceed the shm provider's limit {}",
                job.size,
                fifo::MAX_SOURCES
            )));
        }
        shmfile::sweep_stale();
        let pid = std::process::id();
        let job_tag = shmfile::sanitize_job_id(&job.job_id);
        let layout = Layout::new(job.size, config.shm_fifo_slots, config.rndv_thresh);
        let own_seg =
            OwnedSegment::create(shmfile::segment_path(&job_tag, job.rank, pid, "ctl"), layout.total_len())?;
        let base = own_seg.map.as_ptr() as *mut u8;
        // SAFETY: the segment is total_len bytes, page aligned, and the Arc keeps it mapped.
        let own = unsafe { ControlView::new(base, layout, Arc::new(own_seg)) };
        own.init_header(job.rank, pid, job.incarnation);
        own.may_sleep().store(u32::from(config.wait_mode != WaitMode::Poll), Ordering::Release);
        if config.shm_cma {
            cma::permit_peers();
        }
        // The fresh segment is zero-filled: every accept word says "nobody", every FIFO slot
        // is free for lap 0.
        let peers = (0..job.size)
            .map(|rank| Peer {
                pid: if rank == job.rank { pid } else { 0 },
                incarnation: if rank == job.rank { job.incarnation } else { 0 },
                mapped: rank == job.rank,
                // A placeholder until `attach`: never touched while the peer is Dead.
                view: own.clone(),
                watch: None,
                state: if rank == job.rank { PeerState::Alive } else { PeerState::Dead },
                tx_accepted: false,
                may_sleep: true,
                backlog: VecDeque::new(),
            })
            .collect();
        // Self-sends are always accepted.
        own.accept(job.rank, Some(job.incarnation));
        let me = fifo::Owner::new(job.rank, job.incarnation);
        let address = encode_address(pid, layout, job.incarnation);
        let provider = ShmProvider {
            config,
            job,
            job_tag,
            pid,
            layout,
            own,
            peers,
            cq: core.queues(),
            tagged: core.tagged,
            maps: HashMap::default(),
            last_map: None,
            progress_calls: 0,
            backlogged: 0,
            last_liveness: CoarseInstant::now(),
            malformed: ErrorQueue::default(),
            staging: RegionPool::new(STAGING_POOL_BYTES),
            lent_out: (0..control::LENT_SLOTS).map(|_| None).collect(),
            lent_in_use: 0,
            me,
            rx_tail: 0,
            dying: Vec::new(),
            slot: None,
        };
        Ok((provider, address))
    }

    /// Maps `rank`'s segment at `incarnation` and accepts its messages. The peer must be Dead
    /// (never attached, or its previous incarnation failed).
    fn attach(&mut self, rank: Rank, incarnation: u32, address: &[u8]) -> Result<()> {
        let (pid, view) = map_peer_segment(&self.job_tag, self.layout, rank, incarnation, address)?;
        self.attach_view(rank, incarnation, pid, view)
    }

    fn attach_view(&mut self, rank: Rank, incarnation: u32, pid: u32, view: ControlView) -> Result<()> {
        let Some(peer) = self.peers.get_mut(rank as usize) else {
            return Err(TransportError::InvalidRank(rank, self.job.size));
        };
        debug_assert_eq!(peer.state, PeerState::Dead);
        debug_assert!(peer.backlog.is_empty(), "mark_dead fails a dead peer's backlog");
        let reads_lent = self.config.shm_cma && cma::probe(pid, view.owner_address(), &view.probe_bytes());
        *peer = Peer {
            pid,
            incarnation,
            mapped: true,
            may_sleep: view.may_sleep().load(Ordering::Acquire) != 0,
            view,
            watch: Some(ProcessWatch::new(pid)),
            state: PeerState::Alive,
            tx_accepted: false,
            backlog: VecDeque::new(),
        };
        // The peer lends us its messages only once we proved we can read them.
        self.own.set_reads_lent(rank, reads_lent.then_some(incarnation));
        // Last: from here the new incarnation may write into our FIFO.
        self.own.accept(rank, Some(incarnation));
        Ok(())
    }

    /// This rank's address, as published to the rendezvous.
    pub fn address(&self) -> Vec<u8> {
        encode_address(self.pid, self.layout, self.job.incarnation)
    }

    fn live_peer(&self, rank: Rank) -> Result<&Peer> {
        // `let else`, not `ok_or`: building the unused error costs a drop call per message.
        let Some(peer) = self.peers.get(rank as usize) else {
            return Err(TransportError::InvalidRank(rank, self.job.size));
        };
        if peer.state == PeerState::Dead {
            return Err(TransportError::PeerDead(rank));
        }
        Ok(peer)
    }
}

#[cfg(test)]
mod tests;
