//! `FI_RMA` emulated over reverb tagged messages. An origin sends a request under [`RMA`]
//! (a small write carries its bytes, a read asks for them) and posts a receive for the
//! target's reply, directed at the target (so a dead target fails it) and tagged
//! [`RMA_REPLY`] with the operation's id. A target keeps one receive posted for requests
//! ([`EpCore::serve_rma`]) and answers each one as it progresses: a read with the region's
//! bytes, a write with an empty reply; a refusal with an empty reply whose tag carries
//! [`RMA_FAILED`] and the errno. A write completes at the origin when the reply came
//! (delivery complete).
//!
//! A large write's bytes go apart, after the request, under [`RMA_PAYLOAD`]: lent where the
//! carrier lends ([`crate::lend`]), and the target receives them straight into the region.
//! So does a read's reply into the origin's buffer: on shm each is one copy.
//!
//! Request header, little-endian: op (1 write, 2 read), flags (1: CQ data, 2: bytes apart),
//! 6 bytes of zero, id, key, address, length, CQ data; a small write's bytes follow.

use reverb_transport::error::TransportError;
use reverb_transport::{CompletionKind, OpId, Rank, RecvBuffer, Source, TagMatch};

use crate::abi::*;
use crate::core::{bump, error_entry, Entry, EpCore, ErrEntry, Pending, UNTAGGED};
use crate::error::{OfiError, Result};

/// A request of the RMA protocol (with [`UNTAGGED`]: no tagged receive matches it, and the
/// untagged receives mask it out).
pub const RMA: u64 = 1 << 61;
/// A target's reply; the low bits are the operation's id.
pub const RMA_REPLY: u64 = 1 << 60;
/// With [`RMA_REPLY`]: the target refused the operation, errno in [`ERRNO_SHIFT`]'s byte.
pub const RMA_FAILED: u64 = 1 << 59;
/// A large write's bytes, sent apart from its request; the low bits are the id.
pub const RMA_PAYLOAD: u64 = 1 << 58;
const ERRNO_SHIFT: u32 = 48;
const ID_MASK: u64 = (1 << ERRNO_SHIFT) - 1;
const HEADER_LEN: usize = 48;
const OP_WRITE: u8 = 1;
const OP_READ: u8 = 2;
const HAS_DATA: u8 = 1;
const APART: u8 = 2;
/// Writes longer than this send their bytes apart ([`RMA_PAYLOAD`]).
const APART_MIN: usize = 8 << 10;

/// What an RMA operation in flight waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RmaRole {
    /// The origin's receive of the target's reply.
    Reply,
    /// The target's receive of peers' requests.
    Serve,
    /// The target's receive of a large write's bytes.
    Payload,
}

/// A large write whose bytes the target waits for: what it answers once they came.
pub(crate) struct Landing {
    source: Rank,
    id: u64,
    /// Whether the write may go ahead, or the errno it is refused with (its bytes dropped).
    checked: Result<(), i32>,
    /// Where its `len` bytes go in the region.
    dst: usize,
    len: usize,
    /// The CQ data to raise, if the origin sent some.
    data: Option<u64>,
}

/// One RMA operation as the calls describe it: `len` bytes at `local` (a read's destination,
/// a write's source) and the remote (`addr`, `key`) of `peer`.
pub struct RmaArgs {
    pub peer: fi_addr_t,
    pub local: usize,
    pub len: usize,
    pub addr: u64,
    pub key: u64,
    pub data: Option<u64>,
    pub context: usize,
    pub flags: u64,
}

/// A request as it arrived.
struct Request<'a> {
    op: u8,
    flags: u8,
    id: u64,
    key: u64,
    addr: u64,
    len: usize,
    data: u64,
    payload: &'a [u8],
}

fn word(bytes: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(w)
}

impl<'a> Request<'a> {
    fn encode(op: u8, id: u64, a: &RmaArgs, payload: &[u8], apart: bool) -> Vec<u8> {
        let mut wire = Vec::with_capacity(HEADER_LEN + payload.len());
        let flags = if a.data.is_some() { HAS_DATA } else { 0 } | if apart { APART } else { 0 };
        wire.extend_from_slice(&[op, flags, 0, 0, 0, 0, 0, 0]);
        for w in [id, a.key, a.addr, a.len as u64, a.data.unwrap_or(0)] {
            wire.extend_from_slice(&w.to_le_bytes());
        }
        wire.extend_from_slice(payload);
        wire
    }

