//! Recovery: the replay primitives (gather determinants or frames, replay them, resend from
//! the senders' logs), a survivor's rejoin and an in-place restart. The recovery sequence is
//! in the `protocol` module doc.

use reverb_transport::codec::Writer;
use reverb_transport::{Bootstrap, Rank, MAX_GATHER_BYTES};

use super::rings::{encode_hosted, gather_node_ids, open_writer_at, HostedRing};
use super::LoggedEndpoint;
use crate::causal::{self, ReplayPlan};
use crate::channel::{RecvChannels, SendSequencer};
use crate::commmatrix::CommRow;
use crate::determinant::{Determinant, ReceptionCounter, Ssn};
use crate::envelope::Envelope;
use crate::error::{LogError, Result};
use crate::framepool::FrameBytes;
use crate::logring::{self, RecordKind};
use crate::sendlog::LoggedSend;
use crate::stats::LogStats;
use crate::wire::Reader;

impl LoggedEndpoint {
    /// Replay primitive (every mode with a send log): re-sends every logged message to `dest`
    /// from `from_ssn` on, in ssn order, with its original ssn. A restarted receiver takes
    /// them in the order its determinants give; a live one drops them as duplicates. Returns
    /// how many were sent. Under `REVERB_LOG_UNIT=node` a destination on this node has no
    /// log (it restarts together with this rank): `Unsupported`.
    pub fn resend_from(&mut self, dest: Rank, from_ssn: Ssn) -> Result<usize> {
        let Some(send_log) = self.protocol.send_log() else {
            return Err(LogError::Unsupported(format!(
                "resend_from needs a send log (pessimistic-sb, pessimistic-rb or causal), not {}",
                self.mode()
            )));
        };
        if dest < self.size && !self.logs_payload_with(dest) {
            return Err(LogError::Unsupported(format!(
                "rank {dest} shares this node and REVERB_LOG_UNIT=node logs no intra-node payloads"
            )));
        }
        // Copies (replay is off the hot path): sending borrows the endpoint.
        let entries: Vec<LoggedSend> = send_log.from_ssn(dest, from_ssn)?.collect();
        let mut none = Vec::new();
        for entry in &entries {
            let resolved;
            let payload = match &entry.stub {
                None => &entry.payload,
                Some(key) => {
                    resolved = self.stub_payload(key).ok_or_else(|| {
                        LogError::MulticastLost(format!(
                            "ssn {} to rank {dest} names root {}'s multicast {}, not gathered: \
                             call resolve_multicasts first",
                            entry.ssn, key.root, key.seq
                        ))
                    })?;
                    LogStats::bump(&self.stats.multicast_stubs_resent, 1);
                    &resolved
                }
            };
            self.encode_frame(dest, entry.ssn, entry.tag, payload, &mut none)?;
            self.provider.send_for(self.owner, dest, self.config.provider_tag, &self.send_buf)?;
            self.sends_in_flight += 1;
            self.comm.record_library(dest, self.send_buf.len() as u64)?;
            LogStats::bump(&self.stats.library_bytes_sent, self.send_buf.len() as u64);
        }
        self.collect_completions()?;
        Ok(entries.len())
    }

    /// Replay primitive, one holder's part: the determinants of `rank` this rank holds, from
    /// the rings it hosts (the one for `rank`, and those of its node's ranks, which forward
    /// its determinants under causal logging) and from its detLog (causal).
    pub fn determinants_held_for(&self, rank: Rank) -> Result<Vec<Determinant>> {
        let mut held = Vec::new();
        for ring in self.rings.hosted.iter().chain(&self.rings.retired) {
            for record in ring.scan()?.records.iter().filter(|r| r.kind == RecordKind::Determinants) {
                held.extend(record.determinants()?.into_iter().filter(|d| d.receiver == rank));
            }
        }
        self.protocol.held_determinants(rank, &mut held);
        if let Some(offload) = &self.offload {
            // Under logger cores, the rank's log lives in the ring its node's logger writes
            // at this node's logger.
            held.extend(offload.determinants_hosted_for(rank, self.config.durable_timeout)?);
        }
        causal::merge_determinants(&held)
    }

    /// Replay primitive (`pessimistic-rb`), one holder's part: the frames (envelope + payload)
    /// `rank` received and logged, in log order, from the ring this rank hosts for it and,
    /// under logger cores, from the rings this node's logger hosts.
    pub fn frames_held_for(&self, rank: Rank) -> Result<Vec<Vec<u8>>> {
        let mut frames = Vec::new();
        for ring in self.rings.held_for(rank) {
            frames.extend(crate::sink::frames_for(&ring.scan()?, rank)?);
        }
        if let Some(offload) = &self.offload {
            frames.extend(offload.frames_hosted_for(rank, self.config.durable_timeout)?);
        }
        Ok(frames)
    }

