//! The loopback provider: every rank of the job is a thread of this one process (UCX's `self`
//! transport, for a whole job). Fast unit tests of the layers above run N ranks in one test
//! without processes, files or sockets, yet through the same `Provider` contract:
//!
//! - registered regions are heap blocks in each rank's registration table; every RMA is
//!   checked against the owner's table (key, address, bounds, access) before a byte moves;
//! - tagged messages, rendezvous control (RTS/FIN) and immediates go to the target's inbox;
//!   slice sends are eager (a copy), region sends above the threshold are rendezvous (the
//!   receiver copies from the sender's region, then FINs);
//! - a rank whose provider is dropped is `Dead` to the others: what it sent first still
//!   arrives, then everything pending on it fails with `PeerDead`.
//!
//! Ranks meet through `fabric` by job id; [`InProcBootstrap`] gives them a bootstrap. No respawn: `reconnect` is unsupported.

mod bootstrap;
mod fabric;
pub(crate) mod memory;

pub use bootstrap::InProcBootstrap;

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::advert::{Direct, RndvStats};
use crate::api::*;
use crate::bootstrap::{Bootstrap, JobInfo};
use crate::completion::{CompletionQueues, Owner};
use crate::config::{TransportConfig, WaitMode};
use crate::error::{ErrorQueue, Result, TransportError};
use crate::msg::{kind, SlotHeader};
use crate::region::Region;
use crate::tagged::{self, Fetch, TaggedState};
use crate::tagmatch::PostedRecv;
use fabric::{Endpoint, Fabric, Message, Registered};
use memory::Memory;

/// Deregisters a region from its owner's table when the last handle on it drops.
struct Registration {
    owner: Weak<Endpoint>,
    key: u64,
    _memory: Arc<Memory>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(owner) = self.owner.upgrade() {
            owner.deregister(self.key);
        }
    }
}

/// The loopback [`Provider`]: one rank of an in-process job (see the module doc).
pub struct LoopbackProvider {
    config: TransportConfig,
    job: JobInfo,
    _fabric: Arc<Fabric>,
    me: Arc<Endpoint>,
    peers: Vec<Arc<Endpoint>>,
    dead: Vec<bool>,
    /// Completions, routed to their owners' queues; numbers operations too.
    cq: CompletionQueues,
    tagged: TaggedState,
    malformed: ErrorQueue,
}

impl LoopbackProvider {
    /// Joins the in-process job named by `boot.job().job_id`; every rank must open on its own
    /// thread of this process (a collective: `boot.allgather` checks they all share a fabric).
    pub fn open(config: TransportConfig, boot: &mut dyn Bootstrap) -> Result<LoopbackProvider> {
        config.validate()?;
        let job = boot.job().clone();
        if job.rank >= job.size {
            return Err(TransportError::InvalidRank(job.rank, job.size));
        }
        if job.incarnation > 0 {
            return Err(TransportError::Unsupported("respawned ranks on the loopback provider".into()));
        }
        let fabric = Fabric::for_job(&job.job_id, job.size)?;
        let me = fabric.join(job.rank)?;
        let ids = boot.allgather(&fabric.id.to_le_bytes())?;
        if ids.iter().any(|id| id.as_slice() != fabric.id.to_le_bytes()) {
            me.close();
            return Err(TransportError::Unavailable(
                "loopback",
                "the job's ranks are in different processes: loopback runs ranks as threads".into(),
            ));
        }
        let peers = fabric.all()?;
        let dead = vec![false; job.size as usize];
        Ok(LoopbackProvider {
            config,
            job,
            _fabric: fabric,
            me,
            peers,
            dead,
            cq: CompletionQueues::new(),
            tagged: TaggedState::default(),
            malformed: ErrorQueue::default(),
        })
    }

    fn live_peer(&self, rank: Rank) -> Result<&Arc<Endpoint>> {
        let peer = self.peers.get(rank as usize).ok_or(TransportError::InvalidRank(rank, self.job.size))?;
        if self.dead[rank as usize] {
            return Err(TransportError::PeerDead(rank));
        }
        Ok(peer)
    }

    fn push(&self, dest: Rank, header: SlotHeader, payload: Vec<u8>) -> Result<()> {
        self.live_peer(dest)?.deliver(Message { source: self.job.rank, header, payload });
        Ok(())
    }

