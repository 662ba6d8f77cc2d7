//! How MPI's (communicator, tag) pairs map onto the runtime's 64-bit tags: the high half is
//! the communicator's context id and flags, the low half the MPI tag. Receives match on the
//! context (so communicators never see each other's messages) and on the tag unless it is
//! `MPI_ANY_TAG`.

use std::ffi::c_int;

use reverb_transport::TagMatch;

use crate::abi::MPI_ANY_TAG;

/// Collective traffic of a communicator (its own context, apart from point-to-point).
pub const COLL: u32 = 1 << 31;
/// A synchronous send: the receiver acknowledges it when it is matched.
pub const SYNC: u32 = 1 << 30;
/// The acknowledgement of a synchronous send.
pub const ACK: u32 = 1 << 29;
/// Context ids fit below the flags.
pub const MAX_CONTEXT: u32 = ACK - 1;

pub fn tag(context: u32, flags: u32, tag: c_int) -> u64 {
    (u64::from(context | flags) << 32) | u64::from(tag as u32)
}

/// A point-to-point receive on `context` for `tag` (or any tag); a synchronous send matches.
pub fn p2p_match(context: u32, tag: c_int) -> TagMatch {
    let hi_mask = u64::from(!SYNC) << 32;
    let lo_mask = if tag == MPI_ANY_TAG { 0 } else { 0xffff_ffff };
    TagMatch { tag: self::tag(context, 0, if tag == MPI_ANY_TAG { 0 } else { tag }), mask: hi_mask | lo_mask }
}

/// The MPI tag and the flags of a runtime tag.
pub fn split(t: u64) -> (c_int, u32) {
    (t as u32 as c_int, (t >> 32) as u32 & (COLL | SYNC | ACK))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receives_match_their_context_and_tag_and_synchronous_sends() {
        let any = p2p_match(5, MPI_ANY_TAG);
        let seven = p2p_match(5, 7);
        assert!(any.matches(tag(5, 0, 3)) && any.matches(tag(5, SYNC, 9)));
        assert!(seven.matches(tag(5, 0, 7)) && seven.matches(tag(5, SYNC, 7)));
        assert!(!seven.matches(tag(5, 0, 8)) && !seven.matches(tag(6, 0, 7)));
        assert!(!any.matches(tag(5, COLL, 7)) && !any.matches(tag(5, ACK, 7)));
        assert_eq!(split(tag(5, SYNC, 7)), (7, SYNC));
    }
}
