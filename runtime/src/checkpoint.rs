//! Coordinated checkpoints (the image: endpoint state, application state, protected
//! entries), the log GC after each, and the collective shutdown.

use std::time::Instant;

use reverb_ckpt::{Epoch, ProtectSet};
use reverb_logger::error::LogError;
use reverb_transport::bootstrap::final_barrier;
use reverb_transport::TransportError;

use super::error::{Result, RuntimeError};
use super::fault::Here;
use super::report::{rank_cpu_ns, unix_ns, RuntimeReport};
use super::{initboot, Runtime, ENTRY_APP, ENTRY_ENDPOINT, ENTRY_SPHERES};

impl Runtime {
    /// Coordinated checkpoint of `state` and the endpoint's channel state, then the logger's
    /// garbage collection. Collective. Returns the committed epoch (`None` with checkpoints off).
    pub(super) fn checkpoint_now(&mut self, state: &[u8]) -> Result<Option<Epoch>> {
        if self.ckpt.is_none() {
            return Ok(None);
        }
        let start = Instant::now();
        self.settle_duplicates()?;
        let mut masked_since: Option<Instant> = None;
        loop {
            if let Err(e) = self.agree_retired() {
                if self.retry_after(&e, &mut masked_since)? {
                    continue;
                }
                return Err(e);
            }
            let endpoint =
                self.endpoint.as_mut().ok_or_else(|| RuntimeError::InvalidArgument("finalized".into()))?;
            let stats = endpoint.stats();
            self.report.send_log_peak_bytes = self.report.send_log_peak_bytes.max(stats.send_log_bytes);
            self.report.det_log_peak_bytes = self.report.det_log_peak_bytes.max(stats.det_log_bytes);
            let snapshot = endpoint.recovery_snapshot();
            let mut set = ProtectSet::new();
            set.protect(ENTRY_ENDPOINT, &snapshot)?;
            set.protect(ENTRY_APP, state)?;
            let counts = self.spheres.as_ref().map(|s| s.encode_counts());
            if let Some(counts) = &counts {
                set.protect(ENTRY_SPHERES, counts)?;
            }
            for (id, data) in &self.protected {
                set.protect(*id, data)?;
            }
            let Some(ckpt) = self.ckpt.as_mut() else { return Ok(None) };
            match ckpt.checkpoint(endpoint.provider(), &set) {
                Ok(epoch) => {
                    self.logs_cut.clear();
                    let stats = ckpt.last_stats();
                    self.report.checkpoint_image_bytes = stats.image_len as u64;
                    self.report.checkpoint_write_ms += stats.write.as_secs_f64() * 1e3;
                    self.report.checkpoint_agree_ms += stats.agree.as_secs_f64() * 1e3;
                    self.report.checkpoint_parity_ms += stats.parity.as_secs_f64() * 1e3;
                    let here = Here { rank: self.rank, incarnation: self.report.incarnation };
                    let (boot, known) = (&mut self.boot, &self.incarnation_of);
                    let endpoint = self.endpoint.as_mut();
                    self.config.faults.before_log_gc((here, epoch), endpoint, boot, known, &self.config)?;
                    let gc_start = Instant::now();
                    let gc = self.log_gc();
                    self.report.checkpoint_gc_ms += gc_start.elapsed().as_secs_f64() * 1e3;
                    if let Err(e) = gc {
                        // The checkpoint stands; only its GC was cut short by a failure.
                        if !self.failure_explains()? {
                            return Err(e);
                        }
                    }
                    self.report.checkpoints += 1;
                    self.report.checkpoint_ms += start.elapsed().as_secs_f64() * 1e3;
                    return Ok(Some(epoch));
                }
                Err(e) => {
                    let e = RuntimeError::from(e);
                    if !self.retry_after(&e, &mut masked_since)? {
                        return Err(e);
                    }
                }
            }
        }
    }

