//! Simple causal message logging (seed 000 §2.6, Algs 1-5), the state one rank keeps:
//!
//! - `unstable` (the algorithms' detList): determinants this rank created by wildcard
//!   receives and not yet stable. Each is piggybacked on the next message to every
//!   destination (once per destination) and written asynchronously to this rank's log at its
//!   buddy on another node; once that write is durable the determinant is stable (Alg 3's
//!   acknowledgement) and is piggybacked no more. Delivery never waits for the write.
//! - `det_log`: determinants other ranks piggybacked to this one, kept so that a failed rank
//!   can collect its determinants from the survivors (Alg 5). Cleared at checkpoint (Alg 4).
//!   Those of a rank in this rank's failure unit (its node) are also taken into `unstable`
//!   and ride and are written as this rank's own: the node's ranks fail together, and a
//!   determinant of this rank that reaches a survivor or the buddy must not outlive the
//!   determinants of the messages it depended on (the papers' algorithms assume one failed
//!   process at a time).
//! - `ReplayPlan`: the collected determinants of a restarted rank, consumed in rsn order.
//!
//! The endpoint owns the transport side (piggyback encoding, ring writes); this module is
//! plain bookkeeping, so it is tested directly.

use std::collections::{BTreeMap, HashSet, VecDeque};

use reverb_transport::codec::Writer;
use reverb_transport::Rank;

use crate::determinant::{Determinant, Rsn, Ssn};
use crate::envelope::MAX_PIGGYBACKED;
use crate::error::{LogError, Result};
use crate::wire::Reader;

/// One rank's causal-logging bookkeeping.
///
/// Every operation on the per-message path is constant time (amortized): the unstable
/// determinants carry consecutive creation numbers (`first_seq`, `first_seq + 1`, ...), so a
/// destination's piggyback cursor is an index by subtraction, not a search; tickets are kept
/// per write batch, not per determinant.
#[derive(Debug)]
pub(crate) struct CausalState {
    /// detList: `unstable[i]` has creation number `first_seq + i`.
    unstable: DetList,
    first_seq: u64,
    /// The written, not yet stable batches in write order: (creation number one past the
    /// batch's last determinant, the durable mark the batch needs: ring ticket or queue
    /// index + 1). They cover a prefix of `unstable`; writes go in creation order.
    written: VecDeque<(u64, u64)>,
    /// The unwritten entries are the last `unwritten` ones (a full ring defers the write; the
    /// piggyback goes on).
    unwritten: usize,
    /// Per destination: the creation number one past the last determinant piggybacked to it.
    sent_until: Vec<u64>,
    /// detLog: piggybacked determinants per creator, in rsn order. A creator piggybacks its
    /// own determinants once per destination and in rsn order, so this is an append in the
    /// common case (a copy forwarded by the creator's node may come late, or twice).
    det_log: Vec<Vec<Determinant>>,
    det_log_len: usize,
    /// Per creator: whether it fails with this rank (same failure unit, not this rank), so
    /// its piggybacked determinants are forwarded as this rank's own.
    forward: Vec<bool>,
}

impl CausalState {
    pub(crate) fn new(size: u32) -> Self {
        CausalState {
            unstable: DetList::default(),
            first_seq: 0,
            written: VecDeque::new(),
            unwritten: 0,
            sent_until: vec![0; size as usize],
            det_log: vec![Vec::new(); size as usize],
            det_log_len: 0,
            forward: vec![false; size as usize],
        }
    }

    /// The ranks that fail together with this one (`failure_unit[r]` is rank `r`'s unit):
    /// their determinants piggybacked here are forwarded (see the module's doc).
    pub(crate) fn set_failure_units(&mut self, me: Rank, failure_unit: &[u32]) {
        let mine = failure_unit.get(me as usize).copied();
        self.forward = (0..self.forward.len())
            .map(|r| r != me as usize && mine.is_some() && failure_unit.get(r).copied() == mine)
            .collect();
    }

    /// Alg 2 line 12: a new determinant of this rank, unstable until its write is durable.
    #[inline]
    pub(crate) fn add(&mut self, det: Determinant) {
        self.unstable.push(det);
        self.unwritten += 1;
    }

    #[inline]
    pub(crate) fn unstable_len(&self) -> usize {
        self.unstable.len()
    }

