//! The logger loop's data path: the node's determinant queue and payload lanes into the
//! buddy's ring, the durable watermarks published back, and the snapshot and trim requests
//! the clients raise in the segment.

use reverb_transport::PeerState;

use super::log_path::path_error;
use super::peers::Phase;
use super::segment::{self, DeathCause, Status};
use super::session::Session;
use super::snapshot::{hosted_snapshot_path, retired_snapshot_path, write_atomically};
use super::CoreError;
use crate::determinant::Determinant;
use crate::detqueue::DetConsumer;
use crate::logring::RecordKind;

/// Determinants per ring record at most.
const MAX_BATCH: u64 = 1024;
/// Frames taken from one lane per loop iteration, so one rank cannot starve the others.
const FRAMES_PER_LANE: usize = 32;

impl Session<'_> {
    /// Replay: clients read the rings this node hosts from files the logger writes.
    pub(super) fn serve_snapshot_request(&mut self) -> Result<(), CoreError> {
        let segment = &self.core.segment;
        let asked = segment.get(Status::SnapshotRequested);
        if asked <= segment.get(Status::SnapshotDone) {
            return Ok(());
        }
        let base = &self.core.cfg.segment_base;
        for (c, ring) in &self.hosted {
            write_atomically(&hosted_snapshot_path(base, *c), &ring.to_vec(0, ring.len())?)?;
        }
        for (c, k, ring) in &self.retired {
            write_atomically(&retired_snapshot_path(base, *c, *k), &ring.to_vec(0, ring.len())?)?;
        }
        segment.set(Status::SnapshotDone, asked);
        Ok(())
    }

    /// GC hook: after a checkpoint, drops everything durable so far (with the buddy down, from
    /// the copy kept for the re-flush), and the rings retired at a respawn.
    pub(super) fn serve_trim_request(&mut self) -> Result<(), CoreError> {
        let asked = self.core.segment.get(Status::TrimRequested);
        if asked <= self.core.segment.get(Status::TrimDone) {
            return Ok(());
        }
        self.path.trim(self.provider)?;
        for (c, k, _) in self.retired.drain(..) {
            std::fs::remove_file(retired_snapshot_path(&self.core.cfg.segment_base, c, k)).ok();
        }
        self.core.segment.set(Status::TrimDone, asked);
        Ok(())
    }

    /// One step of the log path: moves what fits and publishes what became durable; a
    /// failed write to a dead buddy drops the path. Returns whether anything moved.
    pub(super) fn log(
        &mut self,
        consumer: &mut DetConsumer<'_>,
        batch: &mut Vec<Determinant>,
        lanes: u64,
    ) -> Result<bool, CoreError> {
        if self.path.writer.is_none() {
            if let Err(e) = self.provider.progress() {
                tracing::warn!("reverb logger-core node {}: {e}", self.me);
            }
            return Ok(false);
        }
        let mut moved = false;
        match self.log_step(consumer, batch, lanes) {
            Ok(m) => moved = m,
            Err(e) if path_error(&e) || self.provider.peer_state(self.target) == PeerState::Dead => {
                self.path.drop_writer(self.provider);
                let why = format!("log write failed: {e}");
                self.report_dead(self.target, &why, DeathCause::WriteFailed);
                if self.core.cfg.expect_rejoin && self.phase == Phase::Running {
                    self.core.segment.set(Status::BuddyState, segment::BUDDY_REJOINING);
                }
            }
            Err(e) => return Err(e),
        }
        if self.path.writer.is_some() {
            self.publish_durable(consumer)?;
        }
        Ok(moved)
    }

    /// Moves what fits from the queues into the ring and polls its completions. Returns
    /// whether anything moved.
    fn log_step(
        &mut self,
        consumer: &mut DetConsumer<'_>,
        batch: &mut Vec<Determinant>,
        lanes: u64,
    ) -> Result<bool, CoreError> {
        let moved = self.log_determinants(consumer, batch)?;
        let moved = self.log_frames(lanes)? || moved;
        if let Some(writer) = self.path.writer.as_mut() {
            self.path.durable = writer.poll(self.provider)?;
        }
        Ok(moved)
    }

    /// The queue's next determinants, as many as fit, as one ring record.
    fn log_determinants(
        &mut self,
        consumer: &mut DetConsumer<'_>,
        batch: &mut Vec<Determinant>,
    ) -> Result<bool, CoreError> {
        let Some(writer) = self.path.writer.as_ref() else { return Ok(false) };
        let (_, end, _) = self.core.detq.indices();
        let taken = consumer.in_flight().end;
        let mut n = end.saturating_sub(taken).min(MAX_BATCH);
        while n > 0 && writer.bytes_needed(&[n as usize * Determinant::WIRE_LEN]) > writer.free() {
            n /= 2;
        }
        if n == 0 {
            return Ok(false);
        }
        batch.clear();
        let range = consumer.take_batch(n as usize, batch);
        let mut data = Vec::with_capacity(batch.len() * Determinant::WIRE_LEN);
        for d in batch.iter() {
            data.extend_from_slice(&d.to_bytes());
        }
        let ticket = self.path.append(self.provider, RecordKind::Determinants, data)?;
        self.path.pending_dets.push_back((ticket, range.end, batch.len() as u64));
        Ok(true)
    }

    /// Up to `FRAMES_PER_LANE` payload frames of each lane, one ring record each.
    fn log_frames(&mut self, lanes: u64) -> Result<bool, CoreError> {
        let mut moved = false;
        for lane in 0..lanes {
            for _ in 0..FRAMES_PER_LANE {
                let Some((data, end)) = self.core.segment.peek_frame(lane)? else { break };
                let Some(writer) = self.path.writer.as_ref() else { return Ok(moved) };
                if writer.bytes_needed(&[data.len()]) > writer.free() {
                    break; // ring full: back-pressure until a trim
                }
                let ticket = self.path.append(self.provider, RecordKind::Payload, data)?;
                self.core.segment.take_through(lane, end)?;
                self.path.pending_frames.push_back((ticket, lane, end));
                moved = true;
            }
        }
        Ok(moved)
    }

    /// Frees the lane and queue entries whose ring records are durable; publishes counters.
    fn publish_durable(&mut self, consumer: &mut DetConsumer<'_>) -> Result<(), CoreError> {
        let Some(writer) = self.path.writer.as_ref() else { return Ok(()) };
        let durable = writer.durable_watermark();
        let head = writer.head();
        let (segment, path, summary) = (&self.core.segment, &mut self.path, &mut self.summary);
        path.durable = durable;
        segment.set(Status::RingDurable, durable);
        while path.pending_dets.front().is_some_and(|p| p.0 <= durable) {
            if let Some((_, end, n)) = path.pending_dets.pop_front() {
                consumer.mark_durable(end)?;
                summary.determinants += n;
                segment.set(Status::DeterminantsLogged, summary.determinants);
            }
        }
        while path.pending_frames.front().is_some_and(|p| p.0 <= durable) {
            if let Some((_, lane, end)) = path.pending_frames.pop_front() {
                segment.mark_durable(lane, end)?;
                summary.payloads += 1;
                segment.set(Status::PayloadsLogged, summary.payloads);
            }
        }
        summary.ring_bytes_written = head;
        Ok(())
    }

    /// Whether everything enqueued is durable and the ring's header says so too.
    pub(super) fn drained(&self, consumer: &DetConsumer<'_>, lanes: u64) -> Result<bool, CoreError> {
        let Some(writer) = self.path.writer.as_ref() else { return Ok(false) };
        let recorded = writer.recorded_header();
        let ring_flushed = writer.durable_watermark() == writer.head()
            && recorded.watermark == writer.head()
            && recorded.tail == writer.tail();
        Ok(ring_flushed && self.leftover(lanes)? == (0, 0) && consumer.in_flight().is_empty())
    }

    /// Enqueued but not durable: (determinants, payload bytes of the lanes).
    pub(super) fn leftover(&self, lanes: u64) -> Result<(u64, u64), CoreError> {
        let (start, end, _) = self.core.detq.indices();
        let mut bytes = 0;
        for lane in 0..lanes {
            let (head, _, durable) = self.core.segment.lane_positions(lane)?;
            bytes += head.saturating_sub(durable);
        }
        Ok((end.saturating_sub(start), bytes))
    }
}
