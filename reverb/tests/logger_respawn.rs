//! A node failure takes its logger core too (issues 4 + 6). Real processes, real SIGKILLs:
//!
//! - a node killed mid-run under `--logger shared-unpinned --respawn 1` (REVERB_LOG=causal):
//!   the launcher kills the node's logger with its ranks and restarts both; the surviving
//!   logger reconnects to the new incarnation, re-flushes its log into the new ring, and the
//!   application ends with its failure-free checksum;
//! - a logger core killed alone: its node fails and is respawned; the buddy's logger reports
//!   it dead (log line), and the verdict reaches the ranks through the node segment
//!   (`NodeLogClient::verdicts`), with the incarnation that came back;
//! - the same without `--respawn`: the job fails at once with a message naming the logger.
//!
//! This binary re-executes itself as the ranks of the last two (role in `REVERB_TEST_ROLE`).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reverb_logger::core::segment::{Status, STATE_READY};
use reverb_logger::core::NodeLogClient;
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

/// Every wait of a rank is bounded by this (the machine may be heavily loaded).
fn wait() -> Duration {
    Duration::from_secs(60) * time_scale()
}

/// The loggers' heartbeat bound: generous, so a loaded machine (or the emulated VM, where a
/// logger is often descheduled for seconds) never fakes a death; the deaths under test are
/// found by the launcher, the transport and the respawned logger's rejoin first anyway.
fn heartbeat_ms() -> String {
    (5000 * time_scale()).to_string()
}

/// How long a logger loop may stand still before its ranks call it gone: generous for the same
/// reason (in the VM a surviving logger's reconnect to a respawned one took over 5 s).
fn stall_ms() -> String {
    (20_000 * time_scale()).to_string()
}

fn env_u32(name: &str) -> u32 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{name} not set"))
}

/// Runs `reverb <args>` with `env`; returns (exit code, stdout, stderr, wall time).
fn reverb(args: &[String], env: &[(&str, &str)]) -> (Option<i32>, String, String, Duration) {
    let t0 = Instant::now();
    let out = Command::new(BIN)
        .args(args)
        .env("REVERB_HEARTBEAT_MS", heartbeat_ms())
        .env("REVERB_LOGGER_STALL_MS", stall_ms())
        .envs(env.iter().copied())
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::null())
        .output()
        .expect("running reverb");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        t0.elapsed(),
    )
}

