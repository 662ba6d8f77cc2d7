//! Determinants: the outcome of one non-deterministic reception, ⟨sender, receiver, ssn, rsn⟩
//! (seed 000 §2.4). Replaying receptions in rsn order reproduces the execution.

use reverb_transport::codec;
use reverb_transport::Rank;

use crate::error::Result;
use crate::wire::Reader;

/// Send sequence number, per (sender → receiver) channel; the first message is 1.
pub type Ssn = u64;
/// Reception sequence number, per receiver; the first delivery is 1.
pub type Rsn = u64;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Determinant {
    pub sender: Rank,
    pub receiver: Rank,
    pub ssn: Ssn,
    pub rsn: Rsn,
}

impl Determinant {
    /// Fixed wire size; the envelope, the node queue and the log ring all use it.
    pub const WIRE_LEN: usize = 24;

    /// Set in `ssn` on a "seen" determinant: a probe (`MPI_Iprobe`, `MPI_Probe`) found
    /// message `ssn` at the rsn of its call's tick without taking it. In the ssn's top bit,
    /// so that the wire form and every place that carries determinants stay as they are:
    /// ssns count one channel's messages from 1 and never reach 2^63.
    pub const SEEN: Ssn = 1 << 63;

    /// The "seen" determinant of `sender`'s message `ssn`, found at tick `rsn`.
    pub fn seen(sender: Rank, receiver: Rank, ssn: Ssn, rsn: Rsn) -> Self {
        Determinant { sender, receiver, ssn: ssn | Self::SEEN, rsn }
    }

    /// Whether this records a probe's finding rather than a delivery.
    #[inline]
    pub fn is_seen(&self) -> bool {
        self.ssn & Self::SEEN != 0
    }

    /// The message's ssn, of a delivery or a "seen" determinant alike.
    #[inline]
    pub fn message_ssn(&self) -> Ssn {
        self.ssn & !Self::SEEN
    }

    #[inline]
    pub fn to_bytes(&self) -> [u8; Self::WIRE_LEN] {
        let mut out = [0u8; Self::WIRE_LEN];
        out.copy_from_slice(self.wire().as_flattened());
        out
    }

    /// The wire form as three little-endian words (`as_flattened` gives the bytes): sender |
    /// receiver, ssn, rsn.
    #[inline]
    pub(crate) fn wire(&self) -> [[u8; 8]; 3] {
        // Word by word, not `[u64; 3]::map` (a call per use where it is not inlined).
        let ends = u64::from(self.sender) | u64::from(self.receiver) << 32;
        [ends.to_le_bytes(), self.ssn.to_le_bytes(), self.rsn.to_le_bytes()]
    }

    /// Decodes exactly `WIRE_LEN` bytes: every bit pattern is a determinant, so this cannot
    /// fail (range checks are the receiver's).
    #[inline]
    pub fn from_wire(b: &[u8; Self::WIRE_LEN]) -> Self {
        let mut r = codec::Reader::new(b, "determinant");
        match (r.u32("sender"), r.u32("receiver"), r.u64("ssn"), r.u64("rsn")) {
            (Ok(sender), Ok(receiver), Ok(ssn), Ok(rsn)) => Determinant { sender, receiver, ssn, rsn },
            // Unreachable: the array holds every field (the reads fold to plain loads).
            _ => Determinant { sender: 0, receiver: 0, ssn: 0, rsn: 0 },
        }
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader::new(bytes, "determinant");
        let det = Self::read(&mut r)?;
        if r.remaining() != 0 {
            return Err(crate::error::LogError::malformed("determinant", "trailing bytes"));
        }
        Ok(det)
    }

    pub(crate) fn read(r: &mut Reader<'_>) -> Result<Self> {
        Ok(Determinant { sender: r.u32()?, receiver: r.u32()?, ssn: r.u64()?, rsn: r.u64()? })
    }
}

/// The receiver's reception counter: each delivery to the application takes the next rsn.
#[derive(Debug, Clone)]
pub struct ReceptionCounter {
    receiver: Rank,
    last_rsn: Rsn,
}

impl ReceptionCounter {
    pub fn new(receiver: Rank) -> Self {
        ReceptionCounter { receiver, last_rsn: 0 }
    }

    /// Resumes after a restart from a checkpointed counter.
    pub fn resume(receiver: Rank, last_rsn: Rsn) -> Self {
        ReceptionCounter { receiver, last_rsn }
    }

    /// Records the delivery of message `ssn` from `sender` and returns its determinant.
    pub fn deliver(&mut self, sender: Rank, ssn: Ssn) -> Determinant {
        self.last_rsn += 1;
        Determinant { sender, receiver: self.receiver, ssn, rsn: self.last_rsn }
    }

    /// Takes the next rsn for no message: a call boundary of the layer above (`tick`).
    pub fn skip(&mut self) {
        self.last_rsn += 1;
    }

    pub fn last_rsn(&self) -> Rsn {
        self.last_rsn
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_trip() {
        let d = Determinant { sender: 3, receiver: 9, ssn: u64::MAX - 1, rsn: 77 };
        assert_eq!(Determinant::from_bytes(&d.to_bytes()).ok(), Some(d));
        assert_eq!(Determinant::from_wire(&d.to_bytes()), d);
        assert!(Determinant::from_bytes(&d.to_bytes()[..23]).is_err());
        let mut long = d.to_bytes().to_vec();
        long.push(0);
        assert!(Determinant::from_bytes(&long).is_err());
    }

    /// The bytes the envelope, the node queue and the log ring carry, written out by hand.
    #[test]
    fn pinned_encoding() {
        let d = Determinant { sender: 1, receiver: 0x0203, ssn: 4, rsn: 0x0506 };
        let want = [1, 0, 0, 0, 3, 2, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 6, 5, 0, 0, 0, 0, 0, 0];
        assert_eq!(d.to_bytes(), want);
        assert_eq!(Determinant::from_wire(&want), d);
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic_and_round_trip(bytes in proptest::collection::vec(0u8.., 16..32)) {
            if let Ok(d) = Determinant::from_bytes(&bytes) {
                proptest::prop_assert_eq!(&d.to_bytes()[..], &bytes[..]);
            }
            if let Ok(wire) = <[u8; Determinant::WIRE_LEN]>::try_from(&bytes[..]) {
                proptest::prop_assert_eq!(Determinant::from_wire(&wire).to_bytes(), wire);
            }
        }
    }

    #[test]
    fn seen_kind_round_trips_in_the_ssn_top_bit() {
        let d = Determinant::seen(2, 7, 41, 9);
        assert!(d.is_seen() && d.message_ssn() == 41);
        assert_eq!(Determinant::from_wire(&d.to_bytes()), d);
        assert_eq!(Determinant::from_bytes(&d.to_bytes()).ok(), Some(d));
        assert_eq!(d.to_bytes()[8..16], (41u64 | 1 << 63).to_le_bytes());
        let delivery = Determinant { sender: 2, receiver: 7, ssn: 41, rsn: 9 };
        assert!(!delivery.is_seen() && delivery.message_ssn() == 41);
    }

    #[test]
    fn rsn_counts_deliveries() {
        let mut c = ReceptionCounter::new(4);
        assert_eq!(c.deliver(1, 1), Determinant { sender: 1, receiver: 4, ssn: 1, rsn: 1 });
        assert_eq!(c.deliver(2, 1).rsn, 2);
        assert_eq!(ReceptionCounter::resume(4, 10).deliver(0, 5).rsn, 11);
    }
}
