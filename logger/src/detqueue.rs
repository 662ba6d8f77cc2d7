//! The node determinant queue (seed 000 ch.7, Algs 22-24): one bounded queue of determinants
//! per node, in a shared file mapping so that the node's ranks (separate processes) all
//! enqueue into it and the logger core drains it.
//!
//! Three monotonically increasing indices (entry `i` lives in slot `i % capacity`):
//! - `new`: the next entry to reserve (Alg 22 line 1);
//! - `end`: every entry below it is filled and published (Alg 22 lines 3-6);
//! - `start`: every entry below it is durable / acknowledged (Alg 24).
//!
//! A fourth, `taken`, is the logger core's cursor: `[start, taken)` is in flight to the log.
//! Causal piggybacking reads all of `[start, end)` instead (Alg 23).
//!
//! Unlike the paper's unbounded queue, reservation fails with `QueueFull` when `capacity`
//! entries are not yet durable; the caller turns that into back-pressure.
//!
//! Layout (all words are `AtomicU64`, so concurrent access from any process is race-free):
//! ```text
//! 0: magic | 8: version<<32 | entry words | 16: capacity | 24: consumer pid+1 | 32: creator pid
//! 64: start | 128: end | 192: new | 256: taken      (one cache line each)
//! 320: capacity × entry { sender<<32|receiver, ssn, rsn, reserved }
//! ```
//!
//! The file is private to its user (mode 0600) and created exclusively; a leftover one is
//! replaced only when its creator pid is dead (see `reverb_transport::sys::shmfile::create_private`).

use std::fs::OpenOptions;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use memmap2::MmapMut;
use reverb_transport::spinwait::{Idle, SpinWait};

use crate::determinant::Determinant;
use crate::error::{LogError, Result};

/// Longest sleep of a wait on the consumer: the logger core drains within microseconds.
const CONSUMER_NAP: Duration = Duration::from_micros(50);

const MAGIC: u64 = 0x5245_5645_5244_5131; // "REVERDQ1"
const VERSION: u64 = 1;
const ENTRY_WORDS: u64 = 4;
const ENTRY_LEN: usize = ENTRY_WORDS as usize * 8;

const OFF_MAGIC: usize = 0;
const OFF_LAYOUT: usize = 8;
const OFF_CAPACITY: usize = 16;
const OFF_CONSUMER: usize = 24;
const OFF_CREATOR: usize = 32;
const OFF_START: usize = 64;
const OFF_END: usize = 128;
const OFF_NEW: usize = 192;
const OFF_TAKEN: usize = 256;
const OFF_ENTRIES: usize = 320;

/// How long a producer waits for an earlier reservation to be published before reporting a
/// stall (a producer that died between reserving and publishing; the node then fails as a unit).
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The shared mapping, seen only as an array of `AtomicU64`.
struct SharedWords {
    map: MmapMut,
    words: usize,
}

impl SharedWords {
    fn new(map: MmapMut) -> Self {
        let words = map.len() / 8;
        SharedWords { map, words }
    }

    /// The atomic word at byte `offset` (a multiple of 8 inside the mapping).
    fn at(&self, offset: usize) -> &AtomicU64 {
        let index = offset / 8;
        assert!(
            offset.is_multiple_of(8) && index < self.words,
            "detqueue offset {offset} outside the mapping"
        );
        // SAFETY: the mapping is page-aligned and lives as long as `self`; `offset` is 8-aligned
        // and in bounds (checked above). All accesses to the mapping, from every process, go
        // through atomics, so no plain reference ever aliases a concurrent write.
        unsafe { &*(self.map.as_ptr().add(offset) as *const AtomicU64) }
    }
}

/// A handle on a node determinant queue; any number of processes may hold one.
pub struct DetQueue {
    shared: SharedWords,
    capacity: u64,
    path: PathBuf,
    stall_timeout: Duration,
}

impl std::fmt::Debug for DetQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DetQueue").field("path", &self.path).field("capacity", &self.capacity).finish()
    }
}

/// The pid that created the queue file at `path`, if it is one (its magic is set).
fn creator_pid(path: &Path) -> Option<u32> {
    reverb_transport::sys::shmfile::recorded_creator(path, OFF_MAGIC, MAGIC, OFF_CREATOR)
}

fn file_len(capacity: u64) -> Option<u64> {
    capacity.checked_mul(ENTRY_LEN as u64)?.checked_add(OFF_ENTRIES as u64)
}

