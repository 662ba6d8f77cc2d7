//! Job discovery from the launcher's or a resource manager's environment.
//!
//! Sources, first match wins: reverb's launcher (`REVERB_RANK`/`REVERB_SIZE`), Slurm
//! (`SLURM_PROCID`/`SLURM_NTASKS`), Open MPI (`OMPI_COMM_WORLD_RANK`/`_SIZE`), PMI
//! (`PMI_RANK`/`PMI_SIZE`). The parser takes a lookup closure so it is testable without
//! touching the process environment.

use std::time::Duration;

use super::JobInfo;
use crate::config::parse::{parse_int, ConfigError};
use crate::config::Env;
use crate::error::{Result, TransportError};

/// Names of the variables reverb reads and its launcher sets.
pub mod vars {
    /// This process's rank, `0..REVERB_SIZE`.
    pub const RANK: &str = "REVERB_RANK";
    /// Ranks in the job.
    pub const SIZE: &str = "REVERB_SIZE";
    /// The node this rank runs on (simulated or real).
    pub const NODE: &str = "REVERB_NODE";
    /// This rank's index among its node's ranks.
    pub const LOCAL_RANK: &str = "REVERB_LOCAL_RANK";
    /// Ranks per node.
    pub const RANKS_PER_NODE: &str = "REVERB_RANKS_PER_NODE";
    /// Names the job's shared files: 1-64 characters of `[A-Za-z0-9._-]`.
    pub const JOB_ID: &str = "REVERB_JOB_ID";
    /// How often this rank was respawned (0 for the first start).
    pub const INCARNATION: &str = "REVERB_INCARNATION";
    /// `host:port` of the rendezvous server.
    pub const ROOT: &str = "REVERB_ROOT";
    /// Job secret presented on every bootstrap connection.
    pub const JOB_TOKEN: &str = "REVERB_JOB_TOKEN";
    /// `external`: the launcher hosts the server; otherwise rank 0 starts it at `REVERB_ROOT`.
    pub const BOOT_SERVER: &str = "REVERB_BOOT_SERVER";
    /// Seconds to wait for the rendezvous (connect, and each collective). Default 60; a bare
    /// number is seconds, `500ms` or `2.5s` also work.
    pub const BOOT_TIMEOUT_S: &str = "REVERB_BOOT_TIMEOUT_S";
}

/// The rendezvous timeout when `REVERB_BOOT_TIMEOUT_S` is unset.
pub const DEFAULT_BOOT_TIMEOUT: Duration = Duration::from_secs(60);

fn bad(name: &str, value: &str, why: &str) -> TransportError {
    ConfigError::out_of_range(name, value, why).into()
}

/// Looks up `name` (registered, or a resource manager's) and parses it as a u32; `Ok(None)`
/// when unset.
fn num(env: &Env<'_>, name: &str) -> Result<Option<u32>> {
    if name.starts_with("REVERB_") {
        return Ok(env.int::<u32>(name)?);
    }
    match env.foreign(name) {
        None => Ok(None),
        Some(v) => parse_int::<u32>(&v).map(Some).map_err(|e| ConfigError::invalid(name, &v, e).into()),
    }
}

/// Rank and size from one source; both must be present if either is.
fn pair(env: &Env<'_>, r: &str, s: &str) -> Result<Option<(u32, u32)>> {
    match (num(env, r)?, num(env, s)?) {
        (None, None) => Ok(None),
        (Some(rank), Some(size)) => {
            if size == 0 {
                return Err(TransportError::Config(format!("{s}=0: a job has at least one rank")));
            }
            if rank >= size {
                return Err(TransportError::Config(format!("{r}={rank} is not below {s}={size}")));
            }
            Ok(Some((rank, size)))
        }
        (Some(_), None) => Err(TransportError::Config(format!("{r} is set but {s} is not"))),
        (None, Some(_)) => Err(TransportError::Config(format!("{s} is set but {r} is not"))),
    }
}

/// Leading integer of Slurm's `SLURM_TASKS_PER_NODE` (`"4(x2),3"` → 4).
fn leading_number(s: &str) -> Option<u32> {
    let digits: String = s.trim().chars().take_while(|c| c.is_ascii_digit()).collect();
    digits.parse().ok().filter(|&n| n > 0)
}

