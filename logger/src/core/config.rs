//! The logger core's configuration (from the launcher's environment) and its exit summary.

use std::path::PathBuf;
use std::time::Duration;

use reverb_transport::config::{env_path, Env};
use reverb_transport::Rank;

use super::placement::Placement;
use super::{env_parse, fault, vars, CoreError, DEFAULT_HEARTBEAT};

#[derive(Debug, Clone)]
pub struct LoggerCoreConfig {
    /// Base path of the node segment (`REVERB_LOGGER_SEGMENT`).
    pub segment_base: String,
    /// Payload lanes (the node's ranks).
    pub lanes: u64,
    pub lane_bytes: u64,
    pub detq_entries: u64,
    /// Data bytes of each hosted ring.
    pub ring_bytes: usize,
    pub heartbeat: Duration,
    pub placement: Placement,
    pub cpu: Option<usize>,
    pub stop_on_eof: bool,
    pub dump_dir: Option<PathBuf>,
    /// Bound of the drain at stop and of waiting for the nodes it hosts to stop.
    pub drain_timeout: Duration,
    /// The launcher respawns failed nodes: a dead related logger is awaited back.
    pub expect_rejoin: bool,
    /// How long a dead related logger is awaited back (and a hello awaited).
    pub rejoin_timeout: Duration,
}

impl LoggerCoreConfig {
    /// Reads the logger core's variables. `node_ranks` is the node's rank count as the
    /// launcher placed them (`REVERB_RANKS_PER_NODE`, read by the caller): the payload lanes
    /// when `REVERB_LOGGER_LANES` does not say.
    pub fn from_env(node_ranks: u64) -> Result<Self, CoreError> {
        fault::refuse_unless_built_in()?;
        let env = Env::process();
        let segment_base = env.raw(vars::SEGMENT)?.ok_or_else(|| {
            CoreError::Config(format!("{} is not set (the launcher sets it)", vars::SEGMENT))
        })?;
        let lanes = env_parse::<u64>(vars::LANES)?.unwrap_or(node_ranks);
        let cfg = LoggerCoreConfig {
            segment_base,
            lanes,
            lane_bytes: env.size(vars::LANE_BYTES)?.map_or(1 << 20, |n| n as u64),
            detq_entries: env_parse(vars::DETQ_ENTRIES)?.unwrap_or(1 << 16),
            ring_bytes: env.size(vars::RING_BYTES)?.unwrap_or(16 << 20),
            heartbeat: env.duration(vars::HEARTBEAT_MS)?.unwrap_or(DEFAULT_HEARTBEAT),
            placement: env_parse(vars::PLACEMENT)?.unwrap_or(Placement::SharedUnpinned),
            cpu: env_parse(vars::CPU)?,
            stop_on_eof: env.bool(vars::STOP_ON_EOF)?.unwrap_or(false),
            dump_dir: env_path(vars::DUMP_DIR)?,
            drain_timeout: Duration::from_secs(10),
            expect_rejoin: env_parse::<u32>(vars::RESPAWN)?.unwrap_or(0) > 0,
            rejoin_timeout: env.duration(vars::REJOIN_TIMEOUT_S)?.unwrap_or(Duration::from_secs(30)),
        };
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<(), CoreError> {
        if self.heartbeat < Duration::from_millis(20) {
            return Err(CoreError::Config(format!("{}: at least 20 ms", vars::HEARTBEAT_MS)));
        }
        if self.ring_bytes == 0
            || !self.ring_bytes.is_multiple_of(8)
            || (self.ring_bytes as u64) < 2 * self.lane_bytes
        {
            return Err(CoreError::Config(format!(
                "{}={} must be a multiple of 8 and at least twice {}={} (a frame must always fit)",
                vars::RING_BYTES,
                self.ring_bytes,
                vars::LANE_BYTES,
                self.lane_bytes
            )));
        }
        Ok(())
    }
}

/// What a logger core did, returned when it exits.
#[derive(Debug, Clone, Default)]
pub struct LoggerSummary {
    pub node: Rank,
    pub buddy: Rank,
    pub determinants: u64,
    pub payloads: u64,
    pub ring_bytes_written: u64,
    pub buddy_dead: bool,
    /// What could not be made durable (buddy dead, or the drain bound passed).
    pub leftover_determinants: u64,
    pub leftover_payload_bytes: u64,
    /// Times the buddy came back (respawned) and the log was written again into its ring.
    pub buddy_rejoins: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_is_checked() {
        let cfg = LoggerCoreConfig {
            segment_base: "/nonexistent/x".into(),
            lanes: 1,
            lane_bytes: 4096,
            detq_entries: 16,
            ring_bytes: 4096,
            heartbeat: DEFAULT_HEARTBEAT,
            placement: Placement::SharedUnpinned,
            cpu: None,
            stop_on_eof: false,
            dump_dir: None,
            drain_timeout: Duration::from_secs(1),
            expect_rejoin: false,
            rejoin_timeout: Duration::from_secs(1),
        };
        assert!(cfg.validate().is_err(), "a ring smaller than two lanes' worth");
        assert!(LoggerCoreConfig { ring_bytes: 8192, ..cfg.clone() }.validate().is_ok());
        assert!(LoggerCoreConfig { ring_bytes: 8192, heartbeat: Duration::from_millis(1), ..cfg }
            .validate()
            .is_err());
    }
}
