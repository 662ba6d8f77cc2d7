//! Criterion: the message-logging layer's own cost per 8-byte round trip, with the transport
//! out of the way. Two ranks of a loopback job (ranks as threads, one per node) set up their
//! `LoggedEndpoint`s collectively; then one thread drives both endpoints in turn (rank 0 sends,
//! rank 1 receives and answers, rank 0 receives), so nothing spins on another core and the
//! difference between protocols is the logging work alone (envelope, ordering, determinants,
//! piggyback, log writes). `reverb bench lat --log ...` measures the same over shm between
//! two processes.
//!
//! `cargo bench -p reverb-benches --bench logged_loopback`

use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use reverb_logger::{LogConfig, LogMode, LogUnit, LoggedEndpoint};
use reverb_transport::loopback::InProcBootstrap;
use reverb_transport::{ProviderKind, Source, TagMatch, TransportConfig};

const WAIT: Duration = Duration::from_secs(10);
const TAG: u64 = 7;

/// A protocol and how rank 1 receives.
struct Case {
    name: &'static str,
    mode: LogMode,
    any_source: bool,
}

const CASES: [Case; 6] = [
    Case { name: "none", mode: LogMode::NONE, any_source: false },
    Case { name: "none-any", mode: LogMode::NONE, any_source: true },
    Case { name: "causal-named", mode: LogMode::CAUSAL, any_source: false },
    Case { name: "causal-any", mode: LogMode::CAUSAL, any_source: true },
    Case { name: "pessimistic-sb-any", mode: LogMode::PESSIMISTIC_SB, any_source: true },
    Case { name: "pessimistic-rb-named", mode: LogMode::PESSIMISTIC_RB, any_source: false },
];

/// Both ranks' endpoints (and the bootstraps they were built with), set up collectively.
fn endpoints(job: &str, mode: LogMode) -> Vec<(InProcBootstrap, LoggedEndpoint)> {
    let transport = TransportConfig { provider: ProviderKind::LOOPBACK, ..TransportConfig::default() };
    let log = LogConfig { mode, unit: LogUnit::Rank, ..LogConfig::default() };
    std::thread::scope(|scope| {
        let handles: Vec<_> = InProcBootstrap::with_timeout(job, 2, WAIT)
            .into_iter()
            .map(|mut boot| {
                let (transport, log) = (transport.clone(), log.clone());
                scope.spawn(move || {
                    let provider = reverb_transport::open(&transport, &mut boot).expect("open loopback");
                    let endpoint = LoggedEndpoint::new(provider, &mut boot, log).expect("logged endpoint");
                    (boot, endpoint)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("rank thread panicked")).collect()
    })
}

/// One round trip of 8 bytes: 0 → 1, 1 → 0; both receive in place, as `reverb bench` does.
fn round_trip(ranks: &mut [(InProcBootstrap, LoggedEndpoint)], from_1: Source, msg: &[u8]) {
    let [(_, zero), (_, one)] = ranks else { unreachable!("two ranks") };
    zero.send(1, TAG, msg).expect("send to 1");
    let got = one.recv_in_place(from_1, TagMatch::exact(TAG), WAIT).expect("recv at 1");
    assert_eq!(got.payload().len(), msg.len());
    one.send(0, TAG, msg).expect("answer");
    zero.recv_in_place(Source::Rank(1), TagMatch::exact(TAG), WAIT).expect("recv at 0");
}

/// Frees what a long run's checkpoints would (as `reverb bench --log` does between rounds):
/// the send logs through what the peer confirmed, the rings through their durable watermark.
fn trim(ranks: &mut [(InProcBootstrap, LoggedEndpoint)]) {
    for (me, (_, endpoint)) in ranks.iter_mut().enumerate() {
        let peer = 1 - me as u32;
        if let Some(ssn) = endpoint.last_ssn_sent(peer) {
            endpoint.trim_send_log(peer, ssn).expect("trim send log");
        }
        endpoint.trim_log_to_durable().expect("trim ring");
    }
}

/// A coordinated checkpoint's GC, collective (a thread per rank): frees the detLog, which
/// nothing else trims, as a long run's checkpoints do.
fn checkpoint(ranks: &mut [(InProcBootstrap, LoggedEndpoint)]) {
    std::thread::scope(|scope| {
        for (boot, endpoint) in ranks.iter_mut() {
            scope.spawn(move || endpoint.checkpoint_taken(boot).expect("checkpoint GC"));
        }
    });
}

/// Round trips between trims, and between checkpoints, outside the timed part.
const TRIM_EVERY: u64 = 64;
const CHECKPOINT_EVERY: u64 = 4096;

/// Times `iters` round trips, trimming every [`TRIM_EVERY`] with the clock stopped.
fn timed(
    ranks: &mut [(InProcBootstrap, LoggedEndpoint)],
    from_1: Source,
    msg: &[u8],
    iters: u64,
) -> Duration {
    let mut total = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        let n = (iters - done).min(TRIM_EVERY);
        let t0 = Instant::now();
        for _ in 0..n {
            round_trip(ranks, from_1, msg);
        }
        total += t0.elapsed();
        done += n;
        if done % CHECKPOINT_EVERY == 0 {
            checkpoint(ranks);
        } else {
            trim(ranks);
        }
    }
    total
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("logged round trip 8 B, loopback, one thread");
    let msg = [0x5au8; 8];
    for case in &CASES {
        let mut ranks = endpoints(&format!("logged-loopback-{}", case.name), case.mode);
        let from_1 = if case.any_source { Source::Any } else { Source::Rank(0) };
        group.bench_function(BenchmarkId::from_parameter(case.name), |b| {
            b.iter_custom(|iters| timed(&mut ranks, from_1, &msg, iters))
        });
    }
    group.finish();
}

criterion::criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(3));
    targets = bench
}

/// `LOGGED_LOOPBACK_ROUNDS=N LOGGED_LOOPBACK_CASE=causal-any`: N timed round trips of one case
/// and nothing else, for instruction counts (`valgrind --tool=callgrind` at two N; the
/// difference over the difference in N is the cost of one round trip, set-up cancelled).
fn rounds_only() -> bool {
    let Some(rounds) = std::env::var("LOGGED_LOOPBACK_ROUNDS").ok().and_then(|v| v.parse::<u64>().ok())
    else {
        return false;
    };
    let name = std::env::var("LOGGED_LOOPBACK_CASE").unwrap_or_else(|_| "none".into());
    let Some(case) = CASES.iter().find(|c| c.name == name) else {
        eprintln!("LOGGED_LOOPBACK_CASE={name}: not a case");
        std::process::exit(2);
    };
    let mut ranks = endpoints(&format!("logged-loopback-rounds-{name}"), case.mode);
    let from_1 = if case.any_source { Source::Any } else { Source::Rank(0) };
    timed(&mut ranks, from_1, &[0x5au8; 8], rounds);
    true
}

fn main() {
    if !rounds_only() {
        benches();
        Criterion::default().configure_from_args().final_summary();
    }
}
