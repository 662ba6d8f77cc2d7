//! `pessimistic-rb` (receiver-based, RADIC, seed 003): before a message is handed to the
//! application, its frame (envelope + payload) and, for wildcard receives, its determinant
//! are durable in the ring at the receiver's buddy (or handed to the node logger core).
//! Messages in flight to a receiver that dies are in no ring, so the sender keeps a copy of
//! each logged payload, off the receiver's critical path, until a checkpoint covers it.

use reverb_transport::Rank;

use super::registry::{ProtocolEntry, ProtocolSetup};
use super::{sender_copies, IncomingMessage, LogIo, LogMode, LogProtocol, OutgoingMessage, Pending};
use crate::determinant::Determinant;
use crate::error::Result;
use crate::sendlog::SendLog;
use crate::stats::LogStats;

impl LogMode {
    /// Pessimistic receiver-based logging.
    pub const PESSIMISTIC_RB: LogMode = LogMode::named("pessimistic-rb");
}

pub(super) const ENTRY: ProtocolEntry = ProtocolEntry {
    mode: LogMode::PESSIMISTIC_RB,
    uses_buddy_log: true,
    sender_logs_payloads: false,
    frames_messages: true,
    new: |setup: &ProtocolSetup<'_>| Box::new(ReceiverBased::new(setup)),
};

pub(super) struct ReceiverBased {
    /// Copies of the payloads sent, for the messages a dead receiver's ring lacks.
    in_flight_copies: SendLog,
    size: u32,
}

impl ReceiverBased {
    fn new(setup: &ProtocolSetup<'_>) -> Self {
        ReceiverBased {
            in_flight_copies: SendLog::new(setup.size, setup.config.send_log_limit as u64),
            size: setup.size,
        }
    }
}

impl LogProtocol for ReceiverBased {
    fn prepare_send(
        &mut self,
        _dest: Rank,
        payload_len: usize,
        payload_logged: bool,
        _piggyback: &mut Vec<Determinant>,
        stats: &LogStats,
    ) -> Result<()> {
        sender_copies::reserve(&self.in_flight_copies, payload_len, payload_logged, stats)
    }

    /// The copy is not the log (the receiver's ring is) and is not counted as logging; the
    /// receiver counts.
    fn log_send(&mut self, msg: &OutgoingMessage<'_>, stats: &LogStats) -> Result<()> {
        sender_copies::keep(&mut self.in_flight_copies, msg, stats).map(|_| ())
    }

    fn log_delivery(&mut self, io: &mut LogIo<'_>, msg: &IncomingMessage<'_>) -> Result<Pending> {
        let frame = msg.payload_logged.then_some(msg.frame);
        if let Some(offload) = io.offload {
            offload.log_delivery(frame, msg.determinant, io.config.durable_timeout, io.stats)?;
        } else if let Some(log) = io.log.as_mut() {
            log.record(&mut *io.provider, frame, msg.determinant, io.config, io.stats)?;
        } else {
            return Ok(Pending::default());
        }
        // A probe's finding ("seen") is no message.
        if msg.determinant.is_some_and(|d| d.is_seen()) {
            return Ok(Pending::default());
        }
        let counter =
            if msg.payload_logged { &io.stats.messages_payload_logged } else { &io.stats.messages_unlogged };
        LogStats::bump(counter, 1);
        Ok(Pending::default())
    }

    fn send_log(&self) -> Option<&SendLog> {
        Some(&self.in_flight_copies)
    }

    fn send_log_mut(&mut self) -> Option<&mut SendLog> {
        Some(&mut self.in_flight_copies)
    }

    fn logs_frames(&self) -> bool {
        true
    }

    fn restart(&mut self) {
        sender_copies::reset(&mut self.in_flight_copies, self.size);
    }
}
