//! Transport errors. Every failure a peer or a user can cause surfaces here, never as a panic.

use std::sync::Arc;
use std::time::Duration;

use crate::api::Rank;
use crate::codec::CodecError;

/// The transport's result type; the error defaults to [`TransportError`].
pub type Result<T, E = TransportError> = std::result::Result<T, E>;

/// Errors of the transport layer. `Clone` so that one failure can be reported in several
/// completions (every pending operation on a dead endpoint fails with the same cause).
#[derive(Debug, Clone, thiserror::Error)]
pub enum TransportError {
    /// `[offset, offset + len)` does not fit a region (local, remote or receive buffer); nothing
    /// was moved. `op` names the call.
    #[error("{op}: offset {offset} + length {len} is outside the {region_len}-byte region")]
    OutOfBounds {
        /// The operation.
        op: &'static str,
        /// Start of the range, in bytes.
        offset: u64,
        /// Length of the range, in bytes.
        len: u64,
        /// Length of the region (or the limit) it had to fit.
        region_len: u64,
    },
    #[error(
        "{op}: remote key {key:#x} is not registered at rank {owner} (wrong key or deregistered region)"
    )]
    /// A remote descriptor names no live registration at `owner` (forged, stale after the region
    /// dropped, or from the owner's previous incarnation).
    InvalidKey {
        /// The operation.
        op: &'static str,
        /// The rank the descriptor names as owner.
        owner: Rank,
        /// The refused key.
        key: u64,
    },
    /// The region was registered without the access the operation needs (`needed`: "remote
    /// read" or "remote write").
    #[error("{op}: region does not allow {needed} access")]
    AccessDenied {
        /// The operation.
        op: &'static str,
        /// The missing right.
        needed: &'static str,
    },
    /// A rank outside the job: the rank, then the job's size.
    #[error("rank {0} is outside the job (size {1})")]
    InvalidRank(Rank, u32),
    /// The peer died or cannot be reached; pending operations towards it fail with this.
    #[error("peer rank {0} is dead or unreachable")]
    PeerDead(Rank),
    /// The peer reported a failure on its side (e.g. it could not read a rendezvous buffer).
    #[error("peer rank {0} reported: {1}")]
    Remote(Rank, String),
    /// A bounded wait ended without what it waited for; carries the bound.
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// A message of `len` bytes met a receive buffer of `capacity` bytes; the receive fails.
    #[error("message of {len} bytes does not fit the {capacity}-byte receive buffer")]
    Truncated {
        /// The message length, in bytes.
        len: u64,
        /// The receive buffer's capacity, in bytes.
        capacity: u64,
    },
    /// Bytes from a peer or the rendezvous that do not decode (`what` names the structure).
    #[error("malformed {what}: {detail}")]
    Malformed {
        /// The structure that did not decode.
        what: &'static str,
        /// What was wrong with it.
        detail: String,
    },
    /// Bytes from a peer, the rendezvous or a file that end early or run long (the codec's
    /// error, kept as the source).
    #[error("malformed {source}")]
    Decode {
        /// Which format, which field, how many bytes.
        #[from]
        source: CodecError,
    },
    /// The rendezvous failed (unreachable root, bad token, protocol error, lost rank).
    #[error("bootstrap: {0}")]
    Bootstrap(String),
    /// A bad setting or request that is not a `REVERB_*` variable (unknown provider name,
    /// empty region, full registration table, inconsistent limits).
    #[error("configuration: {0}")]
    Config(String),
    /// A `REVERB_*` variable with a bad value (see `config::registry`); its text names both.
    #[error(transparent)]
    Env(#[from] crate::config::ConfigError),
    /// The provider cannot run here (named first, then why: no device, no feature built in).
    #[error("provider {0} is not available: {1}")]
    Unavailable(&'static str, String),
    /// The provider or bootstrap does not implement this call (e.g. `reconnect` on loopback).
    #[error("{0} is not supported")]
    Unsupported(String),
    /// A reconnect or rejoin named an incarnation of `rank` that is not newer than `current`.
    #[error("rank {rank}: incarnation {incarnation} is stale (current {current})")]
    StaleIncarnation {
        /// The rank.
        rank: Rank,
        /// The incarnation that was offered.
        incarnation: u32,
        /// The incarnation already known.
        current: u32,
    },
    /// An OS call failed; `context` says what was being done.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error (shared, so the error stays `Clone`).
        source: Arc<std::io::Error>,
    },
}

/// A failed completion's boxed status, unboxed: lets `completion.status?` work.
impl From<Box<TransportError>> for TransportError {
    fn from(e: Box<TransportError>) -> Self {
        *e
    }
}

impl TransportError {
    /// Wraps an I/O error with what was being done (the `Io` variant keeps it as its source).
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        TransportError::Io { context: context.into(), source: Arc::new(source) }
    }
}

/// An error and its sources in one line, `: `-joined, each cause once (a source whose text the
/// error's own already contains is left out): for messages that leave Rust (the C ABI, MPI).
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = s.source();
    }
    text
}

/// Attach context to `std::io::Result` values.
pub trait IoContext<T> {
    /// Turns an `Err` into [`TransportError::Io`] with the context `context()` builds (only
    /// called on error).
    fn context(self, context: impl FnOnce() -> String) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn context(self, context: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| TransportError::io(context(), e))
    }
}

/// Errors peers caused during progress (malformed messages), reported one per `progress` call
/// in arrival order. Bounded: past `LIMIT` they are counted and reported as one summary, so a
/// flooding peer cannot grow memory, and none is dropped silently.
#[derive(Debug, Default)]
pub struct ErrorQueue {
    queue: std::collections::VecDeque<TransportError>,
    overflow: u64,
}

impl ErrorQueue {
    const LIMIT: usize = 256;

    /// Queues a peer-caused error; past the limit (256) only counts it.
    pub fn push(&mut self, error: TransportError) {
        if self.queue.len() < Self::LIMIT {
            self.queue.push_back(error);
        } else {
            self.overflow += 1;
        }
    }

    /// The oldest unreported error, then the overflow summary.
    pub fn next_error(&mut self) -> Option<TransportError> {
        if let Some(e) = self.queue.pop_front() {
            return Some(e);
        }
        if self.overflow > 0 {
            let n = std::mem::take(&mut self.overflow);
            return Some(TransportError::Malformed {
                what: "messages",
                detail: format!("{n} more not itemized"),
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_queue_keeps_order_and_counts_overflow() {
        let mut q = ErrorQueue::default();
        for i in 0..ErrorQueue::LIMIT + 3 {
            q.push(TransportError::Config(i.to_string()));
        }
        for i in 0..ErrorQueue::LIMIT {
            assert!(matches!(q.next_error(), Some(TransportError::Config(s)) if s == i.to_string()));
        }
        assert!(
            matches!(q.next_error(), Some(TransportError::Malformed { detail, .. }) if detail.starts_with('3'))
        );
        assert!(q.next_error().is_none());
    }
}
