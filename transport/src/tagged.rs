//! The tagged-message protocol state every provider shares (libfabric keeps the same in its
//! util layer): posted receives and unexpected arrivals, rendezvous sends waiting for their
//! FIN, receiver adverts ([`crate::advert`]), delivery into receive buffers, and what a dead
//! peer fails. Providers own only the moving of bytes: ring slots or SENDs for eager data, a
//! copy or an RDMA read for rendezvous, a copy or an RDMA write into an advertised buffer.

use std::collections::HashMap;

use smallvec::SmallVec;

use crate::advert::{Adverts, Direct, RndvStats};
use crate::api::{Completion, CompletionKind, EagerTake, OpId, Rank, RecvBuffer, Source, Tag, TagMatch};
use crate::completion::CompletionQueues;
use crate::error::{Result, TransportError};
use crate::msg::{fin, kind, SlotHeader};
use crate::region::Region;
use crate::tagmatch::{Arrival, Matcher, PostedRecv};

mod home;
pub use home::{lock as lock_shared, TaggedHome, TaggedRef};

/// Eager bytes kept until a receive claims them: inline up to a cache line's worth, so the
/// common small message costs no allocation (a malloc and free were ~5 % of an 8-byte
/// ping-pong).
type EagerBytes = SmallVec<[u8; EAGER_INLINE]>;
/// Bytes of an unexpected eager arrival kept inline, without a buffer of its own.
const EAGER_INLINE: usize = 64;

/// An arrival no receive has claimed yet.
enum Unexpected {
    Eager { source: Rank, tag: Tag, data: EagerBytes },
    Rts { source: Rank, header: SlotHeader },
}

impl Arrival for Unexpected {
    fn source(&self) -> Rank {
        match self {
            Unexpected::Eager { source, .. } | Unexpected::Rts { source, .. } => *source,
        }
    }
    fn tag(&self) -> Tag {
        match self {
            Unexpected::Eager { tag, .. } => *tag,
            Unexpected::Rts { header, .. } => header.tag,
        }
    }
}

/// A rendezvous send waiting for the receiver's FIN; holds the region the receiver reads
/// (None: bytes the caller lent, which it keeps until the completion).
struct PendingSend {
    op: OpId,
    dest: Rank,
    tag: Tag,
    len: usize,
    _region: Option<Region>,
}

/// A matched rendezvous the provider must now fetch: read `rts` from `source` into `recv`.
pub struct Fetch {
    /// The receive the message lands in.
    pub recv: PostedRecv,
    /// The sender, whose region is read.
    pub source: Rank,
    /// The sender's announcement: its region, offset and length.
    pub rts: SlotHeader,
}

/// The tagged-message state of one provider: the matcher, plus rendezvous sends awaiting FIN.
#[derive(Default)]
pub struct TaggedState {
    matcher: Matcher<Unexpected>,
    pending: HashMap<u64, PendingSend>,
    adv: Adverts,
    lent_sends: u64,
    /// Buffers of unexpected eager arrivals too long to hold inline, kept once taken so that a
    /// stream of them allocates nothing per message (at most `SPARE_BUFFERS`).
    spare: Vec<Vec<u8>>,
}

/// Spare eager buffers kept: a window of unexpected arrivals (each at most an eager slot).
const SPARE_BUFFERS: usize = 256;

/// Copies a message into a receive buffer; returns the data for `Owned` buffers.
pub fn deliver(buffer: &RecvBuffer, data: &[u8]) -> Result<Option<Vec<u8>>> {
    if let RecvBuffer::Borrowed(b) = buffer {
        if b.falls_back(data.len()) {
            return Ok(Some(data.to_vec()));
        }
    }
    if data.len() > buffer.capacity() {
        return Err(TransportError::Truncated { len: data.len() as u64, capacity: buffer.capacity() as u64 });
    }
    match buffer {
        RecvBuffer::Region { region, offset, .. } => region.write(*offset, data).map(|()| None),
        RecvBuffer::Owned { .. } => Ok(Some(data.to_vec())),
        RecvBuffer::Borrowed(b) => b.write(0, data).map(|()| None),
    }
}

/// `deliver` for data this side owns already (an unexpected arrival): an owned receive takes
/// the buffer itself instead of a copy.
fn deliver_owned(buffer: &RecvBuffer, data: Vec<u8>) -> Result<Option<Vec<u8>>> {
    match buffer {
        RecvBuffer::Owned { capacity } if data.len() <= *capacity => Ok(Some(data)),
        RecvBuffer::Borrowed(b) if b.falls_back(data.len()) => Ok(Some(data)),
        _ => deliver(buffer, &data),
    }
}

