//! `reverb run` end to end: env, output prefixes, failure propagation, signals, timeout, and
//! a real bootstrap among launched ranks (this test binary re-executes itself as the ranks).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use reverb::launcher::{launch, launch_report, LaunchOptions, LaunchSpec};
use reverb_transport::bootstrap::TcpBootstrap;
use reverb_transport::{Bootstrap, JobInfo};
use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_reverb");

struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
}

/// Runs `reverb ARGS`; panics (after killing it) if it takes longer than `bound`.
fn reverb(args: &[&str], bound: Duration) -> Out {
    let t0 = Instant::now();
    let mut child = Command::new(BIN)
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let ho = thread::spawn(move || {
        let mut s = String::new();
        let _ = so.read_to_string(&mut s);
        s
    });
    let he = thread::spawn(move || {
        let mut s = String::new();
        let _ = se.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t0.elapsed() > bound {
            let _ = child.kill();
            let _ = child.wait();
            panic!("reverb {args:?} still running after {bound:?}");
        }
        thread::sleep(Duration::from_millis(10));
    };
    let took = t0.elapsed();
    Out { code: status.code(), stdout: ho.join().unwrap(), stderr: he.join().unwrap(), took }
}

/// Runs `reverb run --report-json FILE RUN_ARGS`; returns the output and the launch report.
fn reverb_run(test: &str, run_args: &[&str], bound: Duration) -> (Out, Value) {
    let path = std::env::temp_dir().join(format!("reverb-launcher-{}-{test}.json", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let path_arg = path.to_str().expect("utf-8 temp path");
    let mut args = vec!["run", "--report-json", path_arg];
    args.extend_from_slice(run_args);
    let out = reverb(&args, bound);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("no launch report {}: {e}\n{}", path.display(), out.stderr));
    let _ = std::fs::remove_file(&path);
    let report: Value = serde_json::from_str(&text).expect("the launch report is JSON");
    assert_eq!(report["code"].as_i64(), out.code.map(i64::from), "{text}");
    (out, report)
}

/// The report's `stop` for a rank that failed: (kind, rank, node, incarnation, exit code, signal).
fn rank_failed(rank: u32, node: u32, incarnation: u32, exit_code: Option<i32>, signal: Option<i32>) -> Value {
    json!({
        "kind": "rank_failed",
        "rank": rank,
        "node": node,
        "incarnation": incarnation,
        "exit_code": exit_code,
        "signal": signal,
    })
}

fn alive(pid: u32) -> bool {
    // A reaped process has no /proc entry; a zombie would show state Z.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s.contains(") Z "),
        Err(_) => false,
    }
}

fn pids(out: &str) -> Vec<u32> {
    out.lines().filter_map(|l| l.split_once("pid ").and_then(|(_, p)| p.trim().parse().ok())).collect()
}

#[test]
fn ranks_get_their_env_and_prefixed_output() {
    let script = r#"echo "env $REVERB_RANK $REVERB_SIZE $REVERB_NODE $REVERB_LOCAL_RANK $REVERB_RANKS_PER_NODE $REVERB_INCARNATION $REVERB_BOOT_SERVER"; echo "job $REVERB_JOB_ID $REVERB_ROOT $REVERB_JOB_TOKEN"; echo "err $REVERB_RANK" >&2"#;
    let o = reverb(
        &["run", "-n", "4", "--ranks-per-node", "2", "--", "sh", "-c", script],
        Duration::from_secs(20),
    );
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let env: BTreeSet<&str> = o.stdout.lines().filter(|l| l.contains("] env ")).collect();
    let want: BTreeSet<&str> = [
        "[0] env 0 4 0 0 2 0 external",
        "[1] env 1 4 0 1 2 0 external",
        "[2] env 2 4 1 0 2 0 external",
        "[3] env 3 4 1 1 2 0 external",
    ]
    .into_iter()
    .collect();
    assert_eq!(env, want, "{}", o.stdout);

    // Every rank sees the same job id, root and token; each line carries its rank prefix.
    let jobs: Vec<&str> = o.stdout.lines().filter(|l| l.contains("] job ")).collect();
    assert_eq!(jobs.len(), 4);
    let tails: BTreeSet<&str> = jobs.iter().map(|l| l.split_once("] job ").unwrap().1).collect();
    assert_eq!(tails.len(), 1, "{jobs:?}");
    let parts: Vec<&str> = tails.iter().next().unwrap().split(' ').collect();
    assert_eq!(parts.len(), 3, "{parts:?}");
    assert!(parts[1].starts_with("127.0.0.1:"), "{parts:?}");
    assert!(parts[2].len() >= 32, "token too short: {parts:?}");
    for r in 0..4 {
        assert!(o.stdout.contains(&format!("[{r}] job ")), "{}", o.stdout);
        assert!(o.stderr.contains(&format!("[{r}] err {r}\n")), "{}", o.stderr);
    }
    assert!(!o.stdout.contains("err"), "stderr leaked into stdout: {}", o.stdout);
}

#[test]
fn no_prefix_passes_output_through() {
    let o =
        reverb(&["run", "-n", "2", "--no-prefix", "--", "sh", "-c", "echo plain"], Duration::from_secs(20));
    assert_eq!(o.code, Some(0));
    assert_eq!(o.stdout, "plain\nplain\n");
}

#[test]
fn a_failing_rank_fails_the_job_and_kills_the_others() {
    let script = r#"if [ "$REVERB_RANK" = 2 ]; then sleep 0.5; exit 3; fi; echo "pid $$"; exec sleep 30"#;
    let (o, report) = reverb_run("failing", &["-n", "4", "--", "sh", "-c", script], Duration::from_secs(20));
    assert_eq!(o.code, Some(3), "{}", o.stderr);
    assert!(o.took < Duration::from_secs(10), "took {:?}", o.took);
    assert_eq!(report["stop"], rank_failed(2, 0, 0, Some(3), None), "{}", o.stderr);
    assert_eq!(report["killed_ranks"], 3);
    let pids = pids(&o.stdout);
    assert_eq!(pids.len(), 3, "{}", o.stdout);
    for p in pids {
        assert!(!alive(p), "rank pid {p} survived");
    }
}

#[test]
fn a_rank_killed_by_a_signal_is_reported() {
    let script = r#"if [ "$REVERB_RANK" = 1 ]; then kill -9 $$; fi; exec sleep 30"#;
    let (o, report) = reverb_run("signal", &["-n", "3", "--", "sh", "-c", script], Duration::from_secs(20));
    assert_eq!(o.code, Some(128 + 9), "{}", o.stderr);
    assert_eq!(report["stop"], rank_failed(1, 0, 0, None, Some(9)), "{}", o.stderr);
    assert!(o.took < Duration::from_secs(10));
}

#[test]
fn timeout_kills_everything() {
    let (o, report) = reverb_run(
        "timeout",
        &["-n", "2", "--timeout", "1", "--", "sh", "-c", "echo \"pid $$\"; exec sleep 30"],
        Duration::from_secs(20),
    );
    assert_eq!(o.code, Some(124), "{}", o.stderr);
    assert_eq!(report["stop"]["kind"], "timeout", "{}", o.stderr);
    assert_eq!(report["killed_ranks"], 2);
    assert!(o.took >= Duration::from_secs(1) && o.took < Duration::from_secs(8), "took {:?}", o.took);
    for p in pids(&o.stdout) {
        assert!(!alive(p), "rank pid {p} survived");
    }
}

#[test]
fn sigterm_is_forwarded_to_the_ranks() {
    let mut child = Command::new(BIN)
        .args(["run", "-n", "2", "--", "sh", "-c", "echo \"pid $$\"; exec sleep 30"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let so = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for l in BufReader::new(so).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let l = rx.recv_timeout(Duration::from_secs(10)).expect("ranks did not start");
        seen.extend(pids(&l));
    }
    // Our own child, not reaped yet.
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::TERM,
    );
    let t0 = Instant::now();
    let st = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "reverb ignored SIGTERM");
        thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(st.code(), Some(128 + libc::SIGTERM));
    for p in seen {
        assert!(!alive(p), "rank pid {p} orphaned");
    }
}