    #[inline]
    pub(crate) fn unwritten_len(&self) -> usize {
        self.unwritten
    }

    /// Up to `max` determinants not written yet, oldest first (the caller writes them, then
    /// calls `mark_written` with how many it wrote).
    pub(crate) fn unwritten(&self, max: usize, out: &mut Vec<Determinant>) {
        let live = self.unstable.live();
        let first = live.len() - self.unwritten;
        out.extend_from_slice(&live[first..first + self.unwritten.min(max)]);
    }

    /// The oldest `count` unwritten determinants are durable once the log reaches `ticket`.
    pub(crate) fn mark_written(&mut self, count: usize, ticket: u64) {
        let count = count.min(self.unwritten);
        if count == 0 {
            return;
        }
        self.unwritten -= count;
        let end = self.first_seq + (self.unstable.len() - self.unwritten) as u64;
        self.written.push_back((end, ticket));
    }

    /// The log they were written to is gone: every unstable determinant is to write again.
    pub(crate) fn unmark_written(&mut self) {
        self.written.clear();
        self.unwritten = self.unstable.len();
    }

    /// Alg 3: every determinant whose write is at or below the durable mark is stable.
    /// Returns how many became stable.
    pub(crate) fn mark_stable(&mut self, durable: u64) -> usize {
        let mut end = self.first_seq;
        while let Some(&(batch_end, ticket)) = self.written.front() {
            if ticket > durable {
                break;
            }
            end = batch_end;
            self.written.pop_front();
        }
        let stable = (end - self.first_seq) as usize;
        self.unstable.pop_front(stable);
        self.first_seq = end;
        stable
    }

    /// The durable mark the newest written, not yet stable determinant needs.
    pub(crate) fn last_ticket(&self) -> Option<u64> {
        self.written.back().map(|&(_, ticket)| ticket)
    }

    /// Written determinants not yet known durable.
    #[inline]
    pub(crate) fn written_unstable(&self) -> usize {
        self.unstable.len() - self.unwritten
    }

    /// Whether any written determinant still waits for its durable mark.
    #[inline]
    pub(crate) fn awaiting_durable(&self) -> bool {
        self.unstable.len() > self.unwritten
    }

    /// Alg 1 line 4: the unstable determinants `dest` has not been sent yet (at most
    /// [`MAX_PIGGYBACKED`]; the rest ride on later messages). Returns how many were added.
    pub(crate) fn piggyback_for(&mut self, dest: Rank, out: &mut Vec<Determinant>) -> Result<usize> {
        let Some(cursor) = self.sent_until.get_mut(dest as usize) else {
            return Err(dest_out_of_range(dest));
        };
        // Stable determinants (below `first_seq`) are not sent again.
        let first = cursor.saturating_sub(self.first_seq).min(self.unstable.len() as u64) as usize;
        let count = (self.unstable.len() - first).min(MAX_PIGGYBACKED);
        let sent = &self.unstable.live()[first..first + count];
        *cursor = self.first_seq + (first + count) as u64;
        if let [one] = sent {
            // The usual case, where a `memcpy` call cost more than the copy.
            if one.receiver == dest {
                return Ok(0);
            }
            out.push(*one);
            return Ok(1);
        }
        // A forwarded determinant does not go back to its creator.
        let before = out.len();
        out.extend(sent.iter().filter(|d| d.receiver != dest));
        Ok(out.len() - before)
    }

    /// Alg 2 line 10: keeps what a peer piggybacked. Returns how many were new.
    /// Determinants of creators outside the job are malformed input: `Err`.
    /// A new one of a creator in this rank's failure unit is forwarded (added to `unstable`).
    pub(crate) fn store_piggybacked(&mut self, dets: &[Determinant]) -> Result<usize> {
        let mut new = 0;
        for d in dets {
            let Some(log) = self.det_log.get_mut(d.receiver as usize) else {
                return Err(receiver_out_of_range(d));
            };
            // The common case: the creator's next determinant.
            let added = if log.last().is_none_or(|last| last.rsn < d.rsn) {
                log.push(*d);
                true
            } else {
                insert_late(log, d)?
            };
            if added {
                new += 1;
                if self.forward[d.receiver as usize] {
                    self.add(*d);
                }
            }
        }
        self.det_log_len += new;
        Ok(new)
    }

