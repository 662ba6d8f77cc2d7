//! A node's logger core as a process: what `reverb logger-core` (spawned by `reverb run
//! --logger ...`, its configuration in the environment) runs. The logic lives in
//! `reverb_logger::core`; this glue opens the loggers' bootstrap and provider and hands them to
//! it, so any launcher's logger process can be a few lines on this library.

use reverb_logger::core::{CoreError, LoggerCore, LoggerCoreConfig, LoggerSummary};
use reverb_transport::bootstrap::{vars, TcpBootstrap};
use reverb_transport::config::Env;
use reverb_transport::{Provider, TransportConfig};

/// Creates the logger core (its segment first, so ranks can attach), then joins the loggers'
/// job: the bootstrap from the launcher's environment, the provider of the job's kind. Returns
/// what was logged once the node's ranks are done.
pub fn run_from_env() -> Result<LoggerSummary, CoreError> {
    // The launcher's placement, from the bootstrap's registered variables: the node's ranks
    // (one payload lane each, unless REVERB_LOGGER_LANES says otherwise).
    let node_ranks = Env::process().int::<u64>(vars::RANKS_PER_NODE)?.unwrap_or(1);
    let core = LoggerCore::create(LoggerCoreConfig::from_env(node_ranks)?)?;
    core.join_and_run(open_loggers_job)
}

fn open_loggers_job() -> Result<(TcpBootstrap, Box<dyn Provider>), CoreError> {
    let mut boot = TcpBootstrap::connect_from_env()?;
    let config = TransportConfig::from_env()?;
    let provider = reverb_transport::open(&config, &mut boot)?;
    Ok((boot, provider))
}
