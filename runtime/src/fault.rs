//! Fault injection for the demo, tests and campaigns, compiled only with the
//! `fault-injection` feature; without it a set `REVERB_FAULT*` variable is a startup error.
//!
//! - `REVERB_FAULT=RANK:SENDS[@I][,..]`: incarnation 0 (or I, e.g. a restarted rank
//!   replaying) of RANK SIGKILLs itself right after its SENDS-th send (the launcher takes its
//!   node down).
//! - `REVERB_FAULT_CKPT=RANK:EPOCH:STAGE`: inside checkpoint EPOCH at STAGE (`entered`:
//!   before level 1; `local-written`, `buddy-body-landed`, `buddy-flipped`: during the epoch
//!   flip; `voting`: before the agreement round; `committed`: after it, before the log GC).
//! - `REVERB_FAULT_INIT=RANK:STEP[:logger|:late][@retry][,..]`: inside init, just before STEP's
//!   collective (`log-rings`, `ckpt-slots`); `:logger` kills the node's logger core instead,
//!   `:late` joins STEP only once a failed rank is back, `@retry` picks init's second attempt
//!   after an early failure was recovered.
//! - `REVERB_FAULT_GC=RANK:EPOCH[:late|:trim][,..]`: at the log GC after checkpoint EPOCH,
//!   just before its collective: SIGKILL, or (`:late`) join it only once a failed rank is
//!   back; `:trim`: SIGKILL after its collective, before the logs are trimmed.
//! - `REVERB_FAULT_FINALIZED=RANK[:MS][,..]`: incarnation 0 of RANK SIGKILLs itself MS ms
//!   (default 0) after its `finalize` completed (the job's final barrier passed): its node
//!   lost once the other ranks are done.
//! - `REVERB_FAULT_FINALIZE=RANK[:MS][,..]`: incarnation 0 of RANK holds its `finalize` MS ms
//!   (default 0), saying so, while the others wait for it in the final barrier: a test cuts
//!   its host's wire meanwhile.

#[cfg(feature = "fault-injection")]
use std::path::PathBuf;
#[cfg(feature = "fault-injection")]
use std::time::{Duration, Instant};

#[cfg(feature = "fault-injection")]
use reverb_ckpt::Stage;
#[cfg(feature = "fault-injection")]
use reverb_transport::Bootstrap;

#[cfg(feature = "fault-injection")]
use super::report::unix_ns;
#[cfg(feature = "fault-injection")]
use super::sigkill::{own_pid, sigkill};
use reverb_ckpt::{Checkpointer, Epoch};
use reverb_logger::LoggedEndpoint;
use reverb_transport::bootstrap::TcpBootstrap;
#[cfg(not(feature = "fault-injection"))]
use reverb_transport::config::env_os;
#[cfg(feature = "fault-injection")]
use reverb_transport::config::Env;
use reverb_transport::Rank;

use super::error::{Result, RuntimeError};
use super::RuntimeConfig;

/// Every variable of this module.
pub const FAULT_VARS: [&str; 6] = [
    "REVERB_FAULT",
    "REVERB_FAULT_CKPT",
    "REVERB_FAULT_INIT",
    "REVERB_FAULT_GC",
    "REVERB_FAULT_FINALIZE",
    "REVERB_FAULT_FINALIZED",
];

/// A collective step of [`Runtime::init`](super::Runtime::init) (after the transport's open).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitStep {
    /// The logger's exchange of node ids and log rings (`LoggedEndpoint::new`).
    LogRings,
    /// The checkpointer's exchange of slot descriptors.
    CkptSlots,
}

