//! What the runtime's end-to-end tests share: one `reverb run --respawn` job of `reverb app`
//! (8 ranks in 4 nodes of 2) with its output, checksum, launch report and rank-report
//! directory.

use std::path::PathBuf;
use std::process::Command;

pub struct Outcome {
    pub success: bool,
    pub checksum: Option<String>,
    pub output: String,
    /// `reverb run --report-json`: the exit code, why the job stopped, the respawns.
    pub launch: serde_json::Value,
    #[allow(dead_code)] // not every suite reads the rank reports
    pub dir: PathBuf,
}

impl Outcome {
    /// The nodes respawned, in order (with teams, every node of each respawned team).
    pub fn respawned_nodes(&self) -> Vec<Vec<u64>> {
        let respawns = self.launch["respawns"].as_array().cloned().unwrap_or_default();
        respawns
            .iter()
            .map(|r| r["nodes"].as_array().into_iter().flatten().filter_map(|n| n.as_u64()).collect())
            .collect()
    }

    /// Asserts that the job stopped on a rank's own verdict (a non-zero exit, as an error
    /// reported by the runtime ends it), not on a signal, a timeout or the launcher.
    #[allow(dead_code)] // not every suite has a failing case
    pub fn assert_failed_by_a_rank(&self) {
        let stop = &self.launch["stop"];
        assert_eq!(stop["kind"], "rank_failed", "{}\n{}", self.launch, self.output);
        assert!(stop["exit_code"].as_i64().is_some_and(|c| c != 0), "{}\n{}", self.launch, self.output);
    }
}

/// Runs `app` under `reverb run`; the `REVERB_*` settings a test does not pass are cleared so
/// the caller's environment cannot leak in. `suite` names the work directory.
#[allow(dead_code)] // a suite of its own shapes calls job_with only
pub fn job(
    suite: &str,
    name: &str,
    app: &str,
    app_args: &[&str],
    env: &[(&str, &str)],
    respawn: u32,
) -> Outcome {
    job_with(suite, name, &["-n", "8", "--ranks-per-node", "2"], app, app_args, env, respawn)
}

/// As [`job`], with `shape` giving the job's ranks and their placement (`-n 8 --objects 4`).
pub fn job_with(
    suite: &str,
    name: &str,
    shape: &[&str],
    app: &str,
    app_args: &[&str],
    env: &[(&str, &str)],
    respawn: u32,
) -> Outcome {
    let dir = std::env::temp_dir().join(format!("reverb-{suite}-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("work dir");
    let exe = env!("CARGO_BIN_EXE_reverb");
    let mut cmd = Command::new(exe);
    cmd.arg("run")
        .args(shape)
        .args(["--respawn", &respawn.to_string()])
        .args(["--report-json".as_ref(), dir.join("launch.json").as_os_str()])
        .args(["--timeout", "180", "--", exe, "app", app])
        .args(app_args)
        .env("REVERB_RUNTIME_REPORT", &dir);
    // The caller's fault hooks and logging setup would change what the job does.
    for var in reverb_runtime::fault::FAULT_VARS.into_iter().chain([
        "REVERB_LOG",
        "REVERB_LOG_UNIT",
        "REVERB_LOG_TEAMS",
        "REVERB_LOG_DURABLE_TIMEOUT_MS",
        "REVERB_LOGGER",
        "REVERB_CKPT",
    ]) {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("reverb run");
    let output = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let checksum = std::fs::read_to_string(dir.join("checksum")).ok().map(|s| s.trim().to_string());
    // A launch that could not start (bad settings refused by the launcher) writes no report.
    let launch = std::fs::read_to_string(dir.join("launch.json"))
        .map(|text| serde_json::from_str(&text).expect("the launch report is JSON"))
        .unwrap_or(serde_json::Value::Null);
    Outcome { success: out.status.success(), checksum, output, launch, dir }
}