    /// The log GC after a checkpoint, framed: a survivor that missed a failure and comes here
    /// once the failed rank is back meets the recovery's first collective, and joins it. A
    /// masked copy's death (sends to it failing) does not excuse a rank from the GC's
    /// all-gather: it tries again.
    fn log_gc(&mut self) -> Result<()> {
        let mut masked_since: Option<Instant> = None;
        loop {
            let endpoint =
                self.endpoint.as_mut().ok_or_else(|| RuntimeError::InvalidArgument("finalized".into()))?;
            let mut gc_boot = initboot::GcRound { boot: &mut self.boot, known: &self.incarnation_of };
            let e = match endpoint.checkpoint_taken(&mut gc_boot) {
                Ok(_) => return Ok(()),
                Err(e) => RuntimeError::from(e),
            };
            match e.dead_peer() {
                Some(p) if self.masked_copy(p) => {
                    self.await_retirement(p, *masked_since.get_or_insert_with(Instant::now))?
                }
                _ => return Err(e),
            }
        }
    }

    /// Collective shutdown: drains the log and this rank's sends, recovering any failure
    /// found meanwhile, writes the report and closes the endpoint.
    pub(super) fn finalize_now(mut self) -> Result<RuntimeReport> {
        // Since the barrier was first cut short by a masked copy's death.
        let mut masked_since: Option<Instant> = None;
        let here = Here { rank: self.rank, incarnation: self.report.incarnation };
        self.config.faults.before_finalize(here);
        self.mask_lost_copies()?;
        self.settle_duplicates()?;
        loop {
            let timeout = self.config.recv_timeout;
            // The field, not `self.endpoint()`: the barrier below borrows `self.boot` too.
            let endpoint = self
                .endpoint
                .as_mut()
                .ok_or_else(|| RuntimeError::InvalidArgument("the runtime was finalized".into()))?;
            let drained = endpoint.flush_log().and_then(|()| endpoint.wait_sends(timeout));
            let settled = match drained {
                // Peers still finishing (a replay) may need this rank's progress.
                Ok(()) => match endpoint.progressing(&mut self.boot, |b| final_barrier(b)) {
                    Ok(true) => Ok(()),
                    // Others were in a recovery's first collective: join the recovery.
                    Ok(false) => Err(LogError::from(TransportError::Bootstrap(
                        "a recovery started while this rank was finishing".into(),
                    ))),
                    Err(e) => Err(LogError::from(e)),
                },
                Err(e) => Err(e),
            };
            match settled {
                Ok(()) => break,
                Err(e) => {
                    let e = RuntimeError::from(e);
                    if !self.retry_after(&e, &mut masked_since)? {
                        return Err(e);
                    }
                }
            }
        }
        let endpoint =
            self.endpoint.take().ok_or_else(|| RuntimeError::InvalidArgument("finalized".into()))?;
        let stats = endpoint.stats();
        self.report.messages_delivered = stats.messages_delivered;
        self.report.messages_sent = stats.messages_sent;
        self.report.duplicates_dropped = stats.duplicates_dropped;
        self.report.payload_bytes_logged = stats.payload_bytes_logged;
        self.report.multicast_stubs_logged = stats.multicast_stubs_logged;
        self.report.multicast_stubs_resent = stats.multicast_stubs_resent;
        self.report.contribution_bytes_dropped = stats.contribution_bytes_dropped;
        self.report.send_log_peak_bytes = self.report.send_log_peak_bytes.max(stats.send_log_bytes);
        self.report.finalize_ns = unix_ns();
        self.report.compute_cpu_ms =
            rank_cpu_ns(self.config.object_rank.is_some()).saturating_sub(self.init_end_cpu_ns) as f64 / 1e6;
        endpoint.finish(&mut self.boot)?;
        if let Some(dir) = &self.config.report_dir {
            let path = dir.join(format!("rank-{}-inc-{}.json", self.rank, self.report.incarnation));
            let json = serde_json::to_vec_pretty(&self.report)
                .map_err(|e| RuntimeError::InvalidArgument(format!("report: {e}")))?;
            std::fs::write(&path, json).map_err(|e| {
                RuntimeError::InvalidArgument(format!("writing the report {}: {e}", path.display()))
            })?;
        }
        self.config.faults.after_finalize(here, &self.config);
        Ok(self.report)
    }
}
