//! The sender's in-memory message log (sender-based pessimistic logging, seed 000 §2.4): every
//! payload a rank sends stays here, per destination and in ssn order, until a checkpoint of
//! the receiver makes it unnecessary (`trim`). A restarted receiver gets its messages back
//! from here (`from_ssn`), in the order its logged determinants say.
//!
//! The log is bounded: when a message would not fit, `reserve` fails with `LogFull` and the
//! caller must back off (trim after a checkpoint); nothing already logged is ever dropped.
//!
//! Small payloads (below `SPARE_MIN`) are appended to one byte buffer per destination, so
//! logging one costs a copy and no allocation (the buffer's capacity is kept across trims;
//! a trim only advances its start, and the live bytes move down only once the dead prefix
//! is at least as large as they are: amortized, each byte moves at most once);
//! large ones get their own buffer, reused from earlier trims, or stay in the registered
//! buffer the message was sent from (`record_framed`: no copy at all).
//!
//! Under collective-aware logging a multicast's tree sends log stubs (`record_stub`) that
//! name its payload, kept once at its root (`record_multicast`; see [`crate::multicast`]),
//! and a reduction's contribution loses its payload once the reduction completed
//! (`drop_payload`; see [`crate::reduction`]).

use std::collections::VecDeque;
use std::mem::size_of;
use std::sync::Arc;

use reverb_transport::{Rank, Region, Tag};

use crate::determinant::Ssn;
use crate::error::{LogError, Result};
use crate::multicast::{McastKey, MulticastLog};
use crate::reduction;

/// One logged message, as `from_ssn` hands it out (a copy: replay is off the hot path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedSend {
    pub ssn: Ssn,
    pub tag: Tag,
    /// Empty for a stub.
    pub payload: Vec<u8>,
    /// A multicast stub: the payload is the root's copy under this key.
    pub stub: Option<McastKey>,
}

impl LoggedSend {
    /// Bytes charged against the limit: the payload plus the entry itself, so that empty
    /// payloads still count and the bound really bounds memory.
    pub fn charged_bytes(payload_len: usize) -> u64 {
        (payload_len + size_of::<LoggedSend>()) as u64
    }
}

/// Payload buffers at least this large are kept for reuse after a trim.
const SPARE_MIN: usize = 4096;

/// Where a large payload is kept.
#[derive(Debug)]
enum Large {
    Owned(Vec<u8>),
    /// `len` bytes at `offset` of the registered buffer the message was sent from; the
    /// sender does not reuse the buffer while this entry holds it.
    Framed {
        region: Arc<Region>,
        offset: usize,
    },
    /// No bytes: a multicast's payload, kept at its root.
    Stub(McastKey),
    /// No bytes: a reduction's contribution dropped after the reduction completed, resent as
    /// a tombstone (`crate::reduction`).
    Dropped,
}

/// A logged message as kept: small payloads live in the destination's byte buffer, in order.
#[derive(Debug)]
struct Entry {
    ssn: Ssn,
    tag: Tag,
    len: usize,
    /// The payload of a large message; `None`: `len` bytes of the byte buffer.
    large: Option<Large>,
}

#[derive(Debug, Default)]
struct DestLog {
    entries: VecDeque<Entry>,
    /// Small payloads back to back, oldest first, from `small_start` on (what lies before
    /// it was trimmed). A `Vec` and an offset, not a `VecDeque<u8>`: appending is one
    /// `memcpy`, where the deque's byte-wise extend cost ~200 instructions per message.
    small: Vec<u8>,
    small_start: usize,
}

impl DestLog {
    fn push_small(&mut self, payload: &[u8]) {
        self.small.extend_from_slice(payload);
    }

    /// The live small bytes.
    fn small_live(&self) -> &[u8] {
        self.small.get(self.small_start..).unwrap_or(&[])
    }

    /// Forgets the oldest `n` live small bytes.
    fn drop_small(&mut self, n: usize) {
        self.small_start = (self.small_start + n).min(self.small.len());
        let live = self.small.len() - self.small_start;
        if live == 0 {
            self.small.clear();
            self.small_start = 0;
        } else if self.small_start >= live {
            // The dead prefix is at least as large as what moves: amortized O(1) per byte.
            self.small.drain(..self.small_start);
            self.small_start = 0;
        }
    }
}

