//! Collective-aware logging at the endpoint (`REVERB_LOG_CAML=1`, [`crate::multicast`]): keys
//! for the multicasts rooted here, stub-logged tree sends, and the recovery exchange that
//! gives a survivor the payloads its stubs name.

use std::collections::BTreeSet;

use reverb_transport::{Bootstrap, Rank, Tag};

use super::LoggedEndpoint;
use crate::determinant::Ssn;
use crate::error::Result;
use crate::multicast::{self, McastKey, Resolution};
use crate::protocol::LogUnit;
use crate::stats::LogStats;

/// The endpoint's multicast state.
#[derive(Debug, Default)]
pub(crate) struct Multicasts {
    /// The next key's sequence number (in the checkpoint: `recovery_snapshot`).
    pub(super) next_seq: u64,
    /// Payloads of stubs this rank resends, gathered at the last recovery.
    resolved: Resolution,
}

impl LoggedEndpoint {
    /// Whether multicasts are logged collective-aware: `REVERB_LOG_CAML` and a protocol
    /// that keeps a send log.
    pub fn caml(&self) -> bool {
        self.config.caml && !self.pass_through && self.protocol.send_log().is_some()
    }

    /// The key of piece 0 of a new multicast of `pieces` pieces rooted here (piece i is
    /// `key.piece(i)`); None when CAML is off.
    pub fn multicast_key(&mut self, pieces: u64) -> Option<McastKey> {
        if !self.caml() {
            return None;
        }
        let key = McastKey { root: self.rank, seq: self.multicasts.next_seq };
        self.multicasts.next_seq += pieces.max(1);
        Some(key)
    }

    /// `send` of multicast piece `key` (from its root or a forwarder). Under CAML the root
    /// keeps the payload once and the send logs a stub; a destination that would fail with
    /// the root gets the payload logged whole (the root's copy would be lost with it).
    pub fn send_multicast(&mut self, dest: Rank, tag: Tag, payload: &[u8], key: McastKey) -> Result<()> {
        if !self.caml() || !self.logs_payload_with(dest) || self.shares_fate(dest, key.root) {
            return self.send(dest, tag, payload);
        }
        if key.root == self.rank {
            self.check_outgoing(dest, payload.len())?;
            if let Some(log) = self.protocol.send_log_mut() {
                let charged = log.record_multicast(key, payload)?;
                if charged > 0 {
                    LogStats::bump(&self.stats.send_log_bytes, charged);
                    LogStats::bump(&self.stats.payload_bytes_logged, payload.len() as u64);
                    LogStats::bump(&self.stats.messages_payload_logged, 1);
                }
            }
        }
        self.send_logged(dest, tag, payload, Some(key))
    }

    /// Whether `a` and `b` fail together: one node, or one team under team-based logging.
    pub(super) fn shares_fate(&self, a: Rank, b: Rank) -> bool {
        let node = |r: Rank| self.rings.node_of_rank.get(r as usize).copied();
        let team = match (self.config.unit, &self.config.teams) {
            (LogUnit::Team, Some(teams)) => teams.same_team(a, b),
            _ => false,
        };
        a == b || team || (node(a).is_some() && node(a) == node(b))
    }

    /// Recovery, collective (every rank, before the survivors resend): gathers the payloads
    /// of the stubs this rank will resend, `from` giving each restarted rank and the first
    /// ssn it lacks (empty at a restarted rank). Every rank fails alike with
    /// `MulticastLost` when a stub's root failed too.
    pub fn resolve_multicasts(&mut self, boot: &mut dyn Bootstrap, from: &[(Rank, Ssn)]) -> Result<()> {
        let mut wanted = BTreeSet::new();
        if let Some(log) = self.protocol.send_log() {
            for &(dest, ssn) in from.iter().filter(|(d, _)| self.logs_payload_with(*d)) {
                let stubs = log.from_ssn(dest, ssn)?.filter_map(|e| e.stub);
                wanted.extend(stubs.filter(|k| log.multicast(k).is_none()));
            }
        }
        let all_wanted = boot.allgather(&multicast::encode_keys(&wanted))?;
        let mut asked = BTreeSet::new();
        for bytes in &all_wanted {
            asked.extend(multicast::decode_keys(bytes)?);
        }
        let offers = match self.protocol.send_log() {
            Some(log) => {
                multicast::encode_offers(asked.iter().filter_map(|k| log.multicast(k).map(|p| (*k, p))))
            }
            None => multicast::encode_offers(std::iter::empty()),
        };
        let all_offers = boot.allgather(&offers)?;
        self.multicasts.resolved = Resolution::settle(&wanted, &all_wanted, &all_offers)?;
        Ok(())
    }

    /// The payload of stub `key` for a resend: the root's copy here, or the one gathered.
    pub(super) fn stub_payload(&self, key: &McastKey) -> Option<Vec<u8>> {
        let own = self.protocol.send_log().and_then(|log| log.multicast(key));
        own.or_else(|| self.multicasts.resolved.get(key)).map(<[u8]>::to_vec)
    }

    /// At a coordinated checkpoint: the multicast copies and gathered payloads go (every stub
    /// naming them is covered). Returns the bytes freed.
    pub(super) fn trim_multicasts(&mut self) -> u64 {
        self.multicasts.resolved = Resolution::default();
        let freed = self.protocol.send_log_mut().map_or(0, |log| log.trim_multicasts());
        LogStats::drop_by(&self.stats.send_log_bytes, freed);
        freed
    }
}
