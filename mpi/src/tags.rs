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
/// The first piece of a message larger than the runtime's largest: its payload starts with
/// the whole message's length.
pub const BIG: u32 = 1 << 28;
/// A later piece of such a message (matched only by the receive that took the first).
pub const MORE: u32 = 1 << 27;
/// Context ids fit below the flags.
pub const MAX_CONTEXT: u32 = MORE - 1;
/// The top context ids, kept for agreements without a parent communicator
/// (MPI_Intercomm_create_from_groups): communicators get those below.
pub const AGREEMENT_CONTEXTS: u32 = 1 << 16;

pub fn tag(context: u32, flags: u32, tag: c_int) -> u64 {
    (u64::from(context | flags) << 32) | u64::from(tag as u32)
}

/// A point-to-point receive on `context` for `tag` (or any tag); a synchronous send, and the
/// first piece of a large message, match.
pub fn p2p_match(context: u32, tag: c_int) -> TagMatch {
    let hi_mask = u64::from(!(SYNC | BIG)) << 32;
    let lo_mask = if tag == MPI_ANY_TAG { 0 } else { 0xffff_ffff };
    TagMatch { tag: self::tag(context, 0, if tag == MPI_ANY_TAG { 0 } else { tag }), mask: hi_mask | lo_mask }
}

/// The MPI tag and the flags of a runtime tag.
pub fn split(t: u64) -> (c_int, u32) {
    (t as u32 as c_int, (t >> 32) as u32 & (COLL | SYNC | ACK | BIG | MORE))
}

/// A collective tag's low half: the collective's sequence number (`icoll`; 0 for a blocking
/// one) above this many bits of sub-tag (a neighbourhood collective's direction).
pub const SEQ_SHIFT: u32 = 12;
/// Sequence numbers are below this.
pub const SEQ_LIMIT: u32 = 1 << (32 - SEQ_SHIFT);

/// The tag of collective `seq`'s messages on `context` (sub-tag `sub`).
pub fn coll(context: u32, seq: u32, sub: u32) -> u64 {
    let low = (seq << SEQ_SHIFT) | (sub & ((1 << SEQ_SHIFT) - 1));
    tag(context, COLL, low as c_int)
}

/// A collective receive on `context` for collective `seq` (sub-tag `sub`): exactly its tag,
/// or the first piece of a large one.
pub fn coll_match(context: u32, seq: u32, sub: u32) -> TagMatch {
    TagMatch { tag: coll(context, seq, sub), mask: !(u64::from(BIG) << 32) }
}

/// The tag of a large message's later pieces: its own, with MORE for SYNC and BIG.
pub fn continuation(t: u64) -> u64 {
    let flags = ((t >> 32) as u32) & !(SYNC | BIG);
    (u64::from(flags | MORE) << 32) | (t & 0xffff_ffff)
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
        assert!(seven.matches(tag(5, BIG | SYNC, 7)) && !seven.matches(tag(5, MORE, 7)));
        assert_eq!(continuation(tag(5, BIG | SYNC, 7)), tag(5, MORE, 7));
        let blocking = coll_match(5, 0, 0);
        assert!(blocking.matches(tag(5, COLL, 0)) && blocking.matches(tag(5, COLL | BIG, 0)));
        assert!(!blocking.matches(tag(5, COLL | MORE, 0)) && !blocking.matches(tag(5, 0, 0)));
        let third = coll_match(5, 3, 2);
        assert!(
            third.matches(coll(5, 3, 2)) && !third.matches(coll(5, 2, 2)) && !third.matches(coll(5, 3, 1))
        );
        assert!(!blocking.matches(coll(5, 1, 0)) && !blocking.matches(coll(6, 0, 0)));
    }
}
