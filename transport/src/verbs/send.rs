//! The verbs provider's send side: posting work requests, send-queue and credit accounting,
//! eager sends (inline, zero-copy or bounced), the backlog, credit returns, and RMA posts.

use super::*;
use qp::SendWr;

/// A send-queue WR before posting: what it is for and what it does.
pub(super) struct Wr<'a> {
    pub(super) info: WrInfo,
    pub(super) op: Opcode,
    pub(super) sges: &'a [Sge],
    pub(super) remote: Option<(u64, u32)>,
    pub(super) inline: bool,
}

impl VerbsProvider {
    /// Posts a send-queue WR to `peer`, recording what it was for.
    pub(super) fn post(
        &mut self,
        peer: Rank,
        info: WrInfo,
        op: Opcode,
        sges: &[Sge],
        remote: Option<(u64, u32)>,
        inline: bool,
    ) -> Result<()> {
        self.post_list(peer, [Wr { info, op, sges, remote, inline }])
    }

    /// Posts `wrs` to `peer` in one call (one doorbell), recording what each was for.
    /// Selective signalling: a WR is signaled only when its owner needs the completion (a
    /// signaled RMA, a zero-copy send, a rendezvous read, a probe), when it takes the peer's
    /// last free TX bounce slot, or when `sq_depth / 4` WRs in a row went unsignaled; an
    /// unsignaled WR is retired by the next signaled completion (`on_send_completion`), and a
    /// failed one completes anyway (errors are always reported).
    pub(super) fn post_list<const N: usize>(&mut self, peer: Rank, wrs: [Wr<'_>; N]) -> Result<()> {
        let every = (self.sq_depth / 4).max(1) as u32;
        let slots = self.slots;
        let p = &mut self.peers[peer as usize];
        let mut unsignaled = p.unsignaled;
        let mut signaled = [false; N];
        for (flag, w) in signaled.iter_mut().zip(&wrs) {
            let wants = match w.info {
                WrInfo::Rma { signal, .. } => signal == Signal::Yes,
                WrInfo::Msg { bounce } => bounce && p.tx_used - p.tx_done >= slots,
                WrInfo::Credit => false,
                WrInfo::MsgZeroCopy { .. } | WrInfo::RndvRead { .. } | WrInfo::Probe => true,
            };
            *flag = wants || unsignaled + 1 >= every;
            unsignaled = if *flag { 0 } else { unsignaled + 1 };
        }
        let (generation, first) = (p.generation, p.next_seq);
        let id = |i: usize| {
            (generation << GEN_SHIFT) | ((peer as u64) << PEER_SHIFT) | ((first + i as u64) & SEQ_MASK)
        };
        let raw: [SendWr<'_>; N] = std::array::from_fn(|i| SendWr {
            wr_id: id(i),
            op: wrs[i].op,
            sges: wrs[i].sges,
            remote: wrs[i].remote,
            signaled: signaled[i],
            inline: wrs[i].inline,
        });
        p.qp.as_mut().ok_or(TransportError::PeerDead(peer))?.post_send(&raw)?;
        p.unsignaled = unsignaled;
        p.next_seq += N as u64;
        for (i, w) in wrs.into_iter().enumerate() {
            p.sq.push_back(((first + i as u64) & SEQ_MASK, w.info));
        }
        Ok(())
    }

