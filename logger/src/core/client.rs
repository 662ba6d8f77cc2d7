//! The application side of logger offload: a rank attaches to its node's segment and only
//! enqueues; pessimistic delivery waits, bounded, on the watermark the logger core publishes.

use std::path::Path;
use std::time::{Duration, Instant};

use super::segment::{
    NodeSegment, NodeVerdict, Status, BUDDY_DEAD, BUDDY_REJOINING, STATE_EXITED, STATE_FAILED, STATE_READY,
};
use reverb_transport::config::Env;

use super::{segment_paths, vars, CoreError};
use crate::determinant::Determinant;
use crate::detqueue::DetQueue;
use crate::error::LogError;
use reverb_transport::sys::liveness::pid_running;

/// Durability handle of one enqueued entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Ticket {
    /// Entry `index` of the node determinant queue: durable once the queue's start passes it.
    Determinant { index: u64 },
    /// A frame of payload lane `lane`: durable once the lane's durable position reaches `end`.
    Payload { lane: u64, end: u64 },
}

/// A ticket for which nothing must be waited (nothing was logged).
impl Default for Ticket {
    fn default() -> Self {
        Ticket::Payload { lane: 0, end: 0 }
    }
}

/// If the logger's loop counter stops this long while it claims to be running, it is stalled.
/// (`REVERB_LOGGER_STALL_MS` overrides it: oversubscribed test machines.)
const LOGGER_STALL: Duration = Duration::from_secs(5);

fn logger_stall() -> Result<Duration, CoreError> {
    Ok(Env::process().duration(vars::STALL_MS)?.unwrap_or(LOGGER_STALL))
}
/// How often the slow checks (buddy state, logger liveness) run while waiting.
const CHECK_EVERY: Duration = Duration::from_millis(2);

/// A rank's handle on its node's logger core.
#[derive(Debug)]
pub struct NodeLogClient {
    segment: NodeSegment,
    detq: DetQueue,
    lane: u64,
    pid: u32,
    stall: Duration,
}

impl NodeLogClient {
    /// Attaches through `REVERB_LOGGER_SEGMENT` as the producer of payload lane `lane` (this
    /// rank's index on its node, `JobInfo::local_rank`: the launcher's `REVERB_LOCAL_RANK`),
    /// waiting (bounded by `REVERB_LOGGER_ATTACH_TIMEOUT_S`, default 30 s) for the logger to
    /// create it.
    pub fn attach_from_env(lane: u64) -> Result<Self, CoreError> {
        let env = Env::process();
        let base = env.raw(vars::SEGMENT)?.ok_or_else(|| {
            CoreError::Config(format!(
                "{} is not set: this job runs without logger cores (reverb run --logger ...)",
                vars::SEGMENT
            ))
        })?;
        let timeout = env.duration(vars::ATTACH_TIMEOUT_S)?.unwrap_or(Duration::from_secs(30));
        Self::attach(&base, lane, timeout)
    }

    /// Attaches to the segment at `base` as the producer of payload lane `lane`.
    pub fn attach(base: &str, lane: u64, timeout: Duration) -> Result<Self, CoreError> {
        let (ctl, detq) = segment_paths(base);
        let deadline = Instant::now() + timeout;
        let (segment, detq) = loop {
            match Self::open_both(&ctl, &detq) {
                Ok(both) => break both,
                Err(e) if Instant::now() >= deadline => {
                    return Err(CoreError::Config(format!(
                        "no logger segment at {base} within {timeout:?} (is the logger core running?): {e}"
                    )))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(5)),
            }
        };
        let pid = std::process::id();
        segment.claim_lane(lane, pid)?;
        Ok(NodeLogClient { segment, detq, lane, pid, stall: logger_stall()? })
    }

    fn open_both(ctl: &Path, detq: &Path) -> Result<(NodeSegment, DetQueue), CoreError> {
        // The logger creates the queue first and the segment (magic last) second.
        let segment = NodeSegment::open(ctl)?;
        let detq = DetQueue::open(detq)?;
        Ok((segment, detq))
    }

    pub fn lane(&self) -> u64 {
        self.lane
    }

