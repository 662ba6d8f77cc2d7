//! Logging counters per rank, relaxed atomics: readable from any thread, each counter exact, a
//! snapshot not a consistent cut. `add`/`sub` are safe with several writers; an owner that is
//! the only writer (a `LoggedEndpoint` owns its counters) uses `bump`/`drop_by`, a plain
//! load and store that keeps locked instructions off the per-message path.
//!
//! Determinant reduction (seed 002 §IV-VI, seed 000 ch.3): on FIFO channels a receive that
//! names its source and tag can only match one message, the next one of that (source, tag)
//! stream, so replay reproduces it without a determinant. Only wildcard receives are
//! non-deterministic and need one.

use std::sync::atomic::{AtomicU64, Ordering};

use reverb_transport::{Source, TagMatch};

/// Whether a receive's match is fixed by the program or chosen by arrival order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceiveKind {
    /// Named source and exact tag: needs no determinant.
    Deterministic,
    /// Any source, or a masked tag: the match depends on timing, so it needs a determinant.
    Wildcard,
}

impl ReceiveKind {
    /// Classifies a posted receive. A masked tag from a named source is counted as wildcard:
    /// the match is then decided across several tag streams, which the determinant-free
    /// replay argument (one FIFO stream per (source, tag)) does not cover.
    pub fn classify(source: Source, tag: TagMatch) -> ReceiveKind {
        match source {
            Source::Rank(_) if tag.mask == TagMatch::exact(0).mask => ReceiveKind::Deterministic,
            _ => ReceiveKind::Wildcard,
        }
    }

    pub fn needs_determinant(self) -> bool {
        self == ReceiveKind::Wildcard
    }
}

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        /// Live counters; `add` from any thread.
        #[derive(Debug, Default)]
        pub struct LogStats {
            $($(#[$doc])* pub $name: AtomicU64,)*
        }

        /// A plain copy of the counters at one moment.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct StatsSnapshot {
            $($(#[$doc])* pub $name: u64,)*
        }

        impl LogStats {
            pub fn snapshot(&self) -> StatsSnapshot {
                StatsSnapshot { $($name: self.$name.load(Ordering::Relaxed),)* }
            }
        }

        impl StatsSnapshot {
            /// `(name, value)` pairs, for tables and JSON.
            pub fn fields(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name),)*]
            }
        }
    };
}

counters! {
    /// Application messages sent.
    messages_sent,
    /// Application messages delivered.
    messages_delivered,
    /// Payload bytes written to a log (local sender log or remote ring).
    payload_bytes_logged,
    /// Multicast tree sends logged as stubs (collective-aware logging: the root keeps the
    /// payload, counted once in `payload_bytes_logged`).
    multicast_stubs_logged,
    /// Stubs resent to restarted ranks with the payload their root kept.
    multicast_stubs_resent,
    /// Payload bytes of reduction contributions dropped from the sender log once their
    /// reduction completed (collective-aware logging's tmpMsgLog).
    contribution_bytes_dropped,
    /// Determinant bytes written to a remote ring.
    determinant_bytes_logged,
    /// Determinants created by wildcard receives.
    determinants_generated,
    /// Determinants written to the buddy's ring or the node queue.
    determinants_logged,
    /// Log writes (ring records or queue pushes) that carried them: causal batches them.
    determinant_writes,
    /// Bytes held now by the sender's message log (payloads plus entries; drops on trim).
    send_log_bytes,
    /// Determinants carried on outgoing messages (one count per copy sent).
    determinants_piggybacked,
    /// Determinants known durable on another node.
    determinants_acknowledged,
    /// Determinants other ranks piggybacked to this one, kept in its detLog (new ones only).
    determinants_stored,
    /// Of those, the ones of this rank's node's ranks, forwarded as its own (`causal`: a node's
    /// ranks fail together).
    determinants_forwarded,
    /// Bytes held now by the detLog (gauge; drops at checkpoint).
    det_log_bytes,
    /// Messages whose payload this rank logged: as sender (`pessimistic-sb`, `causal`) or as
    /// receiver (`pessimistic-rb`).
    messages_payload_logged,
    /// Messages this rank did not payload-log in that role: intra-node ones under
    /// `REVERB_LOG_UNIT=node`, and every one under `none` (counted at the sender).
    messages_unlogged,
    /// Bytes the library itself put on the wire: envelopes, piggybacks, log writes, resends.
    library_bytes_sent,
    /// Receives that needed no determinant.
    deterministic_receives,
    /// Receives that needed one.
    wildcard_receives,
    /// Messages dropped as duplicates (already delivered).
    duplicates_dropped,
    /// Messages dropped from an older incarnation of their sender.
    stale_dropped,
    /// Times a full queue or ring made a caller wait.
    back_pressure_events,
}