/// What faults to inject (`REVERB_FAULT*`); empty without the `fault-injection` feature.
#[derive(Debug, Clone, Default)]
pub struct FaultPlan {
    /// `REVERB_FAULT=RANK:SENDS[@INCARNATION][,..]`: that incarnation (default 0) of RANK
    /// SIGKILLs itself after that send (a restarted one counts sends from its restart: a
    /// small count kills it during its replay).
    #[cfg(feature = "fault-injection")]
    pub sends: Vec<(Rank, u64, u32)>,
    /// `REVERB_FAULT_CKPT=RANK:EPOCH:STAGE`: incarnation 0 of RANK SIGKILLs itself at that
    /// stage of that checkpoint.
    #[cfg(feature = "fault-injection")]
    pub ckpt: Option<(Rank, Epoch, Stage)>,
    /// `REVERB_FAULT_INIT`: see `InitFault`.
    #[cfg(feature = "fault-injection")]
    pub init: Vec<InitFault>,
    /// `REVERB_FAULT_GC`: see `GcFault`.
    #[cfg(feature = "fault-injection")]
    pub gc: Vec<GcFault>,
    /// `REVERB_FAULT_FINALIZED=RANK[:MS][,..]`: incarnation 0 of RANK SIGKILLs itself MS ms
    /// after its `finalize` completed.
    #[cfg(feature = "fault-injection")]
    pub finalized: Vec<(Rank, Duration)>,
    /// `REVERB_FAULT_FINALIZE=RANK[:MS][,..]`: incarnation 0 of RANK holds its `finalize` MS
    /// ms before the final barrier.
    #[cfg(feature = "fault-injection")]
    pub finalize_held: Vec<(Rank, Duration)>,
}

/// Where an injection point is: the rank and its incarnation.
#[derive(Debug, Clone, Copy)]
// Read only by the injection points of fault-injection builds.
#[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
pub(super) struct Here {
    pub rank: Rank,
    pub incarnation: u32,
}

#[cfg(not(feature = "fault-injection"))]
impl FaultPlan {
    /// No plan: a set `REVERB_FAULT*` variable is an error, never silently ignored.
    pub fn from_env() -> Result<FaultPlan> {
        match FAULT_VARS.iter().find(|v| matches!(env_os(v), Ok(Some(_)))) {
            Some(var) => Err(RuntimeError::NoFaultInjection { var }),
            None => Ok(FaultPlan::default()),
        }
    }

    pub(super) fn after_send(&self, _here: Here, _sends: u64, _config: &RuntimeConfig) {}

    pub(super) fn arm_checkpoint(&self, _here: Here, _ckpt: &mut Checkpointer, _config: &RuntimeConfig) {}

    pub(super) fn after_finalize(&self, _here: Here, _config: &RuntimeConfig) {}

    pub(super) fn before_finalize(&self, _here: Here) {}

    pub(super) fn before_init_step(
        &self,
        _at: (Here, InitStep, bool),
        _endpoint: Option<&LoggedEndpoint>,
        _boot: &mut TcpBootstrap,
        _config: &RuntimeConfig,
    ) -> Result<()> {
        Ok(())
    }

    pub(super) fn before_log_gc(
        &self,
        _at: (Here, Epoch),
        _endpoint: Option<&mut LoggedEndpoint>,
        _boot: &mut TcpBootstrap,
        _known: &[u32],
        _config: &RuntimeConfig,
    ) -> Result<()> {
        Ok(())
    }
}

#[cfg(feature = "fault-injection")]
impl FaultPlan {
    /// Reads the `REVERB_FAULT*` variables; a malformed one is an error.
    pub fn from_env() -> Result<FaultPlan> {
        let env = Env::process();
        let list = |name: &str| env.non_empty(name);
        Ok(FaultPlan {
            sends: list("REVERB_FAULT")?.map(|v| parse_send_faults(&v)).transpose()?.unwrap_or_default(),
            ckpt: list("REVERB_FAULT_CKPT")?.map(|v| parse_ckpt_fault(&v)).transpose()?,
            init: match list("REVERB_FAULT_INIT")? {
                Some(v) => v.split(',').map(str::parse).collect::<Result<Vec<InitFault>>>()?,
                None => Vec::new(),
            },
            gc: match list("REVERB_FAULT_GC")? {
                Some(v) => v.split(',').map(str::parse).collect::<Result<Vec<GcFault>>>()?,
                None => Vec::new(),
            },
            finalized: list("REVERB_FAULT_FINALIZED")?
                .map(|v| parse_rank_delays("REVERB_FAULT_FINALIZED", &v))
                .transpose()?
                .unwrap_or_default(),
            finalize_held: list("REVERB_FAULT_FINALIZE")?
                .map(|v| parse_rank_delays("REVERB_FAULT_FINALIZE", &v))
                .transpose()?
                .unwrap_or_default(),
        })
    }

