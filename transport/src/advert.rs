//! Receiver-advertised rendezvous (issue 14): one remote write plus one notification instead of
//! RTS + read + FIN when the receive is posted before the message is sent.
//!
//! Both sides number the tagged messages of each pair of ranks: the sender counts what it sends
//! to a peer (eager or rendezvous), the receiver what arrives from it, in the order matching
//! sees it; per-source FIFO order makes the two agree. A receive posted for a named source into
//! a registered buffer that peers may write, with a capacity above the rendezvous threshold, is
//! advertised to that source as "your message number n lands here" when no other posted
//! receive could take message n first: every posted receive that accepts the source and whose
//! tags overlap is itself advertised, for an earlier number (a chain). An advert for n + k in a
//! chain holds only if messages n .. n + k - 1 took their adverts' receives, which the sender
//! can check: a message takes its advert's receive exactly when its tag matches the advert.
//!
//! A sender about to send message n above the threshold that holds a valid advert for n whose
//! tag matches and whose capacity fits writes the payload into the buffer and sends DIRECT_FIN;
//! anything else (no advert, a stale one, a tag or size that does not fit) goes the usual way,
//! and the receiver's matching then takes or skips the advertised receive as it always would.
//! Adverts are numbered in epochs: when the receiver's chain breaks (a message skipped its
//! advertised receive) it forgets the chain and advertises again in a new epoch, and the sender
//! drops what it held of the old one.

use std::collections::VecDeque;

use crate::api::{Access, OpId, Rank, RecvBuffer, RemoteRegion, Source, Tag, TagMatch};
use crate::msg::{advert_flags, kind, SlotHeader};
use crate::tagmatch::{Arrival, Matcher, PostedRecv};

/// Counters of the advertised and lent paths, for tests and benchmarks (what a provider did so
/// far).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RndvStats {
    /// Adverts this side sent (receiver).
    pub adverts_sent: u64,
    /// Sends that went into an advertised buffer (sender).
    pub direct_sends: u64,
    /// Receives completed by a DIRECT_FIN (receiver).
    pub direct_recvs: u64,
    /// Sends whose bytes the receiver read where the caller lent them (sender; shm's
    /// cross-memory attach).
    pub lent_sends: u64,
}

/// Where a sender writes message `seq`: the receiver's advertised buffer.
#[derive(Debug, Clone, Copy)]
pub struct Direct {
    /// The message's sequence number, echoed in the DIRECT_FIN.
    pub seq: u64,
    /// The receiver's id for the receive, echoed in the DIRECT_FIN.
    pub recv: u64,
    /// The receiver's region; its `len` ends at the advertised buffer's end, so bounds checks
    /// against it keep the write inside the buffer.
    pub remote: RemoteRegion,
    /// The buffer's offset in `remote`.
    pub offset: u64,
}

impl Direct {
    /// The notification for `len` bytes tagged `tag` written for this advert.
    pub fn fin(&self, tag: Tag, len: usize) -> SlotHeader {
        SlotHeader {
            kind: kind::DIRECT_FIN,
            tag,
            len: len as u64,
            cookie: self.recv,
            r_len: self.seq,
            ..Default::default()
        }
    }
}

/// An advert a sender holds for one of its future messages.
#[derive(Debug, Clone, Copy)]
struct Held {
    seq: u64,
    tag: TagMatch,
    chained: bool,
    capacity: u64,
    direct: Direct,
}

/// A receive this side advertised for message `seq` of its source.
#[derive(Debug, Clone, Copy)]
struct Advertised {
    seq: u64,
    op: OpId,
    tag: TagMatch,
    capacity: u64,
    /// The ADVERT as sent, for sending it again unchained.
    header: SlotHeader,
}