    /// The node's determinant queue (causal piggybacking reads `[start, end)` from it).
    pub fn det_queue(&self) -> &DetQueue {
        &self.detq
    }

    /// A second handle on the node's determinant queue, e.g. for the protocol layer's
    /// `DeterminantSink::NodeQueue`: an entry is durable once the queue's start passes it.
    pub fn open_det_queue(&self) -> Result<DetQueue, CoreError> {
        Ok(DetQueue::open(self.detq.path())?)
    }

    /// Enqueues a determinant. `Log(QueueFull)` is back-pressure: retry after the logger drains.
    pub fn enqueue_determinant(&self, det: &Determinant) -> Result<Ticket, CoreError> {
        let index = self.detq.push(det)?;
        Ok(Ticket::Determinant { index })
    }

    /// Enqueues a payload frame (receiver-based logging: envelope + payload) into this rank's
    /// lane. `LaneFull` is back-pressure: nothing was enqueued; retry later.
    pub fn enqueue_payload(&self, frame: &[u8]) -> Result<Ticket, CoreError> {
        let end = self.segment.push_frame(self.lane, frame)?;
        Ok(Ticket::Payload { lane: self.lane, end })
    }

    /// As `enqueue_determinant`, waiting (bounded) through back-pressure.
    pub fn enqueue_determinant_wait(
        &self,
        det: &Determinant,
        timeout: Duration,
    ) -> Result<Ticket, CoreError> {
        self.retry_full(timeout, || match self.enqueue_determinant(det) {
            Err(CoreError::Log(LogError::QueueFull { .. })) => Ok(None),
            other => other.map(Some),
        })
    }

    /// As `enqueue_payload`, waiting (bounded) through back-pressure.
    pub fn enqueue_payload_wait(&self, frame: &[u8], timeout: Duration) -> Result<Ticket, CoreError> {
        self.retry_full(timeout, || match self.enqueue_payload(frame) {
            Err(CoreError::LaneFull { .. }) => Ok(None),
            other => other.map(Some),
        })
    }

    fn retry_full(
        &self,
        timeout: Duration,
        mut attempt: impl FnMut() -> Result<Option<Ticket>, CoreError>,
    ) -> Result<Ticket, CoreError> {
        let mut waiter = Waiter::new(timeout);
        loop {
            if let Some(t) = attempt()? {
                return Ok(t);
            }
            waiter.pause(self)?;
        }
    }

    /// Whether the entry is durable at the buddy node.
    pub fn is_durable(&self, ticket: Ticket) -> bool {
        match ticket {
            Ticket::Determinant { index } => self.detq.indices().0 > index,
            Ticket::Payload { lane, end } => self.segment.lane_durable(lane).is_ok_and(|d| d >= end),
        }
    }

    /// Waits until the entry is durable. Errors instead of hanging: `BuddyDead` when the buddy's
    /// logger died, `LoggerGone` when this node's logger exited or died, `Timeout`.
    pub fn wait_durable(&self, ticket: Ticket, timeout: Duration) -> Result<(), CoreError> {
        let mut waiter = Waiter::new(timeout);
        loop {
            if self.is_durable(ticket) {
                return Ok(());
            }
            waiter.pause(self)?;
        }
    }

    /// False once the logger reported its buddy dead (also while a respawned buddy is
    /// awaited: see [`Self::buddy_rejoining`]).
    pub fn buddy_alive(&self) -> bool {
        !matches!(self.segment.get(Status::BuddyState), BUDDY_DEAD | BUDDY_REJOINING)
    }

    /// The buddy died and its respawn is awaited (`reverb run --respawn`): entries stay
    /// pending, and become durable once the logger has re-flushed the log to the new
    /// incarnation. Waits are not failed for it (their own bound still holds).
    pub fn buddy_rejoining(&self) -> bool {
        self.segment.get(Status::BuddyState) == BUDDY_REJOINING
    }

