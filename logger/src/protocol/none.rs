//! `none`: envelopes, channel ordering, duplicate and stale drops; nothing is logged.

use reverb_transport::Rank;

use super::registry::{ProtocolEntry, ProtocolSetup};
use super::{IncomingMessage, LogIo, LogMode, LogProtocol, OutgoingMessage, Pending};
use crate::determinant::Determinant;
use crate::error::Result;
use crate::stats::LogStats;

impl LogMode {
    /// `none`: nothing is logged.
    pub const NONE: LogMode = LogMode::named("none");
}

pub(super) const ENTRY: ProtocolEntry = ProtocolEntry {
    mode: LogMode::NONE,
    uses_buddy_log: false,
    sender_logs_payloads: false,
    frames_messages: false,
    new: |_: &ProtocolSetup<'_>| Box::new(NoLogging),
};

/// No state: every hook but the unlogged count is empty.
pub(super) struct NoLogging;

impl LogProtocol for NoLogging {
    fn prepare_send(
        &mut self,
        _: Rank,
        _: usize,
        _: bool,
        _: &mut Vec<Determinant>,
        _: &LogStats,
    ) -> Result<()> {
        Ok(())
    }

    fn log_send(&mut self, _msg: &OutgoingMessage<'_>, stats: &LogStats) -> Result<()> {
        LogStats::bump(&stats.messages_unlogged, 1);
        Ok(())
    }

    fn log_delivery(&mut self, _io: &mut LogIo<'_>, _msg: &IncomingMessage<'_>) -> Result<Pending> {
        Ok(Pending::default())
    }
}
