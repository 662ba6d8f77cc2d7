//! 8-byte ping-pong latency and 1 MiB streaming bandwidth through `LoggedEndpoint`, `none`
//! vs `pessimistic-rb` vs `pessimistic-sb` vs `causal`, over shm: a measurement, not a test
//! (no timing assertions). Two ranks on two simulated nodes, each the other's logger buddy,
//! both busy-polling. Run in release:
//!
//! ```text
//! cargo test --release -p reverb-logger --test protocol_latency -- --ignored --nocapture
//! ```
//!
//! The machine is shared, so one job runs every mode in short blocks, modes interleaved,
//! each block on a fresh endpoint over the same provider (its own provider tag). A row
//! reports the median over blocks of the block medians, and the overhead vs `none` as the
//! median over blocks of the paired ratio (each block against the `none` block next to it),
//! which cancels most of the load drift.
//! - Latency: half the round trip (perftest convention), microseconds.
//! - Bandwidth: rank 0 streams windows of 1 MiB messages, rank 1 answers each window with an
//!   8 B ack (which carries causal logging's piggyback back); MB/s per window.

mod common;

use std::time::{Duration, Instant};

use reverb_logger::protocol::LOGGED_MESSAGE_TAG;
use reverb_logger::{LogConfig, LogMode, LoggedEndpoint};
use reverb_transport::{Source, TagMatch};

const BLOCKS: usize = 12;
const WARMUP: usize = 500;
const ITERATIONS: usize = 10_000;
const MESSAGE: usize = 8;
const WAIT: Duration = Duration::from_secs(30);
const TAG: u64 = 7;
const BW_MESSAGE: usize = 1 << 20;
const BW_WINDOW: usize = 16;
const BW_WARMUP: usize = 2;
const BW_WINDOWS: usize = 8;
const MODES: [LogMode; 4] =
    [LogMode::NONE, LogMode::PESSIMISTIC_RB, LogMode::PESSIMISTIC_SB, LogMode::CAUSAL];
const SOURCES: [&str; 2] = ["named", "any-source"];

fn source_of(name: &str, peer: u32) -> Source {
    if name == "named" {
        Source::Rank(peer)
    } else {
        Source::Any
    }
}

/// Stand-in for a checkpoint: frees the ring and the send log, so neither fills.
fn trim_logs(endpoint: &mut LoggedEndpoint, peer: u32) {
    endpoint.trim_log_to_durable().expect("trim");
    let sent = endpoint.last_ssn_sent(peer).expect("peer in range");
    endpoint.trim_send_log(peer, sent).expect("trim send log");
}

fn ping_pong(endpoint: &mut LoggedEndpoint, source: Source) -> Vec<f64> {
    let me = endpoint.rank();
    let peer = 1 - me;
    let payload = [0x5au8; MESSAGE];
    let tag = TagMatch::exact(TAG);
    let mut half_rtt_us = Vec::with_capacity(ITERATIONS);
    for i in 0..WARMUP + ITERATIONS {
        let start = Instant::now();
        if me == 0 {
            endpoint.send(peer, TAG, &payload).expect("ping");
            endpoint.recv(source, tag, WAIT).expect("pong");
        } else {
            endpoint.recv(source, tag, WAIT).expect("ping");
            endpoint.send(peer, TAG, &payload).expect("pong");
        }
        if i >= WARMUP {
            half_rtt_us.push(start.elapsed().as_secs_f64() * 1e6 / 2.0);
        }
        if i % 4096 == 4095 {
            trim_logs(endpoint, peer);
        }
    }
    half_rtt_us
}

