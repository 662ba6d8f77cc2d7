//! The verbs provider's receive and completion side: reposting receive slots, rendezvous
//! reads, incoming messages, polling the CQ and routing what it reports, failing a dead peer's
//! work, and the liveness probes.

use super::*;

impl VerbsProvider {
    /// Queues SRQ `slot` for the refill list; `from`: the peer whose message it held, which
    /// gets the credit back once the slot is posted again.
    pub(super) fn queue_refill(&mut self, slot: u64, from: Option<Rank>) {
        let addr = self.rx_ring.as_ptr() as u64 + slot * self.slot_size as u64;
        let sge = Sge { addr, len: self.slot_size as u32, lkey: self.rx_ring.local_key() };
        self.refill.push((RECV_FLAG | slot, sge));
        if let Some(peer) = from {
            let p = &mut self.peers[peer as usize];
            if p.rx_unposted == 0 {
                self.refill_peers.push(peer);
            }
            p.rx_unposted += 1;
        }
    }

    /// Reposts the slots this poll consumed (one list), then credits the peers that used them:
    /// a credit never names a slot that is not posted again.
    pub(super) fn refill_srq(&mut self) -> Result<()> {
        if self.refill.is_empty() {
            return Ok(());
        }
        let posted = self.srq.post(&self.refill);
        self.refill.clear();
        posted?;
        // By index, keeping the vector's allocation: this runs on every receive.
        for i in 0..self.refill_peers.len() {
            let peer = self.refill_peers[i];
            let p = &mut self.peers[peer as usize];
            p.rx_consumed += std::mem::take(&mut p.rx_unposted);
            self.return_credits(peer)?;
        }
        self.refill_peers.clear();
        Ok(())
    }

    /// The peer whose QP a receive completion came through.
    fn rank_of_qpn(&self, qpn: u32) -> Option<Rank> {
        self.qpn_rank.binary_search_by_key(&qpn, |&(q, _)| q).ok().map(|i| self.qpn_rank[i].1)
    }

    pub(super) fn complete_recv(
        &mut self,
        op: OpId,
        source: Rank,
        tag: Tag,
        len: usize,
        r: Result<Option<Vec<u8>>>,
    ) {
        self.completions.push(tagged::recv_completion(op, source, tag, len, r));
    }

    pub(super) fn send_fin(&mut self, dest: Rank, rts: &SlotHeader, status: u32) {
        let fin = SlotHeader {
            kind: kind::FIN,
            imm: status,
            cookie: rts.cookie,
            tag: rts.tag,
            ..Default::default()
        };
        // A dead sender needs no FIN.
        let _ = self.push_msg(dest, fin, &[], None);
    }

    /// Receiver side of rendezvous: RDMA-read the sender's buffer into the posted one. Also
    /// for a rendezvous that another sub-provider's matcher paired (`auto` posts receives).
    pub(crate) fn rndv_fetch(&mut self, f: Fetch) {
        let Fetch { recv, source, rts } = f;
        let len = rts.len as usize;
        let fail = |this: &mut Self, recv: PostedRecv, e: TransportError, status: u32| {
            this.send_fin(source, &rts, status);
            this.complete_recv(recv.op, source, rts.tag, len, Err(e));
        };
        if len > recv.buffer.capacity() {
            let e = TransportError::Truncated { len: rts.len, capacity: recv.buffer.capacity() as u64 };
            return fail(self, recv, e, fin::TRUNCATED);
        }
        let key_current = mr::key_of_incarnation(rts.r_key, self.peers[source as usize].incarnation);
        if rts.len > self.max_msg || !key_current {
            let e = TransportError::Malformed {
                what: "rendezvous",
                detail: format!("length {} or key {:#x} invalid", rts.len, rts.r_key),
            };
            return fail(self, recv, e, fin::READ_FAILED);
        }
        if self.peers[source as usize].state == PeerState::Dead {
            return fail(self, recv, TransportError::PeerDead(source), fin::READ_FAILED);
        }
        if self.peers[source as usize].sq.len() + 2 >= self.sq_depth {
            // Waiting here would poll the CQ from inside `poll_cq`, which has taken the
            // completion array: the wait could not see the completions that free the queue.
            self.deferred_fetches.push_back(Fetch { recv, source, rts });
            return;
        }
        let (region, offset, scratch) = match &recv.buffer {
            RecvBuffer::Region { region, offset, .. } => (region.clone(), *offset, None),
            // Lent memory is refused when posted; were it here, it is read like owned.
            RecvBuffer::Owned { .. } | RecvBuffer::Borrowed(_) => {
                let (pd, rank, incarnation) = (&self.pd, self.job.rank, self.job.incarnation);
                match self.scratch.take(len, |l| mr::register(pd, rank, incarnation, l.max(1), Access::LOCAL))
                {
                    Ok(r) => (r.clone(), 0, Some(r)),
                    Err(e) => return fail(self, recv, e, fin::READ_FAILED),
                }
            }
        };
        let sge =
            Sge { addr: region.as_ptr() as u64 + offset as u64, len: len as u32, lkey: region.local_key() };
        let remote = Some((rts.r_addr.wrapping_add(rts.r_offset), mr::rkey_of(rts.r_key)));
        let info = WrInfo::RndvRead { recv, header: rts, scratch };
        if let Err(e) = self.post(source, info, Opcode::Read, &[sge], remote, false) {
            self.fail_peer(source, e);
        }
    }

