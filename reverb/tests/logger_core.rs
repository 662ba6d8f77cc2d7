//! `reverb run --logger P` end to end: the launcher starts one `reverb logger-core` per
//! simulated node (their own transport job), places them as P says, and gives every rank its
//! node's segment. This test binary re-executes itself as the ranks, which attach with
//! `NodeLogClient::attach_from_env`, enqueue determinants and payload frames and wait until
//! they are durable at the buddy node. The ignored `placement_bench` compares the placements.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reverb_logger::core::segment::Status;
use reverb_logger::core::{NodeLogClient, Ticket};
use reverb_logger::Determinant;

const BIN: &str = env!("CARGO_BIN_EXE_reverb");
const ROLE: &str = "REVERB_TEST_ROLE";
const WAIT: Duration = Duration::from_secs(60);

fn rank() -> u32 {
    std::env::var("REVERB_RANK").ok().and_then(|v| v.parse().ok()).expect("REVERB_RANK")
}

/// Runs `reverb run ... -- <this test binary> <test>` with the rank role; returns
/// (exit code, stdout, stderr).
fn reverb_run(
    test: &str,
    ranks: u32,
    rpn: u32,
    placement: &str,
    role: &str,
    ignored: bool,
) -> (Option<i32>, String, String) {
    let exe = std::env::current_exe().unwrap();
    let mut args: Vec<String> = vec![
        "run".into(),
        "-n".into(),
        ranks.to_string(),
        "--ranks-per-node".into(),
        rpn.to_string(),
        "--logger".into(),
        placement.into(),
        "--timeout".into(),
        "120".into(),
        "--".into(),
        exe.to_string_lossy().into_owned(),
        test.into(),
        "--exact".into(),
        "--nocapture".into(),
        "--test-threads=1".into(),
    ];
    if ignored {
        args.push("--ignored".into());
    }
    let t0 = Instant::now();
    let out = Command::new(BIN)
        .args(&args)
        .env(ROLE, role)
        // Generous, so a loaded machine never fakes a death in a clean job.
        .env("REVERB_HEARTBEAT_MS", "2000")
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(t0.elapsed() < Duration::from_secs(150), "reverb run took {:?}", t0.elapsed());
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const DETS: u64 = 2000;

/// `Cpus_allowed_list` of /proc/<pid>/status.
fn cpus_allowed(pid: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let line = status.lines().find(|l| l.starts_with("Cpus_allowed_list:")).expect("Cpus_allowed_list");
    line.split_once(':').map(|(_, v)| v.trim().to_string()).unwrap_or_default()
}

fn rank_logs_and_waits() {
    let client = NodeLogClient::attach_from_env().expect("attach to the node's logger core");
    let me = rank();
    let mut tickets: Vec<Ticket> = Vec::new();
    for seq in 1..=DETS {
        let det = Determinant { sender: me, receiver: 0, ssn: seq, rsn: seq };
        tickets.push(client.enqueue_determinant_wait(&det, WAIT).expect("enqueue determinant"));
        if seq.is_multiple_of(10) {
            let frame = [me.to_le_bytes().as_slice(), &seq.to_le_bytes(), &[7u8; 100]].concat();
            tickets.push(client.enqueue_payload_wait(&frame, WAIT).expect("enqueue payload"));
        }
    }
    for t in &tickets {
        client.wait_durable(*t, WAIT).expect("durable at the buddy");
    }
    assert!(client.buddy_alive());
    assert_eq!(client.buddy_node(), Some(u64::from(me / 2) ^ 1));
    // The placement, as the kernel sees it.
    let mine = cpus_allowed("self");
    let logger = cpus_allowed(&client.status(Status::LoggerPid).to_string());
    let one = |s: &str| !s.contains(',') && !s.contains('-');
    match std::env::var("REVERB_LOGGER").as_deref() {
        Ok("dedicated") => {
            assert!(one(&mine) && one(&logger) && mine != logger, "rank cpus {mine}, logger cpus {logger}")
        }
        Ok("shared-pinned") if me.is_multiple_of(2) => {
            assert!(one(&mine) && mine == logger, "rank cpus {mine}, logger cpus {logger}")
        }
        _ => {}
    }
    println!("rank {me}: {} entries durable (cpus {mine}, its logger's {logger})", tickets.len());
}

#[test]
fn launcher_runs_logger_cores_for_every_placement() {
    if std::env::var(ROLE).as_deref() == Ok("rank") {
        return rank_logs_and_waits();
    }
    for placement in ["shared-unpinned", "shared-pinned", "dedicated"] {
        let (code, stdout, stderr) =
            reverb_run("launcher_runs_logger_cores_for_every_placement", 4, 2, placement, "rank", false);
        assert_eq!(code, Some(0), "--logger {placement}:\n{stdout}\n{stderr}");
        assert!(stderr.contains(&format!("logger cores: {placement}")), "{stderr}");
        for r in 0..4 {
            assert!(stdout.contains(&format!("rank {r}: {} entries durable", DETS + DETS / 10)), "{stdout}");
        }
        assert!(!stderr.contains("dead"), "a clean job reported a death:\n{stderr}");
        println!("--logger {placement}: {}", stderr.lines().next().unwrap_or(""));
        for line in stdout.lines().filter(|l| l.contains("entries durable")) {
            println!("  {line}");
        }
    }
}

#[test]
fn logger_needs_two_nodes_and_a_known_placement() {
    let out =
        Command::new(BIN).args(["run", "-n", "2", "--logger", "dedicated", "--", "true"]).output().unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("one node"));
    let out =
        Command::new(BIN).args(["run", "-n", "2", "--logger", "pinned", "--", "true"]).output().unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown logger placement"));
}