/// Per-destination logs of sent messages, under one byte limit.
#[derive(Debug)]
pub struct SendLog {
    per_dest: Vec<DestLog>,
    /// Per destination, the highest ssn trimmed away (0: none).
    trimmed_through: Vec<Ssn>,
    limit: u64,
    used: u64,
    /// Large payload buffers freed by trims, reused by the next large records: a log of
    /// big messages then costs a copy per message, not an allocation and its page faults.
    /// Their capacity counts against the limit too, so the bound still bounds memory.
    spare: Vec<Vec<u8>>,
    spare_bytes: u64,
    /// The multicasts this rank rooted (collective-aware logging), under the same limit.
    multicasts: MulticastLog,
}

impl SendLog {
    pub fn new(size: u32, limit: u64) -> Self {
        SendLog {
            per_dest: (0..size).map(|_| DestLog::default()).collect(),
            trimmed_through: vec![0; size as usize],
            limit,
            used: 0,
            spare: Vec::new(),
            spare_bytes: 0,
            multicasts: MulticastLog::default(),
        }
    }

    /// Bytes charged now (payloads plus entries).
    pub fn used(&self) -> u64 {
        self.used
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Messages logged for `dest`.
    pub fn len(&self, dest: Rank) -> usize {
        self.per_dest.get(dest as usize).map_or(0, |d| d.entries.len())
    }

    pub fn is_empty(&self) -> bool {
        self.per_dest.iter().all(|d| d.entries.is_empty())
    }

    /// Checks that a payload of `payload_len` bytes fits, before the caller commits to a send
    /// (and to an ssn): `LogFull` is back-pressure.
    #[inline]
    pub fn reserve(&self, payload_len: usize) -> Result<()> {
        let needed = LoggedSend::charged_bytes(payload_len);
        // Spare buffers are given up before anything pushes back.
        if self.used + needed > self.limit {
            return Err(self.full(needed));
        }
        Ok(())
    }

    #[cold]
    fn full(&self, needed: u64) -> LogError {
        LogError::LogFull { needed, used: self.used, limit: self.limit }
    }

    /// Logs message `ssn` to `dest`. Ssns of one destination must grow by one, so the log of
    /// a channel is always a contiguous range and `from_ssn` can index it.
    #[inline]
    pub fn record(&mut self, dest: Rank, ssn: Ssn, tag: Tag, payload: &[u8]) -> Result<()> {
        if payload.len() >= SPARE_MIN {
            return self.record_large(dest, ssn, tag, payload);
        }
        // The per-message path of small sends: one check, one copy, one entry.
        let charged = LoggedSend::charged_bytes(payload.len());
        let log = self.next_slot(dest, ssn, charged)?;
        log.push_small(payload);
        log.entries.push_back(Entry { ssn, tag, len: payload.len(), large: None });
        self.used += charged;
        if self.used + self.spare_bytes > self.limit {
            self.shed_spares();
        }
        Ok(())
    }

    fn record_large(&mut self, dest: Rank, ssn: Ssn, tag: Tag, payload: &[u8]) -> Result<()> {
        let charged = LoggedSend::charged_bytes(payload.len());
        self.next_slot(dest, ssn, charged)?;
        let mut buffer = match self.spare.iter().rposition(|b| b.capacity() >= payload.len()) {
            Some(i) => {
                let b = self.spare.swap_remove(i);
                self.spare_bytes -= b.capacity() as u64;
                b
            }
            None => Vec::new(),
        };
        buffer.clear();
        buffer.extend_from_slice(payload);
        let log = self.next_slot(dest, ssn, charged)?;
        log.entries.push_back(Entry { ssn, tag, len: payload.len(), large: Some(Large::Owned(buffer)) });
        self.used += charged;
        self.shed_spares();
        Ok(())
    }

    /// Live entries and spares together stay within the limit.
    fn shed_spares(&mut self) {
        while self.used + self.spare_bytes > self.limit {
            match self.spare.pop() {
                Some(b) => self.spare_bytes -= b.capacity() as u64,
                None => break,
            }
        }
    }

    /// `record` for a payload that is already in the registered buffer it was sent from
    /// (`len` bytes at `offset`): the entry keeps the buffer instead of a copy.
    pub fn record_framed(
        &mut self,
        dest: Rank,
        ssn: Ssn,
        tag: Tag,
        region: Arc<Region>,
        offset: usize,
        len: usize,
    ) -> Result<()> {
        region.check_bounds("send log entry", offset, len)?;
        let charged = LoggedSend::charged_bytes(len);
        let log = self.next_slot(dest, ssn, charged)?;
        log.entries.push_back(Entry { ssn, tag, len, large: Some(Large::Framed { region, offset }) });
        self.used += charged;
        Ok(())
    }

    /// `record` of a multicast's tree send: a stub naming `key` (the payload stays with the
    /// root), charged as an empty message.
    pub fn record_stub(&mut self, dest: Rank, ssn: Ssn, tag: Tag, key: McastKey) -> Result<()> {
        let charged = LoggedSend::charged_bytes(0);
        let log = self.next_slot(dest, ssn, charged)?;
        log.entries.push_back(Entry { ssn, tag, len: 0, large: Some(Large::Stub(key)) });
        self.used += charged;
        Ok(())
    }

    /// At a multicast's root: keeps its payload once under `key` (later calls with the key are
    /// no-ops). Returns the bytes charged (0 when kept already).
    pub fn record_multicast(&mut self, key: McastKey, payload: &[u8]) -> Result<u64> {
        if self.multicasts.get(&key).is_some() {
            return Ok(0);
        }
        let charged = LoggedSend::charged_bytes(payload.len());
        if self.used + charged > self.limit {
            return Err(self.full(charged));
        }
        self.multicasts.record(key, payload);
        self.used += charged;
        self.shed_spares();
        Ok(charged)
    }

    /// The payload of multicast `key` if this rank rooted it since the last checkpoint.
    pub fn multicast(&self, key: &McastKey) -> Option<&[u8]> {
        self.multicasts.get(key)
    }

    /// Drops the multicast copies (at a coordinated checkpoint); returns the bytes freed.
    pub fn trim_multicasts(&mut self) -> u64 {
        let freed = self.multicasts.len() as u64 * LoggedSend::charged_bytes(0) + self.multicasts.clear();
        self.used -= freed;
        freed
    }

    /// The log of `dest` if message `ssn`, charged `charged` bytes, may be logged next: room,
    /// a known destination, and the ssn right after the last one.
    #[inline]
    fn next_slot(&mut self, dest: Rank, ssn: Ssn, charged: u64) -> Result<&mut DestLog> {
        if self.used + charged > self.limit {
            return Err(self.full(charged));
        }
        let Some(log) = self.per_dest.get_mut(dest as usize) else {
            return Err(out_of_range(dest));
        };
        match log.entries.back() {
            Some(last) if ssn != last.ssn.wrapping_add(1) => Err(ssn_gap(dest, ssn, last.ssn)),
            _ => Ok(log),
        }
    }

    /// Replaces the payload of message `ssn` to `dest` by a tombstone (a completed
    /// reduction's contribution, [`crate::reduction`]) when it has a buffer of its own, which
    /// goes (back to the spares, or to the sender's pool); a small payload shares the
    /// destination's byte buffer and stays whole, as does a stub. An ssn no longer (or not
    /// yet) in the log is left alone. Returns the bytes freed.
    pub fn drop_payload(&mut self, dest: Rank, ssn: Ssn) -> Result<u64> {
        let log = self.per_dest.get_mut(dest as usize).ok_or_else(|| out_of_range(dest))?;
        let Some(first) = log.entries.front().map(|e| e.ssn) else { return Ok(0) };
        let Some(e) = usize::try_from(ssn.wrapping_sub(first)).ok().and_then(|i| log.entries.get_mut(i))
        else {
            return Ok(0);
        };
        if e.ssn != ssn || !matches!(e.large, Some(Large::Owned(_) | Large::Framed { .. })) {
            return Ok(0);
        }
        if let Some(Large::Owned(b)) = e.large.replace(Large::Dropped) {
            self.spare_bytes += b.capacity() as u64;
            self.spare.push(b);
        }
        let freed = LoggedSend::charged_bytes(e.len) - LoggedSend::charged_bytes(0);
        e.len = 0;
        self.used -= freed;
        self.shed_spares();
        Ok(freed)
    }

    /// The logged messages to `dest` from `ssn` on, in ssn order. A range that starts before
    /// the oldest kept entry is an error: those messages were trimmed, so a receiver asking
    /// for them is older than the checkpoint that allowed the trim. The copies are made up
    /// front (replay is off the hot path), so reading a registered buffer cannot fail midway.
    pub fn from_ssn(&self, dest: Rank, ssn: Ssn) -> Result<impl Iterator<Item = LoggedSend> + '_> {
        let log = self
            .per_dest
            .get(dest as usize)
            .ok_or_else(|| LogError::InvalidArgument(format!("destination rank {dest} out of range")))?;
        let trimmed_through = self.trimmed_through.get(dest as usize).copied().unwrap_or(0);
        if ssn <= trimmed_through {
            return Err(LogError::InvalidArgument(format!(
                "send log to rank {dest}: ssn {ssn} was trimmed (through {trimmed_through})"
            )));
        }
        // Entries are contiguous, so the offset is the ssn difference.
        let skip = log
            .entries
            .front()
            .map_or(0, |first| usize::try_from(ssn.saturating_sub(first.ssn)).unwrap_or(usize::MAX));
        let mut at: usize = log.entries.iter().take(skip).filter(|e| e.large.is_none()).map(|e| e.len).sum();
        let mut out = Vec::with_capacity(log.entries.len().saturating_sub(skip));
        for e in log.entries.iter().skip(skip) {
            let mut stub = None;
            let payload = match &e.large {
                Some(Large::Stub(key)) => {
                    stub = Some(*key);
                    Vec::new()
                }
                Some(Large::Owned(b)) => b.clone(),
                Some(Large::Dropped) => reduction::tombstone(),
                Some(Large::Framed { region, offset }) => region.to_vec(*offset, e.len)?,
                None => {
                    let p = log
                        .small_live()
                        .get(at..at + e.len)
                        .ok_or_else(|| {
                            LogError::InvalidArgument(format!(
                                "send log to rank {dest}: ssn {} lies past the logged bytes",
                                e.ssn
                            ))
                        })?
                        .to_vec();
                    at += e.len;
                    p
                }
            };
            out.push(LoggedSend { ssn: e.ssn, tag: e.tag, payload, stub });
        }
        Ok(out.into_iter())
    }

