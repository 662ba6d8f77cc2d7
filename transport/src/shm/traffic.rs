//! The shm provider's message traffic: completing operations, publishing into peers' rings
//! (with the backlog when a ring is full), draining this rank's rings, rendezvous reads, and
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

    /// Queues a message for `dest`: straight into its ring if there is room and nothing is
    /// waiting ahead of it, else into the backlog (drained by `progress`). `done` is queued
    /// when the message is in the peer's ring, not before: a sender that stops progressing
    /// must not believe a backlogged message is on its way.
    pub(super) fn push_msg(
        &mut self,
        dest: Rank,
        header: SlotHeader,
        payload: &[u8],
        done: Option<Completion>,
    ) -> Result<()> {
        let slots = self.layout.ring_slots as u64;
        // `let else`, not `ok_or`: building the unused error costs a drop call per message.
        let Some(peer) = self.peers.get_mut(dest as usize) else {
            return Err(TransportError::InvalidRank(dest, self.job.size));
        };
        if peer.state == PeerState::Dead {
            return Err(TransportError::PeerDead(dest));
        }
        let (me, epoch) = (self.job.rank, self.job.incarnation);
        if peer.backlog.is_empty() && Self::ring_has_room(peer, me, epoch, slots) {
            Self::publish(peer, me, epoch, &header, payload);
            self.cq.extend(done);
        } else {
            peer.backlog.push_back(Queued { header, payload: payload.to_vec(), done });
            self.backlogged += 1;
        }
        Ok(())
    }

    /// Whether our ring in `peer`'s segment has a free slot; re-reads the consumer's head only
    /// when the cached one says full, or until the consumer has accepted our incarnation.
    pub(super) fn ring_has_room(peer: &mut Peer, me: Rank, epoch: u32, slots: u64) -> bool {
        if peer.tx_accepted && peer.tx_tail - peer.tx_head_seen < slots {
            return true;
        }
        let Some(head) = peer.view.ring(me).head_for(epoch) else { return false };
        peer.tx_accepted = true;
        peer.tx_head_seen = head.min(peer.tx_tail);
        peer.tx_tail - peer.tx_head_seen < slots
    }

    pub(super) fn publish(peer: &mut Peer, me: Rank, epoch: u32, header: &SlotHeader, payload: &[u8]) {
        let ring = peer.view.ring(me);
        ring.publish(epoch, peer.tx_tail, header, payload);
        peer.tx_tail += 1;
        Self::wake(peer);
    }

    /// After a publish: wakes `peer` if it sleeps on its doorbell.
    #[inline(always)]
    pub(super) fn wake(peer: &Peer) {
        // Dekker with a sleeper: our publish, then its waiters flag (see `block`). Ranks that
        // never sleep skip the fence.
        if peer.may_sleep {
            fence(Ordering::SeqCst);
        }
        if peer.view.waiters().load(Ordering::Relaxed) > 0 {
            peer.view.doorbell().fetch_add(1, Ordering::Release);
            futex::wake_all(peer.view.doorbell());
        }
    }

    /// Publishes what waits in the backlogs as ring space allows; free while none waits.
    #[inline(always)]
    pub(super) fn flush_backlogs(&mut self) {
        if self.backlogged > 0 {
            self.flush_backlogged();
        }
    }

    pub(super) fn flush_backlogged(&mut self) {
        let (me, epoch) = (self.job.rank, self.job.incarnation);
        let slots = self.layout.ring_slots as u64;
        for peer in self.peers.iter_mut().filter(|p| !p.backlog.is_empty()) {
            while !peer.backlog.is_empty() {
                if peer.state == PeerState::Dead || !Self::ring_has_room(peer, me, epoch, slots) {
                    break;
                }
                if let Some(q) = peer.backlog.pop_front() {
                    self.backlogged -= 1;
                    Self::publish(peer, me, epoch, &q.header, &q.payload);
                    self.cq.extend(q.done);
                }
            }
        }
    }

    /// Receiver side of rendezvous: read the sender's buffer in place, then tell it (FIN).
    pub(super) fn rndv_fetch(&mut self, f: Fetch) {
        let Fetch { recv, source, rts } = f;
        let len = rts.len as usize;
        let remote = RemoteRegion { owner: source, addr: rts.r_addr, len: rts.r_len, key: rts.r_key };
        let result = if len > recv.buffer.capacity() {
            Err(TransportError::Truncated { len: rts.len, capacity: recv.buffer.capacity() as u64 })
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
        }
    }

    /// A slot that is not eager data: rendezvous control or a put-with-immediate notice.
    pub(super) fn handle_control(&mut self, source: Rank, header: SlotHeader) {
        match header.kind {
            kind::RTS => {
                if let Some(fetch) = self.tagged.on_rts(source, header) {
                    self.rndv_fetch(fetch);
                }
            }
            kind::FIN => {
                if let Err(e) = self.tagged.on_fin(source, &header, &mut self.cq) {
                    self.malformed.push(e);
                }
            }
            kind::IMM => self.cq.push(Completion::ok(
                OpId::REMOTE,
                CompletionKind::Imm { source, imm: header.imm, len: header.len as usize },
            )),
            other => self.malformed.push(TransportError::Malformed {
                what: "message",
                detail: format!("unknown kind {other} from rank {source}"),
            }),
        }
    }

    pub(super) fn drain_rings(&mut self) {
        for source in 0..self.peers.len() {
            // A dead peer's ring is still drained: what it published before dying is whole
            // (and a clean exit's last words must arrive). Its next incarnation writes only
            // after `reconnect` moved this ring to the new epoch.
            let peer = &self.peers[source];
            if peer.mapped && self.own.ring(source as u32).published(peer.incarnation, peer.rx_head) {
                self.drain_ring(source);
            }
        }
    }

    /// Takes in up to `DRAIN_BATCH` published slots of `source`'s ring, then releases them
    /// with one store. Eager data goes straight from the slot to the matching receive (or to
    /// the unexpected queue); the ring is borrowed field by field, so an empty or busy poll
    /// clones nothing.
    pub(super) fn drain_ring(&mut self, source: usize) {
        let max_payload = self.layout.max_payload();
        let (start, epoch) = (self.peers[source].rx_head, self.peers[source].incarnation);
        let mut head = start;
        while head - start < DRAIN_BATCH {
            let ring = self.own.ring(source as u32);
            if !ring.published(epoch, head) {
                break;
            }
            match ring.eager(head) {
                Some((tag, len)) if len <= max_payload => {
                    // SAFETY: slot `head` is published and not yet released; `len` was checked
                    // against the slot's payload room.
                    let payload = unsafe { ring.eager_payload(head, len) };
                    self.tagged.on_eager(source as Rank, tag, payload, &mut self.cq);
                }
                Some((_, len)) => self.malformed.push(TransportError::Malformed {
                    what: "message",
                    detail: format!("eager length {len} from rank {source} exceeds {max_payload}"),
                }),
                None => {
                    let header = ring.read_header(head);
                    self.handle_control(source as Rank, header);
                }
            }
            head += 1;
        }
        self.peers[source].rx_head = head;
        self.own.ring(source as u32).release(epoch, head);
    }

    /// Marks peers dead whose process exited or who closed, and fails what depended on them.
    pub(super) fn check_liveness(&mut self) {
        self.last_liveness = Instant::now();
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
        loop {
            let before: Vec<u64> = newly_dead.iter().map(|&r| self.peers[r].rx_head).collect();
            self.drain_rings();
            if newly_dead.iter().zip(&before).all(|(&r, &head)| self.peers[r].rx_head == head) {
                break;
            }
        }
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
        self.tagged.fail_peer(rank, &dead, &mut self.cq);
        self.maps.retain(|(owner, _), _| *owner != rank);
        self.last_map = None;
    }

    pub(super) fn liveness_due(&self) -> bool {
        self.last_liveness.elapsed() >= self.config.peer_timeout / 4
    }
}