/// What one side keeps about one peer (beyond the two counters).
#[derive(Debug, Default)]
struct PeerAdverts {
    /// Sender: the epoch of the adverts held.
    held_epoch: Option<u32>,
    /// Sender: adverts for messages not sent yet, by increasing number.
    held: VecDeque<Held>,
    /// Sender: 1 + the number of the last message that matched a valid advert, and its epoch.
    matched_next: u64,
    matched_epoch: u32,
    /// Sender: (number, tag) of rendezvous-sized messages sent without an advert in hand, so
    /// that adverts arriving after them still tell whether the chain holds.
    unmatched: VecDeque<(u64, Tag)>,
    /// Receiver: the advertised receives, numbered consecutively from the next arrival.
    chain: VecDeque<Advertised>,
    /// Receiver: the epoch of `chain`.
    epoch: u32,
    /// Receiver: posted receives for this peer that could be advertised, oldest first.
    eligible: VecDeque<OpId>,
    /// Receiver: `Adverts::posts` right after the chain's last receive was posted.
    mark: u64,
}

/// The advert bookkeeping of one provider (see the module doc).
#[derive(Debug, Default)]
pub struct Adverts {
    /// Tagged messages sent to each peer.
    sent: Vec<u64>,
    /// Tagged messages from each peer seen by matching.
    arrived: Vec<u64>,
    peers: Vec<PeerAdverts>,
    /// Eligible posted receives across peers: while 0, arrivals skip all advert work.
    eligible: usize,
    /// Receives posted (kept, not matched at once) so far: a chain's `mark` tells whether any
    /// was posted since its last advert.
    posts: u64,
    /// Adverts to send, in order, with their destination.
    outbox: VecDeque<(Rank, SlotHeader)>,
    stats: RndvStats,
}

/// Tags of rendezvous sends kept per peer for adverts still on their way (a window of sends
/// far larger than any advert's delay).
const UNMATCHED_KEPT: usize = 1024;

impl PeerAdverts {
    /// Sender: message `seq`, tagged `tag`, meets its advert (`chained`, accepting `accepts`).
    /// True when the advert holds and the message takes its receive; the chain then holds
    /// for the next message.
    fn take_advert(&mut self, seq: u64, chained: bool, accepts: TagMatch, tag: Tag) -> bool {
        let epoch = self.held_epoch.unwrap_or(0);
        let valid = !chained || (self.matched_next == seq && self.matched_epoch == epoch);
        if !valid || !accepts.matches(tag) {
            return false;
        }
        self.matched_next = seq + 1;
        self.matched_epoch = epoch;
        true
    }
}

/// Whether some tag is accepted by both.
fn overlaps(a: TagMatch, b: TagMatch) -> bool {
    (a.tag ^ b.tag) & a.mask & b.mask == 0
}

/// A receive that may be advertised: a named source, one tag or any, a buffer peers may
/// write that holds more than an eager message.
fn eligible(recv: &PostedRecv, rndv_thresh: usize) -> bool {
    let RecvBuffer::Region { region, capacity, .. } = &recv.buffer else { return false };
    *capacity > rndv_thresh
        && matches!(recv.source, Source::Rank(_))
        && (recv.tag.mask == Tag::MAX || recv.tag.mask == 0)
        && region.access().allows(Access::REMOTE_WRITE)
}

/// `v[i]`, growing `v` with defaults first (ranks are few; the growth happens once).
fn slot<T: Default>(v: &mut Vec<T>, i: Rank) -> &mut T {
    let i = i as usize;
    if i >= v.len() {
        v.resize_with(i + 1, T::default);
    }
    &mut v[i]
}

impl Adverts {
    /// Counts a tagged message to `dest`; returns its number.
    #[inline(always)]
    pub fn count_send(&mut self, dest: Rank) -> u64 {
        match self.sent.get_mut(dest as usize) {
            Some(n) => {
                *n += 1;
                *n - 1
            }
            None => {
                *slot(&mut self.sent, dest) = 1;
                0
            }
        }
    }

    /// The number the next tagged message to `dest` will have (`count_send` takes it).
    pub fn next_send(&self, dest: Rank) -> u64 {
        self.sent.get(dest as usize).copied().unwrap_or(0)
    }

