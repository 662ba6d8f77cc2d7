//! An agent started by Slurm (`srun -N H --ntasks-per-node=1 reverb agent -- APP`): which host
//! it is and the job's shape, from Slurm's environment. Hosts are the step's node list in
//! order; the last `--spares` of them idle as spares; the first hosts the rendezvous and the
//! controller.

use anyhow::{bail, Context, Result};
use reverb_transport::config::Env;

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

/// A Slurm variable (not ours: read as a foreign name).
fn slurm_var(env: &Env<'_>, name: &str) -> Option<String> {
    env.foreign(name).filter(|v| !v.is_empty())
}

fn need(env: &Env<'_>, name: &str) -> Result<String> {
    slurm_var(env, name).with_context(|| {
        format!("{name} is not set: run `reverb agent` under srun, or through `reverb run --hosts`")
    })
}

impl SlurmView {
    /// Reads Slurm's environment.
    pub(crate) fn from_env(env: &Env<'_>) -> Result<SlurmView> {
        let list = match slurm_var(env, "SLURM_STEP_NODELIST") {
            Some(l) => l,
            None => need(env, "SLURM_JOB_NODELIST")?,
        };
        let hosts = expand_nodelist(&list).map_err(|e| anyhow::anyhow!("Slurm node list '{list}': {e}"))?;
        let node: usize = need(env, "SLURM_NODEID")?.parse().context("SLURM_NODEID")?;
        if node >= hosts.len() {
            bail!("SLURM_NODEID {node} is outside the node list '{list}'");
        }
        let step =
            format!("{}.{}", need(env, "SLURM_JOB_ID")?, slurm_var(env, "SLURM_STEP_ID").unwrap_or_default());
        let cpu = |name: &str| -> Option<u32> {
            slurm_var(env, name).and_then(|v| v.split(['(', ',']).next().and_then(|n| n.trim().parse().ok()))
        };
        let cpus = cpu("SLURM_CPUS_PER_TASK").or_else(|| cpu("SLURM_CPUS_ON_NODE"));
        Ok(SlurmView { hosts, node, step, cpus })
    }

    /// A port for the rendezvous that every agent of the step derives alike.
    pub(crate) fn port(&self) -> u16 {
        let h = self
            .step
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        // Below Linux's ephemeral range (32768-60999), where outgoing connections take theirs.
        10_000 + (h % 22_000) as u16
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
    fn a_task_reads_its_node_and_the_step_from_slurm() {
        let vars = [
            ("SLURM_JOB_NODELIST", "sa,sb,sc"),
            ("SLURM_STEP_NODELIST", "n[1-2],sc"),
            ("SLURM_NODEID", "1"),
            ("SLURM_JOB_ID", "42"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_CPUS_ON_NODE", "4"),
            ("SLURM_CPUS_PER_TASK", "2"),
        ];
        let get = |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string());
        let view = SlurmView::from_env(&Env::from_lookup(&get)).unwrap();
        assert_eq!(view.hosts, ["n1", "n2", "sc"]);
        assert_eq!((view.node, view.step.as_str(), view.cpus), (1, "42.0", Some(2)));
        assert!((10_000..32_000).contains(&view.port()));
        let none = |_: &str| None;
        let err = SlurmView::from_env(&Env::from_lookup(&none)).unwrap_err().to_string();
        assert!(err.contains("SLURM_JOB_NODELIST is not set"), "{err}");
    }

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
