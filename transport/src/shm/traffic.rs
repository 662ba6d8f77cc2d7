//! The shm provider's message traffic: completing operations, publishing into peers' FIFOs
//! (with the backlog when a FIFO is full), draining this rank's FIFO, rendezvous reads, and
//! the liveness checks that find dead peers.

use super::*;

impl ShmProvider {
    // Always inlined: the completion is then built in its queue's slot, not moved into it.
    #[inline(always)]
    pub(super) fn complete(&mut self, op: OpId, kind: CompletionKind, signal: Signal) {
        if signal == Signal::Yes {
            self.cq.push(Completion::ok(op, kind));
        }
    }

    /// Queues a message for `dest`: straight into its FIFO if there is room and nothing is
    /// waiting ahead of it, else into the backlog (drained by `progress`). `done` is queued
    /// when the message is in the peer's FIFO, not before: a sender that stops progressing
    /// must not believe a backlogged message is on its way.
    pub(super) fn push_msg(
        &mut self,
        dest: Rank,
        header: SlotHeader,
        payload: &[u8],
        done: Option<Completion>,
    ) -> Result<()> {
        // `let else`, not `ok_or`: building the unused error costs a drop call per message.
        let Some(peer) = self.peers.get_mut(dest as usize) else {
            return Err(TransportError::InvalidRank(dest, self.job.size));
        };
        if peer.state == PeerState::Dead {
            return Err(TransportError::PeerDead(dest));
        }
        let (rank, me, epoch) = (self.job.rank, self.me, self.job.incarnation);
        if peer.backlog.is_empty() && Self::publish(peer, rank, me, epoch, &header, payload) {
            self.cq.extend(done);
        } else {
            peer.backlog.push_back(Queued { header, payload: payload.to_vec(), done });
            self.backlogged += 1;
        }
        Ok(())
    }

    /// Whether `peer` accepts incarnation `epoch` of rank `rank` (cached once it did).
    #[inline(always)]
    pub(super) fn accepted(peer: &mut Peer, rank: Rank, epoch: u32) -> bool {
        if !peer.tx_accepted {
            peer.tx_accepted = peer.view.accepts(rank, epoch);
        }
        peer.tx_accepted
    }

    /// Claims a slot of `peer`'s FIFO, writes the message and publishes it. False (not sent)
    /// when the peer does not accept us yet or its FIFO is full.
    pub(super) fn publish(
        peer: &mut Peer,
        rank: Rank,
        me: fifo::Owner,
        epoch: u32,
        header: &SlotHeader,
        payload: &[u8],
    ) -> bool {
        if !Self::accepted(peer, rank, epoch) {
            return false;
        }
        let fifo = peer.view.fifo();
        let Some(pos) = fifo.claim(me) else { return false };
        fifo.write(pos, epoch, header, payload);
        fifo.publish(pos, me);
        Self::wake(peer);
        true
    }

    /// After a publish: wakes `peer` if it sleeps on its doorbell.
    #[inline(always)]
    pub(super) fn wake(peer: &Peer) {
        // Dekker with a sleeper: our publish, then its waiters flag (see `block`). Ranks that
        // never sleep skip the fence.
        if peer.may_sleep {
            fence(Ordering::SeqCst);
        }
        // Only the producer that turns an armed doorbell into a rung one wakes: a window of
        // messages to a sleeper costs one wake, not one a message.
        if peer.view.waiters().load(Ordering::Relaxed) > 0 && futex::ring(peer.view.doorbell()) {
            futex::wake_all(peer.view.doorbell());
        }
    }

    /// Publishes what waits in the backlogs as FIFO space allows; free while none waits.
    #[inline(always)]
    pub(super) fn flush_backlogs(&mut self) {
        if self.backlogged > 0 {
            self.flush_backlogged();
        }
    }

    pub(super) fn flush_backlogged(&mut self) {
        let (rank, me, epoch) = (self.job.rank, self.me, self.job.incarnation);
        for peer in self.peers.iter_mut().filter(|p| !p.backlog.is_empty()) {
            while peer.state != PeerState::Dead {
                let Some(q) = peer.backlog.pop_front() else { break };
                if !Self::publish(peer, rank, me, epoch, &q.header, &q.payload) {
                    // Still no room: first in line again.
                    peer.backlog.push_front(q);
                    break;
                }
                self.backlogged -= 1;
                self.cq.extend(q.done);
            }
        }
    }

