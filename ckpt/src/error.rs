//! Errors of the checkpoint crate.

use thiserror::Error;

/// Errors returned by checkpoint code: parity, integrity, checkpoint and restore.
#[derive(Debug, Error, Clone)]
pub enum CkptError {
    /// The k + m geometry cannot be built by the parity codec.
    #[error("invalid parity geometry {data_shards}+{parity_shards}: {reason}")]
    InvalidGeometry { data_shards: usize, parity_shards: usize, reason: &'static str },

    /// A caller passed the wrong number of shards of one kind.
    #[error("expected {expected} {kind} shards, got {actual}")]
    ShardCount { kind: &'static str, expected: usize, actual: usize },

    /// One shard's length differs from the others.
    #[error("shard {index} is {actual} bytes, expected {expected} (all shards must have the same size)")]
    ShardSizeMismatch { index: usize, expected: usize, actual: usize },

    /// Shards of zero bytes carry nothing to encode.
    #[error("shards are empty (0 bytes)")]
    EmptyShards,

    /// More shards are missing than parity can rebuild.
    #[error("{lost} of {total} shards are lost but only {parity_shards} can be rebuilt")]
    TooManyLostShards { lost: usize, total: usize, parity_shards: usize },

    /// A stored parity format byte that this build does not know.
    #[error("unknown parity format version byte {0}")]
    UnknownParityFormat(u8),

    /// The underlying Reed-Solomon library refused the request (should be caught by the checks above).
    #[error("reed-solomon codec: {0}")]
    Codec(String),

    /// A checkpoint header (or parity metadata) failed its checks: magic, version, checksum, fields.
    #[error("{what}: corrupt header ({detail})")]
    HeaderCorrupt { what: String, detail: String },

    /// A chunk's CRC32C does not match: corrupted, or torn (not every chunk of this epoch landed).
    #[error("{what}: chunk {chunk} of {chunks} fails its CRC32C (corrupted or torn copy)")]
    ChunkCorrupt { what: String, chunk: usize, chunks: usize },

    /// Fewer bytes than the header promises.
    #[error("{what}: truncated ({have} bytes, need {need})")]
    Truncated { what: String, have: usize, need: usize },

    /// The copy is valid but holds another epoch or rank than asked for.
    #[error("{what}: holds rank {found_rank} epoch {found_epoch}, expected rank {rank} epoch {epoch}")]
    WrongEpoch { what: String, rank: u32, epoch: u64, found_rank: u32, found_epoch: u64 },

    /// The protected data does not fit the registered checkpoint slot.
    #[error(
        "checkpoint image of {len} bytes exceeds the slot of {capacity} bytes (raise CkptConfig::slot_len)"
    )]
    TooLarge { len: usize, capacity: usize },

    /// The same protected id was given twice, or an id is missing on restore.
    #[error("protected id {id}: {detail}")]
    ProtectedId { id: u32, detail: &'static str },

    /// A peer needed by this step is dead.
    #[error("rank {rank} is dead ({during})")]
    PeerDead { rank: u32, during: &'static str },

    /// Any other transport failure.
    #[error("transport error while {during}")]
    Transport {
        during: &'static str,
        #[source]
        source: reverb_transport::TransportError,
    },

    /// A peer's message did not follow the protocol (wrong epoch, unexpected completion).
    #[error("bad message while {during}: {detail}")]
    Protocol { during: &'static str, detail: String },

    /// A bounded wait ran out.
    #[error("timed out after {millis} ms while {during}")]
    Timeout { during: &'static str, millis: u64 },

    /// The coordinated checkpoint did not commit on every team member; the previous one stands.
    #[error("checkpoint epoch {epoch} not committed: {reason}")]
    NotCommitted { epoch: u64, reason: String },

    /// No level could restore the rank's data; `attempts` says why each one failed.
    #[error("rank {rank} epoch {epoch} cannot be restored: {attempts}")]
    Unrecoverable { rank: u32, epoch: u64, attempts: String },

    /// Configuration or placement that this job cannot support.
    #[error("unsupported: {0}")]
    Unsupported(String),

    /// A bad argument from the caller.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl CkptError {
    /// Wraps a transport error with what was being done.
    pub fn transport(during: &'static str, error: reverb_transport::TransportError) -> CkptError {
        match error {
            reverb_transport::TransportError::PeerDead(rank) => CkptError::PeerDead { rank, during },
            source => CkptError::Transport { during, source },
        }
    }
}

/// Equal when the same variant says the same thing. `TransportError` has no `PartialEq`, so
/// a transport source compares by its message.
impl PartialEq for CkptError {
    fn eq(&self, other: &Self) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
            && self.to_string() == other.to_string()
            && match (self, other) {
                (CkptError::Transport { source: a, .. }, CkptError::Transport { source: b, .. }) => {
                    a.to_string() == b.to_string()
                }
                _ => true,
            }
    }
}

impl Eq for CkptError {}
