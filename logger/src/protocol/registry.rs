//! The protocol registry: one row per protocol, mapping a [`LogMode`] to its name, its
//! properties and its constructor. Every question about a mode is answered here, so a new
//! protocol is a new file plus one row in [`PROTOCOLS`].

use reverb_transport::Rank;

use super::config::{LogConfig, LogMode};
use super::{causal, none, pessimistic_rb, pessimistic_sb, LogProtocol};

/// What a protocol's constructor gets.
pub(crate) struct ProtocolSetup<'a> {
    /// Ranks in the job.
    pub size: u32,
    /// This rank.
    pub rank: Rank,
    /// Each rank's failure unit (`LogConfig::failure_units`; empty without buddy rings).
    pub failure_units: &'a [u32],
    pub config: &'a LogConfig,
}

/// One registered protocol.
pub(crate) struct ProtocolEntry {
    /// Its mode; `mode.as_str()` is its `REVERB_LOG` value.
    pub mode: LogMode,
    /// Whether it logs at all: a buddy ring per rank (set up collectively in
    /// `LoggedEndpoint::new`) and the node logger core when one runs.
    pub uses_buddy_log: bool,
    /// Whether the sender keeps the payloads, so only determinants leave the receiver (they
    /// may then go through the node logger core's determinant queue).
    pub sender_logs_payloads: bool,
    /// Whether its messages need the envelope (ssn, incarnation) and channel ordering; without,
    /// they go pass-through where the provider can peek (`passthrough.rs`).
    pub frames_messages: bool,
    pub new: fn(&ProtocolSetup<'_>) -> Box<dyn LogProtocol>,
}

/// Every protocol, in the order `REVERB_LOG`'s help names them.
pub(crate) static PROTOCOLS: &[ProtocolEntry] =
    &[none::ENTRY, pessimistic_rb::ENTRY, pessimistic_sb::ENTRY, causal::ENTRY];

/// The entry of `mode`.
pub(crate) fn entry(mode: LogMode) -> Option<&'static ProtocolEntry> {
    PROTOCOLS.iter().find(|e| e.mode == mode)
}

/// The entry named `name` (a `REVERB_LOG` value).
pub(crate) fn by_name(name: &str) -> Option<&'static ProtocolEntry> {
    PROTOCOLS.iter().find(|e| e.mode.as_str() == name)
}

/// "a, b, c or d": the registered names, for error messages.
pub(crate) fn names_for_humans() -> String {
    let names: Vec<&str> = PROTOCOLS.iter().map(|e| e.mode.as_str()).collect();
    reverb_transport::config::or_list(&names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::LogStats;

    #[test]
    fn every_mode_has_one_entry_and_names_are_unique() {
        for mode in [LogMode::NONE, LogMode::PESSIMISTIC_RB, LogMode::PESSIMISTIC_SB, LogMode::CAUSAL] {
            assert_eq!(PROTOCOLS.iter().filter(|e| e.mode == mode).count(), 1, "{mode:?}");
            let e = entry(mode).map(|e| e.mode.as_str());
            assert_eq!(e.and_then(by_name).map(|e| e.mode), Some(mode));
        }
        for (i, a) in PROTOCOLS.iter().enumerate() {
            assert!(PROTOCOLS[i + 1..].iter().all(|b| b.mode != a.mode), "{}", a.mode);
        }
        assert!(by_name("Causal").is_none(), "names are exact");
    }

    #[test]
    fn properties_follow_the_protocols() {
        let logs = |m| entry(m).map(|e| (e.uses_buddy_log, e.sender_logs_payloads));
        assert_eq!(logs(LogMode::NONE), Some((false, false)));
        assert_eq!(logs(LogMode::PESSIMISTIC_RB), Some((true, false)));
        assert_eq!(logs(LogMode::PESSIMISTIC_SB), Some((true, true)));
        assert_eq!(logs(LogMode::CAUSAL), Some((true, true)));
    }

    #[test]
    fn constructors_build_the_registered_protocol() {
        let config = LogConfig::default();
        let setup = ProtocolSetup { size: 4, rank: 0, failure_units: &[], config: &config };
        for e in PROTOCOLS {
            let p = (e.new)(&setup);
            // Every logging protocol but `none` keeps the sender's copies for recovery.
            assert_eq!(p.send_log().is_some(), e.uses_buddy_log, "{}", e.mode);
            assert_eq!(p.logs_frames(), e.mode == LogMode::PESSIMISTIC_RB, "{}", e.mode);
            assert!(p.check_receive(&LogStats::default()).is_ok());
        }
    }

    #[test]
    fn names_read_as_a_list() {
        assert_eq!(names_for_humans(), "none, pessimistic-rb, pessimistic-sb or causal");
    }
}
