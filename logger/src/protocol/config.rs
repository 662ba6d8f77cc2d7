//! Which protocol a job runs and its settings: [`LogMode`], [`LogUnit`], [`LogConfig`], parsed
//! from the `REVERB_LOG*` variables or set directly. A mode's name and properties come from
//! the protocol registry (`super::registry`), so nothing here matches on a mode.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use reverb_transport::config::Env;
use reverb_transport::Tag;

use super::registry;
use super::LOGGED_MESSAGE_TAG;
use crate::error::{LogError, Result};
use crate::team::Teams;

/// Which logging protocol a job runs (`REVERB_LOG`): the name of a registered protocol.
/// Each protocol's file defines its constant (`LogMode::CAUSAL` in `causal.rs`, ...), and
/// values are only made there or parsed from a registered name, so a new protocol needs no
/// edit here.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct LogMode(&'static str);

impl LogMode {
    /// The mode named `name`; only protocol files call it, for their constant.
    pub(super) const fn named(name: &'static str) -> Self {
        LogMode(name)
    }

    /// Its `REVERB_LOG` value.
    pub fn as_str(self) -> &'static str {
        self.0
    }

    /// Every protocol is built; kept so callers can check a mode before a collective setup.
    pub fn check_supported(self) -> Result<()> {
        registry::entry(self)
            .map(|_| ())
            .ok_or_else(|| LogError::Unsupported(format!("logging mode {self:?} is not registered")))
    }

    /// Whether the sender keeps payloads (sender-based and causal).
    pub fn sender_logs_payloads(self) -> bool {
        registry::entry(self).is_some_and(|e| e.sender_logs_payloads)
    }

    /// `REVERB_LOG`, `none` when unset.
    pub fn from_env() -> Result<Self> {
        match Env::process().raw("REVERB_LOG")? {
            Some(v) => v.parse(),
            None => Ok(LogMode::NONE),
        }
    }
}

impl fmt::Debug for LogMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl fmt::Display for LogMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for LogMode {
    type Err = LogError;
    fn from_str(s: &str) -> Result<Self> {
        registry::by_name(s).map(|e| e.mode).ok_or_else(|| {
            LogError::InvalidArgument(format!("REVERB_LOG={s:?}: expected {}", registry::names_for_humans()))
        })
    }
}

/// What fails and rolls back together (`REVERB_LOG_UNIT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogUnit {
    /// The node: intra-node payloads are not logged (the default, see the module doc).
    Node,
    /// The rank: every payload is logged.
    Rank,
    /// The team of `LogConfig::teams` (`REVERB_LOG_TEAMS`): only inter-team payloads are logged.
    Team,
}

impl LogUnit {
    pub fn as_str(self) -> &'static str {
        match self {
            LogUnit::Node => "node",
            LogUnit::Rank => "rank",
            LogUnit::Team => "team",
        }
    }
}

impl fmt::Display for LogUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for LogUnit {
    type Err = LogError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "node" => Ok(LogUnit::Node),
            "rank" => Ok(LogUnit::Rank),
            "team" => Ok(LogUnit::Team),
            other => Err(LogError::InvalidArgument(format!(
                "REVERB_LOG_UNIT={other:?}: expected node, rank or team"
            ))),
        }
    }
}

/// Logger settings, from `REVERB_LOG*` variables or set directly.
#[derive(Debug, Clone)]
pub struct LogConfig {
    pub mode: LogMode,
    /// Data bytes of each log ring a rank hosts (`REVERB_LOG_RING_BYTES`, a multiple of 8).
    pub ring_capacity: usize,
    /// Early (out-of-order) messages buffered per peer (`REVERB_LOG_REORDER_WINDOW`).
    pub reorder_window: usize,
    /// Largest application payload (`REVERB_LOG_MAX_MESSAGE`).
    pub max_message: usize,
    /// Bound on waiting for a log write to become durable (`REVERB_LOG_DURABLE_TIMEOUT_MS`).
    pub durable_timeout: Duration,
    /// Byte limit of the sender's message log in `pessimistic-sb` and `causal`
    /// (`REVERB_LOG_SEND_LOG_BYTES`).
    pub send_log_limit: usize,
    /// The failure unit (`REVERB_LOG_UNIT`).
    pub unit: LogUnit,
    /// Causal: most determinants this rank's detLog keeps before receives push back
    /// (`REVERB_LOG_DET_LOG_ENTRIES`); a checkpoint empties it.
    pub det_log_limit: usize,
    /// Causal: most of this rank's own determinants not yet stable before a wildcard delivery
    /// pushes back (`REVERB_LOG_MAX_UNSTABLE`).
    pub max_unstable: usize,
    /// Provider tag of the enveloped traffic. Endpoints run one after another over one
    /// provider need distinct tags: receives an earlier one left posted must not take the
    /// next one's messages (the provider cannot cancel them).
    pub provider_tag: Tag,
    /// The teams of `LogUnit::Team` (`REVERB_LOG_TEAMS`, which also sets the unit).
    pub teams: Option<Teams>,
    /// With logging off, messages go as the provider's own where it can peek
    /// (`REVERB_LOG_PASS_THROUGH`, on by default; off keeps the envelopes, for comparison).
    pub pass_through: bool,
    /// Collective-aware logging (`REVERB_LOG_CAML`, off by default): a broadcast's payload
    /// is logged once, at its root (`crate::multicast`); a reduction's contribution to a
    /// parent other than the root, until the result is known (`crate::reduction`).
    pub caml: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            mode: LogMode::NONE,
            ring_capacity: 8 << 20,
            reorder_window: 4096,
            max_message: 4 << 20,
            durable_timeout: Duration::from_secs(10),
            send_log_limit: 256 << 20,
            unit: LogUnit::Node,
            det_log_limit: 1 << 20,
            max_unstable: 1 << 16,
            provider_tag: LOGGED_MESSAGE_TAG,
            teams: None,
            pass_through: true,
            caml: false,
        }
    }
}

