//! What the runtime's end-to-end tests share: one `reverb run --respawn` job of `reverb app`
//! (8 ranks in 4 nodes of 2) with its output, checksum and rank-report directory.

use std::path::PathBuf;
use std::process::Command;

pub struct Outcome {
    pub success: bool,
    pub checksum: Option<String>,
    pub output: String,
    pub dir: PathBuf,
}

/// Runs `app` under `reverb run`; the `REVERB_*` settings a test does not pass are cleared so
/// the caller's environment cannot leak in. `suite` names the work directory.
pub fn job(
    suite: &str,
    name: &str,
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
    cmd.args(["run", "-n", "8", "--ranks-per-node", "2", "--respawn", &respawn.to_string()])
        .args(["--timeout", "180", "--", exe, "app", app])
        .args(app_args)
        .env("REVERB_RUNTIME_REPORT", &dir);
    for var in [
        "REVERB_FAULT",
        "REVERB_FAULT_CKPT",
        "REVERB_FAULT_INIT",
        "REVERB_FAULT_GC",
        "REVERB_LOG",
        "REVERB_LOG_UNIT",
        "REVERB_LOG_TEAMS",
        "REVERB_LOG_DURABLE_TIMEOUT_MS",
        "REVERB_LOGGER",
        "REVERB_CKPT",
    ] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("reverb run");
    let output = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let checksum = std::fs::read_to_string(dir.join("checksum")).ok().map(|s| s.trim().to_string());
    Outcome { success: out.status.success(), checksum, output, dir }
}
