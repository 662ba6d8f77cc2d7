//! A job across hosts as both sides see it: the front end (`reverb run --hosts`/`--slurm`)
//! and the per-host agents (`reverb agent`). The hosts and their ranks (`--hosts`,
//! `--hostfile`), the placement of ranks on hosts and simulated nodes, the lines an agent
//! prints that the front end reads, and the time bounds both sides agree on.
//!
//! A leaf: it imports neither the front end nor the agent, so either may import it.

use std::ops::Range;
use std::time::Duration;

use anyhow::{bail, Context, Result};

/// A host and how many ranks it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSlots {
    pub name: String,
    pub ranks: u32,
}

/// The hosts of a job, in rank order (`--hosts`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostList(pub Vec<HostSlots>);

/// `a:4,b:4` (a host without `:N` runs one rank).
pub fn parse_hosts(s: &str) -> std::result::Result<HostList, String> {
    let mut hosts = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (name, ranks) = match item.rsplit_once(':') {
            Some((n, r)) => (n, r.parse::<u32>().map_err(|e| format!("'{item}': rank count: {e}"))?),
            None => (item, 1),
        };
        let plain = |c: char| c.is_ascii_alphanumeric() || "-._".contains(c);
        if name.is_empty() || !name.chars().all(plain) || name.starts_with('-') {
            return Err(format!("'{item}': a host name is [A-Za-z0-9._-], not starting with '-'"));
        }
        if ranks == 0 {
            return Err(format!("'{item}': a host runs at least one rank"));
        }
        if hosts.iter().any(|h: &HostSlots| h.name == name) {
            return Err(format!("host '{name}' named twice"));
        }
        hosts.push(HostSlots { name: name.to_string(), ranks });
    }
    if hosts.is_empty() {
        return Err("no host named".into());
    }
    Ok(HostList(hosts))
}

/// A host file, as Open MPI's `--hostfile`: one host per line, `NAME slots=N` (or `NAME:N`,
/// or `NAME` for one rank), `#` starting a comment; the hosts in rank order.
pub fn parse_hostfile(path: &str) -> std::result::Result<HostList, String> {
    // A regular file of bounded size (not /dev/zero, not a FIFO).
    let text =
        crate::usage::read_input("--hostfile", std::path::Path::new(path)).map_err(|e| format!("{e:#}"))?;
    let mut items = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let name = words.next().unwrap_or("");
        let item = match (words.next(), words.next()) {
            (None, _) => name.to_string(),
            (Some(slots), None) => match slots.strip_prefix("slots=") {
                Some(n) => format!("{name}:{n}"),
                None => return Err(format!("{path}:{}: expected 'NAME slots=N', got '{line}'", n + 1)),
            },
            _ => return Err(format!("{path}:{}: expected 'NAME slots=N', got '{line}'", n + 1)),
        };
        items.push(item);
    }
    parse_hosts(&items.join(",")).map_err(|e| format!("{path}: {e}"))
}

/// `a:2,b:2`, as `--hosts` takes it.
pub(crate) fn host_list(hosts: &[HostSlots]) -> String {
    hosts.iter().map(|h| format!("{}:{}", h.name, h.ranks)).collect::<Vec<_>>().join(",")
}

/// Each host's ranks, in rank order: consecutive ranges from 0.
pub(crate) fn rank_ranges(hosts: &[HostSlots]) -> Vec<(String, Range<u32>)> {
    let mut first = 0;
    hosts
        .iter()
        .map(|h| {
            first += h.ranks;
            (h.name.clone(), first - h.ranks..first)
        })
        .collect()
}

/// Every host runs whole simulated nodes of `ranks_per_node` ranks.
pub(crate) fn check_whole_nodes(hosts: &[HostSlots], ranks_per_node: u32) -> Result<()> {
    if let Some(h) = hosts.iter().find(|h| h.ranks % ranks_per_node != 0) {
        bail!(
            "host {} runs {} rank(s), not whole nodes of {ranks_per_node} (--ranks-per-node)",
            h.name,
            h.ranks
        );
    }
    Ok(())
}

/// Partial redundancy across hosts: no two copies of a rank on one host (hosts in rank
/// order, as `--hosts` names them).
pub(crate) fn check_copies_spread(
    map: &reverb_runtime::replicas::ReplicaMap,
    hosts: &[HostSlots],
) -> Result<()> {
    let mut host_of = Vec::new();
    for (i, h) in hosts.iter().enumerate() {
        host_of.extend(std::iter::repeat_n(i as u32, h.ranks as usize));
    }
    let host = |p: u32| host_of.get(p as usize).copied().unwrap_or(u32::MAX);
    map.check_spread(host)
        .context("--redundancy across hosts: copies of a rank must be on different hosts")?;
    Ok(())
}

