//! The node segment: a shared file mapping the logger core creates and the node's ranks attach
//! to. It holds the logger's status words and one payload-copy lane per local rank; the node
//! determinant queue is a separate file (`DetQueue`, `<base>.detq`).
//!
//! Payload lanes are single-producer/single-consumer byte rings (the rank produces, the logger
//! consumes), so producers never contend and each rank's order is kept by construction.
//! Three positions per lane, only growing, physical offset = pos % capacity:
//! `head` (producer: published frames end here), `taken` (logger: handed to the log ring),
//! `durable` (logger: durable at the buddy; space below it is free again). A frame is
//! `len u32 | 0 u32 | data`, padded to 8; a frame never straddles the end of the lane (a wrap
//! marker, len = u32::MAX, skips the rest of the lap).
//!
//! Layout (little-endian; every word is an `AtomicU64`):
//! ```text
//! 0: magic | 8: version | 16: lanes | 24: lane capacity | 32: creator pid
//! 64..: status words (STATUS_*)
//! 256..1280: failure verdicts, 16 slots of 64 B (see [`NodeVerdict`]), guarded by the
//!            `VerdictGeneration` status word (a sequence lock: odd while the logger writes)
//! 1280 + i * (LANE_HEADER + capacity): lane i = head@0 taken@64 durable@128 owner@192 | data
//! ```
//!
//! The file holds logged payloads: it is private to its user (mode 0600) and created
//! exclusively; a leftover one is replaced only when its creator pid is dead.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::MmapRaw;
use reverb_transport::codec::{Fixed, Reader, Writer};

use super::CoreError;

const MAGIC: u64 = 0x4745_5345_4752_4c52; // "RLRGSEGE"
const VERSION: u64 = 2;
const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 8;
const OFF_LANES: usize = 16;
const OFF_LANE_CAPACITY: usize = 24;
const OFF_CREATOR: usize = 32;
const OFF_STATUS: usize = 64;
const OFF_VERDICTS: usize = 256;
/// Verdict slots: a logger watches its buddy and the nodes it hosts rings for (at most 3
/// under the pair map), so 16 is ample.
pub const VERDICT_SLOTS: usize = 16;
const VERDICT_LEN: usize = 64;
const OFF_LANE0: usize = OFF_VERDICTS + VERDICT_SLOTS * VERDICT_LEN;
const LANE_HEADER: usize = 256;
const LANE_HEAD: usize = 0;
const LANE_TAKEN: usize = 64;
const LANE_DURABLE: usize = 128;
const LANE_OWNER: usize = 192;
const FRAME_HEADER: u64 = 8;
const WRAP: u32 = u32::MAX;
/// At most this many lanes (local ranks) per node.
pub const MAX_LANES: u64 = 1024;

/// Status words, by index (byte offset 64 + 8 * index).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The logger core's pid.
    LoggerPid = 0,
    /// `STATE_*` of the logger core.
    State = 1,
    /// Bumped every loop iteration: a stalled counter is a stalled (or dead) logger.
    Ticks = 2,
    /// The node whose ring this node's log goes to (u64::MAX until known).
    BuddyNode = 3,
    /// `BUDDY_*`.
    BuddyState = 4,
    /// The log ring's durable watermark (bytes).
    RingDurable = 5,
    /// Determinants durable at the buddy.
    DeterminantsLogged = 6,
    /// Payload frames durable at the buddy.
    PayloadsLogged = 7,
    /// Trim requests (a counter, bumped by clients after a checkpoint).
    TrimRequested = 8,
    /// The last trim request the logger carried out.
    TrimDone = 9,
    /// Milliseconds from the buddy's last sign of life to its death being reported.
    DetectionMs = 10,
    /// Nonzero: the logger should drain, flush and exit.
    StopRequested = 11,
    /// Snapshot requests (a counter, bumped by clients collecting determinants for replay).
    SnapshotRequested = 12,
    /// The last snapshot request the logger carried out (`<base>.hosted-node<c>` written).
    SnapshotDone = 13,
    /// Sequence lock of the verdict table: odd while the logger rewrites a slot; bumped twice
    /// per change, so a changed value means "read the verdicts again".
    VerdictGeneration = 14,
    /// Times this logger's buddy came back (a new incarnation) and the log was re-flushed to it.
    BuddyRejoins = 15,
}