    /// `REVERB_FAULT_FINALIZE`: holds the planned time before the final barrier, saying so
    /// first (the line a test waits for).
    pub(super) fn before_finalize(&self, here: Here) {
        if here.incarnation != 0 {
            return;
        }
        if let Some(&(_, hold)) = self.finalize_held.iter().find(|(r, _)| *r == here.rank) {
            eprintln!(
                "reverb: rank {}: holding finalize for {} ms (REVERB_FAULT_FINALIZE)",
                here.rank,
                hold.as_millis()
            );
            std::thread::sleep(hold);
        }
    }

    /// `REVERB_FAULT_FINALIZED`: dies the planned time after `finalize` completed.
    pub(super) fn after_finalize(&self, here: Here, config: &RuntimeConfig) {
        if here.incarnation != 0 {
            return;
        }
        if let Some(&(_, after)) = self.finalized.iter().find(|(r, _)| *r == here.rank) {
            std::thread::sleep(after);
            die_now(config.report_dir.as_deref());
        }
    }

    /// `REVERB_FAULT`: dies after the planned send.
    pub(super) fn after_send(&self, here: Here, sends: u64, config: &RuntimeConfig) {
        if self.sends.contains(&(here.rank, sends, here.incarnation)) {
            die_now(config.report_dir.as_deref());
        }
    }

    /// `REVERB_FAULT_CKPT`: arms the checkpointer's hook at incarnation 0 of the rank.
    pub(super) fn arm_checkpoint(&self, here: Here, ckpt: &mut Checkpointer, config: &RuntimeConfig) {
        if let (Some((rank, epoch, stage)), 0) = (self.ckpt, here.incarnation) {
            if rank == here.rank && CKPT_FAULT.set((epoch, stage, config.report_dir.clone())).is_ok() {
                ckpt.set_fault_hook(Some(ckpt_fault_hook));
            }
        }
    }

    /// `REVERB_FAULT_INIT`: the fault planned just before `step`'s collective, in init's
    /// first attempt or (`retry`) its second, at incarnation 0.
    pub(super) fn before_init_step(
        &self,
        (here, step, retry): (Here, InitStep, bool),
        endpoint: Option<&LoggedEndpoint>,
        boot: &mut TcpBootstrap,
        config: &RuntimeConfig,
    ) -> Result<()> {
        let mine = |f: &&InitFault| {
            here.incarnation == 0 && f.rank == here.rank && f.step == step && f.retry == retry
        };
        match self.init.iter().find(mine) {
            Some(&fault) => inject_init_fault(fault, endpoint, boot, config),
            None => Ok(()),
        }
    }