    /// Retires `peer`'s unsignaled WRs: a signaled zero-byte write behind them (closing).
    pub(super) fn flush_unsignaled(&mut self, peer: Rank) -> Result<()> {
        let p = &self.peers[peer as usize];
        if p.unsignaled == 0 || p.state == PeerState::Dead || !p.ready || p.sq.len() + 2 >= self.sq_depth {
            return Ok(());
        }
        let target = p.credit_target;
        self.post(peer, WrInfo::Probe, Opcode::Write, &[], Some(target), false)
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

    /// Queues `item` for `dest` behind what waits already; a peer not connected yet starts
    /// connecting (`connect.rs`).
    pub(super) fn enqueue(&mut self, dest: Rank, item: Outgoing) {
        self.backlogged += 1;
        let p = &mut self.peers[dest as usize];
        p.backlog_rma += matches!(item, Outgoing::Rma { .. }) as usize;
        p.backlog.push_back(item);
        if !self.peers[dest as usize].ready {
            self.connect_start(dest);
        }
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
            self.enqueue(dest, Outgoing::Msg { header, payload: payload.to_vec(), done });
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
        self.tagged.get().count_send(dest);
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
        self.tagged.get().count_send(dest);
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
        let msg = Wr {
            info: WrInfo::Msg { bounce: !inline },
            op: Opcode::Send,
            sges: &sges[..count],
            remote: None,
            inline,
        };
        // Credits this peer is owed ride along in the same post (one doorbell).
        let p = &self.peers[dest as usize];
        if p.rx_consumed - p.rx_credit_sent >= (self.slots / 4).max(1) {
            let (credit_sge, credit) = self.credit_wr(dest)?;
            self.post_list(dest, [Wr { sges: std::slice::from_ref(&credit_sge), ..credit }, msg])?;
            self.peers[dest as usize].rx_credit_sent = self.peers[dest as usize].rx_consumed;
        } else {
            self.post_list(dest, [msg])?;
        }
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
        let inline = len > 0 && len <= self.max_inline as usize;
        self.post(dest, info, Opcode::WriteImm(imm), sges, Some(remote), inline)?;
        self.peers[dest as usize].sent += 1;
        Ok(())
    }

    pub(super) fn flush_backlogs(&mut self) -> Result<()> {
        for dest in 0..self.peers.len() as Rank {
            while let Some(front) = self.peers[dest as usize].backlog.front() {
                if self.peers[dest as usize].state == PeerState::Dead || !self.peers[dest as usize].ready {
                    break;
                }
                // (inline, takes a receive slot at the peer)
                let (inline, slot) = match front {
                    Outgoing::Msg { header, payload, .. } => {
                        (header.wire_len() + payload.len() <= self.max_inline as usize, true)
                    }
                    Outgoing::WriteImm { .. } => (true, true),
                    Outgoing::Rma { .. } => (true, false),
                };
                let p = &self.peers[dest as usize];
                let room = (!slot || self.has_credit(dest))
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
                    rma @ Outgoing::Rma { .. } => {
                        self.peers[dest as usize].backlog_rma -= 1;
                        self.rma_now(dest, rma)?
                    }
                    other => self.write_imm_now(dest, other)?,
                }
            }
        }
        Ok(())
    }

    /// Returns receive credits to `peer` on their own once half of its share is free again
    /// (from a quarter on, they ride along with the next message to it: `send_msg_now`).
    pub(super) fn return_credits(&mut self, peer: Rank) -> Result<()> {
        let p = &self.peers[peer as usize];
        let due = p.rx_consumed - p.rx_credit_sent;
        if due < (self.slots / 2).max(1) || p.state == PeerState::Dead || !p.ready {
            return Ok(());
        }
        if p.sq.len() + 2 >= self.sq_depth {
            self.credits_deferred = true; // retried by the next progress
            return Ok(());
        }
        let (sge, credit) = self.credit_wr(peer)?;
        self.post_list(peer, [Wr { sges: std::slice::from_ref(&sge), ..credit }])?;
        self.peers[peer as usize].rx_credit_sent = self.peers[peer as usize].rx_consumed;
        Ok(())
    }

    /// The credit return for `peer` (its cumulative consumed count, an 8-byte RDMA write into
    /// its credit word for us): the SGE, and the WR with an empty SGE list to point at it.
    /// Inline where the device allows, so the source word may change at once.
    pub(super) fn credit_wr(&mut self, peer: Rank) -> Result<(Sge, Wr<'static>)> {
        let value = self.peers[peer as usize].rx_consumed;
        self.credit_src.write(8 * peer as usize, &value.to_le_bytes())?;
        let sge = Sge {
            addr: self.credit_src.as_ptr() as u64 + 8 * peer as u64,
            len: 8,
            lkey: self.credit_src.local_key(),
        };
        let remote = Some(self.peers[peer as usize].credit_target);
        let inline = self.max_inline >= 8;
        Ok((sge, Wr { info: WrInfo::Credit, op: Opcode::Write, sges: &[], remote, inline }))
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
        if !region.access().allows(Access::REMOTE_READ) {
            return Err(TransportError::AccessDenied { op: "rendezvous send", needed: "remote read" });
        }
        if let Some(op) = self.try_direct(owner, dest, tag, region, offset, len)? {
            return Ok(op);
        }
        let op = self.completions.next_op(owner);
        self.push_msg(dest, SlotHeader::rts(tag, len, op.0, &region.remote(), offset), &[], None)?;
        self.tagged.get().count_send(dest);
        self.tagged.get().add_pending(op, dest, tag, len, Some(region));
        Ok(op)
    }

