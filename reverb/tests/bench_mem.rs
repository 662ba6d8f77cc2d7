//! `reverb bench mem` end to end on shm: real rank processes, an all-to-all, and a report per
//! job size and phase with plausible memory for every rank (no timing is asserted).

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_reverb");

/// Runs `reverb bench mem ARGS` on shm (bounded); returns (success, stdout, stderr).
fn bench_mem(args: &[&str]) -> (bool, String, String) {
    bench_mem_env(args, &[])
}

fn bench_mem_env(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut child = Command::new(BIN)
        .args(["bench", "mem"])
        .args(args)
        .env("REVERB_PROVIDER", "shm")
        .env_remove("REVERB_BENCH_MEM_MUTE")
        .envs(env.iter().copied())
        .env_remove("RUST_BACKTRACE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting reverb");
    let (mut out, mut err) = (child.stdout.take().expect("stdout"), child.stderr.take().expect("stderr"));
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let mut stdout = String::new();
    let _ = out.read_to_string(&mut stdout);
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("waiting for reverb") {
            break st;
        }
        if start.elapsed() > Duration::from_secs(180) {
            let _ = child.kill();
            panic!("reverb bench mem {args:?} still running after 180 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status.success(), stdout, reader.join().expect("stderr reader"))
}

fn num(row: &Value, key: &str) -> u64 {
    row[key].as_u64().unwrap_or_else(|| panic!("{key} missing or not a number in {row}"))
}

#[test]
fn every_rank_reports_memory_at_every_phase() {
    let (ok, out, err) = bench_mem(&["--ranks", "3,5", "--sizes", "8,8k", "--json"]);
    assert!(ok, "bench mem failed:\n{out}\n{err}");
    let rows: Vec<Value> =
        out.lines().map(|l| serde_json::from_str(l).expect("one JSON object per line")).collect();
    assert_eq!(rows.len(), 8, "two jobs of four phases each:\n{out}");
    for (i, row) in rows.iter().enumerate() {
        let n = if i < 4 { 3 } else { 5 };
        let phase = ["start", "opened", "after", "after"][i % 4];
        assert_eq!(num(row, "ranks"), n, "{row}");
        assert_eq!(row["phase"], phase, "{row}");
        assert_eq!(row["provider"], "shm", "{row}");
        // Every rank wrote its report, and each one's numbers are real.
        assert_eq!(num(row, "reported"), n, "{row}");
        assert!(num(row, "rss_kib_min") > 0 && num(row, "pss_kib_min") > 0, "{row}");
        assert!(num(row, "pte_kib_min") > 0, "{row}");
        assert!(num(row, "pss_kib_max") <= num(row, "rss_kib_max"), "{row}");
        assert!(num(row, "node_pss_kib") >= n * num(row, "pss_kib_min"), "{row}");
        if phase == "start" {
            assert_eq!(num(row, "peer_maps_max"), 0, "nothing mapped before the provider opens: {row}");
            continue;
        }
        // The provider has its control segment and every peer's mapped.
        assert_eq!(num(row, "peer_maps_min"), n - 1, "{row}");
        assert!(num(row, "own_shm_size_kib_min") > 0 && num(row, "own_shm_rss_kib_min") > 0, "{row}");
        assert!(num(row, "peer_shm_size_kib_min") >= (n - 1) * num(row, "own_shm_size_kib_min"), "{row}");
        if phase == "after" {
            assert!(num(row, "peer_shm_rss_kib_min") > 0, "sending touched the peers' segments: {row}");
        }
    }
    // The second pass moved more bytes into the same rings: they hold more.
    for job in [&rows[..4], &rows[4..]] {
        assert_eq!(num(&job[2], "bytes"), 8);
        assert_eq!(num(&job[3], "bytes"), 8192);
        assert!(num(&job[3], "own_shm_rss_kib_median") > num(&job[2], "own_shm_rss_kib_median"), "{job:?}");
    }
}

#[test]
fn csv_and_plot() {
    let plot = std::env::temp_dir().join(format!("reverb-bench-mem-test-{}.svg", std::process::id()));
    let plot_arg = plot.display().to_string();
    let (ok, out, err) = bench_mem(&["--ranks", "3,4", "--csv", "--plot", &plot_arg]);
    assert!(ok, "bench mem failed:\n{out}\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1 + 2 * 3, "a header and three phases per job:\n{out}");
    let columns = lines[0].split(',').count();
    assert!(lines[0].starts_with("provider,ranks,peers,"), "{}", lines[0]);
    assert!(lines.iter().all(|l| l.split(',').count() == columns), "{out}");
    let svg = std::fs::read_to_string(&plot).expect("the plot was written");
    let _ = std::fs::remove_file(&plot);
    assert!(svg.contains("<svg") && svg.contains("node: sum of PSS"), "{svg}");
}

#[test]
fn refuses_a_job_without_peers() {
    let (ok, _, err) = bench_mem(&["--ranks", "1"]);
    assert!(!ok);
    assert!(err.contains("--ranks") && err.contains("not in 2..="), "{err}");
}

#[test]
fn a_rank_that_never_sends_fails_the_bench_within_its_bounds() {
    let start = Instant::now();
    let (ok, out, err) =
        bench_mem_env(&["--ranks", "4", "--timeout-ms", "1000"], &[("REVERB_BENCH_MEM_MUTE", "2")]);
    assert!(!ok, "the bench passed without rank 2's messages:\n{out}\n{err}");
    assert!(err.contains("no completion within"), "the waiting ranks say why:\n{err}");
    assert!(err.contains("the job of 4 ranks"), "the driver names the job:\n{err}");
    // Bounded by the 1 s stall, not by the 900 s job timeout or the 60 s bootstrap.
    assert!(start.elapsed() < Duration::from_secs(30), "took {:?}", start.elapsed());
}
