//! Probes' findings. A probe that finds a message without taking it (`MPI_Iprobe`,
//! `MPI_Probe`) is an outcome of arrival timing like a wildcard delivery: under a logging
//! protocol it logs a "seen" determinant at its call's tick, the way a delivery's is logged,
//! so that a replay finds the same message in the same call, and nothing where the first run
//! found nothing.

use reverb_transport::{Rank, Source, Tag, TagMatch};

use super::receive::StandIn;
use super::{IncomingMessage, LoggedEndpoint};
use crate::determinant::{Determinant, Rsn, Ssn};
use crate::error::{LogError, Result};

/// What a logged probe (`probe_logged`) found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoggedProbe {
    /// A matching message: (sender, tag, payload length).
    Found(Rank, Tag, usize),
    /// Nothing matches, or (replaying) the first run found nothing in this call.
    Nothing,
    /// Replaying: the first run found a message in this call that has not arrived yet.
    NotYet,
}

impl LoggedEndpoint {
    /// `probe` for a layer that ticks each call (`tick`) before it probes: the finding is
    /// logged at that tick's rsn (not while replaying: the log holds it). During a replay
    /// the call finds the message the log says it found, or nothing if the log has nothing
    /// at its tick before its last rsn; past that, as `probe`.
    pub fn probe_logged(&mut self, source: Source, tag: TagMatch) -> Result<LoggedProbe> {
        if self.pass_through {
            self.probed_head = None;
            return Ok(found(self.probe_pass_through(source, tag)?));
        }
        let at = self.last_tick;
        match self.replay.as_ref().map(|p| (p.seen_at(at), p.last_rsn())) {
            Some((Some(seen), _)) => return self.replayed_finding(at, seen, source, tag),
            Some((None, last)) if at < last => return Ok(LoggedProbe::Nothing),
            _ => {}
        }
        self.provider.progress()?;
        self.collect_completions()?;
        let kind = self.classify(source, tag);
        let Some(i) = self.find_ready(source, tag, kind)? else {
            self.background(false)?;
            return Ok(LoggedProbe::Nothing);
        };
        let (sender, ssn, found_tag, len) = self.note_probed(i);
        if !self.replaying() {
            self.log_seen(Determinant::seen(sender, self.rank, ssn, at))?;
        }
        Ok(LoggedProbe::Found(sender, found_tag, len))
    }

    /// The message a replayed probe at tick `at` found the first time, once it has arrived.
    /// One from a copy retired since (partial redundancy) comes from its mates, as a
    /// replayed delivery's does (`stand_in_for`).
    fn replayed_finding(
        &mut self,
        at: Rsn,
        (sender, ssn): (Rank, Ssn),
        source: Source,
        tag: TagMatch,
    ) -> Result<LoggedProbe> {
        self.provider.progress()?;
        self.collect_completions()?;
        let waiting = self.ready.iter().position(|a| a.sender == sender && a.ssn == ssn);
        let found = match waiting {
            Some(i) => Some(i),
            None => match self.stand_in_for(sender, ssn) {
                StandIn::Queued(i) => Some(i),
                StandIn::NotYet => None,
                StandIn::Duplicate => {
                    return Err(LogError::ReplayDiverged {
                        rsn: at,
                        detail: format!(
                            "probe found retired copy {sender}'s message #{ssn}, which its mates' copy \
                             delivered before: a duplicate no probe can find again"
                        ),
                    })
                }
            },
        };
        let Some(i) = found.filter(|&i| i < self.ready.len()) else {
            self.background(false)?;
            return Ok(LoggedProbe::NotYet);
        };
        let (_, _, found_tag, len) = self.note_probed(i);
        let a = &self.ready[i];
        if !(source.matches(a.sender) && tag.matches(a.tag)) {
            return Err(LogError::ReplayDiverged {
                rsn: at,
                detail: format!(
                    "probe ({source:?}, {tag:?}) cannot find the logged message {sender}#{ssn} (tag {:#x})",
                    a.tag
                ),
            });
        }
        Ok(LoggedProbe::Found(a.sender, found_tag, len))
    }

    /// `ready[i]`, found by a probe: (sender, ssn, tag, payload length); its first payload
    /// bytes are kept for `probed_head`.
    pub(super) fn note_probed(&mut self, i: usize) -> (Rank, Ssn, Tag, usize) {
        let a = &self.ready[i];
        let payload = &a.frame.as_slice()[a.payload_offset..];
        self.probed_head = payload.get(..8).and_then(|b| b.try_into().ok());
        (a.sender, a.ssn, a.tag, payload.len())
    }

    /// The first 8 payload bytes of the message the last probe (`probe`, `probe_logged`)
    /// found, if it has as many: a layer that sends long messages in pieces reads the whole
    /// length there. None after a pass-through probe (the provider's message is not read).
    pub fn probed_head(&self) -> Option<[u8; 8]> {
        self.probed_head
    }

    /// Logs `det` where and when the protocol logs a delivery's determinant (no payload).
    fn log_seen(&mut self, det: Determinant) -> Result<()> {
        let msg = IncomingMessage { frame: &[], determinant: Some(det), payload_logged: false };
        let (protocol, mut io) = self.protocol_io();
        let pending = protocol.log_delivery(&mut io, &msg)?;
        self.pending = pending;
        Ok(())
    }
}

fn found(probe: Option<(Rank, Tag, usize)>) -> LoggedProbe {
    probe.map_or(LoggedProbe::Nothing, |(sender, tag, len)| LoggedProbe::Found(sender, tag, len))
}