    // Always inlined: the completion is then built in its queue's slot, not moved into it.
    #[inline(always)]
    fn complete(&mut self, op: OpId, kind: CompletionKind, signal: Signal) {
        if signal == Signal::Yes {
            self.cq.push(Completion::ok(op, kind));
        }
    }

    /// Validates `len` bytes at `offset` of a peer's region against the owner's table (never
    /// the forgeable descriptor) and returns the registered memory.
    fn remote_memory(
        &self,
        op: &'static str,
        remote: &RemoteRegion,
        offset: u64,
        len: usize,
        need: Access,
    ) -> Result<Arc<Memory>> {
        let owner = self.live_peer(remote.owner)?;
        let invalid = TransportError::InvalidKey { op, owner: remote.owner, key: remote.key };
        let Registered { memory, access } = owner.lookup(remote.key).ok_or(invalid.clone())?;
        if memory.ptr() as u64 != remote.addr {
            return Err(invalid);
        }
        let limit = (memory.len() as u64).min(remote.len);
        match offset.checked_add(len as u64) {
            Some(end) if end <= limit => {}
            _ => return Err(TransportError::OutOfBounds { op, offset, len: len as u64, region_len: limit }),
        }
        if !access.allows(need) {
            let needed = if need == Access::REMOTE_WRITE { "remote write" } else { "remote read" };
            return Err(TransportError::AccessDenied { op, needed });
        }
        Ok(memory)
    }

    /// Copies between the local and the remote region of `rma`; `write` is put, else get.
    fn rma_copy(&self, op: &'static str, rma: &Rma<'_>, write: bool) -> Result<()> {
        rma.local.check_bounds(op, rma.local_offset, rma.len)?;
        let need = if write { Access::REMOTE_WRITE } else { Access::REMOTE_READ };
        let memory = self.remote_memory(op, rma.remote, rma.remote_offset, rma.len, need)?;
        // SAFETY: the local range was checked against the local region and the remote one
        // against the owner's table; `memory` stays alive for the copy.
        unsafe {
            let local = rma.local.as_ptr().add(rma.local_offset);
            let at = rma.remote_offset as usize;
            if write {
                memory.write_from(at, local, rma.len);
            } else {
                memory.read_into(at, local, rma.len);
            }
        }
        Ok(())
    }

    fn send_eager(&mut self, owner: Owner, dest: Rank, tag: Tag, data: Vec<u8>) -> Result<OpId> {
        let len = data.len();
        self.push(dest, SlotHeader::eager(tag, len), data)?;
        self.tagged.count_send(dest);
        let op = self.cq.next_op(owner);
        self.cq.push(Completion::ok(op, CompletionKind::Send { dest, tag, len }));
        Ok(op)
    }

    /// A message above the threshold into the buffer the receiver advertised for it, if it did:
    /// the copy, then the DIRECT_FIN. None (nothing moved) without a usable advert.
    fn try_direct(&mut self, owner: Owner, dest: Rank, tag: Tag, data: &[u8]) -> Result<Option<OpId>> {
        let Some(d) = self.tagged.direct_for(dest, tag, data.len()) else { return Ok(None) };
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
        // Checked as a put against the receiver's table; an advert that fails the checks is
        // not used (the message goes the usual way).
        let Ok(memory) = self.remote_memory("direct write", &d.remote, d.offset, len, Access::REMOTE_WRITE)
        else {
            return Ok(None);
        };
        // SAFETY: offset + len was checked against the owner's table and the advertised
        // buffer; `data` holds len bytes; `memory` stays alive for the copy.
        unsafe { memory.write_from(d.offset as usize, data.as_ptr(), len) };
        self.push(dest, d.fin(tag, len), Vec::new())?;
        self.tagged.count_send(dest);
        let op = self.cq.next_op(owner);
        self.cq.push(Completion::ok(op, CompletionKind::Send { dest, tag, len }));
        Ok(Some(op))
    }

    /// Sends the adverts the tagged layer queued (a dead peer needs none).
    fn send_adverts(&mut self) {
        while let Some((dest, header)) = self.tagged.pop_advert() {
            let _ = self.push(dest, header, Vec::new());
        }
    }

