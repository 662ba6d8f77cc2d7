//! Errors of the checkpoint crate.

use thiserror::Error;

/// Errors returned by checkpoint code (parity encoding and reconstruction so far).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
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
}
