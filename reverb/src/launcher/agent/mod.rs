//! `reverb agent`: one per host, started by `reverb run --hosts` over the remote shell, or by
//! Slurm (`srun -N H --ntasks-per-node=1 reverb agent -- APP`). Each runs its host's ranks as
//! a launcher for part of the job (pinned, watched, its nodes respawned in place) and keeps a
//! control connection to the job's controller: the agent of the first host, which also hosts
//! the rendezvous. Heartbeats flow both ways on that connection; an agent that falls silent or
//! drops it before its ranks are done is a lost host (the controller moves its ranks to a
//! spare agent), and an agent that loses its controller stops its ranks. A rank's parent is its
//! agent (the kernel kills the ranks when the agent dies), so a host's ranks never outlive
//! their agent. With `--logger` each agent also starts its own nodes' logger cores; the first
//! host's agent serves the whole job's loggers' rendezvous too (see `logger_cores`).
//!
//! Files: `channel` (frames and heartbeats on a control connection), `link` (the agent's end),
//! `controller` (the controller's decisions), `slurm` (the job's shape from Slurm's
//! environment), `fault` (test hooks, behind the `fault-injection` feature), `input` (the
//! front end's end of standard input: a cancel).

mod channel;
mod controller;
#[cfg(feature = "fault-injection")]
mod fault;
mod input;
mod link;
mod slurm;

use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use reverb_transport::bootstrap::{vars, BootServer, ServerOptions};
use reverb_transport::config::env_get;

use self::controller::{ControlPlan, Controller};
use self::link::{Hello, Link, Order};
use super::hostspec::{
    check_copies_spread, check_whole_nodes, parse_hosts, parse_timeout, rank_ranges, HostList, HostSlots,
    Timing, JOB_ENDED, LINGER, RENDEZVOUS_AT,
};
use super::logger_cores;
use super::masking::Masker;
use super::{launch_report, JobPart, LaunchOptions, LaunchSpec};
use reverb_runtime::replicas::ReplicaMap;

/// How long the other hosts' agents have to reach the controller at the start.
const START_WITHIN: Duration = Duration::from_secs(60);

#[derive(clap::Args, Debug)]
pub struct AgentArgs {
    /// This agent's host: a name in --hosts or --spares (default: Slurm's node name for this
    /// task, else the machine's host name).
    #[arg(long)]
    pub host: Option<String>,
    /// The job's hosts and ranks per host in rank order, as `reverb run --hosts` (default:
    /// Slurm's node list, --ranks-per-host each).
    #[arg(long, value_name = "HOST:N,...", value_parser = parse_hosts)]
    pub hosts: Option<HostList>,
    /// Idle hosts that take over the ranks of a lost one: names, or under Slurm a count (the
    /// last nodes of the list).
    #[arg(long, value_name = "HOST,...|N", value_delimiter = ',')]
    pub spares: Vec<String>,
    /// Join as a spare whatever this host's name (a host come back after it was lost: it may
    /// take a lost host's ranks, never its old ones again).
    #[arg(long)]
    pub spare: bool,
    /// Under Slurm: ranks per host (default: the CPUs Slurm gave the task).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub ranks_per_host: Option<u32>,
    /// Ranks per simulated node inside a host (default: the whole host).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub ranks_per_node: Option<u32>,
    /// Node respawns each agent may take by itself (as `reverb run --respawn`).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub respawn: u32,
    /// Logger cores, one per node, placed on each host's cpus (as `reverb run --logger`).
    #[arg(long, env = "REVERB_LOGGER", default_value = "off", value_name = "PLACEMENT")]
    pub logger: reverb_logger::core::Placement,
    /// Bound on this host's ranks, in seconds (as `reverb run --timeout`).
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<f64>,
    /// Do not prefix output lines with `[rank] `.
    #[arg(long)]
    pub no_prefix: bool,
    /// The program is an MPI program linked against MPICH's libmpich.so.12: its ranks load
    /// reverb's MPI library (as `reverb run --mpi`).
    #[arg(long)]
    pub mpi: bool,
    /// Standard input comes from `reverb run --hosts`: its end (after the front end's
    /// greeting) stops this host's ranks as SIGTERM does.
    #[arg(long, hide = true)]
    pub front_stdin: bool,
    /// The program to run and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "PROG")]
    pub command: Vec<String>,
}

