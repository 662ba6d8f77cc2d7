//! `reverb bench lat|bw --op send --log P`: the send ping-pong and the send stream measured
//! through a [`LoggedEndpoint`] (envelope, ordering, the logging protocol P) instead of the raw
//! provider. Two ranks on two simulated nodes, so every message is inter-node and logged;
//! `--logger PLACEMENT` adds the node logger cores, which then do the log writes.
//!
//! Logs are trimmed as a long run's checkpoints would: the sender's log through what the peer
//! confirmed (every reply in the ping-pong, every credit in the stream), the receiver's ring
//! through its durable watermark. The copy into the log and the log writes are still paid per
//! message; only the memory is reclaimed.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use reverb_logger::{LogConfig, LogMode, LoggedEndpoint};
use reverb_transport::bootstrap::TcpBootstrap;
use reverb_transport::{Bootstrap, JobInfo, Source, Tag, TagMatch, TransportConfig, WaitMode};

use super::engine::{pin_self, BwStats, LatStats, Op, Output, Params, WaitStyle};

/// Which receive the measured side posts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RecvKind {
    /// From the named peer: deterministic, no determinant.
    Named,
    /// Any source: a wildcard receive, one determinant each.
    Any,
}

const DATA: Tag = 0x10;
const CREDIT: Tag = 0x11;
const DONE: Tag = 0x12;
/// Ping-pong iterations between log trims (not inside a measured iteration).
const TRIM_EVERY: u64 = 64;

struct LoggedSession {
    ep: LoggedEndpoint,
    boot: TcpBootstrap,
    peer: u32,
    initiator: bool,
    source: Source,
    timeout: Duration,
    offload_trims: bool,
}

impl LoggedSession {
    fn recv_data(&mut self, size: usize) -> Result<()> {
        // In place: the payload is read where it arrived, as a large-message app would.
        let d = self
            .ep
            .recv_in_place(self.source, TagMatch::exact(DATA), self.timeout)
            .context("receiving data")?;
        if d.payload().len() != size {
            bail!("received {} bytes from rank {}, expected {size}", d.payload().len(), d.source);
        }
        Ok(())
    }

    /// Frees what the peer has confirmed: this rank's send log to it, its ring at the buddy,
    /// and (with logger cores, one rank per node) the logger's ring.
    fn trim(&mut self) -> Result<()> {
        if let Some(ssn) = self.ep.last_ssn_sent(self.peer) {
            self.ep.trim_send_log(self.peer, ssn)?;
        }
        self.ep.trim_log_to_durable()?;
        if self.offload_trims {
            if let Some(offload) = self.ep.logger_offload() {
                offload.trim(self.timeout)?;
            }
        }
        Ok(())
    }

    fn latency(&mut self, size: usize, iters: u64, warmup: u64) -> Result<Vec<Duration>> {
        let payload = pattern(size);
        self.boot.barrier().context("barrier before the latency loop")?;
        let mut samples = Vec::with_capacity(iters as usize);
        for i in 0..warmup + iters {
            let t0 = Instant::now();
            if self.initiator {
                self.ep.send(self.peer, DATA, &payload)?;
                self.recv_data(size)?;
            } else {
                self.recv_data(size)?;
                self.ep.send(self.peer, DATA, &payload)?;
            }
            if i >= warmup {
                samples.push(t0.elapsed());
            }
            if i % TRIM_EVERY == TRIM_EVERY - 1 {
                self.trim()?;
            }
        }
        self.trim()?;
        self.boot.barrier().context("barrier after the latency loop")?;
        Ok(samples)
    }

    /// Initiator streams `total` messages, at most `window` unconfirmed; the responder sends
    /// a credit every `window / 2` and DONE at the end. Timed at the initiator, DONE included.
    fn bandwidth(&mut self, size: usize, total: u64, window: usize) -> Result<Option<Duration>> {
        let payload = pattern(size);
        let half = (window as u64 / 2).max(1);
        self.boot.barrier().context("barrier before the bandwidth loop")?;
        let t0 = Instant::now();
        if self.initiator {
            let (mut sent, mut confirmed) = (0u64, 0u64);
            while sent < total {
                if sent - confirmed < window as u64 {
                    self.ep.send(self.peer, DATA, &payload)?;
                    sent += 1;
                } else {
                    self.ep.recv(Source::Rank(self.peer), TagMatch::exact(CREDIT), self.timeout)?;
                    confirmed += half;
                    if let Some(ssn) = self.ep.last_ssn_sent(self.peer) {
                        // The peer has delivered `confirmed` of the `sent` data messages.
                        let behind = sent - confirmed;
                        self.ep.trim_send_log(self.peer, ssn.saturating_sub(behind))?;
                    }
                }
            }
            self.ep.recv(Source::Rank(self.peer), TagMatch::exact(DONE), self.timeout)?;
        } else {
            for i in 1..=total {
                self.recv_data(size)?;
                if i % half == 0 && i < total {
                    self.trim()?;
                    self.ep.send(self.peer, CREDIT, &[])?;
                }
            }
            self.trim()?;
            self.ep.send(self.peer, DONE, &[])?;
            // DONE may sit in the provider's backlog behind FINs; push it out before the
            // barrier, which does not progress the provider.
            self.ep.wait_sends(self.timeout)?;
        }
        let elapsed = t0.elapsed();
        // Credits the initiator never waited for stay queued: drain them before the next size.
        while self.initiator {
            match self.ep.recv(Source::Rank(self.peer), TagMatch::exact(CREDIT), Duration::from_millis(1)) {
                Ok(_) => {}
                Err(reverb_logger::LogError::Transport(reverb_transport::TransportError::Timeout(_))) => {
                    break
                }
                Err(e) => return Err(e.into()),
            }
        }
        self.trim()?;
        self.boot.barrier().context("barrier after the bandwidth loop")?;
        Ok(self.initiator.then_some(elapsed))
    }
}

