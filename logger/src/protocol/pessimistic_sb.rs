//! `pessimistic-sb` (sender-based, seed 000 §2.4): the sender keeps every payload in its
//! bounded [`SendLog`] (a full log is back-pressure, `LogFull`); the receiver writes only the
//! determinant of a wildcard receive, into its ring at the buddy or the node queue, and waits
//! for it to be durable before delivering. Named receives log nothing. Replay takes the
//! payloads from the senders' logs (`resend_from`) in the order the determinants give.

use reverb_transport::Rank;

use super::registry::{ProtocolEntry, ProtocolSetup};
use super::rings::wait_queue_durable;
use super::{
    sender_copies, DeterminantSink, IncomingMessage, LogIo, LogMode, LogProtocol, OutgoingMessage, Pending,
};
use crate::determinant::Determinant;
use crate::error::Result;
use crate::sendlog::SendLog;
use crate::stats::LogStats;

impl LogMode {
    /// Pessimistic sender-based logging.
    pub const PESSIMISTIC_SB: LogMode = LogMode::named("pessimistic-sb");
}

pub(super) const ENTRY: ProtocolEntry = ProtocolEntry {
    mode: LogMode::PESSIMISTIC_SB,
    uses_buddy_log: true,
    sender_logs_payloads: true,
    frames_messages: true,
    new: |setup: &ProtocolSetup<'_>| Box::new(SenderBased::new(setup)),
};

pub(super) struct SenderBased {
    send_log: SendLog,
    size: u32,
}

impl SenderBased {
    fn new(setup: &ProtocolSetup<'_>) -> Self {
        SenderBased {
            send_log: SendLog::new(setup.size, setup.config.send_log_limit as u64),
            size: setup.size,
        }
    }
}

impl LogProtocol for SenderBased {
    fn prepare_send(
        &mut self,
        _dest: Rank,
        payload_len: usize,
        payload_logged: bool,
        _piggyback: &mut Vec<Determinant>,
        stats: &LogStats,
    ) -> Result<()> {
        sender_copies::reserve(&self.send_log, payload_len, payload_logged, stats)
    }

    fn log_send(&mut self, msg: &OutgoingMessage<'_>, stats: &LogStats) -> Result<()> {
        sender_copies::log_payload(&mut self.send_log, msg, stats)
    }

    /// The payload is in the sender's log: only the determinant leaves, and is waited for.
    fn log_delivery(&mut self, io: &mut LogIo<'_>, msg: &IncomingMessage<'_>) -> Result<Pending> {
        let Some(d) = msg.determinant else { return Ok(Pending::default()) };
        match (io.sink, io.log.as_mut()) {
            (DeterminantSink::NodeQueue(queue), _) => {
                wait_queue_durable(queue, d, io.config, io.provider.config(), io.stats)?
            }
            (DeterminantSink::BuddyRing, Some(log)) => {
                log.record_determinant(&mut *io.provider, d, io.config, io.stats)?
            }
            (DeterminantSink::BuddyRing, None) => {}
        }
        Ok(Pending::default())
    }

    fn send_log(&self) -> Option<&SendLog> {
        Some(&self.send_log)
    }

    fn send_log_mut(&mut self) -> Option<&mut SendLog> {
        Some(&mut self.send_log)
    }

    fn restart(&mut self) {
        sender_copies::reset(&mut self.send_log, self.size);
    }
}