    /// The request in `bytes`; an error names what is wrong with it.
    fn parse(bytes: &'a [u8]) -> Result<Request<'a>> {
        if bytes.len() < HEADER_LEN {
            return Err(OfiError::Invalid("an RMA request shorter than its header"));
        }
        let len = usize::try_from(word(bytes, 32)).map_err(|_| OfiError::Invalid("RMA length"))?;
        let (op, payload) = (bytes[0], &bytes[HEADER_LEN..]);
        let apart = bytes[1] & APART != 0;
        let fits = match op {
            OP_WRITE if apart => payload.is_empty() && len <= crate::info::MAX_MSG_SIZE,
            OP_WRITE => payload.len() == len,
            OP_READ => payload.is_empty() && len <= crate::info::MAX_MSG_SIZE,
            _ => return Err(OfiError::Invalid("an RMA request of no known kind")),
        };
        if !fits {
            return Err(OfiError::Invalid("an RMA request whose length disagrees with its bytes"));
        }
        let (id, key, addr, data) = (word(bytes, 8), word(bytes, 16), word(bytes, 24), word(bytes, 40));
        Ok(Request { op, flags: bytes[1], id, key, addr, len, data, payload })
    }
}

impl EpCore {
    /// `fi_write` and kin: a small write's bytes are copied before this returns; a large one's
    /// are lent until its completion (copied for `inject`, which raises no completion on
    /// success).
    pub fn rma_write(&mut self, a: RmaArgs, payload: &[u8], inject: bool) -> Result<()> {
        let flags = FI_RMA | FI_WRITE;
        self.rma_start(OP_WRITE, a, payload, flags, inject)
    }

    /// `fi_read` and kin: the bytes land at `a.local` when the reply comes.
    pub fn rma_read(&mut self, a: RmaArgs) -> Result<()> {
        self.rma_start(OP_READ, a, &[], FI_RMA | FI_READ, false)
    }

    fn rma_start(&mut self, op: u8, a: RmaArgs, payload: &[u8], kind: u64, inject: bool) -> Result<()> {
        if a.len > crate::info::MAX_MSG_SIZE {
            return Err(OfiError::TooLong(a.len));
        }
        let rank = self.rank_of(a.peer)?;
        self.next_rma_id = (self.next_rma_id + 1) & ID_MASK;
        let id = self.next_rma_id;
        // Any reply to this id: the read's bytes or nothing, refused or not.
        let matching =
            TagMatch { tag: UNTAGGED | RMA | RMA_REPLY | id, mask: !(RMA_FAILED | (0xff << ERRNO_SHIFT)) };
        let reply = match op {
            OP_READ => self.post_landing(Source::Rank(rank), matching, a.local, a.len)?,
            _ => self.provider.post_recv(Source::Rank(rank), matching, RecvBuffer::Owned { capacity: 0 })?,
        };
        let apart = op == OP_WRITE && payload.len() > APART_MIN;
        let inline = if apart { &[][..] } else { payload };
        let request = Request::encode(op, id, &a, inline, apart);
        let mut sent = self.provider.send(rank, UNTAGGED | RMA, &request).map_err(OfiError::from);
        if apart && sent.is_ok() {
            // An injected write's buffer is the consumer's again when the call returns.
            let tag = UNTAGGED | RMA | RMA_PAYLOAD | id;
            sent = match inject || (a.flags | self.tx_op_flags) & FI_INJECT != 0 || !self.lends {
                true => self.provider.send(rank, tag, payload).map_err(OfiError::from),
                false => crate::lend::send(&mut *self.provider, rank, tag, payload),
            };
        }
        if let Err(e) = sent {
            let _ = self.provider.cancel_recv(reply);
            return Err(e);
        }
        let report = !inject && Self::reports(self.tx.as_ref(), a.flags | self.tx_op_flags);
        let recv_into = (op == OP_READ).then_some((a.local, a.len));
        let pending = Pending {
            context: a.context,
            flags: kind,
            report,
            recv_into,
            discard: false,
            rma: Some(RmaRole::Reply),
        };
        self.pending.insert(reply, pending);
        self.progress();
        Ok(())
    }

