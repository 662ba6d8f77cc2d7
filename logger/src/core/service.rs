//! The logger core: one process per node. It creates the node segment, joins the loggers'
//! transport job, hosts the log rings of the nodes that log to it, and loops:
//! drain the determinant queue and the payload lanes into its buddy's ring (one-sided puts),
//! poll completions, publish the durable watermarks, trim on request, heartbeat.
//!
//! Heartbeat: every `heartbeat / 4` each logger puts its loop counter into a word of every
//! related logger's registered heartbeat region (word index = sender node). A related logger
//! whose word has not changed for `heartbeat`, or that the transport reports dead (PeerDead,
//! failed puts), is reported dead: in the segment's verdict table (and `BuddyState` when it
//! is the buddy) and on stderr.
//!
//! Respawn (`REVERB_LOGGER_RESPAWN`): a dead buddy is awaited (`BUDDY_REJOINING`, bounded by
//! `REVERB_LOGGER_REJOIN_TIMEOUT_S`). Every logger polls the rendezvous for respawned
//! loggers (non-blocking, every 10 ms) and reconnects; with a related one it trades a hello
//! (tagged send: heartbeat region, the ring hosted for the receiver). A respawned logger
//! starts from hellos instead of the collective exchange. The ring a dead logger hosted
//! died with it: its client writes the records it kept since the last trim into the new one.
//!
//! Shutdown: on stop (stdin EOF from the launcher, or the segment's stop word) the logger
//! drains its queues and flushes its ring, writes `STOPPED` as its last heartbeat, then stays
//! until every node it hosts a ring for has stopped (or died), so no ring vanishes under a
//! writer. Every phase is bounded.
//!
//! The logger reaches the network only through what its caller hands it: the process entry
//! opens the loggers' bootstrap and provider (see [`LoggerCore::join_and_run`]).

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use reverb_transport::{Bootstrap, Provider};

pub use super::config::{LoggerCoreConfig, LoggerSummary};
use super::segment::{self, NodeSegment, Status};
use super::session::Session;
pub use super::snapshot::hosted_snapshot_path;
use super::{segment_paths, CoreError};
use crate::detqueue::DetQueue;

/// A node's logger core: the segment exists from `create` on, so ranks can attach and
/// enqueue while the loggers' job is still forming.
pub struct LoggerCore {
    pub(super) cfg: LoggerCoreConfig,
    pub(super) segment: NodeSegment,
    pub(super) detq: DetQueue,
    pub(super) stop: Arc<AtomicBool>,
}

impl LoggerCore {
    /// Pins (if asked), then creates the determinant queue and the node segment.
    pub fn create(cfg: LoggerCoreConfig) -> Result<Self, CoreError> {
        cfg.validate()?;
        // A logger core is a process of its own: its notices go to stderr unless the host
        // process installed a subscriber.
        reverb_transport::diag::init_stderr().map_err(|e| CoreError::Config(e.to_string()))?;
        if let Some(cpu) = cfg.cpu {
            reverb_transport::topo::pin_current_thread(cpu)?;
        }
        let (ctl, detq_path) = segment_paths(&cfg.segment_base);
        // The queue first: clients open the segment, then the queue.
        let detq = DetQueue::create(&detq_path, cfg.detq_entries)?;
        let segment = NodeSegment::create(&ctl, cfg.lanes, cfg.lane_bytes)?;
        segment.set(Status::LoggerPid, u64::from(std::process::id()));
        segment.set(Status::State, segment::STATE_STARTING);
        let stop = Arc::new(AtomicBool::new(false));
        if cfg.stop_on_eof {
            spawn_stdin_watcher(Arc::clone(&stop))?;
        }
        Ok(LoggerCore { cfg, segment, detq, stop })
    }

    /// A flag that, once set, makes the loop drain, flush and exit.
    pub fn stop_handle(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.stop)
    }

    /// Joins the loggers' job with `join` (the caller opens the bootstrap and the provider,
    /// rank = node index) and runs until stopped. The segment already exists, so a failed
    /// join is published there (`STATE_FAILED`) before the files go.
    pub fn join_and_run<B, E>(
        self,
        join: impl FnOnce() -> Result<(B, Box<dyn Provider>), E>,
    ) -> Result<LoggerSummary, CoreError>
    where
        B: Bootstrap,
        CoreError: From<E>,
    {
        match join() {
            Ok((mut boot, mut provider)) => self.run(&mut boot, provider.as_mut()),
            Err(e) => {
                self.segment.set(Status::State, segment::STATE_FAILED);
                self.remove_files();
                Err(e.into())
            }
        }
    }

    /// Runs the logger loop on an opened loggers' job (rank = node index) until stopped.
    pub fn run(
        self,
        boot: &mut dyn Bootstrap,
        provider: &mut dyn Provider,
    ) -> Result<LoggerSummary, CoreError> {
        let result = Session::open(&self, boot, provider).and_then(Session::run);
        let state = if result.is_ok() { segment::STATE_EXITED } else { segment::STATE_FAILED };
        self.segment.set(Status::State, state);
        self.remove_files();
        result
    }

    fn remove_files(&self) {
        std::fs::remove_file(self.segment.path()).ok();
        std::fs::remove_file(self.detq.path()).ok();
    }
}

/// Sets `stop` when stdin reaches end of file (the launcher closes its pipe to stop us).
fn spawn_stdin_watcher(stop: Arc<AtomicBool>) -> Result<(), CoreError> {
    std::thread::Builder::new()
        .name("reverb-logger-stdin".into())
        .spawn(move || {
            let mut buf = [0u8; 256];
            let mut stdin = std::io::stdin();
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            stop.store(true, Ordering::Release);
        })
        .map_err(|e| CoreError::io("spawning the stdin watcher", e))?;
    Ok(())
}
