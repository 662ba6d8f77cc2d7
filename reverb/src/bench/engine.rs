//! The shared benchmark engine (perftest's shape: one engine, thin mains per test).
//!
//! - parameters: [`Params`], the size list parser [`parse_sizes`], default iteration counts;
//! - the job: [`run_in_job`] re-executes the binary as a two-rank job when it was not launched,
//!   or joins the job it is in (rank 0 initiates and prints, rank 1 responds);
//! - resources: [`Session`] opens the provider, allocates two registered regions per rank and
//!   exchanges their descriptors through the bootstrap all-gather;
//! - the measured loops: ping-pong latency ([`Session::latency`]) and windowed bandwidth
//!   ([`Session::bandwidth`]), with data verified on a first pass per size ([`Session::verify`]);
//! - statistics ([`LatStats`], [`BwStats`]) and output ([`Output`]: table or JSON lines).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use reverb_transport::bootstrap::TcpBootstrap;
use reverb_transport::config::parse_size;
use reverb_transport::{
    Access, Bootstrap, CompletionKind, JobInfo, OpId, Owner, PeerState, Provider, ProviderKind, Rank,
    RecvBuffer, Region, RemoteRegion, Rma, Signal, Source, Tag, TagMatch, TransportConfig, TransportError,
    WaitMode,
};

use crate::launcher::LaunchSpec;

/// Tags of the benchmark's messages; the high bytes spell "rvb" so they stand out in traces.
pub const TAG_DATA: Tag = 0x7276_6200_0000_0001;
/// Control messages (FIN/ACK of the final sync, commands of the criterion responder).
pub const TAG_CTRL: Tag = 0x7276_6200_0000_0002;
/// Control receives kept posted, so a burst of control messages never arrives unexpected.
const CTRL_DEPTH: usize = 4;
const CTRL_CAPACITY: usize = 256;
/// How often spin loops look at the clock and the peer's liveness (a power of two).
const SPINS_PER_CHECK: u32 = 4096;

/// The operation a test measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Op {
    Put,
    #[value(name = "put_imm", alias = "put-imm")]
    PutImm,
    Get,
    Send,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Put => "put",
            Op::PutImm => "put_imm",
            Op::Get => "get",
            Op::Send => "send",
        }
    }
}

/// Who does what in a two-rank test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Rank 0: posts first, times, prints.
    Initiator,
    /// Rank 1: answers.
    Responder,
}

/// How loops wait for completions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitStyle {
    /// `poll()` in a spin loop: lowest latency, one busy core per side.
    BusyPoll,
    /// The provider's `wait()` in its configured mode (poll, event or hybrid).
    Provider(WaitMode),
}

/// Everything a measured test needs to know.
#[derive(Clone, Debug)]
pub struct Params {
    pub op: Op,
    pub sizes: Vec<usize>,
    pub iters: Option<u64>,
    pub warmup: Option<u64>,
    /// Bandwidth: operations kept outstanding.
    pub window: usize,
    /// Signal every M-th RMA operation (the others are `Signal::No`).
    pub cq_mod: usize,
    pub wait: WaitStyle,
    /// Bound of every single wait.
    pub timeout: Duration,
    pub json: bool,
    pub progress: bool,
    pub verbose: bool,
    /// `--provider`, overriding `REVERB_PROVIDER`.
    pub provider: Option<ProviderKind>,
    /// Ranks per simulated node of the self-launched job (default: 2 for shm, 1 for verbs).
    pub ranks_per_node: Option<u32>,
    /// Bound of the whole self-launched job.
    pub job_timeout: Duration,
    /// Core of rank 0 and of rank 1 (`--cores 0,1`); empty: not pinned.
    pub cores: Vec<usize>,
    /// `--log P`: measure send through a `LoggedEndpoint` under protocol P (see `logged`).
    pub log: Option<reverb_logger::LogMode>,
    /// `--logger PLACEMENT`: node logger cores for the `--log` job.
    pub logger: reverb_logger::core::Placement,
    /// `--recv`: named or wildcard receives in the `--log` loops.
    pub recv: super::logged::RecvKind,
}

impl Params {
    pub fn max_size(&self) -> usize {
        self.sizes.iter().copied().max().unwrap_or(0)
    }

    /// (measured, warm-up) iterations of a latency test: at most about 1 GiB moved per size.
    pub fn lat_counts(&self, size: usize) -> (u64, u64) {
        let iters = self.iters.unwrap_or_else(|| ((1u64 << 30) / size as u64).clamp(100, 10_000));
        (iters, self.warmup.unwrap_or_else(|| (iters / 10).clamp(10, 1000)))
    }

    /// (measured, warm-up) operations of a bandwidth test: about 2 GiB moved per size.
    pub fn bw_counts(&self, size: usize) -> (u64, u64) {
        let iters = self.iters.unwrap_or_else(|| ((2u64 << 30) / size as u64).clamp(200, 100_000));
        (iters, self.warmup.unwrap_or_else(|| (iters / 10).clamp(self.window as u64, 10_000)))
    }
}