pub const STATE_STARTING: u64 = 0;
pub const STATE_READY: u64 = 1;
pub const STATE_STOPPING: u64 = 2;
pub const STATE_EXITED: u64 = 3;
pub const STATE_FAILED: u64 = 4;

pub const BUDDY_UNKNOWN: u64 = 0;
pub const BUDDY_ALIVE: u64 = 1;
pub const BUDDY_DEAD: u64 = 2;
/// The buddy finished cleanly (it sent its last heartbeat as "stopped").
pub const BUDDY_STOPPED: u64 = 3;
/// The buddy died and the launcher respawns failed nodes: its next incarnation is awaited
/// (bounded); meanwhile nothing new becomes durable, and waits are not failed for it.
pub const BUDDY_REJOINING: u64 = 4;

/// How a logger found a related node's logger dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeathCause {
    /// Its heartbeat counter stood still for the heartbeat bound.
    Heartbeat,
    /// The transport reported it dead (`PeerDead`: pidfd on shm, RC retry exhaustion on verbs).
    Transport,
    /// A log or heartbeat write to it failed.
    WriteFailed,
    /// A newer incarnation of it rejoined before its death was otherwise seen.
    Rejoined,
}

impl DeathCause {
    fn code(self) -> u64 {
        match self {
            DeathCause::Heartbeat => 1,
            DeathCause::Transport => 2,
            DeathCause::WriteFailed => 3,
            DeathCause::Rejoined => 4,
        }
    }

    fn from_code(code: u64) -> Option<Self> {
        Some(match code {
            1 => DeathCause::Heartbeat,
            2 => DeathCause::Transport,
            3 => DeathCause::WriteFailed,
            4 => DeathCause::Rejoined,
            _ => return None,
        })
    }
}

/// A logger's verdict on a related node (its buddy, or a node whose ring it hosts): that
/// node's logger was found dead, and whether a new incarnation of it came back since.
/// Times are wall clock (milliseconds since the Unix epoch), comparable across processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeVerdict {
    pub node: u32,
    /// The logger incarnation found dead.
    pub incarnation: u32,
    pub cause: DeathCause,
    /// Last sign of life seen from it (its heartbeat last changed).
    pub last_heard_unix_ms: u64,
    /// When this logger reported it dead.
    pub reported_unix_ms: u64,
    /// The incarnation that came back, and when the logger had reconnected to it.
    pub back: Option<(u32, u64)>,
}

impl NodeVerdict {
    /// Still dead: no newer incarnation has come back yet.
    pub fn is_dead(&self) -> bool {
        self.back.is_none()
    }

    /// From the last sign of life to the report.
    pub fn detection(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.reported_unix_ms.saturating_sub(self.last_heard_unix_ms))
    }
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn unix_ms(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Bytes a frame of `len` data bytes takes in a lane.
pub fn frame_size(len: usize) -> u64 {
    (FRAME_HEADER + len as u64).div_ceil(8) * 8
}

/// `len u32 | 4 zero bytes`: the header of a frame in a lane (`WRAP`: the lap ends here).
fn frame_header(len: u32) -> [u8; FRAME_HEADER as usize] {
    let mut h = Fixed::<{ FRAME_HEADER as usize }>::new();
    Writer::new(&mut h).u32(len).zeros(4);
    h.into_array()
}

/// The length a frame header announces (validated by the caller).
fn frame_len(header: &[u8; FRAME_HEADER as usize]) -> u32 {
    // Cannot fail: the array holds the field.
    Reader::new(header, "payload frame header").u32("len").unwrap_or_default()
}

/// A mapped node segment; any number of processes may hold one.
pub struct NodeSegment {
    map: MmapRaw,
    lanes: u64,
    lane_capacity: u64,
    path: PathBuf,
}

impl std::fmt::Debug for NodeSegment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeSegment")
            .field("path", &self.path)
            .field("lanes", &self.lanes)
            .field("lane_capacity", &self.lane_capacity)
            .finish()
    }
}

/// The pid that created the segment file at `path`, if it is one (its magic is set): the
/// logger core's, which a launcher's sweep of dead jobs reads.
pub fn creator_pid(path: &Path) -> Option<u32> {
    reverb_transport::sys::shmfile::recorded_creator(path, OFF_MAGIC, MAGIC, OFF_CREATOR)
}

fn file_len(lanes: u64, lane_capacity: u64) -> Option<u64> {
    lanes.checked_mul(lane_capacity.checked_add(LANE_HEADER as u64)?)?.checked_add(OFF_LANE0 as u64)
}

