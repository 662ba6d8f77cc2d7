//! The verbs provider's send side: posting work requests, send-queue and credit accounting,
//! eager sends (inline, zero-copy or bounced), the backlog, credit returns, and RMA posts.

use super::*;

impl VerbsProvider {
    /// Posts a send-queue WR to `peer`, recording what it was for. Signals when the caller
    /// needs the completion, and every quarter queue so slots are reclaimed.
    pub(super) fn post(
        &mut self,
        peer: Rank,
        info: WrInfo,
        op: Opcode,
        sges: &[Sge],
        remote: Option<(u64, u32)>,
        inline: bool,
    ) -> Result<()> {
        let depth = self.sq_depth;
        let wr_id = self.wr_id(peer, self.peers[peer as usize].next_seq);
        let p = &mut self.peers[peer as usize];
        let wants = !matches!(info, WrInfo::Rma { signal: Signal::No, .. } | WrInfo::Credit);
        let signaled = wants || p.sq.len() % (depth / 4).max(1) == (depth / 4).max(1) - 1;
        let seq = p.next_seq;
        p.qp.post_send(wr_id, op, sges, remote, signaled, inline)?;
        p.next_seq += 1;
        p.sq.push_back((seq & SEQ_MASK, info));
        Ok(())
    }

    /// Waits (bounded) until `peer`'s send queue has room.
    pub(super) fn reserve_sq(&mut self, peer: Rank) -> Result<()> {
        let start = Instant::now();
        while self.peers[peer as usize].sq.len() + 2 >= self.sq_depth {
            self.poll_cq()?;
            self.live_peer(peer)?;
            if start.elapsed() > self.config.peer_timeout * 4 {
                return Err(TransportError::Timeout(self.config.peer_timeout * 4));
            }
        }
        Ok(())
    }

    pub(super) fn can_send_now(&self, peer: Rank, needs_bounce: bool) -> bool {
        let p = &self.peers[peer as usize];
        p.ready
            && p.backlog.is_empty()
            && self.has_credit(peer)
            && p.sq.len() + 2 < self.sq_depth
            && (!needs_bounce || p.tx_used - p.tx_done < self.slots)
    }

    /// Sends an eager message (data or control) now, or queues it behind earlier ones.
    /// `done` is reported once the message is posted, never while it waits in the backlog.
    pub(super) fn push_msg(
        &mut self,
        dest: Rank,
        header: SlotHeader,
        payload: &[u8],
        done: Option<Completion>,
    ) -> Result<()> {
        self.live_peer(dest)?;
        let total = header.wire_len() + payload.len();
        let inline = total <= self.max_inline as usize;
        if !self.can_send_now(dest, !inline) {
            self.backlogged += 1;
            self.peers[dest as usize].backlog.push_back(Outgoing::Msg {
                header,
                payload: payload.to_vec(),
                done,
            });
            return Ok(());
        }
        self.send_msg_now(dest, &header, payload, inline)?;
        self.completions.extend(done);
        Ok(())
    }

    /// An eager tagged send: one receive slot at the peer.
    pub(super) fn send_eager(&mut self, owner: Owner, dest: Rank, tag: Tag, data: &[u8]) -> Result<OpId> {
        let op = self.completions.next_op(owner);
        let done = Completion::ok(op, CompletionKind::Send { dest, tag, len: data.len() });
        self.push_msg(dest, SlotHeader::eager(tag, data.len()), data, Some(done))?;
        Ok(op)
    }

    /// Takes the next TX bounce slot for `dest` (the caller checked one is free) and returns its
    /// offset in the TX ring.
    pub(super) fn claim_tx_slot(&mut self, dest: Rank) -> usize {
        let p = &mut self.peers[dest as usize];
        let slot = (dest as u64 * self.slots + p.tx_used % self.slots) as usize * self.slot_size;
        p.tx_used += 1;
        slot
    }