impl DetQueue {
    /// Creates the queue file at `path`, e.g. `/dev/shm/reverb-<job>-node3-detq`: mode 0600,
    /// exclusively. An existing file is an error unless its creator is dead (then replaced).
    pub fn create(path: impl AsRef<Path>, capacity: u64) -> Result<DetQueue> {
        let path = path.as_ref().to_path_buf();
        let len = file_len(capacity)
            .filter(|_| capacity > 0)
            .ok_or_else(|| LogError::InvalidArgument(format!("determinant queue capacity {capacity}")))?;
        let file = reverb_transport::sys::shmfile::create_private(&path, creator_pid)
            .map_err(|e| LogError::io(format!("create {}", path.display()), e))?;
        reverb_transport::sys::shmfile::size_reserved(&file, &path, len)
            .map_err(|e| LogError::io(format!("size {}", path.display()), e))?;
        // SAFETY: the file is ours and freshly sized; other processes only map it after the
        // magic (written last, Release) is visible, and they only touch it through atomics.
        let map = unsafe { MmapMut::map_mut(&file) }
            .map_err(|e| LogError::io(format!("map {}", path.display()), e))?;
        let queue =
            DetQueue { shared: SharedWords::new(map), capacity, path, stall_timeout: DEFAULT_STALL_TIMEOUT };
        for off in [OFF_CONSUMER, OFF_START, OFF_END, OFF_NEW, OFF_TAKEN] {
            queue.word(off).store(0, Ordering::Relaxed);
        }
        queue.word(OFF_CREATOR).store(u64::from(std::process::id()), Ordering::Relaxed);
        queue.word(OFF_LAYOUT).store(VERSION << 32 | ENTRY_WORDS, Ordering::Relaxed);
        queue.word(OFF_CAPACITY).store(capacity, Ordering::Relaxed);
        queue.word(OFF_MAGIC).store(MAGIC, Ordering::Release);
        Ok(queue)
    }

    /// Opens a queue another process created; the file's header is validated, not trusted.
    pub fn open(path: impl AsRef<Path>) -> Result<DetQueue> {
        const WHAT: &str = "determinant queue file";
        let path = path.as_ref().to_path_buf();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| LogError::io(format!("open {}", path.display()), e))?;
        let len = file.metadata().map_err(|e| LogError::io(format!("stat {}", path.display()), e))?.len();
        if len < OFF_ENTRIES as u64 {
            return Err(LogError::malformed(WHAT, format!("{len} bytes, shorter than its header")));
        }
        // SAFETY: shared mapping of a file the node's ranks agree on; accessed only via atomics.
        let map = unsafe { MmapMut::map_mut(&file) }
            .map_err(|e| LogError::io(format!("map {}", path.display()), e))?;
        let mut queue = DetQueue {
            shared: SharedWords::new(map),
            capacity: 0,
            path,
            stall_timeout: DEFAULT_STALL_TIMEOUT,
        };
        let magic = queue.word(OFF_MAGIC).load(Ordering::Acquire);
        if magic != MAGIC {
            return Err(LogError::malformed(WHAT, format!("bad magic {magic:#x}")));
        }
        let layout = queue.word(OFF_LAYOUT).load(Ordering::Relaxed);
        if layout >> 32 != VERSION || layout & 0xffff_ffff != ENTRY_WORDS {
            return Err(LogError::UnsupportedVersion {
                what: WHAT,
                found: (layout >> 32) as u32,
                expected: VERSION as u32,
            });
        }
        let capacity = queue.word(OFF_CAPACITY).load(Ordering::Relaxed);
        if capacity == 0 || file_len(capacity) != Some(len) {
            return Err(LogError::malformed(WHAT, format!("capacity {capacity} does not match {len} bytes")));
        }
        queue.capacity = capacity;
        Ok(queue)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Bounds how long `push` waits on an earlier producer's publication.
    pub fn set_stall_timeout(&mut self, timeout: Duration) {
        self.stall_timeout = timeout;
    }

    fn word(&self, offset: usize) -> &AtomicU64 {
        self.shared.at(offset)
    }

    fn entry_word(&self, index: u64, word: usize) -> &AtomicU64 {
        let slot = (index % self.capacity) as usize;
        self.word(OFF_ENTRIES + slot * ENTRY_LEN + word * 8)
    }

    /// Entries not yet durable (`new - start`): reserved, published or in flight.
    pub fn occupancy(&self) -> u64 {
        let start = self.word(OFF_START).load(Ordering::Acquire);
        self.word(OFF_NEW).load(Ordering::Acquire).saturating_sub(start)
    }

