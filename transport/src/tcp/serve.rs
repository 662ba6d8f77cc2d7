//! The operations that travel as request and answer frames: puts and gets this rank starts
//! (and the reads of rendezvous receives), and serving the frames peers send, as the target.

use crate::api::*;
use crate::completion::Owner;
use crate::error::Result;
use crate::error::TransportError;
use crate::msg::{fin, kind, SlotHeader};
use crate::region::Region;
use crate::tagged::{self, Fetch};
use crate::tagmatch::PostedRecv;
use crate::tcp::conn::CHUNK;
use crate::tcp::core::Core;
use crate::tcp::table::{self, Refusal};
use crate::tcp::wire::{self, flag, status, Frame, Target};

/// Where a read's answer lands.
pub(super) enum Dest {
    Region(Region, usize),
    Owned(Vec<u8>),
}

impl Dest {
    /// Copies a chunk at `at`; false when it does not fit `len` (a peer's error).
    pub(super) fn write(&mut self, at: u64, bytes: &[u8], len: usize) -> bool {
        let fits = at.checked_add(bytes.len() as u64).is_some_and(|end| end <= len as u64);
        fits && match self {
            Dest::Region(region, offset) => region.write(*offset + at as usize, bytes).is_ok(),
            Dest::Owned(v) => {
                v[at as usize..at as usize + bytes.len()].copy_from_slice(bytes);
                true
            }
        }
    }
}

/// An operation of this rank waiting for the target's answer.
pub(super) enum Pending {
    Put {
        op: OpId,
        imm: bool,
        signaled: bool,
        peer: Rank,
        remote: RemoteRegion,
        offset: u64,
        len: usize,
    },
    Get {
        op: OpId,
        signaled: bool,
        peer: Rank,
        remote: RemoteRegion,
        offset: u64,
        len: usize,
        dest: Dest,
        got: usize,
    },
    /// The read of a matched rendezvous receive.
    Rndv {
        recv: PostedRecv,
        peer: Rank,
        rts: SlotHeader,
        dest: Dest,
        got: usize,
    },
}

impl Pending {
    pub(super) fn peer(&self) -> Rank {
        match self {
            Pending::Put { peer, .. } | Pending::Get { peer, .. } | Pending::Rndv { peer, .. } => *peer,
        }
    }

    /// Its failed completion, with `error`.
    pub(super) fn failed(self, error: TransportError) -> Option<Completion> {
        match self {
            Pending::Put { op, imm, .. } => {
                let kind = if imm { CompletionKind::PutImm } else { CompletionKind::Put };
                Some(Completion::failed(op, kind, error))
            }
            Pending::Get { op, .. } => Some(Completion::failed(op, CompletionKind::Get, error)),
            Pending::Rndv { recv, peer, rts, .. } => {
                Some(tagged::recv_completion(recv.op, peer, rts.tag, 0, Err(error)))
            }
        }
    }
}

fn chunks(len: usize) -> impl Iterator<Item = (usize, usize)> {
    // One chunk at least: an empty put still reaches the target (and its checks).
    (0..len.max(1)).step_by(CHUNK).map(move |at| (at, (len - at.min(len)).min(CHUNK)))
}

impl Core {
    pub(super) fn cookie(&mut self) -> u64 {
        self.next_cookie += 1;
        self.next_cookie
    }

    /// Checks an RMA's local range and descriptor bounds (the target checks the rest).
    pub(super) fn check_rma(&self, op: &'static str, rma: &Rma<'_>) -> Result<()> {
        rma.local.check_bounds(op, rma.local_offset, rma.len)?;
        rma.remote.check_bounds(op, rma.remote_offset, rma.len as u64)?;
        self.live(rma.remote.owner)?;
        // A descriptor of the owner's previous incarnation never leaves this rank.
        let connected = self.peers[rma.remote.owner as usize].incarnation;
        if table::incarnation_of(rma.remote.key) != connected as u16 {
            return Err(TransportError::InvalidKey { op, owner: rma.remote.owner, key: rma.remote.key });
        }
        Ok(())
    }

    pub(super) fn post_put(
        &mut self,
        owner: Owner,
        name: &'static str,
        rma: &Rma<'_>,
        imm: Option<u32>,
        signal: Signal,
    ) -> Result<OpId> {
        self.check_rma(name, rma)?;
        let peer = rma.remote.owner;
        let op = self.cq.next_op(owner);
        let cookie = self.cookie();
        let (remote, len) = (*rma.remote, rma.len);
        let t =
            Target { cookie, key: remote.key, addr: remote.addr, offset: rma.remote_offset, len: len as u64 };
        let mut flags = if signal == Signal::Yes { flag::SIGNALED } else { 0 };
        if imm.is_some() {
            flags |= flag::IMM;
        }
        for (at, n) in chunks(len) {
            self.make_room(peer)?;
            let last = if at + n >= len { flag::LAST } else { 0 };
            let local = (rma.local, rma.local_offset + at);
            self.peers[peer as usize].tx.push(|out| {
                wire::put_start(out, &t, at as u64, imm.unwrap_or(0), flags | last, n);
                let start = out.len();
                out.resize(start + n, 0);
                // Cannot fail: the local range was checked above.
                drop(local.0.read(local.1, &mut out[start..]));
            });
            self.kick(peer);
        }
        let pending = Pending::Put {
            op,
            imm: imm.is_some(),
            signaled: signal == Signal::Yes,
            peer,
            remote,
            offset: t.offset,
            len,
        };
        self.pending.insert(cookie, pending);
        Ok(op)
    }