impl LogConfig {
    /// The failure unit of every rank, which buddies are placed by: its team under
    /// `LogUnit::Team` with teams of whole nodes, else its node (`crate::team::failure_units`).
    pub fn failure_units(&self, node_of_rank: &[u32]) -> Vec<u32> {
        let teams = self.teams.as_ref().filter(|_| self.unit == LogUnit::Team);
        crate::team::failure_units(node_of_rank, teams)
    }

    /// Defaults overridden by the `REVERB_LOG*` variables that are set.
    pub fn from_env() -> Result<Self> {
        let env = Env::process();
        let mut cfg = LogConfig { mode: LogMode::from_env()?, ..LogConfig::default() };
        // Byte counts take the size grammar (`8m`); entry counts are plain integers.
        let sizes: [(&str, &mut usize); 3] = [
            ("REVERB_LOG_RING_BYTES", &mut cfg.ring_capacity),
            ("REVERB_LOG_MAX_MESSAGE", &mut cfg.max_message),
            ("REVERB_LOG_SEND_LOG_BYTES", &mut cfg.send_log_limit),
        ];
        for (name, field) in sizes {
            if let Some(n) = env.size(name)? {
                *field = n;
            }
        }
        let counts: [(&str, &mut usize); 3] = [
            ("REVERB_LOG_REORDER_WINDOW", &mut cfg.reorder_window),
            ("REVERB_LOG_DET_LOG_ENTRIES", &mut cfg.det_log_limit),
            ("REVERB_LOG_MAX_UNSTABLE", &mut cfg.max_unstable),
        ];
        for (name, field) in counts {
            if let Some(n) = env.int(name)? {
                *field = n;
            }
        }
        if let Some(on) = env.bool("REVERB_LOG_PASS_THROUGH")? {
            cfg.pass_through = on;
        }
        if let Some(on) = env.bool("REVERB_LOG_CAML")? {
            cfg.caml = on;
        }
        if let Some(timeout) = env.positive_duration("REVERB_LOG_DURABLE_TIMEOUT_MS")? {
            cfg.durable_timeout = timeout;
        }
        let unit = env.non_empty("REVERB_LOG_UNIT")?;
        if let Some(v) = &unit {
            cfg.unit = v.trim().parse()?;
        }
        if let Some(teams) = Teams::from_env()? {
            cfg.set_teams(teams, unit.is_some())?;
        }
        Ok(cfg)
    }

    /// Teams make the team the unit; a unit set explicitly to something else is an error.
    fn set_teams(&mut self, teams: Teams, unit_set: bool) -> Result<()> {
        if unit_set && self.unit != LogUnit::Team {
            return Err(LogError::InvalidArgument(format!(
                "REVERB_LOG_TEAMS with REVERB_LOG_UNIT={}: teams are the unit",
                self.unit
            )));
        }
        self.unit = LogUnit::Team;
        self.teams = Some(teams);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [LogMode; 4] =
        [LogMode::NONE, LogMode::PESSIMISTIC_RB, LogMode::PESSIMISTIC_SB, LogMode::CAUSAL];

    #[test]
    fn modes_parse_and_print() {
        for mode in ALL {
            assert_eq!(mode.as_str().parse::<LogMode>().ok(), Some(mode));
            assert_eq!(mode.to_string(), mode.as_str());
            assert!(mode.check_supported().is_ok());
        }
        let names: Vec<_> = ALL.iter().map(|m| m.as_str()).collect();
        assert_eq!(names, ["none", "pessimistic-rb", "pessimistic-sb", "causal"]);
        assert!(matches!("pessimistic".parse::<LogMode>(), Err(LogError::InvalidArgument(_))));
        assert!("".parse::<LogMode>().is_err());
        assert!(
            LogMode::CAUSAL.sender_logs_payloads()
                && LogMode::PESSIMISTIC_SB.sender_logs_payloads()
                && !LogMode::PESSIMISTIC_RB.sender_logs_payloads()
                && !LogMode::NONE.sender_logs_payloads()
        );
    }

    #[test]
    fn a_bad_mode_names_every_registered_one() {
        let Err(LogError::InvalidArgument(msg)) = "bogus".parse::<LogMode>() else { panic!("bogus parsed") };
        assert!(msg.ends_with("expected none, pessimistic-rb, pessimistic-sb or causal"), "{msg}");
    }

    #[test]
    fn units_parse_and_print() {
        for unit in [LogUnit::Node, LogUnit::Rank, LogUnit::Team] {
            assert_eq!(unit.as_str().parse::<LogUnit>().ok(), Some(unit));
        }
        assert!(matches!("host".parse::<LogUnit>(), Err(LogError::InvalidArgument(_))));
        assert_eq!(LogConfig::default().unit, LogUnit::Node);
        assert_eq!(LogConfig::default().mode, LogMode::NONE);
    }

    #[test]
    fn durable_timeout_must_be_positive_milliseconds() {
        let read = |value: &'static str| {
            let lookup =
                move |name: &str| (name == "REVERB_LOG_DURABLE_TIMEOUT_MS").then(|| value.to_string());
            Env::from_lookup(&lookup).positive_duration("REVERB_LOG_DURABLE_TIMEOUT_MS")
        };
        assert_eq!(read(" 250 ").ok().flatten(), Some(Duration::from_millis(250)));
        assert_eq!(read("2s").ok().flatten(), Some(Duration::from_secs(2)));
        for bad in ["0", "-1", "soon"] {
            assert!(read(bad).is_err(), "{bad:?}");
        }
    }
}
