//! `FI_RMA` emulated over reverb tagged messages. An origin sends a request under [`RMA`]
//! (a write carries its bytes, a read asks for them) and posts a receive for the target's
//! reply, directed at the target (so a dead target fails it) and tagged [`RMA_REPLY`] with the
//! operation's id. A target keeps one receive posted for requests ([`EpCore::serve_rma`]) and
//! answers each one as it progresses: a status (0 or a positive errno), then a read's bytes.
//! A write completes at the origin when the target's reply came (delivery complete).
//!
//! Request header, little-endian: op (1 write, 2 read), flags (1: CQ data), 6 bytes of zero,
//! id, key, address, length, CQ data; a write's bytes follow.

use reverb_transport::error::TransportError;
use reverb_transport::{CompletionKind, Rank, RecvBuffer, Source, TagMatch};

use crate::abi::*;
use crate::core::{bump, error_entry, Entry, EpCore, ErrEntry, Pending, UNTAGGED};
use crate::error::{OfiError, Result};

/// A request of the RMA protocol (with [`UNTAGGED`]: no tagged receive matches it, and the
/// untagged receives mask it out).
pub const RMA: u64 = 1 << 61;
/// A target's reply; the low bits are the operation's id.
pub const RMA_REPLY: u64 = 1 << 60;
const ID_MASK: u64 = (1 << 48) - 1;
const HEADER_LEN: usize = 48;
const REPLY_LEN: usize = 8;
const OP_WRITE: u8 = 1;
const OP_READ: u8 = 2;
const HAS_DATA: u8 = 1;

