//! Over-decomposition (the AMPI/Charm++ model): one process hosts several ranks, its objects,
//! each a thread with its own [`Runtime`] (own logged endpoint, checkpoint slots and report),
//! all pinned to the process's core, so the core runs them by turns as a Charm++ processing
//! element does. A rank program is written once: [`run_objects`] runs the same body for every
//! object, or once for a process that is one rank.
//!
//! Parallel recovery (seed 000 §2.5): the launcher restarts a failed process's objects in
//! several processes on helper cores; each such object moves back to its home core after its
//! first checkpoint (`go_home`), as Charm++ migrates immigrants home at the next checkpoint.

use reverb_transport::Rank;
use rustix::thread::{sched_setaffinity, CpuSet};

use super::error::{Result, RuntimeError};
use super::{ObjectHost, Runtime, RuntimeConfig};

/// Runs `body` for every rank this process hosts (`REVERB_OBJECT_RANKS`), each in its own
/// thread with its own runtime, or once when the process is one rank. Returns each rank's
/// result in the host's order. A failed object ends the whole process (exit 1) after printing
/// its error: its peers would otherwise wait for it until their bounds, and a process is the
/// failure unit.
pub fn run_objects<T, E, F>(config: RuntimeConfig, body: F) -> std::result::Result<Vec<T>, E>
where
    T: Send,
    E: From<RuntimeError> + std::fmt::Display + Send,
    F: Fn(Runtime) -> std::result::Result<T, E> + Sync,
{
    let Some(host) = config.objects.clone() else {
        let rt = Runtime::init_with(config)?;
        return body(rt).map(|t| vec![t]);
    };
    let results: Vec<std::result::Result<T, E>> = std::thread::scope(|s| {
        let handles: Vec<_> = host
            .ranks
            .iter()
            .map(|&rank| {
                let mut config = config.clone();
                config.object_rank = Some(rank);
                let body = &body;
                let host = &host;
                std::thread::Builder::new()
                    .name(format!("object-{rank}"))
                    .spawn_scoped(s, move || run_object(host, rank, config, body))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| match h {
                Ok(h) => h.join().unwrap_or_else(|_| std::process::exit(1)),
                Err(e) => {
                    Err(RuntimeError::InvalidArgument(format!("starting an object's thread: {e}")).into())
                }
            })
            .collect()
    });
    results.into_iter().collect()
}

/// One object's thread: pinned to the host's core, its runtime, the body; an error ends the
/// process.
fn run_object<T, E, F>(
    host: &ObjectHost,
    rank: Rank,
    config: RuntimeConfig,
    body: &F,
) -> std::result::Result<T, E>
where
    E: From<RuntimeError> + std::fmt::Display,
    F: Fn(Runtime) -> std::result::Result<T, E>,
{
    if let Some(cpu) = host.cpu {
        pin_current_thread(cpu).map_err(|e| E::from(e))?;
    }
    let out = Runtime::init_with(config).map_err(E::from).and_then(body);
    if let Err(e) = &out {
        eprintln!("rank {rank} (an object of this process): {e}");
        std::process::exit(1);
    }
    out
}

/// Pins the calling thread to `cpu`.
pub(super) fn pin_current_thread(cpu: usize) -> Result<()> {
    let mut set = CpuSet::new();
    if cpu >= CpuSet::MAX_CPU {
        return Err(RuntimeError::InvalidArgument(format!(
            "cpu {cpu}: above the cpu set's {}",
            CpuSet::MAX_CPU
        )));
    }
    set.set(cpu);
    sched_setaffinity(None, &set)
        .map_err(|e| RuntimeError::InvalidArgument(format!("pinning an object's thread to cpu {cpu}: {e}")))
}

impl Runtime {
    /// An object restarted on a helper core goes home after its first checkpoint: its
    /// thread moves to its home core (the helper's core is its own processing element's).
    pub(super) fn go_home(&mut self) -> Result<()> {
        let Some(home) = self.config.objects.as_ref().and_then(|o| o.home_cpu) else { return Ok(()) };
        if self.report.went_home_ns != 0 {
            return Ok(());
        }
        pin_current_thread(home)?;
        self.report.went_home_ns = super::report::unix_ns();
        Ok(())
    }
}
