//! The job around a run: join the two-rank job this process is in, or launch one.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use reverb_transport::{JobInfo, ProviderKind, TransportConfig, WaitMode};

use super::{Params, Session, WaitStyle};
use crate::launcher::LaunchSpec;

/// Runs `body` inside a two-rank job. Outside a job, re-executes this binary with the same
/// arguments as two launched ranks and returns when they have finished.
pub fn run_in_job(params: &Params, body: impl FnOnce(&mut Session) -> Result<()>) -> Result<()> {
    let job = JobInfo::from_env().context("reading the launcher's job environment")?;
    let Some(job) = job else {
        return launch_self(params);
    };
    if job.size < 2 {
        bail!("reverb bench needs 2 ranks (a pair of a larger job with --pair); this job has {}", job.size);
    }
    if let Some(&core) = params.cores.get(job.rank as usize) {
        pin_self(core)?;
    }
    let mut config = TransportConfig::from_env().context("reading REVERB_* configuration")?;
    if let Some(kind) = params.provider {
        config.provider = kind;
    }
    match params.wait {
        WaitStyle::Provider(mode) => config.wait_mode = mode,
        // Busy polling never sleeps: say so, so peers skip the sleeper handshake (as UCX does
        // without its async progress).
        WaitStyle::BusyPoll => config.wait_mode = WaitMode::Poll,
    }
    config.validate().context("checking the effective configuration")?;
    if params.verbose && job.rank == 0 {
        eprintln!("{config}");
    }
    let pair = params.pair;
    let mut session = Session::join(&config, params.max_size(), params.wait, params.timeout, pair)?;
    if params.verbose {
        let hosts = session.describe_hosts()?;
        if job.rank == pair.0 {
            eprintln!("reverb bench: {hosts}");
        }
    }
    if job.rank != pair.0 && job.rank != pair.1 {
        return session.stand_by();
    }
    body(&mut session)?;
    session.finish()
}

pub(in crate::bench) fn launch_self(params: &Params) -> Result<()> {
    let program: PathBuf = std::env::current_exe().context("finding the reverb executable")?;
    // Intra-node by default for shm (the path it serves), one rank per node for verbs.
    // Logged runs need two nodes: an intra-node message is not logged.
    let ranks_per_node = params.ranks_per_node.unwrap_or(match params.provider {
        _ if params.log.is_some() => 1,
        Some(ProviderKind::VERBS) => 1,
        _ => 2,
    });
    if params.log.is_some() && ranks_per_node != 1 {
        bail!(
            "--log needs the two ranks on two nodes (--ranks-per-node 1): intra-node messages are not logged"
        );
    }
    let mut env = Vec::new();
    if params.log.is_some() {
        // Logger lanes and rings that take the largest frames, a window of them.
        let ring = crate::bench::logged::ring_bytes(params);
        env.push(("REVERB_LOGGER_RING_BYTES".to_string(), ring.to_string()));
        env.push(("REVERB_LOGGER_LANE_BYTES".to_string(), (ring / 2).to_string()));
    }
    let spec = LaunchSpec {
        ranks: 2,
        ranks_per_node,
        program,
        args: std::env::args().skip(1).collect(),
        env,
        timeout: Some(params.job_timeout),
        prefix_output: false,
    };
    let status = crate::launcher::launch_logged(&spec, params.verbose, params.logger)
        .context("launching the two benchmark ranks")?;
    if status != 0 {
        bail!("the benchmark ranks failed (exit status {status})");
    }
    Ok(())
}

/// Pins this rank to one core (sched_setaffinity, what `taskset` does for the UCX side of
/// a comparison). Done before the provider opens, so any helper thread inherits it.
pub fn pin_self(core: usize) -> Result<()> {
    reverb_transport::topo::pin_current_thread(core)
        .with_context(|| format!("pinning the rank to cpu {core}"))
}
