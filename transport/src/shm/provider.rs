//! The [`Provider`] trait for [`ShmProvider`], and its orderly close.

use super::*;

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
        // Memory lent to a posted receive (`Borrowed::posted`) is written by whichever
        // progress call lands the message: kept like any buffer.
        match &buffer {
            RecvBuffer::Borrowed(b) if b.is_posted() => tagged::check_claim(source, &buffer, self.job.size)?,
            _ => tagged::check_recv(source, &buffer, self.job.size)?,
        }
        self.post_checked(owner, source, tag, buffer)
    }

    fn cancel_recv(&mut self, op: OpId) -> Result<bool> {
        Ok(self.tagged.get().cancel_recv(op))
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

    fn peer_address(&self) -> Result<Vec<u8>> {
        self.host_address()
    }

    fn connect_peer(&mut self, address: &[u8]) -> Result<Rank> {
        self.connect_host_peer(address)
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
        // A zero timeout only runs the due liveness check (the runtime's failure check after
        // every poll): no yield, no futex call, no system call at all.
        if self.cq.any_queued() || timeout.is_zero() {
            return Ok(());
        }
        if self.config.wait_mode == WaitMode::Poll {
            // Producers skip the wakeup handshake for polling ranks: never sleep on the futex.
            std::thread::yield_now();
            return Ok(());
        }
        let mut timeout = if self.backlogged > 0 { timeout.min(Duration::from_micros(200)) } else { timeout };
        let doorbell = self.own.doorbell();
        // Armed (odd) before the look at the FIFO: the first producer to publish after it
        // rings once; the others see the ring and make no system call.
        let Some(armed) = futex::arm(doorbell) else { return Ok(()) };
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
            futex::wait(doorbell, armed, timeout);
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
