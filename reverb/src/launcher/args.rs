//! `reverb run`'s command line, turned into a launch.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use reverb_transport::bootstrap::vars;
use reverb_transport::config::env_get;

use reverb_runtime::replicas::ReplicaMap;

use super::hostspec::parse_timeout;
use super::objects::ObjectsPlan;
use super::{launch_report, JobPart, LaunchOptions, LaunchSpec};
use crate::usage::usage;

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Number of ranks.
    #[arg(short = 'n', long = "ranks", value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub ranks: u32,
    /// Ranks per simulated node (consecutive ranks share a node), at most the job's processes.
    /// Default: all on one node.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub ranks_per_node: Option<u32>,
    /// Kill every rank and fail after this many seconds (0.001 to a year, 31536000).
    #[arg(long, value_name = "SECS", value_parser = crate::usage::float(0.001, 31_536_000.0))]
    pub timeout: Option<f64>,
    /// Respawn a node whose rank is killed by a signal, at most N times in the job (0: the
    /// first failure fails the job).
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=65536))]
    pub respawn: u32,
    /// Do not prefix output lines with `[rank] `.
    #[arg(long)]
    pub no_prefix: bool,
    /// Also write how the job ended as JSON to FILE: exit code, why it stopped (which rank,
    /// its exit status or signal; timeout; signal), the respawns taken.
    #[arg(long, value_name = "FILE")]
    pub report_json: Option<PathBuf>,
    /// Run only ranks A-B (whole nodes) of the job; launchers on other hosts run the rest.
    /// The job's rendezvous, id and token come from REVERB_ROOT, REVERB_JOB_ID and
    /// REVERB_JOB_TOKEN, the same for every launcher of the job.
    #[arg(long, value_name = "A-B", value_parser = parse_rank_range)]
    pub local_ranks: Option<std::ops::Range<u32>>,
    /// With --local-ranks: this launcher hosts the job's rendezvous at REVERB_ROOT (exactly
    /// one launcher of the job does).
    #[arg(long, requires = "local_ranks")]
    pub serve_root: bool,
    /// With --local-ranks: the incarnation the ranks start at (a launcher taking over the
    /// ranks of a lost host starts them above any incarnation they had).
    #[arg(long, requires = "local_ranks", default_value_t = 0,
          value_parser = clap::value_parser!(u32).range(0..=1 << 30))]
    pub first_incarnation: u32,
    /// With --hosts or --hostfile: idle hosts that take over the ranks of a host that is lost
    /// (its agent gone or silent), at most one loss each. With --slurm: how many of the
    /// allocation's nodes idle as spares.
    #[arg(long, value_name = "HOST,...|N", value_delimiter = ',')]
    pub spares: Vec<String>,
    /// The program is an MPI program linked against MPICH's libmpich.so.12 (Debian's
    /// mpicc.mpich): its ranks load reverb's MPI library instead (REVERB_MPI_LIB, or
    /// libmpich.so beside this executable).
    #[arg(long)]
    pub mpi: bool,
    /// Inside a Slurm allocation: the job as one srun step of agents, one per node, the ranks
    /// spread evenly (the last `--spares N` nodes idle as spares).
    #[arg(long, conflicts_with_all = ["local_ranks", "hosts", "hostfile"])]
    pub slurm: bool,
    /// Run the job across hosts, `a:4,b:4` (ranks per host, in rank order): one launcher per
    /// host started through REVERB_RSH (default ssh), the first hosting the rendezvous. The
    /// reverb binary and PROG must be at the same paths on every host.
    #[arg(long, value_name = "HOST:N,...", value_parser = super::hosts::parse_hosts, conflicts_with = "local_ranks")]
    pub hosts: Option<super::hosts::HostList>,
    /// `--hosts` from a file, as Open MPI's: a host per line, `NAME slots=N` (or `NAME:N`).
    #[arg(long, value_name = "FILE", value_parser = super::hosts::parse_hostfile, conflicts_with_all = ["local_ranks", "hosts"])]
    pub hostfile: Option<super::hosts::HostList>,
    /// Partial redundancy R in [1, 3]: `-n` is then the application's (virtual) ranks, and
    /// the job runs as many processes as R copies of them take (1.5: every other rank has a
    /// second copy). A copy killed while another copy of its rank runs is masked: no
    /// respawn, no rollback. Without it, REVERB_REDUNDANCY with REVERB_VIRTUAL_RANKS in the
    /// environment describe a job whose `-n` counts the processes. With --hosts, --hostfile or
    /// --slurm the copies of a rank go to different hosts.
    #[arg(long, value_name = "R", conflicts_with_all = ["local_ranks", "mpi"],
          value_parser = crate::usage::float(1.0, 3.0))]
    pub redundancy: Option<f64>,
    /// Over-decomposition: each process hosts V consecutive ranks (objects) as threads pinned
    /// to one core; a process is a node (failure unit). Apps built on `run_objects` (every
    /// `reverb app`) run unchanged.
    #[arg(long, value_name = "V", value_parser = clap::value_parser!(u32).range(1..=1024),
          conflicts_with_all = ["local_ranks", "hosts", "hostfile", "slurm", "mpi", "redundancy"])]
    pub objects: Option<u32>,
    /// With --objects: restart a failed process's objects spread over P processes, on its own
    /// core and the cores of the P - 1 least loaded processes, which replay them in parallel;
    /// each goes home at its next checkpoint.
    #[arg(long, value_name = "P", requires = "objects", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub parallel_recovery: u32,
    /// Logger cores, one per node: dedicated, shared-pinned, shared-unpinned or off.
    #[arg(long, env = "REVERB_LOGGER", default_value = "off", value_name = "PLACEMENT")]
    pub logger: reverb_logger::core::Placement,
    /// The program to run and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "PROG")]
    pub command: Vec<String>,
}