/// FNV-1a; only names shared-memory segments, not a security boundary.
fn fnv1a(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes().chain(std::iter::once(0)) {
            h ^= b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

fn check_job_id(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(bad(vars::JOB_ID, id, "expected 1-64 characters of [A-Za-z0-9._-]"))
    }
}

impl JobInfo {
    /// Reads the process environment. `Ok(None)` when no launcher variables are present.
    pub fn from_env() -> Result<Option<JobInfo>> {
        JobInfo::from_lookup(|k| std::env::var(k).ok())
    }

    /// Like [`JobInfo::from_env`], with `get` standing in for the environment.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Option<JobInfo>> {
        let env = Env::from_lookup(&get);
        let env = &env;
        // (rank, size, node, local_rank, ranks_per_node), each optional beyond rank/size.
        let found: (u32, u32, Option<u32>, Option<u32>, Option<u32>);
        if let Some((rank, size)) = pair(env, vars::RANK, vars::SIZE)? {
            found = (
                rank,
                size,
                num(env, vars::NODE)?,
                num(env, vars::LOCAL_RANK)?,
                num(env, vars::RANKS_PER_NODE)?,
            );
        } else if let Some((rank, size)) = pair(env, "SLURM_PROCID", "SLURM_NTASKS")? {
            let rpn = match num(env, "SLURM_NTASKS_PER_NODE") {
                Ok(Some(n)) => Some(n),
                _ => env.foreign("SLURM_TASKS_PER_NODE").as_deref().and_then(leading_number),
            };
            found = (rank, size, num(env, "SLURM_NODEID")?, num(env, "SLURM_LOCALID")?, rpn);
        } else if let Some((rank, size)) = pair(env, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")? {
            let local = num(env, "OMPI_COMM_WORLD_LOCAL_RANK")?;
            let rpn = num(env, "OMPI_COMM_WORLD_LOCAL_SIZE")?;
            found = (rank, size, None, local, rpn);
        } else if let Some((rank, size)) = pair(env, "PMI_RANK", "PMI_SIZE")? {
            let local = match num(env, "PMI_LOCAL_RANK")? {
                Some(l) => Some(l),
                None => num(env, "MPI_LOCALRANKID")?,
            };
            let rpn = match num(env, "PMI_LOCAL_SIZE")? {
                Some(n) => Some(n),
                None => num(env, "MPI_LOCALNRANKS")?,
            };
            found = (rank, size, None, local, rpn);
        } else {
            return Ok(None);
        }
        let (rank, size, node, local_rank, rpn) = found;

        // Without per-node information, the whole job is one node.
        let ranks_per_node = rpn.unwrap_or(size).min(size);
        if ranks_per_node == 0 {
            return Err(TransportError::Config("ranks per node is 0".into()));
        }
        let node = node.unwrap_or(rank / ranks_per_node);
        let local_rank = local_rank.unwrap_or(rank % ranks_per_node);
        let nodes = size.div_ceil(ranks_per_node);
        if local_rank >= ranks_per_node {
            return Err(TransportError::Config(format!(
                "local rank {local_rank} is not below ranks per node {ranks_per_node}"
            )));
        }
        // Resource managers may place fewer ranks on some nodes, so `nodes` is only a bound
        // for our own launcher's block layout.
        if node >= size {
            return Err(TransportError::Config(format!("node {node} is not below size {size}")));
        }
        if env.raw(vars::RANK)?.is_some() && node >= nodes {
            return Err(bad(vars::NODE, &node.to_string(), &format!("the job has {nodes} nodes")));
        }

        let job_id = if let Some(id) = env.raw(vars::JOB_ID)? {
            check_job_id(&id)?;
            id
        } else if let Some(id) = env.foreign("SLURM_JOB_ID").filter(|s| !s.is_empty()) {
            let id = format!("slurm-{}", id.trim());
            check_job_id(&id)?;
            id
        } else {
            let root = env.raw(vars::ROOT)?.unwrap_or_default();
            let token = env.raw(vars::JOB_TOKEN)?.unwrap_or_default();
            format!("h{:016x}", fnv1a(&[&root, &token]))
        };
        let incarnation = num(env, vars::INCARNATION)?.unwrap_or(0);

        Ok(Some(JobInfo { rank, size, node, local_rank, ranks_per_node, job_id, incarnation }))
    }
}

