//! The large-message receive path: receives land in the endpoint's registered receive
//! regions and `recv_in_place` hands the payload over where it landed. Two real processes on
//! two simulated nodes. Checks that a long stream of 1 MiB messages arrives intact while the
//! receiver registers no region per message (on shm: the set of /dev/shm files stays the same
//! round after round), and that deliveries the application keeps are never overwritten by
//! later receives, also past the pool's bound (owned receives take over), under `none`,
//! causal and pessimistic-rb, with in-place and owned (`recv`) receives mixed. And that
//! causal logging of 8 KiB messages registers no send buffer per message.

mod common;

use std::time::Duration;

use reverb_logger::{LogConfig, LogMode, LoggedEndpoint};
use reverb_transport::{Bootstrap, ProviderKind, Source, TagMatch};

const WAIT: Duration = Duration::from_secs(60);
const MIB: usize = 1 << 20;
const DATA: u64 = 5;
const CREDIT: u64 = 6;
/// Receives a `LoggedEndpoint` keeps posted.
const POSTED_RECEIVES: usize = 4;

/// Runs `test` on two ranks on two nodes; every rank must pass, and every failing rank's
/// output is shown (the receiver's assertion, not only the sender's timeout behind it).
fn run_two_nodes(test: &str) {
    let exits = common::run_job(test, &common::Job { ranks_per_node: 1, ..common::Job::new(2) });
    let failed: Vec<String> = exits
        .iter()
        .filter(|e| !(e.code == Some(0) && e.stdout.contains("1 passed")))
        .map(|e| format!("rank {} ({:?}, signal {:?}):\n{}", e.rank, e.code, e.signal, e.output()))
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

fn payload(round: usize, i: usize, len: usize) -> Vec<u8> {
    common::pattern(((round as u64) << 32) | i as u64, len)
}

/// This process's registered shm files (control segment and regions), by name.
fn own_shm_files() -> Vec<String> {
    let marker = format!(".{}.", std::process::id());
    let mut names: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| name.starts_with("reverb.") && name.contains(&marker))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Rounds of `PER_ROUND` messages of about 1 MiB, at most `WINDOW` unconfirmed: every payload
/// checked, and once large frames come in the receiver registers receive regions: at most
/// one per receive posted and per message it may hold at once, not one per message.
#[test]
fn large_messages_reuse_receive_regions() {
    const ROUNDS: usize = 6;
    const PER_ROUND: usize = 32;
    const WINDOW: usize = 4;
    let test = "large_messages_reuse_receive_regions";
    let Some((job, mut boot, provider)) = common::child() else {
        run_two_nodes(test);
        return;
    };
    // Regions are /dev/shm segments wherever shm carries the peer (auto on one host too).
    let on_shm = provider.provider_for(1 - job.rank.min(1)) == ProviderKind::SHM;
    let config = LogConfig { mode: LogMode::NONE, max_message: 2 * MIB, ..LogConfig::default() };
    let mut endpoint = LoggedEndpoint::new(provider, &mut boot, config).expect("endpoint");
    let files_at_start = own_shm_files();
    for round in 0..ROUNDS {
        // Sizes around 1 MiB, so the envelope offset and the tail vary.
        let len = |i: usize| MIB + (i * 4099 + round) % 8192 - 4096;
        if job.rank == 0 {
            for i in 0..PER_ROUND {
                if i >= WINDOW {
                    endpoint.recv(Source::Rank(1), TagMatch::exact(CREDIT), WAIT).expect("credit");
                }
                endpoint.send(1, DATA, &payload(round, i, len(i))).expect("send");
            }
            for _ in 0..WINDOW.min(PER_ROUND) {
                endpoint.recv(Source::Rank(1), TagMatch::exact(CREDIT), WAIT).expect("last credits");
            }
        } else {
            for i in 0..PER_ROUND {
                // Every third one through the owned `recv`: both share the regions.
                if i % 3 == 2 {
                    let d = endpoint.recv(Source::Rank(0), TagMatch::exact(DATA), WAIT).expect("recv");
                    assert!(
                        d.payload == payload(round, i, len(i)),
                        "round {round} message {i}: owned payload"
                    );
                } else {
                    let d =
                        endpoint.recv_in_place(Source::Rank(0), TagMatch::exact(DATA), WAIT).expect("recv");
                    assert_eq!(d.payload().len(), len(i), "round {round} message {i}");
                    assert!(d.payload() == payload(round, i, len(i)), "round {round} message {i}: payload");
                }
                endpoint.send(0, CREDIT, &[]).expect("credit");
            }
            if on_shm {
                // The WINDOW messages in flight may each hold a region while the next
                // receives are posted.
                let files = own_shm_files();
                assert!(!files_at_start.is_empty(), "no shm files of this process found");
                assert!(files.len() > files_at_start.len(), "round {round}: no receive region registered");
                assert!(
                    files.len() <= files_at_start.len() + POSTED_RECEIVES + WINDOW,
                    "round {round}: {} registrations at start, {} now",
                    files_at_start.len(),
                    files.len()
                );
            }
        }
        boot.barrier().expect("round done");
    }
    endpoint.finish(&mut boot).expect("finish");
}

/// Causal logging of a stream of halo-sized messages (8 KiB, above the rendezvous threshold,
/// framed in the sender's registered buffers): the send log keeps every payload, untrimmed,
/// while the sender registers no buffer per message (on shm its set of /dev/shm files stays
/// within the messages in flight), and the replayable log holds every payload intact.
#[test]
fn logged_mid_sized_sends_reuse_send_buffers() {
    const ROUNDS: usize = 4;
    const PER_ROUND: usize = 64;
    const WINDOW: usize = 4;
    const LEN: usize = 8 << 10;
    let test = "logged_mid_sized_sends_reuse_send_buffers";
    let Some((job, mut boot, provider)) = common::child() else {
        run_two_nodes(test);
        return;
    };
    let on_shm = provider.provider_for(1 - job.rank.min(1)) == ProviderKind::SHM;
    let config = LogConfig { mode: LogMode::CAUSAL, ..LogConfig::default() };
    let mut endpoint = LoggedEndpoint::new(provider, &mut boot, config).expect("endpoint");
    let files_at_start = own_shm_files();
    for round in 0..ROUNDS {
        if job.rank == 0 {
            for i in 0..PER_ROUND {
                if i >= WINDOW {
                    endpoint.recv(Source::Rank(1), TagMatch::exact(CREDIT), WAIT).expect("credit");
                }
                endpoint.send(1, DATA, &payload(round, i, LEN)).expect("send");
            }
            for _ in 0..WINDOW {
                endpoint.recv(Source::Rank(1), TagMatch::exact(CREDIT), WAIT).expect("last credits");
            }
            if on_shm {
                let files = own_shm_files();
                assert!(
                    files.len() <= files_at_start.len() + WINDOW + 1,
                    "round {round}: {} registrations at start, {} now",
                    files_at_start.len(),
                    files.len()
                );
            }
        } else {
            for i in 0..PER_ROUND {
                let d = endpoint.recv_in_place(Source::Rank(0), TagMatch::exact(DATA), WAIT).expect("recv");
                assert!(d.payload() == payload(round, i, LEN), "round {round} message {i}: payload");
                endpoint.send(0, CREDIT, &[]).expect("credit");
            }
        }
        boot.barrier().expect("round done");
    }
    if job.rank == 0 {
        let log = endpoint.send_log().expect("causal keeps a send log");
        let logged: Vec<_> = log.from_ssn(1, 1).expect("untrimmed").collect();
        assert_eq!(logged.len(), ROUNDS * PER_ROUND, "every message logged");
        for (n, m) in logged.iter().enumerate() {
            let want = payload(n / PER_ROUND, n % PER_ROUND, LEN);
            assert!(m.payload == want, "logged message {n}: payload");
        }
    }
    endpoint.finish(&mut boot).expect("finish");
}

/// The receiver keeps every large delivery of a burst (more than the receive pool registers,
/// so later ones arrive in owned buffers) and checks them all only at the end: a region is
/// never reused while a delivery from it lives. Small messages in between are copied out of
/// the regions. Under pessimistic-rb the frames are logged from the regions.
fn held_deliveries_job(test: &str, mode: LogMode) {
    const LARGE: usize = 24;
    let Some((job, mut boot, provider)) = common::child() else {
        run_two_nodes(test);
        return;
    };
    // 8 MiB receive regions: the pool's 128 MiB bound holds fewer than LARGE of them.
    let config = LogConfig { mode, max_message: 8 * MIB, ring_capacity: 64 << 20, ..LogConfig::default() };
    let mut endpoint = LoggedEndpoint::new(provider, &mut boot, config).expect("endpoint");
    let len = |i: usize| if i.is_multiple_of(2) { MIB + 17 * i } else { 40 + i };
    let count = 2 * LARGE;
    for round in 0..2 {
        if job.rank == 0 {
            for i in 0..count {
                endpoint.send(1, DATA, &payload(round, i, len(i))).expect("send");
            }
            endpoint.recv(Source::Rank(1), TagMatch::exact(CREDIT), WAIT).expect("round done");
            if let Some(ssn) = endpoint.last_ssn_sent(1) {
                endpoint.trim_send_log(1, ssn).expect("trim");
            }
        } else {
            let mut held = Vec::with_capacity(count);
            for i in 0..count {
                let source = if i % 4 == 3 { Source::Any } else { Source::Rank(0) };
                let d = endpoint.recv_in_place(source, TagMatch::exact(DATA), WAIT).expect("recv");
                assert_eq!(d.payload().len(), len(i), "round {round} message {i}");
                held.push(d);
                // Give the arrivals behind it time to land while deliveries are held.
                endpoint.progress().expect("progress");
            }
            for (i, d) in held.iter().enumerate() {
                assert!(
                    d.payload() == payload(round, i, len(i)),
                    "round {round} message {i}: held payload changed"
                );
            }
            // A clone outlives its original and stays intact too.
            let kept = held[0].clone();
            drop(held);
            assert!(kept.payload() == payload(round, 0, len(0)));
            assert_eq!(kept.clone().into_delivery().payload, payload(round, 0, len(0)));
            endpoint.trim_log_to_durable().expect("trim");
            endpoint.send(0, CREDIT, &[]).expect("round done");
        }
        boot.barrier().expect("round done");
    }
    endpoint.finish(&mut boot).expect("finish");
}

#[test]
fn held_large_deliveries_stay_intact_without_logging() {
    held_deliveries_job("held_large_deliveries_stay_intact_without_logging", LogMode::NONE);
}

#[test]
fn held_large_deliveries_stay_intact_causal() {
    held_deliveries_job("held_large_deliveries_stay_intact_causal", LogMode::CAUSAL);
}

#[test]
fn held_large_deliveries_stay_intact_pessimistic_receiver_based() {
    held_deliveries_job(
        "held_large_deliveries_stay_intact_pessimistic_receiver_based",
        LogMode::PESSIMISTIC_RB,
    );
}