    /// A message above the threshold into the buffer the receiver advertised for it: an RDMA
    /// WRITE and the DIRECT_FIN in one post list (RC executes them in order, so the data is
    /// placed before the receiver sees the notification); the send completes with the WRITE.
    /// None (nothing posted) without a usable advert, or without room to post both now.
    fn try_direct(
        &mut self,
        owner: Owner,
        dest: Rank,
        tag: Tag,
        region: &Region,
        offset: usize,
        len: usize,
    ) -> Result<Option<OpId>> {
        let Some(d) = self.tagged.get().direct_for(dest, tag, len) else { return Ok(None) };
        let fin_inline = SLOT_HEADER_LEN <= self.max_inline as usize;
        let p = &self.peers[dest as usize];
        // The key names the owner's incarnation, as for puts.
        let stale_key = !mr::key_of_incarnation(d.remote.key, p.incarnation);
        if stale_key || len as u64 > self.max_msg || p.sq.len() + 3 >= self.sq_depth {
            return Ok(None);
        }
        if !self.can_send_now(dest, !fin_inline) {
            return Ok(None);
        }
        let op = self.completions.next_op(owner);
        let mut bytes = [0u8; SLOT_HEADER_LEN];
        let header_len = d.fin(tag, len).encode_wire(&mut bytes) as u32;
        let fin_sge = if fin_inline {
            // Copied at post time: the SGE may point at the stack.
            Sge { addr: bytes.as_ptr() as u64, len: header_len, lkey: 0 }
        } else {
            let slot = self.claim_tx_slot(dest);
            self.tx_ring.write(slot, &bytes[..header_len as usize])?;
            Sge {
                addr: self.tx_ring.as_ptr() as u64 + slot as u64,
                len: header_len,
                lkey: self.tx_ring.local_key(),
            }
        };
        let data =
            Sge { addr: region.as_ptr() as u64 + offset as u64, len: len as u32, lkey: region.local_key() };
        let kind = CompletionKind::Send { dest, tag, len };
        let write = Wr {
            info: WrInfo::Rma { op, kind, signal: Signal::Yes, _local: region.clone() },
            op: Opcode::Write,
            sges: std::slice::from_ref(&data),
            remote: Some((d.remote.addr.wrapping_add(d.offset), mr::rkey_of(d.remote.key))),
            inline: false,
        };
        let fin = Wr {
            info: WrInfo::Msg { bounce: !fin_inline },
            op: Opcode::Send,
            sges: std::slice::from_ref(&fin_sge),
            remote: None,
            inline: fin_inline,
        };
        self.post_list(dest, [write, fin])?;
        self.peers[dest as usize].sent += 1;
        self.tagged.get().count_send(dest);
        Ok(Some(op))
    }

    /// Sends the adverts the tagged layer queued (a dead peer needs none).
    #[inline(always)]
    pub(super) fn send_adverts(&mut self) {
        loop {
            let next = self.tagged.get().pop_advert();
            let Some((dest, header)) = next else { return };
            let _ = self.push_msg(dest, header, &[], None);
        }
    }

    /// Checks an RMA at the initiator and returns (local SGE, remote address, rkey).
    pub(super) fn rma_args(&self, op: &'static str, rma: &Rma<'_>) -> Result<(Sge, (u64, u32))> {
        rma.local.check_bounds(op, rma.local_offset, rma.len)?;
        rma.remote.check_bounds(op, rma.remote_offset, rma.len as u64)?;
        let owner = self.live_peer(rma.remote.owner)?;
        // The key names the owner's incarnation: a dead one's descriptors are refused.
        if !mr::key_of_incarnation(rma.remote.key, owner.incarnation) {
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
        Ok((sge, (rma.remote.addr + rma.remote_offset, mr::rkey_of(rma.remote.key))))
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
        let (_, remote) = self.rma_args(name, &rma)?;
        let peer = rma.remote.owner;
        // Behind puts and gets that waited for the connection, in order.
        let p = &self.peers[peer as usize];
        let ready = p.ready && p.backlog_rma == 0;
        if ready {
            self.reserve_sq(peer)?;
        }
        let op = self.completions.next_op(owner);
        let (local, local_offset, len) = (rma.local.clone(), rma.local_offset, rma.len);
        let item = Outgoing::Rma { op, kind, signal, opcode, local, local_offset, remote, len };
        if ready {
            self.rma_now(peer, item)?;
        } else {
            self.enqueue(peer, item);
        }
        Ok(op)
    }

    /// Posts a put or get (`Outgoing::Rma`) to `peer`, whose send queue has room.
    pub(super) fn rma_now(&mut self, peer: Rank, o: Outgoing) -> Result<()> {
        let Outgoing::Rma { op, kind, signal, opcode, local, local_offset, remote, len } = o else {
            return Ok(());
        };
        let sge = Sge {
            addr: local.as_ptr() as u64 + local_offset as u64,
            len: len as u32,
            lkey: local.local_key(),
        };
        let inline = matches!(opcode, Opcode::Write) && len <= self.max_inline as usize && len > 0;
        let sges: &[Sge] = if len == 0 { &[] } else { std::slice::from_ref(&sge) };
        let info = WrInfo::Rma { op, kind, signal, _local: local };
        self.post(peer, info, opcode, sges, Some(remote), inline)
    }
}
