//! 8-byte ping-pong latency through `LoggedEndpoint`, `none` vs `pessimistic-rb` vs
//! `pessimistic-sb`, over shm:
//! a measurement, not a test (no timing assertions). Two ranks on two simulated nodes, each
//! the other's logger buddy, both busy-polling. Run in release:
//!
//! ```text
//! cargo test --release -p reverb-logger --test protocol_latency -- --ignored --nocapture
//! ```
//! Latency is half the round trip (perftest convention): min, median, mean, 99th percentile.

mod common;

use std::time::{Duration, Instant};

use reverb_logger::{LogConfig, LogMode, LoggedEndpoint};
use reverb_transport::{Source, TagMatch};

const WARMUP: usize = 2_000;
const ITERATIONS: usize = 20_000;
const MESSAGE: usize = 8;
const WAIT: Duration = Duration::from_secs(30);
const TAG: u64 = 7;

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
            endpoint.trim_log_to_durable().expect("trim");
            let sent = endpoint.last_ssn_sent(peer).expect("peer in range");
            endpoint.trim_send_log(peer, sent).expect("trim send log");
        }
    }
    half_rtt_us
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
        for mode in [LogMode::None, LogMode::PessimisticReceiverBased, LogMode::PessimisticSenderBased] {
            let env = vec![
                ("REVERB_LOG".to_string(), mode.as_str().to_string()),
                ("REVERB_WAIT_MODE".to_string(), "poll".to_string()),
            ];
            let outputs =
                common::run_job_ok(test, &common::Job { ignored: true, env, ..common::Job::new(2) });
            // libtest may print the test name on the same line as the first result.
            for line in
                outputs[0].lines().filter_map(|l| l.find(&format!("latency {MESSAGE} B")).map(|at| &l[at..]))
            {
                println!("{line}");
            }
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
    endpoint.finish(&mut boot).expect("finish");
}