    /// Posts a receive checked already: matched against arrivals (a rendezvous read at once),
    /// else kept.
    pub(super) fn post_checked(
        &mut self,
        owner: Owner,
        source: Source,
        tag: TagMatch,
        buffer: RecvBuffer,
    ) -> Result<OpId> {
        if let Source::Rank(r) = source {
            // What a dead peer published before dying may still sit in the FIFO: take it in
            // before deciding that the receive can never match.
            if self.peers[r as usize].state == PeerState::Dead {
                self.drain_fifo();
            }
        }
        let op = self.cq.next_op(owner);
        let peers = &self.peers;
        let dead = |r: Rank| peers[r as usize].state == PeerState::Dead;
        let recv = PostedRecv { op, source, tag, buffer };
        let matched = self.tagged.get().post(recv, dead, &mut self.cq, self.config.advert_thresh(false))?;
        if let Some(fetch) = matched {
            self.rndv_fetch(fetch);
        }
        self.send_adverts();
        Ok(op)
    }

    /// Receiver side of rendezvous: read the sender's buffer in place, then tell it (FIN).
    pub(crate) fn rndv_fetch(&mut self, f: Fetch) {
        let Fetch { mut recv, source, rts } = f;
        let len = rts.len as usize;
        if matches!(&recv.buffer, RecvBuffer::Borrowed(b) if b.falls_back(len)) {
            // Too long for the memory lent to a posted receive: it comes back owned.
            recv.buffer = RecvBuffer::Owned { capacity: len };
        }
        let remote = RemoteRegion { owner: source, addr: rts.r_addr, len: rts.r_len, key: rts.r_key };
        let lent_slot =
            (rts.kind == kind::RTS_LENT && rts.r_key > 0).then(|| ((rts.r_key - 1) as usize, rts.cookie));
        let result = if len > recv.buffer.capacity() {
            self.close_lent_slot(source, lent_slot);
            Err(TransportError::Truncated { len: rts.len, capacity: recv.buffer.capacity() as u64 })
        } else if rts.kind == kind::RTS_LENT {
            self.read_lent(source, rts.r_addr, len, &recv.buffer, lent_slot)
        } else {
            self.read_remote(&remote, rts.r_offset, len, &recv.buffer)
        };
        // A dead sender needs no FIN; the receive's own result already says what happened.
        let _ = self.push_msg(source, SlotHeader::fin(&rts, tagged::fin_status(&result)), &[], None);
        self.cq.push(tagged::recv_completion(recv.op, source, rts.tag, len, result));
    }

    /// Copies `len` bytes of a peer's region into a receive buffer (rendezvous read).
    pub(super) fn read_remote(
        &mut self,
        remote: &RemoteRegion,
        offset: u64,
        len: usize,
        buffer: &RecvBuffer,
    ) -> Result<Option<Vec<u8>>> {
        match buffer {
            RecvBuffer::Region { region, offset: local_offset, .. } => {
                let rma =
                    Rma { local: region, local_offset: *local_offset, remote, remote_offset: offset, len };
                let src = self.remote_ptr("rendezvous read", &rma, Access::REMOTE_READ)?;
                // SAFETY: both ranges were bounds-checked by remote_ptr.
                unsafe { control::copy_bytes(src, Self::local_ptr(&rma), len) };
                Ok(None)
            }
            RecvBuffer::Owned { .. } => {
                // Straight into the owned buffer: no registered scratch region needed. Not
                // zeroed first: at 1 MiB the memset cost as much as the copy itself.
                let src = self.remote_range("rendezvous read", remote, offset, len, Access::REMOTE_READ)?;
                let mut data = Vec::<u8>::with_capacity(len);
                // SAFETY: remote_range checked offset + len against the owner's table; `data`
                // has capacity for len bytes, all of which the copy initialises before set_len.
                unsafe {
                    control::copy_bytes(src, data.as_mut_ptr(), len);
                    data.set_len(len);
                }
                Ok(Some(data))
            }
            RecvBuffer::Borrowed(b) => {
                // Straight into the application's buffer: its only copy on this side.
                let src = self.remote_range("rendezvous read", remote, offset, len, Access::REMOTE_READ)?;
                // SAFETY: remote_range checked offset + len against the owner's table, so the
                // range is mapped; the sender does not touch it before our FIN.
                let data = unsafe { std::slice::from_raw_parts(src, len) };
                b.write(0, data).map(|()| None)
            }
        }
    }