    /// Drops every entry to `dest` with ssn at or below `through` (after a checkpoint of the
    /// receiver covers them). Returns the bytes freed.
    pub fn trim(&mut self, dest: Rank, through: Ssn) -> Result<u64> {
        let log = self
            .per_dest
            .get_mut(dest as usize)
            .ok_or_else(|| LogError::InvalidArgument(format!("destination rank {dest} out of range")))?;
        let mut freed = 0;
        // Only what was really logged counts as trimmed: `through` may run past the last send.
        let mut last_trimmed = None;
        let mut small = 0;
        while log.entries.front().is_some_and(|e| e.ssn <= through) {
            if let Some(e) = log.entries.pop_front() {
                freed += LoggedSend::charged_bytes(e.len);
                last_trimmed = Some(e.ssn);
                match e.large {
                    Some(Large::Owned(b)) => {
                        self.spare_bytes += b.capacity() as u64;
                        self.spare.push(b);
                    }
                    // Dropping the entry hands the buffer back to the sender's pool.
                    Some(Large::Framed { .. } | Large::Stub(_) | Large::Dropped) => {}
                    None => small += e.len,
                }
            }
        }
        log.drop_small(small);
        if let (Some(last), Some(t)) = (last_trimmed, self.trimmed_through.get_mut(dest as usize)) {
            *t = last;
        }
        self.used -= freed;
        // Keep spares only up to the room the live entries leave.
        while self.used + self.spare_bytes > self.limit {
            match self.spare.pop() {
                Some(b) => self.spare_bytes -= b.capacity() as u64,
                None => break,
            }
        }
        Ok(freed)
    }

