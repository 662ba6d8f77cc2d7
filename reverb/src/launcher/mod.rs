//! `reverb run` (local launcher) and `reverb topo`.
//!
//! The launcher hosts the bootstrap server, spawns N ranks (each in its own process group),
//! groups them into simulated nodes of R consecutive ranks, prefixes their output with
//! `[rank] `, and kills the whole job as soon as one rank fails, on timeout, or on
//! SIGINT/SIGTERM (a cancel: the job's processes are reaped and its /dev/shm files removed,
//! and the launcher exits 128+signal).
//!
//! With `--respawn N` a rank killed by a signal fails its node instead: the launcher SIGKILLs
//! the node's other ranks, tells the bootstrap server those slots failed, and starts the
//! node's ranks again in place with `REVERB_INCARNATION` + 1, at most N times per job. A rank
//! that exits non-zero still fails the job: that is the program's own verdict.
//!
//! With teams (`REVERB_LOG_TEAMS` in the job's environment, the logger's team unit) and
//! `--respawn`, the team is the failure unit: a failed node fails every node of its team, all
//! are SIGKILLed and started again together at the next incarnation (one respawn). Teams must
//! be unions of whole nodes, at least two (checked at launch); logger cores, which pair nodes,
//! are refused with teams.
//!
//! With logger cores (`--logger`), a node failure takes the node's logger core too: it is
//! SIGKILLed with the ranks and started again at the next incarnation, before them. A logger
//! core killed by a signal fails its node the same way (under `--respawn`); without respawn,
//! or when it exits by itself while its ranks run, the job fails naming it.
//!
//! With a [`JobPart`] (`reverb run --local-ranks A-B --root HOST:PORT`) the launcher runs only
//! some whole nodes of a job that other launchers, on other hosts, run the rest of; one of
//! them hosts the rendezvous (`--serve-root`), the others' ranks connect to it. Each launcher
//! respawns its own nodes; a rank killed on another host is seen by the rendezvous when its
//! connection drops, and its respawned incarnation supersedes it.
//!
//! Files by job: [`args`] (`reverb run`'s command line), `spawn` (ranks started, pinned,
//! killed, reaped), `watch` (the launch loop: failures seen, nodes respawned), `masking`
//! (partial redundancy: a copy's death masked), `objects` (processes of several ranks,
//! parallel recovery), `teams` (the
//! failure unit with teams), [`logger_cores`] (one logger core per node), `report` (a
//! launch from start to exit code), `verdict` (how it ended, as JSON), `signals`
//! (SIGINT/SIGTERM), `os` (the system calls on children), `hygiene` (the job's /dev/shm
//! files: removed when it ends, swept at a later start when a crash left them).
//!
//! Layering (as PRRTE's `prterun` and its per-host daemon `prted`): the front ends start
//! agents as processes and never call into them; the agent never imports a front end; both
//! import the leaf `hostspec` and the engine that runs one host's ranks.
//!
//! ```text
//! launcher/
//! ├── front ends (user-facing)     args (`reverb run`), hosts (`--hosts`), slurm_step (`--slurm`)
//! │      │ start `reverb agent` through a remote shell or srun; read its lines
//! ├── agent/ (one per host)        `reverb agent`: link, controller, channel, slurm, fault
//! │      │ runs its host's part of the job with the engine
//! ├── engine (one host's ranks)    report, watch, spawn, masking, objects, teams, logger_cores,
//! │                                verdict, signals, hygiene, os, mpi
//! └── leaf                         hostspec: hosts, placement, the agent's lines, time bounds
//! ```
//!
//! Front ends import the agent not at all (only `main` dispatches `reverb agent` to it),
//! the agent imports neither `args`, `hosts` nor `slurm_step`, and `hostspec` imports no
//! other launcher module.

use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;

mod agent;
pub mod args;
pub mod hosts;
mod hostspec;
mod hygiene;
pub mod logger_cores;
mod masking;
mod mpi;
pub mod objects;
mod os;
mod report;
mod signals;
mod slurm_step;
mod spawn;
mod teams;
mod verdict;
mod watch;

