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
mod cma;
mod control;
mod fifo;
mod futex;
mod regions;
mod segment;
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
use crate::sys::liveness::{self, ProcessWatch};
use crate::sys::shmfile;
use crate::tagged::{self, Fetch, TaggedHome, TaggedState};
use crate::tagmatch::PostedRecv;
use address::{decode_peer_info, encode_address};
use control::{kind, ControlView, Layout, SlotHeader, KEY_RESERVED};
use fifo::Slot;
use segment::OwnedSegment;

/// FIFO slots drained per progress call, so a progress call stays short.
const DRAIN_BATCH: u64 = 64;
/// Bytes of staging regions kept for reuse by slice sends above the rendezvous threshold.
const STAGING_POOL_BYTES: usize = 64 << 20;

/// Identity hasher: region keys are random already.
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
        self.0 ^= v;
    }
}

/// A peer's region mapped into this process.
struct RemoteMap {
    map: MmapRaw,
    writable: bool,
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
    maps: HashMap<(Rank, u64), RemoteMap, BuildHasherDefault<KeyHasher>>,
    /// The last region mapped through `maps`: (owner, key, base address).
    last_map: Option<(Rank, u64, *mut u8)>,
    progress_calls: u32,
    /// Messages in all peers' backlogs: progress skips the per-peer scan while it is 0.
    backlogged: usize,
    last_liveness: Instant,
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
            last_liveness: Instant::now(),
            malformed: ErrorQueue::default(),
            staging: RegionPool::new(STAGING_POOL_BYTES),
            lent_out: (0..control::LENT_SLOTS).map(|_| None).collect(),
            lent_in_use: 0,
            me,
            rx_tail: 0,
            dying: Vec::new(),
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

    /// Validates an RMA against the owner's registration table and returns the mapped address
    /// of `remote_offset`. Nothing has been touched when this fails.
    fn remote_ptr(&mut self, op: &'static str, rma: &Rma<'_>, need: Access) -> Result<*mut u8> {
        rma.local.check_bounds(op, rma.local_offset, rma.len)?;
        self.remote_range(op, rma.remote, rma.remote_offset, rma.len, need)
    }