    /// Reads a lent message (`RTS_LENT`, `len` bytes at `addr` in `source`'s memory) into a
    /// receive buffer with room for it, by cross-memory attach, sharing the copy with the
    /// sender through `slot` when it gave one (`share`).
    fn read_lent(
        &mut self,
        source: Rank,
        addr: u64,
        len: usize,
        buffer: &RecvBuffer,
        slot: Option<(usize, u64)>,
    ) -> Result<Option<Vec<u8>>> {
        let failed =
            |e: std::io::Error| TransportError::Remote(source, format!("reading its lent message: {e}"));
        match buffer {
            RecvBuffer::Region { region, offset, .. } => {
                region.check_bounds("rendezvous read", *offset, len)?;
                // SAFETY: offset + len was checked against the region, which stays mapped; a
                // posted receive's buffer is the receive's alone until it completes.
                let dst = unsafe { region.as_ptr().add(*offset) };
                // SAFETY: as above.
                unsafe { self.read_lent_shared(source, addr, len, dst, slot) }.map_err(failed)?;
                Ok(None)
            }
            RecvBuffer::Owned { .. } => {
                let mut data = Vec::<u8>::with_capacity(len);
                // SAFETY: `data` has capacity for len bytes, all of which the read initialises
                // before set_len.
                match unsafe { self.read_lent_shared(source, addr, len, data.as_mut_ptr(), slot) } {
                    Ok(()) => {
                        // SAFETY: all len bytes were written.
                        unsafe { data.set_len(len) };
                        Ok(Some(data))
                    }
                    Err(e) => {
                        // A sender that stalled mid-chunk may still write: never free it.
                        std::mem::forget(data);
                        Err(failed(e))
                    }
                }
            }
            RecvBuffer::Borrowed(b) => {
                if len > b.len() {
                    self.close_lent_slot(source, slot);
                    return Err(TransportError::Truncated { len: len as u64, capacity: b.len() as u64 });
                }
                // SAFETY: len fits the lent buffer, which its lender keeps for this claim alone.
                unsafe { self.read_lent_shared(source, addr, len, b.as_mut_ptr(), slot) }.map_err(failed)?;
                Ok(None)
            }
        }
    }

    /// A slot that is not eager data: rendezvous control or a put-with-immediate notice.
    pub(super) fn handle_control(&mut self, source: Rank, header: SlotHeader) {
        let control = self.tagged.get().on_control(source, header, &mut self.cq);
        match control {
            Ok(Some(fetch)) => self.rndv_fetch(fetch),
            Ok(None) => {}
            Err(e) => self.malformed.push(e),
        }
    }

    /// Takes in up to `DRAIN_BATCH` published messages of the FIFO, in order, freeing each
    /// slot once read. Eager data goes straight from the slot to the matching receive (or to
    /// the unexpected queue); an empty or busy poll reads one seq word.
    pub(super) fn drain_fifo(&mut self) {
        let start = self.rx_tail;
        let mut tail = start;
        while tail - start < DRAIN_BATCH {
            match self.own.fifo().peek(tail) {
                Slot::Published(owner) => {
                    self.take(tail, owner.source());
                    self.own.fifo().release(tail);
                }
                Slot::Claimed(owner) => {
                    if !self.free_dead_claim(tail, owner) {
                        break;
                    }
                }
                Slot::Empty => break,
            }
            tail += 1;
        }
        self.rx_tail = tail;
        self.send_adverts();
    }

    /// `take_eager_into` straight from the FIFO: with nothing queued in the tagged state, the
    /// next published slot, if it is eager data from `source` under `tag` that fits `buf` and
    /// `accept` wants, is copied into `buf` and released (no unexpected entry on the way).
    /// Anything else is left for `drain_fifo`, and `NoneArrived` returned.
    #[inline(always)]
    pub(super) fn take_eager_in_place(
        &mut self,
        source: Source,
        tag: TagMatch,
        buf: &mut [u8],
        accept: &dyn Fn(Tag, usize) -> bool,
    ) -> EagerTake {
        let pos = self.rx_tail;
        let fifo = self.own.fifo();
        let Slot::Published(owner) = fifo.peek(pos) else { return EagerTake::NoneArrived };
        let sender = owner.source();
        let stamped = fifo.incarnation(pos);
        let accepted = self.peers.get(sender as usize).is_some_and(|p| p.mapped && p.incarnation == stamped);
        let Some((arrived, len)) = fifo.eager(pos) else { return EagerTake::NoneArrived };
        let wanted = accepted
            && source.matches(sender)
            && tag.matches(arrived)
            && len <= self.layout.max_payload()
            && len <= buf.len()
            && accept(arrived, len);
        if !wanted {
            return EagerTake::NoneArrived;
        }
        // SAFETY: position `pos` is published and not yet released; `len` was checked against
        // the slot's payload room.
        buf[..len].copy_from_slice(unsafe { fifo.eager_payload(pos, len) });
        fifo.release(pos);
        self.rx_tail = pos + 1;
        self.tagged.get().count_arrival(sender);
        EagerTake::Landed { source: sender, tag: arrived, len }
    }

