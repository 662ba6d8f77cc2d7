//! Collective-aware logging of reductions (seed 000 ch. 6, Algs 18-21; `REVERB_LOG_CAML=1`).
//!
//! A contribution is one tree send of a reduction: a rank's partial result to its parent. The
//! paper keeps it for good (msgLog) when it goes to the reduction's root and only until the
//! reduction commits (tmpMsgLog) otherwise. Here a contribution to a parent that is not the
//! root and does not fail with it loses its payload once the sender holds the reduction's
//! result ([`crate::sendlog::SendLog::drop_payload`]): the root then had every partial, so no
//! parent can need it again except to replay a reduction that already completed.
//!
//! The log entry stays, as a tombstone: same ssn and tag, payload [`tombstone`]. A survivor
//! resends it like any entry, so a restarted rank's channels stay whole. A restarted rank
//! that replays a completed reduction and receives a tombstone passes one on to its parent
//! (a survivor drops it as a duplicate) and takes the result from the broadcast that
//! follows. Only a restarted root can need a tombstone's value: it then stops as
//! unrecoverable ([`Contribution::Dropped`] at the root), never with a wrong sum.
//!
//! Under CAML every contribution's payload starts with a kind byte: [`VALUE`] and the bytes,
//! or [`TOMBSTONE`] alone.

use crate::error::{LogError, Result};

/// Kind byte of a contribution that carries its bytes.
pub const VALUE: u8 = 0;
/// Kind byte of a contribution whose bytes were dropped after its reduction completed.
pub const TOMBSTONE: u8 = 1;

/// A contribution as received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contribution<'a> {
    Value(&'a [u8]),
    /// Dropped after its reduction completed: only a replay of that reduction receives it.
    Dropped,
}

/// The payload of a contribution carrying `bytes`.
pub fn value(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() + 1);
    out.push(VALUE);
    out.extend_from_slice(bytes);
    out
}

/// The payload a dropped contribution is resent as.
pub fn tombstone() -> Vec<u8> {
    vec![TOMBSTONE]
}

/// Reads a contribution from untrusted `payload`.
pub fn parse(payload: &[u8]) -> Result<Contribution<'_>> {
    match payload.split_first() {
        Some((&VALUE, bytes)) => Ok(Contribution::Value(bytes)),
        Some((&TOMBSTONE, [])) => Ok(Contribution::Dropped),
        Some((&TOMBSTONE, rest)) => Err(LogError::malformed(
            "reduction contribution",
            format!("a tombstone with {} bytes after it", rest.len()),
        )),
        Some((kind, _)) => Err(LogError::malformed("reduction contribution", format!("unknown kind {kind}"))),
        None => Err(LogError::malformed("reduction contribution", "empty (no kind byte)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_tombstones_round_trip() {
        assert_eq!(parse(&value(b"abc")).unwrap(), Contribution::Value(b"abc"));
        assert_eq!(parse(&value(b"")).unwrap(), Contribution::Value(b""));
        assert_eq!(parse(&tombstone()).unwrap(), Contribution::Dropped);
    }

    #[test]
    fn malformed_contributions_are_errors() {
        for bad in [&[][..], &[2, 0][..], &[TOMBSTONE, 9][..]] {
            assert!(matches!(parse(bad), Err(LogError::Malformed { .. })), "{bad:?}");
        }
    }
}
