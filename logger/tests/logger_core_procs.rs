//! Logger cores end to end, all real processes: one logger-core process per simulated node
//! (their own transport job over REVERB_PROVIDER, default shm) and application ranks that only
//! attach to their node's segment and enqueue. This test binary re-executes itself in the
//! roles `logger` and `app`; the parent process is the launcher.
//!
//! - several ranks per node enqueue determinants and payload frames concurrently; every ticket
//!   becomes durable, and the buddy's ring (dumped by the host logger at exit and scanned)
//!   holds exactly those records: none lost, none duplicated, each producer's order kept;
//! - a payload lane pushes back (`LaneFull`) while the buddy ring is full, and a trim request
//!   frees it, with nothing lost;
//! - SIGKILL of one node's logger: the buddy logger reports it dead within the bound, and
//!   ranks waiting on either dead path get an error, not a hang.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reverb_logger::core::segment::{DeathCause, NodeSegment, Status, BUDDY_DEAD};
use reverb_logger::core::{
    segment_base, segment_paths, CoreError, LoggerCore, LoggerCoreConfig, NodeLogClient, Ticket,
};
use reverb_logger::logring::{self, RecordKind};
use reverb_logger::Determinant;
use reverb_transport::bootstrap::{BootServer, TcpBootstrap};
use reverb_transport::testkit::pattern;
use reverb_transport::TransportConfig;

const ROLE: &str = "REVERB_TEST_ROLE";
const WAIT: Duration = Duration::from_secs(60);

fn role() -> Option<String> {
    std::env::var(ROLE).ok()
}

fn env_u64(name: &str) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{name} not set"))
}

/// One launched job: loggers (one per node) and app ranks, all children of this process.
struct Harness {
    test: &'static str,
    nodes: u32,
    ranks_per_node: u32,
    job_id: String,
    dump: PathBuf,
    _server: BootServer,
    loggers: Vec<Child>,
    apps: Vec<Child>,
}