const BENCH_LAT_ITERS: usize = 5000;
const BENCH_RATE_DETS: u64 = 200_000;
const BENCH_FRAMES: u64 = 100_000;

fn rank_bench() {
    let client = NodeLogClient::attach_from_env().expect("attach");
    let me = rank();
    let mut ssn = 0u64;
    let mut next = || {
        ssn += 1;
        Determinant { sender: me, receiver: 0, ssn, rsn: ssn }
    };
    // Warm up, then enqueue-to-durable latency, one determinant at a time.
    for _ in 0..500 {
        let t = client.enqueue_determinant_wait(&next(), WAIT).unwrap();
        client.wait_durable(t, WAIT).unwrap();
    }
    let mut lat: Vec<f64> = Vec::with_capacity(BENCH_LAT_ITERS);
    for _ in 0..BENCH_LAT_ITERS {
        let t0 = Instant::now();
        let t = client.enqueue_determinant_wait(&next(), WAIT).unwrap();
        client.wait_durable(t, WAIT).unwrap();
        lat.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    lat.sort_by(f64::total_cmp);
    let pct = |p: f64| lat[((lat.len() - 1) as f64 * p) as usize];
    // Throughput: enqueue as fast as back-pressure allows, until the last one is durable.
    let t0 = Instant::now();
    let mut last = Ticket::default();
    for _ in 0..BENCH_RATE_DETS {
        last = client.enqueue_determinant_wait(&next(), WAIT).unwrap();
    }
    client.wait_durable(last, WAIT).unwrap();
    let rate = BENCH_RATE_DETS as f64 / t0.elapsed().as_secs_f64();
    // Receiver-based payload copies: 1 KiB frames streamed through the rank's lane.
    let frame = vec![0x5au8; 1024];
    let t0 = Instant::now();
    for i in 1..=BENCH_FRAMES {
        last = client.enqueue_payload_wait(&frame, WAIT).unwrap();
        if i.is_multiple_of(4096) {
            // The 16 MiB ring would fill: GC as after a checkpoint (this rank is its node's
            // only producer, so it is quiesced here).
            client.wait_durable(last, WAIT).unwrap();
            client.trim_wait(WAIT).unwrap();
        }
    }
    client.wait_durable(last, WAIT).unwrap();
    let mib_s = (BENCH_FRAMES * 1024) as f64 / t0.elapsed().as_secs_f64() / (1 << 20) as f64;
    println!(
        "BENCH rank {me}: enqueue->durable us: min {:.1} median {:.1} p99 {:.1} max {:.1}; determinants/s {:.0}; 1 KiB payload frames {:.0} MiB/s; node logged {}",
        lat[0],
        pct(0.5),
        pct(0.99),
        lat[lat.len() - 1],
        rate,
        mib_s,
        client.status(Status::DeterminantsLogged)
    );
}

/// Compares the placements: `cargo test --release -p reverb --test logger_core -- --ignored --nocapture`.
#[test]
#[ignore = "benchmark: run by hand with --ignored --nocapture (release)"]
fn placement_bench() {
    if std::env::var(ROLE).as_deref() == Ok("bench") {
        return rank_bench();
    }
    println!("2 nodes x 1 rank, each rank: {BENCH_LAT_ITERS} enqueue->durable round trips, then {BENCH_RATE_DETS} determinants and {BENCH_FRAMES} 1 KiB frames streamed");
    for placement in ["dedicated", "shared-pinned", "shared-unpinned"] {
        let (code, stdout, stderr) = reverb_run("placement_bench", 2, 1, placement, "bench", true);
        assert_eq!(code, Some(0), "--logger {placement}:\n{stdout}\n{stderr}");
        println!("--logger {placement}: {}", stderr.lines().next().unwrap_or(""));
        for line in stdout.lines().filter(|l| l.contains("BENCH")) {
            println!("  {line}");
        }
    }
}