    /// An eager send too big to inline: the header from a bounce slot, the payload straight
    /// from the registered region (no copy), so the region must stay unchanged until the Send
    /// completion, which comes with the SEND's.
    pub(super) fn send_eager_zero_copy(
        &mut self,
        owner: Owner,
        dest: Rank,
        tag: Tag,
        region: &Region,
        offset: usize,
        len: usize,
    ) -> Result<OpId> {
        let op = self.completions.next_op(owner);
        let mut bytes = [0u8; SLOT_HEADER_LEN];
        let header_len = SlotHeader::eager(tag, len).encode_wire(&mut bytes);
        let slot = self.claim_tx_slot(dest);
        self.tx_ring.write(slot, &bytes[..header_len])?;
        let sges = [
            Sge {
                addr: self.tx_ring.as_ptr() as u64 + slot as u64,
                len: header_len as u32,
                lkey: self.tx_ring.local_key(),
            },
            Sge { addr: region.as_ptr() as u64 + offset as u64, len: len as u32, lkey: region.local_key() },
        ];
        let info = WrInfo::MsgZeroCopy { op, dest, tag, len, _region: region.clone() };
        self.post(dest, info, Opcode::Send, &sges[..if len == 0 { 1 } else { 2 }], None, false)?;
        self.peers[dest as usize].sent += 1;
        Ok(op)
    }

    pub(super) fn send_msg_now(
        &mut self,
        dest: Rank,
        header: &SlotHeader,
        payload: &[u8],
        inline: bool,
    ) -> Result<()> {
        let mut bytes = [0u8; SLOT_HEADER_LEN];
        let header_len = header.encode_wire(&mut bytes);
        let total = header_len + payload.len();
        let mut sges = [Sge { addr: 0, len: 0, lkey: 0 }; 2];
        let count = if inline {
            // Copied at post time, so the SGEs may point at the stack and the caller's bytes.
            sges[0] = Sge { addr: bytes.as_ptr() as u64, len: header_len as u32, lkey: 0 };
            sges[1] = Sge { addr: payload.as_ptr() as u64, len: payload.len() as u32, lkey: 0 };
            if payload.is_empty() {
                1
            } else {
                2
            }
        } else {
            let slot = self.claim_tx_slot(dest);
            self.tx_ring.write(slot, &bytes[..header_len])?;
            self.tx_ring.write(slot + header_len, payload)?;
            let addr = self.tx_ring.as_ptr() as u64 + slot as u64;
            sges[0] = Sge { addr, len: total as u32, lkey: self.tx_ring.local_key() };
            1
        };
        self.post(dest, WrInfo::Msg { bounce: !inline }, Opcode::Send, &sges[..count], None, inline)?;
        self.peers[dest as usize].sent += 1;
        Ok(())
    }

    pub(super) fn write_imm_now(&mut self, dest: Rank, o: Outgoing) -> Result<()> {
        let Outgoing::WriteImm { op, signal, local, local_offset, remote, len, imm } = o else {
            return Ok(());
        };
        let sge = Sge {
            addr: local.as_ptr() as u64 + local_offset as u64,
            len: len as u32,
            lkey: local.local_key(),
        };
        let sges: &[Sge] = if len == 0 { &[] } else { std::slice::from_ref(&sge) };
        let info = WrInfo::Rma { op, kind: CompletionKind::PutImm, signal, _local: local.clone() };
        self.post(dest, info, Opcode::WriteImm(imm), sges, Some(remote), false)?;
        self.peers[dest as usize].sent += 1;
        Ok(())
    }

    pub(super) fn flush_backlogs(&mut self) -> Result<()> {
        for dest in 0..self.peers.len() as Rank {
            while let Some(front) = self.peers[dest as usize].backlog.front() {
                if self.peers[dest as usize].state == PeerState::Dead || !self.peers[dest as usize].ready {
                    break;
                }
                let inline = match front {
                    Outgoing::Msg { header, payload, .. } => {
                        header.wire_len() + payload.len() <= self.max_inline as usize
                    }
                    Outgoing::WriteImm { .. } => true,
                };
                let p = &self.peers[dest as usize];
                let room = self.has_credit(dest)
                    && p.sq.len() + 2 < self.sq_depth
                    && (inline || p.tx_used - p.tx_done < self.slots);
                if !room {
                    break;
                }
                let Some(item) = self.peers[dest as usize].backlog.pop_front() else { break };
                self.backlogged -= 1;
                match item {
                    Outgoing::Msg { header, payload, done } => {
                        self.send_msg_now(dest, &header, &payload, inline)?;
                        self.completions.extend(done);
                    }
                    other => self.write_imm_now(dest, other)?,
                }
            }
        }
        Ok(())
    }