    /// Posts a receive of `len` bytes at `buf` (consumer memory lent until it completes):
    /// landing there where the carrier lends, else owned and copied.
    fn post_landing(&mut self, source: Source, matching: TagMatch, buf: usize, len: usize) -> Result<OpId> {
        if self.lends && crate::lend::lends_into(buf, len) {
            return crate::lend::post_recv(&mut *self.provider, source, matching, buf, len);
        }
        Ok(self.provider.post_recv(source, matching, RecvBuffer::Owned { capacity: len })?)
    }

    /// Keeps one receive posted for peers' requests, on an endpoint with FI_RMA.
    pub(crate) fn serve_rma(&mut self) {
        if self.serving || self.caps & FI_RMA == 0 || self.mrs.is_none() {
            return;
        }
        let matching = TagMatch { tag: UNTAGGED | RMA, mask: UNTAGGED | RMA | RMA_REPLY | RMA_PAYLOAD };
        let buffer = RecvBuffer::Owned { capacity: HEADER_LEN + crate::info::MAX_MSG_SIZE };
        if let Ok(op) = self.provider.post_recv(Source::Any, matching, buffer) {
            let pending = Pending {
                context: 0,
                flags: 0,
                report: false,
                recv_into: None,
                discard: false,
                rma: Some(RmaRole::Serve),
            };
            self.pending.insert(op, pending);
            self.serving = true;
        }
    }

    /// A completion of an RMA receive: a reply at the origin, a request or a write's bytes at
    /// the target.
    pub(crate) fn finish_rma(
        &mut self,
        op: OpId,
        p: Pending,
        kind: CompletionKind,
        error: Option<TransportError>,
    ) {
        let CompletionKind::Recv { source, tag, len, data } = kind else { return };
        let bytes = data.unwrap_or_default();
        let bytes = &bytes[..len.min(bytes.len())];
        match p.rma {
            Some(RmaRole::Serve) => {
                self.serving = false;
                self.serve_rma();
                match error {
                    Some(e) => drop_request(source, &OfiError::Transport(e)),
                    None => self.answer(source, bytes),
                }
            }
            Some(RmaRole::Payload) => self.landed_write(op, len, bytes, error),
            _ => self.finish_reply(p, tag, len, bytes, error),
        }
    }

    /// Applies a peer's request and answers it; a malformed one is dropped. A write whose
    /// bytes come apart is answered once they came (`landed_write`).
    fn answer(&mut self, source: Rank, bytes: &[u8]) {
        let req = match Request::parse(bytes) {
            Ok(req) => req,
            Err(e) => return drop_request(source, &e),
        };
        match req.op {
            OP_WRITE if req.flags & APART != 0 => self.await_payload(source, &req),
            OP_WRITE => {
                let status = self.apply_write(source, &req);
                self.reply(source, req.id, status);
            }
            _ => match self.checked(&req, FI_REMOTE_READ) {
                Ok(src) => self.send_read(source, req.id, src, req.len),
                Err(errno) => self.reply(source, req.id, Err(errno)),
            },
        }
    }

    /// The empty reply to operation `id` of `source`: done, or refused with an errno.
    fn reply(&mut self, source: Rank, id: u64, status: Result<(), i32>) {
        let refused = match status {
            Ok(()) => 0,
            Err(errno) => RMA_FAILED | (u64::from(errno.clamp(1, 0xff) as u8) << ERRNO_SHIFT),
        };
        // A peer gone meanwhile finds out from its own side; nothing to do here.
        let _ = self.provider.send(source, UNTAGGED | RMA | RMA_REPLY | (id & ID_MASK) | refused, &[]);
    }

