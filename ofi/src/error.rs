//! The provider's errors, and the negative errno each one is to its C caller.

use std::ffi::c_int;

use reverb_transport::error::TransportError;

use crate::abi::*;

pub type Result<T, E = OfiError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum OfiError {
    /// The transport refused (a dead peer, a malformed address, a bad setting).
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// An fi_addr no AV entry names.
    #[error("fi_addr {0} names no address vector entry")]
    UnknownAddress(u64),
    /// The endpoint lacks an object the call needs.
    #[error("the endpoint has no {0} bound")]
    NotBound(&'static str),
    /// A tag using the two bits the provider keeps for itself.
    #[error("tag {0:#x} uses bits outside mem_tag_format")]
    TagBits(u64),
    /// An operation longer than `max_msg_size`.
    #[error("{0} bytes exceed max_msg_size")]
    TooLong(usize),
    /// A null or foreign object, a null argument, a bad attribute.
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
}

impl OfiError {
    /// The errno (positive) a C caller gets, negated, for this error.
    pub fn errno(&self) -> c_int {
        match self {
            OfiError::Transport(TransportError::PeerDead(_)) => FI_EHOSTUNREACH,
            OfiError::Transport(TransportError::Malformed { .. } | TransportError::Decode { .. }) => {
                FI_EINVAL
            }
            OfiError::Transport(TransportError::Unsupported(_)) => FI_ENOSYS,
            OfiError::Transport(_) => FI_EIO,
            OfiError::UnknownAddress(_) | OfiError::TagBits(_) | OfiError::Invalid(_) => FI_EINVAL,
            OfiError::NotBound(_) => FI_EINVAL,
            OfiError::TooLong(_) => FI_EMSGSIZE,
        }
    }
}

/// 0, or the negative errno of `result`'s error.
pub fn to_c(result: Result<()>) -> c_int {
    match result {
        Ok(()) => 0,
        Err(e) => -e.errno(),
    }
}