    pub(crate) fn det_log_len(&self) -> usize {
        self.det_log_len
    }

    /// The detLog's determinants created by `rank`, in rsn order.
    pub(crate) fn det_log_of(&self, rank: Rank) -> impl Iterator<Item = &Determinant> {
        self.det_log.get(rank as usize).into_iter().flatten()
    }

    /// Drops `rank`'s determinants through `through_rsn` (its checkpoint covers them).
    /// Returns how many were dropped.
    pub(crate) fn trim_det_log(&mut self, rank: Rank, through_rsn: Rsn) -> usize {
        let Some(log) = self.det_log.get_mut(rank as usize) else { return 0 };
        let dropped = log.partition_point(|d| d.rsn <= through_rsn);
        log.drain(..dropped);
        self.det_log_len -= dropped;
        dropped
    }

    /// A coordinated checkpoint covers every delivery so far: no determinant is needed.
    pub(crate) fn drop_unstable(&mut self) {
        // Creation numbers go on, so no destination's cursor points into the new ones.
        self.first_seq += self.unstable.len() as u64;
        self.unstable.clear();
        self.written.clear();
        self.unwritten = 0;
    }

    /// A restart in place loses everything this rank held.
    pub(crate) fn clear(&mut self) {
        let forward = std::mem::take(&mut self.forward);
        *self = CausalState { forward, ..CausalState::new(self.sent_until.len() as u32) };
    }
}

/// The determinants a restarted rank replays, by rsn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReplayPlan {
    /// Deliveries.
    by_rsn: BTreeMap<Rsn, Determinant>,
    /// Probes' findings ("seen" determinants), by their call's tick: kept apart, as no
    /// receive takes them and the message they name is free for any later receive.
    seen: BTreeMap<Rsn, (Rank, Ssn)>,
    /// The (sender, ssn) of every planned delivery.
    named: HashSet<(Rank, Ssn)>,
    last_rsn: Rsn,
}

impl ReplayPlan {
    /// Checks that every determinant belongs to `receiver` (merging is `merge_determinants`).
    pub(crate) fn new(receiver: Rank, dets: &[Determinant]) -> Result<Self> {
        let mut by_rsn = BTreeMap::new();
        for d in dets {
            if d.receiver != receiver {
                return Err(LogError::InvalidArgument(format!(
                    "replay at rank {receiver} given a determinant of rank {}",
                    d.receiver
                )));
            }
            if let Some(other) = by_rsn.insert(d.rsn, *d) {
                if other != *d {
                    return Err(conflict(d, &other));
                }
            }
        }
        let last_rsn = by_rsn.keys().next_back().copied().unwrap_or(0);
        let seen =
            by_rsn.values().filter(|d| d.is_seen()).map(|d| (d.rsn, (d.sender, d.message_ssn()))).collect();
        by_rsn.retain(|_, d| !d.is_seen());
        let named = by_rsn.values().map(|d| (d.sender, d.ssn)).collect();
        Ok(ReplayPlan { by_rsn, seen, named, last_rsn })
    }

    /// The message a probe found at tick `rsn` the first time, if it found one.
    pub(crate) fn seen_at(&self, rsn: Rsn) -> Option<(Rank, Ssn)> {
        self.seen.get(&rsn).copied()
    }

    /// Whether the plan names `sender`'s message `ssn` for some delivery: a receive at an
    /// rsn the plan leaves open must not take it.
    pub(crate) fn names(&self, sender: Rank, ssn: Ssn) -> bool {
        self.named.contains(&(sender, ssn))
    }

    pub(crate) fn get(&self, rsn: Rsn) -> Option<&Determinant> {
        self.by_rsn.get(&rsn)
    }

    /// The last rsn the plan covers: replay is over once the rank delivered it.
    pub(crate) fn last_rsn(&self) -> Rsn {
        self.last_rsn
    }
}

/// The detList: a queue that only grows at the back and shrinks at the front, kept as one
/// slice (a `VecDeque`'s push and two-part copies cost more on the per-message path).
#[derive(Debug, Default)]
struct DetList {
    /// The live entries are `entries[head..]`.
    entries: Vec<Determinant>,
    head: usize,
}

impl DetList {
    /// Dropped entries are reclaimed once they are at least this many and half the vector,
    /// so the move of the live ones is amortized over the pops.
    const COMPACT_AT: usize = 64;

