//! `reverb bench boot` end to end: real rank processes on one host (auto = shm) and on two
//! simulated hosts (tcp between them); a row per job size with the steps in order and the
//! rendezvous's traffic counted (no timing is asserted).

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_reverb");

/// Runs `reverb bench boot ARGS` (bounded); returns (success, stdout, stderr).
fn bench_boot(args: &[&str]) -> (bool, String, String) {
    let mut child = Command::new(BIN)
        .args(["bench", "boot"])
        .args(args)
        .env_remove("REVERB_PROVIDER")
        .env_remove("REVERB_HOST_NAME")
        .env_remove("RUST_BACKTRACE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting reverb");
    let (mut out, mut err) = (child.stdout.take().expect("stdout"), child.stderr.take().expect("stderr"));
    let readers = std::thread::spawn(move || {
        let (mut o, mut e) = (String::new(), String::new());
        let _ = out.read_to_string(&mut o);
        let _ = err.read_to_string(&mut e);
        (o, e)
    });
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("waiting for reverb") {
            break st;
        }
        if start.elapsed() > Duration::from_secs(180) {
            let _ = child.kill();
            panic!("reverb bench boot {args:?} still running after 180 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (stdout, stderr) = readers.join().expect("output readers");
    (status.success(), stdout, stderr)
}

fn rows(out: &str) -> Vec<Value> {
    out.lines().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).expect("a JSON row")).collect()
}

fn secs(row: &Value, key: &str) -> f64 {
    row[key].as_f64().unwrap_or_else(|| panic!("{key} missing or not a number in {row}"))
}

fn check_row(row: &Value, ranks: u64, hosts: u64) {
    assert_eq!(row["ranks"].as_u64(), Some(ranks), "{row}");
    assert_eq!(row["hosts"].as_u64(), Some(hosts), "{row}");
    let steps = ["started_s", "connected_s", "opened_s", "barrier_s"].map(|k| secs(row, k));
    assert!(steps.windows(2).all(|w| w[0] <= w[1]), "steps out of order: {row}");
    assert!(steps[3] <= secs(row, "wall_s"), "{row}");
    // The open's collectives and the first barrier, each timed.
    let collectives = row["collectives_s"].as_array().expect("collectives_s");
    assert!(collectives.len() >= 2, "{row}");
    assert!(row["rounds"].as_u64().unwrap_or(0) >= collectives.len() as u64, "{row}");
    assert!(row["server_bytes"].as_u64().unwrap_or(0) >= row["round_bytes"].as_u64().unwrap_or(0), "{row}");
    assert!(row["controller_peak_rss_kib"].as_u64().unwrap_or(0) > 1024, "{row}");
}

#[test]
fn one_host_and_two_simulated_hosts() {
    let (ok, out, err) = bench_boot(&["--ranks", "5,3", "--json"]);
    assert!(ok, "bench boot failed:\n{out}\n{err}");
    let got = rows(&out);
    assert_eq!(got.len(), 2, "{out}");
    // Smallest job first.
    check_row(&got[0], 3, 1);
    check_row(&got[1], 5, 1);
    assert_eq!(got[1]["provider"].as_str(), Some("shm"), "auto on one host opens shm: {}", got[1]);

    let (ok, out, err) = bench_boot(&["--ranks", "4", "--hosts", "2", "--json"]);
    assert!(ok, "bench boot --hosts 2 failed:\n{out}\n{err}");
    let got = rows(&out);
    assert_eq!(got.len(), 1, "{out}");
    check_row(&got[0], 4, 2);
}

#[test]
fn refuses_a_job_without_peers() {
    let (ok, _, err) = bench_boot(&["--ranks", "1"]);
    assert!(!ok);
    assert!(err.contains("--ranks") && err.contains("not in 2..="), "{err}");
}