    /// Answers a read with the `len` bytes at `src`, checked inside a region registered for
    /// remote reads: lent where the carrier lends (the origin reads them in place).
    fn send_read(&mut self, source: Rank, id: u64, src: usize, len: usize) {
        bump(self.rma_cntrs.remote_read.as_ref(), false);
        let tag = UNTAGGED | RMA | RMA_REPLY | (id & ID_MASK);
        // SAFETY: `src` and `len` lie inside a region the consumer registered for remote
        // reads; a registration lends that memory until fi_close of the region.
        let region = unsafe { std::slice::from_raw_parts(src as *const u8, len) };
        // A peer gone meanwhile finds out from its own side; nothing to do here.
        let _ = match self.lends {
            true => crate::lend::send(&mut *self.provider, source, tag, region),
            false => self.provider.send(source, tag, region).map_err(OfiError::from),
        };
    }

    /// Posts the receive of a large write's bytes: into the region where the request may
    /// write, else dropped (the write is refused once they came).
    fn await_payload(&mut self, source: Rank, req: &Request<'_>) {
        let matching = TagMatch::exact(UNTAGGED | RMA | RMA_PAYLOAD | (req.id & ID_MASK));
        let from = Source::Rank(source);
        let checked = self.checked(req, FI_REMOTE_WRITE);
        let posted = match checked {
            Ok(dst) => self.post_landing(from, matching, dst, req.len),
            Err(_) => {
                let dropped = RecvBuffer::Owned { capacity: req.len };
                self.provider.post_recv(from, matching, dropped).map_err(OfiError::from)
            }
        };
        let op = match posted {
            Ok(op) => op,
            Err(e) => return drop_request(source, &e),
        };
        let data = (req.flags & HAS_DATA != 0).then_some(req.data);
        let (dst, len) = (checked.unwrap_or(0), req.len);
        self.landings.insert(
            op,
            Landing { source, id: req.id & ID_MASK, checked: checked.map(|_| ()), dst, len, data },
        );
        let rma = Some(RmaRole::Payload);
        let pending = Pending { context: 0, flags: 0, report: false, recv_into: None, discard: false, rma };
        self.pending.insert(op, pending);
    }

    /// A large write's bytes came (into the region, or dropped): counts the write, raises its
    /// CQ data and answers the origin.
    fn landed_write(&mut self, op: OpId, len: usize, bytes: &[u8], error: Option<TransportError>) {
        let Some(l) = self.landings.remove(&op) else { return };
        let status = match error {
            Some(e) => {
                drop_request(l.source, &OfiError::Transport(e));
                Err(FI_EIO)
            }
            None if len != l.len => {
                drop_request(l.source, &OfiError::Invalid("a write's bytes disagree with its length"));
                Err(FI_EIO)
            }
            None => l.checked,
        };
        if status.is_ok() {
            // A carrier that does not lend hands the bytes over owned: copied in here.
            crate::obj::copy_to_lent(l.dst, l.len, bytes);
            self.wrote(l.source, l.len, l.data);
        }
        self.reply(l.source, l.id, status);
    }

    /// Writes a small request's bytes into the region.
    fn apply_write(&mut self, source: Rank, req: &Request<'_>) -> Result<(), i32> {
        let dst = self.checked(req, FI_REMOTE_WRITE)?;
        // SAFETY: `dst` and the request's length lie inside a region the consumer registered
        // for remote writes; a registration lends that memory until fi_close of the region.
        unsafe { std::ptr::copy_nonoverlapping(req.payload.as_ptr(), dst as *mut u8, req.len) };
        let data = (req.flags & HAS_DATA != 0).then_some(req.data);
        self.wrote(source, req.len, data);
        Ok(())
    }

    /// Counts a remote write of `len` bytes from `source`; raises its CQ data on the receive CQ.
    fn wrote(&mut self, source: Rank, len: usize, data: Option<u64>) {
        bump(self.rma_cntrs.remote_write.as_ref(), false);
        if let Some(data) = data {
            let src = self.addr_of(source);
            let flags = FI_REMOTE_CQ_DATA | FI_RMA | FI_REMOTE_WRITE;
            let entry = Entry { context: 0, flags, len, buf: 0, data, tag: 0, src };
            if let Some(rx) = &self.rx {
                rx.cq.borrow_mut().entries.push_back(entry);
            }
        }
    }