#[test]
fn missing_program_is_an_error() {
    let o = reverb(&["run", "-n", "2", "--", "/nonexistent/prog"], Duration::from_secs(20));
    assert_ne!(o.code, Some(0));
    // A clear error names what failed: the spawn of rank 0.
    assert!(o.stderr.contains("spawning rank 0"), "{}", o.stderr);
}

/// Entry point when this test binary runs as a launched rank; a no-op otherwise.
#[test]
fn rank_entry() {
    let Ok(Some(job)) = JobInfo::from_env() else { return };
    let mut b = TcpBootstrap::connect_from_env().expect("bootstrap");
    assert_eq!(b.job(), &job);
    let all = b.allgather(&[job.rank as u8, job.node as u8]).expect("allgather");
    for (r, d) in all.iter().enumerate() {
        assert_eq!(d, &vec![r as u8, job.node_of(r as u32) as u8]);
    }
    b.barrier().expect("barrier");
}

#[test]
fn launched_ranks_bootstrap_through_the_launcher_server() {
    let spec = LaunchSpec {
        ranks: 3,
        ranks_per_node: 2,
        program: std::env::current_exe().unwrap(),
        args: ["rank_entry", "--exact", "--test-threads=1", "-q"].map(String::from).to_vec(),
        env: vec![("REVERB_BOOT_TIMEOUT_S".into(), "20".into())],
        timeout: Some(Duration::from_secs(60)),
        prefix_output: true,
    };
    assert_eq!(launch(&spec).unwrap(), 0);
}