    /// The current `(start, end, new)` indices.
    pub fn indices(&self) -> (u64, u64, u64) {
        (
            self.word(OFF_START).load(Ordering::Acquire),
            self.word(OFF_END).load(Ordering::Acquire),
            self.word(OFF_NEW).load(Ordering::Acquire),
        )
    }

    /// Waits until the consumer has taken every entry below `index` (`start >= index`),
    /// spinning or napping as `wait` says (the consumer is another process: no event to sleep
    /// on). `Timeout` at `wait`'s bound.
    pub fn wait_taken(&self, index: u64, wait: &mut SpinWait) -> Result<()> {
        while self.word(OFF_START).load(Ordering::Acquire) < index {
            if let Idle::Sleep(slice) = wait.idle()? {
                std::thread::sleep(slice.min(CONSUMER_NAP));
            }
        }
        Ok(())
    }

    /// Alg 22 ADD: reserves the next entry, fills it, then publishes in reservation order.
    /// Returns the entry's index; `QueueFull` means nothing was reserved (back off and retry).
    pub fn push(&self, det: &Determinant) -> Result<u64> {
        let new = self.word(OFF_NEW);
        let start = self.word(OFF_START);
        let mut index = new.load(Ordering::Relaxed);
        loop {
            // `start` only grows, so a stale read can only under-report free space.
            if is_full(index, start.load(Ordering::Acquire), self.capacity) {
                return Err(LogError::QueueFull { capacity: self.capacity });
            }
            match new.compare_exchange_weak(index, index + 1, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => break,
                Err(current) => index = current,
            }
        }
        let words = [u64::from(det.sender) << 32 | u64::from(det.receiver), det.ssn, det.rsn, 0];
        for (i, w) in words.into_iter().enumerate() {
            self.entry_word(index, i).store(w, Ordering::Relaxed);
        }
        // Publish in order: wait until every earlier reservation is published.
        let end = self.word(OFF_END);
        // Read at the first yield: a push that never waits reads no clock.
        let mut deadline = None;
        let mut spins = 0u32;
        while end.load(Ordering::Acquire) != index {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) {
                // Another producer may be descheduled between reserve and publish: let it run.
                std::thread::yield_now();
                let now = Instant::now();
                if now > *deadline.get_or_insert(now + self.stall_timeout) {
                    return Err(LogError::QueueStalled { index: end.load(Ordering::Acquire) });
                }
            } else {
                std::hint::spin_loop();
            }
        }
        end.store(index + 1, Ordering::Release);
        Ok(index)
    }

    fn read_entry(&self, index: u64) -> Determinant {
        let w: [u64; 3] = std::array::from_fn(|i| self.entry_word(index, i).load(Ordering::Relaxed));
        Determinant { sender: (w[0] >> 32) as u32, receiver: w[0] as u32, ssn: w[1], rsn: w[2] }
    }

    /// Alg 23 PIGGYBACK: appends every published, not yet acknowledged determinant to `out` and
    /// returns their index range. Safe against concurrent acks (entries recycled meanwhile are
    /// acknowledged, so they are dropped from the result).
    pub fn pending(&self, out: &mut Vec<Determinant>) -> Range<u64> {
        let first = self.word(OFF_START).load(Ordering::Acquire);
        let last = self.word(OFF_END).load(Ordering::Acquire);
        let mark = out.len();
        for i in first..last {
            out.push(self.read_entry(i));
        }
        // Seqlock-style check: a slot is reused only once `start` passed its index.
        fence(Ordering::Acquire);
        let still_pending_from = self.word(OFF_START).load(Ordering::Relaxed).max(first);
        let stale = (still_pending_from - first).min(last - first) as usize;
        out.drain(mark..mark + stale);
        (first + stale as u64)..last
    }

    /// Alg 24 ACK: everything up to and including `index` is durable; frees those entries.
    pub fn ack_through(&self, index: u64) -> Result<()> {
        let end = self.word(OFF_END).load(Ordering::Acquire);
        if index >= end {
            return Err(LogError::InvalidArgument(format!("ack of entry {index}, only {end} published")));
        }
        self.word(OFF_START).fetch_max(index + 1, Ordering::AcqRel);
        Ok(())
    }

    /// Claims the single consumer role (the logger core) for this process.
    pub fn consumer(&self) -> Result<DetConsumer<'_>> {
        let me = u64::from(std::process::id()) + 1;
        match self.word(OFF_CONSUMER).compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Ok(DetConsumer { queue: self }),
            Err(holder) => Err(LogError::InvalidArgument(format!(
                "determinant queue {} already has a consumer (pid {})",
                self.path.display(),
                holder - 1
            ))),
        }
    }
}