    pub(super) fn handle_message(&mut self, source: Rank, bytes: &[u8]) {
        let Some((header, payload)) = SlotHeader::decode_wire(bytes) else {
            self.malformed.push(TransportError::Malformed {
                what: "message",
                detail: format!("{} bytes from rank {source}", bytes.len()),
            });
            return;
        };
        match header.kind {
            kind::EAGER => self.tagged.get().on_eager(source, header.tag, payload, &mut self.completions),
            // A put-with-immediate arrives as the RDMA immediate itself, never as a message.
            kind::IMM => self.malformed.push(TransportError::Malformed {
                what: "message",
                detail: format!("put-with-immediate notice as a message from rank {source}"),
            }),
            _ => {
                let control = self.tagged.get().on_control(source, header, &mut self.completions);
                match control {
                    Ok(Some(fetch)) => self.rndv_fetch(fetch),
                    Ok(None) => {}
                    Err(e) => self.malformed.push(e),
                }
            }
        }
    }

    /// Marks `peer` failed with `error` and fails everything that depended on it.
    pub(super) fn fail_peer(&mut self, peer: Rank, error: TransportError) {
        let Some(p) = self.peers.get_mut(peer as usize) else { return };
        if p.state == PeerState::Dead {
            return;
        }
        p.state = PeerState::Dead;
        tracing::debug!("verbs rank {}: rank {peer} failed: {error}", self.job.rank);
        let sq: Vec<WrInfo> = p.sq.drain(..).map(|(_, info)| info).collect();
        let backlog: Vec<Outgoing> = p.backlog.drain(..).collect();
        self.backlogged -= backlog.len();
        p.backlog_rma = 0;
        for info in sq {
            self.fail_wr(info, peer, error.clone());
        }
        for item in backlog {
            match item {
                Outgoing::WriteImm { op, .. } => {
                    self.completions.push(Completion::failed(op, CompletionKind::PutImm, error.clone()))
                }
                Outgoing::Rma { op, kind, .. } => {
                    self.completions.push(Completion::failed(op, kind, error.clone()))
                }
                Outgoing::Msg { done: Some(c), .. } => {
                    self.completions.push(Completion::failed(c.op, c.kind, error.clone()))
                }
                Outgoing::Msg { done: None, .. } => {}
            }
        }
        self.tagged.get().fail_peer(peer, &error, &mut self.completions);
        let (failed, kept): (VecDeque<Fetch>, VecDeque<Fetch>) =
            std::mem::take(&mut self.deferred_fetches).into_iter().partition(|f| f.source == peer);
        self.deferred_fetches = kept;
        for f in failed {
            self.complete_recv(f.recv.op, peer, f.rts.tag, f.rts.len as usize, Err(error.clone()));
        }
    }

    pub(super) fn fail_wr(&mut self, info: WrInfo, peer: Rank, error: TransportError) {
        match info {
            WrInfo::Rma { op, kind, .. } => self.completions.push(Completion::failed(op, kind, error)),
            WrInfo::RndvRead { recv, header, .. } => {
                self.complete_recv(recv.op, peer, header.tag, header.len as usize, Err(error))
            }
            WrInfo::MsgZeroCopy { op, dest, tag, len, .. } => {
                self.peers[peer as usize].tx_done += 1;
                self.completions.push(Completion::failed(op, CompletionKind::Send { dest, tag, len }, error))
            }
            WrInfo::Msg { .. } | WrInfo::Credit | WrInfo::Probe => {}
        }
    }

    /// A send-queue completion: everything posted before it on that QP is done too.
    pub(super) fn on_send_completion(&mut self, peer: Rank, seq: u64, status: ffi::ibv_wc_status::Type) {
        let ok = status == ffi::ibv_wc_status::IBV_WC_SUCCESS;
        loop {
            let Some((s, _)) = self.peers[peer as usize].sq.front() else { return };
            let s = *s;
            let Some((_, info)) = self.peers[peer as usize].sq.pop_front() else { return };
            let this = s == seq;
            if this && !ok {
                let error = status_error(peer, status);
                self.fail_wr(info, peer, error.clone());
                self.fail_peer(peer, error);
                return;
            }
            match info {
                WrInfo::Msg { bounce: true } => self.peers[peer as usize].tx_done += 1,
                WrInfo::MsgZeroCopy { op, dest, tag, len, .. } => {
                    self.peers[peer as usize].tx_done += 1;
                    self.completions.push(Completion::ok(op, CompletionKind::Send { dest, tag, len }));
                }
                WrInfo::Rma { op, kind, signal: Signal::Yes, .. } if this => {
                    self.completions.push(Completion::ok(op, kind))
                }
                WrInfo::RndvRead { recv, header, scratch } => {
                    let len = header.len as usize;
                    let r = match (&recv.buffer, scratch) {
                        (RecvBuffer::Owned { .. }, Some(s)) => s.to_vec(0, len).map(Some),
                        (RecvBuffer::Borrowed(b), Some(s)) => {
                            s.to_vec(0, len).and_then(|v| b.write(0, &v)).map(|()| None)
                        }
                        _ => Ok(None),
                    };
                    self.send_fin(peer, &header, fin::OK);
                    self.complete_recv(recv.op, peer, header.tag, len, r);
                }
                _ => {}
            }
            if this {
                return;
            }
        }
    }