    /// `REVERB_FAULT_GC`: dies, or joins late, just before the log GC after `epoch`, or arms
    /// the endpoint to die inside it.
    pub(super) fn before_log_gc(
        &self,
        (here, epoch): (Here, Epoch),
        endpoint: Option<&mut LoggedEndpoint>,
        boot: &mut TcpBootstrap,
        known: &[u32],
        config: &RuntimeConfig,
    ) -> Result<()> {
        let fault = self.gc.iter().find(|f| f.rank == here.rank && f.epoch == epoch && here.incarnation == 0);
        match fault.map(|f| f.action) {
            Some(GcAction::Kill) => die_now(config.report_dir.as_deref()),
            Some(GcAction::Late) => {
                let what = format!("the log GC of epoch {epoch}");
                wait_failed_rank_back(boot, known, config.rejoin_timeout, &what)
            }
            Some(GcAction::KillInTrim) => {
                if let (Some(endpoint), Ok(())) = (endpoint, TRIM_FAULT.set(config.report_dir.clone())) {
                    endpoint.set_trim_fault_hook(Some(trim_fault_hook));
                }
                Ok(())
            }
            None => Ok(()),
        }
    }
}

#[cfg(feature = "fault-injection")]
fn parse_send_faults(v: &str) -> Result<Vec<(Rank, u64, u32)>> {
    v.split(',')
        .map(|one| {
            let (spec, incarnation) = one.split_once('@').unwrap_or((one, "0"));
            spec.split_once(':')
                .and_then(|(r, n)| {
                    Some((r.trim().parse().ok()?, n.trim().parse().ok()?, incarnation.trim().parse().ok()?))
                })
                .ok_or_else(|| {
                    RuntimeError::InvalidArgument(format!(
                        "REVERB_FAULT={v:?}: expected RANK:SENDS[@INCARNATION][,..]"
                    ))
                })
        })
        .collect()
}

#[cfg(feature = "fault-injection")]
fn parse_rank_delays(name: &str, v: &str) -> Result<Vec<(Rank, Duration)>> {
    v.split(',')
        .map(|one| {
            let (rank, ms) = one.split_once(':').unwrap_or((one, "0"));
            match (rank.trim().parse(), ms.trim().parse()) {
                (Ok(rank), Ok(ms)) => Ok((rank, Duration::from_millis(ms))),
                _ => Err(RuntimeError::InvalidArgument(format!("{name}={v:?}: expected RANK[:MS][,..]"))),
            }
        })
        .collect()
}

#[cfg(feature = "fault-injection")]
fn parse_ckpt_fault(v: &str) -> Result<(Rank, Epoch, Stage)> {
    let bad = || {
        RuntimeError::InvalidArgument(format!(
            "REVERB_FAULT_CKPT={v:?}: expected RANK:EPOCH:STAGE, STAGE one of entered, \
             local-written, buddy-body-landed, buddy-flipped, voting, committed"
        ))
    };
    let parts: Vec<&str> = v.trim().split(':').collect();
    let [rank, epoch, stage] = parts[..] else { return Err(bad()) };
    let stage = match stage {
        "entered" => Stage::Entered,
        "local-written" => Stage::LocalWritten,
        "buddy-body-landed" => Stage::BuddyBodyLanded,
        "buddy-flipped" => Stage::BuddyFlipped,
        "voting" => Stage::Voting,
        "committed" => Stage::Committed,
        _ => return Err(bad()),
    };
    Ok((rank.parse().map_err(|_| bad())?, epoch.parse().map_err(|_| bad())?, stage))
}

#[cfg(feature = "fault-injection")]
/// Fault injection at the log GC after a checkpoint (`REVERB_FAULT_GC`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcFault {
    /// The rank that acts.
    pub rank: Rank,
    /// The checkpoint whose GC it acts at.
    pub epoch: Epoch,
    /// What it does there.
    pub action: GcAction,
}

#[cfg(feature = "fault-injection")]
/// What a [`GcFault`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GcAction {
    /// SIGKILL just before the GC's collective.
    Kill,
    /// Join the GC's collective only once a failed rank has rejoined (bounded wait).
    Late,
    /// SIGKILL after the GC's collective, before the logs are trimmed.
    KillInTrim,
}