    /// Replay primitive (`pessimistic-rb`), collective: every rank calls it with the same
    /// `failed` list; survivors contribute the frames they hold for the failed ranks (buddy
    /// rings), and each failed (restarted) rank gets back the frames addressed to it, ready for
    /// `replay_frames`. Survivors get an empty list. Other modes log no frames: empty too.
    ///
    /// The frames go in rounds, each rank's batch within its share of an all-gather's limit,
    /// until no rank has more: the log since a checkpoint can outgrow one all-gather.
    pub fn gather_frames(&self, boot: &mut dyn Bootstrap, failed: &[Rank]) -> Result<Vec<Vec<u8>>> {
        let mut mine = Vec::new();
        if !failed.contains(&self.rank) && self.protocol.logs_frames() {
            for &f in failed {
                mine.extend(self.frames_held_for(f)?);
            }
        }
        let share = gather_share(boot.job().size);
        let mut pending = mine.as_slice();
        let mut frames = Vec::new();
        loop {
            let n = batch_len(pending, share);
            let (batch, rest) = pending.split_at(n);
            pending = rest;
            let all = boot.allgather(&encode_frames(batch, !rest.is_empty()))?;
            let mut more = false;
            // A retired rank (a masked copy under partial redundancy) contributes nothing.
            for contribution in all.iter().filter(|c| !c.is_empty()) {
                let (theirs, their_more) = decode_frames(contribution)?;
                more |= their_more;
                if !failed.contains(&self.rank) {
                    continue;
                }
                for frame in theirs {
                    if Envelope::decode(frame)?.0.receiver == self.rank {
                        frames.push(frame.to_vec());
                    }
                }
            }
            if !more {
                return Ok(frames);
            }
        }
    }

    /// Replay primitive (`pessimistic-rb`) at a restarted rank, right after its channels were
    /// restored: takes its logged `frames` (from `gather_frames`) into the channels as if they
    /// had just arrived, in ssn order per sender; what its checkpoint covers is dropped as a
    /// duplicate. Frames from `regenerated` senders (ranks restarted with this one, which
    /// re-execute from the same checkpoint) are skipped. The senders then resend from
    /// `held_through(them) + 1`. Returns how many frames were taken in.
    pub fn replay_frames(&mut self, frames: Vec<Vec<u8>>, regenerated: &[Rank]) -> Result<usize> {
        let mut keyed = Vec::with_capacity(frames.len());
        for frame in frames {
            let (envelope, _) = Envelope::decode(&frame)?;
            if envelope.receiver != self.rank || envelope.sender >= self.size {
                return Err(LogError::malformed(
                    "logged frame",
                    format!("{} -> {} replayed at rank {}", envelope.sender, envelope.receiver, self.rank),
                ));
            }
            if envelope.sender != self.rank && !regenerated.contains(&envelope.sender) {
                keyed.push((envelope.sender, envelope.ssn, frame));
            }
        }
        // Log order is delivery order; channel order wants ssn order per sender (a ring kept
        // across an earlier restart may hold a sender's frames twice).
        keyed.sort_by_key(|(sender, ssn, _)| (*sender, *ssn));
        keyed.dedup_by_key(|(sender, ssn, _)| (*sender, *ssn));
        let taken = keyed.len();
        for (sender, _, frame) in keyed {
            self.accept_frame(sender, FrameBytes::Owned(frame))?;
        }
        Ok(taken)
    }

    /// The highest ssn from `peer` this rank holds in channel order (delivered, or released
    /// and waiting for a receive): after a restart, the senders resend from the next one.
    pub fn held_through(&self, peer: Rank) -> Ssn {
        self.channels.delivered_through(peer).unwrap_or(0)
    }

    /// A survivor learned that `peer` came back as `incarnation`, before the recovery's
    /// collectives: a frame its dead incarnation sent that is still under way is dropped as
    /// stale from now on. Taken in after `gather_determinants`, its piggybacked determinants
    /// could contradict the replay that the gathered ones steer.
    pub fn peer_restarted(&mut self, peer: Rank, incarnation: u32) -> Result<()> {
        self.channels.peer_restarted(peer, incarnation)
    }

