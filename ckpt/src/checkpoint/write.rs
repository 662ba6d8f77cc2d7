//! A checkpoint: levels 1-2 in one pass, the group's level-1 reports, level 3, the agreement.

use std::time::{Duration, Instant};

use reverb_transport::Provider;

use super::sink::SlotSink;
use super::transfer::Dir;
use super::{CheckpointStats, Checkpointer, Stage};
use crate::error::CkptError;
use crate::image::{self, Epoch, ImageKind, ImageSink, ProtectSet, HEADER_LEN};
use crate::team;

impl Checkpointer {
    /// Coordinated checkpoint of `set` across the job. Returns the committed epoch; on any
    /// failure (a dead buddy, a dead team member, a timeout) returns `NotCommitted` and the
    /// previous epoch stays the committed one everywhere.
    pub fn checkpoint(
        &mut self,
        provider: &mut dyn Provider,
        set: &ProtectSet<'_>,
    ) -> Result<Epoch, CkptError> {
        let epoch = self.next_epoch;
        self.next_epoch += 1;
        let slot = self.committed.map_or(0, |(_, s)| 1 - s);
        let image_len = set.image_len(self.config.chunk_len);
        self.stats = CheckpointStats { epoch, image_len, ..CheckpointStats::default() };
        self.stage(epoch, Stage::Entered);
        let t0 = Instant::now();
        // Too large still votes (no): the team learns at once instead of waiting out its bound.
        let written = if image_len > self.config.slot_len {
            Err(CkptError::TooLarge { len: image_len, capacity: self.config.slot_len })
        } else {
            self.write_levels_1_2(provider, slot, epoch, set)
        };
        self.stats.write = t0.elapsed();
        self.stats.buddy = *written.as_ref().unwrap_or(&Duration::ZERO);
        // Only a group's encoder needs its members' level-1 copies: they report to it, and the
        // one job-wide round comes after the parity.
        let t2 = Instant::now();
        let ready = self.group_written(provider, epoch, written.is_ok());
        self.stats.agree = t2.elapsed();
        let t3 = Instant::now();
        // Err(None): a group member could not write; its own error says why.
        let encoded = match ready {
            Ok(true) => self.encode_group(provider, slot, epoch).map_err(Some),
            Ok(false) => Err(None),
            Err(e) => Err(Some(e)),
        };
        self.stats.parity = t3.elapsed();
        let t4 = Instant::now();
        self.stage(epoch, Stage::Voting);
        let vote = team::Vote { ok: written.is_ok() && encoded.is_ok(), min: 0 };
        let verdict =
            team::agree_round((provider, self.owner), &self.voters(), 2, epoch, vote, self.config.timeout)
                .map_err(|e| not_committed(epoch, Some(e), ""))?;
        self.stats.agree += t4.elapsed();
        if !verdict.ok {
            let mine = written.err().or(encoded.err().flatten());
            return Err(not_committed(epoch, mine, "levels 1-2 or the parity failed on a team member"));
        }
        self.committed = Some((epoch, slot));
        self.stage(epoch, Stage::Committed);
        Ok(epoch)
    }

    /// Levels 1-2 done (`ok` for this rank): a group member reports to its encoder; the encoder
    /// returns whether every member wrote (itself included). Other ranks return `ok`.
    fn group_written(&self, provider: &mut dyn Provider, epoch: Epoch, ok: bool) -> Result<bool, CkptError> {
        let Some(group) = self.placement.group_of(self.me).filter(|g| self.group_encodes(g)) else {
            return Ok(ok);
        };
        let Some(encoder) = group.encoder() else { return Ok(ok) };
        if encoder != self.me {
            team::report_written((provider, self.owner), encoder, epoch, ok, self.config.timeout)?;
            return Ok(ok);
        }
        // Gathered even when this rank failed, so no report is left unclaimed.
        let live: Vec<_> = group.members.iter().copied().filter(|&r| !self.is_retired(r)).collect();
        let others_wrote = team::gather_written((provider, self.owner), &live, epoch, self.config.timeout)?;
        Ok(ok && others_wrote)
    }

    /// Levels 1 and 2 in one pass: each payload chunk is copied into the local slot, checksummed
    /// and put to the buddy while still in cache; then the chunk table; once every put has
    /// completed, the header (the epoch word) flips the buddy's slot to this epoch.
    /// Returns the time spent in the transport.
    fn write_levels_1_2(
        &self,
        provider: &mut dyn Provider,
        slot: usize,
        epoch: Epoch,
        set: &ProtectSet<'_>,
    ) -> Result<Duration, CkptError> {
        let local_base = slot * self.config.slot_len;
        // No stale header of an older epoch may survive a crash in the middle of this slot.
        self.local
            .fill(local_base, HEADER_LEN, 0)
            .map_err(|e| CkptError::transport("clearing a header", e))?;
        let buddy = self.placement.buddy_of(self.me);
        let target = if self.config.buddy && !buddy.is_some_and(|b| self.is_retired(b)) {
            let buddy = buddy.ok_or(CkptError::InvalidArgument("no buddy".into()))?;
            let remote = self.peers[buddy as usize].hosted.ok_or_else(|| {
                CkptError::InvalidArgument(format!("buddy rank {buddy} registered no slots"))
            })?;
            let index =
                self.placement.clients_of(buddy).iter().position(|&c| c == self.me).ok_or_else(|| {
                    CkptError::InvalidArgument(format!("rank {buddy} does not keep rank {}'s copy", self.me))
                })?;
            let base = ((index * 2 + slot) * self.config.slot_len) as u64;
            self.transfer(provider, Dir::Put, &self.zero_header, 0, &remote, base, HEADER_LEN)?;
            Some((remote, base))
        } else {
            None
        };
        let mut sink = SlotSink {
            local: &self.local,
            base: local_base,
            target,
            provider,
            owner: self.owner,
            pending: std::collections::VecDeque::new(),
            piece: self.config.transfer_len,
            timeout: self.config.timeout,
            in_transport: Duration::ZERO,
        };
        let header =
            image::write_image_to(&mut sink, ImageKind::Data, self.me, epoch, self.config.chunk_len, set)?;
        self.stage(epoch, Stage::LocalWritten);
        let Some((remote, base)) = target else { return Ok(Duration::ZERO) };
        sink.chunk_done(HEADER_LEN, header.table_len())?;
        sink.drain()?;
        self.stage(epoch, Stage::BuddyBodyLanded);
        let flip = Instant::now();
        self.transfer(sink.provider, Dir::Put, &self.local, local_base, &remote, base, HEADER_LEN)?;
        let in_transport = sink.in_transport + flip.elapsed();
        self.stage(epoch, Stage::BuddyFlipped);
        Ok(in_transport)
    }
}

fn not_committed(epoch: Epoch, mine: Option<CkptError>, theirs: &str) -> CkptError {
    let reason = match mine {
        Some(e) => e.to_string(),
        None => theirs.to_string(),
    };
    CkptError::NotCommitted { epoch, reason }
}
