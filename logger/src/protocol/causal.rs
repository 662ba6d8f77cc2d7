//! `causal` (simple causal, seed 000 §2.6, Algs 1-5): payloads stay in the sender's log as in
//! `pessimistic-sb`; a wildcard receive's determinant is piggybacked on this rank's next
//! message to every destination and written asynchronously into its ring at the buddy (or
//! the node queue); once that write is durable it is stable and rides no more. Receivers keep
//! what is piggybacked to them (detLog). Delivery never waits for a log write. The
//! bookkeeping is [`CausalState`]; this file connects it to the endpoint's paths.

use reverb_transport::spinwait::SpinWait;
use reverb_transport::Rank;

use super::registry::{ProtocolEntry, ProtocolSetup};
use super::{
    sender_copies, Background, DeterminantSink, GcReport, IncomingMessage, LogIo, LogMode, LogProtocol,
    OutgoingMessage, Pending,
};
use crate::causal::CausalState;
use crate::determinant::{Determinant, Rsn};
use crate::error::{LogError, Result};
use crate::logring;
use crate::sendlog::SendLog;
use crate::stats::LogStats;

impl LogMode {
    /// Simple causal logging.
    pub const CAUSAL: LogMode = LogMode::named("causal");
}

pub(super) const ENTRY: ProtocolEntry = ProtocolEntry {
    mode: LogMode::CAUSAL,
    uses_buddy_log: true,
    sender_logs_payloads: true,
    frames_messages: true,
    new: |setup: &ProtocolSetup<'_>| Box::new(Causal::new(setup)),
};

/// Most determinants one ring record carries.
const MAX_DETERMINANTS_PER_RECORD: usize = 512;
/// Determinants pending before one write takes them all (amortizes the put).
const DET_WRITE_BATCH: usize = 32;

pub(super) struct Causal {
    state: CausalState,
    send_log: SendLog,
    size: u32,
    /// `LogConfig::max_unstable`: own unstable determinants before a wildcard delivery
    /// pushes back.
    max_unstable: usize,
    /// `LogConfig::det_log_limit`: detLog entries before receives push back.
    det_log_limit: usize,
}

impl Causal {
    fn new(setup: &ProtocolSetup<'_>) -> Self {
        let mut state = CausalState::new(setup.size);
        state.set_failure_units(setup.rank, setup.failure_units);
        Causal {
            state,
            send_log: SendLog::new(setup.size, setup.config.send_log_limit as u64),
            size: setup.size,
            max_unstable: setup.config.max_unstable,
            det_log_limit: setup.config.det_log_limit,
        }
    }

    /// Writes determinants not written yet: one record once `DET_WRITE_BATCH` are pending
    /// (until then the piggyback carries them), or now with `force`. A full ring or queue
    /// defers the write (counted); the determinants keep riding on messages.
    fn write_pending(&mut self, io: &mut LogIo<'_>, force: bool) -> Result<()> {
        let pending = self.state.unwritten_len();
        if pending == 0 || !(force || pending >= DET_WRITE_BATCH) {
            return Ok(());
        }
        match (io.sink, io.log.is_some()) {
            (DeterminantSink::NodeQueue(_), _) => self.push_to_queue(io),
            (DeterminantSink::BuddyRing, true) => self.write_to_ring(io),
            // The buddy was retired (a masked copy under partial redundancy): the determinants
            // keep riding on messages only.
            (DeterminantSink::BuddyRing, false) => Ok(()),
        }
    }

    fn push_to_queue(&mut self, io: &mut LogIo<'_>) -> Result<()> {
        let DeterminantSink::NodeQueue(queue) = io.sink else { return Ok(()) };
        let mut batch = Vec::new();
        self.state.unwritten(usize::MAX, &mut batch);
        for d in &batch {
            match queue.push(d) {
                Ok(index) => self.state.mark_written(1, index + 1),
                Err(LogError::QueueFull { .. }) => {
                    LogStats::bump(&io.stats.back_pressure_events, 1);
                    break;
                }
                Err(e) => return Err(e),
            }
            LogStats::bump(&io.stats.determinants_logged, 1);
            LogStats::bump(&io.stats.determinant_writes, 1);
        }
        Ok(())
    }

