//! An in-process `Bootstrap`: the ranks of a job are threads of this process, and collectives
//! meet at a shared round guarded by a mutex. Pairs with the loopback provider for fast,
//! process-free tests; any provider that can run N ranks in one process may use it.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::fabric::lock;
use crate::api::Rank;
use crate::bootstrap::{Bootstrap, JobInfo};
use crate::error::{Result, TransportError};

/// How long a collective waits for the other ranks (a rank thread that ended or panicked
/// never arrives).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The collective round in progress and the last one's result.
struct Round {
    generation: u64,
    contributions: Vec<Option<Vec<u8>>>,
    arrived: u32,
    result: Arc<Vec<Vec<u8>>>,
}

struct Shared {
    round: Mutex<Round>,
    done: Condvar,
    timeout: Duration,
}

/// One rank's handle on an in-process job.
pub struct InProcBootstrap {
    job: JobInfo,
    shared: Arc<Shared>,
}

impl InProcBootstrap {
    /// The bootstraps of all `size` ranks of job `job_id`, one per rank thread (rank `r` at
    /// index `r`), one rank per node.
    pub fn job(job_id: &str, size: u32) -> Vec<InProcBootstrap> {
        Self::with_timeout(job_id, size, DEFAULT_TIMEOUT)
    }

    /// As [`InProcBootstrap::job`], with collectives bounded by `timeout`.
    pub fn with_timeout(job_id: &str, size: u32, timeout: Duration) -> Vec<InProcBootstrap> {
        let round = Round {
            generation: 0,
            contributions: vec![None; size as usize],
            arrived: 0,
            result: Arc::new(Vec::new()),
        };
        let shared = Arc::new(Shared { round: Mutex::new(round), done: Condvar::new(), timeout });
        (0..size)
            .map(|rank: Rank| InProcBootstrap {
                job: JobInfo {
                    rank,
                    size,
                    node: rank,
                    local_rank: 0,
                    ranks_per_node: 1,
                    job_id: job_id.to_string(),
                    incarnation: 0,
                },
                shared: Arc::clone(&shared),
            })
            .collect()
    }
}

impl Bootstrap for InProcBootstrap {
    fn job(&self) -> &JobInfo {
        &self.job
    }

    fn allgather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let shared = &*self.shared;
        let mut round = lock(&shared.round);
        let rank = self.job.rank as usize;
        if round.contributions[rank].is_some() {
            return Err(TransportError::Bootstrap(format!("rank {rank} is in this round already")));
        }
        round.contributions[rank] = Some(data.to_vec());
        round.arrived += 1;
        if round.arrived == self.job.size {
            let all = round.contributions.iter_mut().map(|c| c.take().unwrap_or_default()).collect();
            round.result = Arc::new(all);
            round.arrived = 0;
            round.generation += 1;
            shared.done.notify_all();
            return Ok(round.result.to_vec());
        }
        let generation = round.generation;
        let deadline = Instant::now() + shared.timeout;
        while round.generation == generation {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                round.contributions[rank] = None;
                round.arrived -= 1;
                return Err(TransportError::Timeout(shared.timeout));
            }
            round =
                shared.done.wait_timeout(round, left).map(|(g, _)| g).unwrap_or_else(|e| e.into_inner().0);
        }
        Ok(round.result.to_vec())
    }
}
