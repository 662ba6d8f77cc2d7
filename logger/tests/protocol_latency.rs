//! 8-byte ping-pong latency and 1 MiB streaming bandwidth through `LoggedEndpoint`, `none`
//! vs `pessimistic-rb` vs `pessimistic-sb` vs `causal`, over shm:
//! a measurement, not a test (no timing assertions). Two ranks on two simulated nodes, each
//! the other's logger buddy, both busy-polling. Run in release:
//!
//! ```text
//! cargo test --release -p reverb-logger --test protocol_latency -- --ignored --nocapture
//! ```
//! Latency is half the round trip (perftest convention): min, median, mean, 99th percentile.
//! Bandwidth: rank 0 streams windows of 1 MiB messages, rank 1 answers each window with an
//! 8 B ack (which carries causal logging's piggyback back); best and median window rate.

mod common;

use std::time::{Duration, Instant};

use reverb_logger::{LogConfig, LogMode, LoggedEndpoint};
use reverb_transport::{Source, TagMatch};

const WARMUP: usize = 2_000;
const ITERATIONS: usize = 20_000;
const MESSAGE: usize = 8;
const WAIT: Duration = Duration::from_secs(30);
const TAG: u64 = 7;
const BW_MESSAGE: usize = 1 << 20;
const BW_WINDOW: usize = 16;
const BW_WARMUP: usize = 10;
const BW_WINDOWS: usize = 50;
const ROUNDS: usize = 3;

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
        // Stand-in for a checkpoint now and then, so neither the ring nor the send log fills.
        if i % 4096 == 4095 {
            trim_logs(endpoint, peer);
        }
    }
    half_rtt_us
}

/// Stand-in for a checkpoint: frees the ring and the send log, so neither fills.
fn trim_logs(endpoint: &mut LoggedEndpoint, peer: u32) {
    endpoint.trim_log_to_durable().expect("trim");
    let sent = endpoint.last_ssn_sent(peer).expect("peer in range");
    endpoint.trim_send_log(peer, sent).expect("trim send log");
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
        if me == 1 || w % 4 == 3 {
            // Outside the timed window.
            trim_logs(endpoint, peer);
        }
    }
    rates
}

fn rate_summary(mut v: Vec<f64>) -> String {
    v.sort_by(f64::total_cmp);
    format!("best {:.0} median {:.0} MB/s", v[v.len() - 1], v[v.len() / 2])
}

/// The part of a child's output line that is ours (libtest may print before it).
fn ours(line: &str) -> Option<&str> {
    ["latency 8 B", "bandwidth 1 MiB", "stats REVERB"].iter().find_map(|k| line.find(k)).map(|at| &line[at..])
}

fn normalized(key: &str) -> String {
    key.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The same row under `REVERB_LOG=none`.
fn baseline(key: &str) -> String {
    key.split_whitespace()
        .map(|w| if w.starts_with("REVERB_LOG=") { "REVERB_LOG=none" } else { w })
        .collect::<Vec<_>>()
        .join(" ")
}

fn summary(mut v: Vec<f64>) -> String {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q) as usize];
    let mean = v.iter().sum::<f64>() / v.len() as f64;
    format!("min {:.3} median {:.3} mean {:.3} p99 {:.3} us", at(0.0), at(0.5), mean, at(0.99))
}

#[test]
#[ignore = "measurement: run in release with --ignored --nocapture"]
fn logged_ping_pong_latency() {
    let test = "logged_ping_pong_latency";
    let Some((job, mut boot, provider)) = common::child() else {
        let modes = [
            LogMode::None,
            LogMode::PessimisticReceiverBased,
            LogMode::PessimisticSenderBased,
            LogMode::Causal,
        ];
        // Modes interleaved over several rounds, best median per row: the machine is shared,
        // and one slow round says more about the neighbours than about the protocol.
        let mut best: Vec<(String, f64)> = Vec::new();
        for round in 0..ROUNDS {
            for mode in modes {
                let env = vec![
                    ("REVERB_LOG".to_string(), mode.as_str().to_string()),
                    ("REVERB_WAIT_MODE".to_string(), "poll".to_string()),
                    // A whole 16 MiB window of receiver-logged frames fits between trims.
                    ("REVERB_LOG_RING_BYTES".to_string(), (40usize << 20).to_string()),
                ];
                let outputs =
                    common::run_job_ok(test, &common::Job { ignored: true, env, ..common::Job::new(2) });
                // libtest may print the test name on the same line as the first result.
                for line in outputs[0].lines().filter_map(ours) {
                    println!("round {round}: {line}");
                    let Some((key, rest)) = line.split_once(": ") else { continue };
                    let Some(median) = rest
                        .split_once("median ")
                        .and_then(|(_, m)| m.split_whitespace().next())
                        .and_then(|m| m.parse::<f64>().ok())
                    else {
                        continue;
                    };
                    // Latency: lower is better; bandwidth: higher.
                    let better =
                        |old: f64| if key.starts_with("latency") { median < old } else { median > old };
                    match best.iter_mut().find(|(k, _)| k == key) {
                        Some((_, v)) if better(*v) => *v = median,
                        Some(_) => {}
                        None => best.push((key.to_string(), median)),
                    }
                }
            }
        }
        let none_of = |key: &str| best.iter().find(|(k, _)| normalized(k) == baseline(key)).map(|(_, v)| *v);
        println!("best median of {ROUNDS} rounds (overhead vs none):");
        for (key, v) in &best {
            let overhead = none_of(key).map_or(String::new(), |n| {
                let pct =
                    if key.starts_with("latency") { (v / n - 1.0) * 100.0 } else { (1.0 - v / n) * 100.0 };
                format!("{pct:+.1}%")
            });
            println!("  {key}: {v:.3} {overhead}");
        }
        return;
    };
    let config = LogConfig::from_env().expect("log config");
    let mode = config.mode;
    let mut endpoint = LoggedEndpoint::new(provider, &mut boot, config).expect("endpoint");
    for (name, source) in [("named", Source::Rank(1 - job.rank)), ("any-source", Source::Any)] {
        let lat = ping_pong(&mut endpoint, source);
        println!("latency {MESSAGE} B, REVERB_LOG={:<14} recv {name:<10}: {}", mode.as_str(), summary(lat));
    }
    for (name, source) in [("named", Source::Rank(1 - job.rank)), ("any-source", Source::Any)] {
        let rates = stream(&mut endpoint, source);
        println!(
            "bandwidth 1 MiB, REVERB_LOG={:<14} recv {name:<10}: {}",
            mode.as_str(),
            rate_summary(rates)
        );
    }
    let s = endpoint.stats();
    println!(
        "stats REVERB_LOG={}: {} determinants, {:.3} piggybacked/message, {} acknowledged",
        mode.as_str(),
        s.determinants_generated,
        s.piggybacked_per_message(),
        s.determinants_acknowledged
    );
    endpoint.finish(&mut boot).expect("finish");
}