/// Parses `2-8M` (every power of two from 2 to 8 MiB) or a list `8,4k,64k,1M`.
pub fn parse_sizes(spec: &str) -> Result<Vec<usize>> {
    let spec = spec.trim();
    let sizes = if spec.contains(',') || !spec.contains('-') {
        spec.split(',')
            .map(|s| parse_size(s).with_context(|| format!("--sizes {spec:?}")))
            .collect::<Result<Vec<_>>>()?
    } else {
        let (lo, hi) =
            spec.split_once('-').ok_or_else(|| anyhow!("--sizes {spec:?}: expected LO-HI or a list"))?;
        let lo = parse_size(lo).with_context(|| format!("--sizes {spec:?}"))?;
        let hi = parse_size(hi).with_context(|| format!("--sizes {spec:?}"))?;
        if lo == 0 || lo > hi {
            bail!("--sizes {spec:?}: the range must satisfy 1 <= LO <= HI");
        }
        let mut sizes = vec![lo];
        let mut next = lo.next_power_of_two();
        if next == lo {
            next = lo.saturating_mul(2);
        }
        while next <= hi {
            sizes.push(next);
            next = next.saturating_mul(2);
        }
        sizes
    };
    if let Some(bad) = sizes.iter().find(|&&s| s == 0 || s > 1 << 30) {
        bail!("--sizes {spec:?}: size {bad} is outside 1..=1G");
    }
    Ok(sizes)
}