fn run_args(ranks: u32, respawn: u32, program: &[String]) -> Vec<String> {
    let mut args: Vec<String> = [
        "run",
        "-n",
        &ranks.to_string(),
        "--ranks-per-node",
        "2",
        "--respawn",
        &respawn.to_string(),
        "--logger",
        "shared-unpinned",
        "--timeout",
        &(100 * time_scale()).to_string(),
        "--",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend_from_slice(program);
    args
}

/// `args` (from `run_args`) with `--report-json` to a file named after `name`, and that file.
fn with_report(args: Vec<String>, name: &str) -> (Vec<String>, std::path::PathBuf) {
    let path = std::env::temp_dir().join(format!("reverb-logger-respawn-{}-{name}.json", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let mut with = vec![args[0].clone(), "--report-json".into(), path.to_string_lossy().into_owned()];
    with.extend_from_slice(&args[1..]);
    (with, path)
}

/// The launch report `reverb run --report-json` wrote (removed once read).
fn launch_report(path: &std::path::Path, err: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("no launch report: {e}\n{err}"));
    let _ = std::fs::remove_file(path);
    serde_json::from_str(&text).expect("the launch report is JSON")
}

fn checksum(stdout: &str) -> Option<String> {
    stdout.lines().find_map(|l| l.split_once("checksum: ").map(|(_, c)| c.trim().to_string()))
}

/// The app failure-free, then with rank 3 (node 1) SIGKILLed after `sends` sends: the node's
/// logger must be killed and restarted with it, and the checksum must not change.
fn node_and_logger_recover(app: &[&str], sends: u32) -> String {
    let mut program = vec![BIN.to_string(), "app".to_string()];
    program.extend(app.iter().map(|s| s.to_string()));
    let (code, clean_out, clean_err, _) = reverb(&run_args(8, 0, &program), &[("REVERB_LOG", "causal")]);
    assert_eq!(code, Some(0), "failure-free run:\n{clean_out}\n{clean_err}");
    let clean = checksum(&clean_out).unwrap_or_else(|| panic!("no checksum:\n{clean_out}"));

    let fault = format!("3:{sends}");
    let (args, report) = with_report(run_args(8, 1, &program), &format!("node-{sends}"));
    let (code, out, err, took) = reverb(&args, &[("REVERB_LOG", "causal"), ("REVERB_FAULT", &fault)]);
    println!("{app:?}: killed run took {took:?}\n{err}");
    assert_eq!(code, Some(0), "run with node 1 killed:\n{out}\n{err}");
    assert_eq!(checksum(&out).as_deref(), Some(clean.as_str()), "checksum after recovery:\n{out}\n{err}");
    // Rank 3's death failed node 1: its ranks and its logger core came back at incarnation 1.
    let launch = launch_report(&report, &err);
    let respawns = launch["respawns"].as_array().expect("respawns");
    assert_eq!(respawns.len(), 1, "{launch}");
    let r = &respawns[0];
    assert_eq!((&r["node"], &r["rank"], &r["by_logger"]), (&1.into(), &3.into(), &false.into()), "{launch}");
    assert_eq!((&r["ranks"], &r["incarnation"]), (&serde_json::json!([2, 3]), &1.into()), "{launch}");
    assert_eq!(r["logger_restarted"], true, "{launch}");
    // The logger cores' own account of the reconnection (they report no structured result).
    for expected in [
        "[logger 1] reverb logger-core node 1: incarnation 1 rejoined",
        "[logger 0] reverb logger-core node 0: logging to buddy node 1 (incarnation 1) again",
        "[logger 1] reverb logger-core node 1: logging to buddy node 0 (incarnation 0) again",
    ] {
        assert!(err.contains(expected), "missing {expected:?} in:\n{err}");
    }
    err
}

#[test]
fn node_killed_with_its_logger_keeps_the_stencil_checksum() {
    node_and_logger_recover(&["stencil", "--iters", "60", "--size", "64", "--ckpt-every", "10"], 50);
}

#[test]
fn node_killed_with_its_logger_keeps_the_master_worker_checksum_and_reflushes_the_buddy_log() {
    // Any-source receives: determinants flow, so node 0's log held records when node 1's
    // logger (which hosted node 0's ring) died; they are written again into the new ring.
    let err = node_and_logger_recover(&["master-worker"], 60);
    let line = err
        .lines()
        .find(|l| l.contains("[logger 0]") && l.contains("(incarnation 1) again"))
        .unwrap_or_default();
    println!("{line}");
}

/// Rank roles for the two tests below (2 nodes of 2 ranks; node 1's logger is killed).
fn rank_role(test: &str) {
    let rank = env_u32("REVERB_RANK");
    let incarnation = env_u32("REVERB_INCARNATION");
    let client = NodeLogClient::attach_from_env(lane()).expect("attach to the node's logger core");
    let t0 = Instant::now();
    match (rank, incarnation) {
        (2, 0) => {
            // Node 1's first rank kills its node's logger, as a node failure would, then
            // waits for the launcher to act (it is killed with its node, or with the job).
            // Once the loggers' job has formed (a kill during its start-up exchange fails the
            // job instead: the exchange is a collective).
            while client.status(Status::State) != STATE_READY || !client.buddy_alive() {
                assert!(t0.elapsed() < wait(), "node 1's logger never became ready");
                std::thread::sleep(Duration::from_millis(5));
            }
            if test.contains("respawned") {
                // What the killed logger holds: node 0's log (rank 0's determinants) in the
                // ring it hosts; and node 0's logger hosts ours.
                let logged = marker("r0-logged");
                while !logged.exists() {
                    assert!(t0.elapsed() < wait(), "rank 0 never logged");
                    std::thread::sleep(Duration::from_millis(5));
                }
                log_durably(&client, 2);
            }
            let pid = client.status(Status::LoggerPid) as libc::pid_t;
            assert!(pid > 0, "no logger pid in the segment");
            println!("rank 2: SIGKILL to node 1's logger core (pid {pid})");
            // A pid read from our own node's segment.
            let target = rustix::process::Pid::from_raw(pid).expect("a positive pid");
            rustix::process::kill_process(target, rustix::process::Signal::KILL).expect("SIGKILL");
            std::thread::sleep(wait());
            panic!("rank 2 was not killed with its node within {:?}", wait());
        }
        (0, 0) if test.contains("respawned") => {
            log_durably(&client, 0);
            std::fs::write(marker("r0-logged"), b"").expect("marker");
            // The buddy node's rank: the verdict reaches it through the segment, then the
            // incarnation that came back; after that its log is durable again.
            let verdict = loop {
                // Back at a newer incarnation: a slow logger suspected by its heartbeat alone
                // comes back at the same one, and that is not the kill under test.
                let back = client
                    .verdicts()
                    .into_iter()
                    .find(|v| v.node == 1 && v.back.is_some_and(|(i, _)| i > v.incarnation));
                if let Some(v) = back {
                    break v;
                }
                assert!(t0.elapsed() < wait(), "no verdict with node 1 back: {:?}", client.verdicts());
                std::thread::sleep(Duration::from_millis(5));
            };
            let back = verdict.back.map(|(i, _)| i);
            println!(
                "rank 0: verdict node {} incarnation {} dead ({:?}, reported {} ms after its last heartbeat), back at incarnation {:?}",
                verdict.node,
                verdict.incarnation,
                verdict.cause,
                verdict.detection().as_millis(),
                back
            );
            assert_eq!((verdict.incarnation, back), (0, Some(1)));
            let det = Determinant { sender: 1, receiver: 0, ssn: 1, rsn: 1 };
            let t = client.enqueue_determinant_wait(&det, wait()).expect("enqueue");
            client.wait_durable(t, wait()).expect("durable at the respawned buddy");
            assert!(client.buddy_alive());
            println!("rank 0: logging to the respawned buddy works");
            // Replay material: node 1's log from before the kill stays readable here (the
            // ring hosted for its dead incarnation is retired, not dropped).
            let held = hosted_rsns(&client, 2);
            assert!((1..=LOGGED).all(|r| held.contains(&r)), "rank 2's determinants kept: {held:?}");
            println!("rank 0: node 1's {LOGGED} determinants from before the kill are still held");
        }
        (2 | 3, 1) => {
            // The restarted node logs through its restarted logger into node 0's new ring.
            let det = Determinant { sender: 0, receiver: rank, ssn: 1, rsn: 1 };
            let t = client.enqueue_determinant_wait(&det, wait()).expect("enqueue");
            client.wait_durable(t, wait()).expect("durable at the surviving buddy");
            println!("rank {rank}: restarted, logging again");
            if rank == 2 {
                // Node 0's log died with the old logger; node 0's logger wrote it again into
                // the ring our new logger hosts.
                loop {
                    let held = hosted_rsns(&client, 0);
                    if (1..=LOGGED).all(|r| held.contains(&r)) {
                        break;
                    }
                    assert!(t0.elapsed() < wait(), "node 0's log was not re-flushed: {held:?}");
                    std::thread::sleep(Duration::from_millis(20));
                }
                println!("rank 2: node 0's {LOGGED} determinants were re-flushed into the new ring");
            }
        }
        (3, 0) => {
            std::thread::sleep(wait());
            panic!("rank 3 was not killed with its node within {:?}", wait());
        }
        _ if test.contains("without") => {
            std::thread::sleep(wait());
            panic!("rank {rank} was not killed with the job within {:?}", wait());
        }
        _ => {}
    }
}

/// Determinants each of ranks 0 and 2 makes durable before node 1's logger is killed.
const LOGGED: u64 = 100;

fn marker(name: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(std::env::var("TEST_DIR").expect("TEST_DIR")).join(name)
}

fn log_durably(client: &NodeLogClient, rank: u32) {
    let mut tickets = Vec::new();
    for rsn in 1..=LOGGED {
        let det = Determinant { sender: 1 - rank % 2, receiver: rank, ssn: rsn, rsn };
        tickets.push(client.enqueue_determinant_wait(&det, wait()).expect("enqueue"));
    }
    for t in tickets {
        client.wait_durable(t, wait()).expect("durable before the kill");
    }
}

/// The rsns of `receiver`'s determinants in the rings this node's logger hosts (snapshots).
fn hosted_rsns(client: &NodeLogClient, receiver: u32) -> std::collections::BTreeSet<u64> {
    let mut rsns = std::collections::BTreeSet::new();
    for (_, image) in client.hosted_ring_images(wait()).expect("ring snapshots") {
        let scan = reverb_logger::logring::scan(&image).expect("ring image");
        for record in
            scan.records.iter().filter(|r| r.kind == reverb_logger::logring::RecordKind::Determinants)
        {
            let dets = record.determinants().expect("determinant record");
            rsns.extend(dets.iter().filter(|d| d.receiver == receiver).map(|d| d.rsn));
        }
    }
    rsns
}

fn self_args(test: &str) -> Vec<String> {
    let exe = std::env::current_exe().expect("test binary").to_string_lossy().into_owned();
    vec![exe, test.into(), "--exact".into(), "--nocapture".into(), "--test-threads=1".into()]
}

#[test]
fn a_logger_killed_alone_fails_its_node_which_is_respawned() {
    const TEST: &str = "a_logger_killed_alone_fails_its_node_which_is_respawned";
    if std::env::var(ROLE).is_ok() {
        return rank_role(TEST);
    }
    let dir = std::env::temp_dir().join(format!("reverb-logger-alone-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let dir_s = dir.to_string_lossy().into_owned();
    let (args, report) = with_report(run_args(4, 1, &self_args(TEST)), "alone");
    let (code, out, err, took) = reverb(&args, &[(ROLE, "rank"), ("TEST_DIR", dir_s.as_str())]);
    std::fs::remove_dir_all(&dir).ok();
    println!("took {took:?}\n{out}\n{err}");
    assert_eq!(code, Some(0), "{out}\n{err}");
    // The launcher failed node 1 for its logger's SIGKILL.
    let launch = launch_report(&report, &err);
    let respawns = launch["respawns"].as_array().expect("respawns");
    assert_eq!(respawns.len(), 1, "{launch}");
    let r = &respawns[0];
    assert_eq!((&r["node"], &r["signal"], &r["by_logger"]), (&1.into(), &9.into(), &true.into()), "{launch}");
    assert_eq!(r["incarnation"], 1, "{launch}");
    // The buddy's logger found the death (transport, heartbeat, a failed write, or the new
    // incarnation's rejoin: whichever came first): rank 0 checked its verdict in the node
    // segment (incarnation 0 dead, back at 1) and printed these markers once it had.
    assert!(out.contains("incarnation 0 dead") && out.contains("back at incarnation Some(1)"), "{out}");
    assert!(out.contains("rank 0: logging to the respawned buddy works"), "{out}");
    for r in [2, 3] {
        assert!(out.contains(&format!("rank {r}: restarted, logging again")), "{out}");
    }
    assert!(out.contains("rank 2: node 0's 100 determinants were re-flushed into the new ring"), "{out}");
    assert!(out.contains("rank 0: node 1's 100 determinants from before the kill are still held"), "{out}");
}

#[test]
fn a_logger_killed_without_respawn_fails_the_job_clearly() {
    const TEST: &str = "a_logger_killed_without_respawn_fails_the_job_clearly";
    if std::env::var(ROLE).is_ok() {
        return rank_role(TEST);
    }
    let (args, report) = with_report(run_args(4, 0, &self_args(TEST)), "no-respawn");
    let (code, out, err, took) = reverb(&args, &[(ROLE, "rank")]);
    println!("took {took:?}\n{err}");
    assert_eq!(code, Some(128 + 9), "the job must fail with the logger's signal:\n{out}\n{err}");
    // Stopped at once by the logger's death (not at its timeout), which the report names.
    let launch = launch_report(&report, &err);
    let stop = &launch["stop"];
    assert_eq!((&stop["kind"], &stop["signal"]), (&"logger_failed".into(), &9.into()), "{launch}");
    let what = stop["what"].as_str().unwrap_or_default();
    assert!(what.contains("logger core of node 1"), "the report names the logger: {launch}");
    assert_eq!(launch["respawns"], serde_json::json!([]), "{launch}");
}

/// The pid and segment base of the logger core of `node` started by launcher `launcher`.
fn find_logger(launcher: u32, node: u32) -> Option<(u32, String)> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else { continue };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid =
            stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if ppid != Some(launcher) {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if !String::from_utf8_lossy(&cmdline).contains("logger-core") {
            continue;
        }
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let vars: Vec<String> =
            environ.split(|&b| b == 0).map(|v| String::from_utf8_lossy(v).into_owned()).collect();
        if vars.iter().any(|v| *v == format!("REVERB_NODE={node}")) {
            let base =
                vars.iter().find_map(|v| v.strip_prefix("REVERB_LOGGER_SEGMENT=").map(str::to_string))?;
            return Some((pid, base));
        }
    }
    None
}

#[test]
fn a_logger_killed_mid_run_fails_its_node_and_the_app_keeps_its_checksum() {
    let program: Vec<String> =
        [BIN, "app", "master-worker", "--iters", "2000"].iter().map(|s| s.to_string()).collect();
    let (code, clean_out, clean_err, _) = reverb(&run_args(8, 0, &program), &[("REVERB_LOG", "causal")]);
    assert_eq!(code, Some(0), "failure-free run:\n{clean_out}\n{clean_err}");
    let clean = checksum(&clean_out).unwrap_or_else(|| panic!("no checksum:\n{clean_out}"));

    let dir = std::env::temp_dir().join(format!("reverb-logger-respawn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (out_path, err_path) = (dir.join("out"), dir.join("err"));
    let mut job = Command::new(BIN)
        .args(run_args(8, 1, &program))
        .env("REVERB_LOG", "causal")
        .env("REVERB_HEARTBEAT_MS", heartbeat_ms())
        .env("REVERB_LOGGER_STALL_MS", stall_ms())
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("spawning reverb run");
    let t0 = Instant::now();
    let (pid, base) = loop {
        if let Some(found) = find_logger(job.id(), 1) {
            break found;
        }
        assert!(t0.elapsed() < wait(), "no logger core for node 1 appeared");
        std::thread::sleep(Duration::from_millis(5));
    };
    // Once it serves its node (its segment says ready).
    let ctl = format!("{base}.ctl");
    loop {
        let ready = reverb_logger::core::segment::NodeSegment::open(&ctl)
            .is_ok_and(|s| s.get(Status::State) == STATE_READY);
        if ready {
            break;
        }
        assert!(t0.elapsed() < wait(), "node 1's logger never became ready");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Mid-run means past the ranks' init (a failure inside init's collectives is another
    // case): the master's any-source receives on node 0 make determinants only once the app
    // runs, so wait for node 0's logger to have logged some.
    let (_, base0) = find_logger(job.id(), 0).expect("node 0's logger core");
    let ctl0 = format!("{base0}.ctl");
    loop {
        let running = reverb_logger::core::segment::NodeSegment::open(&ctl0)
            .is_ok_and(|s| s.get(Status::DeterminantsLogged) > 0);
        if running {
            break;
        }
        assert!(t0.elapsed() < wait(), "the app never logged a determinant on node 0");
        std::thread::sleep(Duration::from_millis(5));
    }
    // Our grandchild's pid (the launcher has not reaped it: it is running, or a zombie until
    // the launcher sees it).
    let target = rustix::process::Pid::from_raw(pid as i32).expect("a positive pid");
    rustix::process::kill_process(target, rustix::process::Signal::KILL).expect("SIGKILL");
    let status = loop {
        if let Some(st) = job.try_wait().unwrap() {
            break st;
        }
        let bound = Duration::from_secs(150) * time_scale();
        if t0.elapsed() > bound {
            let _ = job.kill();
            panic!("reverb run did not end within {bound:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = std::fs::read_to_string(&out_path).unwrap_or_default();
    let err = std::fs::read_to_string(&err_path).unwrap_or_default();
    std::fs::remove_dir_all(&dir).ok();
    println!("{err}");
    assert_eq!(status.code(), Some(0), "{out}\n{err}");
    assert!(
        err.contains(&format!(
            "the logger core of node 1 (pid {pid}, incarnation 0) was killed by signal 9 (SIGKILL); respawning node 1"
        )),
        "the job ended before the kill, or the launcher missed it:\n{err}"
    );
    assert_eq!(checksum(&out).as_deref(), Some(clean.as_str()), "checksum after recovery:\n{out}\n{err}");
}

/// Node 1's logger core is SIGKILLed while the ranks exchange checkpoint slot descriptors,
/// inside `Runtime::init` (rank 3 kills it, `REVERB_FAULT_INIT=3:ckpt-slots:logger`, and
/// waits in place): the launcher fails node 1 with its logger and restarts both; the other
/// ranks, waiting in the exchange, wait for node 1, redo init's collectives with it, and the
/// stencil ends with its failure-free checksum.
#[test]
fn a_logger_killed_during_the_checkpoint_slot_exchange_keeps_the_stencil_checksum() {
    stencil_keeps_its_checksum_with(
        ("REVERB_FAULT_INIT", "3:ckpt-slots:logger"),
        "node 1's logger killed inside init",
        &[
            "SIGKILL to this node's logger core",
            "respawning node 1 (ranks 2-3) and its logger core at incarnation 1",
            "node 1: logger core started again at incarnation 1",
            "ranks [2, 3] failed inside init",
            "[logger 0] reverb logger-core node 0: logging to buddy node 1 (incarnation 1) again",
        ],
    );
}

/// Node 1's logger core dies inside the loggers' own start-up exchange (a collective), once its
/// ranks have attached (`REVERB_LOGGER_FAULT_STARTUP=1`): the other loggers trade hellos
/// instead, as with a respawned logger, the launcher restarts node 1 with its logger, and the
/// stencil (whose ranks meet the failure inside their own init) keeps its checksum.
#[test]
fn a_logger_killed_in_the_loggers_start_up_exchange_keeps_the_stencil_checksum() {
    stencil_keeps_its_checksum_with(
        ("REVERB_LOGGER_FAULT_STARTUP", "1"),
        "node 1's logger killed in the loggers' start-up",
        &[
            "SIGKILL to this logger core in its start-up exchange",
            "respawning node 1 (ranks 2-3) and its logger core at incarnation 1",
            "[logger 0] reverb logger-core node 0: node 1 failed during the loggers' start-up exchange",
            "[logger 2] reverb logger-core node 2: logging to buddy node 3 (incarnation 0) again",
            "[logger 3] reverb logger-core node 3: logging to buddy node 2 (incarnation 0) again",
            "[logger 0] reverb logger-core node 0: logging to buddy node 1 (incarnation 1) again",
            "[logger 1] reverb logger-core node 1: logging to buddy node 0 (incarnation 0) again",
        ],
    );
}

/// Runs the causal stencil (8 ranks, loggers on) failure-free, then with `fault` set and one
/// respawn: the faulty run must end with the same checksum and say each of `expected`.
fn stencil_keeps_its_checksum_with(fault: (&str, &str), what: &str, expected: &[&str]) {
    let program: Vec<String> = [BIN, "app", "stencil", "--iters", "60", "--size", "64", "--ckpt-every", "10"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let (code, clean_out, clean_err, _) = reverb(&run_args(8, 0, &program), &[("REVERB_LOG", "causal")]);
    assert_eq!(code, Some(0), "failure-free run:\n{clean_out}\n{clean_err}");
    let clean = checksum(&clean_out).unwrap_or_else(|| panic!("no checksum:\n{clean_out}"));

    let env = [("REVERB_LOG", "causal"), fault];
    let (code, out, err, took) = reverb(&run_args(8, 1, &program), &env);
    println!("killed run took {took:?}\n{err}");
    assert_eq!(code, Some(0), "run with {what}:\n{out}\n{err}");
    assert_eq!(checksum(&out).as_deref(), Some(clean.as_str()), "checksum after recovery:\n{out}\n{err}");
    for expected in expected {
        assert!(err.contains(expected), "missing {expected:?} in:\n{err}");
    }
}
