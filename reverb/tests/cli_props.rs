//! The `reverb` command line never panics, aborts or hangs on any argument: random subcommands
//! (only those that finish quickly: models, cluster, info, tiny benchmarks) with numbers at and
//! around their bounds, 0, u64::MAX, negatives, huge and garbage values, random files and
//! random `REVERB_*` values. Plus the inputs once reported as panics, each an exit status 2.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use proptest::prelude::*;

/// Generous under a loaded 2-core machine; every drawn run takes well under a second alone.
const RUN_BOUND: Duration = Duration::from_secs(30);

struct Outcome {
    code: Option<i32>,
    stderr: String,
    timed_out: bool,
}

fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("reverb-cli-props-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// Runs `reverb ARGS` with `env`, killed after [`RUN_BOUND`].
fn reverb(args: &[String], env: &[(String, String)]) -> Outcome {
    let err_path = scratch().join(format!("stderr-{:?}", std::thread::current().id()));
    let err = std::fs::File::create(&err_path).expect("stderr file");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_reverb"));
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(err);
    cmd.env("RUST_BACKTRACE", "0").env("REVERB_PROVIDER", "shm");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("starting reverb");
    let until = Instant::now() + RUN_BOUND;
    let (status, timed_out) = loop {
        if let Some(s) = child.try_wait().expect("waiting for reverb") {
            break (Some(s), false);
        }
        if Instant::now() >= until {
            let _ = child.kill();
            let _ = child.wait();
            break (None, true);
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    let code = status.and_then(|s| s.code());
    if let Some(s) = status {
        use std::os::unix::process::ExitStatusExt;
        assert!(s.signal().is_none(), "reverb {args:?} died of signal {:?}:\n{stderr}", s.signal());
    }
    Outcome { code, stderr, timed_out }
}

/// No panic, no abort, no hang.
fn assert_sane(args: &[String], env: &[(String, String)], out: &Outcome) {
    assert!(!out.timed_out, "reverb {args:?} {env:?} ran past {RUN_BOUND:?}");
    assert_ne!(out.code, Some(101), "reverb {args:?} {env:?} panicked:\n{}", out.stderr);
    assert!(!out.stderr.contains("panicked"), "reverb {args:?} {env:?}:\n{}", out.stderr);
    assert!(!out.stderr.contains("memory allocation"), "reverb {args:?} {env:?}:\n{}", out.stderr);
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// A number at or around `bound`, or something that is not a number in range at all.
fn value_near(bounds: &'static [u64]) -> BoxedStrategy<String> {
    let near = proptest::sample::select(bounds.to_vec())
        .prop_flat_map(|b| prop_oneof![Just(b), Just(b.saturating_sub(1)), Just(b.saturating_add(1))])
        .prop_map(|n| n.to_string());
    prop_oneof![
        4 => near,
        1 => Just("0".to_string()),
        1 => Just(u64::MAX.to_string()),
        1 => Just("-1".to_string()),
        1 => Just("99999999999999999999999999".to_string()),
        1 => Just("1e308".to_string()),
        1 => Just("nan".to_string()),
        1 => "[a-z%,x.-]{0,6}",
        1 => any::<u32>().prop_map(|n| n.to_string()),
    ]
    .boxed()
}

/// (subcommand prefix, option, bounds near which its values are drawn). Options whose valid
/// values may run long (bench `--iters`, `--sizes`) are only in the plain tests.
fn case() -> impl Strategy<Value = Vec<String>> {
    type Opt = (&'static [&'static str], &'static str, &'static [u64]);
    const OPTS: &[Opt] = &[
        (&["model", "survival"], "--nodes", &[2, 8192]),
        (&["model", "survival"], "--max-failed", &[1, 1024]),
        (&["model", "survival"], "--acquaintances", &[1, 1023, 8191]),
        (&["model", "survival"], "--geometric-p", &[0, 1]),
        (&["model", "survival"], "--zipf-s", &[0, 100]),
        (&["model", "interval", "--ckpt-time", "180s"], "--mtbf", &[0, 1, 31_536_000_000]),
        (&["model", "interval", "--ckpt-time", "180s", "--socket-mtbf", "10y"], "--sockets", &[1, 1 << 30]),
        (&["model", "perf", "--sockets", "1K"], "--mu", &[0, 1, 1000]),
        (&["model", "energy", "--sockets", "1K"], "--high-power", &[0, 1_000_000]),
        (&["model", "perf", "--sockets", "1K"], "--work", &[0, 1, 31_536_000_000]),
        (&["model", "redundancy"], "--processes", &[1, 1 << 30]),
        (&["model", "redundancy"], "--degrees", &[0, 1, 3, 16]),
        (&["model", "redundancy"], "--alpha", &[0, 1000]),
        (
            &["plan", "--ckpt-time", "60s", "--node-mtbf", "5y", "--compute-comm-ratio", "4"],
            "--nodes",
            &[1, 1 << 30],
        ),
        (
            &["plan", "--ckpt-time", "60s", "--node-mtbf", "5y", "--nodes", "64"],
            "--procs-per-node",
            &[1, 4096],
        ),
        (&["cluster"], "--ranks", &[1, 1024]),
        (&["cluster", "--ranks", "256"], "--procs-per-node", &[1, 2, 4096]),
        (&["cluster", "--ranks", "64"], "--encode-secs-per-gb", &[0, 1_000_000]),
        (&["model", "cluster"], "--stencil", &[1, 32, 1024]),
        (&["bench", "bw", "--sizes", "8", "--iters", "4"], "--window", &[1, 4096]),
        (&["bench", "bw", "--sizes", "8", "--iters", "4", "--window", "64"], "--cq-mod", &[1, 64, 4096]),
        (&["bench", "lat", "--sizes", "8", "--iters", "4"], "--cores", &[0, 1, 1023]),
        (&["bench", "lat", "--sizes", "8", "--iters", "4"], "--ranks-per-node", &[1, 2, 65536]),
        (&["bench", "lat", "--sizes", "8", "--iters", "4"], "--timeout-ms", &[1, 3_600_000]),
        (&["bench", "mem", "--sizes", "8"], "--ranks", &[0, 1, 65537]),
        (&["run", "-n", "2", "--ranks-per-node", "1"], "--respawn", &[65537]),
        (&["run", "-n", "2"], "--ranks-per-node", &[3, 65537]),
    ];
    proptest::sample::select(OPTS).prop_flat_map(|(prefix, option, bounds)| {
        let value = value_near(bounds);
        // A second value after a comma for the list options.
        (value.clone(), proptest::option::of(value)).prop_map(move |(v, second)| {
            let mut args = strs(prefix);
            let v = match (option, second) {
                ("--cores" | "--acquaintances" | "--degrees" | "--processes", Some(w)) => format!("{v},{w}"),
                ("--stencil", Some(w)) => format!("{v}x{w}"),
                _ => v,
            };
            args.extend([option.to_string(), v]);
            if args[0] == "run" {
                args.extend(strs(&["--", "true"]));
            }
            args
        })
    })
}

/// A numeric `REVERB_*` variable with a value near its bound, or garbage.
fn env_case() -> impl Strategy<Value = (String, String)> {
    const VARS: &[(&str, &[u64])] = &[
        ("REVERB_RING_SLOTS", &[2, 65536]),
        ("REVERB_RNDV_THRESH", &[64, 1 << 20]),
        ("REVERB_LOG_RING_BYTES", &[64, 1 << 36]),
        ("REVERB_PEER_TIMEOUT_MS", &[1, 3_600_000]),
        ("REVERB_SIZE", &[1, 1 << 20]),
        ("REVERB_LOGGER_CPU", &[1023]),
        ("REVERB_VERBS_TIMEOUT", &[31]),
    ];
    proptest::sample::select(VARS)
        .prop_flat_map(|(name, bounds)| value_near(bounds).prop_map(move |v| (name.to_string(), v)))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_arguments_never_panic_abort_or_hang(args in case()) {
        let out = reverb(&args, &[]);
        assert_sane(&args, &[], &out);
        // A refused value is a usage error naming what was wrong.
        if out.code == Some(2) {
            prop_assert!(!out.stderr.trim().is_empty(), "reverb {args:?}: exit 2 without a message");
        }
    }

    #[test]
    fn random_numeric_variables_are_refused_with_status_2_or_taken(var in env_case()) {
        let args = strs(&["model", "survival", "--nodes", "64"]);
        let env = [var.clone()];
        let out = reverb(&args, &env);
        assert_sane(&args, &env, &out);
        prop_assert!(matches!(out.code, Some(0) | Some(2)), "{var:?}: {:?}\n{}", out.code, out.stderr);
        if out.code == Some(2) {
            prop_assert!(out.stderr.contains(&var.0), "{var:?}: the error names it:\n{}", out.stderr);
        }
    }

    #[test]
    fn random_matrix_files_are_read_or_refused(content in prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..2048),
        "([0-9]{1,20}[ \t]{1,2}){0,9}[0-9]{0,20}(\n([0-9]{1,20} ){0,9}){0,9}".prop_map(String::into_bytes),
    ]) {
        let path = scratch().join(format!("matrix-{:?}", std::thread::current().id()));
        std::fs::write(&path, &content).expect("matrix file");
        let args = vec!["cluster".to_string(), "--procs-per-node".into(), "1".into(), "--matrix".into(), path.display().to_string()];
        let out = reverb(&args, &[]);
        assert_sane(&args, &[], &out);
    }
}

/// `reverb ARGS` exits 2 with a message containing `needle`.
fn refused(args: &[&str], needle: &str) {
    let out = reverb(&strs(args), &[]);
    assert_sane(&strs(args), &[], &out);
    assert_eq!(out.code, Some(2), "reverb {args:?}:\n{}", out.stderr);
    assert!(out.stderr.contains(needle), "reverb {args:?}: expected {needle:?} in:\n{}", out.stderr);
}

#[test]
fn the_reported_inputs_are_usage_errors() {
    refused(&["bench", "bw", "--window", "100000000"], "--window");
    refused(&["bench", "bw", "--window", "100000000"], "1..=4096");
    refused(&["cluster", "--stencil", "100000x100000"], "--stencil");
    refused(&["model", "survival", "--nodes", "4294967295"], "2..=8192");
    refused(&["cluster", "--matrix", "/dev/zero"], "not a regular file");
    refused(&["run", "-n", "2", "--ranks-per-node", "5", "--", "true"], "--ranks-per-node 5");
    refused(&["bench", "lat", "--cores", "0,0"], "two different cores");
    refused(&["bench", "lat", "--cores", "1024,1"], "0..=1023");
    refused(&["bench", "lat", "--iters", "18446744073709551615"], "--iters");
    refused(&["model", "survival", "--nodes", "64", "--max-failed", "65"], "--max-failed 65");
    refused(&["cluster", "--ranks", "1024", "--procs-per-node", "1"], "nodes");
}

#[test]
fn oversized_and_special_input_files_are_refused() {
    let dir = scratch();
    let big = dir.join("big-matrix");
    let file = std::fs::File::create(&big).expect("big file");
    // Sparse: 64 MiB + 1 without writing it.
    file.set_len((64 << 20) + 1).expect("sizing the big file");
    refused(&["cluster", "--matrix", &big.display().to_string()], "64 MiB");
    refused(&["cluster", "--matrix", &dir.display().to_string()], "not a regular file");
    refused(
        &[
            "plan",
            "--ckpt-time",
            "1m",
            "--node-mtbf",
            "5y",
            "--nodes",
            "4",
            "--compute-comm-ratio",
            "2",
            "--matrix",
            "/dev/zero",
        ],
        "--matrix",
    );
    refused(&["run", "-n", "2", "--hostfile", "/dev/zero", "--", "true"], "not a regular file");
    let _ = std::fs::remove_file(Path::new(&big));
}

#[test]
fn out_of_range_variables_are_usage_errors_naming_the_range() {
    let args = strs(&["model", "survival"]);
    for (name, value, range) in [
        ("REVERB_RING_SLOTS", "3000000", "2..=65536"),
        ("REVERB_PEER_TIMEOUT_MS", "0", "1ms..=1h"),
        ("REVERB_LOGGER_CPU", "5000", "0..=1023"),
    ] {
        let env = [(name.to_string(), value.to_string())];
        let out = reverb(&args, &env);
        assert_sane(&args, &env, &out);
        assert_eq!(out.code, Some(2), "{name}={value}:\n{}", out.stderr);
        assert!(out.stderr.contains(name) && out.stderr.contains(range), "{name}={value}:\n{}", out.stderr);
    }
}
