//! Test hook (`fault-injection` builds only): `REVERB_FAULT_AGENT=HOST@MS,...` makes the agent
//! on HOST SIGKILL itself alone MS milliseconds after it starts. Its ranks die with it (their
//! parent-death signal), its control connection drops: the controller must see a lost host.

use std::time::Duration;

use anyhow::{Context, Result};
use reverb_transport::config::env_get;

/// Arms the hook for this agent's host, if the variable names it.
pub(super) fn arm(me: &str) -> Result<()> {
    let Some(spec) = env_get("REVERB_FAULT_AGENT")?.filter(|v| !v.is_empty()) else { return Ok(()) };
    for item in spec.split(',') {
        let (host, ms) = item
            .split_once('@')
            .with_context(|| format!("REVERB_FAULT_AGENT: '{item}': expected HOST@MS"))?;
        let ms: u64 = ms.parse().with_context(|| format!("REVERB_FAULT_AGENT: '{item}': milliseconds"))?;
        if host == me {
            let host = host.to_string();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(ms));
                eprintln!("reverb agent: REVERB_FAULT_AGENT: the agent of host {host} SIGKILLs itself");
                let _ =
                    rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
            });
        }
    }
    Ok(())
}
