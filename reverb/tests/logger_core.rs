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
use reverb_transport::testkit::time_scale;

const BIN: &str = env!("CARGO_BIN_EXE_reverb");
const ROLE: &str = "REVERB_TEST_ROLE";
/// This rank's payload lane: its index on its node, as the launcher placed it.
fn lane() -> u64 {
    let job =
        reverb_transport::JobInfo::from_env().expect("job environment").expect("launched by reverb run");
    job.local_rank.into()
}

/// A bound on each enqueue and durable wait (scaled: under the CI's TCG a full ring drains
/// slowly).
fn wait() -> Duration {
    Duration::from_secs(60) * time_scale()
}

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
        (120 * time_scale()).to_string(),
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
        // The ranks check their logger core's placement against it (the launcher reads
        // `--logger`, which wins; it passes no REVERB_LOGGER on).
        .env("REVERB_LOGGER", placement)
        // Generous, so a loaded machine never fakes a death in a clean job.
        .env("REVERB_HEARTBEAT_MS", (2000 * time_scale()).to_string())
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let bound = Duration::from_secs(150) * time_scale();
    assert!(t0.elapsed() < bound, "reverb run took {:?}", t0.elapsed());
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
    let client = NodeLogClient::attach_from_env(lane()).expect("attach to the node's logger core");
    let me = rank();
    let mut tickets: Vec<Ticket> = Vec::new();
    for seq in 1..=DETS {
        let det = Determinant { sender: me, receiver: 0, ssn: seq, rsn: seq };
        tickets.push(client.enqueue_determinant_wait(&det, wait()).expect("enqueue determinant"));
        if seq.is_multiple_of(10) {
            let frame = [me.to_le_bytes().as_slice(), &seq.to_le_bytes(), &[7u8; 100]].concat();
            tickets.push(client.enqueue_payload_wait(&frame, wait()).expect("enqueue payload"));
        }
    }
    for t in &tickets {
        client.wait_durable(*t, wait()).expect("durable at the buddy");
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
        // Each rank checked its logger core's placement (REVERB_LOGGER) and printed its count.
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
    let client = NodeLogClient::attach_from_env(lane()).expect("attach");
    let me = rank();
    let mut ssn = 0u64;
    let mut next = || {
        ssn += 1;
        Determinant { sender: me, receiver: 0, ssn, rsn: ssn }
    };
    // Warm up, then enqueue-to-durable latency, one determinant at a time.
    for _ in 0..500 {
        let t = client.enqueue_determinant_wait(&next(), wait()).unwrap();
        client.wait_durable(t, wait()).unwrap();
    }
    let mut lat: Vec<f64> = Vec::with_capacity(BENCH_LAT_ITERS);
    for _ in 0..BENCH_LAT_ITERS {
        let t0 = Instant::now();
        let t = client.enqueue_determinant_wait(&next(), wait()).unwrap();
        client.wait_durable(t, wait()).unwrap();
        lat.push(t0.elapsed().as_secs_f64() * 1e6);
    }
    lat.sort_by(f64::total_cmp);
    let pct = |p: f64| lat[((lat.len() - 1) as f64 * p) as usize];
    // Throughput: enqueue as fast as back-pressure allows, until the last one is durable.
    let t0 = Instant::now();
    let mut last = Ticket::default();
    for _ in 0..BENCH_RATE_DETS {
        last = client.enqueue_determinant_wait(&next(), wait()).unwrap();
    }
    client.wait_durable(last, wait()).unwrap();
    let rate = BENCH_RATE_DETS as f64 / t0.elapsed().as_secs_f64();
    // Receiver-based payload copies: 1 KiB frames streamed through the rank's lane.
    let frame = vec![0x5au8; 1024];
    let t0 = Instant::now();
    for i in 1..=BENCH_FRAMES {
        last = client.enqueue_payload_wait(&frame, wait()).unwrap();
        if i.is_multiple_of(4096) {
            // The 16 MiB ring would fill: GC as after a checkpoint (this rank is its node's
            // only producer, so it is quiesced here).
            client.wait_durable(last, wait()).unwrap();
            client.trim_wait(wait()).unwrap();
        }
    }
    client.wait_durable(last, wait()).unwrap();
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

// ---- the protocols through the logger core ----

const PROTO_RANKS: u32 = 4;
const PROTO_MESSAGES: u64 = 300;

/// Destination of rank `from`'s `i`-th message: seeded, the same on every rank.
fn planned_dest(from: u32, i: u64) -> u32 {
    let mut x = (u64::from(from) << 32 | i).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5bd1_e995;
    x ^= x >> 29;
    let d = (x % u64::from(PROTO_RANKS - 1)) as u32;
    if d >= from {
        d + 1
    } else {
        d
    }
}

/// A rank of `protocols_log_through_the_logger_core`: random traffic with wildcard receives
/// through a `LoggedEndpoint` that attached its node's logger core by itself.
fn rank_logged_traffic() {
    use reverb_logger::{LogConfig, LoggedEndpoint};
    use reverb_transport::{Source, TagMatch, TransportConfig};

    let mut boot = reverb_transport::bootstrap::TcpBootstrap::connect_from_env().expect("bootstrap");
    let config = TransportConfig::from_env().expect("transport config");
    let provider = reverb_transport::open(&config, &mut boot).expect("provider");
    let cfg = LogConfig::from_env().expect("log config");
    let mut ep = LoggedEndpoint::new(provider, &mut boot, cfg).expect("endpoint");
    assert!(ep.logger_offload().is_some(), "REVERB_LOGGER_SEGMENT set but no logger core attached");
    let me = ep.rank();
    let expected: u64 = (0..PROTO_RANKS)
        .filter(|&r| r != me)
        .map(|r| (0..PROTO_MESSAGES).filter(|&i| planned_dest(r, i) == me).count() as u64)
        .sum();
    let mut received = 0u64;
    for i in 0..PROTO_MESSAGES {
        let dest = planned_dest(me, i);
        let payload = [me.to_le_bytes().as_slice(), &i.to_le_bytes(), &[i as u8; 40]].concat();
        ep.send(dest, 7, &payload).expect("send");
        // Take what has arrived now and then, so arrival order (hence rsn order) varies.
        if i % 7 == 3 && received < expected {
            let d = ep.recv(Source::Any, TagMatch::exact(7), wait()).expect("recv");
            println!("DELIVERED {me} {} {} {}", d.source, d.ssn, d.rsn);
            received += 1;
        }
    }
    while received < expected {
        let d = ep.recv(Source::Any, TagMatch::exact(7), wait()).expect("recv");
        println!("DELIVERED {me} {} {} {}", d.source, d.ssn, d.rsn);
        received += 1;
    }
    // Replay collection while the loggers run: rank 0 "failed"; the others gather its
    // determinants, which live in the ring node 0's logger writes at node 1's logger.
    ep.flush_log().expect("flush");
    // The barrier does not progress the transport: sends still queued (a full ring) would
    // never reach ranks waiting for them.
    ep.wait_sends(wait()).expect("sends out");
    reverb_transport::Bootstrap::barrier(&mut boot).expect("barrier");
    let gathered = ep.gather_determinants(&mut boot, &[0]).expect("gather determinants");
    if me == 1 {
        for d in &gathered {
            println!("GATHERED {} {} {} {}", d.receiver, d.sender, d.ssn, d.rsn);
        }
    }
    // Receiver-based replay material: node 1's logger hosts node 0's ring, so ranks of node 1
    // read rank 0's logged frames there.
    if me / 2 == 1 {
        for frame in ep.frames_held_for(0).expect("frames held for rank 0") {
            let (env, _) = reverb_logger::Envelope::decode(&frame).expect("logged frame");
            println!("FRAME {me} {} {} {}", env.receiver, env.sender, env.ssn);
        }
    }
    let stats = ep.stats();
    println!(
        "STATS {me} payload_logged {} unlogged {} determinants_logged {}",
        stats.messages_payload_logged, stats.messages_unlogged, stats.determinants_logged
    );
    ep.finish(&mut boot).expect("finish");
}

#[test]
fn protocols_log_through_the_logger_core() {
    use reverb_logger::logring::{self, RecordKind};
    use reverb_logger::Envelope;
    use std::collections::{BTreeMap, BTreeSet};

    if std::env::var(ROLE).as_deref() == Ok("logged") {
        return rank_logged_traffic();
    }
    for mode in ["pessimistic-rb", "pessimistic-sb", "causal"] {
        let dump = std::env::temp_dir().join(format!("reverb-lcproto-{}-{mode}", std::process::id()));
        std::fs::create_dir_all(&dump).unwrap();
        let exe = std::env::current_exe().unwrap();
        let out = Command::new(BIN)
            .args(["run", "-n", &PROTO_RANKS.to_string(), "--ranks-per-node", "2", "--logger", "dedicated"])
            .args(["--timeout", &(120 * time_scale()).to_string(), "--"])
            .arg(&exe)
            .args(["protocols_log_through_the_logger_core", "--exact", "--nocapture", "--test-threads=1"])
            .env(ROLE, "logged")
            .env("REVERB_LOG", mode)
            .env("REVERB_LOGGER_DUMP_DIR", &dump)
            // Generous: two cores shared with other jobs (two emulated VMs, in CI) must not
            // fake a death or a stall; nothing here fails.
            .env("REVERB_HEARTBEAT_MS", (5000 * time_scale()).to_string())
            .env("REVERB_LOGGER_STALL_MS", (60000 * time_scale()).to_string())
            .env_remove("RUST_BACKTRACE")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "REVERB_LOG={mode}:\n{stdout}\n{stderr}");
        // What each rank delivered, in rsn order.
        let mut delivered: BTreeMap<u32, Vec<(u32, u64, u64)>> = BTreeMap::new();
        for line in stdout.lines().filter_map(|l| l.split("DELIVERED ").nth(1)) {
            let v: Vec<u64> = line.split_whitespace().map(|x| x.parse().unwrap()).collect();
            delivered.entry(v[0] as u32).or_default().push((v[1] as u32, v[2], v[3]));
        }
        let total: usize = delivered.values().map(Vec::len).sum();
        // gather_determinants read rank 0's determinants from the logger-hosted ring: they
        // give its delivery order exactly.
        let gathered: Vec<(u32, u64, u64)> = stdout
            .lines()
            .filter_map(|l| l.split("GATHERED ").nth(1))
            .map(|l| l.split_whitespace().map(|x| x.parse::<u64>().unwrap()).collect::<Vec<_>>())
            .filter(|v| v[0] == 0)
            .map(|v| (v[1] as u32, v[2], v[3]))
            .collect();
        assert_eq!(Some(&gathered), delivered.get(&0), "{mode}: gathered determinants of rank 0");
        // frames_held_for read rank 0's logged frames from the logger-hosted ring (rb only):
        // exactly its inter-node deliveries, in delivery order.
        let frames: Vec<(u32, u64)> = stdout
            .lines()
            .filter_map(|l| l.split("FRAME 2 ").nth(1))
            .map(|l| l.split_whitespace().map(|x| x.parse::<u64>().unwrap()).collect::<Vec<_>>())
            .map(|v| (v[1] as u32, v[2]))
            .collect();
        let want: Vec<(u32, u64)> = if mode == "pessimistic-rb" {
            delivered[&0].iter().filter(|d| d.0 / 2 != 0).map(|&(s, ssn, _)| (s, ssn)).collect()
        } else {
            Vec::new()
        };
        assert_eq!(frames, want, "{mode}: frames held for rank 0 at node 1");
        assert_eq!(total as u64, u64::from(PROTO_RANKS) * PROTO_MESSAGES, "{stdout}");
        // What the logger cores wrote into their buddies' rings (dumped at exit).
        let mut dets = BTreeSet::new();
        let mut frames = BTreeSet::new();
        for node in 0..PROTO_RANKS / 2 {
            let image = std::fs::read(dump.join(format!("ring-node{node}.bin"))).expect("ring image");
            for record in logring::scan(&image).unwrap().records {
                match record.kind {
                    RecordKind::Determinants => {
                        for d in record.determinants().unwrap() {
                            // Causal: a node mate forwards a rank's determinants as its own (the
                            // node fails whole), so the node's ring may hold a copy twice;
                            // recovery merges identical copies.
                            let fresh = dets.insert((d.receiver, d.rsn, d.sender, d.ssn));
                            assert!(fresh || mode == "causal", "{mode}: {d:?} twice");
                        }
                    }
                    RecordKind::Payload => {
                        let (env, _) = Envelope::decode(&record.data).unwrap();
                        assert!(frames.insert((env.receiver, env.sender, env.ssn)), "{mode}: frame twice");
                    }
                    _ => {}
                }
            }
        }
        // Replay order = logged order: the rings' determinants, sorted by rsn, give each
        // rank's delivery sequence exactly (every receive here is a wildcard one).
        for (&rank, seq) in &delivered {
            let logged: Vec<(u32, u64, u64)> =
                dets.iter().filter(|d| d.0 == rank).map(|&(_, rsn, s, ssn)| (s, ssn, rsn)).collect();
            assert_eq!(&logged, seq, "{mode}: rank {rank}'s logged order differs from its deliveries");
            let inter: BTreeSet<_> =
                seq.iter().filter(|d| d.0 / 2 != rank / 2).map(|&(s, ssn, _)| (rank, s, ssn)).collect();
            let in_ring: BTreeSet<_> = frames.iter().filter(|f| f.0 == rank).copied().collect();
            if mode == "pessimistic-rb" {
                // Node unit: exactly the inter-node frames, each once.
                assert_eq!(in_ring, inter, "rank {rank}: logged frames");
            } else {
                assert!(in_ring.is_empty(), "{mode}: sender-based modes log no frames at the receiver");
            }
        }
        println!(
            "REVERB_LOG={mode} --logger dedicated: {total} deliveries, {} determinants and {} frames in the buddy rings",
            dets.len(),
            frames.len()
        );
        std::fs::remove_dir_all(&dump).ok();
    }
}