/// Where and how to reach the rendezvous, read from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootParams {
    /// `host:port` of the rendezvous server (`REVERB_ROOT`).
    pub root: String,
    /// The job secret (`REVERB_JOB_TOKEN`), 1 to `wire::MAX_TOKEN` bytes.
    pub token: String,
    /// Bound on connecting and on each collective (`REVERB_BOOT_TIMEOUT_S`).
    pub timeout: Duration,
    /// The launcher hosts the server (`REVERB_BOOT_SERVER=external`).
    pub external_server: bool,
}

impl BootParams {
    /// Reads the parameters through `get` (a stand-in for the environment).
    /// [`TransportError::Config`] when `REVERB_ROOT` or `REVERB_JOB_TOKEN` is missing or the token
    /// is too long; a [`TransportError::Env`] for a bad timeout or `REVERB_BOOT_SERVER`.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<BootParams> {
        let env = Env::from_lookup(&get);
        let root = env
            .non_empty(vars::ROOT)?
            .ok_or_else(|| TransportError::Config(format!("{} (host:port) is not set", vars::ROOT)))?;
        let token = env.raw(vars::JOB_TOKEN)?.filter(|s| !s.is_empty()).ok_or_else(|| {
            TransportError::Config(format!(
                "{} is not set; every bootstrap connection needs it",
                vars::JOB_TOKEN
            ))
        })?;
        if token.len() > super::wire::MAX_TOKEN {
            return Err(TransportError::Config(format!(
                "{} is longer than {} bytes",
                vars::JOB_TOKEN,
                super::wire::MAX_TOKEN
            )));
        }
        let timeout = match env.positive_duration(vars::BOOT_TIMEOUT_S)? {
            None => DEFAULT_BOOT_TIMEOUT,
            Some(t) if t.as_secs() < 1_000_000_000 => t,
            Some(_) => {
                let value = env.raw(vars::BOOT_TIMEOUT_S)?.unwrap_or_default();
                return Err(bad(vars::BOOT_TIMEOUT_S, &value, "expected fewer than 1e9 seconds"));
            }
        };
        let external_server = match env.raw(vars::BOOT_SERVER)?.as_deref() {
            None | Some("") => false,
            Some("external") => true,
            Some(other) => return Err(bad(vars::BOOT_SERVER, other, "expected \"external\" or unset")),
        };
        Ok(BootParams { root: root.trim().to_string(), token, timeout, external_server })
    }

    /// [`BootParams::from_lookup`] on the process environment.
    pub fn from_env() -> Result<BootParams> {
        BootParams::from_lookup(|k| std::env::var(k).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let v: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| v.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn boot_timeout_takes_seconds_or_a_unit() {
        let timeout = |v: &'static str| {
            BootParams::from_lookup(env(&[
                ("REVERB_ROOT", "h:1"),
                ("REVERB_JOB_TOKEN", "t"),
                ("REVERB_BOOT_TIMEOUT_S", v),
            ]))
            .map(|p| p.timeout)
        };
        assert_eq!(timeout("20").ok(), Some(Duration::from_secs(20)));
        assert_eq!(timeout("2.5").ok(), Some(Duration::from_millis(2500)));
        assert_eq!(timeout("500ms").ok(), Some(Duration::from_millis(500)));
        for bad in ["0", "1m", "-1", "soon", "1e10", "2000000000"] {
            let err = timeout(bad).unwrap_err().to_string();
            assert!(err.starts_with("REVERB_BOOT_TIMEOUT_S="), "{bad}: {err}");
        }
    }

    #[test]
    fn slurm_tasks_per_node_forms() {
        assert_eq!(leading_number("4(x2),3"), Some(4));
        assert_eq!(leading_number("2"), Some(2));
        assert_eq!(leading_number("x"), None);
    }

    #[test]
    fn hashed_job_id_is_shared_by_all_ranks() {
        let a = JobInfo::from_lookup(env(&[
            ("PMI_RANK", "0"),
            ("PMI_SIZE", "2"),
            ("REVERB_ROOT", "h:1"),
            ("REVERB_JOB_TOKEN", "t"),
        ]))
        .unwrap()
        .unwrap();
        let b = JobInfo::from_lookup(env(&[
            ("PMI_RANK", "1"),
            ("PMI_SIZE", "2"),
            ("REVERB_ROOT", "h:1"),
            ("REVERB_JOB_TOKEN", "t"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(a.job_id, b.job_id);
        assert!(a.job_id.starts_with('h'));
    }
}