    /// Posts a receive checked already: what arrived (a dead peer's last words included) is
    /// matched first, a rendezvous read at once.
    fn post_checked(
        &mut self,
        owner: Owner,
        source: Source,
        tag: TagMatch,
        buffer: RecvBuffer,
    ) -> Result<OpId> {
        self.drain_inbox();
        let op = self.cq.next_op(owner);
        let dead = &self.dead;
        let is_dead = |r: Rank| dead[r as usize];
        let recv = PostedRecv { op, source, tag, buffer };
        if let Some(fetch) = self.tagged.post(recv, is_dead, &mut self.cq, self.config.advert_thresh(true))? {
            self.rndv_fetch(fetch);
        }
        self.send_adverts();
        Ok(op)
    }

    /// Receiver side of rendezvous: copy the sender's region, then tell it (FIN).
    fn rndv_fetch(&mut self, f: Fetch) {
        let Fetch { recv, source, rts } = f;
        let len = rts.len as usize;
        let remote = RemoteRegion { owner: source, addr: rts.r_addr, len: rts.r_len, key: rts.r_key };
        let result = if len > recv.buffer.capacity() {
            Err(TransportError::Truncated { len: rts.len, capacity: recv.buffer.capacity() as u64 })
        } else {
            self.read_remote(&remote, rts.r_offset, len, &recv.buffer)
        };
        // A dead sender needs no FIN; the receive's own result says what happened.
        let _ = self.push(source, SlotHeader::fin(&rts, tagged::fin_status(&result)), Vec::new());
        self.cq.push(tagged::recv_completion(recv.op, source, rts.tag, len, result));
    }

    fn read_remote(
        &self,
        remote: &RemoteRegion,
        offset: u64,
        len: usize,
        buffer: &RecvBuffer,
    ) -> Result<Option<Vec<u8>>> {
        let memory = self.remote_memory("rendezvous read", remote, offset, len, Access::REMOTE_READ)?;
        let mut data = vec![0u8; len];
        // SAFETY: offset + len was checked against the owner's table; `data` holds len bytes.
        unsafe { memory.read_into(offset as usize, data.as_mut_ptr(), len) };
        match buffer {
            RecvBuffer::Region { .. } | RecvBuffer::Borrowed(_) => tagged::deliver(buffer, &data),
            RecvBuffer::Owned { .. } => Ok(Some(data)),
        }
    }

    fn handle(&mut self, m: Message) {
        let Message { source, header, payload } = m;
        match header.kind {
            kind::EAGER => self.tagged.on_eager(source, header.tag, &payload, &mut self.cq),
            _ => match self.tagged.on_control(source, header, &mut self.cq) {
                Ok(Some(fetch)) => self.rndv_fetch(fetch),
                Ok(None) => {}
                Err(e) => self.malformed.push(e),
            },
        }
    }

    fn drain_inbox(&mut self) {
        for m in self.me.take_all() {
            self.handle(m);
        }
        self.send_adverts();
    }

    /// Marks peers whose provider was dropped dead, after taking in what they sent first.
    fn check_liveness(&mut self) {
        let newly_dead: Vec<usize> =
            (0..self.peers.len()).filter(|&r| !self.dead[r] && self.peers[r].is_closed()).collect();
        if newly_dead.is_empty() {
            return;
        }
        // A closed peer sends nothing more: one drain takes in its last words.
        self.drain_inbox();
        for rank in newly_dead {
            self.dead[rank] = true;
            let dead = TransportError::PeerDead(rank as Rank);
            self.tagged.fail_peer(rank as Rank, &dead, &mut self.cq);
        }
    }
}