    /// The local address of the request's range, checked against the domain's regions.
    fn checked(&self, req: &Request<'_>, access: u64) -> Result<usize, i32> {
        let mrs = self.mrs.as_ref().ok_or(FI_EINVAL)?;
        let at = mrs.borrow().check(req.key, req.addr, req.len, access).map_err(|r| r.errno())?;
        Ok(at)
    }

    /// The origin's side: the operation completes, in error if the target refused it.
    fn finish_reply(
        &mut self,
        p: Pending,
        tag: u64,
        len: usize,
        bytes: &[u8],
        error: Option<TransportError>,
    ) {
        let (buf, want) = p.recv_into.unwrap_or((0, 0));
        let entry = Entry { context: p.context, flags: p.flags, len: want, buf: 0, data: 0, tag: 0, src: 0 };
        let outcome = match error {
            Some(e) => Err(error_entry(entry, &e, 0)),
            None => replied(entry, tag, len, bytes, buf, want),
        };
        let cntr = if p.flags & FI_READ != 0 { &self.rma_cntrs.read } else { &self.rma_cntrs.write };
        bump(cntr.as_ref(), outcome.is_err());
        let Some(tx) = &self.tx else { return };
        let mut cq = tx.cq.borrow_mut();
        match outcome {
            Err(failed) => cq.errors.push_back(failed),
            Ok(()) if p.report => cq.entries.push_back(entry),
            Ok(()) => {}
        }
    }
}

/// Checks the target's reply (`tag`, `len` bytes; `bytes` when they came owned, not in the
/// consumer's buffer) and lands a read's bytes in the consumer's buffer (`want` at `buf`).
fn replied(
    entry: Entry,
    tag: u64,
    len: usize,
    bytes: &[u8],
    buf: usize,
    want: usize,
) -> Result<(), ErrEntry> {
    let refused = |err: i32, text: String| ErrEntry { entry, err, prov_errno: err, olen: 0, text };
    if tag & RMA_FAILED != 0 {
        let err = ((tag >> ERRNO_SHIFT) & 0xff) as i32;
        let why = if err == FI_EACCES { "access denied" } else { "no such key or range" };
        return Err(refused(err, format!("the target refused the operation: {why}")));
    }
    if len != want {
        return Err(refused(FI_EIO, format!("{len} bytes came back, {want} were read")));
    }
    crate::obj::copy_to_lent(buf, want, bytes);
    Ok(())
}

/// A request that cannot be served is dropped: there is no one to tell but the log.
fn drop_request(source: Rank, e: &OfiError) {
    eprintln!("reverb ofi: dropped an RMA request from rank {source}: {e}");
}

/// The counters RMA operations count on (`fi_ep_bind` with FI_READ, FI_WRITE,
/// FI_REMOTE_READ, FI_REMOTE_WRITE).
#[derive(Default)]
pub struct RmaCntrs {
    pub read: Option<crate::core::CntrRef>,
    pub write: Option<crate::core::CntrRef>,
    pub remote_read: Option<crate::core::CntrRef>,
    pub remote_write: Option<crate::core::CntrRef>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(len: usize, data: Option<u64>) -> RmaArgs {
        RmaArgs { peer: 0, local: 0, len, addr: 0x1234, key: 77, data, context: 0, flags: 0 }
    }

    #[test]
    fn requests_round_trip_and_malformed_ones_are_refused() {
        let wire = Request::encode(OP_WRITE, 9, &args(3, Some(5)), b"abc", false);
        let r = Request::parse(&wire).unwrap();
        assert_eq!(
            (r.op, r.flags, r.id, r.key, r.addr, r.len, r.data),
            (OP_WRITE, HAS_DATA, 9, 77, 0x1234, 3, 5)
        );
        assert_eq!(r.payload, b"abc");
        assert!(Request::parse(&wire[..HEADER_LEN - 1]).is_err(), "short header");
        assert!(Request::parse(&wire[..HEADER_LEN + 2]).is_err(), "fewer bytes than the length");
        let mut bad = wire.clone();
        bad[0] = 9;
        assert!(Request::parse(&bad).is_err(), "unknown op");
        let read = Request::encode(OP_READ, 1, &args(crate::info::MAX_MSG_SIZE + 1, None), &[], false);
        assert!(Request::parse(&read).is_err(), "a read over max_msg_size");
    }
}