    /// Failure detection for the runtime: every related node (the buddy, or a node whose
    /// ring this node's logger hosts) that this node's logger found dead, with how, when it
    /// was last heard and when reported, and whether a newer incarnation came back since.
    /// Reads shared memory only (no system call): cheap enough for an idle receive loop,
    /// and cheaper still behind [`Self::verdict_generation`].
    pub fn verdicts(&self) -> Vec<NodeVerdict> {
        self.segment.verdicts()
    }

    /// The verdicts of nodes still dead (no newer incarnation back yet).
    pub fn dead_nodes(&self) -> Vec<NodeVerdict> {
        self.verdicts().into_iter().filter(NodeVerdict::is_dead).collect()
    }

    /// Changes whenever a verdict is recorded or updated: poll it, and read
    /// [`Self::verdicts`] only when it moved.
    pub fn verdict_generation(&self) -> u64 {
        self.segment.get(Status::VerdictGeneration)
    }

    /// The node this node's log goes to, once the logger knows it.
    pub fn buddy_node(&self) -> Option<u64> {
        Some(self.segment.get(Status::BuddyNode)).filter(|&n| n != u64::MAX)
    }

    /// Asks the logger to drop everything durable when it handles the request from the
    /// buddy's ring (GC after a checkpoint); returns the request number, done once
    /// `trims_done()` reaches it. Exact only while the node's ranks are quiesced at the
    /// checkpoint (their tickets durable, nothing new enqueued): use [`Self::trim_wait`] there.
    pub fn request_trim(&self) -> u64 {
        self.segment.bump(Status::TrimRequested)
    }

    /// Requests a trim and waits (bounded) until the logger carried it out.
    pub fn trim_wait(&self, timeout: Duration) -> Result<(), CoreError> {
        let asked = self.request_trim();
        let mut waiter = Waiter::new(timeout);
        while self.trims_done() < asked {
            waiter.pause(self)?;
        }
        Ok(())
    }

    /// Replay: asks the logger to snapshot the rings this node hosts (for the nodes that log
    /// to it) and waits (bounded) for the files; returns `(client node, ring image)` pairs.
    pub fn hosted_ring_images(&self, timeout: Duration) -> Result<Vec<(u64, Vec<u8>)>, CoreError> {
        let asked = self.segment.bump(Status::SnapshotRequested);
        let mut waiter = Waiter::new(timeout);
        while self.segment.get(Status::SnapshotDone) < asked {
            waiter.pause(self)?;
        }
        let ctl = self.segment.path();
        let prefix = format!(
            "{}.hosted-node",
            ctl.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default()
        );
        let dir = ctl.parent().unwrap_or(std::path::Path::new("."));
        let mut images = Vec::new();
        let entries =
            std::fs::read_dir(dir).map_err(|e| CoreError::io(format!("list {}", dir.display()), e))?;
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            // `<prefix><node>` is the ring hosted now; `<prefix><node>-r<k>` a ring retired
            // when that node's logger was respawned (kept until the next trim).
            let Some(node) = name
                .strip_prefix(&prefix)
                .and_then(|n| n.split_once("-r").map_or(n, |(node, _)| node).parse::<u64>().ok())
            else {
                continue;
            };
            if name.ends_with(".tmp") {
                continue;
            }
            let path = entry.path();
            let image =
                std::fs::read(&path).map_err(|e| CoreError::io(format!("read {}", path.display()), e))?;
            images.push((node, image));
        }
        Ok(images)
    }

    pub fn trims_done(&self) -> u64 {
        self.segment.get(Status::TrimDone)
    }

    /// A status word of the segment (counters, state), for reports and tests.
    pub fn status(&self, word: Status) -> u64 {
        self.segment.get(word)
    }

    /// Fails if nothing more can become durable on this node's path.
    pub fn check_path(&self) -> Result<(), CoreError> {
        if self.segment.get(Status::BuddyState) == BUDDY_DEAD {
            return Err(CoreError::BuddyDead { node: self.segment.get(Status::BuddyNode) });
        }
        let pid = self.segment.get(Status::LoggerPid) as u32;
        match self.segment.get(Status::State) {
            STATE_FAILED => return Err(CoreError::LoggerGone { pid, why: "it failed".into() }),
            STATE_EXITED => return Err(CoreError::LoggerGone { pid, why: "it exited".into() }),
            _ => {}
        }
        if pid != 0 && !pid_running(pid) {
            return Err(CoreError::LoggerGone { pid, why: "the process is dead".into() });
        }
        Ok(())
    }
}