    #[inline]
    fn len(&self) -> usize {
        self.entries.len() - self.head
    }

    #[inline]
    fn push(&mut self, det: Determinant) {
        self.entries.push(det);
    }

    #[inline]
    fn live(&self) -> &[Determinant] {
        &self.entries[self.head..]
    }

    fn pop_front(&mut self, count: usize) {
        self.head += count.min(self.len());
        if self.head == self.entries.len() {
            self.clear();
        } else if self.head >= Self::COMPACT_AT && self.head * 2 >= self.entries.len() {
            self.entries.drain(..self.head);
            self.head = 0;
        }
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.head = 0;
    }
}

/// A copy of a determinant at or below the creator's newest one: already held (`false`), or
/// a late one that slots in (`true`); a different determinant under the same rsn is an error.
#[cold]
#[inline(never)]
fn insert_late(log: &mut Vec<Determinant>, d: &Determinant) -> Result<bool> {
    match log.binary_search_by_key(&d.rsn, |x| x.rsn) {
        Ok(at) if log[at] == *d => Ok(false),
        Ok(at) => Err(conflict(d, &log[at])),
        Err(at) => {
            log.insert(at, *d);
            Ok(true)
        }
    }
}

#[cold]
#[inline(never)]
fn receiver_out_of_range(d: &Determinant) -> LogError {
    LogError::malformed("piggybacked determinant", format!("receiver rank {} out of range", d.receiver))
}

#[cold]
#[inline(never)]
fn dest_out_of_range(dest: Rank) -> LogError {
    LogError::InvalidArgument(format!("destination rank {dest} out of range"))
}

fn conflict(a: &Determinant, b: &Determinant) -> LogError {
    LogError::ConflictingDeterminants { receiver: a.receiver, rsn: a.rsn, detail: format!("{a:?} vs {b:?}") }
}

/// Merges determinant copies from several holders (buddy ring, survivors' detLogs) into one
/// rsn-ordered list; identical copies collapse, disagreeing ones are an error.
pub fn merge_determinants<'a>(copies: impl IntoIterator<Item = &'a Determinant>) -> Result<Vec<Determinant>> {
    let mut by_key: BTreeMap<(Rank, Rsn), Determinant> = BTreeMap::new();
    for d in copies {
        if let Some(other) = by_key.insert((d.receiver, d.rsn), *d) {
            if other != *d {
                return Err(conflict(d, &other));
            }
        }
    }
    Ok(by_key.into_values().collect())
}

/// `count u32 | count × Determinant`: the all-gather format of held determinants.
pub(crate) fn encode_determinants(dets: &[Determinant]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + dets.len() * Determinant::WIRE_LEN);
    let mut w = Writer::new(&mut out);
    w.u32(dets.len() as u32);
    for d in dets {
        w.raw(&d.to_bytes());
    }
    out
}

