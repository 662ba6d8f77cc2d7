//! What the runtime reports to an application.

use std::fmt;

use reverb_ckpt::CkptError;
use reverb_logger::error::LogError;
use reverb_transport::TransportError;

#[derive(Debug)]
pub enum RuntimeError {
    Transport(TransportError),
    Log(LogError),
    Ckpt(CkptError),
    /// A failure the job cannot survive; the text says what was lost.
    Unrecoverable(String),
    /// Recovery under a configuration the runtime does not support (yet).
    Unsupported(String),
    InvalidArgument(String),
    /// A wait outlived its bound with no failure to explain it.
    Timeout {
        what: String,
        after: std::time::Duration,
    },
}

impl fmt::Display for RuntimeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RuntimeError::Transport(e) => write!(f, "transport: {e}"),
            RuntimeError::Log(e) => write!(f, "logger: {e}"),
            RuntimeError::Ckpt(e) => write!(f, "checkpoint: {e}"),
            RuntimeError::Unrecoverable(what) => write!(f, "unrecoverable failure: {what}"),
            RuntimeError::Unsupported(what) => write!(f, "unsupported: {what}"),
            RuntimeError::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
            RuntimeError::Timeout { what, after } => write!(f, "{what}: no progress after {after:?}"),
        }
    }
}

impl std::error::Error for RuntimeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RuntimeError::Transport(e) => Some(e),
            RuntimeError::Log(e) => Some(e),
            RuntimeError::Ckpt(e) => Some(e),
            _ => None,
        }
    }
}

impl From<TransportError> for RuntimeError {
    fn from(e: TransportError) -> Self {
        RuntimeError::Transport(e)
    }
}

impl From<LogError> for RuntimeError {
    fn from(e: LogError) -> Self {
        RuntimeError::Log(e)
    }
}

impl From<CkptError> for RuntimeError {
    fn from(e: CkptError) -> Self {
        RuntimeError::Ckpt(e)
    }
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

pub type Result<T> = std::result::Result<T, RuntimeError>;