/// `reverb bench lat|bw --op send --log P` runs end to end (numbers come from
/// scripts/compare-logging.sh, not from here): every protocol, with and without logger cores,
/// named and wildcard receives; bad combinations are refused with a clear error.
#[test]
fn bench_log_runs_every_protocol() {
    // Each wait of the bench is bounded (10 s by default); scaled where everything is slow.
    let timeout_ms = (10_000 * time_scale()).to_string();
    let bench = |args: &[&str]| {
        Command::new(BIN)
            .args(["bench"])
            .args(args)
            .args(["--timeout-ms", &timeout_ms])
            .env("REVERB_HEARTBEAT_MS", (5000 * time_scale()).to_string())
            .env("REVERB_LOGGER_STALL_MS", (60000 * time_scale()).to_string())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    for (test, log, logger, recv) in [
        ("lat", "none", "off", "named"),
        ("lat", "pessimistic-rb", "off", "any"),
        ("bw", "pessimistic-sb", "off", "any"),
        ("bw", "causal", "off", "named"),
        ("lat", "causal", "shared-unpinned", "any"),
        ("bw", "pessimistic-rb", "shared-unpinned", "named"),
    ] {
        let out = bench(&[
            test, "--op", "send", "--log", log, "--logger", logger, "--recv", recv, "--sizes", "8,64k",
            "--iters", "40", "--warmup", "8", "--json",
        ]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{test} --log {log} --logger {logger}:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rows: Vec<&str> = stdout.lines().filter(|l| l.starts_with('{')).collect();
        assert_eq!(rows.len(), 2, "one row per size:\n{stdout}");
        let row: serde_json::Value = serde_json::from_str(rows[1]).expect("a JSON row");
        assert_eq!(row["bytes"], 65536, "{}", rows[1]);
    }
    let refused = bench(&["lat", "--op", "put", "--log", "causal"]);
    assert_ne!(refused.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--log measures --op send"));
    let refused = bench(&["lat", "--op", "send", "--logger", "dedicated"]);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--logger needs --log"));
    let refused = bench(&["lat", "--op", "send", "--log", "causal", "--ranks-per-node", "2"]);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("two nodes"));
}
