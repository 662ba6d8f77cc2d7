//! Diagnostics: reverb's crates report through `tracing` events; a process shows them on stderr
//! once [`init_stderr`] has installed a subscriber filtered by `REVERB_LOG_LEVEL` (as
//! `UCX_LOG_LEVEL`: `error`, `warn`, `info` (the default), `debug`, `trace`, or per-module
//! directives such as `reverb_logger=debug,info`). A program that installs its own subscriber
//! gets the same events through it instead.

use thiserror::Error;
use tracing_subscriber::filter::ParseError;
use tracing_subscriber::EnvFilter;

use crate::config::{ConfigError, Env};

/// Why the diagnostics could not be set up.
#[derive(Debug, Error)]
pub enum DiagError {
    /// Reading the variable failed.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// `REVERB_LOG_LEVEL` is not a filter.
    #[error("REVERB_LOG_LEVEL={value:?} is not a level or filter (error, warn, info, debug, trace, or module=level,...)")]
    Filter {
        /// The rejected text.
        value: String,
        /// The filter parser's reason.
        #[source]
        source: ParseError,
    },
}

/// Installs a stderr subscriber with the `REVERB_LOG_LEVEL` filter, unless the process already
/// has one (then it does nothing). A filter that does not parse is [`DiagError::Filter`].
pub fn init_stderr() -> Result<(), DiagError> {
    let directives = Env::process().non_empty("REVERB_LOG_LEVEL")?.unwrap_or_else(|| "info".into());
    let filter = EnvFilter::try_new(&directives)
        .map_err(|source| DiagError::Filter { value: directives.clone(), source })?;
    // Plain lines, the message alone (each names its component: "reverb logger-core node 1:
    // ..."): no level, timestamp or colour, so ranks' interleaved stderr stays readable and the
    // launcher's "[logger N]" prefixes still start the line.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .without_time()
        .with_ansi(false)
        .with_target(false)
        .with_level(false)
        .try_init();
    Ok(())
}