    /// Replay primitive, collective: the determinants of the `failed` ranks, collected from
    /// every other rank (buddy rings and detLogs) and merged in (receiver, rsn) order. The
    /// failed ranks contribute nothing: their memory is gone. Copies that disagree are an
    /// error.
    pub fn gather_determinants(&self, boot: &mut dyn Bootstrap, failed: &[Rank]) -> Result<Vec<Determinant>> {
        let mut mine = Vec::new();
        if !failed.contains(&self.rank) {
            for &f in failed {
                mine.extend(self.determinants_held_for(f)?);
            }
        }
        let all = boot.allgather(&causal::encode_determinants(&mine))?;
        let mut copies = Vec::new();
        // A retired rank (a masked copy under partial redundancy) contributes nothing.
        for bytes in all.iter().filter(|b| !b.is_empty()) {
            copies.extend(
                causal::decode_determinants(bytes)?.into_iter().filter(|d| failed.contains(&d.receiver)),
            );
        }
        causal::merge_determinants(&copies)
    }

    /// Recovery, a survivor's side of the collective setup that restarted ranks run in
    /// `LoggedEndpoint::new` (call it when they do, after the provider reconnected to each:
    /// `reverb_transport::recovery::await_rejoin`). The rings this rank hosts for restarted
    /// clients are replaced by fresh ones (the old ones stay readable for
    /// `gather_determinants` until the next checkpoint). If this rank's own buddy restarted,
    /// its log goes on in the buddy's new ring and its unstable determinants are written
    /// again; what the lost ring held as stable is gone with it, so a checkpoint should
    /// follow the recovery.
    pub fn rejoin(&mut self, boot: &mut dyn Bootstrap, restarted: &[Rank]) -> Result<()> {
        if self.rings.log.is_none() && !self.rings.buddy_retired {
            // `none` sets up nothing collectively.
            return Ok(());
        }
        if let Some(&r) = restarted.iter().find(|&&r| r >= self.size || r == self.rank) {
            return Err(LogError::InvalidArgument(format!(
                "rank {r} cannot be a restarted peer of {}",
                self.rank
            )));
        }
        // A survivor's first recovery collective.
        let nodes = gather_node_ids(boot)?;
        if nodes != self.rings.node_of_rank {
            return Err(LogError::InvalidArgument(format!(
                "restarted ranks came back on other nodes: nodes {nodes:?}, {:?} before",
                self.rings.node_of_rank
            )));
        }
        for ring in self.rings.hosted.iter_mut().filter(|h| restarted.contains(&h.client)) {
            let fresh = HostedRing {
                client: ring.client,
                region: logring::create_ring(&mut *self.provider, self.config.ring_capacity)?,
            };
            self.rings.retired.push(std::mem::replace(ring, fresh));
        }
        let all = boot.allgather(&encode_hosted(&self.rings.hosted))?;
        let Some(log) = self.rings.log.as_mut() else { return Ok(()) };
        if restarted.contains(&log.buddy) {
            let fresh = open_writer_at(&mut *self.provider, &all, log.buddy, self.rank)?;
            std::mem::replace(&mut log.writer, fresh).close(&mut *self.provider);
            self.protocol.buddy_restarted();
            self.refresh_pending();
        }
        Ok(())
    }

    /// Stands in for a process restart from the initial state (no checkpoint yet): a new
    /// incarnation with empty channels, counters, logs and detLog, as a fresh process would
    /// have. The provider, the rings it hosts and its ring writer stay (the recovery issue
    /// rebuilds those for a real restart). Follow with `begin_replay`.
    pub fn restart_in_place(&mut self, incarnation: u32) -> Result<()> {
        if incarnation <= self.incarnation {
            return Err(LogError::InvalidArgument(format!(
                "restart as incarnation {incarnation}, not above {}",
                self.incarnation
            )));
        }
        self.flush_log()?;
        self.incarnation = incarnation;
        self.sequencer = SendSequencer::new(self.size);
        self.channels = RecvChannels::new(self.size, self.config.reorder_window);
        self.reception = ReceptionCounter::new(self.rank);
        self.ready.clear();
        self.released.clear();
        self.protocol.restart();
        self.refresh_pending();
        self.replay = None;
        self.ticks = 0;
        self.last_tick = 0;
        self.multicasts = Default::default();
        self.stats = LogStats::default();
        self.comm = CommRow::new(self.size);
        Ok(())
    }

    /// Replay primitive at the restarted rank: from now until it has delivered the last rsn
    /// they cover, each wildcard receive takes the message `determinants` names for its rsn
    /// (they must all be this rank's; order does not matter). A receive the log contradicts
    /// fails with `ReplayDiverged`. Determinants at or below the current rsn are ignored.
    pub fn begin_replay(&mut self, determinants: &[Determinant]) -> Result<()> {
        let done = self.reception.last_rsn();
        let ahead: Vec<Determinant> = determinants.iter().filter(|d| d.rsn > done).copied().collect();
        let plan = ReplayPlan::new(self.rank, &ahead)?;
        self.replay = (plan.last_rsn() > done).then_some(plan);
        Ok(())
    }

