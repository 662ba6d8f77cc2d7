//! `Runtime::init`: the transport's open, then the logged endpoint and the checkpointer,
//! each set up by a collective that a failure inside init makes start over (see `early`).

use reverb_ckpt::{Checkpointer, CkptConfig};
use reverb_logger::{LoggedEndpoint, SetupFailed};
use reverb_transport::bootstrap::{BootParams, TcpBootstrap};
use reverb_transport::sys::clock::CoarseInstant;
use reverb_transport::{Bootstrap, JobInfo, PeerState, Provider, Rank, TransportConfig, TransportError};

use super::early::{wait_none_lost, EarlyRecovery};
use super::error::{Result, RuntimeError};
use super::fault::{Here, InitStep};
use super::finished::{self, FinishedPeers, LostUnit};
use super::report::{rank_cpu_ns, unix_ns, RuntimeReport};
use super::{initboot, Runtime, RuntimeConfig};

/// What every step of init needs to know about this rank.
struct InitCtx<'a> {
    config: &'a RuntimeConfig,
    /// The failure unit of every rank (node or team).
    unit_of: &'a [u32],
    here: Here,
    /// Incarnation > 0: this rank recovers inside init.
    restarted: bool,
}

impl InitCtx<'_> {
    /// Whether the next collective is this rank's first attempt (framed, see `initboot`).
    fn first_attempt(&self, early: &EarlyRecovery) -> bool {
        !self.restarted && !early.happened()
    }
}

impl Runtime {
    pub(super) fn init_from(config: RuntimeConfig) -> Result<Runtime> {
        let init_start_ns = unix_ns();
        let mut boot = connect(&config)?;
        let job = boot.job().clone();
        let node_of: Vec<u32> = (0..job.size).map(|r| job.node_of(r)).collect();
        let unit_of = config.log.failure_units(&node_of);
        let ctx = InitCtx {
            config: &config,
            unit_of: &unit_of,
            here: Here { rank: job.rank, incarnation: job.incarnation },
            restarted: job.incarnation > 0,
        };
        let provider = open_transport(&ctx, &mut boot, &job, &node_of)?;
        let mut early = EarlyRecovery::default();
        let mut endpoint = build_endpoint(&ctx, provider, &mut boot, &mut early)?;
        let ckpt = match checkpoint_levels(config.ckpt.clone(), config.ckpt_auto, &job) {
            Some(levels) => Some(build_checkpointer(&ctx, levels, &mut endpoint, &mut boot, &mut early)?),
            None => None,
        };
        let incarnation_of: Vec<u32> =
            (0..job.size).map(|r| endpoint.provider().peer_incarnation(r).unwrap_or(0)).collect();
        let report = RuntimeReport {
            rank: job.rank,
            incarnation: job.incarnation,
            pid: std::process::id(),
            mode: config.log.mode.to_string(),
            init_start_ns,
            checkpoint_memory_bytes: ckpt.as_ref().map_or(0, |c| checkpoint_memory(c) as u64),
            ..RuntimeReport::default()
        };
        let spheres = super::redundant::spheres_of(config.redundancy, job.rank, job.size)?;
        let mut rt = Runtime {
            spheres,
            incarnation_of,
            boot,
            endpoint: Some(endpoint),
            ckpt,
            rank: job.rank,
            size: job.size,
            node_of,
            unit_of,
            restored_app: None,
            protected: Vec::new(),
            restored_extra: Vec::new(),
            replay: None,
            sends: 0,
            recoveries: 0,
            logs_cut: Vec::new(),
            last_boot_check: CoarseInstant::now(),
            logger_verdicts_seen: 0,
            init_end_cpu_ns: 0,
            report,
            config,
        };
        rt.finish_init(early, job.node)?;
        rt.report.init_end_ns = unix_ns();
        rt.init_end_cpu_ns = rank_cpu_ns(rt.config.object_rank.is_some());
        Ok(rt)
    }