    /// Bytes held by freed buffers kept for reuse.
    pub fn spare_bytes(&self) -> u64 {
        self.spare_bytes
    }
}

#[cold]
fn out_of_range(dest: Rank) -> LogError {
    LogError::InvalidArgument(format!("destination rank {dest} out of range"))
}

#[cold]
fn ssn_gap(dest: Rank, ssn: Ssn, last: Ssn) -> LogError {
    LogError::InvalidArgument(format!("send log to rank {dest}: ssn {ssn} after {last}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ssns(it: impl Iterator<Item = LoggedSend>) -> Vec<Ssn> {
        it.map(|e| e.ssn).collect()
    }

    #[test]
    fn logs_per_destination_and_replays_from_an_ssn() {
        let mut log = SendLog::new(3, 1 << 20);
        for ssn in 1..=5 {
            log.record(1, ssn, 7, &[ssn as u8; 3]).unwrap();
        }
        log.record(2, 1, 9, b"x").unwrap();
        assert_eq!(ssns(log.from_ssn(1, 1).unwrap()), [1, 2, 3, 4, 5]);
        assert_eq!(ssns(log.from_ssn(1, 4).unwrap()), [4, 5]);
        assert_eq!(ssns(log.from_ssn(1, 9).unwrap()), Vec::<Ssn>::new());
        assert_eq!(
            log.from_ssn(2, 1).unwrap().next().map(|e| (e.tag, e.payload.clone())),
            Some((9, b"x".to_vec()))
        );
        assert_eq!(ssns(log.from_ssn(0, 1).unwrap()), Vec::<Ssn>::new());
        assert!(log.from_ssn(3, 1).is_err());
        assert!(log.record(3, 1, 0, b"").is_err());
        assert!(log.record(1, 7, 0, b"").is_err(), "ssn gap");
        assert_eq!(
            log.used(),
            6 * LoggedSend::charged_bytes(3) - LoggedSend::charged_bytes(3) + LoggedSend::charged_bytes(1)
        );
    }

    #[test]
    fn large_buffers_are_reused_within_the_limit() {
        let big = LoggedSend::charged_bytes(SPARE_MIN * 2);
        let mut log = SendLog::new(2, 3 * big);
        for ssn in 1..=3 {
            log.record(1, ssn, 0, &vec![ssn as u8; SPARE_MIN * 2]).unwrap();
        }
        log.trim(1, 2).unwrap();
        assert!(log.spare_bytes() >= 2 * (SPARE_MIN as u64 * 2));
        assert!(log.used() + log.spare_bytes() <= log.limit());
        // Reused buffers carry the new payload only.
        log.record(1, 4, 0, &[7u8; SPARE_MIN]).unwrap();
        assert_eq!(log.from_ssn(1, 4).unwrap().next().map(|e| e.payload.clone()), Some(vec![7u8; SPARE_MIN]));
        assert!(log.used() + log.spare_bytes() <= log.limit());
    }

    #[test]
    fn small_and_large_payloads_interleave_through_trims() {
        let mut log = SendLog::new(2, 1 << 24);
        let payload = |ssn: u64| {
            vec![ssn as u8; if ssn.is_multiple_of(3) { SPARE_MIN + ssn as usize } else { ssn as usize }]
        };
        for ssn in 1..=30 {
            log.record(1, ssn, ssn, &payload(ssn)).unwrap();
        }
        let check = |log: &SendLog, from: u64| {
            let got: Vec<_> = log.from_ssn(1, from).unwrap().map(|e| (e.ssn, e.tag, e.payload)).collect();
            let want: Vec<_> = (from..=30).map(|s| (s, s, payload(s))).collect();
            assert_eq!(got, want, "from ssn {from}");
        };
        check(&log, 1);
        check(&log, 14);
        log.trim(1, 10).unwrap();
        check(&log, 11);
        check(&log, 17);
        for ssn in 31..=40 {
            log.record(1, ssn, ssn, &payload(ssn)).unwrap();
        }
        log.trim(1, 40).unwrap();
        assert!(log.is_empty() && log.used() == 0);
    }

    /// Partial trims move the small-payload buffer's start and compact it now and then:
    /// what is left always reads back intact.
    #[test]
    fn partial_trims_keep_small_payloads_intact() {
        let mut log = SendLog::new(2, 1 << 24);
        let payload = |ssn: u64| vec![ssn as u8; (ssn % 13) as usize];
        let mut trimmed = 0;
        for ssn in 1..=300 {
            log.record(1, ssn, ssn, &payload(ssn)).unwrap();
            if ssn % 5 == 0 {
                trimmed = ssn - 3;
                log.trim(1, trimmed).unwrap();
            }
            let got: Vec<_> = log.from_ssn(1, trimmed + 1).unwrap().map(|e| (e.ssn, e.payload)).collect();
            let want: Vec<_> = (trimmed + 1..=ssn).map(|s| (s, payload(s))).collect();
            assert_eq!(got, want, "after ssn {ssn}");
        }
        log.trim(1, 300).unwrap();
        assert!(log.is_empty() && log.used() == 0);
    }

    #[test]
    fn full_log_pushes_back_and_trim_frees() {
        let per = LoggedSend::charged_bytes(100);
        let mut log = SendLog::new(2, 3 * per);
        for ssn in 1..=3 {
            log.record(1, ssn, 0, &[0; 100]).unwrap();
        }
        assert!(matches!(log.reserve(100), Err(LogError::LogFull { .. })));
        assert!(
            matches!(log.record(1, 4, 0, &[0; 100]), Err(LogError::LogFull { needed, .. }) if needed == per)
        );
        assert_eq!(log.len(1), 3, "nothing dropped");
        assert_eq!(log.trim(1, 2).unwrap(), 2 * per);
        assert_eq!(log.used(), per);
        assert!(log.from_ssn(1, 2).is_err(), "trimmed");
        assert_eq!(ssns(log.from_ssn(1, 3).unwrap()), [3]);
        log.record(1, 4, 0, &[0; 100]).unwrap();
        assert_eq!(log.trim(1, 10).unwrap(), 2 * per);
        assert!(log.is_empty() && log.used() == 0);
        // After a full trim the channel's next ssn still logs.
        log.record(1, 5, 0, b"").unwrap();
        assert!(log.from_ssn(1, 4).is_err(), "trimmed, though nothing is kept");
        assert_eq!(ssns(log.from_ssn(1, 5).unwrap()), [5]);
    }

    #[test]
    fn dropped_payloads_free_their_buffers_and_resend_as_tombstones() {
        let mut log = SendLog::new(2, 1 << 20);
        log.record(1, 1, 5, &[7; 10]).unwrap();
        log.record(1, 2, 5, &[8; SPARE_MIN]).unwrap();
        log.record(1, 3, 5, &[9; 3]).unwrap();
        let before = log.used();
        assert_eq!(log.drop_payload(1, 1).unwrap(), 0, "a small payload stays");
        let freed = log.drop_payload(1, 2).unwrap();
        assert_eq!(freed, SPARE_MIN as u64);
        assert_eq!(log.used(), before - freed);
        assert_eq!(log.drop_payload(1, 2).unwrap(), 0, "dropped once");
        assert_eq!(log.drop_payload(1, 9).unwrap(), 0, "not logged");
        let got: Vec<_> = log.from_ssn(1, 1).unwrap().collect();
        assert_eq!(got[0].payload, [7; 10]);
        assert_eq!((got[1].ssn, got[1].tag, got[1].payload.clone()), (2, 5, reduction::tombstone()));
        assert_eq!(got[2].payload, [9; 3], "the small bytes after it are still found");
        log.trim(1, 3).unwrap();
        assert!(log.is_empty() && log.used() == 0);
    }
}