    pub(super) fn post_get(&mut self, owner: Owner, rma: &Rma<'_>, signal: Signal) -> Result<OpId> {
        self.check_rma("get", rma)?;
        let peer = rma.remote.owner;
        self.make_room(peer)?;
        let op = self.cq.next_op(owner);
        let cookie = self.cookie();
        let (remote, len) = (*rma.remote, rma.len);
        let t =
            Target { cookie, key: remote.key, addr: remote.addr, offset: rma.remote_offset, len: len as u64 };
        self.peers[peer as usize].tx.push(|out| wire::get(out, &t));
        let dest = Dest::Region(rma.local.clone(), rma.local_offset);
        let pending = Pending::Get {
            op,
            signaled: signal == Signal::Yes,
            peer,
            remote,
            offset: t.offset,
            len,
            dest,
            got: 0,
        };
        self.pending.insert(cookie, pending);
        self.kick(peer);
        Ok(op)
    }

    /// A receive matched a rendezvous: read the sender's region (or refuse a message too
    /// long for the buffer, which the sender still completes).
    pub(crate) fn rndv_fetch(&mut self, f: Fetch) {
        let Fetch { recv, source, rts } = f;
        // A sender found dead since its announcement took its region along: the receive
        // fails now. Queued, the read would wait for nothing and then reach the sender's next
        // incarnation, which knows neither its key nor its FIN.
        if let Err(e) = self.live(source) {
            self.cq.push(tagged::recv_completion(recv.op, source, rts.tag, 0, Err(e)));
            return;
        }
        let capacity = recv.buffer.capacity();
        if rts.len > capacity as u64 {
            self.send_control(source, &SlotHeader::fin(&rts, fin::TRUNCATED));
            let e = TransportError::Truncated { len: rts.len, capacity: capacity as u64 };
            self.cq.push(tagged::recv_completion(recv.op, source, rts.tag, rts.len as usize, Err(e)));
            return;
        }
        let len = rts.len as usize;
        let dest = match &recv.buffer {
            RecvBuffer::Region { region, offset, .. } => Dest::Region(region.clone(), *offset),
            // Lent memory never gets here (refused when posted): read as owned.
            RecvBuffer::Owned { .. } | RecvBuffer::Borrowed(_) => Dest::Owned(vec![0; len]),
        };
        let cookie = self.cookie();
        let t = Target { cookie, key: rts.r_key, addr: rts.r_addr, offset: rts.r_offset, len: rts.len };
        if let Some(peer) = self.peers.get_mut(source as usize) {
            peer.tx.push(|out| wire::get(out, &t));
        }
        self.pending.insert(cookie, Pending::Rndv { recv, peer: source, rts, dest, got: 0 });
        self.kick(source);
    }

    pub(super) fn send_control(&mut self, dest: Rank, header: &SlotHeader) {
        if let Some(peer) = self.peers.get_mut(dest as usize).filter(|p| p.alive()) {
            peer.tx.push(|out| wire::msg(out, header, &[]));
        }
        self.kick(dest);
    }

    /// Fails every operation waiting on `rank` with `error`.
    pub(super) fn fail_pending(&mut self, rank: Rank, error: &TransportError) {
        let cookies: Vec<u64> =
            self.pending.iter().filter(|(_, p)| p.peer() == rank).map(|(c, _)| *c).collect();
        for cookie in cookies {
            if let Some(c) = self.pending.remove(&cookie).and_then(|p| p.failed(error.clone())) {
                self.cq.push(c);
            }
        }
    }

    /// Handles one frame body from `source`. Errors are the peer's: reported, not fatal.
    pub(super) fn on_frame(&mut self, source: Rank, body: &[u8]) {
        let result = match wire::decode(body) {
            Ok(Frame::Msg { header, payload }) if header.kind == kind::EAGER => {
                self.tagged.get().on_eager(source, header.tag, payload, &mut self.cq);
                Ok(())
            }
            Ok(Frame::Msg { header, .. }) => {
                let control = self.tagged.get().on_control(source, header, &mut self.cq);
                control.map(|fetch| {
                    if let Some(fetch) = fetch {
                        self.rndv_fetch(fetch);
                    }
                })
            }
            Ok(Frame::Put { target, at, imm, flags, bytes }) => {
                self.serve_put(source, &target, at, imm, flags, bytes);
                Ok(())
            }
            Ok(Frame::Get(target)) => {
                self.serve_get(source, &target);
                Ok(())
            }
            Ok(Frame::Data { cookie, at, bytes }) => self.on_data(source, cookie, at, bytes),
            Ok(Frame::Ack { cookie, status, limit }) => self.on_ack(source, cookie, status, limit),
            Ok(Frame::Hello(_)) => Err(malformed(source, "a hello after the first frame")),
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            self.malformed.push(e);
        }
    }