/// The whole job as every agent sees it, and which host this agent is.
struct Job {
    hosts: Vec<HostSlots>,
    spares: Vec<String>,
    /// `--spare`: a spare whatever its name.
    spare: bool,
    me: String,
    root: String,
    job_id: String,
    token: String,
    ranks_per_node: u32,
    respawn: u32,
    logger: reverb_logger::core::Placement,
    timeout: Option<Duration>,
    prefix: bool,
    /// The ranks' environment beyond the job's identity (`--mpi`: reverb's MPI library).
    env: Vec<(String, String)>,
    command: Vec<String>,
    timing: Timing,
    /// Partial redundancy (`REVERB_REDUNDANCY`, `REVERB_VIRTUAL_RANKS` from `reverb run
    /// --hosts --redundancy R`): the hosts' ranks are copies of fewer virtual ranks.
    redundancy: Option<ReplicaMap>,
}

/// What this agent does in the job.
enum Role {
    /// Host the rendezvous and the controller, and run the first host's ranks.
    Serve,
    Run(Range<u32>),
    Spare,
}

impl Job {
    fn total(&self) -> u32 {
        self.hosts.iter().map(|h| h.ranks).sum()
    }

    fn parts(&self) -> Vec<(String, Range<u32>)> {
        rank_ranges(&self.hosts)
    }

    fn role(&self) -> Result<Role> {
        if self.spare {
            return Ok(Role::Spare);
        }
        if let Some(i) = self.hosts.iter().position(|h| h.name == self.me) {
            let (_, ranks) = self.parts().swap_remove(i);
            return Ok(if i == 0 { Role::Serve } else { Role::Run(ranks) });
        }
        if self.spares.contains(&self.me) {
            return Ok(Role::Spare);
        }
        bail!("host '{}' is neither in the job's hosts nor a spare", self.me)
    }
}

/// `reverb agent`: returns this host's exit code (the job's, on the first host).
pub fn agent(args: AgentArgs, verbose: bool) -> Result<i32> {
    let front_stdin = args.front_stdin;
    let mut job = job_of(args)?;
    if front_stdin {
        input::watch_stdin(job.me.clone());
    }
    #[cfg(feature = "fault-injection")]
    fault::arm(&job.me)?;
    match job.role()? {
        Role::Serve => serve(&mut job, verbose),
        Role::Run(ranks) => {
            let hello = hello(&job, ranks.clone(), 0);
            let link = Link::connect(&job.root, &hello, job.timing, START_WITHIN)?;
            Ok(run_linked(&job, &link, ranks, 0, verbose))
        }
        Role::Spare => spare(&job, verbose),
    }
}

fn hello<'a>(job: &'a Job, ranks: Range<u32>, first_incarnation: u32) -> Hello<'a> {
    Hello {
        token: &job.token,
        size: job.total(),
        host: &job.me,
        ranks,
        first_incarnation,
        respawn: job.respawn,
    }
}