/// The logger core's side: takes batches to log and marks them durable.
pub struct DetConsumer<'q> {
    queue: &'q DetQueue,
}

impl DetConsumer<'_> {
    /// Appends up to `max` published determinants not yet taken; returns their index range
    /// (empty when none). The caller logs them, then calls `mark_durable(range.end)`.
    pub fn take_batch(&mut self, max: usize, out: &mut Vec<Determinant>) -> Range<u64> {
        let q = self.queue;
        let taken = q.word(OFF_TAKEN).load(Ordering::Relaxed);
        let end = q.word(OFF_END).load(Ordering::Acquire);
        let last = end.min(taken.saturating_add(max as u64));
        out.extend((taken..last).map(|i| q.read_entry(i)));
        q.word(OFF_TAKEN).store(last, Ordering::Release);
        taken..last
    }

    /// Entries below `end_exclusive` are durable at the logger buddy: free them (Alg 24).
    pub fn mark_durable(&mut self, end_exclusive: u64) -> Result<()> {
        let taken = self.queue.word(OFF_TAKEN).load(Ordering::Relaxed);
        if end_exclusive > taken {
            return Err(LogError::InvalidArgument(format!(
                "durable through {end_exclusive} but only {taken} entries taken"
            )));
        }
        if end_exclusive > 0 {
            self.queue.ack_through(end_exclusive - 1)?;
        }
        Ok(())
    }

    /// Taken but not yet durable: `[start, taken)`.
    pub fn in_flight(&self) -> Range<u64> {
        let q = self.queue;
        q.word(OFF_START).load(Ordering::Acquire)..q.word(OFF_TAKEN).load(Ordering::Acquire)
    }
}

impl Drop for DetConsumer<'_> {
    fn drop(&mut self) {
        self.queue.word(OFF_CONSUMER).store(0, Ordering::Release);
    }
}