    /// Validates `len` bytes at `remote_offset` of a peer's region against the owner's
    /// registration table and returns their mapped address.
    fn remote_range(
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
        if entry.key.load(Ordering::Acquire) != remote.key {
            self.maps.remove(&(owner, remote.key));
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
                let map = match self.maps.get(&(owner, remote.key)) {
                    Some(m) if m.writable || !writable => m,
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
                        self.maps.insert((owner, remote.key), RemoteMap { map, writable });
                        &self.maps[&(owner, remote.key)]
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

    fn local_ptr(rma: &Rma<'_>) -> *mut u8 {
        // SAFETY: remote_ptr checked local_offset + len against the local region.
        unsafe { rma.local.as_ptr().add(rma.local_offset) }
    }

    /// Fault injection: publishes `header` and `payload` to `dest`'s FIFO unvalidated, as a
    /// faulty or hostile peer could. For tests and chaos runs of the receiver's checks.
    #[doc(hidden)]
    pub fn inject_raw_message(&mut self, dest: Rank, header: SlotHeader, payload: &[u8]) -> Result<()> {
        if payload.len() > self.layout.max_payload() {
            return Err(TransportError::Config("injected payload larger than a slot".into()));
        }
        self.push_msg(dest, header, payload, None)
    }

    /// Fault injection: claims a slot of `dest`'s FIFO and half-writes an eager message into
    /// it, but never publishes it, as a sender killed between claim and publish leaves it.
    /// False when the FIFO had no free slot or `dest` does not accept us yet.
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn claim_without_publishing(&mut self, dest: Rank) -> Result<bool> {
        let (rank, me, epoch) = (self.job.rank, self.me, self.job.incarnation);
        let peer =
            self.peers.get_mut(dest as usize).ok_or(TransportError::InvalidRank(dest, self.job.size))?;
        if !Self::accepted(peer, rank, epoch) {
            return Ok(false);
        }
        let fifo = peer.view.fifo();
        let Some(pos) = fifo.claim(me) else { return Ok(false) };
        fifo.write_eager(pos, epoch, u64::MAX, b"never published");
        Ok(true)
    }

    /// An eager tagged send: one FIFO slot; complete once it is published in the peer's FIFO.
    #[inline(always)]
    fn send_eager(&mut self, owner: Owner, dest: Rank, tag: Tag, data: &[u8]) -> Result<OpId> {
        let op = self.cq.next_op(owner);
        let kind = CompletionKind::Send { dest, tag, len: data.len() };
        if self.try_publish_eager(dest, tag, data)? {
            self.cq.push(Completion::ok(op, kind));
        } else {
            self.push_msg(dest, SlotHeader::eager(tag, data.len()), data, Some(Completion::ok(op, kind)))?;
        }
        self.tagged.get().count_send(dest);
        Ok(op)
    }

    /// The common case of an eager send, published in place: the peer is alive and accepts
    /// us, its FIFO has room and nothing of ours waits ahead. False (not sent) otherwise.
    #[inline(always)]
    fn try_publish_eager(&mut self, dest: Rank, tag: Tag, data: &[u8]) -> Result<bool> {
        let size = self.job.size;
        // `let else`, not `ok_or`: building the unused error costs a drop call per message.
        let Some(peer) = self.peers.get_mut(dest as usize) else {
            return Err(TransportError::InvalidRank(dest, size));
        };
        if peer.state == PeerState::Dead {
            return Err(TransportError::PeerDead(dest));
        }
        let (me, epoch) = (self.me, self.job.incarnation);
        if !peer.backlog.is_empty() || !Self::accepted(peer, self.job.rank, epoch) {
            return Ok(false);
        }
        let fifo = peer.view.fifo();
        let Some(pos) = fifo.claim(me) else { return Ok(false) };
        fifo.write_eager(pos, epoch, tag, data);
        fifo.publish(pos, me);
        Self::wake(peer);
        Ok(true)
    }

    fn start_send(
        &mut self,
        owner: Owner,
        dest: Rank,
        tag: Tag,
        region: &Region,
        offset: usize,
        len: usize,
    ) -> Result<OpId> {
        region.check_bounds("send", offset, len)?;
        if len <= self.config.rndv_thresh {
            // Straight from the region into the slot, no staging Vec.
            // SAFETY: offset + len was checked against the region, which `region` keeps
            // mapped; a send's buffer holds still until the send completes (the API's
            // contract), and the bytes are copied (into the FIFO or the backlog) before this
            // returns.
            let data = unsafe { std::slice::from_raw_parts(region.as_ptr().add(offset), len) };
            return self.send_eager(owner, dest, tag, data);
        }
        if !region.access().allows(Access::REMOTE_READ) {
            return Err(TransportError::AccessDenied { op: "rendezvous send", needed: "remote read" });
        }
        // SAFETY: as above (offset + len checked, the region stays mapped and unchanged).
        let data = unsafe { std::slice::from_raw_parts(region.as_ptr().add(offset), len) };
        if let Some(op) = self.try_direct(owner, dest, tag, data)? {
            return Ok(op);
        }
        let op = self.cq.next_op(owner);
        self.push_msg(dest, SlotHeader::rts(tag, len, op.0, &region.remote(), offset), &[], None)?;
        self.tagged.get().count_send(dest);
        self.tagged.get().add_pending(op, dest, tag, len, Some(region));
        Ok(op)
    }

    /// A lent message above the threshold, announced for the receiver to read where it is, if
    /// the receiver proved it can (`cma`); None (nothing sent) otherwise.
    fn try_lend(&mut self, owner: Owner, dest: Rank, tag: Tag, data: &[u8]) -> Result<Option<OpId>> {
        self.live_peer(dest)?;
        if !self.lends_to(dest, data.len()) {
            return Ok(None);
        }
        let op = self.cq.next_op(owner);
        let mut rts = SlotHeader::rts_lent(tag, data.len(), op.0, data.as_ptr() as u64);
        rts.r_key = self.lend_slot(op, dest, data).map_or(0, |slot| slot as u64 + 1);
        self.push_msg(dest, rts, &[], None)?;
        self.tagged.get().count_send(dest);
        self.tagged.get().add_pending(op, dest, tag, data.len(), None);
        Ok(Some(op))
    }

    /// A message above the threshold into the buffer the receiver advertised for it, if it did:
    /// the copy through the mapping puts use, then the DIRECT_FIN. None (nothing moved)
    /// without a usable advert.
    fn try_direct(&mut self, owner: Owner, dest: Rank, tag: Tag, data: &[u8]) -> Result<Option<OpId>> {
        let Some(d) = self.tagged.get().direct_for(dest, tag, data.len()) else { return Ok(None) };
        self.send_direct(owner, dest, tag, data, &d)
    }

    fn send_direct(
        &mut self,
        owner: Owner,
        dest: Rank,
        tag: Tag,
        data: &[u8],
        d: &Direct,
    ) -> Result<Option<OpId>> {
        let len = data.len();
        // Checked as a put against the receiver's table (key, bounds, write access) and the
        // advertised buffer's end; an advert that fails is not used.
        let Ok(dst) = self.remote_range("direct write", &d.remote, d.offset, len, Access::REMOTE_WRITE)
        else {
            return Ok(None);
        };
        // SAFETY: remote_range checked offset + len against the mapping; `data` holds len bytes.
        unsafe { control::copy_bytes(data.as_ptr(), dst, len) };
        let op = self.cq.next_op(owner);
        let done = Completion::ok(op, CompletionKind::Send { dest, tag, len });
        self.push_msg(dest, d.fin(tag, len), &[], Some(done))?;
        self.tagged.get().count_send(dest);
        Ok(Some(op))
    }
}

impl Provider for ShmProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::SHM
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::PUT
            | Capabilities::PUT_IMM
            | Capabilities::GET
            | Capabilities::TAGGED
            | Capabilities::RNDV_ZCOPY
            | Capabilities::EVENT_WAIT
            | Capabilities::SYNC_RMA
            | Capabilities::PEEK
    }

    fn rank(&self) -> Rank {
        self.job.rank
    }

    fn size(&self) -> u32 {
        self.job.size
    }

    fn config(&self) -> &TransportConfig {
        &self.config
    }

    fn alloc_region(&mut self, len: usize, access: Access) -> Result<Region> {
        self.register_segment(len, access)
    }

    // Inlined into the `APP` posts (`put`, `send`, ...): they cost no extra call.
    #[inline(always)]
    fn put_for(&mut self, owner: Owner, rma: Rma<'_>, signal: Signal) -> Result<OpId> {
        let dst = self.remote_ptr("put", &rma, Access::REMOTE_WRITE)?;
        // SAFETY: both ranges bounds-checked by remote_ptr.
        unsafe { control::copy_bytes(Self::local_ptr(&rma), dst, rma.len) };
        let op = self.cq.next_op(owner);
        self.complete(op, CompletionKind::Put, signal);
        Ok(op)
    }

    #[inline(always)]
    fn put_imm_for(&mut self, owner: Owner, rma: Rma<'_>, imm: u32, signal: Signal) -> Result<OpId> {
        let dst = self.remote_ptr("put_imm", &rma, Access::REMOTE_WRITE)?;
        // SAFETY: both ranges bounds-checked by remote_ptr.
        unsafe { control::copy_bytes(Self::local_ptr(&rma), dst, rma.len) };
        let header = SlotHeader { kind: kind::IMM, imm, len: rma.len as u64, ..Default::default() };
        self.push_msg(rma.remote.owner, header, &[], None)?;
        let op = self.cq.next_op(owner);
        self.complete(op, CompletionKind::PutImm, signal);
        Ok(op)
    }

    #[inline(always)]
    fn get_for(&mut self, owner: Owner, rma: Rma<'_>, signal: Signal) -> Result<OpId> {
        let src = self.remote_ptr("get", &rma, Access::REMOTE_READ)?;
        // SAFETY: both ranges bounds-checked by remote_ptr.
        unsafe { control::copy_bytes(src, Self::local_ptr(&rma), rma.len) };
        let op = self.cq.next_op(owner);
        self.complete(op, CompletionKind::Get, signal);
        Ok(op)
    }

    #[inline(always)]
    fn send_for(&mut self, owner: Owner, dest: Rank, tag: Tag, data: &[u8]) -> Result<OpId> {
        self.live_peer(dest)?;
        if data.len() <= self.config.rndv_thresh {
            return self.send_eager(owner, dest, tag, data);
        }
        if let Some(op) = self.try_direct(owner, dest, tag, data)? {
            return Ok(op);
        }
        // Stage large unregistered data in a region the receiver can read; staging regions
        // are pooled (a fresh file per message cost ~100x the copy at 1 MiB).
        let mut staging_pool = std::mem::replace(&mut self.staging, RegionPool::new(0));
        let staging = staging_pool.take(data.len(), |len| self.alloc_region(len, Access::REMOTE_READ));
        self.staging = staging_pool;
        let staging = staging?;
        staging.write(0, data)?;
        self.start_send(owner, dest, tag, &staging, 0, data.len())
    }

    unsafe fn send_lent_for(&mut self, owner: Owner, dest: Rank, tag: Tag, data: &[u8]) -> Result<OpId> {
        if data.len() > self.config.rndv_thresh {
            if let Some(op) = self.try_direct(owner, dest, tag, data)? {
                return Ok(op);
            }
            if let Some(op) = self.try_lend(owner, dest, tag, data)? {
                return Ok(op);
            }
        }
        self.send_for(owner, dest, tag, data)
    }

    fn lends_to(&self, dest: Rank, len: usize) -> bool {
        let Some(peer) = self.peers.get(dest as usize) else { return false };
        self.config.shm_cma
            && len > self.config.rndv_thresh
            && peer.state == PeerState::Alive
            && peer.view.reads_lent(self.job.rank, self.job.incarnation)
    }

    #[inline(always)]
    fn send_region_for(
        &mut self,
        owner: Owner,
        dest: Rank,
        tag: Tag,
        region: &Region,
        offset: usize,
        len: usize,
    ) -> Result<OpId> {
        self.live_peer(dest)?;
        self.start_send(owner, dest, tag, region, offset, len)
    }

    fn peek_arrived(&mut self, source: Source, tag: TagMatch) -> Result<Option<(Rank, Tag, usize)>> {
        Ok(self.tagged.with(|t| t.peek(source, tag)))
    }

    #[inline(always)]
    fn take_eager_into(
        &mut self,
        source: Source,
        tag: TagMatch,
        buf: &mut [u8],
        accept: &dyn Fn(Tag, usize) -> bool,
    ) -> Result<EagerTake> {
        let mut tagged = self.tagged.get();
        if !tagged.is_quiet() {
            // Arrivals queued (or receives posted) come first: match through the state.
            return Ok(tagged.take_eager_into(source, tag, buf, accept));
        }
        drop(tagged);
        Ok(self.take_eager_in_place(source, tag, buf, accept))
    }

    #[inline(always)]
    fn send_inline(&mut self, dest: Rank, tag: Tag, data: &[u8]) -> Result<bool> {
        if data.len() > self.config.rndv_thresh || !self.try_publish_eager(dest, tag, data)? {
            return Ok(false);
        }
        self.tagged.get().count_send(dest);
        Ok(true)
    }

    #[inline(always)]
    fn post_recv_for(
        &mut self,
        owner: Owner,
        source: Source,
        tag: TagMatch,
        buffer: RecvBuffer,
    ) -> Result<OpId> {
        tagged::check_recv(source, &buffer, self.job.size)?;
        self.post_checked(owner, source, tag, buffer)
    }

    /// A claim completes before it returns here (eager data is copied, a rendezvous read is
    /// a copy too), so it may land in lent memory.
    fn post_claim_for(
        &mut self,
        owner: Owner,
        source: Source,
        tag: TagMatch,
        buffer: RecvBuffer,
    ) -> Result<OpId> {
        tagged::check_claim(source, &buffer, self.job.size)?;
        self.post_checked(owner, source, tag, buffer)
    }

    fn rndv_stats(&self) -> RndvStats {
        self.tagged.with(TaggedState::rndv_stats)
    }

    fn peer_state(&self, peer: Rank) -> PeerState {
        self.peers.get(peer as usize).map_or(PeerState::Dead, |p| p.state)
    }

    fn peer_incarnation(&self, peer: Rank) -> Option<u32> {
        self.peers.get(peer as usize).filter(|p| p.mapped).map(|p| p.incarnation)
    }

    fn reconnect(&mut self, peer: Rank, incarnation: u32, address: &[u8]) -> Result<()> {
        let current = self.peers.get(peer as usize).map(|p| (p.incarnation, p.mapped));
        crate::recovery::check_reconnect(self.job.rank, self.job.size, peer, incarnation, current)?;
        check_incarnation(incarnation)?;
        // Map and validate the new segment before touching the old state.
        let (pid, view) = map_peer_segment(&self.job_tag, self.layout, peer, incarnation, address)?;
        if self.peers[peer as usize].state == PeerState::Alive {
            // The old incarnation is gone even if its exit was not seen yet.
            self.mark_dead(peer);
        }
        // Arrivals of the old incarnation that no receive claimed must not look like the new one's.
        self.tagged.get().purge_unexpected_from(peer);
        self.attach_view(peer, incarnation, pid, view)
    }

    fn progress(&mut self) -> Result<()> {
        self.drain_fifo();
        self.flush_backlogs();
        self.help_lent_reads();
        self.progress_calls = self.progress_calls.wrapping_add(1);
        if self.progress_calls.is_multiple_of(256) && self.liveness_due() {
            self.check_liveness();
        }
        match self.malformed.next_error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn block(&mut self, timeout: Duration) -> Result<()> {
        if self.liveness_due() {
            self.check_liveness();
        }
        if self.cq.any_queued() {
            return Ok(());
        }
        if self.config.wait_mode == WaitMode::Poll {
            // Producers skip the wakeup handshake for polling ranks: never sleep on the futex.
            std::thread::yield_now();
            return Ok(());
        }
        let mut timeout = if self.backlogged > 0 { timeout.min(Duration::from_micros(200)) } else { timeout };
        let doorbell = self.own.doorbell();
        let seen = doorbell.load(Ordering::Acquire);
        self.own.waiters().fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let pending = match self.own.fifo().peek(self.rx_tail) {
            Slot::Empty => false,
            Slot::Published(_) => true,
            Slot::Claimed(_) => {
                // A producer is writing (or died writing): look again soon.
                timeout = timeout.min(Duration::from_millis(1));
                false
            }
        };
        if !pending {
            futex::wait(doorbell, seen, timeout);
        }
        self.own.waiters().fetch_sub(1, Ordering::SeqCst);
        Ok(())
    }

    fn queues(&mut self) -> &mut CompletionQueues {
        &mut self.cq
    }
}

impl Drop for ShmProvider {
    fn drop(&mut self) {
        // Deliver what is still queued (bounded: a peer that stopped consuming cannot hold us).
        let deadline = Instant::now() + self.config.peer_timeout;
        while self.peers.iter().any(|p| !p.backlog.is_empty() && p.state == PeerState::Alive)
            && Instant::now() < deadline
        {
            self.flush_backlogs();
            self.drain_fifo();
            if self.liveness_due() {
                self.check_liveness();
            }
            std::thread::yield_now();
        }
        // Tell peers we are gone on purpose; the segment itself is unlinked when the last
        // view of it (ours) drops.
        self.own.closed().store(1, Ordering::Release);
        for peer in self.peers.iter().filter(|p| p.mapped) {
            if peer.view.waiters().load(Ordering::Relaxed) > 0 {
                peer.view.doorbell().fetch_add(1, Ordering::Release);
                futex::wake_all(peer.view.doorbell());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shm_files(job_tag: &str) -> Vec<String> {
        let prefix = format!("reverb.{job_tag}.");
        let mut names: Vec<String> = std::fs::read_dir("/dev/shm")
            .map(|dir| {
                dir.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|name| name.starts_with(&prefix))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    fn pattern(seed: u64, len: usize) -> Vec<u8> {
        (0..len as u64).map(|i| (i * 31 + seed * 7 + 1) as u8).collect()
    }

    fn self_job(job_id: &str) -> JobInfo {
        JobInfo {
            rank: 0,
            size: 1,
            node: 0,
            local_rank: 0,
            ranks_per_node: 1,
            job_id: job_id.to_string(),
            incarnation: 0,
        }
    }

    /// Sends that find the FIFO full wait in the backlog, complete only once published, and
    /// arrive in order with the in-place ones; region sends of every eager size arrive whole.
    #[test]
    fn a_full_fifo_backlogs_in_order_and_drains() {
        let config = TransportConfig { shm_fifo_slots: 4, ..TransportConfig::default() };
        let (mut p, _) = ShmProvider::create(
            config,
            self_job(&format!("h14bl{}", std::process::id())),
            SubCore::default(),
        )
        .unwrap();
        let max = p.layout.max_payload();
        let src = p.alloc_region(max, Access::LOCAL).unwrap();
        let sends: Vec<OpId> = (0..10usize)
            .map(|i| {
                let len = (i * 13) % (max + 1);
                src.write(0, &pattern(i as u64, len)).unwrap();
                p.send_region(0, i as u64, &src, 0, len).unwrap()
            })
            .collect();
        assert_eq!(p.backlogged, 6, "4 slots in the FIFO, the rest wait");
        let done: Vec<OpId> = p.completions().drain(..).map(|c| c.op).collect();
        assert_eq!(done, sends[..4], "only published sends complete");
        for i in 0..10u64 {
            let recv =
                p.post_recv(Source::Rank(0), TagMatch::any(), RecvBuffer::Owned { capacity: max }).unwrap();
            let got = p.wait_op(recv, Duration::from_secs(10)).unwrap().into_result().unwrap();
            let len = (i as usize * 13) % (max + 1);
            match got.kind {
                CompletionKind::Recv { tag, data: Some(d), .. } => {
                    assert_eq!(tag, i, "per-source order");
                    assert!(d == pattern(i, len), "message {i} differs");
                }
                other => panic!("unexpected completion {other:?}"),
            }
        }
        assert_eq!(p.backlogged, 0);
        for op in &sends[4..] {
            assert!(p.wait_op(*op, Duration::from_secs(10)).unwrap().status.is_ok());
        }
    }

    /// Large slice sends and owned receives (a rank sending to itself) register no region
    /// per message: the /dev/shm files stay the same two (control segment, one pooled staging
    /// region) round after round, and every message arrives intact.
    #[test]
    fn large_messages_reuse_staging_and_need_no_scratch_region() {
        let job_id = format!("h11pool{}", std::process::id());
        let job = JobInfo {
            rank: 0,
            size: 1,
            node: 0,
            local_rank: 0,
            ranks_per_node: 1,
            job_id: job_id.clone(),
            incarnation: 0,
        };
        let (mut p, _) = ShmProvider::create(TransportConfig::default(), job, SubCore::default()).unwrap();
        let tag_of = shmfile::sanitize_job_id(&job_id);
        let timeout = Duration::from_secs(30);
        let mut files_after_first = None;
        for round in 0..40u32 {
            let len = (1 << 20) - round as usize;
            let data: Vec<u8> = (0..len).map(|i| (i as u32 ^ round) as u8).collect();
            let recv = p
                .post_recv(Source::Rank(0), TagMatch::exact(7), RecvBuffer::Owned { capacity: 1 << 20 })
                .unwrap();
            let send = p.send(0, 7, &data).unwrap();
            let got = p.wait_op(recv, timeout).unwrap();
            assert!(got.status.is_ok(), "{:?}", got.status);
            match got.kind {
                CompletionKind::Recv { data: Some(bytes), len: n, .. } => {
                    assert_eq!(n, len);
                    assert!(bytes == data, "round {round}: payload differs");
                }
                other => panic!("unexpected completion {other:?}"),
            }
            assert!(p.wait_op(send, timeout).unwrap().status.is_ok());
            let files = shm_files(&tag_of);
            assert_eq!(files.len(), 2, "round {round}: control segment + one staging region: {files:?}");
            assert_eq!(files_after_first.get_or_insert_with(|| files.clone()), &files, "round {round}");
        }
        drop(p);
        assert_eq!(shm_files(&tag_of), Vec::<String>::new());
    }
}