    fn write_to_ring(&mut self, io: &mut LogIo<'_>) -> Result<()> {
        let Some(log) = io.log.as_mut() else { return Ok(()) };
        // A record never takes more than half the ring, so a small ring still logs.
        let fits = (log.writer.capacity() / 2).saturating_sub(logring::RECORD_HEADER_LEN) as usize
            / Determinant::WIRE_LEN;
        let mut batch = Vec::new();
        self.state.unwritten(MAX_DETERMINANTS_PER_RECORD.min(fits.max(1)), &mut batch);
        let len = batch.len() * Determinant::WIRE_LEN;
        let needed = log.writer.bytes_needed(&[len]);
        if needed > log.writer.free() {
            log.writer.poll(&mut *io.provider)?;
        }
        if needed > log.writer.free() {
            LogStats::bump(&io.stats.back_pressure_events, 1);
            return Ok(());
        }
        let ticket = log.writer.append_determinants(&mut *io.provider, &batch)?;
        self.state.mark_written(batch.len(), ticket);
        LogStats::bump(&io.stats.determinant_writes, 1);
        LogStats::bump(&io.stats.determinants_logged, batch.len() as u64);
        LogStats::bump(&io.stats.determinant_bytes_logged, len as u64);
        LogStats::bump(&io.stats.library_bytes_sent, needed);
        io.comm.record_library(log.buddy, needed)
    }

    /// Retires the determinants whose write is durable (Alg 3's acknowledgement).
    fn retire_durable(&mut self, io: &mut LogIo<'_>, force: bool) -> Result<()> {
        if !(self.state.awaiting_durable() && (force || self.state.written_unstable() >= DET_WRITE_BATCH)) {
            return Ok(());
        }
        let durable = match (io.sink, io.log.as_mut()) {
            (DeterminantSink::NodeQueue(queue), _) => queue.indices().0,
            (DeterminantSink::BuddyRing, Some(log)) => log.writer.poll(&mut *io.provider)?,
            (DeterminantSink::BuddyRing, None) => 0,
        };
        let stable = self.state.mark_stable(durable);
        LogStats::bump(&io.stats.determinants_acknowledged, stable as u64);
        Ok(())
    }

    #[inline(never)]
    fn background_work(&mut self, io: &mut LogIo<'_>, force: bool) -> Result<()> {
        self.write_pending(io, force)?;
        self.retire_durable(io, force)
    }

    /// The node queue is shared: other ranks keep pushing, so wait for this rank's own last
    /// entry only.
    fn wait_queue_passed(&self, io: &LogIo<'_>, wait: &mut SpinWait) -> Result<()> {
        match (io.sink, self.state.last_ticket()) {
            (DeterminantSink::NodeQueue(queue), Some(last)) => queue.wait_taken(last, wait),
            _ => Ok(()),
        }
    }
}

impl LogProtocol for Causal {
    /// Alg 1 line 4. With no unstable determinant there is nothing to scan for (named
    /// receives, or all stable): the common case costs one length check.
    fn prepare_send(
        &mut self,
        dest: Rank,
        payload_len: usize,
        payload_logged: bool,
        piggyback: &mut Vec<Determinant>,
        stats: &LogStats,
    ) -> Result<()> {
        sender_copies::reserve(&self.send_log, payload_len, payload_logged, stats)?;
        if self.state.unstable_len() > 0 {
            let n = self.state.piggyback_for(dest, piggyback)?;
            LogStats::bump(&stats.determinants_piggybacked, n as u64);
        }
        Ok(())
    }

    fn log_send(&mut self, msg: &OutgoingMessage<'_>, stats: &LogStats) -> Result<()> {
        sender_copies::log_payload(&mut self.send_log, msg, stats)
    }