    /// Counts a tagged arrival from `source` (its number is the count before; `after_arrival`
    /// reads it back, so the eager path keeps no value alive across the match).
    #[inline(always)]
    pub fn count_arrival(&mut self, source: Rank) {
        match self.arrived.get_mut(source as usize) {
            Some(n) => *n += 1,
            None => *slot(&mut self.arrived, source) = 1,
        }
    }

    /// Counts a receive kept as posted (after `on_post`).
    #[inline(always)]
    pub fn count_post(&mut self) {
        self.posts += 1;
    }

    /// Whether any posted receive could be advertised (arrivals skip the bookkeeping if not).
    #[inline(always)]
    pub fn watching(&self) -> bool {
        self.eligible > 0
    }

    /// Whether the posted receive `op` may be advertised, or is: a peer may then be writing
    /// into its buffer, so it cannot be taken back.
    pub fn tracks(&self, op: OpId) -> bool {
        self.eligible > 0 && self.peers.iter().any(|p| p.eligible.contains(&op))
    }

    /// The advertised buffer message `seq` (`len` bytes tagged `tag`) to `dest` may be
    /// written into, if the sender holds a valid advert for it that fits.
    pub fn direct_for(&mut self, dest: Rank, seq: u64, tag: Tag, len: usize) -> Option<Direct> {
        let p = slot(&mut self.peers, dest);
        while p.held.front().is_some_and(|h| h.seq < seq) {
            p.held.pop_front();
        }
        let Some(h) = p.held.front().filter(|h| h.seq == seq).copied() else {
            // Its advert may still come: remember the tag to judge the chain by then.
            if p.unmatched.len() >= UNMATCHED_KEPT {
                p.unmatched.pop_front();
            }
            p.unmatched.push_back((seq, tag));
            return None;
        };
        p.held.pop_front();
        if !p.take_advert(seq, h.chained, h.tag, tag) {
            return None;
        }
        if len as u64 > h.capacity {
            return None;
        }
        self.stats.direct_sends += 1;
        Some(h.direct)
    }

    /// Sender: an ADVERT from `source` arrived.
    pub fn on_advert(&mut self, source: Rank, h: &SlotHeader) {
        let sent = self.sent.get(source as usize).copied().unwrap_or(0);
        let p = slot(&mut self.peers, source);
        let epoch = h.imm >> 2;
        if p.held_epoch != Some(epoch) {
            p.held.clear();
            p.held_epoch = Some(epoch);
        }
        let seq = h.r_len;
        let tag = if h.imm & advert_flags::ANY_TAG != 0 { TagMatch::any() } else { TagMatch::exact(h.tag) };
        let chained = h.imm & advert_flags::CHAINED != 0;
        if seq < sent {
            // That message went already; whether it took this receive still tells whether the
            // next advert of the chain holds.
            while p.unmatched.front().is_some_and(|(s, _)| *s < seq) {
                p.unmatched.pop_front();
            }
            if let Some((_, sent_tag)) = p.unmatched.front().filter(|(s, _)| *s == seq).copied() {
                p.unmatched.pop_front();
                p.take_advert(seq, chained, tag, sent_tag);
            }
            return;
        }
        let remote = RemoteRegion {
            owner: source,
            addr: h.r_addr,
            len: h.r_offset.saturating_add(h.len),
            key: h.r_key,
        };
        let direct = Direct { seq, recv: h.cookie, remote, offset: h.r_offset };
        let held = Held { seq, tag, chained, capacity: h.len, direct };
        if p.held.back().is_none_or(|x| x.seq < seq) {
            p.held.push_back(held); // the common case: the chain grows at its end
            return;
        }
        match p.held.iter_mut().find(|x| x.seq == seq) {
            // The same receive again, anchored: it no longer depends on the one before.
            Some(x) if x.direct.recv == held.direct.recv => x.chained &= held.chained,
            Some(x) => *x = held,
            None => {
                let at = p.held.iter().position(|x| x.seq > seq).unwrap_or(p.held.len());
                p.held.insert(at, held);
            }
        }
    }