/// Whether a reservation at `index` would overrun the unacknowledged entries from `start`.
/// `index` may be a stale read of the reservation counter, older than a `start` read after it
/// (others reserved and the logger acknowledged meanwhile): that is room, not a full queue;
/// the reservation's compare-exchange then fails and retries with the current counter.
fn is_full(index: u64, start: u64, capacity: u64) -> bool {
    index.saturating_sub(start) >= capacity
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn temp_path(name: &str) -> PathBuf {
        let dir =
            if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        dir.join(format!("reverb-test-{}-{name}", std::process::id()))
    }

    fn det(sender: u32, ssn: u64) -> Determinant {
        Determinant { sender, receiver: 99, ssn, rsn: ssn * 2 }
    }

    #[test]
    fn a_stale_reservation_counter_behind_the_acknowledged_start_is_not_full() {
        // Read 5 for the counter, then 6 for start: another rank reserved 5 and it was acked.
        assert!(!is_full(5, 6, 4));
        assert!(!is_full(9, 6, 4));
        assert!(is_full(10, 6, 4));
    }

    #[test]
    fn full_queue_reports_back_pressure() {
        let path = temp_path("full");
        let q = DetQueue::create(&path, 4).unwrap();
        for i in 0..4 {
            assert_eq!(q.push(&det(0, i)).ok(), Some(i));
        }
        assert!(matches!(q.push(&det(0, 4)), Err(LogError::QueueFull { capacity: 4 })));
        let mut c = q.consumer().unwrap();
        assert!(q.consumer().is_err(), "second consumer must be refused");
        let mut out = Vec::new();
        assert_eq!(c.take_batch(3, &mut out), 0..3);
        assert!(q.push(&det(0, 4)).is_err(), "taken is not durable yet");
        c.mark_durable(2).unwrap();
        assert!(c.mark_durable(4).is_err());
        assert_eq!(q.push(&det(0, 4)).ok(), Some(4));
        assert_eq!(q.push(&det(0, 5)).ok(), Some(5));
        assert!(q.push(&det(0, 6)).is_err());
        let mut pending = Vec::new();
        assert_eq!(q.pending(&mut pending), 2..6);
        assert_eq!(pending.iter().map(|d| d.ssn).collect::<Vec<_>>(), vec![2, 3, 4, 5]);
        assert_eq!(c.take_batch(10, &mut out), 3..6);
        assert_eq!(out.iter().map(|d| d.ssn).collect::<Vec<_>>(), vec![0, 1, 2, 3, 4, 5]);
        drop(c);
        assert!(q.consumer().is_ok(), "consumer role is released on drop");
        std::fs::remove_file(&path).ok();
    }

    /// A pid no process has (a reaped child), if one is found.
    fn dead_pid() -> Option<u32> {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        (!reverb_transport::sys::liveness::pid_exists(pid)).then_some(pid)
    }

    #[test]
    fn the_file_is_private_exclusive_and_swept_only_when_its_creator_is_dead() {
        use std::os::unix::fs::PermissionsExt;
        let path = temp_path("private");
        let q = DetQueue::create(&path, 8).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        q.push(&det(1, 1)).unwrap();
        // Its creator (this process) is alive: a second create is refused, nothing is reset.
        let err = DetQueue::create(&path, 8).unwrap_err();
        assert!(err.to_string().contains("already exists"), "{err}");
        assert_eq!(DetQueue::open(&path).unwrap().indices(), (0, 1, 1));
        // Left behind by a dead creator: replaced by a fresh queue.
        if let Some(dead) = dead_pid() {
            q.word(OFF_CREATOR).store(u64::from(dead), Ordering::Relaxed);
            drop(q);
            let fresh = DetQueue::create(&path, 8).unwrap();
            assert_eq!(fresh.indices(), (0, 0, 0));
        }
        std::fs::remove_file(&path).ok();
    }

    #[test]
    fn open_validates_the_file() {
        let path = temp_path("open");
        let q = DetQueue::create(&path, 8).unwrap();
        q.push(&det(1, 1)).unwrap();
        let other = DetQueue::open(&path).unwrap();
        assert_eq!(other.capacity(), 8);
        assert_eq!(other.indices(), (0, 1, 1));
        let bad = temp_path("open-bad");
        std::fs::write(&bad, vec![0u8; 100]).unwrap();
        assert!(DetQueue::open(&bad).is_err());
        std::fs::write(&bad, vec![0u8; 4096]).unwrap();
        assert!(DetQueue::open(&bad).is_err());
        std::fs::remove_file(&path).ok();
        std::fs::remove_file(&bad).ok();
        assert!(DetQueue::create(&path, 0).is_err());
    }

    /// 4 producer threads, 1 consumer, a small queue: nothing lost, nothing duplicated, and each
    /// producer's entries keep their order.
    #[test]
    fn threads_stress() {
        const PRODUCERS: u32 = 4;
        const PER: u64 = 20_000;
        let path = temp_path("stress");
        let q = Arc::new(DetQueue::create(&path, 64).unwrap());
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let q = Arc::clone(&q);
                std::thread::spawn(move || {
                    for ssn in 1..=PER {
                        loop {
                            match q.push(&det(p, ssn)) {
                                Ok(_) => break,
                                Err(LogError::QueueFull { .. }) => std::thread::yield_now(),
                                Err(e) => panic!("push: {e}"),
                            }
                        }
                    }
                })
            })
            .collect();
        let mut c = q.consumer().unwrap();
        let mut last = vec![0u64; PRODUCERS as usize];
        let mut total = 0u64;
        let mut batch = Vec::new();
        let mut piggy = Vec::new();
        while total < PER * u64::from(PRODUCERS) {
            batch.clear();
            let range = c.take_batch(17, &mut batch);
            if range.is_empty() {
                std::thread::yield_now();
                continue;
            }
            for d in &batch {
                assert_eq!(d.ssn, last[d.sender as usize] + 1, "order or duplicate for {d:?}");
                assert_eq!(d.rsn, d.ssn * 2);
                last[d.sender as usize] = d.ssn;
            }
            total += batch.len() as u64;
            // A concurrent piggyback read must only ever see well-formed entries.
            piggy.clear();
            q.pending(&mut piggy);
            assert!(piggy.iter().all(|d| d.rsn == d.ssn * 2 && d.receiver == 99));
            c.mark_durable(range.end).unwrap();
        }
        for p in producers {
            p.join().unwrap();
        }
        assert_eq!(last, vec![PER; PRODUCERS as usize]);
        assert_eq!(q.occupancy(), 0);
        drop(c);
        std::fs::remove_file(&path).ok();
    }
}
