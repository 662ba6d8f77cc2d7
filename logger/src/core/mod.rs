//! Logger offload (issue 4 §3): one logger-core process per node drains the node's queues and
//! writes them, by one-sided puts, into its buddy node's log ring; application ranks only
//! enqueue and, for pessimistic delivery, wait on the published durable watermark.
//!
//! - [`segment`]: the node segment (status words, per-rank payload lanes) in shared memory;
//! - [`client`]: [`NodeLogClient`], what application ranks link against;
//! - [`service`]: [`LoggerCore`], what the process entry creates and runs;
//! - [`config`]: its configuration and exit summary;
//! - `session` (the loop's state, set-up and shutdown) with its jobs: `startup` (the
//!   loggers' start-up exchange), `drain` (queues into the buddy's ring, watermarks,
//!   snapshots, trims), `peers` (heartbeats, deaths), `respawn` (respawned loggers, hellos),
//!   `hello` (the hello's bytes), `log_path` (the ring writer and its re-flush copy),
//!   `snapshot` (hosted ring files), `fault` (test-only hooks);
//! - [`placement`]: `dedicated`, `shared-pinned`, `shared-unpinned` and the cpu plan.
//!
//! Design choices: determinants go through the node's shared `DetQueue` (Algs 22-24, so causal
//! piggybacking can read it too), but payload copies go through one single-producer lane per
//! rank rather than one multi-producer queue: producers never contend, each rank's order holds
//! by construction, and back-pressure is per rank (a full lane refuses, never drops). Tickets
//! are positions: a determinant is durable once the queue's start passes its index, a frame
//! once its lane's durable position reaches its end.
//!
//! The loggers form their own transport job (one rank per node, rank = node index), opened
//! with the same provider kind as the application, so their log writes and heartbeats are real
//! one-sided puts on shm or verbs. Node n logs into the ring of `BuddyMap` partner node
//! (2k <-> 2k+1) and hosts the rings of the nodes that log to it.
//!
//! Node failure (`reverb run --respawn`): the launcher kills a failed node's logger with its
//! ranks and starts both again at the next incarnation. The new logger rejoins the loggers'
//! job (no collective) and trades a hello (heartbeat region, the ring it hosts for the
//! receiver) with each related logger. What died with the old logger: the rings it hosted.
//! Its clients (the nodes logging to it) keep a copy of every record since their last trim
//! and re-write it into the new incarnation's fresh ring, remapping the tickets still in
//! flight, so nothing they were told is durable stays lost. The survivors keep the ring they
//! hosted for the dead node readable (retired, in the replay snapshots, until the next trim)
//! and give the new incarnation a fresh one: the restarted ranks' determinants for replay are
//! in the retired ring. A logger lost during the loggers' start-up exchange (a collective the
//! new incarnation never joins) makes the others trade hellos with every related logger
//! instead of finishing the exchange; a loss while the loggers' transport opens is not
//! recovered.

pub mod client;
pub mod config;
mod drain;
mod fault;
mod hello;
mod log_path;
mod peers;
pub mod placement;
mod respawn;
pub mod segment;
pub mod service;
mod session;
mod snapshot;
mod startup;

pub use client::{NodeLogClient, Ticket};
pub use placement::{Placement, PlacementPlan};
pub use segment::{DeathCause, NodeVerdict};
pub use service::{LoggerCore, LoggerCoreConfig, LoggerSummary};

use std::time::Duration;

use reverb_transport::codec::CodecError;
use reverb_transport::TransportError;

use crate::error::LogError;

/// Environment the launcher gives logger cores and ranks.
pub mod vars {
    /// Base path of the node segment (`<base>.ctl`, `<base>.detq`); set for ranks and loggers.
    pub const SEGMENT: &str = "REVERB_LOGGER_SEGMENT";
    /// Payload lanes in the segment (the node's rank count); logger only.
    pub const LANES: &str = "REVERB_LOGGER_LANES";
    /// Bytes per payload lane (default 1 MiB).
    pub const LANE_BYTES: &str = "REVERB_LOGGER_LANE_BYTES";
    /// Entries of the node determinant queue (default 65536).
    pub const DETQ_ENTRIES: &str = "REVERB_LOGGER_DETQ_ENTRIES";
    /// Data bytes of each hosted log ring (default 16 MiB).
    pub const RING_BYTES: &str = "REVERB_LOGGER_RING_BYTES";
    /// A buddy whose heartbeat stops for this long is reported dead (default 400).
    pub const HEARTBEAT_MS: &str = "REVERB_HEARTBEAT_MS";
    /// `dedicated`, `shared-pinned`, `shared-unpinned` (chooses how the loop idles).
    pub const PLACEMENT: &str = "REVERB_LOGGER";
    /// OS cpu to pin the logger core to (unset: not pinned).
    pub const CPU: &str = "REVERB_LOGGER_CPU";
    /// `1`: stop (drain, flush, exit) when stdin reaches end of file (the launcher's pipe).
    pub const STOP_ON_EOF: &str = "REVERB_LOGGER_STOP_ON_EOF";
    /// Directory where the logger writes each hosted ring's image at exit (tests, forensics).
    pub const DUMP_DIR: &str = "REVERB_LOGGER_DUMP_DIR";
    /// Milliseconds a logger loop may stand still before ranks call it gone (default 5000).
    pub const STALL_MS: &str = "REVERB_LOGGER_STALL_MS";
    /// Seconds a rank waits for its node's segment to appear (default 30).
    pub const ATTACH_TIMEOUT_S: &str = "REVERB_LOGGER_ATTACH_TIMEOUT_S";
    /// Nonzero: the launcher respawns failed nodes (`reverb run --respawn N`), so a dead
    /// related logger is awaited back (`BUDDY_REJOINING`) instead of given up at once.
    pub const RESPAWN: &str = "REVERB_LOGGER_RESPAWN";
    /// Seconds a dead related logger is awaited back, and a respawned logger waits for its
    /// related loggers' hellos (default 30).
    pub const REJOIN_TIMEOUT_S: &str = "REVERB_LOGGER_REJOIN_TIMEOUT_S";
    /// Fault injection (tests): the logger core of this node index SIGKILLs itself in the
    /// loggers' start-up exchange, once its node's ranks have attached (first incarnation).
    /// Only with the `fault-injection` feature; without it a set variable is an error.
    pub const FAULT_STARTUP: &str = "REVERB_LOGGER_FAULT_STARTUP";
}

