//! Criterion latency of the shm provider: put, get and tagged send at 8 B, 4 KiB, 64 KiB and
//! 1 MiB, against a peer that is a separate OS process.
//!
//! How the peer exists: run outside a job (as `cargo bench` does), this binary re-executes
//! itself through reverb's launcher as a two-rank job with the same arguments. Rank 0 runs
//! criterion; rank 1 serves it. Before each measurement rank 0 sends a control message
//! (`verify OP SIZE`, `lat OP SIZE ITERS`, finally `quit`) over the provider, and both ranks
//! run the shared engine's loop (`reverb::bench::Session`, the code behind `reverb bench`).
//! One criterion iteration is half a ping-pong round trip (put, send) or one get.
//! Both ranks busy-poll, so they are pinned apart (rank r on cpu r, or the two cpus named by
//! `REVERB_BENCH_CORES=a,b`); on one cpu they would only trade scheduler time slices.

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use criterion::{BenchmarkId, Criterion, Throughput};
use reverb::bench::engine::{pin_self, Role};
use reverb::bench::{Op, Session, WaitStyle};
use reverb::launcher::{launch, LaunchSpec};
use reverb_transport::config::parse::parse_int;
use reverb_transport::config::Env;
use reverb_transport::{JobInfo, ProviderKind, TransportConfig};

const SIZES: [usize; 4] = [8, 4 << 10, 64 << 10, 1 << 20];
const OPS: [Op; 3] = [Op::Put, Op::Get, Op::Send];
/// Signal every 16th put, as `reverb bench` does by default.
const CQ_MOD: usize = 16;
/// Bound of a single wait inside a measurement.
const OP_TIMEOUT: Duration = Duration::from_secs(10);
/// The responder waits this long for rank 0's next command (criterion analyses in between).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(300);

fn main() {
    if let Err(e) = run() {
        eprintln!("shm bench: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    if JobInfo::from_env().context("reading the job environment")?.is_none() {
        return launch_peer_job();
    }
    let job = JobInfo::from_env()?.ok_or_else(|| anyhow!("no job environment"))?;
    if let Some(core) = bench_cores()?.get(job.rank as usize) {
        pin_self(*core)?;
    }
    let mut config = TransportConfig::from_env().context("reading REVERB_* configuration")?;
    config.provider = ProviderKind::SHM;
    let capacity = SIZES.iter().copied().max().unwrap_or(1);
    let mut session = Session::join(&config, capacity, WaitStyle::BusyPoll, OP_TIMEOUT, (0, 1))?;
    match session.role() {
        Role::Initiator => {
            let outcome = measure(&mut session);
            // Release the responder even when a measurement failed.
            session.send_ctrl(b"quit")?;
            outcome?;
        }
        Role::Responder => serve(&mut session)?,
    }
    session.finish()
}

/// The cpus of rank 0 and rank 1; none (no pinning) on a single-cpu machine.
fn bench_cores() -> Result<Vec<usize>> {
    if let Some(cores) = Env::process().list("REVERB_BENCH_CORES", parse_int::<usize>)? {
        return Ok(cores);
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    Ok(if cpus >= 2 { vec![0, 1] } else { Vec::new() })
}

/// Re-executes this benchmark as rank 0 (criterion) and rank 1 (the responder).
fn launch_peer_job() -> Result<()> {
    let spec = LaunchSpec {
        ranks: 2,
        ranks_per_node: 2,
        program: std::env::current_exe().context("finding the bench executable")?,
        args: std::env::args().skip(1).collect(),
        env: vec![("REVERB_PROVIDER".into(), "shm".into())],
        timeout: Some(Duration::from_secs(3600)),
        prefix_output: false,
    };
    let status = launch(&spec).context("launching the benchmark's two ranks")?;
    if status != 0 {
        bail!("benchmark ranks failed (exit status {status})");
    }
    Ok(())
}

fn measure(session: &mut Session) -> Result<()> {
    let mut criterion = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    for op in OPS {
        let mut group = criterion.benchmark_group(format!("shm/{}_lat", op.as_str()));
        for size in SIZES {
            command(session, &format!("verify {} {size}", op.as_str()))?;
            verify(session, op, size)?;
            group.throughput(Throughput::Bytes(size as u64));
            group.bench_function(BenchmarkId::from_parameter(size), |b| {
                b.iter_custom(|iters| {
                    // Criterion's closure cannot return an error: a failed transfer aborts.
                    round(session, op, size, iters)
                        .unwrap_or_else(|e| panic!("{} {size} B: {e:#}", op.as_str()))
                })
            });
        }
        group.finish();
    }
    criterion.final_summary();
    Ok(())
}

/// Runs `iters` measured iterations on both ranks; returns their summed (halved) time.
fn round(session: &mut Session, op: Op, size: usize, iters: u64) -> Result<Duration> {
    let iters = iters.max(1);
    command(session, &format!("lat {} {size} {iters}", op.as_str()))?;
    let samples = session.latency(op, size, iters, 0, CQ_MOD)?;
    let total: Duration = samples.iter().sum();
    Ok(if op == Op::Get { total } else { total / 2 })
}

fn verify(session: &mut Session, op: Op, size: usize) -> Result<()> {
    session.verify(op, size, true)?;
    if op != Op::Get {
        session.verify(op, size, false)?;
    }
    Ok(())
}

fn command(session: &mut Session, text: &str) -> Result<()> {
    session.send_ctrl(text.as_bytes())
}

/// Rank 1: runs whatever rank 0 asks until `quit`.
fn serve(session: &mut Session) -> Result<()> {
    loop {
        let msg = session.recv_ctrl(COMMAND_TIMEOUT)?;
        let text = String::from_utf8(msg).context("non-UTF-8 command")?;
        let words: Vec<&str> = text.split_whitespace().collect();
        match words.as_slice() {
            ["quit"] => return Ok(()),
            ["verify", op, size] => verify(session, parse_op(op)?, size.parse()?)?,
            ["lat", op, size, iters] => {
                session.latency(parse_op(op)?, size.parse()?, iters.parse()?, 0, CQ_MOD)?;
            }
            _ => return Err(anyhow!("unknown command {text:?}")),
        }
    }
}

fn parse_op(name: &str) -> Result<Op> {
    OPS.into_iter().find(|op| op.as_str() == name).ok_or_else(|| anyhow!("unknown op {name:?}"))
}