/// Window rates in MB/s (10^6 B/s), measured at the sender from first send to the ack.
fn stream(endpoint: &mut LoggedEndpoint, source: Source) -> Vec<f64> {
    let me = endpoint.rank();
    let peer = 1 - me;
    let payload = vec![0xa5u8; BW_MESSAGE];
    let tag = TagMatch::exact(TAG);
    let mut rates = Vec::with_capacity(BW_WINDOWS);
    for w in 0..BW_WARMUP + BW_WINDOWS {
        let start = Instant::now();
        if me == 0 {
            for _ in 0..BW_WINDOW {
                endpoint.send(peer, TAG, &payload).expect("stream");
            }
            endpoint.recv(source, tag, WAIT).expect("ack");
        } else {
            for _ in 0..BW_WINDOW {
                endpoint.recv(source, tag, WAIT).expect("stream");
            }
            endpoint.send(peer, TAG, &[0u8; MESSAGE]).expect("ack");
        }
        if w >= BW_WARMUP {
            rates.push((BW_WINDOW * BW_MESSAGE) as f64 / start.elapsed().as_secs_f64() / 1e6);
        }
        // Outside the timed window (the receiver trims while the sender is timing, as a
        // logger would).
        trim_logs(endpoint, peer);
    }
    rates
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `[mode][source]` → one value per block.
type Table = Vec<Vec<Vec<f64>>>;

fn report(what: &str, unit: &str, table: &Table, lower_is_better: bool) {
    for (m, mode) in MODES.iter().enumerate() {
        for (s, name) in SOURCES.iter().enumerate() {
            let values = &table[m][s];
            let paired: Vec<f64> = values
                .iter()
                .zip(&table[0][s])
                .map(|(v, none)| if lower_is_better { v / none - 1.0 } else { 1.0 - v / none })
                .collect();
            println!(
                "{what}, REVERB_LOG={:<14} recv {name:<10}: median {:.3} {unit} (blocks {:.3}..{:.3}), overhead vs none {:+.1}%",
                mode.as_str(),
                median(values.clone()),
                values.iter().copied().fold(f64::INFINITY, f64::min),
                values.iter().copied().fold(0.0, f64::max),
                median(paired) * 100.0
            );
        }
    }
}

#[test]
#[ignore = "measurement: run in release with --ignored --nocapture"]
fn logged_ping_pong_latency() {
    let test = "logged_ping_pong_latency";
    let Some((job, mut boot, provider)) = common::child() else {
        let env = vec![("REVERB_WAIT_MODE".to_string(), "poll".to_string())];
        let job =
            common::Job { ignored: true, env, timeout: Duration::from_secs(600), ..common::Job::new(2) };
        let outputs = common::run_job_ok(test, &job);
        // libtest may print the test name on the same line as the first result.
        let ours =
            |l: &str| ["latency 8 B", "bandwidth 1 MiB", "stats REVERB"].iter().find_map(|k| l.find(k));
        for line in outputs[0].lines() {
            if let Some(at) = ours(line) {
                println!("{}", &line[at..]);
            }
        }
        return;
    };
    let peer = 1 - job.rank;
    let mut latency: Table = vec![vec![Vec::new(); SOURCES.len()]; MODES.len()];
    let mut bandwidth = latency.clone();
    let mut provider = Some(provider);
    let mut tag = LOGGED_MESSAGE_TAG;
    for _ in 0..BLOCKS {
        for (m, &mode) in MODES.iter().enumerate() {
            tag += 1;
            // Receiver-based logging puts a whole 16 MiB window in the ring between trims.
            let ring_capacity = if mode == LogMode::PESSIMISTIC_RB { 40 << 20 } else { 1 << 20 };
            let config = LogConfig { mode, provider_tag: tag, ring_capacity, ..LogConfig::default() };
            let Some(p) = provider.take() else { panic!("provider lost") };
            let mut endpoint = LoggedEndpoint::new(p, &mut boot, config).expect("endpoint");
            for (s, name) in SOURCES.iter().enumerate() {
                latency[m][s].push(median(ping_pong(&mut endpoint, source_of(name, peer))));
                bandwidth[m][s].push(median(stream(&mut endpoint, source_of(name, peer))));
            }
            if mode == LogMode::CAUSAL && latency[m][0].len() == BLOCKS {
                let s = endpoint.stats();
                println!(
                    "stats REVERB_LOG=causal (last block): {} determinants in {} writes, {:.3} piggybacked/message, {} acknowledged",
                    s.determinants_generated,
                    s.determinant_writes,
                    s.piggybacked_per_message(),
                    s.determinants_acknowledged
                );
            }
            provider = Some(endpoint.finish(&mut boot).expect("finish"));
        }
    }
    report(&format!("latency {MESSAGE} B"), "us", &latency, true);
    report("bandwidth 1 MiB", "MB/s", &bandwidth, false);
}
