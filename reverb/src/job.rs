//! Running one `reverb run` job of a `reverb app` and collecting what it left behind (its
//! log, the rank reports of `REVERB_RUNTIME_REPORT`, the checksum, the victim's `kill.ns`).
//! Shared by `reverb demo` and `reverb chaos`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde_json::Value;

/// One job: `reverb run -n RANKS --ranks-per-node RPN --respawn R --timeout T -- reverb app ...`.
#[derive(Debug, Clone)]
pub struct JobSpec {
    pub provider: String,
    pub ranks: u32,
    pub ranks_per_node: u32,
    pub respawn: u32,
    /// The launcher's own bound on the job, in seconds.
    pub timeout_s: u64,
    pub app: String,
    pub app_args: Vec<String>,
    /// Extra environment (`REVERB_LOG`, `REVERB_FAULT`, ...); `REVERB_FAULT*` are cleared first.
    pub env: Vec<(String, String)>,
    /// `reverb run --hosts` (`a:2,b:2`): the ranks on those hosts, started there over
    /// `REVERB_RSH`; None: all here.
    pub hosts: Option<String>,
    /// `reverb run --spares` (with `hosts`): idle hosts that take over a lost host's ranks.
    pub spares: Vec<String>,
    /// `reverb run --redundancy R`: `ranks` are then the virtual ranks.
    pub redundancy: Option<String>,
    /// `reverb run --objects V --parallel-recovery P`: processes of V ranks (nodes of V).
    pub objects: Option<(u32, u32)>,
}

/// What a job left behind.
#[derive(Debug)]
pub struct JobOutcome {
    /// `None`: the launcher itself outlived the watchdog and was stopped.
    pub status: Option<ExitStatus>,
    pub dir: PathBuf,
    pub log_path: PathBuf,
    pub checksum: Option<String>,
    pub reports: Vec<Value>,
    pub kill_ns: Option<u64>,
    pub wall: Duration,
}

impl JobOutcome {
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// The job's log (launcher and ranks), empty if unreadable.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// The last `n` lines of the log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = self.log();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

/// A number field of a rank report (0 when absent).
pub fn num(v: &Value, key: &str) -> f64 {
    v.get(key).and_then(Value::as_f64).unwrap_or(0.0)
}

/// Stops a launcher that outlived its watchdog: SIGTERM first (it then SIGKILLs every rank and
/// logger it started), SIGKILL if it is still there 10 s later.
fn stop_launcher(child: &mut std::process::Child) {
    // Best effort throughout: the launcher may have exited meanwhile.
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Runs `spec` with its reports and log in `out` (created). The launcher gets
/// `spec.timeout_s`; if it is still running `watchdog` after that, it is stopped (with its
/// ranks) and the outcome has no status. A Ctrl-C reaches the launcher too, which stops its ranks.
pub fn run_job(spec: &JobSpec, out: &Path, watchdog: Duration) -> Result<JobOutcome> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let exe = std::env::current_exe().context("locating the reverb binary")?;
    let log_path = out.join("job.log");
    let log = std::fs::File::create(&log_path).with_context(|| format!("creating {}", log_path.display()))?;
    let mut cmd = Command::new(&exe);
    cmd.arg("run")
        .args(["-n", &spec.ranks.to_string(), "--ranks-per-node", &spec.ranks_per_node.to_string()])
        .args(["--respawn", &spec.respawn.to_string(), "--timeout", &spec.timeout_s.to_string()])
        .args(spec.hosts.iter().flat_map(|h| ["--hosts", h.as_str()]))
        .args(if spec.spares.is_empty() {
            Vec::new()
        } else {
            vec!["--spares".to_string(), spec.spares.join(",")]
        })
        .args(spec.redundancy.iter().flat_map(|r| ["--redundancy", r.as_str()]))
        .args(spec.objects.iter().flat_map(|(v, p)| {
            ["--objects".to_string(), v.to_string(), "--parallel-recovery".to_string(), p.to_string()]
        }))
        .arg("--")
        .arg(&exe)
        .args(["app", &spec.app])
        .args(&spec.app_args)
        .env("REVERB_PROVIDER", &spec.provider)
        .env("REVERB_RUNTIME_REPORT", out)
        .stdin(Stdio::null())
        .stdout(log.try_clone().context("job log")?)
        .stderr(log);
    // The campaign's own faults only: none inherited from the caller.
    for var in reverb_runtime::fault::FAULT_VARS
        .into_iter()
        .chain(["REVERB_FAULT_AGENT", "REVERB_LOGGER_FAULT_STARTUP"])
    {
        cmd.env_remove(var);
    }
    for (k, v) in &spec.env {
        cmd.env(k, v);
    }
    let started = Instant::now();
    let mut child = cmd.spawn().context("starting reverb run")?;
    let deadline = started + Duration::from_secs(spec.timeout_s) + watchdog;
    let status = loop {
        if let Some(s) = child.try_wait().context("waiting for reverb run")? {
            break Some(s);
        }
        if Instant::now() >= deadline {
            stop_launcher(&mut child);
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let wall = started.elapsed();
    let checksum = std::fs::read_to_string(out.join("checksum")).ok().map(|s| s.trim().to_string());
    let mut reports = Vec::new();
    for entry in std::fs::read_dir(out).with_context(|| format!("reading {}", out.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "json") {
            let text =
                std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
            reports.push(serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?);
        }
    }
    let kill_ns = std::fs::read_to_string(out.join("kill.ns")).ok().and_then(|s| s.trim().parse().ok());
    Ok(JobOutcome { status, dir: out.to_path_buf(), log_path, checksum, reports, kill_ns, wall })
}