    /// Sends the adverts the tagged layer queued (a dead peer needs none); free while none is.
    #[inline(always)]
    pub(super) fn send_adverts(&mut self) {
        loop {
            let Some((dest, header)) = self.tagged.get().pop_advert() else { break };
            let _ = self.push_msg(dest, header, &[], None);
        }
    }

    /// Delivers published position `pos` from `source` if it carries the incarnation we
    /// accepted for that source; a dead incarnation's (or forged) message is dropped unread.
    #[inline(always)]
    fn take(&mut self, pos: u64, source: Rank) {
        let fifo = self.own.fifo();
        let stamped = fifo.incarnation(pos);
        let known = self.sent_by_mapped(source, stamped);
        // A host space's first message from a sender maps it (`host`).
        if !known && (!self.admit(source) || self.peers[source as usize].incarnation != stamped) {
            return;
        }
        let fifo = self.own.fifo();
        let max_payload = self.layout.max_payload();
        match fifo.eager(pos) {
            Some((tag, len)) if len <= max_payload => {
                // SAFETY: position `pos` is published and not yet released; `len` was checked
                // against the slot's payload room.
                let payload = unsafe { fifo.eager_payload(pos, len) };
                self.tagged.get().on_eager(source, tag, payload, &mut self.cq);
            }
            Some((_, len)) => self.malformed.push(TransportError::Malformed {
                what: "message",
                detail: format!("eager length {len} from rank {source} exceeds {max_payload}"),
            }),
            None => {
                let header = fifo.read_header(pos);
                self.handle_control(source, header);
            }
        }
    }

    /// The claim at `pos` is not published yet: true when its owner is dead (or an older
    /// incarnation than the one we accept, or no rank at all) and the slot was freed, so we may
    /// read on. A live owner is writing: wait for it.
    fn free_dead_claim(&mut self, pos: u64, owner: fifo::Owner) -> bool {
        let source = owner.source();
        self.admit(source);
        let dead = self.dying.contains(&source)
            || self.peers.get(source as usize).is_none_or(|p| {
                !p.mapped || p.state == PeerState::Dead || !owner.is_incarnation(p.incarnation)
            });
        dead && self.own.fifo().free_dead_claim(pos, owner)
    }

    /// Marks peers dead whose process exited or who closed, and fails what depended on them.
    pub(super) fn check_liveness(&mut self) {
        self.last_liveness = CoarseInstant::now();
        let newly_dead: Vec<usize> = (0..self.peers.len())
            .filter(|&rank| {
                let peer = &self.peers[rank];
                let closed = peer.view.closed().load(Ordering::Acquire) != 0;
                let exited = peer.watch.as_ref().is_some_and(|w| !w.alive());
                peer.state != PeerState::Dead && (closed || exited)
            })
            .collect();
        if newly_dead.is_empty() {
            return;
        }
        // What a peer published before it died (a clean exit's last words) may have landed
        // since the last drain: deliver it to the receives posted for it before failing them.
        // Their unpublished claims are not waited on. Bounded: live senders may keep the FIFO
        // busy, but what the dead published lies within one FIFO's length of the tail.
        self.dying = newly_dead.iter().map(|&r| r as Rank).collect();
        for _ in 0..self.layout.fifo_slots as u64 / DRAIN_BATCH + 2 {
            let before = self.rx_tail;
            self.drain_fifo();
            if self.rx_tail == before {
                break;
            }
        }
        self.dying.clear();
        for rank in newly_dead {
            self.mark_dead(rank as Rank);
        }
    }

    pub(super) fn mark_dead(&mut self, rank: Rank) {
        let Some(peer) = self.peers.get_mut(rank as usize) else { return };
        peer.state = PeerState::Dead;
        let dead = TransportError::PeerDead(rank);
        self.backlogged -= peer.backlog.len();
        for q in peer.backlog.drain(..) {
            if let Some(c) = q.done {
                self.cq.push(Completion::failed(c.op, c.kind, dead.clone()));
            }
        }
        self.tagged.get().fail_peer(rank, &dead, &mut self.cq);
        self.maps.retain(|(owner, _), _| *owner != rank);
        self.last_map = None;
    }

    pub(super) fn liveness_due(&self) -> bool {
        self.last_liveness.elapsed() >= self.config.peer_timeout / 4
    }
}