    /// Whether a replay is still under way.
    pub fn replaying(&self) -> bool {
        self.replay.as_ref().is_some_and(|p| self.reception.last_rsn() < p.last_rsn())
    }
}

const FRAMES: &str = "gathered log frames";

/// Bytes of a contribution to `gather_frames` before its frames: the count and the flag.
const BATCH_HEADER: usize = 5;

/// One rank's share of an all-gather's bytes among `size` ranks, less each part's length word.
fn gather_share(size: u32) -> usize {
    (MAX_GATHER_BYTES - 12) / (size.max(1) as usize) - 4
}

/// How many of `frames`, from the first, fit one contribution of at most `share` bytes; a
/// first frame beyond the share goes alone (with many ranks a share is smaller than the
/// largest frame, and the all-gather's own limit still guards the whole); none when empty.
fn batch_len(frames: &[Vec<u8>], share: usize) -> usize {
    let mut bytes = BATCH_HEADER;
    for (i, frame) in frames.iter().enumerate() {
        bytes += 4 + frame.len();
        if bytes > share {
            return i.max(1);
        }
    }
    frames.len()
}

/// `count u32 | more u8 | count × (len u32 | frame)`: a rank's contribution to one round of
/// `gather_frames`; `more` says it has frames for a later round.
fn encode_frames(frames: &[Vec<u8>], more: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(BATCH_HEADER + frames.iter().map(|f| 4 + f.len()).sum::<usize>());
    let mut w = Writer::new(&mut out);
    w.u32(frames.len() as u32);
    w.u8(u8::from(more));
    for frame in frames {
        w.bytes32(frame);
    }
    out
}

/// Decodes `encode_frames` output from untrusted bytes (another rank's), borrowing the frames.
fn decode_frames(bytes: &[u8]) -> Result<(Vec<&[u8]>, bool)> {
    let mut r = Reader::new(bytes, FRAMES);
    let count = r.u32()?;
    let more = match r.u8()? {
        0 => false,
        1 => true,
        other => return Err(LogError::malformed(FRAMES, format!("more flag {other}"))),
    };
    // Not preallocated: the count is the peer's word, each frame must still be there.
    let mut frames = Vec::new();
    for _ in 0..count {
        let len = r.u32()? as usize;
        frames.push(r.take(len)?);
    }
    if r.remaining() != 0 {
        return Err(LogError::malformed(FRAMES, format!("{} bytes left over", r.remaining())));
    }
    Ok((frames, more))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn pinned_encoding() {
        let frames = vec![b"ab".to_vec(), Vec::new()];
        assert_eq!(encode_frames(&frames, true), [2, 0, 0, 0, 1, 2, 0, 0, 0, b'a', b'b', 0, 0, 0, 0]);
        assert!(decode_frames(&[1, 0, 0, 0, 0, 9, 0, 0, 0, 1]).is_err(), "frame past the end");
        assert!(decode_frames(&[0, 0, 0, 0, 0, 0]).is_err(), "trailing byte");
        assert!(decode_frames(&[0, 0, 0, 0, 2]).is_err(), "a flag neither 0 nor 1");
    }

    /// A log bigger than one all-gather goes in batches within the share, each frame once.
    #[test]
    fn batches_stay_within_the_share() {
        let frames: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 30]).collect();
        let share = BATCH_HEADER + 3 * 34;
        let mut pending = frames.as_slice();
        let mut sent = Vec::new();
        while !pending.is_empty() {
            let n = batch_len(pending, share);
            let (batch, rest) = pending.split_at(n);
            assert_eq!(n, batch.len().min(3));
            assert!(encode_frames(batch, !rest.is_empty()).len() <= share);
            sent.extend_from_slice(batch);
            pending = rest;
        }
        assert_eq!(sent, frames);
        assert_eq!(batch_len(&[], share), 0);
        assert_eq!(batch_len(&[vec![0; share], vec![0; 1]], share), 1, "a frame beyond the share alone");
        // 8 ranks' full shares with their length words fit one all-gather.
        assert!(12 + 8 * (4 + gather_share(8)) <= MAX_GATHER_BYTES);
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..128)) {
            let _ = decode_frames(&bytes);
        }

        #[test]
        fn round_trips(frames in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..40), 0..6), more: bool) {
            let bytes = encode_frames(&frames, more);
            let (back, more_back) = decode_frames(&bytes).unwrap();
            let back: Vec<Vec<u8>> = back.into_iter().map(<[u8]>::to_vec).collect();
            prop_assert_eq!(back, frames);
            prop_assert_eq!(more_back, more);
        }
    }
}