    /// No clock is read here: this runs on every send and every receive-loop round, so the
    /// check that there is nothing to do is inlined and the work is not.
    #[inline]
    fn background(&mut self, io: &mut LogIo<'_>, force: bool) -> Result<Pending> {
        if self.state.unstable_len() > 0 {
            self.background_work(io, force)?;
        }
        Ok(self.pending())
    }

    /// An unforced `background` acts only on a full batch (`write_pending`, `retire_durable`):
    /// until one is due, sends skip the call.
    fn pending(&self) -> Pending {
        let background = if self.state.unstable_len() == 0 {
            Background::Idle
        } else if self.state.unwritten_len() >= DET_WRITE_BATCH
            || self.state.written_unstable() >= DET_WRITE_BATCH
        {
            Background::Due
        } else {
            Background::Held
        };
        Pending { background, receive_check: self.state.det_log_len() >= self.det_log_limit }
    }

    fn check_receive(&self, stats: &LogStats) -> Result<()> {
        let held = self.state.det_log_len();
        if held >= self.det_log_limit {
            LogStats::bump(&stats.back_pressure_events, 1);
            return Err(LogError::DetLogFull { entries: held as u64, limit: self.det_log_limit as u64 });
        }
        Ok(())
    }

    /// Alg 2 line 10: keep what the sender piggybacked (a stale incarnation's are void).
    fn on_piggyback(
        &mut self,
        determinants: &[Determinant],
        stale: bool,
        stats: &LogStats,
    ) -> Result<Pending> {
        if stale {
            return Ok(self.pending());
        }
        let unstable = self.state.unstable_len();
        let new = self.state.store_piggybacked(determinants)? as u64;
        LogStats::bump(&stats.determinants_stored, new);
        LogStats::bump(&stats.determinants_forwarded, (self.state.unstable_len() - unstable) as u64);
        LogStats::bump(&stats.det_log_bytes, new * Determinant::WIRE_LEN as u64);
        Ok(self.pending())
    }

    /// Bounded, never waits for a write; a full unstable list is back-pressure.
    fn log_delivery(&mut self, io: &mut LogIo<'_>, msg: &IncomingMessage<'_>) -> Result<Pending> {
        let Some(d) = msg.determinant else { return Ok(self.pending()) };
        if self.state.unstable_len() >= self.max_unstable {
            self.background(io, true)?;
            if self.state.unstable_len() >= self.max_unstable {
                LogStats::bump(&io.stats.back_pressure_events, 1);
                return Err(LogError::QueueFull { capacity: self.max_unstable as u64 });
            }
        }
        self.state.add(d);
        Ok(self.pending())
    }

    /// Rounds while the backlog shrinks: the queue frees as the logger core drains it; a full
    /// ring frees only at a checkpoint.
    fn flush_writes(&mut self, io: &mut LogIo<'_>) -> Result<()> {
        let mut wait = SpinWait::new(io.provider.config(), io.config.durable_timeout);
        loop {
            let before = self.state.unwritten_len();
            self.background(io, true)?;
            io.flush_ring()?;
            self.wait_queue_passed(io, &mut wait)?;
            self.background(io, true)?;
            let after = self.state.unwritten_len();
            let settled = after == 0 && !self.state.awaiting_durable();
            if settled || (after > 0 && after == before) {
                return Ok(());
            }
        }
    }

    fn unwritten_determinants(&self) -> usize {
        self.state.unwritten_len()
    }

    fn unstable_determinants(&self) -> usize {
        self.state.unstable_len()
    }

    fn send_log(&self) -> Option<&SendLog> {
        Some(&self.send_log)
    }

    fn send_log_mut(&mut self) -> Option<&mut SendLog> {
        Some(&mut self.send_log)
    }