/// `reverb run`: returns the job's exit code (0 when every rank exited 0).
pub fn run(args: RunArgs, verbose: bool) -> Result<i32> {
    let timeout = parse_timeout(args.timeout)?;
    if let Some(hosts) = args.hosts.as_ref().or(args.hostfile.as_ref()) {
        return run_across(&args, &hosts.0, verbose);
    }
    if args.slurm {
        return run_slurm(&args, verbose);
    }
    if !args.spares.is_empty() {
        bail!("--spares needs --hosts, --hostfile or --slurm");
    }
    let Some((program, rest)) = args.command.split_first() else {
        bail!("reverb run: no program given");
    };
    let mut env = if args.mpi { super::mpi::environment()? } else { Vec::new() };
    let (ranks, redundancy) = redundant_job(&args, &mut env)?;
    check_ranks_per_node(args.ranks_per_node, ranks)?;
    if let (Some(v), Some(r)) = (args.objects, args.ranks_per_node) {
        if r != v {
            return Err(usage(format!(
                "--objects {v} makes each process a node of {v} ranks: --ranks-per-node {r} disagrees"
            )));
        }
    }
    let spec = LaunchSpec {
        ranks,
        ranks_per_node: args.objects.or(args.ranks_per_node).unwrap_or(ranks),
        program: PathBuf::from(program),
        args: rest.to_vec(),
        env,
        timeout,
        prefix_output: !args.no_prefix,
    };
    let part = match args.local_ranks {
        Some(local) => Some(job_part(local, args.serve_root, args.first_incarnation)?),
        None => None,
    };
    let opts = LaunchOptions {
        verbose,
        respawn: args.respawn,
        logger: args.logger,
        report_json: args.report_json,
        part,
        redundancy,
        objects: args.objects.map(|per_process| ObjectsPlan { per_process, helpers: args.parallel_recovery }),
        masker: None,
    };
    Ok(launch_report(&spec, &opts)?.code)
}

/// The processes a job runs and, when it is redundant, its spheres: `--redundancy R` makes
/// `-n` the virtual ranks (and passes the shape on to the ranks in `env`); the environment's
/// REVERB_REDUNDANCY (the runtime's own setting) leaves `-n` the processes.
fn redundant_job(args: &RunArgs, env: &mut Vec<(String, String)>) -> Result<(u32, Option<ReplicaMap>)> {
    if let Some(degree) = args.redundancy {
        let map = ReplicaMap::new(args.ranks, degree).context("--redundancy")?;
        env.push(("REVERB_REDUNDANCY".into(), degree.to_string()));
        env.push(("REVERB_VIRTUAL_RANKS".into(), args.ranks.to_string()));
        return Ok((map.physical_ranks(), Some(map)));
    }
    let from_env = reverb_runtime::redundancy_from_env().context("the job's environment")?;
    let map = match from_env {
        Some(r) => Some(ReplicaMap::new(r.virtual_ranks, r.degree).context("REVERB_REDUNDANCY")?),
        None => None,
    };
    // A job of another size is refused by its ranks, naming both sizes.
    Ok((args.ranks, map.filter(|m| m.physical_ranks() == args.ranks)))
}

