//! `reverb logger-core`: a node's logger core, spawned by `reverb run --logger ...` with its
//! configuration in the environment. The logic lives in `reverb_logger::core`; this entry
//! opens the loggers' bootstrap and provider and hands them to it.

use anyhow::{Context, Result};
use reverb_logger::core::{CoreError, LoggerCore, LoggerCoreConfig};
use reverb_transport::bootstrap::TcpBootstrap;
use reverb_transport::{Provider, TransportConfig};

#[derive(clap::Args, Debug)]
pub struct LoggerCoreArgs {
    /// Print what was logged at exit.
    #[arg(long)]
    pub summary: bool,
}

pub fn main(args: LoggerCoreArgs) -> Result<()> {
    let s = run_from_env().context("reverb logger-core")?;
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

/// Creates the logger core (its segment first, so ranks can attach), then joins the loggers'
/// job: the bootstrap from the launcher's environment, the provider of the job's kind.
fn run_from_env() -> Result<reverb_logger::core::LoggerSummary, CoreError> {
    let core = LoggerCore::create(LoggerCoreConfig::from_env()?)?;
    core.join_and_run(open_loggers_job)
}

fn open_loggers_job() -> Result<(TcpBootstrap, Box<dyn Provider>), CoreError> {
    let mut boot = TcpBootstrap::connect_from_env()?;
    let config = TransportConfig::from_env()?;
    let provider = reverb_transport::open(&config, &mut boot)?;
    Ok((boot, provider))
}
