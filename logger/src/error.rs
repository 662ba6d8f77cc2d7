//! Logger errors. Anything a peer, a file or a caller can get wrong surfaces here, never as a panic.

use reverb_transport::codec::CodecError;
use reverb_transport::config::ConfigError;
use reverb_transport::TransportError;

pub type Result<T, E = LogError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// Bytes from the wire or from a log image that do not parse.
    #[error("malformed {what}: {detail}")]
    Malformed { what: &'static str, detail: String },
    /// Bytes that end early or run long (the codec's error, kept as the source).
    #[error("malformed {source}")]
    Decode {
        #[from]
        source: CodecError,
    },
    #[error("unsupported {what} version {found} (this build speaks {expected})")]
    UnsupportedVersion { what: &'static str, found: u32, expected: u32 },
    /// The node determinant queue has no free entry: the caller must back off (or checkpoint).
    #[error("determinant queue full ({capacity} entries not yet durable)")]
    QueueFull { capacity: u64 },
    /// A producer reserved an entry and never published it (it died or stalled).
    #[error("determinant queue stalled: entry {index} reserved but not published within the bound")]
    QueueStalled { index: u64 },
    /// The remote log ring has no room until the reader side trims: back-pressure. A ring
    /// is trimmed after a checkpoint, so it must hold one checkpoint interval's log.
    #[error(
        "log ring full: {needed} bytes needed, {free} free (a ring holds a checkpoint interval's \
         log: raise REVERB_LOG_RING_BYTES, or REVERB_LOGGER_RING_BYTES with logger cores, or \
         checkpoint more often)"
    )]
    RingFull { needed: u64, free: u64 },
    /// The sender's message log is at its byte limit: back-pressure until a checkpoint trims it.
    #[error("send log full: {needed} bytes needed, {used} of {limit} in use")]
    LogFull { needed: u64, used: u64, limit: u64 },
    /// Causal: the detLog holds its configured maximum until a checkpoint empties it.
    #[error("determinant log full: {entries} of {limit} entries; checkpoint to free it")]
    DetLogFull { entries: u64, limit: u64 },
    #[error("record of {len} bytes can never fit a ring of {capacity} bytes")]
    RecordTooLarge { len: u64, capacity: u64 },
    /// A record below the durable watermark fails its checksum: memory corruption, not a tear.
    #[error("log ring corrupt at position {pos}: {detail}")]
    Corrupt { pos: u64, detail: String },
    /// More early (out-of-order) messages from one peer than the reorder window holds.
    #[error("reorder window of peer {peer} full ({limit} early messages buffered)")]
    ReorderWindowFull { peer: u32, limit: usize },
    /// A completion for a log write failed: the log is no longer trustworthy.
    #[error("log write failed: {0}")]
    WriteFailed(TransportError),
    /// A restarted rank's re-execution asked for a receive its determinants contradict.
    #[error("replay diverged at rsn {rsn}: {detail}")]
    ReplayDiverged { rsn: u64, detail: String },
    /// Collected copies of one determinant disagree: a log is corrupt.
    #[error("conflicting determinants for rank {receiver} rsn {rsn}: {detail}")]
    ConflictingDeterminants { receiver: u32, rsn: u64, detail: String },
    /// Logger offload: the buddy node's logger core is dead; nothing more becomes durable.
    #[error("the log buddy (node {node}) is dead: the log entry cannot become durable")]
    BuddyDead { node: u64 },
    /// Logger offload: this node's logger core exited, failed or was killed.
    #[error("the node logger core (pid {pid}) is gone: {why}")]
    LoggerGone { pid: u32, why: String },
    /// Logger offload: this rank's payload lane stayed full for the whole bound (back-pressure
    /// the logger core did not relieve: its buddy ring needs a checkpoint trim).
    #[error("payload lane {lane} full: {needed} bytes needed, {free} free")]
    LaneFull { lane: u64, needed: u64, free: u64 },
    /// Collective-aware logging: stubs to resend name multicasts whose root failed too.
    #[error("multicast payloads lost with their root: {0}")]
    MulticastLost(String),
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A `REVERB_LOG*` variable with a value that does not parse.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A protocol or configuration this build does not provide (yet).
    #[error("unsupported: {0}")]
    Unsupported(String),
    #[error(transparent)]
    Transport(#[from] TransportError),
    #[error("{context}: {source}")]
    Io { context: String, source: std::io::Error },
}

impl LogError {
    pub fn malformed(what: &'static str, detail: impl Into<String>) -> Self {
        LogError::Malformed { what, detail: detail.into() }
    }

    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        LogError::Io { context: context.into(), source }
    }
}