    /// The recovery collectives that end init: a restarted rank's own, or (a survivor of a
    /// failure inside init) the restarted ranks'.
    fn finish_init(&mut self, early: EarlyRecovery, my_node: u32) -> Result<()> {
        if self.restarted() {
            let my_unit = self.unit_of.get(self.rank as usize).copied().unwrap_or(my_node);
            let restarted_ranks: Vec<Rank> =
                (0..self.size).filter(|&r| self.unit_of[r as usize] == my_unit).collect();
            if let Err(e) = self.recovery_collective(&restarted_ranks, true) {
                let unit = LostUnit::of(self.rank, &self.unit_of, &self.node_of);
                return Err(finished::explain(&mut self.boot, &unit, e, self.config.rejoin_timeout));
            }
        } else if let Some((detected, start)) = early.detected {
            // The restarted ranks' recovery collectives: no epoch is committed, so they start
            // from the initial state, and no rank has sent anything yet.
            self.recovery_collective(&early.failed, false).map_err(RuntimeError::during_recovery)?;
            // Nothing was logged before the failure: the restarted buddies lost no determinant.
            self.logs_cut.clear();
            self.recoveries += 1;
            self.report.detected_ns.push(detected);
            self.report.recovery_ms.push(start.elapsed().as_secs_f64() * 1e3);
        }
        Ok(())
    }
}

/// Joins the rendezvous as the environment's rank, or as `config.object_rank` (an object of
/// a process hosting several: same node, its own rank).
fn connect(config: &RuntimeConfig) -> Result<TcpBootstrap> {
    let Some(rank) = config.object_rank else {
        if let Some(host) = config.objects.as_ref().filter(|o| o.ranks.len() > 1) {
            // Only the first would join: the others' peers would wait for them until a bound.
            return Err(RuntimeError::InvalidArgument(format!(
                "this process hosts ranks {:?} (reverb run --objects): run them with run_objects, \
                 not Runtime::init",
                host.ranks
            )));
        }
        return Ok(TcpBootstrap::connect_from_env()?);
    };
    let mut job = JobInfo::from_env()?.ok_or_else(|| {
        RuntimeError::InvalidArgument("an object needs the launcher's job environment".into())
    })?;
    if rank >= job.size || job.node_of(rank) != job.node {
        return Err(RuntimeError::InvalidArgument(format!(
            "object rank {rank} is not a rank of this process's node {} (job of {} ranks)",
            job.node, job.size
        )));
    }
    job.local_rank = rank % job.ranks_per_node.max(1);
    job.rank = rank;
    Ok(TcpBootstrap::connect_with(job, &BootParams::from_env()?)?)
}

/// The transport's open (one collective), then, at a restarted rank, the wait for the
/// ranks restarted with it.
fn open_transport(
    ctx: &InitCtx,
    boot: &mut TcpBootstrap,
    job: &JobInfo,
    node_of: &[u32],
) -> Result<Box<dyn Provider>> {
    let restarted = ctx.restarted;
    // Peers that finished the job (a node lost as its ranks exited) never come back: said
    // before the transport's rejoin, which waits a while for ranks without an address.
    let unit = LostUnit::of(job.rank, ctx.unit_of, node_of);
    if restarted {
        FinishedPeers::default().settle(boot, &unit)?;
    }
    let mut provider = reverb_transport::open(&TransportConfig::from_env()?, boot).map_err(|e| match e {
        // The providers' open is one collective that owns its half-built state: a
        // survivor has nothing to reconnect with.
        TransportError::PeerDead(r) if !restarted => RuntimeError::Unrecoverable(format!(
            "rank {r} failed while the transport was opening (the first collective of init); \
             a failure there is not recovered"
        )),
        e => RuntimeError::from(e).during_recovery_if(restarted),
    })?;
    if restarted {
        Runtime::check_recoverable(&ctx.config.log, node_of)?;
        let my_unit = ctx.unit_of.get(job.rank as usize).copied().unwrap_or(job.node);
        // Unit mates restarted with this rank: the provider may have found their dead
        // incarnation.
        for mate in (0..job.size).filter(|&r| r != job.rank && ctx.unit_of[r as usize] == my_unit) {
            if provider.peer_state(mate) != PeerState::Alive {
                finished::await_mate(provider.as_mut(), boot, mate, ctx.config.rejoin_timeout, &unit)?;
            }
        }
        // Collectives fail while any rank is lost: another node failing with this one
        // must be back before the endpoint's setup starts.
        wait_none_lost(boot, ctx.config.rejoin_timeout, &unit)?;
    }
    Ok(provider)
}

