//! The bytes each rank contributes to the two all-gathers of a recovery (little-endian):
//!
//! - round A, 19 bytes: `restarted u8 | committed epoch u64 | committed slot u8 |
//!   next epoch u64 | log cut seen u8` (flags: 1 = yes);
//! - round B: `0 u8 | size × ssn u64` (per peer: held through, or seen from a restarted
//!   rank), or `1 u8 | what was lost, UTF-8`.

use reverb_ckpt::Epoch;
use reverb_transport::codec::{CodecError, Reader, Writer};
use reverb_transport::Rank;

const ROUND_A_LEN: usize = 19;

/// One rank's round A contribution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RoundAEntry {
    pub(super) restarted: bool,
    /// The committed (epoch, slot); epoch 0: none.
    pub(super) committed: (Epoch, u8),
    pub(super) next_epoch: Epoch,
    pub(super) cut: bool,
}

impl RoundAEntry {
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(ROUND_A_LEN);
        let mut w = Writer::new(&mut out);
        w.u8(u8::from(self.restarted)).u64(self.committed.0).u8(self.committed.1);
        w.u64(self.next_epoch).u8(u8::from(self.cut));
        out
    }

    /// Decodes another rank's contribution (untrusted bytes): exactly 19 of them.
    pub(super) fn decode(bytes: &[u8]) -> Result<Self, CodecError> {
        let mut r = Reader::new(bytes, "recovery round A");
        let restarted = r.u8("restarted")? == 1;
        let committed = (r.u64("committed epoch")?, r.u8("committed slot")?);
        let entry =
            RoundAEntry { restarted, committed, next_epoch: r.u64("next epoch")?, cut: r.u8("cut")? == 1 };
        r.finish()?;
        Ok(entry)
    }
}

/// A round B contribution that went well: one ssn per peer.
pub(super) fn round_b_held(ssns: impl ExactSizeIterator<Item = u64>) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + 8 * ssns.len());
    let mut w = Writer::new(&mut out);
    w.u8(0);
    for ssn in ssns {
        w.u64(ssn);
    }
    out
}

/// A round B contribution of a rank that could not restore: what was lost.
pub(super) fn round_b_lost(what: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + what.len());
    Writer::new(&mut out).u8(1).raw(what.as_bytes());
    out
}

/// What a round B contribution says was lost, if it says so.
pub(super) fn round_b_loss(bytes: &[u8]) -> Option<String> {
    match bytes.split_first() {
        Some((1, what)) => Some(String::from_utf8_lossy(what).into_owned()),
        _ => None,
    }
}

/// The ssn a round B contribution holds for `rank`; `None` when it holds none.
pub(super) fn round_b_ssn(bytes: &[u8], rank: Rank) -> Option<u64> {
    let mut r = Reader::new(bytes, "recovery round B");
    r.skip(1 + 8 * rank as usize, "earlier ranks").ok()?;
    r.u64("ssn").ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn pinned_encoding() {
        let a = RoundAEntry { restarted: false, committed: (0x0102, 1), next_epoch: 3, cut: true };
        let want = [0, 2, 1, 0, 0, 0, 0, 0, 0, 1, 3, 0, 0, 0, 0, 0, 0, 0, 1];
        assert_eq!(a.encode(), want);
        assert_eq!(RoundAEntry::decode(&want), Ok(a));
        assert!(RoundAEntry::decode(&want[..18]).is_err());
        let b = round_b_held([5u64, 0x0607].into_iter());
        assert_eq!(b, [0, 5, 0, 0, 0, 0, 0, 0, 0, 7, 6, 0, 0, 0, 0, 0, 0]);
        assert_eq!((round_b_ssn(&b, 1), round_b_ssn(&b, 2), round_b_loss(&b)), (Some(0x0607), None, None));
        let lost = round_b_lost("gone");
        assert_eq!(lost, b"\x01gone");
        assert_eq!((round_b_loss(&lost).as_deref(), round_b_ssn(&lost, 0)), (Some("gone"), None));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..48), rank in 0u32..8) {
            let _ = RoundAEntry::decode(&bytes);
            let _ = (round_b_ssn(&bytes, rank), round_b_loss(&bytes));
            prop_assert!(round_b_ssn(&bytes, u32::MAX).is_none());
        }

        #[test]
        fn round_trips(restarted: bool, epoch: u64, slot: u8, next_epoch: u64, cut: bool, ssns in prop::collection::vec(any::<u64>(), 0..8)) {
            let a = RoundAEntry { restarted, committed: (epoch, slot), next_epoch, cut };
            prop_assert_eq!(RoundAEntry::decode(&a.encode()), Ok(a));
            let b = round_b_held(ssns.iter().copied());
            prop_assert!(round_b_loss(&b).is_none());
            for (rank, ssn) in ssns.iter().enumerate() {
                prop_assert_eq!(round_b_ssn(&b, rank as Rank), Some(*ssn));
            }
            prop_assert_eq!(round_b_ssn(&b, ssns.len() as Rank), None);
        }
    }
}
