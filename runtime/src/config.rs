//! The runtime's settings, from `REVERB_*` variables (or set directly).

use std::path::PathBuf;
use std::time::Duration;

use reverb_ckpt::{CkptConfig, RsLayout};
use reverb_logger::LogConfig;
use reverb_transport::config::{env_path, Env};

use super::error::{Result, RuntimeError};
use super::fault::FaultPlan;

/// Settings of the runtime, from `REVERB_*` variables or set directly.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// The logger's settings: protocol, failure unit, teams (`REVERB_LOG*`).
    pub log: LogConfig,
    /// `None`: no checkpoints (`REVERB_CKPT=off`); a restarted rank re-executes from the start.
    /// `REVERB_CKPT`: off, local, buddy, parity (Reed-Solomon only) or rs (buddy + Reed-Solomon).
    pub ckpt: Option<CkptConfig>,
    /// `REVERB_CKPT` unset: the levels the job's nodes allow (rs from 4 nodes, buddy from 2,
    /// none on one node).
    pub ckpt_auto: bool,
    /// How long a receive waits before it checks for dead peers (`REVERB_DETECT_MS`).
    pub detect_interval: Duration,
    /// Bound on waiting for a dead rank to rejoin (`REVERB_REJOIN_TIMEOUT_MS`).
    pub rejoin_timeout: Duration,
    /// After an error a dead peer could explain, how long to wait for the provider to see
    /// the death before the error is final (`REVERB_DETECT_GRACE_MS`).
    pub detect_grace: Duration,
    /// Bound on one receive with every peer alive (`REVERB_RECV_TIMEOUT_MS`).
    pub recv_timeout: Duration,
    /// Where each rank writes its JSON report at `finalize` (`REVERB_RUNTIME_REPORT`).
    pub report_dir: Option<PathBuf>,
    /// Fault injection (`REVERB_FAULT*`, only with the `fault-injection` feature).
    pub faults: FaultPlan,
    /// Partial redundancy (`REVERB_REDUNDANCY`, `REVERB_VIRTUAL_RANKS`): the job's processes
    /// are copies of fewer virtual ranks (`replicas`); None: every process is its own rank.
    pub redundancy: Option<Redundancy>,
    /// Over-decomposition (`REVERB_OBJECT_RANKS`, set by `reverb run --objects`): this process
    /// hosts several ranks as threads; None: it is one rank.
    pub objects: Option<ObjectHost>,
    /// The rank this runtime joins as, in place of the environment's (one object of an
    /// [`ObjectHost`]; set by `objects::run_objects`).
    pub object_rank: Option<u32>,
}

/// The objects (virtual ranks) one process hosts, and where they run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectHost {
    /// The ranks, one thread each (`REVERB_OBJECT_RANKS`, a comma list).
    pub ranks: Vec<u32>,
    /// The core (processing element) they run on (`REVERB_OBJECT_CPU`).
    pub cpu: Option<usize>,
    /// A helper of a parallel recovery: the objects' home core, where each object's thread
    /// moves after its first checkpoint (`REVERB_OBJECT_HOME_CPU`).
    pub home_cpu: Option<usize>,
}

/// A redundant job's shape: `virtual_ranks` ranks at `degree` copies (1.0..=3.0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Redundancy {
    /// Copies per virtual rank on average (eq. 4's r).
    pub degree: f64,
    /// The application's ranks.
    pub virtual_ranks: u32,
}

impl RuntimeConfig {
    /// Reads every setting from the process's environment; a malformed value is an error.
    pub fn from_env() -> Result<Self> {
        let log = LogConfig::from_env()?;
        let env = Env::process();
        let requested = env.non_empty("REVERB_CKPT")?;
        Ok(RuntimeConfig {
            log,
            ckpt_auto: requested.is_none(),
            ckpt: ckpt_levels(requested.as_deref(), env.size("REVERB_CKPT_SLOT_BYTES")?.unwrap_or(4 << 20))?,
            detect_interval: positive_ms(&env, "REVERB_DETECT_MS", 50)?,
            rejoin_timeout: positive_ms(&env, "REVERB_REJOIN_TIMEOUT_MS", 30_000)?,
            detect_grace: positive_ms(&env, "REVERB_DETECT_GRACE_MS", 2_000)?,
            recv_timeout: positive_ms(&env, "REVERB_RECV_TIMEOUT_MS", 120_000)?,
            report_dir: env_path("REVERB_RUNTIME_REPORT")?,
            faults: FaultPlan::from_env()?,
            redundancy: redundancy(&env)?,
            objects: object_host(&env)?,
            object_rank: None,
        })
    }
}