/// The endpoint's collectives. A peer failing in them (this rank at incarnation 0): the
/// provider comes back, the failed units rejoin, and the setup starts over with them (they
/// run it in their own init).
fn build_endpoint(
    ctx: &InitCtx,
    mut provider: Box<dyn Provider>,
    boot: &mut TcpBootstrap,
    early: &mut EarlyRecovery,
) -> Result<LoggedEndpoint> {
    loop {
        let at = (ctx.here, InitStep::LogRings, early.happened());
        ctx.config.faults.before_init_step(at, None, boot, ctx.config)?;
        let first_attempt = ctx.first_attempt(early);
        let built =
            LoggedEndpoint::try_new(provider, &mut *init_boot(boot, first_attempt), ctx.config.log.clone());
        let SetupFailed { error, provider: mut back } = match built {
            Ok(endpoint) => return Ok(endpoint),
            Err(failed) => failed,
        };
        // The provider came back with the error: a peer failing here is recovered with it.
        early.recover(
            back.as_mut(),
            boot,
            ctx.config,
            ctx.unit_of,
            RuntimeError::from(error),
            ctx.restarted,
        )?;
        provider = back;
    }
}

/// The checkpointer's slot exchange, started over (after the survivors' side of the
/// restarted ranks' endpoint setup) when a peer fails in it; then the fault hook, if any.
fn build_checkpointer(
    ctx: &InitCtx,
    levels: CkptConfig,
    endpoint: &mut LoggedEndpoint,
    boot: &mut TcpBootstrap,
    early: &mut EarlyRecovery,
) -> Result<Checkpointer> {
    let mut ckpt = loop {
        let at = (ctx.here, InitStep::CkptSlots, early.happened());
        ctx.config.faults.before_init_step(at, Some(endpoint), boot, ctx.config)?;
        let first_attempt = ctx.first_attempt(early);
        let built = Checkpointer::with_buddy_units(
            endpoint.provider(),
            &mut *init_boot(boot, first_attempt),
            levels.clone(),
            ctx.unit_of,
        );
        let e = match built {
            Ok(ckpt) => break ckpt,
            Err(e) => RuntimeError::from(e),
        };
        early.recover(endpoint.provider(), boot, ctx.config, ctx.unit_of, e, ctx.restarted)?;
        // The restarted ranks set up their endpoints (`LoggedEndpoint::new`): the
        // survivors' side of it, then the checkpointer from the start.
        endpoint
            .rejoin(&mut initboot::Recovering(boot), &early.failed)
            .map_err(|e| RuntimeError::from(e).during_recovery())?;
    };
    ctx.config.faults.arm_checkpoint(ctx.here, &mut ckpt, ctx.config);
    Ok(ckpt)
}

/// With `REVERB_CKPT` unset (`auto`), the levels the job's nodes allow: no parity below a
/// parity group's node count (or 2), no checkpoint at all on one node (no copy could survive).
fn checkpoint_levels(requested: Option<CkptConfig>, auto: bool, job: &JobInfo) -> Option<CkptConfig> {
    let mut levels = requested;
    if let (true, Some(c)) = (auto, levels.as_mut()) {
        let group = c.parity.map_or(0, |p| p.group_nodes);
        if (job.nodes() as usize) < group.max(2) {
            c.parity = None;
        }
    }
    if auto && job.nodes() < 2 {
        return None;
    }
    levels
}

/// The bootstrap for one of init's collectives: framed while this rank is in its first
/// attempt at init, else the recovery's (see `initboot`).
fn init_boot(boot: &mut TcpBootstrap, first_attempt: bool) -> Box<dyn Bootstrap + '_> {
    if first_attempt {
        Box::new(initboot::FirstAttempt(boot))
    } else {
        Box::new(initboot::Recovering(boot))
    }
}

/// Bytes of checkpoint slots one rank registers (local pair, buddy pairs it hosts, parity).
fn checkpoint_memory(ckpt: &Checkpointer) -> usize {
    let slot = ckpt.config().slot_len;
    let hosted = ckpt.placement().clients_of(ckpt.rank()).len();
    2 * slot * (1 + if ckpt.config().buddy { hosted } else { 0 })
}