impl LogStats {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// For the gauges (`send_log_bytes`): what `add` put in and a trim took out.
    pub fn sub(counter: &AtomicU64, n: u64) {
        counter.fetch_sub(n, Ordering::Relaxed);
    }

    /// `add` for the only writer of `counter`: concurrent writers would lose counts.
    pub fn bump(counter: &AtomicU64, n: u64) {
        counter.store(counter.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    }

    /// `sub` for the only writer of `counter`.
    pub fn drop_by(counter: &AtomicU64, n: u64) {
        counter.store(counter.load(Ordering::Relaxed).wrapping_sub(n), Ordering::Relaxed);
    }

    /// Counts one receive by kind (the only writer: `bump`); returns whether it needs a
    /// determinant.
    pub fn record_receive(&self, kind: ReceiveKind) -> bool {
        match kind {
            ReceiveKind::Deterministic => Self::bump(&self.deterministic_receives, 1),
            ReceiveKind::Wildcard => {
                Self::bump(&self.wildcard_receives, 1);
                Self::bump(&self.determinants_generated, 1);
            }
        }
        kind.needs_determinant()
    }
}

impl StatsSnapshot {
    /// Share of receives that needed a determinant, in [0, 1]; 0 with no receives.
    pub fn wildcard_fraction(&self) -> f64 {
        let total = self.deterministic_receives + self.wildcard_receives;
        if total == 0 {
            0.0
        } else {
            self.wildcard_receives as f64 / total as f64
        }
    }

    /// Average determinants piggybacked per sent message.
    pub fn piggybacked_per_message(&self) -> f64 {
        if self.messages_sent == 0 {
            0.0
        } else {
            self.determinants_piggybacked as f64 / self.messages_sent as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_receives() {
        assert_eq!(ReceiveKind::classify(Source::Rank(2), TagMatch::exact(7)), ReceiveKind::Deterministic);
        assert_eq!(ReceiveKind::classify(Source::Any, TagMatch::exact(7)), ReceiveKind::Wildcard);
        assert_eq!(ReceiveKind::classify(Source::Rank(2), TagMatch::any()), ReceiveKind::Wildcard);
        assert!(!ReceiveKind::Deterministic.needs_determinant());
    }

    #[test]
    fn counts_and_ratios() {
        let stats = LogStats::default();
        assert!(!stats.record_receive(ReceiveKind::Deterministic));
        assert!(!stats.record_receive(ReceiveKind::Deterministic));
        assert!(stats.record_receive(ReceiveKind::Wildcard));
        LogStats::add(&stats.messages_sent, 4);
        LogStats::add(&stats.determinants_piggybacked, 2);
        let s = stats.snapshot();
        assert_eq!((s.deterministic_receives, s.wildcard_receives, s.determinants_generated), (2, 1, 1));
        assert!((s.wildcard_fraction() - 1.0 / 3.0).abs() < 1e-12);
        assert!((s.piggybacked_per_message() - 0.5).abs() < 1e-12);
        assert!(s.fields().contains(&("messages_sent", 4)));
    }
}