/// The first host: the rendezvous, the controller, and its own ranks.
fn serve(job: &mut Job, verbose: bool) -> Result<i32> {
    let (server, loggers) = bind_rendezvous(job)?;
    let port = server.local_addr().port();
    job.root = match job.root.rsplit_once(':') {
        Some((host, _)) => format!("{host}:{port}"),
        None => bail!("the job's root '{}' is not HOST:PORT", job.root),
    };
    eprintln!("{RENDEZVOUS_AT}{}", job.root);
    let job = &*job;
    let plan = ControlPlan {
        parts: job.parts(),
        own: 0,
        ranks_per_node: job.ranks_per_node,
        loggers: loggers.as_ref().map(BootServer::failure_reporter),
        respawn: job.respawn,
        timing: job.timing,
        start_within: START_WITHIN,
        redundancy: job.redundancy.clone(),
    };
    let controller = Controller::start(&server, plan, Box::new(super::signals::request_stop))
        .context("starting the job's controller")?;
    // This host's copies are masked as the controller masks the others': at the rendezvous.
    let reporter = server.failure_reporter();
    let masker = Masker(Arc::new(move |rank, incarnation, mates: &[u32], reason: &str| {
        Ok(reporter.retire_if_mates_live(&[(rank, incarnation, mates.to_vec())], reason)?)
    }));
    let code = run_part(job, job.parts()[0].1.clone(), 0, Some(masker), verbose);
    controller.own_part_done(code);
    let bound = job.timeout.map(|t| t + job.timing.timeout * 2);
    let end = controller.wait_end(bound);
    // The other hosts' ranks may still be reading the last collective; after a cancel they
    // are being stopped, and the front end waits for this process.
    let linger = if super::signals::cancelled() { Duration::ZERO } else { LINGER };
    server.shutdown_graceful(linger);
    if let Some(l) = loggers {
        l.shutdown_graceful(linger);
    }
    // The last line: what `reverb run --hosts` waits for, since a remote shell's exit status
    // alone cannot tell a finished job from a lost host (srun exits 0 when its node fails).
    eprintln!("{} (code {}): {}", JOB_ENDED, end.code, end.reason);
    Ok(end.code)
}

/// The job's rendezvous at its root and, with logger cores, the loggers' one at the next port
/// (one slot per node, for every host's loggers). Port 0 picks a free pair.
fn bind_rendezvous(job: &Job) -> Result<(BootServer, Option<BootServer>)> {
    // Agents that connect as soon as the port opens wait for the controller, not refused.
    let opts = ServerOptions { agents: true, ..ServerOptions::default() };
    let any_port = job.root.ends_with(":0");
    for _ in 0..20 {
        let server = BootServer::start_with(&job.root, job.total(), &job.token, opts.clone())
            .with_context(|| format!("starting the job's rendezvous at {}", job.root))?;
        if job.logger == reverb_logger::core::Placement::Off {
            return Ok((server, None));
        }
        let nodes = job.total().div_ceil(job.ranks_per_node);
        let (host, _) = job.root.rsplit_once(':').unwrap_or((&job.root, ""));
        let root = logger_cores::loggers_root(&format!("{host}:{}", server.local_addr().port()))?;
        match logger_cores::serve_loggers(&root, nodes, &logger_cores::loggers_token(&job.token)) {
            Ok(loggers) => return Ok((server, Some(loggers))),
            // The next port is taken: another free one.
            Err(_) if any_port => continue,
            Err(e) => return Err(e),
        }
    }
    bail!("no two free ports in a row for the job's rendezvous and its loggers' at {}", job.root)
}

/// A spare: idle until the controller gives it a lost host's ranks, or the job ends.
fn spare(job: &Job, verbose: bool) -> Result<i32> {
    let link = Link::connect(&job.root, &hello(job, 0..0, 0), job.timing, START_WITHIN)?;
    // Bounded: the link reports the controller lost once it falls silent.
    match link.orders().recv() {
        Ok(Order::TakeOver { ranks, incarnation }) => Ok(run_linked(job, &link, ranks, incarnation, verbose)),
        Ok(Order::JobEnd { .. }) => Ok(0),
        Ok(Order::ControllerLost(why)) => {
            eprintln!("reverb agent: spare {}: the controller was lost ({why})", job.me);
            Ok(1)
        }
        Err(_) => Ok(1),
    }
}

