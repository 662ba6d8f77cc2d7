//! The endpoint's recovery state in a checkpoint: what a restarted rank needs to resume
//! its channels where its checkpoint left them (the rest of the endpoint starts fresh).
//!
//! Layout (little endian): `version u32 | size u32 | last_rsn u64 | size × last_ssn_sent u64 |
//! size × delivered_through u64 | next_multicast u64`. Version 1, without the last field (the
//! next multicast key's number, collective-aware logging), still reads (as 0).
//! Channels resume at sender incarnation 0: a newer incarnation is always accepted.

use super::LoggedEndpoint;
use crate::channel::{RecvChannel, SendSequencer};
use crate::determinant::{ReceptionCounter, Ssn};
use crate::error::{LogError, Result};
use crate::wire::Reader;
use reverb_transport::codec::Writer;
use reverb_transport::Rank;

const SNAPSHOT_VERSION: u32 = 2;
const WHAT: &str = "endpoint snapshot";

/// The decoded snapshot: per peer, the ssns sent to it and the ssns from it covered.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Snapshot {
    last_rsn: u64,
    sent: Vec<Ssn>,
    covered: Vec<Ssn>,
    next_multicast: u64,
}

impl Snapshot {
    /// The layout in the module's header; `sent` and `covered` are one job's size long.
    fn encode(&self) -> Vec<u8> {
        let size = self.covered.len();
        let mut out = Vec::with_capacity(24 + size * 16);
        let mut w = Writer::new(&mut out);
        w.u32(SNAPSHOT_VERSION).u32(size as u32).u64(self.last_rsn);
        for &ssn in self.sent.iter().chain(&self.covered) {
            w.u64(ssn);
        }
        w.u64(self.next_multicast);
        out
    }

    /// Decodes a snapshot taken in a job of `size` ranks from untrusted bytes (a file).
    fn decode(bytes: &[u8], size: u32) -> Result<Self> {
        let mut r = Reader::new(bytes, WHAT);
        let version = r.u32()?;
        if version != 1 && version != SNAPSHOT_VERSION {
            return Err(LogError::malformed(
                WHAT,
                format!("version {version}, expected 1 or {SNAPSHOT_VERSION}"),
            ));
        }
        let taken = r.u32()?;
        if taken != size {
            return Err(LogError::malformed(WHAT, format!("taken in a job of {taken}, this one has {size}")));
        }
        let tail = if version == 1 { 0 } else { 8 };
        if bytes.len() != 16 + size as usize * 16 + tail {
            return Err(LogError::malformed(WHAT, format!("{} bytes for {size} ranks", bytes.len())));
        }
        let last_rsn = r.u64()?;
        let sent = (0..size).map(|_| r.u64()).collect::<Result<Vec<Ssn>>>()?;
        let covered = (0..size).map(|_| r.u64()).collect::<Result<Vec<Ssn>>>()?;
        let next_multicast = if version == 1 { 0 } else { r.u64()? };
        Ok(Snapshot { last_rsn, sent, covered, next_multicast })
    }
}

impl LoggedEndpoint {
    /// The per-channel state a checkpoint must hold: ssns sent, the reception counter and,
    /// per sender, the ssns this rank's state covers (messages released but still waiting
    /// for a receive are not covered: their senders keep them, and resend them).
    pub fn recovery_snapshot(&self) -> Vec<u8> {
        let covered = (0..self.size).map(|peer| self.covered_from(peer)).collect();
        let snapshot = Snapshot {
            last_rsn: self.reception.last_rsn(),
            sent: self.sequencer.snapshot(),
            covered,
            next_multicast: self.multicasts.next_seq,
        };
        snapshot.encode()
    }

    /// The highest ssn from `peer` that this rank's state covers: released in order and
    /// taken by a receive.
    pub fn covered_from(&self, peer: Rank) -> Ssn {
        let mut covered = self.channels.delivered_through(peer).unwrap_or(0);
        for a in self.ready.iter().filter(|a| a.sender == peer) {
            covered = covered.min(a.ssn - 1);
        }
        covered
    }

    /// The rsn of this rank's last delivery (0 before the first).
    pub fn last_rsn(&self) -> crate::determinant::Rsn {
        self.reception.last_rsn()
    }

    /// At a restarted rank, right after `new`: resumes sequencer, channels and reception
    /// counter from `bytes` ([`LoggedEndpoint::recovery_snapshot`]). Follow with
    /// `begin_replay`; survivors resend from `covered_from(them) + 1`.
    pub fn restore_snapshot(&mut self, bytes: &[u8]) -> Result<()> {
        let Snapshot { last_rsn, sent, covered, next_multicast } = Snapshot::decode(bytes, self.size)?;
        self.multicasts.next_seq = next_multicast;
        self.sequencer = SendSequencer::resume(sent);
        for (peer, through) in covered.into_iter().enumerate() {
            *self.channels.channel(peer as Rank)? =
                RecvChannel::resume(peer as Rank, 0, through, self.config.reorder_window);
        }
        self.reception = ReceptionCounter::resume(self.rank, last_rsn);
        self.ready.clear();
        self.released.clear();
        self.replay = None;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Version 1 and 2 bytes, written out by hand: a checkpoint outlives the build that wrote it.
    #[test]
    fn pinned_encoding() {
        let s = Snapshot { last_rsn: 9, sent: vec![1, 2], covered: vec![3, 0x0102], next_multicast: 0 };
        let mut v1 = vec![1, 0, 0, 0, 2, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0];
        for v in [1u8, 2, 3] {
            v1.extend_from_slice(&[v, 0, 0, 0, 0, 0, 0, 0]);
        }
        v1.extend_from_slice(&[2, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(Snapshot::decode(&v1, 2).unwrap(), s);
        let mut want = v1.clone();
        want[0] = 2;
        want.extend_from_slice(&[5, 0, 0, 0, 0, 0, 0, 0]);
        let s = Snapshot { next_multicast: 5, ..s };
        assert_eq!(s.encode(), want);
        assert_eq!(Snapshot::decode(&want, 2).unwrap(), s);
        assert!(Snapshot::decode(&want, 3).is_err(), "another job size");
        for cut in 0..want.len() {
            assert!(Snapshot::decode(&want[..cut], 2).is_err(), "cut {cut}");
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..128), size in 0u32..8) {
            let _ = Snapshot::decode(&bytes, size);
            let mut framed = vec![1, 0, 0, 0, size as u8, 0, 0, 0];
            framed.extend_from_slice(&bytes);
            let _ = Snapshot::decode(&framed, size);
        }

        #[test]
        fn round_trips(last_rsn: u64, next_multicast: u64, pairs in prop::collection::vec(any::<(u64, u64)>(), 0..8)) {
            let (sent, covered) = pairs.into_iter().unzip();
            let s = Snapshot { last_rsn, sent, covered, next_multicast };
            prop_assert_eq!(Snapshot::decode(&s.encode(), s.covered.len() as u32).unwrap(), s);
        }
    }
}
