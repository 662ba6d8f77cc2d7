//! What one rank measured, and the clocks it is measured with.

use std::time::{SystemTime, UNIX_EPOCH};

use reverb_transport::Rank;
use serde::Serialize;

/// What one rank measured; written as JSON to `REVERB_RUNTIME_REPORT/rank-R-inc-I.json`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RuntimeReport {
    pub rank: Rank,
    pub incarnation: u32,
    pub mode: String,
    /// Unix ns when `init` began and ended (a restarted rank recovers inside it).
    pub init_start_ns: u64,
    pub init_end_ns: u64,
    pub finalize_ns: u64,
    /// CPU time (all threads, user + system, spinning waits included) this process used from
    /// the end of `init` to `finalize`.
    pub compute_cpu_ms: f64,
    pub messages_delivered: u64,
    pub messages_sent: u64,
    /// Survivors: unix ns at which each failure was detected, and each recovery's duration.
    pub detected_ns: Vec<u64>,
    pub recovery_ms: Vec<f64>,
    /// Restarted ranks: the epoch restored (0: none, re-executed from the start) and where from.
    pub restored_epoch: u64,
    pub restored_from: String,
    /// Restarted ranks: the replay, from the end of `init` until the rank has re-executed as
    /// far as the survivors had seen it (every determinant-ordered delivery made, every message
    /// the survivors already had sent again): its deliveries and sends, and its duration.
    pub replayed_deliveries: u64,
    pub replayed_sends: u64,
    pub replay_ms: f64,
    /// Unix ns at which the replay ended.
    pub replay_end_ns: u64,
    pub checkpoints: u64,
    pub checkpoint_ms: f64,
    /// Where `checkpoint_ms` went: levels 1-2 (copy, CRC32C, buddy puts), the checkpointer's
    /// waits (level-1 reports to the encoders, the agreement round), Reed-Solomon encoding and
    /// parity puts, and the logger's GC.
    pub checkpoint_write_ms: f64,
    pub checkpoint_agree_ms: f64,
    pub checkpoint_parity_ms: f64,
    pub checkpoint_gc_ms: f64,
    pub checkpoint_image_bytes: u64,
    /// Checkpoint memory this rank registered (local, buddy and parity slots).
    pub checkpoint_memory_bytes: u64,
    /// Largest sender-log and detLog sizes seen at a checkpoint (before its GC).
    pub send_log_peak_bytes: u64,
    pub det_log_peak_bytes: u64,
    pub duplicates_dropped: u64,
    /// Restarted ranks under pessimistic-rb: frames their buddy's ring gave back for the replay.
    pub ring_frames_replayed: u64,
}

pub(super) fn unix_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos() as u64
}

/// CPU time this process has used, all threads (ns).
pub(super) fn process_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant Linux supports.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}