/// Runs `ranks` under the controller: they are stopped if the job fails elsewhere or the
/// controller is lost, and their end is reported.
fn run_linked(job: &Job, link: &Link, ranks: Range<u32>, first_incarnation: u32, verbose: bool) -> i32 {
    let orders = link.orders().clone();
    let me = job.me.clone();
    // Once the ranks ended, the controller closing the connection is no news.
    let finished = Arc::new(AtomicBool::new(false));
    let watching = finished.clone();
    std::thread::spawn(move || {
        for order in orders.iter() {
            let why = match order {
                Order::JobEnd { code: 0, .. } | Order::TakeOver { .. } => continue,
                Order::JobEnd { reason, .. } => format!("the job failed: {reason}"),
                Order::ControllerLost(why) => format!("the controller was lost ({why})"),
            };
            if !watching.load(Ordering::SeqCst) {
                eprintln!("reverb agent: host {me}: {why}; stopping its ranks");
                super::signals::request_stop();
            }
            return;
        }
    });
    let code = run_part(job, ranks, first_incarnation, Some(link.masker(job.timing.timeout)), verbose);
    finished.store(true, Ordering::SeqCst);
    // The controller may be gone: then there is no one to tell.
    let _ = link.part_done(code);
    code
}

/// Runs `ranks` as a launcher for part of the job; its exit code (1 if it could not start).
fn run_part(
    job: &Job,
    ranks: Range<u32>,
    first_incarnation: u32,
    masker: Option<Masker>,
    verbose: bool,
) -> i32 {
    let Some((program, args)) = job.command.split_first() else { return 1 };
    let spec = LaunchSpec {
        ranks: job.total(),
        ranks_per_node: job.ranks_per_node,
        program: PathBuf::from(program),
        args: args.to_vec(),
        env: job.env.clone(),
        timeout: job.timeout,
        prefix_output: job.prefix,
    };
    let part = JobPart {
        local: ranks.clone(),
        root: job.root.clone(),
        serve: false,
        job_id: job.job_id.clone(),
        token: job.token.clone(),
        first_incarnation,
    };
    let opts = LaunchOptions {
        verbose,
        respawn: job.respawn,
        logger: job.logger,
        part: Some(part),
        masker: masker.filter(|_| job.redundancy.is_some()),
        redundancy: job.redundancy.clone(),
        ..LaunchOptions::default()
    };
    match launch_report(&spec, &opts) {
        Ok(r) => r.code,
        Err(e) => {
            eprintln!("reverb agent: host {}: ranks {}-{}: {e:#}", job.me, ranks.start, ranks.end - 1);
            1
        }
    }
}

/// The job from the command line and the environment (`reverb run --hosts` sets REVERB_ROOT,
/// REVERB_JOB_ID and REVERB_JOB_TOKEN), or else from Slurm's.
fn job_of(args: AgentArgs) -> Result<Job> {
    let timeout = parse_timeout(args.timeout)?;
    let timing = Timing::from_env()?;
    let (hosts, spares, me, root, job_id, token) = match args.hosts {
        Some(hosts) => {
            let me = match args.host {
                Some(h) => h,
                None => reverb_transport::bootstrap::HostId::local().name,
            };
            let need = |name: &str| -> Result<String> {
                env_get(name)?.filter(|v| !v.is_empty()).with_context(|| {
                    format!(
                        "{name} must be set, the same for every agent of the job (reverb run --hosts does)"
                    )
                })
            };
            (hosts.0, args.spares, me, need(vars::ROOT)?, need(vars::JOB_ID)?, need(vars::JOB_TOKEN)?)
        }
        None => from_slurm(&args)?,
    };
    let ranks_per_node = args.ranks_per_node.unwrap_or(hosts[0].ranks);
    let redundancy = redundant_hosts(&hosts)?;
    check_whole_nodes(&hosts, ranks_per_node)?;
    Ok(Job {
        hosts,
        spares,
        spare: args.spare,
        me,
        root,
        job_id,
        token,
        ranks_per_node,
        respawn: args.respawn,
        logger: args.logger,
        timeout,
        prefix: !args.no_prefix,
        env: rank_env(args.mpi, timing)?,
        command: args.command,
        timing,
        redundancy,
    })
}

