//! What the runtime reports to an application.

use reverb_ckpt::CkptError;
use reverb_logger::error::LogError;
use reverb_transport::config::ConfigError;
use reverb_transport::TransportError;
use thiserror::Error;

/// Why a runtime call failed.
#[derive(Debug, Error)]
pub enum RuntimeError {
    /// The transport failed (a dead peer is recovered first; this one was not).
    #[error("transport: {0}")]
    Transport(#[from] TransportError),
    /// The message-logging layer failed.
    #[error("logger: {0}")]
    Log(#[from] LogError),
    /// The checkpointer failed.
    #[error("checkpoint: {0}")]
    Ckpt(#[from] CkptError),
    /// A failure the job cannot survive; the text says what was lost.
    #[error("unrecoverable failure: {0}")]
    Unrecoverable(String),
    /// Recovery under a configuration the runtime does not support (yet).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A configuration variable with a value the runtime cannot use.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// `REVERB_LOG_LEVEL` could not be applied.
    #[error(transparent)]
    Diagnostics(#[from] reverb_transport::diag::DiagError),
    /// The application asked for something the runtime cannot do (e.g. a reserved id).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A wait outlived its bound with no failure to explain it.
    #[error("{what}: no progress after {after:?}")]
    Timeout {
        /// The wait that timed out.
        what: String,
        /// Its bound.
        after: std::time::Duration,
    },
    /// A `REVERB_FAULT*` variable is set in a build without fault injection.
    #[error("{var} is set, but this build has no fault injection; build with --features fault-injection")]
    NoFaultInjection {
        /// The variable that is set.
        var: &'static str,
    },
}

impl RuntimeError {
    /// The peer whose death caused this error, if one did.
    pub fn dead_peer(&self) -> Option<u32> {
        match self {
            RuntimeError::Transport(TransportError::PeerDead(rank))
            | RuntimeError::Log(LogError::Transport(TransportError::PeerDead(rank)))
            | RuntimeError::Ckpt(CkptError::PeerDead { rank, .. }) => Some(*rank),
            _ => None,
        }
    }

    /// A peer dying inside a recovery's collectives (after the failed ranks rejoined) is a
    /// second failure the runtime does not survive: reported as such, not as a bare error.
    pub(crate) fn during_recovery(self) -> RuntimeError {
        match self.dead_peer() {
            Some(rank) => RuntimeError::Unrecoverable(format!(
                "rank {rank} failed while a recovery was under way (a second failure): {self}"
            )),
            None => self,
        }
    }

    /// [`Self::during_recovery`] when `recovering` (e.g. a restarted rank's init).
    pub(crate) fn during_recovery_if(self, recovering: bool) -> RuntimeError {
        if recovering {
            self.during_recovery()
        } else {
            self
        }
    }
}

/// The runtime's result type.
pub type Result<T> = std::result::Result<T, RuntimeError>;