impl Harness {
    fn start(test: &'static str, nodes: u32, ranks_per_node: u32, extra: &[(&str, String)]) -> Harness {
        let job_id =
            format!("lc{}{}", std::process::id(), test.replace('_', "").chars().take(12).collect::<String>());
        let dump = std::env::temp_dir().join(format!("reverb-{job_id}-dump"));
        std::fs::create_dir_all(&dump).unwrap();
        let token = format!("logger-token-{job_id}");
        let server = BootServer::start("127.0.0.1:0", nodes, &token).unwrap();
        let root = server.local_addr().to_string();
        let exe = std::env::current_exe().unwrap();
        let loggers = (0..nodes)
            .map(|node| {
                Command::new(&exe)
                    .args([test, "--exact", "--nocapture", "--test-threads=1"])
                    .env(ROLE, "logger")
                    .env("REVERB_RANK", node.to_string())
                    .env("REVERB_SIZE", nodes.to_string())
                    .env("REVERB_NODE", node.to_string())
                    .env("REVERB_LOCAL_RANK", "0")
                    .env("REVERB_RANKS_PER_NODE", "1")
                    .env("REVERB_JOB_ID", format!("{job_id}-lg"))
                    .env("REVERB_INCARNATION", "0")
                    .env("REVERB_ROOT", &root)
                    .env("REVERB_JOB_TOKEN", &token)
                    .env("REVERB_BOOT_SERVER", "external")
                    .env("REVERB_LOGGER_SEGMENT", segment_base(&job_id, node))
                    .env("REVERB_LOGGER_LANES", ranks_per_node.to_string())
                    .env("REVERB_LOGGER_STOP_ON_EOF", "1")
                    .env("REVERB_LOGGER_DUMP_DIR", &dump)
                    // Generous, so a loaded machine never fakes a death; detection tests override it.
                    .env("REVERB_HEARTBEAT_MS", "2000")
                    .envs(extra.iter().map(|(k, v)| (*k, v.as_str())))
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let apps = (0..nodes * ranks_per_node)
            .map(|rank| {
                Command::new(&exe)
                    .args([test, "--exact", "--nocapture", "--test-threads=1"])
                    .env(ROLE, "app")
                    .env("REVERB_RANK", rank.to_string())
                    .env("REVERB_NODE", (rank / ranks_per_node).to_string())
                    .env("REVERB_LOCAL_RANK", (rank % ranks_per_node).to_string())
                    .env("REVERB_LOGGER_SEGMENT", segment_base(&job_id, rank / ranks_per_node))
                    .env("TEST_DUMP_DIR", &dump)
                    .envs(extra.iter().map(|(k, v)| (*k, v.as_str())))
                    .stdin(Stdio::null())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        Harness { test, nodes, ranks_per_node, job_id, dump, _server: server, loggers, apps }
    }

    fn kill_all(&mut self) {
        for c in self.loggers.iter_mut().chain(self.apps.iter_mut()) {
            let _ = c.kill();
        }
    }

    /// Waits (bounded) for every child in `which`; returns each one's (success, output).
    fn wait(&mut self, loggers: bool) -> Vec<(bool, String)> {
        let deadline = Instant::now() + WAIT;
        let children = if loggers { &mut self.loggers } else { &mut self.apps };
        let mut done: Vec<Option<std::process::ExitStatus>> = vec![None; children.len()];
        while done.iter().any(Option::is_none) {
            for (i, c) in children.iter_mut().enumerate() {
                if done[i].is_none() {
                    done[i] = c.try_wait().unwrap();
                }
            }
            if Instant::now() > deadline {
                self.kill_all();
                panic!("{}: {} hung", self.test, if loggers { "loggers" } else { "apps" });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let children = std::mem::take(if loggers { &mut self.loggers } else { &mut self.apps });
        children
            .into_iter()
            .zip(done)
            .map(|(c, st)| {
                let out = c.wait_with_output().unwrap();
                let text = format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                let ok = st.is_some_and(|s| s.success()) && text.contains("1 passed");
                (ok, text)
            })
            .collect()
    }

    fn apps_ok(&mut self) {
        for (i, (ok, out)) in self.wait(false).into_iter().enumerate() {
            assert!(ok, "{}: app rank {i} failed:\n{out}", self.test);
        }
    }

    /// Closes the loggers' stdin (the launcher's stop) and checks they exit cleanly.
    fn stop_loggers(&mut self) -> Vec<String> {
        for c in self.loggers.iter_mut() {
            drop(c.stdin.take());
        }
        self.wait(true)
            .into_iter()
            .enumerate()
            .map(|(node, (ok, out))| {
                assert!(ok, "{}: logger of node {node} failed:\n{out}", self.test);
                out
            })
            .collect()
    }

    /// The hosted ring image holding `node`'s log.
    fn ring_of(&self, node: u32) -> logring::RingScan {
        let image = std::fs::read(self.dump.join(format!("ring-node{node}.bin"))).unwrap();
        logring::scan(&image).unwrap()
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.kill_all();
        std::fs::remove_dir_all(&self.dump).ok();
        for node in 0..self.nodes {
            let (ctl, detq) = segment_paths(&segment_base(&self.job_id, node));
            std::fs::remove_file(ctl).ok();
            std::fs::remove_file(detq).ok();
        }
        let _ = self.ranks_per_node;
    }
}

/// The logger role: runs until its stdin closes.
fn run_logger() {
    let joined = LoggerCoreConfig::from_env(env_u64("REVERB_RANKS_PER_NODE"))
        .and_then(LoggerCore::create)
        .and_then(|core| {
            core.join_and_run(|| -> Result<_, CoreError> {
                let mut boot = TcpBootstrap::connect_from_env()?;
                let provider = reverb_transport::open(&TransportConfig::from_env()?, &mut boot)?;
                Ok((boot, provider))
            })
        });
    match joined {
        Ok(s) => println!("logger summary: {s:?}"),
        Err(e) => panic!("logger core failed: {e}"),
    }
}

fn frame(producer: u32, seq: u64) -> Vec<u8> {
    let mut f = producer.to_le_bytes().to_vec();
    f.extend_from_slice(&seq.to_le_bytes());
    f.extend(pattern(u64::from(producer) << 32 | seq, (seq * 29 % 700) as usize));
    f
}

fn parse_frame(data: &[u8]) -> (u32, u64) {
    let producer = u32::from_le_bytes(data[0..4].try_into().unwrap());
    let seq = u64::from_le_bytes(data[4..12].try_into().unwrap());
    assert_eq!(data, frame(producer, seq), "payload of producer {producer} seq {seq} corrupted");
    (producer, seq)
}

const DETS_PER_RANK: u64 = 3000;
const FRAME_EVERY: u64 = 3;

#[test]
fn ranks_enqueue_concurrently_and_the_buddy_ring_holds_exactly_their_records() {
    exact_records("ranks_enqueue_concurrently_and_the_buddy_ring_holds_exactly_their_records", 2, 2);
}

/// Three nodes: node 2 logs to node 1, which hosts two rings and must outlive both writers.
#[test]
fn an_odd_node_count_shares_a_host() {
    exact_records("an_odd_node_count_shares_a_host", 3, 2);
}

fn exact_records(test: &'static str, nodes: u32, rpn: u32) {
    match role().as_deref() {
        Some("logger") => return run_logger(),
        Some("app") => {
            let client = NodeLogClient::attach_from_env(env_u64("REVERB_LOCAL_RANK")).expect("attach");
            let rank = env_u64("REVERB_RANK") as u32;
            let mut last = Vec::new();
            for seq in 1..=DETS_PER_RANK {
                let det = Determinant { sender: rank, receiver: 1000 + rank, ssn: seq, rsn: seq * 2 };
                let t = client.enqueue_determinant_wait(&det, WAIT).expect("enqueue determinant");
                last.push(t);
                if seq % FRAME_EVERY == 0 {
                    last.push(client.enqueue_payload_wait(&frame(rank, seq), WAIT).expect("enqueue payload"));
                }
                // Pessimistic delivery now and then: wait on this very ticket.
                if seq % 500 == 0 {
                    client.wait_durable(t, WAIT).expect("durable");
                }
            }
            for t in &last {
                client.wait_durable(*t, WAIT).expect("durable at the end");
            }
            assert!(last.iter().all(|t| client.is_durable(*t)));
            assert!(client.buddy_alive());
            return;
        }
        _ => {}
    }
    let mut h = Harness::start(test, nodes, rpn, &[]);
    h.apps_ok();
    h.stop_loggers();
    for node in 0..nodes {
        let scan = h.ring_of(node);
        assert_eq!(scan.end, logring::ScanEnd::Clean);
        let mut dets: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        let mut frames: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        for r in &scan.records {
            assert!(!r.beyond_watermark, "node {node}: record at {} not covered by the watermark", r.pos);
            match r.kind {
                RecordKind::Determinants => {
                    for d in r.determinants().unwrap() {
                        assert_eq!((d.receiver, d.rsn), (1000 + d.sender, d.ssn * 2));
                        dets.entry(d.sender).or_default().push(d.ssn);
                    }
                }
                RecordKind::Payload => {
                    let (p, seq) = parse_frame(&r.data);
                    frames.entry(p).or_default().push(seq);
                }
                RecordKind::Wrap => unreachable!("scan skips wrap markers"),
            }
        }
        let producers: Vec<u32> = (node * rpn..(node + 1) * rpn).collect();
        assert_eq!(dets.keys().copied().collect::<Vec<_>>(), producers, "node {node}: determinant producers");
        assert_eq!(frames.keys().copied().collect::<Vec<_>>(), producers, "node {node}: payload producers");
        for p in producers {
            let want: Vec<u64> = (1..=DETS_PER_RANK).collect();
            assert_eq!(dets[&p], want, "producer {p}: determinants lost, duplicated or reordered");
            let want: Vec<u64> = (1..=DETS_PER_RANK).filter(|s| s % FRAME_EVERY == 0).collect();
            assert_eq!(frames[&p], want, "producer {p}: payloads lost, duplicated or reordered");
        }
    }
}

const BP_FRAME: usize = 500;
const BP_FRAMES: u64 = 120;

#[test]
fn a_full_lane_pushes_back_and_a_trim_frees_it() {
    match role().as_deref() {
        Some("logger") => return run_logger(),
        Some("app") => {
            let client = NodeLogClient::attach_from_env(env_u64("REVERB_LOCAL_RANK")).expect("attach");
            let rank = env_u64("REVERB_RANK") as u32;
            let mut seq = 0u64;
            let mut pushed_back = 0u64;
            let mut trims = 0u64;
            let mut last = Ticket::default();
            let deadline = Instant::now() + WAIT;
            while seq < BP_FRAMES {
                let mut f = frame(rank, seq + 1);
                f.resize(BP_FRAME, 0xab);
                f[12..].copy_from_slice(&pattern(seq + 1, BP_FRAME - 12));
                match client.enqueue_payload(&f) {
                    Ok(t) => {
                        seq += 1;
                        last = t;
                    }
                    Err(CoreError::LaneFull { .. }) => {
                        pushed_back += 1;
                        // Everything enqueued so far must still become durable once trimmed.
                        std::thread::sleep(Duration::from_millis(2));
                        if pushed_back.is_multiple_of(20) {
                            // This rank is its node's only producer, so it is quiesced here.
                            client.trim_wait(WAIT).expect("trim");
                            trims += 1;
                        }
                    }
                    Err(e) => panic!("enqueue: {e}"),
                }
                assert!(Instant::now() < deadline, "stuck at frame {seq}");
            }
            client.wait_durable(last, WAIT).expect("durable");
            assert_eq!(client.status(Status::PayloadsLogged), BP_FRAMES, "payload frames lost");
            assert!(pushed_back > 0, "the lane never pushed back");
            assert!(trims > 0 && client.trims_done() == trims);
            println!("pushed back {pushed_back} times, {trims} trims");
            return;
        }
        _ => {}
    }
    // Ring 8 KiB, lane 4 KiB: about 15 frames fit the ring, 7 more the lane.
    let extra =
        [("REVERB_LOGGER_RING_BYTES", "8192".to_string()), ("REVERB_LOGGER_LANE_BYTES", "4096".to_string())];
    let mut h = Harness::start("a_full_lane_pushes_back_and_a_trim_frees_it", 2, 1, &extra);
    h.apps_ok();
    h.stop_loggers();
    for node in 0..2u32 {
        // The ring holds the frames after the last trim: a consecutive run ending with the last.
        let scan = h.ring_of(node);
        let seqs: Vec<u64> = scan
            .records
            .iter()
            .map(|r| {
                assert_eq!(r.kind, RecordKind::Payload);
                let (p, s) = (
                    u32::from_le_bytes(r.data[0..4].try_into().unwrap()),
                    u64::from_le_bytes(r.data[4..12].try_into().unwrap()),
                );
                assert_eq!(p, node);
                s
            })
            .collect();
        // (Empty when a late trim covered everything.)
        assert!(seqs.last().is_none_or(|&s| s == BP_FRAMES), "node {node}: {seqs:?}");
        assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "node {node}: {seqs:?}");
    }
}

fn marker(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

fn wait_for_file(path: &Path) {
    let deadline = Instant::now() + WAIT;
    while !path.exists() {
        assert!(Instant::now() < deadline, "no {}", path.display());
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_killed_logger_is_reported_dead_and_waiters_get_errors() {
    match role().as_deref() {
        Some("logger") => return run_logger(),
        Some("app") => {
            let dir = PathBuf::from(std::env::var("TEST_DUMP_DIR").unwrap());
            let client = NodeLogClient::attach_from_env(env_u64("REVERB_LOCAL_RANK")).expect("attach");
            let rank = env_u64("REVERB_RANK") as u32;
            for seq in 1..=100 {
                let t = client
                    .enqueue_determinant(&Determinant { sender: rank, receiver: 0, ssn: seq, rsn: seq })
                    .expect("enqueue");
                client.wait_durable(t, WAIT).expect("durable before the kill");
            }
            std::fs::write(marker(&dir, &format!("ready{rank}")), b"").unwrap();
            wait_for_file(&marker(&dir, "killed"));
            let t = client
                .enqueue_determinant(&Determinant { sender: rank, receiver: 0, ssn: 101, rsn: 101 })
                .expect("enqueue after the kill");
            let t0 = Instant::now();
            let err = client.wait_durable(t, WAIT).expect_err("nothing can become durable now");
            let took = t0.elapsed();
            println!("rank {rank}: wait_durable failed after {} ms: {err}", took.as_millis());
            if rank == 0 {
                assert!(matches!(err, CoreError::LoggerGone { .. }), "{err}");
            } else {
                assert!(matches!(err, CoreError::BuddyDead { node: 0 }), "{err}");
                assert!(!client.buddy_alive());
            }
            assert!(took < Duration::from_secs(10), "error took {took:?}");
            return;
        }
        _ => {}
    }
    let extra = [("REVERB_HEARTBEAT_MS", "400".to_string())];
    let mut h = Harness::start("a_killed_logger_is_reported_dead_and_waiters_get_errors", 2, 1, &extra);
    for rank in 0..2 {
        wait_for_file(&marker(&h.dump, &format!("ready{rank}")));
    }
    let (ctl, _) = segment_paths(&segment_base(&h.job_id, 1));
    let survivor = NodeSegment::open(ctl).unwrap();
    assert_ne!(survivor.get(Status::BuddyState), BUDDY_DEAD);
    h.loggers[0].kill().unwrap();
    let killed = Instant::now();
    while survivor.get(Status::BuddyState) != BUDDY_DEAD {
        assert!(killed.elapsed() < WAIT, "the buddy was never reported dead");
        std::thread::sleep(Duration::from_millis(1));
    }
    let detected = killed.elapsed();
    println!(
        "buddy death detected {} ms after SIGKILL (logger's own measure: {} ms after the last heartbeat)",
        detected.as_millis(),
        survivor.get(Status::DetectionMs)
    );
    // Generous on a loaded machine; the default heartbeat bound is 400 ms.
    assert!(detected < Duration::from_secs(5), "detection took {detected:?}");
    // On shm a put into a just-killed process's still-mapped ring lands until the death is
    // detected, so the ranks enqueue their doomed entries after it.
    std::fs::write(marker(&h.dump, "killed"), b"").unwrap();
    h.apps_ok();
    // The survivor's verdict on node 0's logger (any cause: transport, heartbeat, a write).
    let verdicts = survivor.verdicts();
    let mut killed_logger = h.loggers.remove(0);
    killed_logger.wait().unwrap();
    let outs = h.stop_loggers();
    assert!(verdicts.iter().any(|v| (v.node, v.incarnation) == (0, 0)), "{verdicts:?}\n{}", outs[0]);
}

/// `kill -SIG pid` through the kill(1) utility (no unsafe in tests).
fn signal(sig: &str, pid: u32) {
    let st = Command::new("kill").args([sig, &pid.to_string()]).status().unwrap();
    assert!(st.success(), "kill {sig} {pid}");
}

/// A SIGSTOPped logger is alive to the kernel (no pidfd event, no transport error): only the
/// heartbeat can find it. Its own ranks see its loop stall; its buddy's ranks see the buddy dead.
#[test]
fn a_frozen_logger_is_found_by_its_heartbeat() {
    match role().as_deref() {
        Some("logger") => return run_logger(),
        Some("app") => {
            let dir = PathBuf::from(std::env::var("TEST_DUMP_DIR").unwrap());
            let client = NodeLogClient::attach_from_env(env_u64("REVERB_LOCAL_RANK")).expect("attach");
            let rank = env_u64("REVERB_RANK") as u32;
            let det = |ssn| Determinant { sender: rank, receiver: 0, ssn, rsn: ssn };
            for seq in 1..=50 {
                let t = client.enqueue_determinant(&det(seq)).expect("enqueue");
                client.wait_durable(t, WAIT).expect("durable before the freeze");
            }
            std::fs::write(marker(&dir, &format!("ready{rank}")), b"").unwrap();
            // Rank 0's logger is frozen: it waits on it already before anything is detected.
            wait_for_file(&marker(&dir, if rank == 0 { "frozen" } else { "detected" }));
            let t = client.enqueue_determinant(&det(51)).expect("enqueue");
            let t0 = Instant::now();
            let err = client.wait_durable(t, WAIT).expect_err("nothing can become durable now");
            println!("rank {rank}: wait_durable failed after {} ms: {err}", t0.elapsed().as_millis());
            if rank == 0 {
                assert!(matches!(err, CoreError::LoggerGone { .. }), "{err}");
            } else {
                assert!(matches!(err, CoreError::BuddyDead { node: 0 }), "{err}");
            }
            assert!(t0.elapsed() < Duration::from_secs(20));
            return;
        }
        _ => {}
    }
    let extra = [("REVERB_HEARTBEAT_MS", "300".to_string())];
    let mut h = Harness::start("a_frozen_logger_is_found_by_its_heartbeat", 2, 1, &extra);
    for rank in 0..2 {
        wait_for_file(&marker(&h.dump, &format!("ready{rank}")));
    }
    let (ctl, _) = segment_paths(&segment_base(&h.job_id, 1));
    let survivor = NodeSegment::open(ctl).unwrap();
    signal("-STOP", h.loggers[0].id());
    let frozen = Instant::now();
    std::fs::write(marker(&h.dump, "frozen"), b"").unwrap();
    while survivor.get(Status::BuddyState) != BUDDY_DEAD {
        assert!(frozen.elapsed() < WAIT, "the frozen buddy was never reported dead");
        std::thread::sleep(Duration::from_millis(1));
    }
    let detected = frozen.elapsed();
    println!(
        "frozen buddy detected {} ms after SIGSTOP by heartbeat (bound 300 ms; logger's measure {} ms)",
        detected.as_millis(),
        survivor.get(Status::DetectionMs)
    );
    assert!(detected < Duration::from_secs(5), "detection took {detected:?}");
    std::fs::write(marker(&h.dump, "detected"), b"").unwrap();
    h.apps_ok();
    // Frozen, not dead: only its silent heartbeat can tell.
    let verdicts = survivor.verdicts();
    let mut frozen_logger = h.loggers.remove(0);
    frozen_logger.kill().unwrap();
    frozen_logger.wait().unwrap();
    let outs = h.stop_loggers();
    let verdict = verdicts.iter().find(|v| v.node == 0);
    assert_eq!(verdict.map(|v| v.cause), Some(DeathCause::Heartbeat), "{verdicts:?}\n{}", outs[0]);
}