#[test]
fn launch_reports_a_failing_rank() {
    let spec = LaunchSpec {
        ranks: 2,
        ranks_per_node: 1,
        program: "sh".into(),
        args: vec!["-c".into(), "exit $((REVERB_RANK + 5))".into()],
        env: Vec::new(),
        timeout: Some(Duration::from_secs(20)),
        prefix_output: false,
    };
    let code = launch(&spec).unwrap();
    assert!(code == 5 || code == 6, "{code}");
}

// ---- respawn ----

#[test]
fn respawn_restarts_a_killed_node_in_place() {
    // Rank 2 kills itself once; rank 3 (its node-mate) is killed by the launcher; both come
    // back at incarnation 1. Node 0 runs once.
    let script = r#"echo "start $REVERB_RANK $REVERB_INCARNATION"
if [ "$REVERB_INCARNATION" = 0 ]; then
  if [ "$REVERB_RANK" = 2 ]; then sleep 0.3; kill -9 $$; fi
  if [ "$REVERB_RANK" = 3 ]; then exec sleep 30; fi
fi
sleep 1; echo "done $REVERB_RANK $REVERB_INCARNATION""#;
    let (o, report) = reverb_run(
        "respawn",
        &["-n", "4", "--ranks-per-node", "2", "--respawn", "1", "--", "sh", "-c", script],
        Duration::from_secs(30),
    );
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert_eq!(report["stop"], Value::Null);
    let done: BTreeSet<&str> = o.stdout.lines().filter(|l| l.contains("] done ")).collect();
    let want: BTreeSet<&str> = ["[0] done 0 0", "[1] done 1 0", "[2] done 2 1", "[3] done 3 1"].into();
    assert_eq!(done, want, "{}", o.stdout);
    let starts = |r: u32| o.stdout.lines().filter(|l| l.starts_with(&format!("[{r}] start "))).count();
    assert_eq!((starts(0), starts(1), starts(2), starts(3)), (1, 1, 2, 2), "{}", o.stdout);
    // Rank 2's SIGKILL failed node 1; both its ranks came back at incarnation 1.
    let respawns = report["respawns"].as_array().expect("respawns");
    assert_eq!(respawns.len(), 1, "{report}");
    let r = &respawns[0];
    assert_eq!(
        (&r["node"], &r["nodes"], &r["rank"], &r["signal"]),
        (&json!(1), &json!([1]), &json!(2), &json!(9))
    );
    assert_eq!((&r["ranks"], &r["incarnation"]), (&json!([2, 3]), &json!(1)));
    let at = r["at_s"].as_f64().expect("at_s");
    assert!(at > 0.2 && at < 30.0, "respawned at +{at} s");
}

#[test]
fn respawn_zero_keeps_fail_fast() {
    let script = r#"if [ "$REVERB_RANK" = 1 ]; then kill -9 $$; fi; echo "pid $$"; exec sleep 30"#;
    let (o, report) = reverb_run(
        "respawn0",
        &["-n", "2", "--respawn", "0", "--", "sh", "-c", script],
        Duration::from_secs(20),
    );
    assert_eq!(o.code, Some(128 + 9), "{}", o.stderr);
    assert_eq!(report["respawns"], json!([]), "{}", o.stderr);
    assert_eq!(report["stop"], rank_failed(1, 0, 0, None, Some(9)));
    assert!(o.took < Duration::from_secs(10));
    for p in pids(&o.stdout) {
        assert!(!alive(p), "rank pid {p} survived");
    }
}

#[test]
fn a_rank_failing_twice_exhausts_respawn_and_fails_the_job() {
    let script = r#"if [ "$REVERB_RANK" = 1 ]; then kill -9 $$; fi; echo "pid $$"; exec sleep 30"#;
    let (o, report) = reverb_run(
        "twice",
        &["-n", "2", "--ranks-per-node", "1", "--respawn", "1", "--", "sh", "-c", script],
        Duration::from_secs(20),
    );
    assert_eq!(o.code, Some(128 + 9), "{}", o.stderr);
    // One respawn of node 1 (rank 1), then its incarnation 1 dies too, with none left.
    let respawns = report["respawns"].as_array().expect("respawns");
    assert_eq!(respawns.len(), 1, "{report}");
    assert_eq!((&respawns[0]["ranks"], &respawns[0]["incarnation"]), (&json!([1]), &json!(1)));
    assert_eq!(report["stop"], rank_failed(1, 1, 1, None, Some(9)), "{}", o.stderr);
    assert_eq!(report["respawn_limit"], 1);
    assert!(o.took < Duration::from_secs(10), "took {:?}", o.took);
    for p in pids(&o.stdout) {
        assert!(!alive(p), "rank pid {p} survived");
    }
}