/// How the first host's agent announces where its rendezvous listens (`HOST:PORT`), for
/// `reverb run --hosts`, which gave it port 0 and starts the other agents once it knows.
pub const RENDEZVOUS_AT: &str = "reverb agent: rendezvous at ";

/// How the first host's agent's last line starts: the job ended (any other end of that agent
/// is a lost host).
pub const JOB_ENDED: &str = "reverb agent: job ended";

/// The first line `reverb run --hosts` writes to each agent's standard input; the end of
/// that input, after it, is a cancel (`reverb agent --front-stdin`).
pub const FRONT_HELLO: &str = "reverb run: front end";

/// How often an agent and the controller say they are alive, and how long silence means one
/// is lost (`REVERB_AGENT_HEARTBEAT_MS`, `REVERB_AGENT_TIMEOUT_S`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    pub heartbeat: Duration,
    pub timeout: Duration,
}

impl Timing {
    pub(crate) fn from_env() -> anyhow::Result<Timing> {
        let env = reverb_transport::config::Env::process();
        let heartbeat =
            env.positive_duration("REVERB_AGENT_HEARTBEAT_MS")?.unwrap_or(Duration::from_millis(500));
        let timeout = env.positive_duration("REVERB_AGENT_TIMEOUT_S")?.unwrap_or(Duration::from_secs(10));
        if timeout <= heartbeat * 2 {
            anyhow::bail!(
                "REVERB_AGENT_TIMEOUT_S ({timeout:?}) must exceed twice REVERB_AGENT_HEARTBEAT_MS ({heartbeat:?})"
            );
        }
        Ok(Timing { heartbeat, timeout })
    }
}

/// How long the rendezvous (and the loggers') waits for the ranks to leave once the job ended.
pub(crate) const LINGER: Duration = Duration::from_secs(10);

/// How long `reverb run --hosts` lets a job with `--timeout` run before it stops every host
/// itself: the controller's bound (the timeout and twice the agent timeout), its rendezvous'
/// lingers, and as much again, so that a controller that never ends the job is not waited for.
pub(crate) fn front_bound(timeout: Duration) -> Result<Duration> {
    let timing = Timing::from_env()?;
    Ok(timeout + timing.timeout * 4 + LINGER * 4)
}

/// `--timeout SECS` as a duration (a positive number of seconds).
pub(crate) fn parse_timeout(secs: Option<f64>) -> Result<Option<Duration>> {
    secs.map(|s| {
        Duration::try_from_secs_f64(s)
            .ok()
            .filter(|d| !d.is_zero())
            .with_context(|| format!("--timeout {s}: expected a positive number of seconds"))
    })
    .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_lists_parse_and_refuse_what_a_shell_would_misread() {
        let h = parse_hosts("a:4, b.example:2,c").expect("valid list").0;
        assert_eq!(
            h.iter().map(|h| (h.name.as_str(), h.ranks)).collect::<Vec<_>>(),
            [("a", 4), ("b.example", 2), ("c", 1)]
        );
        for bad in ["", "a:0", "a:x", "a;rm:2", "-o:1", "a:1,a:2", "$(x):1"] {
            assert!(parse_hosts(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn host_files_take_open_mpi_slots_and_comments() {
        let dir = std::env::temp_dir().join(format!("reverb-hostfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("hosts");
        std::fs::write(&file, "# the job\na slots=4\n\nb:2   # two\nc\n").unwrap();
        let h = parse_hostfile(file.to_str().unwrap()).expect("valid file").0;
        assert_eq!(
            h.iter().map(|h| (h.name.as_str(), h.ranks)).collect::<Vec<_>>(),
            [("a", 4), ("b", 2), ("c", 1)]
        );
        for bad in ["a slots=x\n", "a cpus=2\n", "a slots=2 extra\n", "# nothing\n"] {
            std::fs::write(&file, bad).unwrap();
            assert!(parse_hostfile(file.to_str().unwrap()).is_err(), "{bad:?} accepted");
        }
        assert!(parse_hostfile(dir.join("missing").to_str().unwrap()).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn ranks_are_placed_on_hosts_in_order_and_round_trip_as_a_list() {
        let hosts = parse_hosts("a:4,b:2").expect("valid list").0;
        let ranges: Vec<_> = rank_ranges(&hosts).into_iter().map(|(n, r)| (n, r.start, r.end)).collect();
        assert_eq!(ranges, [("a".to_string(), 0, 4), ("b".to_string(), 4, 6)]);
        assert_eq!(parse_hosts(&host_list(&hosts)).expect("round trip").0, hosts);
        assert!(check_whole_nodes(&hosts, 2).is_ok());
        assert!(check_whole_nodes(&hosts, 4).is_err());
    }
}