    /// Receiver: `recv` is about to be posted (nothing that arrived matched it). Advertises it
    /// when it may be.
    pub fn on_post<A: Arrival>(&mut self, recv: &PostedRecv, matcher: &Matcher<A>, rndv_thresh: usize) {
        let Source::Rank(s) = recv.source else { return };
        if !eligible(recv, rndv_thresh) {
            return;
        }
        let arrived = self.arrived.get(s as usize).copied().unwrap_or(0);
        let p = slot(&mut self.peers, s);
        p.eligible.push_back(recv.op);
        self.eligible += 1;
        // Behind a chain whose last receive takes the same tags, with nothing posted since, no
        // other receive can come first: the common stream of receives, without a scan.
        let same = p.chain.back().is_some_and(|b| b.tag == recv.tag) && p.mark == self.posts;
        let may = same || {
            let in_chain = p.chain.iter().filter(|a| overlaps(a.tag, recv.tag)).count();
            in_chain == matcher.count_posted(|q| q.source.matches(s) && overlaps(q.tag, recv.tag))
        };
        if may {
            let seq = p.chain.back().map_or(arrived, |a| a.seq + 1);
            self.advertise(s, recv, seq);
            // The receive is counted as posted right after this.
            slot(&mut self.peers, s).mark = self.posts + 1;
        }
    }

    /// Queues the ADVERT of `recv` for message `seq` of `source` and adds it to the chain.
    fn advertise(&mut self, source: Rank, recv: &PostedRecv, seq: u64) {
        let RecvBuffer::Region { region, offset, capacity } = &recv.buffer else { return };
        let p = slot(&mut self.peers, source);
        let mut flags = if recv.tag.mask == 0 { advert_flags::ANY_TAG } else { 0 };
        if !p.chain.is_empty() {
            flags |= advert_flags::CHAINED;
        }
        let remote = region.remote();
        let header = SlotHeader {
            kind: kind::ADVERT,
            imm: flags | (p.epoch << 2),
            tag: recv.tag.tag,
            len: *capacity as u64,
            cookie: recv.op.0,
            r_addr: remote.addr,
            r_len: seq,
            r_key: remote.key,
            r_offset: *offset as u64,
        };
        let capacity = *capacity as u64;
        p.chain.push_back(Advertised { seq, op: recv.op, tag: recv.tag, capacity, header });
        self.outbox.push_back((source, header));
        self.stats.adverts_sent += 1;
    }

    /// Re-sends the chain's front advert on its own (not chained): the sender could not tell
    /// that the message before took its receive (an eager one: their tags are not kept).
    fn anchor(&mut self, source: Rank) {
        let Some(p) = self.peers.get_mut(source as usize) else { return };
        let Some(front) = p.chain.front() else { return };
        let header = SlotHeader { imm: front.header.imm & !advert_flags::CHAINED, ..front.header };
        self.outbox.push_back((source, header));
        self.stats.adverts_sent += 1;
    }

    /// Receiver: the arrival from `source` just counted took the posted receive `taken` (None:
    /// none, it waits as unexpected); `eager` if it came eagerly (the sender keeps no record of
    /// those). Keeps the chain and the eligible receives up to date, and advertises again where
    /// the sender could not tell that the chain holds.
    pub fn after_arrival<A: Arrival>(
        &mut self,
        source: Rank,
        taken: Option<OpId>,
        eager: bool,
        matcher: &Matcher<A>,
    ) {
        let seq = self.arrived.get(source as usize).map_or(0, |n| n.wrapping_sub(1));
        let Some(p) = self.peers.get_mut(source as usize) else { return };
        if let Some(op) = taken {
            // Receives for one source are mostly taken in posting order: the front first.
            if p.eligible.front() == Some(&op) {
                p.eligible.pop_front();
                self.eligible -= 1;
            } else if let Some(i) = p.eligible.iter().position(|e| *e == op) {
                p.eligible.remove(i);
                self.eligible -= 1;
            }
        }
        match p.chain.pop_front() {
            Some(front) if front.seq == seq && taken == Some(front.op) => {
                if p.chain.is_empty() && !p.eligible.is_empty() {
                    self.rebuild(source, seq + 1, matcher);
                } else if eager {
                    self.anchor(source);
                }
            }
            Some(_) => {
                // The chain broke: a new epoch, advertised afresh from what is posted.
                p.chain.clear();
                p.epoch = (p.epoch + 1) & (u32::MAX >> 2);
                self.rebuild(source, seq + 1, matcher);
            }
            None if !p.eligible.is_empty() => self.rebuild(source, seq + 1, matcher),
            None => {}
        }
    }