#[test]
fn a_nonzero_exit_fails_the_job_even_with_respawn() {
    let script = r#"if [ "$REVERB_RANK" = 1 ]; then exit 4; fi; exec sleep 30"#;
    let (o, report) = reverb_run(
        "nonzero",
        &["-n", "2", "--respawn", "3", "--", "sh", "-c", script],
        Duration::from_secs(20),
    );
    assert_eq!(o.code, Some(4), "{}", o.stderr);
    assert_eq!(report["respawns"], json!([]), "{}", o.stderr);
    assert_eq!(report["stop"], rank_failed(1, 0, 0, Some(4), None));
}

/// A respawned rank presenting a stale incarnation to the launcher's bootstrap server is
/// refused: rank 1 is killed at incarnation 0, then its incarnation 1 first tries to join
/// as incarnation 0 (refused, clearly) and then as itself.
#[test]
fn rank_entry_stale_rejoin() {
    let Ok(Some(job)) = JobInfo::from_env() else { return };
    if std::env::var_os("REVERB_STALE_TEST").is_none() {
        return;
    }
    let params = reverb_transport::bootstrap::BootParams::from_env().unwrap();
    if job.incarnation == 0 {
        let mut b = TcpBootstrap::connect_with(job.clone(), &params).expect("bootstrap");
        b.publish(format!("addr {}", job.rank).as_bytes()).unwrap();
        // After the barrier every rank's publish is in place at the server.
        b.barrier().unwrap();
        if job.rank == 1 {
            // SIGKILL to ourselves, the failure under test.
            let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
        }
        let r = b.wait_rejoin(1, Duration::from_secs(20)).expect("rank 1 rejoins");
        assert_eq!((r.rank, r.incarnation, r.address), (1, 1, b"addr 1".to_vec()));
        return;
    }
    let stale = JobInfo { incarnation: 0, ..job.clone() };
    let e = TcpBootstrap::connect_with(stale, &params).err().expect("stale incarnation admitted");
    assert!(e.to_string().contains("stale incarnation 0"), "{e}");
    println!("refused: {e}");
    let mut b = TcpBootstrap::connect_with(job.clone(), &params).expect("rejoin");
    let seen = b.lookup().unwrap();
    assert_eq!(seen[0].address.as_deref(), Some(&b"addr 0"[..]));
    b.publish(b"addr 1").unwrap();
}

#[test]
fn stale_incarnation_rejoin_is_refused_by_the_launcher_server() {
    let spec = LaunchSpec {
        ranks: 2,
        ranks_per_node: 1,
        program: std::env::current_exe().unwrap(),
        args: ["rank_entry_stale_rejoin", "--exact", "--test-threads=1", "--nocapture"]
            .map(String::from)
            .to_vec(),
        env: vec![("REVERB_BOOT_TIMEOUT_S".into(), "20".into()), ("REVERB_STALE_TEST".into(), "1".into())],
        timeout: Some(Duration::from_secs(60)),
        prefix_output: true,
    };
    let report = launch_report(&spec, &LaunchOptions { respawn: 1, ..LaunchOptions::default() }).unwrap();
    assert_eq!(report.code, 0);
    assert_eq!(report.respawns.len(), 1);
    assert_eq!((report.respawns[0].rank, report.respawns[0].incarnation), (1, 1));
}

#[test]
fn two_nodes_failing_at_once_are_both_respawned() {
    // Ranks 1 and 3 (nodes 0 and 1) die together at incarnation 0.
    let script = r#"if [ "$REVERB_INCARNATION" = 0 ]; then
  if [ "$REVERB_RANK" = 1 ] || [ "$REVERB_RANK" = 3 ]; then sleep 0.3; kill -9 $$; fi
  exec sleep 30
fi
echo "done $REVERB_RANK $REVERB_INCARNATION""#;
    let (o, report) = reverb_run(
        "twonodes",
        &["-n", "4", "--ranks-per-node", "2", "--respawn", "2", "--", "sh", "-c", script],
        Duration::from_secs(30),
    );
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    let done: BTreeSet<&str> = o.stdout.lines().filter(|l| l.contains("] done ")).collect();
    let want: BTreeSet<&str> = ["[0] done 0 1", "[1] done 1 1", "[2] done 2 1", "[3] done 3 1"].into();
    assert_eq!(done, want, "{}\n{}", o.stdout, o.stderr);
    let mut nodes: Vec<u64> =
        report["respawns"].as_array().expect("respawns").iter().filter_map(|r| r["node"].as_u64()).collect();
    nodes.sort_unstable();
    assert_eq!(nodes, vec![0, 1], "{report}");
}
