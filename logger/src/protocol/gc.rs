//! Log GC at a coordinated checkpoint: what the checkpoint covers leaves the logs.

use reverb_transport::codec::Writer;
use reverb_transport::{Bootstrap, Rank};

use super::LoggedEndpoint;
use crate::determinant::{Determinant, Rsn, Ssn};
use crate::error::{LogError, Result};
use crate::stats::LogStats;
use crate::wire::Reader;

/// What `checkpoint_taken` freed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Sender-log bytes freed (payloads plus entries).
    pub send_log_bytes_freed: u64,
    /// Bytes of this rank's ring at its buddy released for reuse.
    pub ring_bytes_freed: u64,
    /// detLog entries dropped.
    pub det_log_entries_freed: u64,
    /// Own determinants no longer needed (the checkpoint covers their deliveries).
    pub unstable_dropped: u64,
}

/// One rank's checkpoint watermarks: its reception counter, and per sender the ssns its
/// state covers. Wire: `last_rsn u64 | size × covered u64`.
struct Watermarks {
    last_rsn: Rsn,
    /// What the rank's checkpoint covers of the messages this rank sent it.
    consumed_from_me: Ssn,
}

impl Watermarks {
    fn parse(bytes: &[u8], peer: usize, size: u32, me: Rank) -> Result<Self> {
        const WHAT: &str = "checkpoint watermarks";
        // A rank retired from the job (a masked copy under partial redundancy) takes no part
        // in the all-gather: nothing is kept for it any more.
        if bytes.is_empty() {
            return Ok(Watermarks { last_rsn: Rsn::MAX, consumed_from_me: Ssn::MAX });
        }
        if bytes.len() != 8 * (size as usize + 1) {
            return Err(LogError::malformed(WHAT, format!("{} bytes from rank {peer}", bytes.len())));
        }
        let mut r = Reader::new(bytes, WHAT);
        let last_rsn = r.u64()?;
        for _ in 0..me {
            r.u64()?;
        }
        Ok(Watermarks { last_rsn, consumed_from_me: r.u64()? })
    }
}

impl LoggedEndpoint {
    /// GC at a coordinated checkpoint, collective: call right after every rank saved its
    /// state. Flushes the log, then frees what the checkpoint covers: this rank's ring up to
    /// the durable watermark (pessimistic: the rsn watermark; causal: every determinant), its
    /// unstable determinants, the detLog entries of each rank through that rank's rsn, and
    /// the send log to each destination through the ssn that destination has consumed.
    pub fn checkpoint_taken(&mut self, boot: &mut dyn Bootstrap) -> Result<GcReport> {
        let mut report = GcReport::default();
        // Determinants a full log could not take are covered by the checkpoint: not needed.
        self.flush_writes()?;
        // No wait for this rank's sends here: the all-gather below progresses, which drains
        // a provider's backlog, and a send's completion may need its receiver (a rendezvous
        // read, a pass-through duplicate nobody receives) while that receiver is already in
        // the all-gather.
        let mine = self.own_watermarks();
        // The node's logger core trims once, before the all-gather holds every rank back.
        if let Some(offload) = self.offload.as_ref().filter(|o| o.client().lane() == 0) {
            offload.trim(self.config.durable_timeout)?;
        }
        // Past this all-gather every rank has checkpointed: only now may logs go. It runs
        // progressing: a peer may still wait on this rank (a rendezvous frame it re-sent in
        // a replay completes only once this rank reads it).
        let all = self.progressing(boot, |b| b.allgather(&mine))?;
        #[cfg(feature = "fault-injection")]
        if let Some(hook) = self.trim_hook {
            hook();
        }
        self.rings.retired.clear();
        report.ring_bytes_freed = self.trim_ring_to_durable()?;
        let marks = all
            .iter()
            .enumerate()
            .map(|(peer, bytes)| Watermarks::parse(bytes, peer, self.size, self.rank))
            .collect::<Result<Vec<_>>>()?;
        let last_rsns: Vec<Rsn> = marks.iter().map(|m| m.last_rsn).collect();
        self.protocol.checkpoint_gc(&last_rsns, &mut report);
        self.refresh_pending();
        for (peer, m) in marks.iter().enumerate() {
            if peer as Rank != self.rank {
                report.send_log_bytes_freed += self.trim_send_log(peer as Rank, m.consumed_from_me)?;
            }
        }
        report.send_log_bytes_freed += self.trim_multicasts();
        LogStats::drop_by(
            &self.stats.det_log_bytes,
            report.det_log_entries_freed * Determinant::WIRE_LEN as u64,
        );
        LogStats::bump(&self.stats.determinants_acknowledged, report.unstable_dropped);
        Ok(report)
    }

