//! The endpoint's recovery state in a checkpoint: what a restarted rank needs to resume
//! its channels where its checkpoint left them (the rest of the endpoint starts fresh).
//!
//! Layout (little endian): `version u32 | size u32 | last_rsn u64 | size × last_ssn_sent u64 |
//! size × delivered_through u64`.
//! Channels resume at sender incarnation 0: a newer incarnation is always accepted.

use super::LoggedEndpoint;
use crate::channel::{RecvChannel, SendSequencer};
use crate::determinant::{ReceptionCounter, Ssn};
use crate::error::{LogError, Result};
use crate::wire::Reader;
use reverb_transport::Rank;

const SNAPSHOT_VERSION: u32 = 1;
const WHAT: &str = "endpoint snapshot";

impl LoggedEndpoint {
    /// The per-channel state a checkpoint must hold: ssns sent, the reception counter and,
    /// per sender, the ssns this rank's state covers (messages released but still waiting
    /// for a receive are not covered: their senders keep them, and resend them).
    pub fn recovery_snapshot(&self) -> Vec<u8> {
        let size = self.size as usize;
        let mut out = Vec::with_capacity(16 + size * 16);
        out.extend_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
        out.extend_from_slice(&self.size.to_le_bytes());
        out.extend_from_slice(&self.reception.last_rsn().to_le_bytes());
        for ssn in self.sequencer.snapshot() {
            out.extend_from_slice(&ssn.to_le_bytes());
        }
        for peer in 0..self.size {
            out.extend_from_slice(&self.covered_from(peer).to_le_bytes());
        }
        out
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
        let mut r = Reader::new(bytes, WHAT);
        let version = r.u32()?;
        if version != SNAPSHOT_VERSION {
            return Err(LogError::malformed(WHAT, format!("version {version}, expected {SNAPSHOT_VERSION}")));
        }
        let size = r.u32()?;
        if size != self.size {
            return Err(LogError::malformed(
                WHAT,
                format!("taken in a job of {size}, this one has {}", self.size),
            ));
        }
        if bytes.len() != 16 + size as usize * 16 {
            return Err(LogError::malformed(WHAT, format!("{} bytes for {size} ranks", bytes.len())));
        }
        let last_rsn = r.u64()?;
        let sent = (0..size).map(|_| r.u64()).collect::<Result<Vec<Ssn>>>()?;
        let mut channels = Vec::with_capacity(size as usize);
        for _ in 0..size {
            channels.push(r.u64()?);
        }
        self.sequencer = SendSequencer::resume(sent);
        for (peer, through) in channels.into_iter().enumerate() {
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