/// The job's redundancy as this process's environment gives it (what `RuntimeConfig::from_env`
/// reads), for a launcher.
pub fn redundancy_from_env() -> Result<Option<Redundancy>> {
    redundancy(&Env::process())
}

/// `REVERB_REDUNDANCY` (a degree) with `REVERB_VIRTUAL_RANKS` (required with it).
fn redundancy(env: &Env) -> Result<Option<Redundancy>> {
    let Some(text) = env.non_empty("REVERB_REDUNDANCY")? else { return Ok(None) };
    let degree: f64 = text.trim().parse().map_err(|_| {
        RuntimeError::InvalidArgument(format!("REVERB_REDUNDANCY={text:?}: expected a degree in 1..=3"))
    })?;
    let virtual_ranks = env.int::<u32>("REVERB_VIRTUAL_RANKS")?.ok_or_else(|| {
        RuntimeError::InvalidArgument(
            "REVERB_REDUNDANCY needs REVERB_VIRTUAL_RANKS (the application's ranks)".into(),
        )
    })?;
    Ok(Some(Redundancy { degree, virtual_ranks }))
}

/// `REVERB_OBJECT_RANKS` with its cores (`REVERB_OBJECT_CPU`, `REVERB_OBJECT_HOME_CPU`).
fn object_host(env: &Env) -> Result<Option<ObjectHost>> {
    let Some(text) = env.non_empty("REVERB_OBJECT_RANKS")? else { return Ok(None) };
    let ranks = text
        .split(',')
        .map(|r| r.trim().parse::<u32>())
        .collect::<std::result::Result<Vec<u32>, _>>()
        .ok()
        .filter(|r| !r.is_empty())
        .ok_or_else(|| {
            RuntimeError::InvalidArgument(format!(
                "REVERB_OBJECT_RANKS={text:?}: expected a comma list of ranks"
            ))
        })?;
    let cpu = env.int::<usize>("REVERB_OBJECT_CPU")?;
    let home_cpu = env.int::<usize>("REVERB_OBJECT_HOME_CPU")?;
    Ok(Some(ObjectHost { ranks, cpu, home_cpu }))
}

/// The checkpoint levels `REVERB_CKPT` asks for (unset: all, trimmed at init to the nodes).
fn ckpt_levels(requested: Option<&str>, slot_len: usize) -> Result<Option<CkptConfig>> {
    let levels = |buddy: bool, parity: Option<RsLayout>| {
        Some(CkptConfig { slot_len, buddy, parity, ..CkptConfig::default() })
    };
    Ok(match requested.unwrap_or("rs") {
        "off" => None,
        "local" => levels(false, None),
        "buddy" => levels(true, None),
        "parity" => levels(false, Some(RsLayout::default())),
        "rs" => levels(true, Some(RsLayout::default())),
        other => {
            return Err(RuntimeError::InvalidArgument(format!(
                "REVERB_CKPT={other:?}: expected off, local, buddy, parity or rs"
            )))
        }
    })
}

/// A duration > 0 (a bare number is milliseconds: the names end in `_MS`).
fn positive_ms(env: &Env, name: &str, default_ms: u64) -> Result<Duration> {
    Ok(env.positive_duration(name)?.unwrap_or(Duration::from_millis(default_ms)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host_of(vars: &[(&str, &str)]) -> Result<Option<ObjectHost>> {
        let get = |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string());
        object_host(&Env::from_lookup(&get))
    }

    #[test]
    fn object_ranks_and_cores_are_read_and_malformed_lists_refused() {
        assert_eq!(host_of(&[]).ok(), Some(None));
        let host = host_of(&[
            ("REVERB_OBJECT_RANKS", "4, 5,6"),
            ("REVERB_OBJECT_CPU", "1"),
            ("REVERB_OBJECT_HOME_CPU", "0"),
        ]);
        assert_eq!(
            host.ok(),
            Some(Some(ObjectHost { ranks: vec![4, 5, 6], cpu: Some(1), home_cpu: Some(0) }))
        );
        for bad in ["4,x", ",", "-1"] {
            let err = host_of(&[("REVERB_OBJECT_RANKS", bad)]).expect_err(bad).to_string();
            assert!(err.contains("comma list of ranks"), "{err}");
        }
    }
}