pub use agent::{agent, AgentArgs};
pub use args::{run, RunArgs};
pub use report::launch_report;

/// What to launch.
#[derive(Debug, Clone)]
pub struct LaunchSpec {
    pub ranks: u32,
    pub ranks_per_node: u32,
    pub program: PathBuf,
    pub args: Vec<String>,
    /// Extra variables for every rank (the launcher's own `REVERB_*` win over these).
    pub env: Vec<(String, String)>,
    /// Kill the job and fail after this long.
    pub timeout: Option<Duration>,
    /// Prefix each output line with `[rank] `.
    pub prefix_output: bool,
}

/// Runs the job described by `spec`; 0 when every rank exited 0.
pub fn launch(spec: &LaunchSpec) -> Result<i32> {
    launch_with(spec, false)
}

/// How to run a job beyond what it is (`LaunchSpec`).
#[derive(Debug, Clone, Default)]
pub struct LaunchOptions {
    /// Print the environment given to each rank and how each ended.
    pub verbose: bool,
    /// Node respawns allowed in the job (0: fail fast).
    pub respawn: u32,
    /// Logger cores, one per node (off: none).
    pub logger: reverb_logger::core::Placement,
    /// Also write how the launch ended as JSON to this file (`--report-json`).
    pub report_json: Option<PathBuf>,
    /// Run only part of the job (other launchers run the rest); `None`: all of it.
    pub part: Option<JobPart>,
    /// Partial redundancy: the job's processes are copies of these virtual ranks; a copy's
    /// death is masked while another copy of its rank runs.
    pub redundancy: Option<reverb_runtime::replicas::ReplicaMap>,
    /// Over-decomposition: processes of several ranks, restarted in parallel (`--objects`).
    pub objects: Option<objects::ObjectsPlan>,
    /// With `redundancy` in a part of a job: the job's controller decides which deaths are
    /// masked.
    pub masker: Option<masking::Masker>,
}

/// The part of a job one launcher runs when several launchers (one per host) run it together.
#[derive(Debug, Clone)]
pub struct JobPart {
    /// The ranks this launcher starts: whole nodes.
    pub local: Range<u32>,
    /// The job's rendezvous, `host:port`.
    pub root: String,
    /// This launcher hosts the rendezvous at `root` (exactly one launcher of the job does).
    pub serve: bool,
    /// The job's id and token, the same for every launcher of the job.
    pub job_id: String,
    pub token: String,
    /// The incarnation its ranks start at: above 0 when they take over from a lost host.
    pub first_incarnation: u32,
}

/// One node (or team) respawn.
#[derive(Debug, Clone)]
pub struct Respawn {
    /// The node that failed.
    pub node: u32,
    /// Every node respawned: `node`, or with teams each node of its team.
    pub nodes: Vec<u32>,
    /// The rank whose death failed the node, and how it died.
    pub rank: u32,
    pub signal: i32,
    /// The node's logger core failed it, not a rank (`rank` is then the node's first rank).
    pub by_logger: bool,
    /// The node's logger core was started again with its ranks.
    pub logger_restarted: bool,
    /// The ranks started again, at `incarnation`.
    pub ranks: Vec<u32>,
    pub incarnation: u32,
    /// Since the launch started.
    pub at: Duration,
}

/// How a launch ended.
#[derive(Debug, Clone)]
pub struct LaunchReport {
    /// The job's exit code: 0 when every rank (last incarnation) exited 0.
    pub code: i32,
    pub respawns: Vec<Respawn>,
}

/// As [`launch`]; `verbose` prints the environment given to each rank.
pub fn launch_with(spec: &LaunchSpec, verbose: bool) -> Result<i32> {
    launch_report(spec, &LaunchOptions { verbose, ..LaunchOptions::default() }).map(|r| r.code)
}

/// As [`launch_with`], with one logger core per node placed as `logger` says.
pub fn launch_logged(
    spec: &LaunchSpec,
    verbose: bool,
    logger: reverb_logger::core::Placement,
) -> Result<i32> {
    launch_report(spec, &LaunchOptions { verbose, logger, ..LaunchOptions::default() }).map(|r| r.code)
}