/// Runs `body` inside a two-rank job. Outside a job, re-executes this binary with the same
/// arguments as two launched ranks and returns when they have finished.
pub fn run_in_job(params: &Params, body: impl FnOnce(&mut Session) -> Result<()>) -> Result<()> {
    let job = JobInfo::from_env().context("reading the launcher's job environment")?;
    let Some(job) = job else {
        return launch_self(params);
    };
    if job.size != 2 {
        bail!("reverb bench runs on exactly 2 ranks; this job has {}", job.size);
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
    let mut session = Session::join(&config, params.max_size(), params.wait, params.timeout)?;
    body(&mut session)?;
    session.finish()
}

pub(super) fn launch_self(params: &Params) -> Result<()> {
    let program: PathBuf = std::env::current_exe().context("finding the reverb executable")?;
    // Intra-node by default for shm (the path it serves), one rank per node for verbs.
    // Logged runs need two nodes: an intra-node message is not logged.
    let ranks_per_node = params.ranks_per_node.unwrap_or(match params.provider {
        _ if params.log.is_some() => 1,
        Some(ProviderKind::Verbs) => 1,
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
        let ring = super::logged::ring_bytes(params);
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

/// Completions seen so far, sorted by what the loops ask for.
#[derive(Default)]
struct Events {
    /// Local completions of signaled put / put_imm / get, in arrival order.
    rma: VecDeque<OpId>,
    data_sends: u64,
    data_recvs: u64,
    /// Length every data receive must have; a different one is recorded in `bad_len`.
    expect_len: usize,
    bad_len: Option<usize>,
    ctrl: VecDeque<Vec<u8>>,
    imms: VecDeque<u32>,
}

/// A bounded wait: created unarmed so fast paths never read the clock.
struct Deadline {
    at: Option<Instant>,
    bound: Duration,
}

impl Deadline {
    fn new(bound: Duration) -> Self {
        Deadline { at: None, bound }
    }
    /// Re-arms after progress was seen.
    fn extend(&mut self) {
        self.at = None;
    }
    fn expired(&mut self) -> bool {
        let now = Instant::now();
        now > *self.at.get_or_insert(now + self.bound)
    }
}

/// One rank's benchmark resources: the provider, the bootstrap, two registered regions and the
/// peer's descriptors of its two regions.
pub struct Session {
    provider: Box<dyn Provider>,
    boot: Box<dyn Bootstrap>,
    role: Role,
    peer: Rank,
    /// Source of puts and sends, and the region the peer's gets read.
    src: Region,
    /// Target of the peer's puts and sends, and of this rank's gets.
    dst: Region,
    peer_src: RemoteRegion,
    peer_dst: RemoteRegion,
    capacity: usize,
    wait: WaitStyle,
    timeout: Duration,
    ev: Events,
}

impl Session {
    /// Connects to the job's bootstrap, opens the provider and exchanges region descriptors.
    pub fn join(
        config: &TransportConfig,
        capacity: usize,
        wait: WaitStyle,
        timeout: Duration,
    ) -> Result<Session> {
        let boot = TcpBootstrap::connect_from_env().context("connecting to the job's bootstrap")?;
        let mut boot: Box<dyn Bootstrap> = Box::new(boot);
        let job = boot.job().clone();
        let mut provider = reverb_transport::open(config, boot.as_mut())
            .with_context(|| format!("opening the {} provider", config.provider))?;
        let capacity = capacity.max(1);
        let src =
            provider.alloc_region(capacity, Access::REMOTE_READ).context("registering the source region")?;
        let dst =
            provider.alloc_region(capacity, Access::REMOTE_RW).context("registering the target region")?;
        let mut mine = Vec::with_capacity(2 * RemoteRegion::WIRE_LEN);
        mine.extend_from_slice(&src.remote().to_bytes());
        mine.extend_from_slice(&dst.remote().to_bytes());
        let all = boot.allgather(&mine).context("exchanging region descriptors")?;
        let peer = if job.rank == 0 { 1 } else { 0 };
        let theirs = all
            .get(peer as usize)
            .filter(|d| d.len() == 2 * RemoteRegion::WIRE_LEN)
            .ok_or_else(|| anyhow!("rank {peer} sent no valid region descriptors"))?;
        let peer_src = RemoteRegion::from_bytes(&theirs[..RemoteRegion::WIRE_LEN])?;
        let peer_dst = RemoteRegion::from_bytes(&theirs[RemoteRegion::WIRE_LEN..])?;
        let role = if job.rank == 0 { Role::Initiator } else { Role::Responder };
        let mut session = Session {
            provider,
            boot,
            role,
            peer,
            src,
            dst,
            peer_src,
            peer_dst,
            capacity,
            wait,
            timeout,
            ev: Events::default(),
        };
        for _ in 0..CTRL_DEPTH {
            session.post_ctrl_recv()?;
        }
        // Control receives are posted on both sides before anyone sends one.
        session.boot.barrier().context("bootstrap barrier after setup")?;
        Ok(session)
    }

    pub fn role(&self) -> Role {
        self.role
    }

    pub fn provider(&self) -> &dyn Provider {
        self.provider.as_ref()
    }

    /// The provider and the bootstrap, for tests that layer a library on them (bench ckpt).
    pub fn parts(&mut self) -> (&mut dyn Provider, &mut dyn Bootstrap) {
        (self.provider.as_mut(), self.boot.as_mut())
    }

    /// Registered bytes per region (the largest message size).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Ends the session in step with the peer, so neither side tears down early.
    pub fn finish(mut self) -> Result<()> {
        self.boot.barrier().context("final bootstrap barrier")?;
        Ok(())
    }

    fn check_size(&self, size: usize) -> Result<()> {
        if size == 0 || size > self.capacity {
            bail!("message size {size} is outside 1..={}", self.capacity);
        }
        Ok(())
    }

    // ----- completions -------------------------------------------------------------------

    fn post_ctrl_recv(&mut self) -> Result<()> {
        self.provider
            .post_recv(
                Source::Rank(self.peer),
                TagMatch::exact(TAG_CTRL),
                RecvBuffer::Owned { capacity: CTRL_CAPACITY },
            )
            .context("posting a control receive")?;
        Ok(())
    }

    /// Progresses once (busy poll, or a short provider wait) and sorts the completions.
    /// Busy polling is `Provider::poll` minus its intermediate `Vec`: `progress`, then the
    /// completion queue is read in place, so an empty poll costs one `progress` call.
    fn pump(&mut self) -> Result<()> {
        self.pump_as(self.wait)
    }

    /// [`Session::pump`] with an explicit wait style.
    fn pump_as(&mut self, wait: WaitStyle) -> Result<()> {
        match wait {
            WaitStyle::BusyPoll => self.provider.progress().context("polling completions")?,
            WaitStyle::Provider(_) => {
                let slice = Duration::from_millis(10);
                match self.provider.wait_until(Owner::APP, slice, &mut |cq| !cq.is_empty()) {
                    Ok(()) | Err(TransportError::Timeout(_)) => {}
                    Err(e) => return Err(anyhow!(e).context("waiting for completions")),
                }
            }
        }
        let cq = self.provider.completions();
        let mut result = Ok(());
        while let Some(c) = cq.pop_front() {
            if let Err(e) = &c.status {
                result = Err(anyhow!(e.clone()).context(format!("failed completion {:?}", c.kind)));
                continue;
            }
            match c.kind {
                CompletionKind::Put | CompletionKind::PutImm | CompletionKind::Get => {
                    self.ev.rma.push_back(c.op)
                }
                CompletionKind::Send { tag, .. } => {
                    if tag == TAG_DATA {
                        self.ev.data_sends += 1;
                    }
                }
                CompletionKind::Recv { tag, len, data, .. } => {
                    if tag == TAG_DATA {
                        self.ev.data_recvs += 1;
                        if len != self.ev.expect_len {
                            self.ev.bad_len = Some(len);
                        }
                    } else if tag == TAG_CTRL {
                        self.ev.ctrl.push_back(data.unwrap_or_default());
                    }
                }
                CompletionKind::Imm { imm, .. } => self.ev.imms.push_back(imm),
            }
        }
        result
    }

    /// Progresses until `ready` holds; fails after `bound` without progress or if the peer dies.
    fn wait_for(&mut self, what: &str, bound: Duration, ready: impl Fn(&Events) -> bool) -> Result<()> {
        let mut deadline = Deadline::new(bound);
        let mut spins = 0u32;
        loop {
            self.pump()?;
            if ready(&self.ev) {
                return Ok(());
            }
            spins = spins.wrapping_add(1);
            if spins & 255 == 0 || matches!(self.wait, WaitStyle::Provider(_)) {
                self.check_alive(what)?;
                if deadline.expired() {
                    bail!("timed out after {bound:?} waiting for {what}");
                }
            }
        }
    }

    fn check_alive(&self, what: &str) -> Result<()> {
        if self.provider.peer_state(self.peer) == PeerState::Dead {
            bail!("rank {} died while waiting for {what}", self.peer);
        }
        Ok(())
    }

    /// Spins on the last byte of the local target region until it holds `marker`
    /// (perftest's write-latency arrival test; RMA writes raise no completion at the target).
    fn spin_byte(&mut self, offset: usize, marker: u8) -> Result<()> {
        let mut deadline = Deadline::new(self.timeout);
        let mut spins = 0u32;
        loop {
            if self.dst.load_volatile(offset)? == marker {
                return Ok(());
            }
            spins = spins.wrapping_add(1);
            if spins & (SPINS_PER_CHECK - 1) == 0 {
                self.check_alive("a put to arrive")?;
                if deadline.expired() {
                    bail!("timed out after {:?} waiting for a put to arrive", self.timeout);
                }
            }
            std::hint::spin_loop();
        }
    }

    /// Consumes finished signaled RMA operations; blocks (bounded) while `pending >= limit`.
    fn reap_rma(&mut self, mut pending: usize, limit: usize) -> Result<usize> {
        if pending == 0 {
            return Ok(0);
        }
        self.pump()?;
        pending = pending.saturating_sub(std::mem::take(&mut self.ev.rma).len());
        if pending >= limit {
            let want = pending + 1 - limit;
            self.wait_for("RMA completions", self.timeout, |ev| ev.rma.len() >= want)?;
            pending = pending.saturating_sub(std::mem::take(&mut self.ev.rma).len());
        }
        Ok(pending)
    }

    pub fn send_ctrl(&mut self, msg: &[u8]) -> Result<()> {
        self.provider.send(self.peer, TAG_CTRL, msg).context("sending a control message")?;
        Ok(())
    }

    /// Waits (bounded by `bound`) for the next control message from the peer.
    pub fn recv_ctrl(&mut self, bound: Duration) -> Result<Vec<u8>> {
        if self.ev.ctrl.is_empty() {
            self.wait_for("a control message", bound, |ev| !ev.ctrl.is_empty())?;
        }
        let msg = self.ev.ctrl.pop_front().unwrap_or_default();
        self.post_ctrl_recv()?;
        Ok(msg)
    }

    fn expect_ctrl(&mut self, want: &[u8], bound: Duration) -> Result<()> {
        let got = self.recv_ctrl(bound)?;
        if got != want {
            bail!(
                "protocol error: expected control message {:?}, got {:?}",
                String::from_utf8_lossy(want),
                String::from_utf8_lossy(&got)
            );
        }
        Ok(())
    }

    fn signal(&self, i: u64, total: u64, cq_mod: usize) -> Signal {
        if (i + 1).is_multiple_of(cq_mod.max(1) as u64) || i + 1 == total {
            Signal::Yes
        } else {
            Signal::No
        }
    }

    /// Posts one RMA operation of `op` between the session's regions.
    fn post_rma(&mut self, op: Op, size: usize, imm: u32, signal: Signal) -> Result<OpId> {
        let rma = match op {
            Op::Get => {
                Rma { local: &self.dst, local_offset: 0, remote: &self.peer_src, remote_offset: 0, len: size }
            }
            _ => {
                Rma { local: &self.src, local_offset: 0, remote: &self.peer_dst, remote_offset: 0, len: size }
            }
        };
        let posted = match op {
            Op::Put => self.provider.put(rma, signal),
            Op::PutImm => self.provider.put_imm(rma, imm, signal),
            Op::Get => self.provider.get(rma, signal),
            Op::Send => return Err(anyhow!("send is not an RMA operation")),
        };
        posted.with_context(|| format!("posting a {size}-byte {}", op.as_str()))
    }

    fn post_data_recv(&mut self, size: usize) -> Result<()> {
        let buffer = RecvBuffer::Region { region: self.dst.clone(), offset: 0, capacity: size };
        self.provider
            .post_recv(Source::Rank(self.peer), TagMatch::exact(TAG_DATA), buffer)
            .context("posting a data receive")?;
        Ok(())
    }

    fn post_data_send(&mut self, size: usize) -> Result<()> {
        self.provider
            .send_region(self.peer, TAG_DATA, &self.src, 0, size)
            .with_context(|| format!("posting a {size}-byte send"))?;
        Ok(())
    }

    /// Sets the expected receive length and clears per-phase counters.
    fn reset_events(&mut self, size: usize) -> Result<()> {
        self.pump()?;
        if let Some(len) = self.ev.bad_len.take() {
            bail!("a data receive carried {len} bytes, expected {}", self.ev.expect_len);
        }
        let ctrl = std::mem::take(&mut self.ev.ctrl);
        self.ev = Events { expect_len: size, ctrl, ..Events::default() };
        Ok(())
    }

    fn check_events(&mut self) -> Result<()> {
        if let Some(len) = self.ev.bad_len.take() {
            bail!("a data receive carried {len} bytes, expected {}", self.ev.expect_len);
        }
        Ok(())
    }

    // ----- verification ------------------------------------------------------------------

    /// Moves one patterned message of `size` bytes with `op` and checks every byte at the
    /// receiving side; both ranks fail if it does not match. `initiator_acts` picks the
    /// direction (the acting rank issues the put, put_imm, send or get).
    pub fn verify(&mut self, op: Op, size: usize, initiator_acts: bool) -> Result<()> {
        self.check_size(size)?;
        self.reset_events(size)?;
        let acting = (self.role == Role::Initiator) == initiator_acts;
        let salt = (size as u32).rotate_left(7) ^ u32::from(initiator_acts) ^ op as u32;
        let expected = pattern(size, salt);
        // The side whose bytes are read (put/send source, get target) writes the pattern;
        // the other clears the bytes the pattern must arrive in.
        let writes_pattern = acting != (op == Op::Get);
        if writes_pattern {
            self.src.write(0, &expected)?;
        } else {
            self.dst.fill(0, size, 0)?;
            if op == Op::Send {
                self.post_data_recv(size)?;
            }
        }
        self.boot.barrier().context("barrier before verification")?;
        let bound = self.timeout;
        let mut checks = false;
        if acting {
            match op {
                Op::Send => {
                    self.post_data_send(size)?;
                    self.wait_for("the verification send", bound, |ev| ev.data_sends >= 1)?;
                }
                _ => {
                    let id = self.post_rma(op, size, VERIFY_IMM, Signal::Yes)?;
                    self.wait_for("the verification RMA", bound, |ev| ev.rma.contains(&id))?;
                    self.ev.rma.clear();
                    checks = op == Op::Get;
                }
            }
        } else {
            match op {
                Op::Send => {
                    self.wait_for("the verification receive", bound, |ev| ev.data_recvs >= 1)?;
                    self.check_events()?;
                    checks = true;
                }
                Op::PutImm => {
                    self.wait_for("the verification immediate", bound, |ev| !ev.imms.is_empty())?;
                    let imm = self.ev.imms.pop_front().unwrap_or_default();
                    if imm != VERIFY_IMM {
                        bail!("put_imm delivered immediate {imm:#x}, expected {VERIFY_IMM:#x}");
                    }
                    checks = true;
                }
                Op::Put => checks = true,
                Op::Get => {}
            }
        }
        // Orders the data movement before the check (a put raises nothing at the target).
        self.boot.barrier().context("barrier after the verification transfer")?;
        let mut verdict = Vec::new();
        if checks {
            let got = self.dst.to_vec(0, size)?;
            if let Some(i) = got.iter().zip(&expected).position(|(a, b)| a != b) {
                verdict = format!("byte {i} of {size} is {:#04x}, expected {:#04x}", got[i], expected[i])
                    .into_bytes();
            }
        }
        let all = self.boot.allgather(&verdict).context("exchanging verification results")?;
        for (rank, v) in all.iter().enumerate() {
            if !v.is_empty() {
                bail!(
                    "data verification failed for {} of {size} bytes at rank {rank}: {}",
                    op.as_str(),
                    String::from_utf8_lossy(v)
                );
            }
        }
        // Leave the target bytes cleared: the latency loops look for changing markers.
        self.dst.fill(0, size, 0)?;
        Ok(())
    }

    // ----- latency -----------------------------------------------------------------------

    /// Runs `warmup + iters` ping-pong iterations of `op` (one get per iteration for get).
    /// The initiator returns one sample per measured iteration: the full round trip (the
    /// caller halves it for ping-pongs); the responder returns no samples.
    pub fn latency(
        &mut self,
        op: Op,
        size: usize,
        iters: u64,
        warmup: u64,
        cq_mod: usize,
    ) -> Result<Vec<Duration>> {
        self.check_size(size)?;
        self.reset_events(size)?;
        self.src.fill(0, size, 0)?;
        self.dst.fill(0, size, 0)?;
        if op == Op::Send && self.role == Role::Responder {
            self.post_data_recv(size)?;
        }
        self.boot.barrier().context("barrier before the latency loop")?;
        let total = warmup + iters;
        let mut pending = 0usize;
        let limit = 64usize;
        let last = size - 1;
        let initiator = self.role == Role::Initiator;
        // Consecutive iteration starts, as perftest stamps consecutive posts: a sample
        // includes everything the loop does per iteration (completion reaping too).
        let calibration = super::clock::Calibration::start();
        let mut ticks = Vec::with_capacity(iters as usize);
        let mut prev = super::clock::ticks();
        for i in 0..total {
            if initiator {
                let now = super::clock::ticks();
                if i > warmup {
                    ticks.push(now.wrapping_sub(prev));
                }
                prev = now;
            }
            let signal = self.signal(i, total, cq_mod);
            match op {
                Op::Put => {
                    let marker = marker(i);
                    if initiator {
                        self.src.store_volatile(last, marker)?;
                        self.post_rma(op, size, 0, signal)?;
                        pending += usize::from(signal == Signal::Yes);
                        self.spin_byte(last, marker)?;
                    } else {
                        self.spin_byte(last, marker)?;
                        self.src.store_volatile(last, marker)?;
                        self.post_rma(op, size, 0, signal)?;
                        pending += usize::from(signal == Signal::Yes);
                    }
                    pending = self.reap_rma(pending, limit)?;
                }
                Op::PutImm => {
                    let imm = i as u32;
                    if initiator {
                        self.post_rma(op, size, imm, signal)?;
                        pending += usize::from(signal == Signal::Yes);
                        self.wait_imm(imm)?;
                    } else {
                        self.wait_imm(imm)?;
                        self.post_rma(op, size, imm, signal)?;
                        pending += usize::from(signal == Signal::Yes);
                    }
                    pending = self.reap_rma(pending, limit)?;
                }
                Op::Send => {
                    if initiator {
                        self.post_data_recv(size)?;
                        self.post_data_send(size)?;
                    }
                    let bound = self.timeout;
                    self.wait_for("a reply", bound, |ev| ev.data_recvs > i)?;
                    if !initiator {
                        if i + 1 < total {
                            self.post_data_recv(size)?;
                        }
                        self.post_data_send(size)?;
                    }
                    let sent = i + 1;
                    if sent >= self.ev.data_sends + limit as u64 {
                        self.wait_for("send completions", bound, |ev| ev.data_sends + limit as u64 > sent)?;
                    }
                }
                Op::Get => {
                    if initiator {
                        let id = self.post_rma(op, size, 0, Signal::Yes)?;
                        let bound = self.timeout;
                        self.wait_for("a get", bound, |ev| ev.rma.back() == Some(&id))?;
                        self.ev.rma.clear();
                    }
                }
            }
        }
        if initiator {
            ticks.push(super::clock::ticks().wrapping_sub(prev));
        }
        let samples = calibration.to_durations(&ticks);
        // Drain: every signaled operation and every send has completed before the next size.
        let bound = self.timeout;
        if pending > 0 {
            self.wait_for("the last RMA completions", bound, |ev| ev.rma.len() >= pending)?;
            self.ev.rma.clear();
        }
        if op == Op::Send {
            self.wait_for("the last send completions", bound, |ev| ev.data_sends >= total)?;
        }
        if op == Op::Get {
            // The responder idled through the gets; its bound covers the whole run.
            if initiator {
                self.send_ctrl(b"FIN")?;
            } else {
                let bound = self.timeout + Duration::from_millis(total);
                self.expect_ctrl(b"FIN", bound)?;
            }
        }
        self.check_events()?;
        Ok(samples)
    }

    fn wait_imm(&mut self, imm: u32) -> Result<()> {
        let bound = self.timeout;
        self.wait_for("a put_imm to arrive", bound, |ev| !ev.imms.is_empty())?;
        let got = self.ev.imms.pop_front().unwrap_or_default();
        if got != imm {
            bail!("put_imm delivered immediate {got}, expected {imm} (lost or reordered)");
        }
        Ok(())
    }

    // ----- bandwidth ---------------------------------------------------------------------

    /// Streams `warmup` then `iters` operations of `op`, `window` outstanding, RMA signaled
    /// every `cq_mod`-th; each phase ends with a FIN/ACK sync that proves the data landed.
    /// The initiator returns the measured phase's statistics.
    pub fn bandwidth(
        &mut self,
        op: Op,
        size: usize,
        iters: u64,
        warmup: u64,
        window: usize,
        cq_mod: usize,
    ) -> Result<Option<BwStats>> {
        self.check_size(size)?;
        let window = window.max(1);
        if warmup > 0 {
            self.bw_phase(op, size, warmup, window, cq_mod)?;
        }
        let stats = self.bw_phase(op, size, iters, window, cq_mod)?;
        Ok(stats)
    }

    fn bw_phase(
        &mut self,
        op: Op,
        size: usize,
        total: u64,
        window: usize,
        cq_mod: usize,
    ) -> Result<Option<BwStats>> {
        self.reset_events(size)?;
        let mut posted_recvs = 0u64;
        if self.role == Role::Responder && op == Op::Send {
            while posted_recvs < total.min(window as u64) {
                self.post_data_recv(size)?;
                posted_recvs += 1;
            }
        }
        self.boot.barrier().context("barrier before the bandwidth loop")?;
        if self.role == Role::Responder {
            return self.bw_respond(op, size, total, window, posted_recvs).map(|()| None);
        }
        // Peak: the best of 20 equal slices of the run (at least a window each), long enough
        // that batched completions or batched ring drains cannot fake a burst.
        let mut meter = PeakMeter::new(total, window, size);
        let mut signaled: VecDeque<(OpId, u64)> = VecDeque::new();
        let (mut posted, mut done) = (0u64, 0u64);
        let mut deadline = Deadline::new(self.timeout);
        let start = Instant::now();
        while done < total {
            while posted < total && posted - done < window as u64 {
                if op == Op::Send {
                    self.post_data_send(size)?;
                } else {
                    let signal = self.signal(posted, total, cq_mod);
                    let id = self.post_rma(op, size, posted as u32, signal)?;
                    if signal == Signal::Yes {
                        signaled.push_back((id, posted));
                    }
                }
                posted += 1;
            }
            self.pump()?;
            let before = done;
            if op == Op::Send {
                done = self.ev.data_sends;
            } else {
                // A signaled completion implies every earlier operation is done too.
                while let Some(id) = self.ev.rma.pop_front() {
                    if let Some(pos) = signaled.iter().position(|(s, _)| *s == id) {
                        done = done.max(signaled[pos].1 + 1);
                        signaled.drain(..=pos);
                    }
                }
            }
            if done != before {
                deadline.extend();
                meter.advance(done);
            } else if deadline.expired() {
                bail!("timed out after {:?} waiting for {} completions", self.timeout, op.as_str());
            }
        }
        // Final sync: the responder acknowledges only once everything arrived.
        self.send_ctrl(b"FIN")?;
        let bound = self.timeout;
        let ack = self.recv_ctrl(bound)?;
        let elapsed = start.elapsed();
        // For send the responder's arrivals give the peak: an eager send completes once
        // buffered, so the initiator's slices would show enqueue speed. (A put_imm's bytes are
        // placed when its completion is raised; its Imm notifications trail in bursts.)
        let arrival_peak = match ack.strip_prefix(b"ACK".as_slice()) {
            Some([]) => None,
            Some(rest) => Some(f64::from_le_bytes(
                rest.try_into().map_err(|_| anyhow!("protocol error: malformed ACK"))?,
            )),
            None => bail!("protocol error: expected ACK, got {:?}", String::from_utf8_lossy(&ack)),
        };
        self.check_events()?;
        let secs = elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
        let bytes = total as f64 * size as f64;
        Ok(Some(BwStats {
            size,
            iters: total,
            window,
            cq_mod,
            avg_mib_s: bytes / secs / MIB,
            peak_mib_s: arrival_peak.unwrap_or(meter.peak).max(bytes / secs) / MIB,
            msg_rate_mps: total as f64 / secs / 1e6,
            elapsed,
        }))
    }

    fn bw_respond(
        &mut self,
        op: Op,
        size: usize,
        total: u64,
        window: usize,
        mut posted_recvs: u64,
    ) -> Result<()> {
        let mut deadline = Deadline::new(self.timeout);
        let mut seen = 0u64;
        let mut meter = PeakMeter::new(total, window, size);
        // Over verbs, puts and gets need nothing from the target's CPU until the FIN: idle
        // between single non-blocking polls, as perftest's server sleeps in its TCP handshake
        // meanwhile. A spinning target would take a CPU from the initiator and, on soft-RoCE,
        // from the kernel moving the data. The FIN waits at most one nap (1 ms) longer, which
        // is noise for verbs runs but not for shm's millisecond-long runs: shm keeps spinning.
        let idle = matches!(op, Op::Put | Op::Get) && self.provider.kind() == ProviderKind::Verbs;
        loop {
            if idle {
                self.pump_as(WaitStyle::BusyPoll)?;
                if self.ev.ctrl.is_empty() {
                    std::thread::sleep(Duration::from_millis(1));
                }
            } else {
                self.pump()?;
            }
            let arrived = match op {
                Op::Send => self.ev.data_recvs,
                Op::PutImm => self.ev.imms.len() as u64,
                // Puts and gets raise nothing here: the FIN says they are done.
                Op::Put | Op::Get => total,
            };
            if op == Op::Send {
                while posted_recvs < total && posted_recvs - arrived < window as u64 {
                    self.post_data_recv(size)?;
                    posted_recvs += 1;
                }
            }
            if arrived != seen || !self.ev.ctrl.is_empty() {
                seen = arrived;
                deadline.extend();
                if op == Op::Send {
                    meter.advance(arrived);
                }
            }
            if arrived >= total && !self.ev.ctrl.is_empty() {
                break;
            }
            if deadline.expired() {
                // Puts and gets are invisible here, so only the FIN can end the wait; allow
                // the whole phase at a pessimistic 1 MB/s before giving up.
                let budget = self.timeout + Duration::from_secs_f64(total as f64 * size as f64 / 1e6);
                if arrived >= total && deadline.bound < budget {
                    deadline = Deadline::new(budget);
                    continue;
                }
                bail!("timed out waiting for {} ({arrived} of {total} arrived)", op.as_str());
            }
            if self.wait == WaitStyle::BusyPoll {
                self.check_alive("data")?;
            }
        }
        if op == Op::PutImm {
            let imms: Vec<u32> = self.ev.imms.drain(..).collect();
            if let Some((i, imm)) = imms.iter().enumerate().find(|(i, imm)| **imm != *i as u32) {
                bail!("put_imm {i} delivered immediate {imm} (lost or reordered)");
            }
        }
        self.check_events()?;
        self.expect_ctrl(b"FIN", self.timeout)?;
        let mut ack = b"ACK".to_vec();
        if op == Op::Send {
            ack.extend_from_slice(&meter.peak.to_le_bytes());
        }
        self.send_ctrl(&ack)
    }
}

const VERIFY_IMM: u32 = 0x5EED_0001;
/// Tracks peak bandwidth: the best rate over equal slices of a run (at least a window each),
/// long enough that batched completions or ring drains cannot fake a burst.
struct PeakMeter {
    stride: u64,
    stride_bytes: f64,
    next_mark: u64,
    last_mark: Instant,
    /// Bytes per second.
    peak: f64,
}

impl PeakMeter {
    fn new(total: u64, window: usize, size: usize) -> PeakMeter {
        let stride = (total / PEAK_SLICES).max(window as u64);
        PeakMeter {
            stride,
            stride_bytes: (stride * size as u64) as f64,
            next_mark: stride,
            last_mark: Instant::now(),
            peak: 0.0,
        }
    }

    /// `done` operations have finished: credit every slice boundary crossed since the last one.
    fn advance(&mut self, done: u64) {
        if done < self.next_mark {
            return;
        }
        let crossed = (done - self.next_mark) / self.stride + 1;
        let now = Instant::now();
        let secs = (now - self.last_mark).as_secs_f64();
        if secs > 0.0 {
            self.peak = self.peak.max(crossed as f64 * self.stride_bytes / secs);
        }
        self.last_mark = now;
        self.next_mark += crossed * self.stride;
    }
}

/// Bandwidth peak: the best of this many equal slices of a run.
const PEAK_SLICES: u64 = 20;
pub const MIB: f64 = 1024.0 * 1024.0;

/// A never-zero byte that differs from the previous iteration's.
fn marker(i: u64) -> u8 {
    (i % 251) as u8 + 1
}

/// Bytes that depend on position, size and direction, so stale data cannot pass.
fn pattern(size: usize, salt: u32) -> Vec<u8> {
    (0..size)
        .map(|i| {
            let x = (i as u32).wrapping_mul(0x9E37_79B1) ^ salt.wrapping_mul(0x85EB_CA6B);
            (x >> 24) as u8 ^ (i as u8)
        })
        .collect()
}

// ----- statistics ------------------------------------------------------------------------

/// perftest-style latency statistics in microseconds.
#[derive(Clone, Debug)]
pub struct LatStats {
    pub size: usize,
    pub iters: usize,
    pub min_us: f64,
    pub typical_us: f64,
    pub avg_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

impl LatStats {
    /// `halve`: the samples are round trips and the report is half of each (ping-pong).
    pub fn from_samples(size: usize, samples: &[Duration], halve: bool) -> Result<LatStats> {
        if samples.is_empty() {
            bail!("no latency samples for {size} bytes");
        }
        let scale = if halve { 0.5e6 } else { 1e6 };
        let mut us: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * scale).collect();
        us.sort_by(f64::total_cmp);
        let n = us.len();
        let p99 = ((n as f64 * 0.99).ceil() as usize).clamp(1, n) - 1;
        Ok(LatStats {
            size,
            iters: n,
            min_us: us[0],
            typical_us: us[n / 2],
            avg_us: us.iter().sum::<f64>() / n as f64,
            p99_us: us[p99],
            max_us: us[n - 1],
        })
    }
}

#[derive(Clone, Debug)]
pub struct BwStats {
    pub size: usize,
    pub iters: u64,
    pub window: usize,
    pub cq_mod: usize,
    pub avg_mib_s: f64,
    /// Best of `PEAK_SLICES` equal slices of the run (arrivals at the target for send,
    /// completions at the initiator for put, put_imm and get).
    pub peak_mib_s: f64,
    pub msg_rate_mps: f64,
    pub elapsed: Duration,
}

// ----- output ----------------------------------------------------------------------------

const RULE: &str = "---------------------------------------------------------------------------------------";

/// Table (perftest-like) or JSON lines (one object per size) on stdout; progress on stderr.
pub struct Output {
    pub json: bool,
    pub progress: bool,
    pub provider: String,
    pub op: Op,
}

impl Output {
    pub fn header(&self, title: &str, notes: &[String], columns: &str) {
        if self.json {
            return;
        }
        println!("{RULE}");
        println!(" {title}");
        for note in notes {
            println!(" {note}");
        }
        println!("{RULE}");
        println!("{columns}");
    }

    pub fn progress(&self, what: &str) {
        if self.progress {
            eprintln!("[reverb bench] {what}");
        }
    }

    pub fn lat_row(&self, s: &LatStats, halved: bool) {
        if self.json {
            let row = serde_json::json!({
                "test": "lat", "op": self.op.as_str(), "provider": self.provider,
                "bytes": s.size, "iters": s.iters, "half_round_trip": halved,
                "t_min_us": s.min_us, "t_typical_us": s.typical_us, "t_avg_us": s.avg_us,
                "t_99_us": s.p99_us, "t_max_us": s.max_us,
            });
            println!("{row}");
        } else {
            println!(
                " {:<10} {:<9} {:>10.3} {:>14.3} {:>10.3} {:>10.3} {:>10.3}",
                s.size, s.iters, s.min_us, s.typical_us, s.avg_us, s.p99_us, s.max_us
            );
        }
    }

    pub fn bw_row(&self, s: &BwStats) {
        if self.json {
            let row = serde_json::json!({
                "test": "bw", "op": self.op.as_str(), "provider": self.provider,
                "bytes": s.size, "iters": s.iters, "window": s.window, "cq_mod": s.cq_mod,
                "bw_avg_mib_s": s.avg_mib_s, "bw_peak_mib_s": s.peak_mib_s,
                "msg_rate_mps": s.msg_rate_mps, "seconds": s.elapsed.as_secs_f64(),
            });
            println!("{row}");
        } else {
            println!(
                " {:<10} {:<9} {:>6} {:>6} {:>14.1} {:>15.1} {:>12.3}",
                s.size, s.iters, s.window, s.cq_mod, s.avg_mib_s, s.peak_mib_s, s.msg_rate_mps
            );
        }
    }
}

impl Output {
    pub fn memcpy_row(&self, size: usize, iters: u64, hot_mib_s: f64, cold_mib_s: f64) {
        if self.json {
            let row = serde_json::json!({
                "test": "memcpy", "bytes": size, "iters": iters,
                "hot_mib_s": hot_mib_s, "cold_mib_s": cold_mib_s,
            });
            println!("{row}");
        } else {
            println!(" {size:<10} {iters:<9} {hot_mib_s:>14.1} {cold_mib_s:>14.1}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_ranges_are_powers_of_two() {
        assert_eq!(parse_sizes("2-16").unwrap(), vec![2, 4, 8, 16]);
        assert_eq!(parse_sizes("2-8M").unwrap().len(), 23);
        assert_eq!(parse_sizes("3-16").unwrap(), vec![3, 4, 8, 16]);
        assert_eq!(parse_sizes("8,4k,64k,1M").unwrap(), vec![8, 4096, 65536, 1 << 20]);
        assert_eq!(parse_sizes("4k").unwrap(), vec![4096]);
    }

    #[test]
    fn bad_sizes_are_errors() {
        for bad in ["", "0-8", "8-2", "2-x", "8,,4", "2g", "1-2-3"] {
            assert!(parse_sizes(bad).is_err(), "{bad:?} should fail");
        }
    }

    #[test]
    fn markers_change_and_are_never_zero() {
        for i in 0..1000u64 {
            assert_ne!(marker(i), 0);
            assert_ne!(marker(i), marker(i + 1));
        }
    }

    #[test]
    fn latency_statistics() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        let s = LatStats::from_samples(8, &samples, true).unwrap();
        assert_eq!(s.min_us, 0.5);
        assert_eq!(s.max_us, 50.0);
        assert_eq!(s.p99_us, 49.5);
        assert!((s.avg_us - 25.25).abs() < 1e-9);
        assert!(LatStats::from_samples(8, &[], false).is_err());
    }

    #[test]
    fn patterns_differ_by_salt() {
        assert_ne!(pattern(64, 1), pattern(64, 2));
        assert_eq!(pattern(64, 1), pattern(64, 1));
    }
}
