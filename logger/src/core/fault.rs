//! Test-only fault hooks of the logger core. They exist only with the `fault-injection`
//! feature; without it, a set `REVERB_LOGGER_FAULT_*` variable is refused rather than ignored,
//! so a test cannot silently run without the fault it asked for.

use reverb_transport::Rank;

use super::CoreError;

/// Prefix of every logger fault variable (`vars::FAULT_STARTUP`, ...).
const FAULT_PREFIX: &str = "REVERB_LOGGER_FAULT_";

/// Errs when a logger fault variable is set in a build without fault injection.
pub(super) fn refuse_unless_built_in() -> Result<(), CoreError> {
    if cfg!(feature = "fault-injection") {
        return Ok(());
    }
    match std::env::vars_os().find(|(k, _)| k.to_string_lossy().starts_with(FAULT_PREFIX)) {
        Some((k, _)) => Err(CoreError::Config(format!(
            "{} is set, but this build has no fault injection (build with the `fault-injection` feature)",
            k.to_string_lossy()
        ))),
        None => Ok(()),
    }
}

/// `REVERB_LOGGER_FAULT_STARTUP=NODE`: that node's first incarnation SIGKILLs itself in the
/// loggers' start-up exchange, once its ranks have attached.
#[cfg(feature = "fault-injection")]
pub(super) fn startup_exchange(
    segment: &super::segment::NodeSegment,
    me: Rank,
    incarnation: u32,
    bound: std::time::Duration,
) -> Result<(), CoreError> {
    if super::env_parse::<u32>(super::vars::FAULT_STARTUP)? == Some(me) && incarnation == 0 {
        die_once_ranks_attached(segment, bound);
    }
    Ok(())
}

/// Without the feature, `refuse_unless_built_in` has already refused a set variable.
#[cfg(not(feature = "fault-injection"))]
pub(super) fn startup_exchange(
    _segment: &super::segment::NodeSegment,
    _me: Rank,
    _incarnation: u32,
    _bound: std::time::Duration,
) -> Result<(), CoreError> {
    refuse_unless_built_in()
}

/// Waits (bounded) until every lane of this node has a producer, then SIGKILLs this process.
#[cfg(feature = "fault-injection")]
fn die_once_ranks_attached(segment: &super::segment::NodeSegment, bound: std::time::Duration) -> ! {
    let start = std::time::Instant::now();
    while (0..segment.lanes()).any(|lane| !segment.lane_claimed(lane)) && start.elapsed() < bound {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    tracing::info!(
        "reverb logger-core: fault injection: SIGKILL to this logger core in its start-up exchange"
    );
    // SIGKILL to our own pid: the failure being injected.
    let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    std::thread::sleep(std::time::Duration::from_secs(60));
    std::process::abort();
}
