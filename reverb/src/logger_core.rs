//! `reverb logger-core`: a node's logger core, spawned by `reverb run --logger ...` with its
//! configuration in the environment. The process glue is `reverb_runtime::logger_core`; this
//! command adds its flag and the summary line.

use anyhow::{Context, Result};

#[derive(clap::Args, Debug)]
pub struct LoggerCoreArgs {
    /// Print what was logged at exit.
    #[arg(long)]
    pub summary: bool,
}

pub fn main(args: LoggerCoreArgs) -> Result<()> {
    let s = reverb_runtime::logger_core::run_from_env().context("reverb logger-core")?;
    if args.summary {
        eprintln!(
            "logged {} determinants and {} payload frames ({} ring bytes) to node {}{}{}",
            s.determinants,
            s.payloads,
            s.ring_bytes_written,
            s.buddy,
            if s.buddy_rejoins > 0 {
                format!("; buddy respawned {} time(s), log re-flushed", s.buddy_rejoins)
            } else {
                String::new()
            },
            if s.buddy_dead { "; buddy dead" } else { "" }
        );
    }
    Ok(())
}