/// The completion of receive `op` with the outcome `r` of its delivery.
pub fn recv_completion(
    op: OpId,
    source: Rank,
    tag: Tag,
    len: usize,
    r: Result<Option<Vec<u8>>>,
) -> Completion {
    match r {
        Ok(data) => Completion::ok(op, CompletionKind::Recv { source, tag, len, data }),
        Err(e) => Completion::failed(op, CompletionKind::Recv { source, tag, len, data: None }, e),
    }
}

/// Checks a receive before it is posted: a source inside the job, a buffer inside its region,
/// no lent memory (a posted receive may complete at any later time).
pub fn check_recv(source: Source, buffer: &RecvBuffer, size: u32) -> Result<()> {
    check_claim(source, buffer, size)?;
    if let RecvBuffer::Borrowed(_) = buffer {
        return Err(TransportError::Unsupported(
            "lent memory for a posted receive: only a claim on a load/store provider takes it".into(),
        ));
    }
    Ok(())
}

/// `check_recv` for a claim on a load/store provider, which completes before it returns and
/// so may take lent memory.
pub fn check_claim(source: Source, buffer: &RecvBuffer, size: u32) -> Result<()> {
    if let Source::Rank(r) = source {
        if r >= size {
            return Err(TransportError::InvalidRank(r, size));
        }
    }
    if let RecvBuffer::Region { region, offset, capacity } = buffer {
        region.check_bounds("post_recv", *offset, *capacity)?;
    }
    Ok(())
}

/// The FIN status that tells the sender how the receiver's read ended.
pub fn fin_status<T>(r: &Result<T>) -> u32 {
    match r {
        Ok(_) => fin::OK,
        Err(TransportError::Truncated { .. }) => fin::TRUNCATED,
        Err(_) => fin::READ_FAILED,
    }
}

impl TaggedState {
    /// Eager data arrived: complete the oldest matching receive, or keep it for a later one.
    pub fn on_eager(&mut self, source: Rank, tag: Tag, payload: &[u8], cq: &mut CompletionQueues) {
        self.adv.count_arrival(source);
        match self.matcher.take_posted(source, tag) {
            Some(recv) => {
                if self.adv.watching() {
                    self.adv.after_arrival(source, Some(recv.op), true, &self.matcher);
                }
                cq.push(recv_completion(recv.op, source, tag, payload.len(), deliver(&recv.buffer, payload)))
            }
            None => {
                let data = self.eager_bytes(payload);
                self.matcher.push_unexpected(Unexpected::Eager { source, tag, data });
                if self.adv.watching() {
                    self.adv.after_arrival(source, None, true, &self.matcher);
                }
            }
        }
    }

    /// `payload` kept: inline when short, else in a spare buffer (a fresh one only when none
    /// is left).
    #[inline]
    fn eager_bytes(&mut self, payload: &[u8]) -> EagerBytes {
        if payload.len() <= EAGER_INLINE {
            return EagerBytes::from_slice(payload);
        }
        let mut buf = self.spare.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(payload);
        // Longer than the inline room: the SmallVec keeps this very buffer.
        EagerBytes::from_vec(buf)
    }

    /// An unexpected arrival's buffer, taken: kept for the next one when spilled.
    #[inline]
    fn recycle(&mut self, data: EagerBytes) {
        if data.spilled() && self.spare.len() < SPARE_BUFFERS {
            self.spare.push(data.into_vec());
        }
    }

    /// A control message arrived (rendezvous announcement or finish, or a put-with-immediate
    /// notice carried as a message): a rendezvous to fetch, or nothing; any other kind is
    /// malformed.
    pub fn on_control(
        &mut self,
        source: Rank,
        header: SlotHeader,
        cq: &mut CompletionQueues,
    ) -> Result<Option<Fetch>> {
        match header.kind {
            kind::RTS | kind::RTS_LENT => Ok(self.on_rts(source, header)),
            kind::FIN => self.on_fin(source, &header, cq).map(|()| None),
            kind::IMM => {
                let kind = CompletionKind::Imm { source, imm: header.imm, len: header.len as usize };
                cq.push(Completion::ok(OpId::REMOTE, kind));
                Ok(None)
            }
            kind::ADVERT => {
                self.adv.on_advert(source, &header);
                Ok(None)
            }
            kind::DIRECT_FIN => match self.adv.on_direct_fin(source, &header, &mut self.matcher) {
                Ok(recv) => {
                    let len = header.len as usize;
                    cq.push(recv_completion(recv.op, source, header.tag, len, Ok(None)));
                    Ok(None)
                }
                Err(detail) => Err(TransportError::Malformed {
                    what: "message",
                    detail: format!("DIRECT_FIN from rank {source}: {detail}"),
                }),
            },
            other => Err(TransportError::Malformed {
                what: "message",
                detail: format!("unknown kind {other} from rank {source}"),
            }),
        }
    }