impl NodeSegment {
    /// Creates the segment file at `path` with `lanes` payload lanes of `lane_capacity` bytes
    /// (a positive multiple of 64): mode 0600, exclusively. An existing file is an error unless
    /// its creator is dead (then replaced).
    pub fn create(path: impl AsRef<Path>, lanes: u64, lane_capacity: u64) -> Result<Self, CoreError> {
        let path = path.as_ref().to_path_buf();
        if lanes == 0 || lanes > MAX_LANES || lane_capacity == 0 || !lane_capacity.is_multiple_of(64) {
            return Err(CoreError::Config(format!(
                "node segment: {lanes} lanes of {lane_capacity} bytes (need 1..={MAX_LANES} lanes, \
                 capacity a positive multiple of 64)"
            )));
        }
        let len = file_len(lanes, lane_capacity)
            .ok_or_else(|| CoreError::Config(format!("node segment of {lanes} x {lane_capacity} bytes")))?;
        let file = reverb_transport::sys::shmfile::create_private(&path, creator_pid)
            .map_err(|e| CoreError::io(format!("create {}", path.display()), e))?;
        reverb_transport::sys::shmfile::size_reserved(&file, &path, len)
            .map_err(|e| CoreError::io(format!("size {}", path.display()), e))?;
        let map = MmapRaw::map_raw(&file).map_err(|e| CoreError::io(format!("map {}", path.display()), e))?;
        let seg = NodeSegment { map, lanes, lane_capacity, path };
        seg.word(OFF_LANES).store(lanes, Ordering::Relaxed);
        seg.word(OFF_LANE_CAPACITY).store(lane_capacity, Ordering::Relaxed);
        seg.word(OFF_VERSION).store(VERSION, Ordering::Relaxed);
        seg.word(OFF_CREATOR).store(u64::from(std::process::id()), Ordering::Relaxed);
        seg.set(Status::BuddyNode, u64::MAX);
        seg.word(OFF_MAGIC).store(MAGIC, Ordering::Release);
        Ok(seg)
    }