#[cfg(feature = "fault-injection")]
impl std::str::FromStr for GcFault {
    type Err = RuntimeError;
    fn from_str(v: &str) -> Result<Self> {
        let bad = || {
            RuntimeError::InvalidArgument(format!("REVERB_FAULT_GC={v:?}: expected RANK:EPOCH[:late|:trim]"))
        };
        let parts: Vec<&str> = v.trim().split(':').collect();
        let (rank, epoch, action) = match parts[..] {
            [rank, epoch] => (rank, epoch, GcAction::Kill),
            [rank, epoch, "late"] => (rank, epoch, GcAction::Late),
            [rank, epoch, "trim"] => (rank, epoch, GcAction::KillInTrim),
            _ => return Err(bad()),
        };
        let rank = rank.trim().parse().map_err(|_| bad())?;
        let epoch = epoch.trim().parse().map_err(|_| bad())?;
        Ok(GcFault { rank, epoch, action })
    }
}

#[cfg(feature = "fault-injection")]
/// What an [`InitFault`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitFaultAction {
    /// SIGKILL this rank (its node goes down).
    KillRank,
    /// SIGKILL the node's logger core (`reverb run --logger`), then wait to be taken down.
    KillLogger,
    /// Join the step's collective only once a failed rank has rejoined (bounded wait).
    Late,
}

#[cfg(feature = "fault-injection")]
/// Fault injection inside [`Runtime::init`](super::Runtime::init) (`REVERB_FAULT_INIT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitFault {
    /// The rank that acts.
    pub rank: Rank,
    /// The collective it acts before.
    pub step: InitStep,
    /// What it does there.
    pub action: InitFaultAction,
    /// In init's second attempt (after an early failure was recovered), not its first.
    pub retry: bool,
}

#[cfg(feature = "fault-injection")]
impl std::str::FromStr for InitFault {
    type Err = RuntimeError;
    fn from_str(v: &str) -> Result<Self> {
        let bad = || {
            RuntimeError::InvalidArgument(format!(
                "REVERB_FAULT_INIT={v:?}: expected RANK:STEP[:logger|:late][@retry], STEP one of log-rings, \
                 ckpt-slots"
            ))
        };
        let (spec, retry) = match v.trim().split_once('@') {
            Some((spec, "retry")) => (spec, true),
            Some(_) => return Err(bad()),
            None => (v.trim(), false),
        };
        let parts: Vec<&str> = spec.split(':').collect();
        let (rank, step, action) = match parts[..] {
            [rank, step] => (rank, step, InitFaultAction::KillRank),
            [rank, step, "logger"] => (rank, step, InitFaultAction::KillLogger),
            [rank, step, "late"] => (rank, step, InitFaultAction::Late),
            _ => return Err(bad()),
        };
        let step = match step {
            "log-rings" => InitStep::LogRings,
            "ckpt-slots" => InitStep::CkptSlots,
            _ => return Err(bad()),
        };
        Ok(InitFault { rank: rank.trim().parse().map_err(|_| bad())?, step, action, retry })
    }
}

#[cfg(feature = "fault-injection")]
/// The checkpoint stage at which this process kills itself, and where it notes the time
/// (the checkpointer's hook is a plain `fn`).
static CKPT_FAULT: std::sync::OnceLock<(Epoch, Stage, Option<PathBuf>)> = std::sync::OnceLock::new();

#[cfg(feature = "fault-injection")]
/// Where the process armed to die inside a log GC's trim notes the time.
static TRIM_FAULT: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();

#[cfg(feature = "fault-injection")]
fn trim_fault_hook() {
    if let Some(dir) = TRIM_FAULT.get() {
        die_now(dir.as_deref());
    }
}

#[cfg(feature = "fault-injection")]
fn ckpt_fault_hook(epoch: Epoch, stage: Stage) {
    if let Some((e, s, dir)) = CKPT_FAULT.get() {
        if (*e, *s) == (epoch, stage) {
            die_now(dir.as_deref());
        }
    }
}