fn pattern(size: usize) -> Vec<u8> {
    (0..size).map(|i| (i as u8).wrapping_mul(31).wrapping_add(7)).collect()
}

fn join(params: &Params, job: &JobInfo, mode: LogMode) -> Result<LoggedSession> {
    if let Some(&core) = params.cores.get(job.rank as usize) {
        pin_self(core)?;
    }
    let mut config = TransportConfig::from_env().context("reading REVERB_* configuration")?;
    if let Some(kind) = params.provider {
        config.provider = kind;
    }
    config.wait_mode = match params.wait {
        WaitStyle::Provider(mode) => mode,
        WaitStyle::BusyPoll => WaitMode::Poll,
    };
    config.validate().context("checking the effective configuration")?;
    let mut boot = TcpBootstrap::connect_from_env().context("connecting to the job's bootstrap")?;
    let provider = reverb_transport::open(&config, &mut boot)
        .with_context(|| format!("opening the {} provider", config.provider))?;
    let mut log = LogConfig::from_env().context("reading REVERB_LOG* configuration")?;
    log.mode = mode;
    log.max_message = log.max_message.max(params.max_size());
    log.durable_timeout = params.timeout;
    log.ring_capacity = log.ring_capacity.max(ring_bytes(params));
    let ep = LoggedEndpoint::new(provider, &mut boot, log).context("opening the logged endpoint")?;
    let peer = if job.rank == 0 { 1 } else { 0 };
    let source = match params.recv {
        RecvKind::Named => Source::Rank(peer),
        RecvKind::Any => Source::Any,
    };
    // One rank per node: a logger trim cannot drop another rank's pending entries.
    let offload_trims = job.ranks_per_node == 1;
    Ok(LoggedSession {
        ep,
        boot,
        peer,
        initiator: job.rank == 0,
        source,
        timeout: params.timeout,
        offload_trims,
    })
}

/// Ring bytes (rank rings and logger rings) that hold a window of the largest messages twice.
pub fn ring_bytes(params: &Params) -> usize {
    let frame = params.max_size() + 4096;
    (2 * frame * params.window.max(2)).next_power_of_two().max(8 << 20)
}

fn run(params: &Params, body: impl FnOnce(&mut LoggedSession, &Output) -> Result<()>) -> Result<()> {
    let mode = params.log.ok_or_else(|| anyhow!("no --log protocol"))?;
    let Some(job) = JobInfo::from_env().context("reading the launcher's job environment")? else {
        return super::engine::launch_self(params);
    };
    if job.size != 2 {
        bail!("reverb bench runs on exactly 2 ranks; this job has {}", job.size);
    }
    let mut session = join(params, &job, mode)?;
    let out = Output {
        json: params.json,
        progress: params.progress,
        provider: session.ep.provider().kind().to_string(),
        op: Op::Send,
    };
    body(&mut session, &out)?;
    let LoggedSession { ep, mut boot, .. } = session;
    ep.finish(&mut boot).context("closing the logged endpoint")?;
    Ok(())
}

fn notes(params: &Params, out: &Output, what: &str) -> Vec<String> {
    let placement = params.logger.as_str();
    vec![
        format!(
            "provider: {}   ranks: 0 <-> 1 on two nodes   log: {}   logger cores: {placement}   receive: {:?}",
            out.provider,
            params.log.map_or("?", LogMode::as_str),
            params.recv
        ),
        what.to_string(),
    ]
}

pub fn lat_main(params: &Params) -> Result<()> {
    run(params, |s, out| {
        if s.initiator {
            out.header(
                "reverb logged send latency",
                &notes(params, out, "LoggedEndpoint send/recv ping-pong; latency = half the round trip [us]"),
                " #bytes     #iters     t_min[us]  t_typical[us]  t_avg[us]  t_99%[us]  t_max[us]",
            );
        }
        for &size in &params.sizes {
            let (iters, warmup) = params.lat_counts(size);
            let samples = s.latency(size, iters, warmup)?;
            if s.initiator {
                out.lat_row(&LatStats::from_samples(size, &samples, true)?, true);
            }
        }
        Ok(())
    })
}

pub fn bw_main(params: &Params) -> Result<()> {
    run(params, |s, out| {
        if s.initiator {
            out.header(
                "reverb logged send bandwidth",
                &notes(
                    params,
                    out,
                    &format!(
                        "LoggedEndpoint stream, window {} (credits every half), DONE included",
                        params.window
                    ),
                ),
                " #bytes     #iters    window cq_mod  BW avg[MiB/s]  BW peak[MiB/s]  Mmsg/s",
            );
        }
        for &size in &params.sizes {
            let (iters, warmup) = params.bw_counts(size);
            s.bandwidth(size, warmup, params.window)?;
            if let Some(elapsed) = s.bandwidth(size, iters, params.window)? {
                let secs = elapsed.as_secs_f64().max(1e-9);
                let avg = (iters as f64 * size as f64) / secs / f64::from(1u32 << 20);
                out.bw_row(&BwStats {
                    size,
                    iters,
                    window: params.window,
                    cq_mod: 1,
                    avg_mib_s: avg,
                    peak_mib_s: avg,
                    msg_rate_mps: iters as f64 / secs / 1e6,
                    elapsed,
                });
            }
        }
        Ok(())
    })
}
