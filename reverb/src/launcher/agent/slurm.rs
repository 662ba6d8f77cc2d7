//! An agent started by Slurm (`srun -N H --ntasks-per-node=1 reverb agent -- APP`): which host
//! it is and the job's shape, from Slurm's environment. Hosts are the step's node list in
//! order; the last `--spares` of them idle as spares; the first hosts the rendezvous and the
//! controller.

use anyhow::{bail, Context, Result};
use reverb_transport::config::env_get;

/// What Slurm tells an agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlurmView {
    pub hosts: Vec<String>,
    /// This agent's host, an index into `hosts`.
    pub node: usize,
    /// `JOB.STEP`, the same for every agent of the step.
    pub step: String,
    /// CPUs Slurm gave this task (`SLURM_CPUS_PER_TASK`, else `SLURM_CPUS_ON_NODE`).
    pub cpus: Option<u32>,
}

fn need(name: &str) -> Result<String> {
    env_get(name)?.filter(|v| !v.is_empty()).with_context(|| {
        format!("{name} is not set: run `reverb agent` under srun, or through `reverb run --hosts`")
    })
}

impl SlurmView {
    /// Reads Slurm's environment.
    pub(crate) fn from_env() -> Result<SlurmView> {
        let list = match env_get("SLURM_STEP_NODELIST")?.filter(|v| !v.is_empty()) {
            Some(l) => l,
            None => need("SLURM_JOB_NODELIST")?,
        };
        let hosts = expand_nodelist(&list).map_err(|e| anyhow::anyhow!("Slurm node list '{list}': {e}"))?;
        let node: usize = need("SLURM_NODEID")?.parse().context("SLURM_NODEID")?;
        if node >= hosts.len() {
            bail!("SLURM_NODEID {node} is outside the node list '{list}'");
        }
        let step = format!("{}.{}", need("SLURM_JOB_ID")?, env_get("SLURM_STEP_ID")?.unwrap_or_default());
        let cpu = |name: &str| -> Result<Option<u32>> {
            Ok(env_get(name)?.and_then(|v| v.split(['(', ',']).next().and_then(|n| n.trim().parse().ok())))
        };
        let cpus = match cpu("SLURM_CPUS_PER_TASK")? {
            Some(c) => Some(c),
            None => cpu("SLURM_CPUS_ON_NODE")?,
        };
        Ok(SlurmView { hosts, node, step, cpus })
    }

    /// A port for the rendezvous that every agent of the step derives alike.
    pub(crate) fn port(&self) -> u16 {
        let h = self
            .step
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        20_000 + (h % 40_000) as u16
    }
}

/// Expands Slurm's compressed host list: `n[1-3,7],login,gpu[01-02]` is n1 n2 n3 n7 login
/// gpu01 gpu02 (zero padding kept).
pub(crate) fn expand_nodelist(list: &str) -> std::result::Result<Vec<String>, String> {
    let mut hosts = Vec::new();
    let mut rest = list.trim();
    while !rest.is_empty() {
        // An item ends at a comma outside brackets.
        let mut depth = 0;
        let end = rest
            .char_indices()
            .find(|&(_, c)| {
                depth += match c {
                    '[' => 1,
                    ']' => -1,
                    _ => 0,
                };
                c == ',' && depth == 0
            })
            .map_or(rest.len(), |(i, _)| i);
        expand_item(&rest[..end], &mut hosts)?;
        rest = rest.get(end + 1..).unwrap_or("");
    }
    if hosts.is_empty() {
        return Err("no host".into());
    }
    Ok(hosts)
}

fn expand_item(item: &str, out: &mut Vec<String>) -> std::result::Result<(), String> {
    let Some((prefix, ranges)) = item.split_once('[') else {
        if item.is_empty() || item.contains(']') {
            return Err(format!("bad item '{item}'"));
        }
        out.push(item.to_string());
        return Ok(());
    };
    let Some(ranges) = ranges.strip_suffix(']') else {
        return Err(format!("'{item}': a bracket range must end the item"));
    };
    for range in ranges.split(',') {
        let (a, b) = range.split_once('-').unwrap_or((range, range));
        let parse = |x: &str| x.parse::<u64>().map_err(|e| format!("'{item}': '{x}': {e}"));
        let (lo, hi) = (parse(a)?, parse(b)?);
        if hi < lo || hi - lo > 65_536 {
            return Err(format!("'{item}': bad range {range}"));
        }
        for n in lo..=hi {
            out.push(format!("{prefix}{n:0width$}", width = a.len()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_lists_expand_as_scontrol_show_hostnames() {
        let got = expand_nodelist("n[1-3,7],login,gpu[08-10]").unwrap();
        assert_eq!(got, ["n1", "n2", "n3", "n7", "login", "gpu08", "gpu09", "gpu10"]);
        assert_eq!(expand_nodelist("sa,sb").unwrap(), ["sa", "sb"]);
        assert_eq!(expand_nodelist("s[a]").unwrap_err(), "'s[a]': 'a': invalid digit found in string");
        for bad in ["", "n[1-", "n[3-1]", "n]", "n[1]x"] {
            assert!(expand_nodelist(bad).is_err(), "{bad:?} accepted");
        }
    }
}