#[cfg(feature = "fault-injection")]
/// Fault injection: records the time and SIGKILLs this process.
fn die_now(report_dir: Option<&std::path::Path>) -> ! {
    if let Some(dir) = report_dir {
        // Best effort: the report only loses the detection time without it.
        let _ = std::fs::write(dir.join("kill.ns"), unix_ns().to_string());
    }
    sigkill(own_pid());
    std::thread::sleep(Duration::from_secs(60));
    std::process::abort();
}

#[cfg(feature = "fault-injection")]
/// Waits (bounded by `timeout`) until a rank is back at an incarnation newer than `known`
/// (indexed by rank) and none is lost: a fault injection's late join.
fn wait_failed_rank_back(
    boot: &mut TcpBootstrap,
    known: &[u32],
    timeout: Duration,
    what: &str,
) -> Result<()> {
    let me = boot.job().rank;
    let start = Instant::now();
    loop {
        let table = boot.lookup()?;
        let back: Vec<Rank> = table
            .iter()
            .filter(|a| a.incarnation > known.get(a.rank as usize).copied().unwrap_or(0))
            .map(|a| a.rank)
            .collect();
        if !back.is_empty() && table.iter().all(|a| a.address.is_some()) {
            tracing::warn!(
                "reverb: fault injection: rank {me} joins {what} late, after ranks {back:?} rejoined"
            );
            return Ok(());
        }
        if start.elapsed() > timeout {
            return Err(RuntimeError::Timeout {
                what: format!("fault injection: rank {me} waiting for a failed rank to rejoin"),
                after: timeout,
            });
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(feature = "fault-injection")]
/// Waits (bounded) until this node's logger core has finished its start-up: ranks attach to
/// its segment before that, and a logger killed while the other loggers still open their
/// transport is a different fault (the loggers' start-up) from the one asked for here.
fn wait_logger_ready(client: &reverb_logger::core::NodeLogClient, bound: Duration) {
    use reverb_logger::core::segment::{Status, STATE_READY};
    let start = Instant::now();
    while client.status(Status::State) != STATE_READY && start.elapsed() < bound {
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[cfg(feature = "fault-injection")]
/// `REVERB_FAULT_INIT`: SIGKILLs this rank, or (`:logger`) its node's logger core and then
/// waits for the launcher to take the node down (this rank dies by itself if it does not),
/// or (`:late`) waits until a failed rank is back and returns.
fn inject_init_fault(
    fault: InitFault,
    endpoint: Option<&LoggedEndpoint>,
    boot: &mut TcpBootstrap,
    config: &RuntimeConfig,
) -> Result<()> {
    let dir = config.report_dir.as_deref();
    match fault.action {
        InitFaultAction::KillRank => die_now(dir),
        InitFaultAction::Late => {
            let what = format!("{:?}", fault.step);
            return wait_failed_rank_back(boot, &[], config.rejoin_timeout, &what);
        }
        InitFaultAction::KillLogger => {}
    }
    let attached;
    let client = match endpoint.and_then(LoggedEndpoint::logger_offload) {
        Some(offload) => Some(offload.client()),
        None => {
            attached = reverb_logger::sink::LoggerOffload::attach_from_env(boot.job().local_rank.into());
            match &attached {
                Ok(Some(offload)) => Some(offload.client()),
                _ => None,
            }
        }
    };
    if let Some(client) = client {
        wait_logger_ready(client, config.rejoin_timeout);
    }
    let pid = client.map_or(0, |c| c.status(reverb_logger::core::segment::Status::LoggerPid));
    match libc::pid_t::try_from(pid) {
        Ok(pid) if pid > 0 => {
            tracing::warn!(
                "reverb: fault injection: SIGKILL to this node's logger core (pid {pid}) inside init"
            );
            sigkill(pid);
            std::thread::sleep(config.rejoin_timeout);
        }
        _ => tracing::warn!(
            "reverb: fault injection: no logger core to kill (run with --logger): killing this rank"
        ),
    }
    die_now(dir);
}
