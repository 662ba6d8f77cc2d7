//! `reverb run -n N --slurm [--spares S] -- PROG`, inside a Slurm allocation (salloc, sbatch):
//! the job as one `srun` step of agents, one per node of the allocation
//! (`srun -N NODES --ntasks-per-node=1 --no-kill reverb agent --ranks-per-host R --spares S ...`),
//! the last S nodes idle as spares and N ranks spread evenly over the others, R per node; each
//! agent gets the CPUs the allocation gives a task (`salloc -N 5 -c 2 --no-kill`, or `--exclusive`;
//! without `--no-kill` Slurm revokes the allocation, and so the job, when a node fails). The job's token
//! is made here and reaches the agents through srun's environment. The job's exit code is the
//! controller's (its last line), not srun's: srun reports a lost node's task as failed even
//! when the job recovered. With `--redundancy R`, `-n` counts the virtual ranks, their copies
//! spread over the nodes, and the controller masks a copy's death (as across `--hosts`).

use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use reverb_transport::bootstrap::vars;
use reverb_transport::config::{env_get, Env};

use super::hosts::{pass_through, JobEndSeen};
use super::hostspec::{check_copies_spread, HostSlots};
use super::spawn::random_hex;

/// What `reverb run --slurm` was asked for.
pub struct SlurmStep<'a> {
    pub ranks: u32,
    /// Nodes idle as spares (`--spares N`).
    pub spares: u32,
    /// Options every agent takes as `reverb run` does (`--respawn`, `--timeout`, ...).
    pub run_options: Vec<String>,
    pub command: &'a [String],
    pub verbose: bool,
    /// Set in srun's environment, which its tasks (the agents, then the ranks) inherit.
    pub env: Vec<(String, String)>,
    /// Partial redundancy: `ranks` are copies of fewer virtual ranks, which must spread over
    /// the nodes.
    pub redundancy: Option<&'a reverb_runtime::replicas::ReplicaMap>,
}

/// Runs the step and waits for it; the job's exit code.
pub fn launch(step: &SlurmStep<'_>) -> Result<i32> {
    let env = Env::process();
    let nodes: u32 = env
        .foreign("SLURM_JOB_NUM_NODES")
        .or_else(|| env.foreign("SLURM_NNODES"))
        .context("--slurm: run inside a Slurm allocation (salloc or sbatch): SLURM_JOB_NUM_NODES is not set")?
        .parse()
        .context("--slurm: SLURM_JOB_NUM_NODES")?;
    if step.spares >= nodes {
        bail!("--spares {}: the allocation has {nodes} node(s)", step.spares);
    }
    let working = nodes - step.spares;
    if !step.ranks.is_multiple_of(working) {
        bail!(
            "-n {}: not an even share for {working} node(s) (the allocation's {nodes} less {} spare(s))",
            step.ranks,
            step.spares
        );
    }
    let per_host = step.ranks / working;
    if let Some(map) = step.redundancy {
        // The agents check it too; here it fails before srun starts anything.
        let nodes: Vec<HostSlots> =
            (0..working).map(|i| HostSlots { name: format!("node {i}"), ranks: per_host }).collect();
        check_copies_spread(map, &nodes)?;
    }
    let token = env_get(vars::JOB_TOKEN)?.filter(|t| !t.is_empty()).unwrap_or_else(|| random_hex(32));
    let exe = std::env::current_exe().context("finding the reverb executable")?;
    let mut cmd = Command::new("srun");
    cmd.args(["-N", &nodes.to_string(), "--ntasks-per-node=1", "--no-kill"]);
    cmd.arg(&exe).args(["agent", "--ranks-per-host", &per_host.to_string()]);
    cmd.args(["--spares", &step.spares.to_string()]);
    cmd.args(&step.run_options).arg("--").args(step.command);
    cmd.env(vars::JOB_TOKEN, token).env(vars::JOB_ID, format!("rv{}", random_hex(6)));
    cmd.envs(step.env.iter().map(|(k, v)| (k, v)));
    if step.verbose {
        eprintln!("reverb run: {cmd:?}");
    }
    cmd.stdin(Stdio::null()).stdout(Stdio::inherit()).stderr(Stdio::piped());
    let mut child = cmd.spawn().context("starting srun (is Slurm's srun on PATH?)")?;
    let ended = JobEndSeen::default();
    let mut reader = child.stderr.take().map(|stderr| pass_through(stderr, ended.clone()));
    let status = child.wait().context("waiting for srun")?;
    Ok(ended.wait_read(&mut reader).unwrap_or_else(|| {
        eprintln!(
            "reverb run: the srun step ended ({status}) without the job's end: srun could not start it, \
             or its first node was lost"
        );
        1
    }))
}
