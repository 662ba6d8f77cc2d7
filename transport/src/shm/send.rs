//! Tagged sends: eager through the peer's FIFO, rendezvous (staged, lent or into an advertised
//! buffer), and the fault-injection hooks that write into a FIFO.

use super::*;

impl ShmProvider {
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
    pub(super) fn send_eager(&mut self, owner: Owner, dest: Rank, tag: Tag, data: &[u8]) -> Result<OpId> {
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
    pub(super) fn try_publish_eager(&mut self, dest: Rank, tag: Tag, data: &[u8]) -> Result<bool> {
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

    pub(super) fn start_send(
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
    pub(super) fn try_lend(
        &mut self,
        owner: Owner,
        dest: Rank,
        tag: Tag,
        data: &[u8],
    ) -> Result<Option<OpId>> {
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
    pub(super) fn try_direct(
        &mut self,
        owner: Owner,
        dest: Rank,
        tag: Tag,
        data: &[u8],
    ) -> Result<Option<OpId>> {
        let Some(d) = self.tagged.get().direct_for(dest, tag, data.len()) else { return Ok(None) };
        self.send_direct(owner, dest, tag, data, &d)
    }

    pub(super) fn send_direct(
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