    /// Returns receive credits to `peer` once a quarter of its slots are free again.
    pub(super) fn return_credits(&mut self, peer: Rank) -> Result<()> {
        let p = &self.peers[peer as usize];
        let due = p.rx_consumed - p.rx_credit_sent;
        if due < (self.slots / 4).max(1) || p.state == PeerState::Dead || !p.ready {
            return Ok(());
        }
        if p.sq.len() + 2 >= self.sq_depth {
            self.credits_deferred = true; // retried by the next progress
            return Ok(());
        }
        let value = p.rx_consumed;
        self.credit_src.write(8 * peer as usize, &value.to_le_bytes())?;
        let sge = Sge {
            addr: self.credit_src.as_ptr() as u64 + 8 * peer as u64,
            len: 8,
            lkey: self.credit_src.local_key(),
        };
        let target = p.credit_target;
        self.post(peer, WrInfo::Credit, Opcode::Write, &[sge], Some(target), false)?;
        self.peers[peer as usize].rx_credit_sent = value;
        Ok(())
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
        self.live_peer(dest)?;
        if len <= self.config.rndv_thresh {
            if EAGER_WIRE_LEN + len > self.max_inline as usize && self.can_send_now(dest, true) {
                return self.send_eager_zero_copy(owner, dest, tag, region, offset, len);
            }
            return self.send_eager(owner, dest, tag, &region.to_vec(offset, len)?);
        }
        let op = self.completions.next_op(owner);
        if !region.access().allows(Access::REMOTE_READ) {
            return Err(TransportError::AccessDenied { op: "rendezvous send", needed: "remote read" });
        }
        self.push_msg(dest, SlotHeader::rts(tag, len, op.0, &region.remote(), offset), &[], None)?;
        self.tagged.add_pending(op, dest, tag, len, region);
        Ok(op)
    }

    /// Checks an RMA at the initiator and returns (local SGE, remote address, rkey).
    pub(super) fn rma_args(&self, op: &'static str, rma: &Rma<'_>) -> Result<(Sge, (u64, u32))> {
        rma.local.check_bounds(op, rma.local_offset, rma.len)?;
        rma.remote.check_bounds(op, rma.remote_offset, rma.len as u64)?;
        let owner = self.live_peer(rma.remote.owner)?;
        // The key's high half names the owner's incarnation: a dead one's descriptors are refused.
        if (rma.remote.key >> 32) as u32 != owner.incarnation {
            return Err(TransportError::InvalidKey { op, owner: rma.remote.owner, key: rma.remote.key });
        }
        if rma.len as u64 > self.max_msg {
            return Err(TransportError::OutOfBounds {
                op,
                offset: 0,
                len: rma.len as u64,
                region_len: self.max_msg,
            });
        }
        let sge = Sge {
            addr: rma.local.as_ptr() as u64 + rma.local_offset as u64,
            len: rma.len as u32,
            lkey: rma.local.local_key(),
        };
        Ok((sge, (rma.remote.addr + rma.remote_offset, rma.remote.key as u32)))
    }

    pub(super) fn rma(
        &mut self,
        owner: Owner,
        name: &'static str,
        rma: Rma<'_>,
        opcode: Opcode,
        kind: CompletionKind,
        signal: Signal,
    ) -> Result<OpId> {
        let (sge, remote) = self.rma_args(name, &rma)?;
        let peer = rma.remote.owner;
        self.await_ready(peer)?;
        self.reserve_sq(peer)?;
        let op = self.completions.next_op(owner);
        let inline = matches!(opcode, Opcode::Write) && rma.len <= self.max_inline as usize && rma.len > 0;
        let sges: &[Sge] = if rma.len == 0 { &[] } else { std::slice::from_ref(&sge) };
        let info = WrInfo::Rma { op, kind, signal, _local: rma.local.clone() };
        self.post(peer, info, opcode, sges, Some(remote), inline)?;
        Ok(op)
    }
}
