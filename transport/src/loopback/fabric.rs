//! What the ranks of one in-process job share: one endpoint per rank, each with its inbox
//! (tagged data, rendezvous control, immediates), its registration table and its doorbell.
//! Jobs are found by job id in a process-wide registry, so ranks opened on separate threads
//! with any bootstrap meet here.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use super::memory::Memory;
use crate::api::{Access, Rank};
use crate::error::{Result, TransportError};
use crate::msg::SlotHeader;

/// One message in an inbox: who sent it, its header and its eager payload.
pub(crate) struct Message {
    pub source: Rank,
    pub header: SlotHeader,
    pub payload: Vec<u8>,
}

/// A registration table entry, as the owner published it.
#[derive(Clone)]
pub(crate) struct Registered {
    pub memory: Arc<Memory>,
    pub access: Access,
}

/// Locks `m`; a rank thread that panicked while holding it leaves the data consistent (every
/// critical section is a single push, pop or insert), so poisoning is ignored.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One rank's endpoint.
pub(crate) struct Endpoint {
    inbox: Mutex<VecDeque<Message>>,
    bell: Condvar,
    regions: Mutex<HashMap<u64, Registered>>,
    closed: AtomicBool,
}

impl Endpoint {
    fn new() -> Endpoint {
        Endpoint {
            inbox: Mutex::new(VecDeque::new()),
            bell: Condvar::new(),
            regions: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
        }
    }

    /// Queues a message and wakes the owner if it sleeps.
    pub(crate) fn deliver(&self, message: Message) {
        lock(&self.inbox).push_back(message);
        self.bell.notify_all();
    }

    /// Everything queued, in arrival order.
    pub(crate) fn take_all(&self) -> VecDeque<Message> {
        std::mem::take(&mut *lock(&self.inbox))
    }

    /// Sleeps until a message is queued, the endpoint is woken, or `timeout` passes.
    pub(crate) fn wait(&self, timeout: Duration) {
        let inbox = lock(&self.inbox);
        if inbox.is_empty() {
            let _ = self.bell.wait_timeout(inbox, timeout);
        }
    }

    pub(crate) fn wake(&self) {
        let _guard = lock(&self.inbox);
        self.bell.notify_all();
    }

    pub(crate) fn register(&self, key: u64, entry: Registered) -> bool {
        let mut table = lock(&self.regions);
        if table.contains_key(&key) {
            return false;
        }
        table.insert(key, entry);
        true
    }

    pub(crate) fn deregister(&self, key: u64) {
        lock(&self.regions).remove(&key);
    }

    pub(crate) fn lookup(&self, key: u64) -> Option<Registered> {
        lock(&self.regions).get(&key).cloned()
    }

    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

/// The endpoints of one job, filled as its ranks open.
pub(crate) struct Fabric {
    /// Distinguishes this fabric from another process's job of the same id.
    pub id: u64,
    endpoints: Vec<OnceLock<Arc<Endpoint>>>,
}

impl Fabric {
    /// The fabric of `job_id` in this process, created by its first rank.
    pub(crate) fn for_job(job_id: &str, size: u32) -> Result<Arc<Fabric>> {
        static JOBS: OnceLock<Mutex<HashMap<String, Weak<Fabric>>>> = OnceLock::new();
        let mut jobs = lock(JOBS.get_or_init(Default::default));
        jobs.retain(|_, f| f.strong_count() > 0);
        if let Some(fabric) = jobs.get(job_id).and_then(Weak::upgrade) {
            if fabric.endpoints.len() != size as usize {
                return Err(TransportError::Config(format!(
                    "loopback job {job_id:?} has {} ranks, this rank says {size}",
                    fabric.endpoints.len()
                )));
            }
            return Ok(fabric);
        }
        let fabric = Arc::new(Fabric {
            id: rand::random::<u64>() | 1,
            endpoints: (0..size).map(|_| OnceLock::new()).collect(),
        });
        jobs.insert(job_id.to_string(), Arc::downgrade(&fabric));
        Ok(fabric)
    }

    /// Takes `rank`'s endpoint slot; a slot is taken once per fabric (no respawn).
    pub(crate) fn join(&self, rank: Rank) -> Result<Arc<Endpoint>> {
        let slot = self.endpoints.get(rank as usize).ok_or(TransportError::InvalidRank(rank, self.size()))?;
        let endpoint = Arc::new(Endpoint::new());
        slot.set(Arc::clone(&endpoint))
            .map_err(|_| TransportError::Config(format!("loopback rank {rank} opened twice in one job")))?;
        Ok(endpoint)
    }

    /// Every rank's endpoint; an error if some rank has not joined (not in this process).
    pub(crate) fn all(&self) -> Result<Vec<Arc<Endpoint>>> {
        self.endpoints
            .iter()
            .enumerate()
            .map(|(rank, slot)| {
                slot.get().cloned().ok_or_else(|| {
                    TransportError::Unavailable(
                        "loopback",
                        format!("rank {rank} is not in this process: loopback runs ranks as threads"),
                    )
                })
            })
            .collect()
    }

    pub(crate) fn size(&self) -> u32 {
        self.endpoints.len() as u32
    }
}
