//! Collective-aware logging of reductions at the endpoint ([`crate::reduction`]): which
//! contributions are kept for good (msgLog) and which lose their payload once their
//! reduction completed (tmpMsgLog).

use std::ops::RangeInclusive;

use reverb_transport::Rank;

use super::LoggedEndpoint;
use crate::determinant::Ssn;
use crate::error::Result;
use crate::stats::LogStats;

impl LoggedEndpoint {
    /// Whether reductions are logged collective-aware: CAML under a protocol whose send log
    /// is where replays take payloads from (receiver-based logging keeps its own copy in the
    /// receiver's ring, so there the sender has nothing worth dropping).
    pub fn caml_reductions(&self) -> bool {
        self.caml() && !self.protocol.logs_frames()
    }

    /// Once this rank holds a reduction's result: its contribution, messages `ssns` to
    /// `parent`, loses its payload unless `parent` is the reduction's `root` or fails with it
    /// (a restarted root's unit must recompute the reduction, so what reaches it stays).
    /// Returns the bytes freed.
    pub fn drop_contribution(&mut self, parent: Rank, root: Rank, ssns: RangeInclusive<Ssn>) -> Result<u64> {
        if !self.caml_reductions() || self.shares_fate(parent, root) || !self.logs_payload_with(parent) {
            return Ok(0);
        }
        let Some(log) = self.protocol.send_log_mut() else { return Ok(0) };
        let mut freed = 0;
        for ssn in ssns {
            freed += log.drop_payload(parent, ssn)?;
        }
        if freed > 0 {
            LogStats::drop_by(&self.stats.send_log_bytes, freed);
            LogStats::bump(&self.stats.contribution_bytes_dropped, freed);
        }
        Ok(freed)
    }
}