/// What an RMA operation in flight waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RmaRole {
    /// The origin's receive of the target's reply.
    Reply,
    /// The target's receive of peers' requests.
    Serve,
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
    fn encode(op: u8, id: u64, a: &RmaArgs, payload: &[u8]) -> Vec<u8> {
        let mut wire = Vec::with_capacity(HEADER_LEN + payload.len());
        let flags = if a.data.is_some() { HAS_DATA } else { 0 };
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
        let fits = match op {
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
    /// `fi_write` and kin: the bytes are copied before this returns (so every write is an
    /// inject as far as the buffer goes); `inject` raises no completion on success.
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
        let reply_room = REPLY_LEN + if op == OP_READ { a.len } else { 0 };
        let reply = self.provider.post_recv(
            Source::Rank(rank),
            TagMatch::exact(UNTAGGED | RMA | RMA_REPLY | id),
            RecvBuffer::Owned { capacity: reply_room },
        )?;
        if let Err(e) = self.provider.send(rank, UNTAGGED | RMA, &Request::encode(op, id, &a, payload)) {
            let _ = self.provider.cancel_recv(reply);
            return Err(e.into());
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

    /// Keeps one receive posted for peers' requests, on an endpoint with FI_RMA.
    pub(crate) fn serve_rma(&mut self) {
        if self.serving || self.caps & FI_RMA == 0 || self.mrs.is_none() {
            return;
        }
        let matching = TagMatch { tag: UNTAGGED | RMA, mask: UNTAGGED | RMA | RMA_REPLY };
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

    /// A completion of an RMA receive: a reply at the origin, a request at the target.
    pub(crate) fn finish_rma(&mut self, p: Pending, kind: CompletionKind, error: Option<TransportError>) {
        let CompletionKind::Recv { source, len, data, .. } = kind else { return };
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
            _ => self.finish_reply(p, bytes, error),
        }
    }

    /// Applies a peer's request and sends the reply; a malformed one is dropped.
    fn answer(&mut self, source: Rank, bytes: &[u8]) {
        let req = match Request::parse(bytes) {
            Ok(req) => req,
            Err(e) => return drop_request(source, &e),
        };
        let status = match req.op {
            OP_WRITE => self.apply_write(source, &req),
            _ => self.apply_read(&req),
        };
        let reply = match status {
            Ok(read) => [&[0u8; REPLY_LEN][..], &read].concat(),
            Err(errno) => (errno as u64).to_le_bytes().to_vec(),
        };
        // A peer gone meanwhile finds out from its own side; nothing to do here.
        let _ = self.provider.send(source, UNTAGGED | RMA | RMA_REPLY | (req.id & ID_MASK), &reply);
    }

    /// Writes the request's bytes into the region; raises the CQ data on the receive CQ.
    fn apply_write(&mut self, source: Rank, req: &Request<'_>) -> Result<Vec<u8>, i32> {
        let dst = self.checked(req, FI_REMOTE_WRITE)?;
        // SAFETY: `dst` and the request's length lie inside a region the consumer registered
        // for remote writes; a registration lends that memory until fi_close of the region.
        unsafe { std::ptr::copy_nonoverlapping(req.payload.as_ptr(), dst as *mut u8, req.len) };
        bump(self.rma_cntrs.remote_write.as_ref(), false);
        if req.flags & HAS_DATA != 0 {
            let src = self.addr_of(source);
            let flags = FI_REMOTE_CQ_DATA | FI_RMA | FI_REMOTE_WRITE;
            let entry = Entry { context: 0, flags, len: req.len, buf: 0, data: req.data, tag: 0, src };
            if let Some(rx) = &self.rx {
                rx.cq.borrow_mut().entries.push_back(entry);
            }
        }
        Ok(Vec::new())
    }

    /// The bytes the request reads from the region.
    fn apply_read(&mut self, req: &Request<'_>) -> Result<Vec<u8>, i32> {
        let src = self.checked(req, FI_REMOTE_READ)?;
        // SAFETY: as in apply_write, for a region registered for remote reads.
        let bytes = unsafe { std::slice::from_raw_parts(src as *const u8, req.len) }.to_vec();
        bump(self.rma_cntrs.remote_read.as_ref(), false);
        Ok(bytes)
    }

    /// The local address of the request's range, checked against the domain's regions.
    fn checked(&self, req: &Request<'_>, access: u64) -> Result<usize, i32> {
        let mrs = self.mrs.as_ref().ok_or(FI_EINVAL)?;
        let at = mrs.borrow().check(req.key, req.addr, req.len, access).map_err(|r| r.errno())?;
        Ok(at)
    }

    /// The origin's side: the operation completes, in error if the target refused it.
    fn finish_reply(&mut self, p: Pending, bytes: &[u8], error: Option<TransportError>) {
        let (buf, want) = p.recv_into.unwrap_or((0, 0));
        let entry = Entry { context: p.context, flags: p.flags, len: want, buf: 0, data: 0, tag: 0, src: 0 };
        let outcome = match error {
            Some(e) => Err(error_entry(entry, &e, 0)),
            None => landed(entry, bytes, buf, want),
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

/// Checks a reply's status and lands a read's bytes in the consumer's buffer (`want` at `buf`).
fn landed(entry: Entry, bytes: &[u8], buf: usize, want: usize) -> Result<(), ErrEntry> {
    let refused = |err: i32, text: String| ErrEntry { entry, err, prov_errno: err, olen: 0, text };
    if bytes.len() < REPLY_LEN {
        return Err(refused(FI_EIO, "the target's reply is shorter than its header".into()));
    }
    let status = word(bytes, 0);
    if status != 0 {
        let err = i32::try_from(status).unwrap_or(FI_EIO);
        let why = if err == FI_EACCES { "access denied" } else { "no such key or range" };
        return Err(refused(err, format!("the target refused the operation: {why}")));
    }
    let read = &bytes[REPLY_LEN..];
    if read.len() != want {
        return Err(refused(FI_EIO, format!("{} bytes came back, {want} were read", read.len())));
    }
    crate::obj::copy_to_lent(buf, want, read);
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
        let wire = Request::encode(OP_WRITE, 9, &args(3, Some(5)), b"abc");
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
        let read = Request::encode(OP_READ, 1, &args(crate::info::MAX_MSG_SIZE + 1, None), &[]);
        assert!(Request::parse(&read).is_err(), "a read over max_msg_size");
    }
}