    /// Runs `hook` in every later log GC, once every rank has checkpointed and before the logs
    /// are trimmed (fault-injection tests).
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn set_trim_fault_hook(&mut self, hook: Option<fn()>) {
        self.trim_hook = hook;
    }

    /// This rank's watermarks: per sender, the ssns its state covers (all released in order,
    /// less any still waiting in `ready` for a receive).
    fn own_watermarks(&self) -> Vec<u8> {
        let mut covered: Vec<u64> =
            (0..self.size).map(|p| self.channels.delivered_through(p).unwrap_or(0)).collect();
        for a in &self.ready {
            if let Some(c) = covered.get_mut(a.sender as usize) {
                *c = (*c).min(a.ssn - 1);
            }
        }
        encode_watermarks(self.reception.last_rsn(), &covered)
    }

    /// Frees this rank's ring at its buddy up to what is durable and waits until the host
    /// sees the new tail. Returns the bytes freed.
    fn trim_ring_to_durable(&mut self) -> Result<u64> {
        let Some(log) = self.rings.log.as_mut() else { return Ok(0) };
        let durable = log.writer.poll(&mut *self.provider)?;
        let freed = durable - log.writer.tail();
        log.writer.trim(&mut *self.provider, durable)?;
        log.writer.flush(&mut *self.provider, self.config.durable_timeout)?;
        Ok(freed)
    }

    /// Frees the send log to `dest` through `through_ssn`: to call once a checkpoint of `dest`
    /// covers those deliveries. Returns the bytes freed (0 without a send log).
    pub fn trim_send_log(&mut self, dest: Rank, through_ssn: Ssn) -> Result<u64> {
        let Some(send_log) = self.protocol.send_log_mut() else { return Ok(0) };
        let freed = send_log.trim(dest, through_ssn)?;
        LogStats::drop_by(&self.stats.send_log_bytes, freed);
        Ok(freed)
    }

    /// Frees the log up to what is durable: to call once a checkpoint covers those deliveries.
    pub fn trim_log_to_durable(&mut self) -> Result<()> {
        if let Some(log) = self.rings.log.as_mut() {
            let durable = log.writer.poll(&mut *self.provider)?;
            log.writer.trim(&mut *self.provider, durable)?;
        }
        Ok(())
    }
}

/// `last_rsn u64 | size × covered ssn u64`, what `Watermarks::parse` reads.
fn encode_watermarks(last_rsn: u64, covered: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 * (covered.len() + 1));
    let mut w = Writer::new(&mut out);
    w.u64(last_rsn);
    for &c in covered {
        w.u64(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn marks(last_rsn: u64, covered: &[u64]) -> Vec<u8> {
        let mut out = last_rsn.to_le_bytes().to_vec();
        for c in covered {
            out.extend_from_slice(&c.to_le_bytes());
        }
        out
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..96), size in 0u32..12, me in 0u32..12) {
            let _ = Watermarks::parse(&bytes, 1, size, me);
        }

        #[test]
        fn round_trips(last_rsn: u64, covered in prop::collection::vec(any::<u64>(), 1..10), me: prop::sample::Index) {
            let bytes = encode_watermarks(last_rsn, &covered);
            prop_assert_eq!(&bytes, &marks(last_rsn, &covered), "pinned");
            let me = me.index(covered.len());
            let m = Watermarks::parse(&bytes, 1, covered.len() as u32, me as Rank).unwrap();
            prop_assert_eq!((m.last_rsn, m.consumed_from_me), (last_rsn, covered[me]));
        }
    }

    #[test]
    fn watermarks_pick_this_ranks_column() {
        let bytes = marks(7, &[10, 20, 30]);
        for (me, want) in [(0, 10), (1, 20), (2, 30)] {
            let m = Watermarks::parse(&bytes, 5, 3, me).ok();
            assert_eq!(m.map(|m| (m.last_rsn, m.consumed_from_me)), Some((7, want)));
        }
    }

    #[test]
    fn watermarks_of_the_wrong_length_are_refused() {
        let bytes = marks(7, &[10, 20, 30]);
        assert!(Watermarks::parse(&bytes, 0, 4, 0).is_err());
        assert!(Watermarks::parse(&bytes[..bytes.len() - 1], 0, 3, 0).is_err());
        // Empty: a retired rank's part, nothing kept for it.
        let retired = Watermarks::parse(&[], 0, 3, 0).unwrap();
        assert_eq!((retired.last_rsn, retired.consumed_from_me), (Rsn::MAX, Ssn::MAX));
    }
}