/// Decodes [`encode_determinants`] output from untrusted bytes (another rank's list).
pub(crate) fn decode_determinants(bytes: &[u8]) -> Result<Vec<Determinant>> {
    const WHAT: &str = "determinant list";
    let mut r = Reader::new(bytes, WHAT);
    let count = r.u32()? as usize;
    let fits = count.checked_mul(Determinant::WIRE_LEN).is_some_and(|n| n == r.remaining());
    if !fits {
        return Err(LogError::malformed(WHAT, format!("{count} determinants in {} bytes", r.remaining())));
    }
    (0..count).map(|_| Determinant::read(&mut r)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn random_determinant_lists_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_determinants(&bytes);
        }

        #[test]
        fn determinant_lists_round_trip(dets in prop::collection::vec(any::<(u32, u32, u64, u64)>(), 0..12)) {
            let dets: Vec<Determinant> =
                dets.into_iter().map(|(sender, receiver, ssn, rsn)| Determinant { sender, receiver, ssn, rsn }).collect();
            prop_assert_eq!(decode_determinants(&encode_determinants(&dets)).unwrap(), dets);
        }

        /// Any arrival order of piggybacked copies leaves the detLog sorted and complete.
        #[test]
        fn det_log_sorted_whatever_the_order(
            order in Just((1..=40u64).collect::<Vec<_>>()).prop_shuffle(),
            dups in prop::collection::vec(1..=40u64, 0..20),
        ) {
            let mut s = CausalState::new(4);
            for rsn in order.iter().chain(&dups) {
                s.store_piggybacked(&[Determinant { sender: 1, receiver: 3, ssn: rsn * 2, rsn: *rsn }]).unwrap();
            }
            let rsns: Vec<u64> = s.det_log_of(3).map(|d| d.rsn).collect();
            prop_assert_eq!(rsns, (1..=40).collect::<Vec<_>>());
            prop_assert_eq!(s.det_log_len(), 40);
        }
    }

    fn det(sender: Rank, rsn: Rsn) -> Determinant {
        Determinant { sender, receiver: 9, ssn: rsn * 10, rsn }
    }

    #[test]
    fn piggyback_once_per_destination_until_stable() {
        let mut s = CausalState::new(4);
        s.add(det(1, 1));
        s.add(det(2, 2));
        let mut out = Vec::new();
        assert_eq!(s.piggyback_for(3, &mut out).unwrap(), 2);
        assert_eq!(s.piggyback_for(3, &mut Vec::new()).unwrap(), 0, "already sent to 3");
        let mut to1 = Vec::new();
        s.piggyback_for(1, &mut to1).unwrap();
        assert_eq!(to1, [det(1, 1), det(2, 2)]);
        // Writes: the first batch of two reaches the log at ticket 100.
        let mut w = Vec::new();
        s.unwritten(10, &mut w);
        assert_eq!(w.len(), 2);
        s.mark_written(2, 100);
        s.add(det(1, 3));
        assert!(s.awaiting_durable());
        assert_eq!(s.mark_stable(99), 0);
        assert_eq!(s.mark_stable(100), 2);
        assert_eq!(s.unstable_len(), 1);
        assert_eq!(s.mark_stable(1000), 0, "unwritten determinants are never stable");
        let mut out = Vec::new();
        s.piggyback_for(2, &mut out).unwrap();
        assert_eq!(out, [det(1, 3)], "stable determinants stop riding");
        assert!(s.piggyback_for(4, &mut out).is_err());
    }

    /// The per-destination cursors against a reference model of Alg 1 (every unstable
    /// determinant a destination was not sent yet, once), through batched writes, partial
    /// stability, deque wrap-around, a checkpoint's drop and rewrites after a lost log.
    #[test]
    fn cursors_match_the_reference_model() {
        let dests = 3u32;
        let mut s = CausalState::new(dests);
        // Model: (rsn, stable) per determinant, and per destination the rsns it was sent.
        let mut model: Vec<(Rsn, bool)> = Vec::new();
        let mut sent: Vec<Vec<Rsn>> = vec![Vec::new(); dests as usize];
        let mut ticket = 0u64;
        let mut rsn = 0u64;
        for step in 0..2000u64 {
            match step * 7919 % 13 {
                0..=5 => {
                    rsn += 1;
                    s.add(det(0, rsn));
                    model.push((rsn, false));
                }
                6..=8 => {
                    let dest = (step % u64::from(dests)) as Rank;
                    let mut out = Vec::new();
                    s.piggyback_for(dest, &mut out).unwrap();
                    let expect: Vec<Rsn> = model
                        .iter()
                        .filter(|(r, stable)| !stable && !sent[dest as usize].contains(r))
                        .map(|(r, _)| *r)
                        .take(MAX_PIGGYBACKED)
                        .collect();
                    assert_eq!(out.iter().map(|d| d.rsn).collect::<Vec<_>>(), expect, "step {step}");
                    sent[dest as usize].extend(expect);
                }
                9 | 10 => {
                    let mut batch = Vec::new();
                    s.unwritten(5, &mut batch);
                    ticket += 1;
                    s.mark_written(batch.len(), ticket);
                }
                11 => {
                    let before = s.unstable_len();
                    let stable = s.mark_stable(ticket.saturating_sub(1));
                    assert_eq!(s.unstable_len(), before - stable);
                    for (_, st) in model.iter_mut().filter(|(_, st)| !st).take(stable) {
                        *st = true;
                    }
                }
                _ if step % 5 == 0 => {
                    s.drop_unstable();
                    model.iter_mut().for_each(|(_, st)| *st = true);
                }
                _ => s.unmark_written(),
            }
            let unstable = model.iter().filter(|(_, st)| !st).count();
            assert_eq!(s.unstable_len(), unstable, "step {step}");
            assert_eq!(s.written_unstable() + s.unwritten_len(), unstable);
        }
    }

    #[test]
    fn det_list_compacts_and_keeps_order() {
        let mut list = DetList::default();
        let mut next = 0u64;
        let mut first = 0u64;
        let mut compactions = 0;
        for round in 0..50u64 {
            for _ in 0..(round % 7 + 3) {
                next += 1;
                list.push(det(0, next));
            }
            let pop = (round % 5) as usize * 3;
            let head_before = list.head;
            list.pop_front(pop);
            compactions += usize::from(list.head < head_before && list.len() > 0);
            first = (first + pop as u64).min(next);
            let rsns: Vec<Rsn> = list.live().iter().map(|d| d.rsn).collect();
            assert_eq!(rsns, (first + 1..=next).collect::<Vec<_>>(), "round {round}");
            assert!(list.head < DetList::COMPACT_AT || list.head * 2 < list.entries.len());
        }
        assert!(compactions > 0, "the test reaches the compaction");
        list.pop_front(usize::MAX);
        assert_eq!((list.len(), list.entries.len()), (0, 0));
    }

    #[test]
    fn stability_goes_by_write_batch() {
        let mut s = CausalState::new(2);
        for rsn in 1..=5 {
            s.add(det(0, rsn));
        }
        s.mark_written(2, 10);
        s.mark_written(2, 20);
        assert_eq!((s.last_ticket(), s.written_unstable(), s.unwritten_len()), (Some(20), 4, 1));
        assert_eq!(s.mark_stable(19), 2, "only the first batch is durable");
        let mut out = Vec::new();
        s.piggyback_for(1, &mut out).unwrap();
        assert_eq!(out.iter().map(|d| d.rsn).collect::<Vec<_>>(), [3, 4, 5]);
        s.unmark_written();
        assert_eq!((s.last_ticket(), s.unwritten_len()), (None, 3));
        assert_eq!(s.mark_stable(1000), 0, "rewrites pending: nothing is stable");
        s.mark_written(10, 30);
        assert_eq!(s.mark_stable(30), 3);
        assert_eq!((s.unstable_len(), s.last_ticket()), (0, None));
    }

    /// Ranks 2 and 3 share a node: rank 3 forwards rank 2's piggybacked determinants as its
    /// own (written and piggybacked, never back to rank 2), and not rank 1's.
    #[test]
    fn a_node_mates_determinants_are_forwarded() {
        let mut s = CausalState::new(4);
        s.set_failure_units(3, &[0, 0, 1, 1]);
        let of = |receiver: Rank, rsn: Rsn| Determinant { sender: 0, receiver, ssn: rsn, rsn };
        assert_eq!(s.store_piggybacked(&[of(2, 1), of(1, 1), of(2, 2)]).unwrap(), 3);
        s.add(of(3, 1));
        assert_eq!((s.unstable_len(), s.unwritten_len()), (3, 3), "rank 1's is only held");
        let mut written = Vec::new();
        s.unwritten(10, &mut written);
        assert_eq!(written, [of(2, 1), of(2, 2), of(3, 1)], "the mate's go first, in creation order");
        let (mut to_0, mut to_2) = (Vec::new(), Vec::new());
        assert_eq!(s.piggyback_for(0, &mut to_0).unwrap(), 3);
        assert_eq!(s.piggyback_for(2, &mut to_2).unwrap(), 1);
        assert_eq!(to_2, [of(3, 1)], "none goes back to its creator");
        assert_eq!(s.store_piggybacked(&[of(2, 2)]).unwrap(), 0);
        assert_eq!(s.unstable_len(), 3, "a copy held already is not forwarded again");
        s.clear();
        assert_eq!(s.store_piggybacked(&[of(2, 3)]).unwrap(), 1);
        assert_eq!(s.unstable_len(), 1, "a restart keeps the node's ranks");
    }

    #[test]
    fn piggyback_is_bounded() {
        let mut s = CausalState::new(2);
        for rsn in 1..=(MAX_PIGGYBACKED as u64 + 10) {
            s.add(det(0, rsn));
        }
        let mut out = Vec::new();
        assert_eq!(s.piggyback_for(1, &mut out).unwrap(), MAX_PIGGYBACKED);
        let mut rest = Vec::new();
        assert_eq!(s.piggyback_for(1, &mut rest).unwrap(), 10, "the rest rides on the next message");
        assert_eq!(rest[0].rsn, MAX_PIGGYBACKED as u64 + 1);
    }

    #[test]
    fn det_log_keeps_and_trims_per_creator() {
        let mut s = CausalState::new(8);
        let a = Determinant { sender: 0, receiver: 5, ssn: 1, rsn: 1 };
        let b = Determinant { rsn: 2, ssn: 2, ..a };
        let c = Determinant { receiver: 6, ..a };
        assert_eq!(s.store_piggybacked(&[b, c]).unwrap(), 2);
        assert_eq!(s.store_piggybacked(&[a, b]).unwrap(), 1, "copies collapse, late ones slot in");
        assert!(matches!(
            s.store_piggybacked(&[Determinant { ssn: 9, ..a }]),
            Err(LogError::ConflictingDeterminants { .. })
        ));
        assert!(s.store_piggybacked(&[Determinant { receiver: 8, ..a }]).is_err(), "rank out of range");
        assert_eq!(s.det_log_of(5).copied().collect::<Vec<_>>(), [a, b]);
        assert_eq!(s.trim_det_log(5, 1), 1);
        assert_eq!(s.det_log_of(5).copied().collect::<Vec<_>>(), [b]);
        assert_eq!(s.det_log_len(), 2);
    }

    #[test]
    fn merge_and_plan_reject_conflicts() {
        let a = det(1, 1);
        let merged = merge_determinants([&det(2, 2), &a, &a]).unwrap();
        assert_eq!(merged, [a, det(2, 2)]);
        let bad = Determinant { ssn: 77, ..a };
        assert!(matches!(merge_determinants([&a, &bad]), Err(LogError::ConflictingDeterminants { .. })));
        let plan = ReplayPlan::new(9, &merged).unwrap();
        assert_eq!((plan.last_rsn(), plan.get(2).copied()), (2, Some(det(2, 2))));
        assert!(ReplayPlan::new(8, &merged).is_err());
        assert!(ReplayPlan::new(9, &[a, bad]).is_err());
    }

    /// A "seen" determinant travels as a delivery's does (piggyback on an envelope, the
    /// detLog, the all-gather list) and the plan keeps it apart: no receive takes it, and
    /// the message it names stays free for a later receive.
    #[test]
    fn seen_determinants_pass_the_piggyback_and_plan_apart() {
        let seen = Determinant::seen(1, 9, 4, 2);
        let mut env = crate::envelope::Envelope {
            sender: 9,
            receiver: 5,
            incarnation: 0,
            ssn: 1,
            tag: 0,
            payload_len: 0,
            determinants: vec![det(1, 1), seen],
        };
        let frame = env.encode(b"x").unwrap();
        let (got, _) = crate::envelope::Envelope::decode(&frame).unwrap();
        assert_eq!(got.determinants, [det(1, 1), seen]);
        let mut s = CausalState::new(10);
        assert_eq!(s.store_piggybacked(&got.determinants).unwrap(), 2);
        let held: Vec<_> = s.det_log_of(9).copied().collect();
        assert_eq!(decode_determinants(&encode_determinants(&held)).unwrap(), [det(1, 1), seen]);
        let plan = ReplayPlan::new(9, &merge_determinants(&held).unwrap()).unwrap();
        assert_eq!((plan.get(2), plan.seen_at(2), plan.seen_at(1)), (None, Some((1, 4)), None));
        assert_eq!(plan.last_rsn(), 2);
        assert!(!plan.names(1, 4) && !plan.names(1, 4 | Determinant::SEEN));
    }

    #[test]
    fn determinant_lists_round_trip_and_reject_garbage() {
        let dets = vec![det(1, 1), det(3, 2)];
        let bytes = encode_determinants(&dets);
        assert_eq!(decode_determinants(&bytes).unwrap(), dets);
        for cut in 0..bytes.len() {
            assert!(decode_determinants(&bytes[..cut]).is_err(), "cut {cut}");
        }
        assert!(decode_determinants(&u32::MAX.to_le_bytes()).is_err());
        let mut long = bytes;
        long.push(0);
        assert!(decode_determinants(&long).is_err());
    }
}
