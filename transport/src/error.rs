//! Transport errors. Every failure a peer or a user can cause surfaces here, never as a panic.

use std::sync::Arc;
use std::time::Duration;

use crate::api::Rank;

pub type Result<T, E = TransportError> = std::result::Result<T, E>;

/// Errors of the transport layer. `Clone` so that one failure can be reported in several
/// completions (every pending operation on a dead endpoint fails with the same cause).
#[derive(Debug, Clone, thiserror::Error)]
pub enum TransportError {
    #[error("{op}: offset {offset} + length {len} is outside the {region_len}-byte region")]
    OutOfBounds { op: &'static str, offset: u64, len: u64, region_len: u64 },
    #[error(
        "{op}: remote key {key:#x} is not registered at rank {owner} (wrong key or deregistered region)"
    )]
    InvalidKey { op: &'static str, owner: Rank, key: u64 },
    #[error("{op}: region does not allow {needed} access")]
    AccessDenied { op: &'static str, needed: &'static str },
    #[error("rank {0} is outside the job (size {1})")]
    InvalidRank(Rank, u32),
    #[error("peer rank {0} is dead or unreachable")]
    PeerDead(Rank),
    #[error("peer rank {0} reported: {1}")]
    Remote(Rank, String),
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("message of {len} bytes does not fit the {capacity}-byte receive buffer")]
    Truncated { len: u64, capacity: u64 },
    #[error("malformed {what}: {detail}")]
    Malformed { what: &'static str, detail: String },
    #[error("bootstrap: {0}")]
    Bootstrap(String),
    #[error("configuration: {0}")]
    Config(String),
    /// A `REVERB_*` variable with a bad value (see `config::registry`); its text names both.
    #[error(transparent)]
    Env(#[from] crate::config::ConfigError),
    #[error("provider {0} is not available: {1}")]
    Unavailable(&'static str, String),
    #[error("{0} is not supported")]
    Unsupported(String),
    #[error("rank {rank}: incarnation {incarnation} is stale (current {current})")]
    StaleIncarnation { rank: Rank, incarnation: u32, current: u32 },
    #[error("{context}: {source}")]
    Io { context: String, source: Arc<std::io::Error> },
}

impl TransportError {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        TransportError::Io { context: context.into(), source: Arc::new(source) }
    }
}

/// Attach context to `std::io::Result` values.
pub trait IoContext<T> {
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