    /// Opens a segment the logger core created; the header is validated, not trusted.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, CoreError> {
        const WHAT: &str = "node log segment";
        let path = path.as_ref().to_path_buf();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| CoreError::io(format!("open {}", path.display()), e))?;
        let len = file.metadata().map_err(|e| CoreError::io(format!("stat {}", path.display()), e))?.len();
        if len < OFF_LANE0 as u64 {
            return Err(CoreError::Malformed {
                what: WHAT,
                detail: format!("{len} bytes, shorter than its header"),
            });
        }
        let map = MmapRaw::map_raw(&file).map_err(|e| CoreError::io(format!("map {}", path.display()), e))?;
        let mut seg = NodeSegment { map, lanes: 0, lane_capacity: 0, path };
        let magic = seg.word(OFF_MAGIC).load(Ordering::Acquire);
        let version = seg.word(OFF_VERSION).load(Ordering::Relaxed);
        if magic != MAGIC || version != VERSION {
            return Err(CoreError::Malformed {
                what: WHAT,
                detail: format!("magic {magic:#x}, version {version}"),
            });
        }
        let lanes = seg.word(OFF_LANES).load(Ordering::Relaxed);
        let lane_capacity = seg.word(OFF_LANE_CAPACITY).load(Ordering::Relaxed);
        let valid = (1..=MAX_LANES).contains(&lanes)
            && lane_capacity > 0
            && lane_capacity.is_multiple_of(64)
            && file_len(lanes, lane_capacity) == Some(len);
        if !valid {
            return Err(CoreError::Malformed {
                what: WHAT,
                detail: format!("{lanes} lanes of {lane_capacity} bytes do not match {len} bytes"),
            });
        }
        seg.lanes = lanes;
        seg.lane_capacity = lane_capacity;
        Ok(seg)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn lanes(&self) -> u64 {
        self.lanes
    }

    pub fn lane_capacity(&self) -> u64 {
        self.lane_capacity
    }

    /// The largest frame a lane accepts (half a lane, so two always fit).
    pub fn max_frame(&self) -> usize {
        (self.lane_capacity / 2 - FRAME_HEADER) as usize
    }

    /// The atomic word at byte `offset`.
    fn word(&self, offset: usize) -> &AtomicU64 {
        assert!(
            offset.is_multiple_of(8) && offset + 8 <= self.map.len(),
            "segment offset {offset} out of range"
        );
        // SAFETY: the mapping is page-aligned, lives as long as `self`, and `offset` is an
        // 8-aligned in-bounds word (checked above). Every process touches these words only
        // through atomics.
        unsafe { &*(self.map.as_ptr().add(offset) as *const AtomicU64) }
    }

    pub fn get(&self, status: Status) -> u64 {
        self.word(OFF_STATUS + 8 * status as usize).load(Ordering::Acquire)
    }

    pub fn set(&self, status: Status, value: u64) {
        self.word(OFF_STATUS + 8 * status as usize).store(value, Ordering::Release);
    }

    pub fn bump(&self, status: Status) -> u64 {
        self.word(OFF_STATUS + 8 * status as usize).fetch_add(1, Ordering::AcqRel) + 1
    }

    fn verdict_word(&self, slot: usize, index: usize) -> &AtomicU64 {
        assert!(slot < VERDICT_SLOTS && index < VERDICT_LEN / 8, "verdict slot {slot} word {index}");
        self.word(OFF_VERDICTS + slot * VERDICT_LEN + 8 * index)
    }

    /// Logger (the only writer): records `verdict` in the slot of its node (a free slot for a
    /// new node). Returns false when every slot is taken by other nodes.
    pub fn record_verdict(&self, verdict: &NodeVerdict) -> bool {
        let key = u64::from(verdict.node) + 1;
        let slot = (0..VERDICT_SLOTS)
            .find(|&s| self.verdict_word(s, 0).load(Ordering::Acquire) == key)
            .or_else(|| (0..VERDICT_SLOTS).find(|&s| self.verdict_word(s, 0).load(Ordering::Acquire) == 0));
        let Some(slot) = slot else { return false };
        let generation = self.word(OFF_STATUS + 8 * Status::VerdictGeneration as usize);
        generation.fetch_add(1, Ordering::AcqRel); // odd: writing
        let (back_incarnation, back_ms) = verdict.back.map_or((0, 0), |(i, t)| (u64::from(i) + 1, t));
        let words = [
            key,
            u64::from(verdict.incarnation),
            verdict.cause.code(),
            verdict.last_heard_unix_ms,
            verdict.reported_unix_ms,
            back_incarnation,
            back_ms,
        ];
        for (i, w) in words.iter().enumerate() {
            self.verdict_word(slot, i).store(*w, Ordering::Release);
        }
        generation.fetch_add(1, Ordering::AcqRel); // even: consistent
        true
    }

    /// Every verdict recorded, read consistently (retries while the logger writes; gives up
    /// after a bounded number of tries and returns what it read last).
    pub fn verdicts(&self) -> Vec<NodeVerdict> {
        let generation = self.word(OFF_STATUS + 8 * Status::VerdictGeneration as usize);
        let mut out = Vec::new();
        for _ in 0..1000 {
            let before = generation.load(Ordering::Acquire);
            out.clear();
            for slot in 0..VERDICT_SLOTS {
                let w = |i| self.verdict_word(slot, i).load(Ordering::Acquire);
                let key = w(0);
                if key == 0 {
                    continue;
                }
                let Some(cause) = DeathCause::from_code(w(2)) else { continue };
                let back = (w(5) != 0).then(|| ((w(5) - 1) as u32, w(6)));
                out.push(NodeVerdict {
                    node: (key - 1) as u32,
                    incarnation: w(1) as u32,
                    cause,
                    last_heard_unix_ms: w(3),
                    reported_unix_ms: w(4),
                    back,
                });
            }
            if before.is_multiple_of(2) && generation.load(Ordering::Acquire) == before {
                break;
            }
            std::thread::yield_now();
        }
        out
    }

    fn lane_base(&self, lane: u64) -> Result<usize, CoreError> {
        if lane >= self.lanes {
            return Err(CoreError::Config(format!("lane {lane} outside the segment's {} lanes", self.lanes)));
        }
        Ok(OFF_LANE0 + lane as usize * (LANE_HEADER + self.lane_capacity as usize))
    }

    fn lane_word(&self, lane: u64, which: usize) -> Result<&AtomicU64, CoreError> {
        Ok(self.word(self.lane_base(lane)? + which))
    }

    /// Claims `lane` as its single producer for `pid`; refused while another live process holds it.
    pub fn claim_lane(&self, lane: u64, pid: u32) -> Result<(), CoreError> {
        let owner = self.lane_word(lane, LANE_OWNER)?;
        let me = u64::from(pid) + 1;
        let mut current = owner.load(Ordering::Acquire);
        loop {
            if current != 0
                && current != me
                && reverb_transport::sys::liveness::pid_running((current - 1) as u32)
            {
                return Err(CoreError::Config(format!(
                    "payload lane {lane} of {} is held by live pid {}",
                    self.path.display(),
                    current - 1
                )));
            }
            match owner.compare_exchange(current, me, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(()),
                Err(now) => current = now,
            }
        }
    }

    /// Whether a live process holds `lane` as its producer.
    pub fn lane_claimed(&self, lane: u64) -> bool {
        self.lane_word(lane, LANE_OWNER)
            .map(|owner| owner.load(Ordering::Acquire))
            .is_ok_and(|o| o != 0 && reverb_transport::sys::liveness::pid_running((o - 1) as u32))
    }

    pub fn release_lane(&self, lane: u64, pid: u32) {
        if let Ok(owner) = self.lane_word(lane, LANE_OWNER) {
            let _ = owner.compare_exchange(u64::from(pid) + 1, 0, Ordering::AcqRel, Ordering::Relaxed);
        }
    }

    /// `(head, taken, durable)` of a lane.
    pub fn lane_positions(&self, lane: u64) -> Result<(u64, u64, u64), CoreError> {
        Ok((
            self.lane_word(lane, LANE_HEAD)?.load(Ordering::Acquire),
            self.lane_word(lane, LANE_TAKEN)?.load(Ordering::Acquire),
            self.lane_word(lane, LANE_DURABLE)?.load(Ordering::Acquire),
        ))
    }

    fn copy_in(&self, lane: u64, pos: u64, bytes: &[u8]) -> Result<(), CoreError> {
        let offset = (pos % self.lane_capacity) as usize;
        if offset + bytes.len() > self.lane_capacity as usize {
            return Err(CoreError::Config("frame straddles the lane end".into()));
        }
        let start = self.lane_base(lane)? + LANE_HEADER + offset;
        // SAFETY: `start..start + len` lies inside lane `lane`'s data area (checked above and by
        // lane_base). The producer owns `[head, durable + capacity)` until it publishes `head`
        // with Release, and the consumer reads only below `head` (Acquire): no concurrent access.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.map.as_mut_ptr().add(start), bytes.len())
        };
        Ok(())
    }

    fn copy_out(&self, lane: u64, pos: u64, out: &mut [u8]) -> Result<(), CoreError> {
        let offset = (pos % self.lane_capacity) as usize;
        if offset + out.len() > self.lane_capacity as usize {
            return Err(CoreError::Malformed {
                what: "payload lane",
                detail: format!("frame at {pos} overruns the lap"),
            });
        }
        let start = self.lane_base(lane)? + LANE_HEADER + offset;
        // SAFETY: in bounds (checked above); the range is below the published `head`, which the
        // producer never rewrites before the consumer advances `durable` past it.
        unsafe { std::ptr::copy_nonoverlapping(self.map.as_ptr().add(start), out.as_mut_ptr(), out.len()) };
        Ok(())
    }

    /// Producer: appends one frame; returns the lane position after it (the ticket).
    /// `LaneFull` is back-pressure: nothing was written.
    pub fn push_frame(&self, lane: u64, data: &[u8]) -> Result<u64, CoreError> {
        if data.len() > self.max_frame() {
            return Err(CoreError::FrameTooLarge { len: data.len(), max: self.max_frame() });
        }
        let head_word = self.lane_word(lane, LANE_HEAD)?;
        let head = head_word.load(Ordering::Relaxed);
        let durable = self.lane_word(lane, LANE_DURABLE)?.load(Ordering::Acquire);
        let size = frame_size(data.len());
        let contiguous = self.lane_capacity - head % self.lane_capacity;
        let skip = if size > contiguous { contiguous } else { 0 };
        let used = head.checked_sub(durable).ok_or_else(|| CoreError::Malformed {
            what: "payload lane",
            detail: format!("durable {durable} beyond head {head}"),
        })?;
        if used + skip + size > self.lane_capacity {
            return Err(CoreError::LaneFull {
                lane,
                needed: skip + size,
                free: self.lane_capacity - used.min(self.lane_capacity),
            });
        }
        let mut pos = head;
        if skip > 0 {
            self.copy_in(lane, pos, &frame_header(WRAP))?;
            pos += skip;
        }
        let mut frame = Vec::with_capacity(size as usize);
        Writer::new(&mut frame).raw(&frame_header(data.len() as u32)).raw(data);
        frame.resize(size as usize, 0);
        self.copy_in(lane, pos, &frame)?;
        pos += size;
        head_word.store(pos, Ordering::Release);
        Ok(pos)
    }

    /// Consumer: the next published, not yet taken frame of `lane` as `(data, end)`, without
    /// taking it. Wrap markers are skipped (and taken).
    pub fn peek_frame(&self, lane: u64) -> Result<Option<(Vec<u8>, u64)>, CoreError> {
        let head = self.lane_word(lane, LANE_HEAD)?.load(Ordering::Acquire);
        let taken_word = self.lane_word(lane, LANE_TAKEN)?;
        let mut pos = taken_word.load(Ordering::Relaxed);
        while pos < head {
            let mut header = [0u8; FRAME_HEADER as usize];
            self.copy_out(lane, pos, &mut header)?;
            let len = frame_len(&header);
            if len == WRAP {
                pos += self.lane_capacity - pos % self.lane_capacity;
                taken_word.store(pos, Ordering::Release);
                continue;
            }
            let end = pos + frame_size(len as usize);
            if len as usize > self.max_frame() || end > head {
                return Err(CoreError::Malformed {
                    what: "payload lane",
                    detail: format!("lane {lane}: frame of {len} bytes at {pos}, head {head}"),
                });
            }
            let mut data = vec![0u8; len as usize];
            self.copy_out(lane, pos + FRAME_HEADER, &mut data)?;
            return Ok(Some((data, end)));
        }
        Ok(None)
    }

    /// Consumer: the frame ending at `end` was handed to the log ring.
    pub fn take_through(&self, lane: u64, end: u64) -> Result<(), CoreError> {
        self.lane_word(lane, LANE_TAKEN)?.store(end, Ordering::Release);
        Ok(())
    }

    /// Consumer: everything below `end` is durable at the buddy; its space is free again.
    pub fn mark_durable(&self, lane: u64, end: u64) -> Result<(), CoreError> {
        self.lane_word(lane, LANE_DURABLE)?.fetch_max(end, Ordering::AcqRel);
        Ok(())
    }

    /// Lane positions below this are durable.
    pub fn lane_durable(&self, lane: u64) -> Result<u64, CoreError> {
        Ok(self.lane_word(lane, LANE_DURABLE)?.load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("reverb-seg-test-{}-{name}", std::process::id()))
    }

    #[test]
    fn frames_wrap_and_push_back() {
        let path = temp("wrap");
        let seg = NodeSegment::create(&path, 2, 256).unwrap();
        let other = NodeSegment::open(&path).unwrap();
        assert_eq!(other.lanes(), 2);
        let mut next = 0u8;
        let mut expect = 0u8;
        for _round in 0..50 {
            // Fill until back-pressure.
            loop {
                let data = vec![next; (next as usize * 13) % 100];
                match seg.push_frame(1, &data) {
                    Ok(_) => next = next.wrapping_add(1),
                    Err(CoreError::LaneFull { .. }) => break,
                    Err(e) => panic!("{e}"),
                }
            }
            while let Some((data, end)) = other.peek_frame(1).unwrap() {
                assert_eq!(data, vec![expect; (expect as usize * 13) % 100]);
                expect = expect.wrapping_add(1);
                other.take_through(1, end).unwrap();
                other.mark_durable(1, end).unwrap();
            }
        }
        assert_eq!(next, expect);
        assert!(seg.lane_positions(1).unwrap().0 > 10 * 256, "must wrap many times");
        assert!(matches!(seg.push_frame(0, &[0; 200]), Err(CoreError::FrameTooLarge { .. })));
        assert!(seg.push_frame(2, &[]).is_err());
        std::fs::remove_file(&path).ok();
    }

    #[test]
    fn verdicts_round_trip_and_update_in_place() {
        let path = temp("verdicts");
        let seg = NodeSegment::create(&path, 1, 64).unwrap();
        let reader = NodeSegment::open(&path).unwrap();
        assert!(reader.verdicts().is_empty());
        let g0 = reader.get(Status::VerdictGeneration);
        let mut v = NodeVerdict {
            node: 3,
            incarnation: 0,
            cause: DeathCause::Transport,
            last_heard_unix_ms: 1000,
            reported_unix_ms: 1100,
            back: None,
        };
        assert!(seg.record_verdict(&v));
        assert_eq!(reader.verdicts(), vec![v]);
        assert!(v.is_dead());
        assert_eq!(v.detection(), std::time::Duration::from_millis(100));
        v.back = Some((1, 1500));
        assert!(seg.record_verdict(&v));
        assert_eq!(reader.verdicts(), vec![v], "the node's slot is reused");
        assert!(reader.get(Status::VerdictGeneration) > g0);
        for node in 0..VERDICT_SLOTS as u32 - 1 {
            assert!(seg.record_verdict(&NodeVerdict { node: 100 + node, ..v }));
        }
        assert!(!seg.record_verdict(&NodeVerdict { node: 999, ..v }), "table full");
        std::fs::remove_file(&path).ok();
    }

    #[test]
    fn open_rejects_bad_files() {
        let path = temp("bad");
        std::fs::write(&path, [0u8; 100]).unwrap();
        assert!(NodeSegment::open(&path).is_err());
        std::fs::write(&path, [0u8; 4096]).unwrap();
        assert!(NodeSegment::open(&path).is_err());
        assert!(NodeSegment::create(&path, 0, 64).is_err());
        assert!(NodeSegment::create(&path, 1, 100).is_err());
        std::fs::remove_file(&path).ok();
    }

    #[test]
    fn the_file_is_private_exclusive_and_swept_only_when_its_creator_is_dead() {
        use std::os::unix::fs::PermissionsExt;
        let path = temp("private");
        let seg = NodeSegment::create(&path, 1, 64).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        seg.set(Status::State, 7);
        let err = NodeSegment::create(&path, 1, 64).unwrap_err();
        assert!(err.to_string().contains("already exists"), "{err}");
        assert_eq!(NodeSegment::open(&path).unwrap().get(Status::State), 7, "nothing was reset");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        if !reverb_transport::sys::liveness::pid_exists(dead) {
            seg.word(OFF_CREATOR).store(u64::from(dead), Ordering::Relaxed);
            drop(seg);
            let fresh = NodeSegment::create(&path, 1, 64).unwrap();
            assert_eq!(fresh.get(Status::State), 0);
        }
        std::fs::remove_file(&path).ok();
    }

    #[test]
    fn lanes_have_one_live_producer() {
        let path = temp("claim");
        let seg = NodeSegment::create(&path, 1, 64).unwrap();
        seg.claim_lane(0, std::process::id()).unwrap();
        // Our own pid re-claims; a live other pid (our parent) is refused.
        seg.claim_lane(0, std::process::id()).unwrap();
        seg.release_lane(0, std::process::id());
        let parent = std::os::unix::process::parent_id();
        seg.claim_lane(0, parent).unwrap();
        assert!(seg.claim_lane(0, std::process::id()).is_err());
        std::fs::remove_file(&path).ok();
    }

    #[test]
    fn frame_header_is_pinned() {
        assert_eq!(frame_header(0x0102), [2, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(frame_header(WRAP), [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Whatever a producer (or a stray write) left in a lane, the consumer reports it or
        /// returns a frame inside the lane: never a panic, never a read past `head`.
        #[test]
        fn arbitrary_lane_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256), head in 0u64..600) {
            let path = temp(&format!("garbage-{head}-{}", bytes.len()));
            let seg = NodeSegment::create(&path, 1, 256).unwrap();
            seg.copy_in(0, 0, &bytes).unwrap();
            seg.lane_word(0, LANE_HEAD).unwrap().store(head, Ordering::Release);
            let got = seg.peek_frame(0);
            std::fs::remove_file(&path).ok();
            if let Ok(Some((data, end))) = got {
                prop_assert!(end <= head && data.len() <= seg.max_frame());
            }
        }

        #[test]
        fn frames_round_trip(frames in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..80), 1..8)) {
            let path = temp(&format!("frames-{}", frames.len()));
            let seg = NodeSegment::create(&path, 1, 1024).unwrap();
            for f in &frames {
                seg.push_frame(0, f).unwrap();
            }
            let mut back = Vec::new();
            while let Some((data, end)) = seg.peek_frame(0).unwrap() {
                back.push(data);
                seg.take_through(0, end).unwrap();
            }
            std::fs::remove_file(&path).ok();
            prop_assert_eq!(back, frames);
        }
    }
}