    pub(super) fn poll_cq(&mut self) -> Result<usize> {
        let mut wc = std::mem::take(&mut self.wc);
        let n = self.cq.poll(&mut wc);
        let n = match n {
            Ok(n) => n,
            Err(e) => {
                self.wc = wc;
                return Err(e);
            }
        };
        for c in &wc[..n] {
            if c.qp_num == self.wireup_qpn {
                self.on_wireup_completion(c);
                continue;
            }
            let id = c.wr_id();
            if id & RECV_FLAG != 0 {
                self.on_recv_completion(c);
                continue;
            }
            let peer = ((id >> PEER_SHIFT) & PEER_MASK) as Rank;
            let Some(p) = self.peers.get(peer as usize) else { continue };
            if (id >> GEN_SHIFT) & GEN_MASK != p.generation {
                continue; // a connection that reconnect replaced: already failed
            }
            let status = c.error().map_or(ffi::ibv_wc_status::IBV_WC_SUCCESS, |(s, _)| s);
            self.on_send_completion(peer, id & SEQ_MASK, status);
        }
        self.wc = wc;
        self.refill_srq()?;
        self.send_adverts();
        Ok(n)
    }

    /// A receive from the SRQ: whatever its status, the slot is consumed and goes back on the
    /// refill list. Flushes (a QP reset by `reconnect`) carry nothing.
    fn on_recv_completion(&mut self, c: &ffi::ibv_wc) {
        let slot = c.wr_id() & SEQ_MASK;
        let Some(peer) = self.rank_of_qpn(c.qp_num) else {
            return self.queue_refill(slot, None);
        };
        if let Some((status, _)) = c.error() {
            self.queue_refill(slot, None);
            if status != ffi::ibv_wc_status::IBV_WC_WR_FLUSH_ERR {
                self.fail_peer(peer, status_error(peer, status));
            }
            return;
        }
        if c.len() == 0 && c.opcode() == ffi::ibv_wc_opcode::IBV_WC_RECV {
            // A hello: the peer's QP is connected to ours, we may post to it now.
            self.mark_ready(peer);
        } else if c.opcode() == ffi::ibv_wc_opcode::IBV_WC_RECV_RDMA_WITH_IMM {
            let imm = u32::from_be(c.imm_data().unwrap_or(0));
            self.completions
                .push(Completion::ok(OpId::REMOTE, CompletionKind::Imm { source: peer, imm, len: c.len() }));
        } else {
            let off = slot as usize * self.slot_size;
            let len = c.len().min(self.slot_size);
            let ring = self.rx_ring.clone();
            // SAFETY: the slot's receive WR has completed and is reposted only by the refill at
            // the end of this poll, so the device does not write these bytes while we parse
            // them. `handle_message` never polls the CQ again (a rendezvous read that finds the
            // send queue full is deferred to `progress`), so no nested poll reposts this slot.
            match unsafe { ring.slice(off, len) } {
                Ok(bytes) => self.handle_message(peer, bytes),
                Err(e) => self.malformed.push(e),
            }
        }
        self.queue_refill(slot, Some(peer));
    }

    pub(super) fn check_liveness(&mut self, probe: bool) {
        self.last_liveness = Instant::now();
        for rank in 0..self.peers.len() as Rank {
            let p = &self.peers[rank as usize];
            if p.state == PeerState::Dead || rank == self.job.rank {
                continue;
            }
            if p.watch.as_ref().is_some_and(|w| !w.alive()) {
                // What it sent before dying (a clean exit's last words) may still sit in the CQ:
                // deliver it to the receives posted for it before failing them.
                while matches!(self.poll_cq(), Ok(n) if n == self.wc.len()) {}
                self.fail_peer(rank, TransportError::PeerDead(rank));
                continue;
            }
            // Peers on other hosts: a zero-byte write fails by retry exhaustion if they are gone.
            if probe
                && p.ready
                && p.watch.is_none()
                && p.last_probe.elapsed() >= self.config.peer_timeout / 2
                && p.sq.len() + 2 < self.sq_depth
            {
                let target = p.credit_target;
                self.peers[rank as usize].last_probe = Instant::now();
                if let Err(e) = self.post(rank, WrInfo::Probe, Opcode::Write, &[], Some(target), false) {
                    self.fail_peer(rank, e);
                }
            }
        }
    }
}