/// What the agent adds to its ranks' environment: MPI's library path under `--mpi`, and
/// unless the caller set it, `REVERB_DETECT_GRACE_MS` long enough for the agents to declare a
/// host lost (twice their timeout): a rank that finds a peer host unreachable (a cut wire)
/// waits that long for the failure to be declared before its error is final (the runtime's
/// 2 s default suits a killed process, whose peers see its sockets close at once).
fn rank_env(mpi: bool, timing: Timing) -> Result<Vec<(String, String)>> {
    let mut env = if mpi { crate::launcher::mpi::environment()? } else { Vec::new() };
    if env_get("REVERB_DETECT_GRACE_MS")?.is_none() {
        env.push(("REVERB_DETECT_GRACE_MS".into(), (timing.timeout * 2).as_millis().to_string()));
    }
    Ok(env)
}

/// The job's spheres when its environment makes it redundant: the hosts' ranks must be its
/// processes, and no two copies of a rank may share a host.
fn redundant_hosts(hosts: &[HostSlots]) -> Result<Option<ReplicaMap>> {
    let Some(r) = reverb_runtime::redundancy_from_env().context("the job's environment")? else {
        return Ok(None);
    };
    let map = ReplicaMap::new(r.virtual_ranks, r.degree).context("REVERB_REDUNDANCY")?;
    let total: u32 = hosts.iter().map(|h| h.ranks).sum();
    if map.physical_ranks() != total {
        bail!(
            "{} virtual rank(s) at redundancy {} run as {} processes; the hosts name {total}",
            r.virtual_ranks,
            r.degree,
            map.physical_ranks()
        );
    }
    check_copies_spread(&map, hosts)?;
    Ok(Some(map))
}

type JobShape = (Vec<HostSlots>, Vec<String>, String, String, String, String);

/// Hosts from Slurm's node list, the last `--spares N` of them spares.
fn from_slurm(args: &AgentArgs) -> Result<JobShape> {
    let view = slurm::SlurmView::from_env(&reverb_transport::config::Env::process())?;
    let spare_count = match args.spares.as_slice() {
        [] => 0,
        [n] => n.parse::<usize>().with_context(|| format!("--spares {n}: under Slurm, a count of nodes"))?,
        _ => bail!("--spares: under Slurm, a count of nodes"),
    };
    if spare_count >= view.hosts.len() {
        bail!("--spares {spare_count}: the step has only {} node(s)", view.hosts.len());
    }
    let per_host = match (args.ranks_per_host, view.cpus) {
        (Some(n), _) | (None, Some(n)) => n,
        (None, None) => bail!("--ranks-per-host: Slurm did not say how many CPUs this task has"),
    };
    let working = view.hosts.len() - spare_count;
    let hosts =
        view.hosts[..working].iter().map(|h| HostSlots { name: h.clone(), ranks: per_host }).collect();
    let spares = view.hosts[working..].to_vec();
    let me = args.host.clone().unwrap_or_else(|| view.hosts[view.node].clone());
    let root = match env_get(vars::ROOT)?.filter(|v| !v.is_empty()) {
        Some(r) => r,
        None => format!("{}:{}", view.hosts[0], view.port()),
    };
    let job_id = env_get(vars::JOB_ID)?.filter(|v| !v.is_empty()).unwrap_or(format!("slurm-{}", view.step));
    let token = match env_get(vars::JOB_TOKEN)?.filter(|v| !v.is_empty()) {
        Some(t) => t,
        None => {
            if view.node == 0 {
                eprintln!(
                    "reverb agent: REVERB_JOB_TOKEN is not set: the job token is derived from the Slurm \
                     step id (export a secret REVERB_JOB_TOKEN before srun to guard the rendezvous)"
                );
            }
            format!("slurm-{}-{}", view.step, rustix::process::getuid().as_raw())
        }
    };
    Ok((hosts, spares, me, root, job_id, token))
}