/// `reverb run --hosts`: the options every host's launcher takes, checked here.
fn run_across(args: &RunArgs, hosts: &[super::hosts::HostSlots], verbose: bool) -> Result<i32> {
    let total: u32 = hosts.iter().map(|h| h.ranks).sum();
    // With --redundancy, -n counts the virtual ranks and the hosts their copies.
    let mut env = Vec::new();
    let (processes, map) = redundant_job(args, &mut env)?;
    if total != processes {
        match args.redundancy {
            Some(r) => {
                bail!("--hosts names {total} rank(s); -n {} at --redundancy {r} runs {processes}", args.ranks)
            }
            None => bail!("--hosts names {total} rank(s), -n {}", args.ranks),
        }
    }
    if let Some(map) = &map {
        // The agents check it too; here it fails before any host is started.
        super::hosts::check_copies_spread(map, hosts)?;
    }
    check_across(args)?;
    check_ranks_per_node(args.ranks_per_node, total)?;
    // One node per host unless told otherwise.
    let ranks_per_node = args.ranks_per_node.unwrap_or(hosts[0].ranks);
    let run_options = agent_options(args);
    for spare in &args.spares {
        super::hosts::parse_hosts(spare).map_err(|e| anyhow::anyhow!("--spares: {e}"))?;
        if hosts.iter().any(|h| h.name == *spare) {
            bail!("--spares: {spare} also runs ranks");
        }
    }
    super::hosts::launch_across(&super::hosts::AcrossHosts {
        hosts,
        spares: &args.spares,
        ranks_per_node,
        run_options,
        command: &args.command,
        verbose,
        timeout: parse_timeout(args.timeout)?,
        env,
    })
}

/// `reverb run --slurm`: one srun step of agents.
fn run_slurm(args: &RunArgs, verbose: bool) -> Result<i32> {
    check_across(args)?;
    let spares = match args.spares.as_slice() {
        [] => 0,
        [n] => crate::usage::int::<u32>(0, 65536)(n)
            .map_err(|e| usage(format!("--spares {n}: with --slurm, a count of nodes: {e}")))?,
        _ => bail!("--spares: with --slurm, a count of nodes"),
    };
    let mut run_options = agent_options(args);
    if let Some(r) = args.ranks_per_node {
        run_options.extend(["--ranks-per-node".to_string(), r.to_string()]);
    }
    // With --redundancy, -n counts the virtual ranks; the agents get the shape from srun.
    let mut env = Vec::new();
    let (ranks, redundancy) = redundant_job(args, &mut env)?;
    check_ranks_per_node(args.ranks_per_node, ranks)?;
    super::slurm_step::launch(&super::slurm_step::SlurmStep {
        ranks,
        spares,
        run_options,
        command: &args.command,
        verbose,
        env,
        redundancy: redundancy.as_ref(),
    })
}

/// A node holds at most the job's processes.
fn check_ranks_per_node(ranks_per_node: Option<u32>, processes: u32) -> Result<()> {
    match ranks_per_node {
        Some(r) if r > processes => Err(usage(format!(
            "--ranks-per-node {r} is more than the job's {processes} process(es): allowed 1..={processes}"
        ))),
        _ => Ok(()),
    }
}

/// What a job across hosts cannot have yet.
fn check_across(args: &RunArgs) -> Result<()> {
    if args.report_json.is_some() {
        bail!("--report-json is per launcher: not yet across hosts");
    }
    Ok(())
}

/// The `reverb run` options every agent takes.
fn agent_options(args: &RunArgs) -> Vec<String> {
    let mut options = vec!["--respawn".to_string(), args.respawn.to_string()];
    // Each host's agent starts its own nodes' logger cores.
    options.extend(["--logger".to_string(), args.logger.to_string()]);
    if let Some(t) = args.timeout {
        options.extend(["--timeout".to_string(), t.to_string()]);
    }
    if args.no_prefix {
        options.push("--no-prefix".into());
    }
    // Each host's agent finds reverb's MPI library beside its own reverb binary.
    if args.mpi {
        options.push("--mpi".into());
    }
    options
}

/// `A-B` (inclusive) or a single rank `A`, as a range.
fn parse_rank_range(s: &str) -> std::result::Result<std::ops::Range<u32>, String> {
    let (a, b) = s.split_once('-').unwrap_or((s, s));
    let parse = |x: &str| x.trim().parse::<u32>().map_err(|e| format!("'{x}': {e}"));
    let (a, b) = (parse(a)?, parse(b)?);
    if b < a || b == u32::MAX {
        return Err(format!("'{s}': want A-B with A <= B"));
    }
    Ok(a..b + 1)
}

/// The shared job identity of a multi-launcher job, from the environment every launcher of the
/// job is given.
fn job_part(local: std::ops::Range<u32>, serve: bool, first_incarnation: u32) -> Result<JobPart> {
    let need = |name: &str| -> Result<String> {
        env_get(name)?.filter(|v| !v.is_empty()).with_context(|| {
            format!("--local-ranks: {name} must be set, the same for every launcher of the job")
        })
    };
    Ok(JobPart {
        local,
        root: need(vars::ROOT)?,
        serve,
        job_id: need(vars::JOB_ID)?,
        token: need(vars::JOB_TOKEN)?,
        first_incarnation,
    })
}