pub const DEFAULT_HEARTBEAT: Duration = Duration::from_millis(400);

/// Errors of the logger core and its clients.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    #[error("logger core configuration: {0}")]
    Config(String),
    #[error("malformed {what}: {detail}")]
    Malformed { what: &'static str, detail: String },
    /// Bytes that end early or run long (the codec's error, kept as the source).
    #[error("malformed {0}")]
    Decode(#[from] CodecError),
    /// Back-pressure: the rank's payload lane has no room until the logger makes frames durable.
    #[error("payload lane {lane} full: {needed} bytes needed, {free} free")]
    LaneFull { lane: u64, needed: u64, free: u64 },
    #[error("payload frame of {len} bytes exceeds the lane limit of {max}")]
    FrameTooLarge { len: usize, max: usize },
    /// The buddy node's logger is dead: nothing more becomes durable on this path.
    #[error("the log buddy (node {node}) is dead; the entry cannot become durable")]
    BuddyDead { node: u64 },
    /// This node's logger core is gone (exited, failed or killed).
    #[error("the node's logger core (pid {pid}) is gone: {why}")]
    LoggerGone { pid: u32, why: String },
    #[error("not durable within {0:?}")]
    Timeout(Duration),
    /// A `REVERB_LOGGER*` variable with a value that does not parse.
    #[error(transparent)]
    Env(#[from] reverb_transport::config::ConfigError),
    #[error(transparent)]
    Log(#[from] LogError),
    #[error(transparent)]
    Transport(#[from] TransportError),
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
}

impl CoreError {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        CoreError::Io { context: context.into(), source }
    }
}

/// For the protocol layer, which speaks `LogError`: back-pressure stays back-pressure, a dead
/// path becomes a failed log write, a timeout stays a timeout.
impl From<CoreError> for LogError {
    fn from(e: CoreError) -> LogError {
        match e {
            CoreError::Log(e) => e,
            CoreError::Transport(e) => LogError::Transport(e),
            CoreError::Timeout(d) => LogError::Transport(TransportError::Timeout(d)),
            CoreError::LaneFull { lane, needed, free } => LogError::LaneFull { lane, needed, free },
            CoreError::FrameTooLarge { len, max } => {
                LogError::RecordTooLarge { len: len as u64, capacity: max as u64 }
            }
            CoreError::BuddyDead { node } => LogError::BuddyDead { node },
            CoreError::LoggerGone { pid, why } => LogError::LoggerGone { pid, why },
            CoreError::Io { context, source } => LogError::Io { context, source },
            CoreError::Malformed { what, detail } => LogError::Malformed { what, detail },
            CoreError::Decode(source) => LogError::Decode { source },
            CoreError::Env(e) => LogError::Config(e),
            other @ CoreError::Config(_) => LogError::Unsupported(other.to_string()),
        }
    }
}

/// Reads an optional environment variable and parses it; a bad value is an error.
pub(crate) fn env_parse<T: std::str::FromStr>(name: &str) -> Result<Option<T>, CoreError>
where
    T::Err: std::fmt::Display,
{
    match reverb_transport::config::env_get(name)? {
        Some(v) => {
            v.trim().parse::<T>().map(Some).map_err(|e| CoreError::Config(format!("{name}={v:?}: {e}")))
        }
        None => Ok(None),
    }
}

/// `<base>.ctl` and `<base>.detq`.
pub fn segment_paths(base: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    (format!("{base}.ctl").into(), format!("{base}.detq").into())
}

/// The segment base path for `node` of job `job_id` (in /dev/shm when it exists).
pub fn segment_base(job_id: &str, node: u32) -> String {
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        std::path::PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    dir.join(format!("reverb-{job_id}-node{node}-log")).to_string_lossy().into_owned()
}