    /// Advertises, in posting order, the eligible receives for `source` that no earlier
    /// unadvertised receive overlaps, starting at message `next` (the chain is empty).
    fn rebuild<A: Arrival>(&mut self, source: Rank, next: u64, matcher: &Matcher<A>) {
        let Some(p) = self.peers.get(source as usize) else { return };
        if p.eligible.is_empty() {
            return;
        }
        // Receives posted after the last one advertised here may be skipped ones: the next
        // post scans.
        if let Some(p) = self.peers.get_mut(source as usize) {
            p.mark = u64::MAX;
        }
        let mut blocked: Vec<TagMatch> = Vec::new();
        let mut seq = next;
        for recv in matcher.posted_in_order() {
            if !recv.source.matches(source) {
                continue;
            }
            let ok = self.peers[source as usize].eligible.contains(&recv.op)
                && !blocked.iter().any(|b| overlaps(*b, recv.tag));
            if ok {
                self.advertise(source, recv, seq);
                seq += 1;
            } else {
                blocked.push(recv.tag);
            }
        }
    }

    /// Receiver: a DIRECT_FIN from `source` arrived. Counts it, checks it against the chain
    /// and returns the receive it completes with the message's tag and length; None if it is
    /// malformed (the chain is then dropped and advertised again).
    pub fn on_direct_fin(
        &mut self,
        source: Rank,
        h: &SlotHeader,
        matcher: &mut Matcher<impl Arrival>,
    ) -> Result<PostedRecv, String> {
        self.count_arrival(source);
        let seq = self.arrived.get(source as usize).map_or(0, |n| n - 1);
        let front = self.peers.get(source as usize).and_then(|p| p.chain.front().copied());
        let recv = match front {
            Some(a) if a.seq == seq && h.r_len == seq && a.op.0 == h.cookie => {
                if !a.tag.matches(h.tag) || h.len > a.capacity {
                    Err(format!("tag {:#x} or length {} does not fit the advert", h.tag, h.len))
                } else {
                    matcher
                        .take_posted_if(source, h.tag, |r| r.op == a.op)
                        .ok_or_else(|| "the advertised receive is not the one matching".to_string())
                }
            }
            _ => Err(format!("message {} for receive {:#x}, expected message {seq}", h.r_len, h.cookie)),
        };
        match &recv {
            Ok(r) => {
                self.stats.direct_recvs += 1;
                self.after_arrival(source, Some(r.op), false, matcher);
            }
            Err(_) => self.after_arrival(source, None, false, matcher),
        }
        recv
    }

    /// The next ADVERT to send.
    pub fn pop_outgoing(&mut self) -> Option<(Rank, SlotHeader)> {
        self.outbox.pop_front()
    }

    /// Whether adverts wait to be sent.
    #[inline(always)]
    pub fn has_outgoing(&self) -> bool {
        !self.outbox.is_empty()
    }

    /// Forgets everything about `rank` (it died, or reconnects as a new incarnation): both
    /// sides count from zero again.
    pub fn forget(&mut self, rank: Rank) {
        if let Some(p) = self.peers.get_mut(rank as usize) {
            self.eligible = self.eligible.saturating_sub(p.eligible.len());
            *p = PeerAdverts::default();
        }
        if let Some(n) = self.sent.get_mut(rank as usize) {
            *n = 0;
        }
        if let Some(n) = self.arrived.get_mut(rank as usize) {
            *n = 0;
        }
        self.outbox.retain(|(dest, _)| *dest != rank);
    }

    /// The counters so far.
    pub fn stats(&self) -> RndvStats {
        self.stats
    }
}

#[cfg(test)]
mod order_tests;