    /// A rendezvous announcement arrived: the receive to fetch into, or None if it waits.
    pub fn on_rts(&mut self, source: Rank, rts: SlotHeader) -> Option<Fetch> {
        self.adv.count_arrival(source);
        let recv = self.matcher.take_posted(source, rts.tag);
        if recv.is_none() {
            self.matcher.push_unexpected(Unexpected::Rts { source, header: rts });
        }
        if self.adv.watching() {
            self.adv.after_arrival(source, recv.as_ref().map(|r| r.op), false, &self.matcher);
        }
        recv.map(|recv| Fetch { recv, source, rts })
    }

    /// The receiver finished reading a rendezvous send: complete it. A FIN that matches no
    /// send of ours to that peer is malformed.
    pub fn on_fin(&mut self, source: Rank, header: &SlotHeader, cq: &mut CompletionQueues) -> Result<()> {
        match self.pending.remove(&header.cookie) {
            Some(p) if p.dest == source => {
                let kind = CompletionKind::Send { dest: p.dest, tag: p.tag, len: p.len };
                cq.push(match header.imm {
                    fin::OK | fin::TRUNCATED => Completion::ok(p.op, kind),
                    _ => Completion::failed(
                        p.op,
                        kind,
                        TransportError::Remote(source, "could not read the rendezvous buffer".into()),
                    ),
                });
                Ok(())
            }
            other => {
                if let Some(p) = other {
                    self.pending.insert(header.cookie, p);
                }
                Err(TransportError::Malformed {
                    what: "message",
                    detail: format!("FIN from rank {source} for unknown send {}", header.cookie),
                })
            }
        }
    }

    /// Remembers a rendezvous send (announced with cookie `op`) until its FIN.
    pub fn add_pending(&mut self, op: OpId, dest: Rank, tag: Tag, len: usize, region: Option<&Region>) {
        self.lent_sends += u64::from(region.is_none());
        self.pending.insert(op.0, PendingSend { op, dest, tag, len, _region: region.cloned() });
    }

    /// Counts a tagged message (eager or rendezvous) to `dest`; returns its sequence number.
    #[inline(always)]
    pub fn count_send(&mut self, dest: Rank) -> u64 {
        self.adv.count_send(dest)
    }

    /// The advertised buffer that the next tagged message to `dest` (`len` bytes tagged `tag`)
    /// may be written into, if any; the provider writes it, then sends [`Direct::fin`]
    /// (`count_send` takes the message's number once it is on its way).
    pub fn direct_for(&mut self, dest: Rank, tag: Tag, len: usize) -> Option<Direct> {
        let seq = self.adv.next_send(dest);
        self.adv.direct_for(dest, seq, tag, len)
    }

    /// The next advert the provider must send (to the rank given), if any.
    #[inline(always)]
    pub fn pop_advert(&mut self) -> Option<(Rank, SlotHeader)> {
        if !self.adv.has_outgoing() {
            return None;
        }
        self.adv.pop_outgoing()
    }

    /// The advertised path's counters.
    pub fn rndv_stats(&self) -> RndvStats {
        RndvStats { lent_sends: self.lent_sends, ..self.adv.stats() }
    }

    /// The arrival a receive for (`source`, `tag`) would take now, left in place: its
    /// sender, tag and length (a rendezvous announces its length).
    #[inline]
    pub fn peek(&self, source: Source, tag: TagMatch) -> Option<(Rank, Tag, usize)> {
        self.matcher.peek_unexpected(source, tag).map(|a| match a {
            Unexpected::Eager { source, tag, data } => (*source, *tag, data.len()),
            Unexpected::Rts { source, header } => (*source, header.tag, header.len as usize),
        })
    }

    /// Whether nothing is queued here (no posted receive, no unexpected arrival, no advert
    /// being watched for): a provider may then hand the next arrival straight to a claim.
    #[inline]
    pub fn is_quiet(&self) -> bool {
        self.matcher.posted_len() == 0 && self.matcher.unexpected_len() == 0 && !self.adv.watching()
    }

    /// Counts an arrival from `source` that a provider handed straight to a claim.
    #[inline]
    pub fn count_arrival(&mut self, source: Rank) {
        self.adv.count_arrival(source);
    }