    pub(super) fn serve_put(
        &mut self,
        source: Rank,
        t: &Target,
        at: u64,
        imm: u32,
        flags: u32,
        bytes: &[u8],
    ) {
        let done = self.table.check(t, Access::REMOTE_WRITE).and_then(|memory| {
            let fits = at.checked_add(bytes.len() as u64).is_some_and(|end| end <= t.len);
            match fits && table::write(&memory, t.offset + at, bytes) {
                true => Ok(()),
                false => Err(Refusal::OutOfBounds { limit: t.len }),
            }
        });
        if flags & flag::LAST == 0 {
            // The last chunk fails the same check and answers for the whole put.
            return;
        }
        if done.is_ok() && flags & flag::IMM != 0 {
            let kind = CompletionKind::Imm { source, imm, len: t.len as usize };
            self.cq.push(Completion::ok(OpId::REMOTE, kind));
        }
        let (code, limit) = done.err().map_or((status::OK, 0), Refusal::code);
        if let Some(peer) = self.peers.get_mut(source as usize) {
            peer.tx.push(|out| wire::ack(out, t.cookie, code, limit));
        }
    }

    pub(super) fn serve_get(&mut self, source: Rank, t: &Target) {
        let checked = self.table.check(t, Access::REMOTE_READ);
        let Some(peer) = self.peers.get_mut(source as usize) else { return };
        match checked {
            Ok(memory) => peer.tx.push_stream(memory, t.offset as usize, t.len as usize, t.cookie),
            Err(refusal) => {
                let (code, limit) = refusal.code();
                peer.tx.push(|out| wire::ack(out, t.cookie, code, limit));
            }
        }
    }

    pub(super) fn on_data(&mut self, source: Rank, cookie: u64, at: u64, bytes: &[u8]) -> Result<()> {
        let (dest, got, len) = match self.pending.get_mut(&cookie) {
            Some(Pending::Get { peer, dest, got, len, .. }) if *peer == source => (dest, got, *len),
            Some(Pending::Rndv { peer, dest, got, rts, .. }) if *peer == source => {
                (dest, got, rts.len as usize)
            }
            _ => return Err(malformed(source, &format!("data for unknown read {cookie}"))),
        };
        if !dest.write(at, bytes, len) {
            return Err(malformed(
                source,
                &format!("data at {at} + {} past the {len}-byte read", bytes.len()),
            ));
        }
        *got += bytes.len();
        if *got < len {
            return Ok(());
        }
        match self.pending.remove(&cookie) {
            Some(Pending::Get { op, signaled: true, .. }) => {
                self.cq.push(Completion::ok(op, CompletionKind::Get))
            }
            Some(Pending::Rndv { recv, peer, rts, dest, .. }) => {
                self.send_control(peer, &SlotHeader::fin(&rts, fin::OK));
                let data = match dest {
                    Dest::Owned(v) => Some(v),
                    Dest::Region(..) => None,
                };
                self.cq.push(tagged::recv_completion(recv.op, peer, rts.tag, len, Ok(data)));
            }
            _ => {}
        }
        Ok(())
    }

    pub(super) fn on_ack(&mut self, source: Rank, cookie: u64, code: u32, limit: u64) -> Result<()> {
        let pending = match self.pending.remove(&cookie) {
            Some(p) if p.peer() == source => p,
            other => {
                if let Some(p) = other {
                    self.pending.insert(cookie, p);
                }
                return Err(malformed(source, &format!("acknowledgement of unknown operation {cookie}")));
            }
        };
        match pending {
            Pending::Put { op, imm, signaled, .. } if code == status::OK => {
                if signaled {
                    let kind = if imm { CompletionKind::PutImm } else { CompletionKind::Put };
                    self.cq.push(Completion::ok(op, kind));
                }
            }
            Pending::Put { imm, remote, offset, len, .. } => {
                let name = if imm { "put_imm" } else { "put" };
                let e = Refusal::error(code, limit, name, &remote, offset, len as u64);
                self.cq.extend(pending.failed(e));
            }
            Pending::Get { remote, offset, len, .. } => {
                let e = Refusal::error(code, limit, "get", &remote, offset, len as u64);
                self.cq.extend(pending.failed(e));
            }
            Pending::Rndv { peer, rts, .. } => {
                self.send_control(peer, &SlotHeader::fin(&rts, fin::READ_FAILED));
                let remote = RemoteRegion { owner: peer, addr: rts.r_addr, len: rts.r_len, key: rts.r_key };
                let e = Refusal::error(code, limit, "rendezvous read", &remote, rts.r_offset, rts.len);
                self.cq.extend(pending.failed(e));
            }
        }
        Ok(())
    }
}

fn malformed(source: Rank, detail: &str) -> TransportError {
    TransportError::Malformed { what: "tcp frame", detail: format!("from rank {source}: {detail}") }
}