impl Provider for LoopbackProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::LOOPBACK
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
        if len == 0 {
            return Err(TransportError::Config("cannot register an empty region".into()));
        }
        let memory = Memory::zeroed(len);
        let entry = Registered { memory: Arc::clone(&memory), access };
        let key = loop {
            let key = rand::random::<u64>();
            if key != 0 && self.me.register(key, entry.clone()) {
                break key;
            }
        };
        let ptr = memory.ptr();
        let remote = RemoteRegion { owner: self.job.rank, addr: ptr as u64, len: len as u64, key };
        let backing = Registration { owner: Arc::downgrade(&self.me), key, _memory: memory };
        // SAFETY: ptr..ptr+len is the block `backing` keeps alive.
        Ok(unsafe { Region::new(ptr, len, access, remote, 0, Box::new(backing)) })
    }

    // Inlined into the `APP` posts (`put`, `send`, ...): they cost no extra call.
    #[inline(always)]
    fn put_for(&mut self, owner: Owner, rma: Rma<'_>, signal: Signal) -> Result<OpId> {
        self.rma_copy("put", &rma, true)?;
        let op = self.cq.next_op(owner);
        self.complete(op, CompletionKind::Put, signal);
        Ok(op)
    }

    #[inline(always)]
    fn put_imm_for(&mut self, owner: Owner, rma: Rma<'_>, imm: u32, signal: Signal) -> Result<OpId> {
        self.rma_copy("put_imm", &rma, true)?;
        let header = SlotHeader { kind: kind::IMM, imm, len: rma.len as u64, ..Default::default() };
        self.push(rma.remote.owner, header, Vec::new())?;
        let op = self.cq.next_op(owner);
        self.complete(op, CompletionKind::PutImm, signal);
        Ok(op)
    }

    #[inline(always)]
    fn get_for(&mut self, owner: Owner, rma: Rma<'_>, signal: Signal) -> Result<OpId> {
        self.rma_copy("get", &rma, false)?;
        let op = self.cq.next_op(owner);
        self.complete(op, CompletionKind::Get, signal);
        Ok(op)
    }

    #[inline(always)]
    fn send_for(&mut self, owner: Owner, dest: Rank, tag: Tag, data: &[u8]) -> Result<OpId> {
        self.live_peer(dest)?;
        if data.len() > self.config.rndv_thresh {
            if let Some(op) = self.try_direct(owner, dest, tag, data)? {
                return Ok(op);
            }
        }
        self.send_eager(owner, dest, tag, data.to_vec())
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
        region.check_bounds("send", offset, len)?;
        if len <= self.config.rndv_thresh {
            return self.send_eager(owner, dest, tag, region.to_vec(offset, len)?);
        }
        if !region.access().allows(Access::REMOTE_READ) {
            return Err(TransportError::AccessDenied { op: "rendezvous send", needed: "remote read" });
        }
        // SAFETY: offset + len was checked against the region, which `region` keeps alive;
        // a send's buffer holds still until the send completes (the API's contract).
        let data = unsafe { std::slice::from_raw_parts(region.as_ptr().add(offset), len) };
        if let Some(op) = self.try_direct(owner, dest, tag, data)? {
            return Ok(op);
        }
        let op = self.cq.next_op(owner);
        self.push(dest, SlotHeader::rts(tag, len, op.0, &region.remote(), offset), Vec::new())?;
        self.tagged.count_send(dest);
        self.tagged.add_pending(op, dest, tag, len, Some(region));
        Ok(op)
    }

    #[inline(always)]
    fn peek_arrived(&mut self, source: Source, tag: TagMatch) -> Result<Option<(Rank, Tag, usize)>> {
        Ok(self.tagged.peek(source, tag))
    }

    fn take_eager_into(
        &mut self,
        source: Source,
        tag: TagMatch,
        buf: &mut [u8],
        accept: &dyn Fn(Tag, usize) -> bool,
    ) -> Result<EagerTake> {
        Ok(self.tagged.take_eager_into(source, tag, buf, accept))
    }

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

    fn cancel_recv(&mut self, op: OpId) -> Result<bool> {
        Ok(self.tagged.cancel_recv(op))
    }

    /// As shm's: a claim is complete on return (copies), so it may land in lent memory.
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
        self.tagged.rndv_stats()
    }

    fn peer_state(&self, peer: Rank) -> PeerState {
        match self.dead.get(peer as usize) {
            Some(false) => PeerState::Alive,
            _ => PeerState::Dead,
        }
    }

    fn progress(&mut self) -> Result<()> {
        self.check_liveness();
        self.drain_inbox();
        match self.malformed.next_error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn block(&mut self, timeout: Duration) -> Result<()> {
        self.check_liveness();
        if self.cq.any_queued() {
            return Ok(());
        }
        if self.config.wait_mode == WaitMode::Poll {
            std::thread::yield_now();
            return Ok(());
        }
        self.me.wait(timeout);
        Ok(())
    }

    fn queues(&mut self) -> &mut CompletionQueues {
        &mut self.cq
    }
}

impl Drop for LoopbackProvider {
    fn drop(&mut self) {
        // Peers see the close at their next progress; wake the sleepers so they look now.
        self.me.close();
        for (rank, peer) in self.peers.iter().enumerate() {
            if rank != self.job.rank as usize {
                peer.wake();
            }
        }
    }
}
