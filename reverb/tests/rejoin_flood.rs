//! A flood of idle connections to the job's rendezvous (another local user connecting and
//! sending nothing) does not keep a respawned rank out: `reverb run --respawn 1` of the
//! stencil app, a node SIGKILLed (`REVERB_FAULT`) while 300 idle connections are held open
//! against the launcher's rendezvous, ends with the failure-free checksum.
//!
//! The ranks run under a small `sh` wrapper: rank 0 writes `REVERB_ROOT` (the rendezvous's
//! address) for the test, and every rank waits for the flood to be in place before it starts.

use std::io::ErrorKind;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_reverb");
const FLOOD: usize = 300;
const STENCIL: &[&str] = &["--iters", "60", "--size", "64", "--ckpt-every", "10"];
/// Rank 3 (node 1) dies in iteration ~35.
const FAULT: &str = "3:71";
/// Rank 0 (first incarnation) publishes the rendezvous's address; all wait for `go` (bounded).
const WRAPPER: &str = r#"
if [ "$REVERB_RANK" = 0 ] && [ "$REVERB_INCARNATION" = 0 ]; then
  echo "$REVERB_ROOT" > "$FLOOD_DIR/root.tmp" && mv "$FLOOD_DIR/root.tmp" "$FLOOD_DIR/root"
fi
i=0
while [ ! -e "$FLOOD_DIR/go" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
exec "$@"
"#;

struct Run {
    success: bool,
    checksum: Option<String>,
    output: String,
    launch: serde_json::Value,
}

fn work_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("reverb-rejoin-flood-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("work dir");
    dir
}

/// Starts the stencil job under the wrapper; `fault` kills node 1 once.
fn start(dir: &Path, fault: bool) -> std::process::Child {
    let mut cmd = Command::new(BIN);
    cmd.args(["run", "-n", "8", "--ranks-per-node", "2", "--respawn", "1", "--timeout", "180"])
        .args(["--report-json".as_ref(), dir.join("launch.json").as_os_str()])
        .args(["--", "sh", "-c", WRAPPER, "sh", BIN, "app", "stencil"])
        .args(STENCIL)
        .env("REVERB_RUNTIME_REPORT", dir)
        .env("FLOOD_DIR", dir)
        .env("REVERB_LOG", "causal")
        .env("REVERB_CKPT", "rs")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for var in ["REVERB_FAULT", "REVERB_FAULT_CKPT", "REVERB_FAULT_INIT", "REVERB_FAULT_GC", "REVERB_LOGGER"]
    {
        cmd.env_remove(var);
    }
    if fault {
        cmd.env("REVERB_FAULT", FAULT);
    }
    cmd.spawn().expect("reverb run")
}

fn finish(child: std::process::Child, dir: &Path) -> Run {
    let out = child.wait_with_output().expect("reverb run");
    let output = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let checksum = std::fs::read_to_string(dir.join("checksum")).ok().map(|s| s.trim().to_string());
    let launch = std::fs::read_to_string(dir.join("launch.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(serde_json::Value::Null);
    Run { success: out.status.success(), checksum, output, launch }
}

/// The rendezvous's address, once rank 0 wrote it (bounded).
fn root_of(dir: &Path) -> String {
    let t0 = Instant::now();
    loop {
        if let Ok(root) = std::fs::read_to_string(dir.join("root")) {
            return root.trim().to_string();
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "rank 0 never wrote REVERB_ROOT");
        thread::sleep(Duration::from_millis(20));
    }
}

/// Whether the server closed (or wrote to: a refusal) an idle connection.
fn closed_by_server(s: &TcpStream) -> bool {
    let mut b = [0u8; 1];
    if s.set_nonblocking(true).is_err() {
        return true;
    }
    !matches!(s.peek(&mut b), Err(e) if e.kind() == ErrorKind::WouldBlock)
}

/// Holds `FLOOD` idle connections to `root` until `stop`, replacing each the server drops
/// (a flood that keeps up its pressure); returns how many it replaced.
fn flood(root: String, stop: Arc<AtomicBool>, ready: crossbeam::channel::Sender<()>) -> usize {
    let connect = || TcpStream::connect(&root).expect("an idle connection");
    let mut conns: Vec<TcpStream> = (0..FLOOD).map(|_| connect()).collect();
    let _ = ready.send(());
    let mut replaced = 0;
    while !stop.load(Ordering::Relaxed) {
        thread::sleep(Duration::from_millis(100));
        let before = conns.len();
        conns.retain(|s| !closed_by_server(s));
        replaced += before - conns.len();
        while conns.len() < FLOOD {
            match TcpStream::connect(&root) {
                Ok(s) => conns.push(s),
                Err(_) => break,
            }
        }
    }
    replaced
}

/// Runs the job, with the flood when `with_flood`; how many connections the flood replaced.
fn run(name: &str, fault: bool, with_flood: bool) -> (Run, Option<usize>) {
    let dir = work_dir(name);
    let child = start(&dir, fault);
    let root = root_of(&dir);
    let stop = Arc::new(AtomicBool::new(false));
    let flooder = with_flood.then(|| {
        let (tx, rx) = crossbeam::channel::bounded(1);
        let (root, stop) = (root.clone(), stop.clone());
        let h = thread::spawn(move || flood(root, stop, tx));
        rx.recv_timeout(Duration::from_secs(60)).expect("the flood is in place");
        h
    });
    std::fs::write(dir.join("go"), b"").expect("go");
    let r = finish(child, &dir);
    stop.store(true, Ordering::Relaxed);
    let stats = flooder.map(|h| h.join().expect("flood thread"));
    let _ = std::fs::remove_dir_all(&dir);
    (r, stats)
}

#[test]
fn a_respawned_rank_rejoins_through_an_idle_connection_flood() {
    let (clean, _) = run("clean", false, false);
    assert!(clean.success, "failure-free run failed:\n{}", clean.output);
    assert!(clean.checksum.is_some(), "no checksum:\n{}", clean.output);

    let (faulty, replaced) = run("flooded", true, true);
    let replaced = replaced.expect("flood stats");
    assert!(faulty.success, "the flooded run with a node killed failed:\n{}", faulty.output);
    let respawns = faulty.launch["respawns"].as_array().map_or(0, Vec::len);
    assert_eq!(respawns, 1, "one node respawned:\n{}\n{}", faulty.launch, faulty.output);
    assert_eq!(faulty.checksum, clean.checksum, "recovered answer differs:\n{}", faulty.output);
    // The gate holds at most 256 idle connections: the flood, keeping 300 open, was over it.
    assert!(replaced >= FLOOD - 256, "the flood was not over the gate's cap ({replaced} replaced)");
    eprintln!("flood: {replaced} connection(s) dropped by the rendezvous and replaced");
}