impl Drop for NodeLogClient {
    fn drop(&mut self) {
        self.segment.release_lane(self.lane, self.pid);
    }
}

/// Spin, then yield, then sleep briefly; checks the path every `CHECK_EVERY`; bounded.
struct Waiter {
    start: Instant,
    timeout: Duration,
    spins: u32,
    last_check: Instant,
    ticks: (u64, Instant),
}

impl Waiter {
    fn new(timeout: Duration) -> Self {
        let now = Instant::now();
        Waiter { start: now, timeout, spins: 0, last_check: now, ticks: (u64::MAX, now) }
    }

    fn pause(&mut self, client: &NodeLogClient) -> Result<(), CoreError> {
        self.spins = self.spins.saturating_add(1);
        if self.spins < 256 {
            std::hint::spin_loop();
            return Ok(());
        }
        let now = Instant::now();
        if now.duration_since(self.last_check) >= CHECK_EVERY {
            self.last_check = now;
            client.check_path()?;
            let ticks = client.segment.get(Status::Ticks);
            if ticks != self.ticks.0 {
                self.ticks = (ticks, now);
            } else if client.segment.get(Status::State) == STATE_READY
                && now.duration_since(self.ticks.1) >= client.stall
            {
                let pid = client.segment.get(Status::LoggerPid) as u32;
                return Err(CoreError::LoggerGone {
                    pid,
                    why: format!("its loop stalled for {:?}", client.stall),
                });
            }
        }
        if now.duration_since(self.start) >= self.timeout {
            return Err(CoreError::Timeout(self.timeout));
        }
        if self.spins < 2048 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(20));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attach_is_bounded_and_checks_the_lane() {
        let t0 = Instant::now();
        let err = NodeLogClient::attach("/nonexistent/reverb-seg", 0, Duration::from_millis(50)).unwrap_err();
        assert!(matches!(err, CoreError::Config(_)), "{err}");
        assert!(t0.elapsed() < Duration::from_secs(5));

        let base = std::env::temp_dir()
            .join(format!("reverb-client-test-{}", std::process::id()))
            .to_string_lossy()
            .into_owned();
        let (ctl, detq) = segment_paths(&base);
        let _q = DetQueue::create(&detq, 8).unwrap();
        let seg = NodeSegment::create(&ctl, 2, 1024).unwrap();
        seg.set(Status::LoggerPid, u64::from(std::process::id()));
        assert!(NodeLogClient::attach(&base, 2, Duration::from_millis(50)).is_err(), "lane 2 of 2");
        let client = NodeLogClient::attach(&base, 1, Duration::from_millis(50)).unwrap();
        // No logger drains: tickets stay pending and a wait ends in a timeout, not a hang.
        let t = client.enqueue_payload(b"frame").unwrap();
        assert!(!client.is_durable(t));
        assert!(matches!(client.wait_durable(t, Duration::from_millis(30)), Err(CoreError::Timeout(_))));
        assert!(client.is_durable(Ticket::default()));
        // A buddy reported dead turns the wait into an error at once.
        seg.set(Status::BuddyNode, 3);
        seg.set(Status::BuddyState, super::super::segment::BUDDY_REJOINING);
        assert!(!client.buddy_alive() && client.buddy_rejoining());
        assert!(
            matches!(client.wait_durable(t, Duration::from_millis(30)), Err(CoreError::Timeout(_))),
            "a respawning buddy is waited for, within the bound"
        );
        seg.set(Status::BuddyState, BUDDY_DEAD);
        assert!(matches!(client.wait_durable(t, WAIT_LONG), Err(CoreError::BuddyDead { node: 3 })));
        assert!(client.verdicts().is_empty());
        std::fs::remove_file(ctl).ok();
        std::fs::remove_file(detq).ok();
    }

    const WAIT_LONG: Duration = Duration::from_secs(30);
}