    /// The checkpoint covers every own determinant's delivery, and each rank's detLog entries
    /// through its checkpointed rsn.
    fn checkpoint_gc(&mut self, last_rsns: &[Rsn], report: &mut GcReport) {
        report.unstable_dropped = self.state.unstable_len() as u64;
        self.state.drop_unstable();
        for (peer, &rsn) in last_rsns.iter().enumerate() {
            report.det_log_entries_freed += self.state.trim_det_log(peer as Rank, rsn) as u64;
        }
    }

    fn held_determinants(&self, rank: Rank, out: &mut Vec<Determinant>) {
        out.extend(self.state.det_log_of(rank).copied());
    }

    /// Its unstable determinants go to the buddy's new ring again.
    fn buddy_restarted(&mut self) {
        self.state.unmark_written();
    }

    fn restart(&mut self) {
        self.state.clear();
        sender_copies::reset(&mut self.send_log, self.size);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::LogConfig;

    fn causal(det_log_limit: usize) -> Causal {
        let config = LogConfig { det_log_limit, mode: LogMode::CAUSAL, ..LogConfig::default() };
        Causal::new(&ProtocolSetup { size: 4, rank: 0, failure_units: &[], config: &config })
    }

    fn det(sender: Rank, receiver: Rank, rsn: Rsn) -> Determinant {
        Determinant { sender, receiver, ssn: rsn, rsn }
    }

    #[test]
    fn a_full_det_log_gates_receives_until_a_checkpoint() {
        let stats = LogStats::default();
        let mut c = causal(2);
        assert_eq!(c.pending(), Pending::default());
        let p = c.on_piggyback(&[det(0, 1, 1)], false, &stats).ok();
        assert_eq!(p, Some(Pending::default()), "one entry of two");
        assert!(c.on_piggyback(&[det(0, 1, 2)], true, &stats).is_ok_and(|p| !p.receive_check), "stale");
        let p = c.on_piggyback(&[det(0, 1, 2)], false, &stats).ok();
        assert_eq!(p.map(|p| p.receive_check), Some(true));
        assert!(matches!(c.check_receive(&stats), Err(LogError::DetLogFull { entries: 2, limit: 2 })));
        let mut report = GcReport::default();
        c.checkpoint_gc(&[0, 2, 0, 0], &mut report);
        assert_eq!(report.det_log_entries_freed, 2);
        assert!(!c.pending().receive_check && c.check_receive(&stats).is_ok());
    }

    #[test]
    fn held_determinants_come_from_the_det_log() {
        let stats = LogStats::default();
        let mut c = causal(16);
        assert!(c.on_piggyback(&[det(0, 2, 1), det(0, 3, 1)], false, &stats).is_ok());
        let mut held = Vec::new();
        c.held_determinants(2, &mut held);
        assert_eq!(held, [det(0, 2, 1)]);
        c.restart();
        held.clear();
        c.held_determinants(2, &mut held);
        assert!(held.is_empty(), "a restart forgets the detLog");
    }

    #[test]
    fn sends_skip_the_background_call_until_a_batch_is_due() {
        let mut c = causal(16);
        assert_eq!(c.pending().background, Background::Idle);
        for rsn in 1..DET_WRITE_BATCH as Rsn {
            c.state.add(det(1, 0, rsn));
        }
        assert_eq!(c.pending().background, Background::Held, "piggybacked, not written yet");
        c.state.add(det(1, 0, DET_WRITE_BATCH as Rsn));
        assert_eq!(c.pending().background, Background::Due, "a full batch is written now");
        c.state.mark_written(DET_WRITE_BATCH, 1);
        assert_eq!(c.pending().background, Background::Due, "and its durability polled");
        c.state.mark_stable(1);
        assert_eq!(c.pending().background, Background::Idle);
    }

    #[test]
    fn nothing_to_piggyback_without_unstable_determinants() {
        let stats = LogStats::default();
        let mut c = causal(16);
        let mut piggyback = Vec::new();
        assert!(c.prepare_send(1, 8, true, &mut piggyback, &stats).is_ok());
        assert!(piggyback.is_empty());
        assert_eq!((c.unstable_determinants(), c.unwritten_determinants()), (0, 0));
    }
}
