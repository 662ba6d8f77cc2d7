//! What one rank measured, and the clocks it is measured with.

use std::time::{SystemTime, UNIX_EPOCH};

use reverb_transport::sys::clock::{cpu_time, CpuClock};
use reverb_transport::Rank;
use serde::Serialize;

/// What one rank measured; written as JSON to `REVERB_RUNTIME_REPORT/rank-R-inc-I.json`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RuntimeReport {
    /// The rank that measured it.
    pub rank: Rank,
    /// Its incarnation: 0 for the first, one more per restart.
    pub incarnation: u32,
    /// The process it ran in (several ranks share one under `reverb run --objects`).
    pub pid: u32,
    /// The logging protocol (`REVERB_LOG`).
    pub mode: String,
    /// Unix ns when `init` began (a restarted rank recovers inside it).
    pub init_start_ns: u64,
    /// Unix ns when `init` ended.
    pub init_end_ns: u64,
    /// Unix ns when `finalize` had drained the log and this rank's sends.
    pub finalize_ns: u64,
    /// CPU time (all threads, user + system, spinning waits included) this process used from
    /// the end of `init` to `finalize`.
    pub compute_cpu_ms: f64,
    /// Messages handed to the application.
    pub messages_delivered: u64,
    /// Messages the application sent.
    pub messages_sent: u64,
    /// Survivors: unix ns at which each failure was detected.
    pub detected_ns: Vec<u64>,
    /// Partial redundancy: copies whose death this rank masked.
    pub masked_copies: Vec<u32>,
    /// Survivors: each recovery's duration.
    pub recovery_ms: Vec<f64>,
    /// Restarted ranks: the epoch restored (0: none, re-executed from the start).
    pub restored_epoch: u64,
    /// Restarted ranks: where the restored image came from (own copy, buddy, Reed-Solomon,
    /// or the initial state).
    pub restored_from: String,
    /// Restarted ranks: the replay runs from the end of `init` until the rank has re-executed
    /// as far as the survivors had seen it (every determinant-ordered delivery made, every
    /// message the survivors already had sent again); the deliveries it made.
    pub replayed_deliveries: u64,
    /// Restarted ranks: the sends the replay made.
    pub replayed_sends: u64,
    /// Restarted ranks: the replay's duration.
    pub replay_ms: f64,
    /// Unix ns at which the replay ended.
    pub replay_end_ns: u64,
    /// An object restarted on a helper core: unix ns at which it moved home (0: it did not).
    pub went_home_ns: u64,
    /// Checkpoints taken.
    pub checkpoints: u64,
    /// Time spent in checkpoints; where it went: the four fields below.
    pub checkpoint_ms: f64,
    /// Of `checkpoint_ms`: levels 1-2 (copy, CRC32C, buddy puts).
    pub checkpoint_write_ms: f64,
    /// Of `checkpoint_ms`: the checkpointer's waits (level-1 reports to the encoders, the
    /// agreement round).
    pub checkpoint_agree_ms: f64,
    /// Of `checkpoint_ms`: Reed-Solomon encoding and parity puts.
    pub checkpoint_parity_ms: f64,
    /// Of `checkpoint_ms`: the logger's GC.
    pub checkpoint_gc_ms: f64,
    /// Size of the last checkpoint image.
    pub checkpoint_image_bytes: u64,
    /// Checkpoint memory this rank registered (local, buddy and parity slots).
    pub checkpoint_memory_bytes: u64,
    /// Largest sender-log size seen at a checkpoint (before its GC).
    pub send_log_peak_bytes: u64,
    /// Largest detLog size seen at a checkpoint (before its GC).
    pub det_log_peak_bytes: u64,
    /// Payload bytes this rank's protocol logged (sender log or ring frames), this
    /// incarnation.
    pub payload_bytes_logged: u64,
    /// Collective-aware logging: tree sends logged as stubs (no payload).
    pub multicast_stubs_logged: u64,
    /// Collective-aware logging: stubs resent to restarted ranks with their root's payload.
    pub multicast_stubs_resent: u64,
    /// Collective-aware logging: reduction contributions' payload bytes dropped from the
    /// sender log once their reduction completed (tombstones stay in their place).
    pub contribution_bytes_dropped: u64,
    /// Collective-aware logging: reductions this incarnation replayed after they had
    /// completed, from a child's tombstone (the result came from the broadcast).
    pub reductions_replayed_from_tombstones: u64,
    /// Duplicate messages dropped (resent after a recovery, the rank already had them).
    pub duplicates_dropped: u64,
    /// Restarted ranks under pessimistic-rb: frames their buddy's ring gave back for the replay.
    pub ring_frames_replayed: u64,
}

pub(super) fn unix_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos() as u64
}

/// CPU time this rank has used (ns): its process's, all threads, or its thread's when the
/// process hosts several ranks (`objects`).
pub(super) fn rank_cpu_ns(object: bool) -> u64 {
    let whose = if object { CpuClock::Thread } else { CpuClock::Process };
    u64::try_from(cpu_time(whose).as_nanos()).unwrap_or(u64::MAX)
}