    /// [`crate::Provider::take_eager_into`] on this state: the arrival a receive for
    /// (`source`, `tag`) would take, copied into `buf` and forgotten if it is eager data that
    /// fits and `accept` wants.
    #[inline]
    pub fn take_eager_into(
        &mut self,
        source: Source,
        tag: TagMatch,
        buf: &mut [u8],
        accept: &dyn Fn(Tag, usize) -> bool,
    ) -> EagerTake {
        match self.matcher.peek_unexpected(source, tag) {
            None => return EagerTake::NoneArrived,
            Some(Unexpected::Eager { tag, data, .. })
                if data.len() <= buf.len() && accept(*tag, data.len()) => {}
            Some(_) => return EagerTake::Claim,
        }
        let Some(Unexpected::Eager { source, tag, data }) = self.matcher.take_unexpected(source, tag) else {
            // The peek above found this very arrival, and nothing ran in between.
            return EagerTake::Claim;
        };
        let len = data.len();
        buf[..len].copy_from_slice(&data);
        self.recycle(data);
        EagerTake::Landed { source, tag, len }
    }

    /// A new receive: matched against what already arrived, else kept (and advertised to its
    /// source when it may be: a registered buffer larger than `rndv_thresh`). Returns a
    /// rendezvous to fetch when it matched one. `dead` says which peers are gone.
    pub fn post(
        &mut self,
        recv: PostedRecv,
        dead: impl Fn(Rank) -> bool,
        cq: &mut CompletionQueues,
        rndv_thresh: usize,
    ) -> Result<Option<Fetch>> {
        match self.matcher.take_unexpected(recv.source, recv.tag) {
            Some(Unexpected::Eager { source, tag, data }) => {
                let len = data.len();
                cq.push(recv_completion(
                    recv.op,
                    source,
                    tag,
                    len,
                    deliver_owned(&recv.buffer, data.into_vec()),
                ));
                Ok(None)
            }
            Some(Unexpected::Rts { source, header }) if dead(source) => {
                cq.push(recv_completion(
                    recv.op,
                    source,
                    header.tag,
                    0,
                    Err(TransportError::PeerDead(source)),
                ));
                Ok(None)
            }
            Some(Unexpected::Rts { source, header }) => Ok(Some(Fetch { recv, source, rts: header })),
            None => {
                // Lent memory must be written before the claim returns: never kept waiting,
                // unless it was lent to a posted receive.
                if matches!(recv.buffer, RecvBuffer::Borrowed(b) if !b.is_posted()) {
                    return Err(TransportError::Unsupported(
                        "lent memory with nothing arrived to claim".into(),
                    ));
                }
                if let Source::Rank(r) = recv.source {
                    if dead(r) {
                        return Err(TransportError::PeerDead(r));
                    }
                }
                // Only a buffer above the threshold may be advertised: the 8 B path pays a compare.
                if recv.buffer.capacity() > rndv_thresh {
                    self.adv.on_post(&recv, &self.matcher, rndv_thresh);
                }
                self.adv.count_post();
                self.matcher.push_posted(recv);
                Ok(None)
            }
        }
    }

    /// [`crate::Provider::cancel_recv`] on this state: true when the posted receive `op` was
    /// still unmatched and is now gone (no completion follows); false when it matched
    /// already, is unknown, or was advertised (a peer may be writing into its buffer).
    pub fn cancel_recv(&mut self, op: OpId) -> bool {
        if self.adv.tracks(op) {
            return false;
        }
        self.matcher.remove_posted(op).is_some()
    }

    /// Forgets what `rank`'s previous incarnation sent that no receive claimed (it must never be
    /// taken for the new incarnation's); returns how many arrivals were dropped.
    pub fn purge_unexpected_from(&mut self, rank: Rank) -> usize {
        self.adv.forget(rank);
        self.matcher.drop_unexpected_from(rank)
    }

    /// Fails the sends waiting on `rank` and the receives only `rank` could satisfy, each with
    /// `error`.
    pub fn fail_peer(&mut self, rank: Rank, error: &TransportError, cq: &mut CompletionQueues) {
        let cookies: Vec<u64> =
            self.pending.iter().filter(|(_, p)| p.dest == rank).map(|(c, _)| *c).collect();
        for cookie in cookies {
            if let Some(p) = self.pending.remove(&cookie) {
                let kind = CompletionKind::Send { dest: p.dest, tag: p.tag, len: p.len };
                cq.push(Completion::failed(p.op, kind, error.clone()));
            }
        }
        for recv in self.matcher.drain_posted_from(rank) {
            cq.push(recv_completion(recv.op, rank, recv.tag.tag, 0, Err(error.clone())));
        }
        self.adv.forget(rank);
    }
}
