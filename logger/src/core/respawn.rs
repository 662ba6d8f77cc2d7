//! Respawned loggers: the rendezvous polled for them, the hello traded with each related
//! one, and the completions of our own sends and receives (heartbeats, hellos): the
//! provider's [`reverb_transport::Owner::APP`] queue, since this loop is the provider's
//! application (the ring writer's puts complete to the writer's own owner).

use std::time::Instant;

use reverb_transport::{CompletionKind, Rank, TransportError};

use super::hello::parse_hello;
use super::peers::{PeerLife, Phase};
use super::segment::{self, DeathCause, Status};
use super::session::Session;
use super::CoreError;

impl Session<'_> {
    /// Our completions: heartbeat puts, hellos sent and received (the whole `APP` queue; a
    /// dropped ring writer's closed owner takes its late completions with it). Returns
    /// whether a hello came.
    pub(super) fn take_completions(&mut self) -> Result<bool, CoreError> {
        let cq = self.provider.completions();
        if cq.is_empty() {
            return Ok(false);
        }
        let finished: Vec<_> = cq.drain(..).collect();
        let mut failed: Vec<TransportError> = Vec::new();
        let mut received: Vec<(Rank, Vec<u8>)> = Vec::new();
        let mut recv_done = false;
        for c in finished {
            if self.hb_ops.contains(&c.op) || self.hellos.sends.contains(&c.op) {
                self.hb_ops.retain(|&op| op != c.op);
                self.hellos.sends.retain(|&op| op != c.op);
                if let Err(e) = c.status {
                    failed.push(*e);
                }
            } else if Some(c.op) == self.hellos.recv {
                recv_done = true;
                if let (Ok(()), CompletionKind::Recv { source, data: Some(data), .. }) = (c.status, c.kind) {
                    received.push((source, data));
                }
            }
        }
        for e in failed {
            if let TransportError::PeerDead(r) = e {
                let why = "a write to it failed (PeerDead)";
                if self.report_dead(r, why, DeathCause::Transport) && r == self.target {
                    self.path.drop_writer(self.provider);
                }
            }
        }
        if recv_done {
            self.hellos.recv = None;
            self.hellos.post(self.provider)?;
        }
        let busy = !received.is_empty();
        for (from, bytes) in received {
            if let Err(e) = self.on_hello(from, &bytes) {
                tracing::warn!("reverb logger-core node {}: hello from node {from}: {e}", self.me);
            }
        }
        Ok(busy)
    }

    /// Respawned loggers: reconnects, retires the ring hosted for the dead incarnation, sends
    /// it a hello (a new ring and our heartbeat region).
    pub(super) fn poll_rejoins(&mut self) {
        let rejoins = match reverb_transport::recovery::apply_rejoins(self.provider, self.boot) {
            Ok(rejoins) => rejoins,
            Err(e) => {
                tracing::warn!("reverb logger-core node {}: applying rejoins: {e}", self.me);
                return;
            }
        };
        let related: Vec<_> = rejoins.into_iter().filter(|r| self.related.contains(&r.rank)).collect();
        for r in related {
            if let Err(e) = self.on_rejoin(r.rank, r.incarnation, self.phase) {
                tracing::warn!("reverb logger-core node {}: node {} rejoined: {e}", self.me, r.rank);
            }
        }
    }

    /// A related logger came back at `incarnation` (the provider is reconnected to it): its
    /// old incarnation is dead; the ring we hosted for it is retired (kept for replay) and a
    /// fresh one offered in our hello; our log waits for its hello.
    fn on_rejoin(&mut self, node: Rank, incarnation: u32, phase: Phase) -> Result<(), CoreError> {
        let Some(w) = self.watched.iter().find(|w| w.node == node) else { return Ok(()) };
        if w.hello_sent.is_some_and(|i| i != u32::MAX && i >= incarnation) {
            return Ok(()); // answered this incarnation already
        }
        if w.life == PeerLife::Alive {
            let why = format!("incarnation {incarnation} rejoined");
            self.report_dead_in(node, &why, DeathCause::Rejoined, phase);
        }
        if node == self.target {
            self.path.drop_writer(self.provider);
        }
        let offered = self.retire_hosted_ring(node)?;
        if let Some(w) = self.watched.iter_mut().find(|w| w.node == node) {
            w.incarnation = incarnation;
            w.life = PeerLife::Awaiting;
            w.since = Instant::now();
            w.heartbeat_region = None;
            w.hello_sent = Some(incarnation);
        }
        let (mine, heartbeat) = (self.boot.job().incarnation, self.heartbeat_in.remote());
        if let Err(e) = self.hellos.send(self.provider, node, mine, &heartbeat, offered.as_ref()) {
            // That incarnation died already: the next one's rejoin brings another hello.
            tracing::warn!(
                "reverb logger-core node {}: no hello to node {node}: {e}; awaiting its next incarnation",
                self.me
            );
            return Ok(());
        }
        tracing::info!(
            "reverb logger-core node {}: node {node} rejoined at incarnation {incarnation}; hello sent{}",
            self.me,
            if offered.is_some() { " with a fresh ring (the old one is kept for replay)" } else { "" }
        );
        Ok(())
    }

    /// Replaces the ring hosted for `node` (if any) by a fresh one, keeping the old one for
    /// replay; returns the fresh ring's descriptor.
    fn retire_hosted_ring(
        &mut self,
        node: Rank,
    ) -> Result<Option<reverb_transport::RemoteRegion>, CoreError> {
        let Some(slot) = self.hosted.iter_mut().find(|(c, _)| *c == node) else { return Ok(None) };
        let fresh = crate::logring::create_ring(self.provider, self.core.cfg.ring_bytes)?;
        let offered = fresh.remote();
        let old = std::mem::replace(&mut slot.1, fresh);
        self.retired.push((node, self.retired_count, old));
        self.retired_count += 1;
        Ok(Some(offered))
    }

    /// A related logger's hello: its heartbeat region and, from our buddy, the ring our log
    /// goes to now (the log since the last trim is written again into it).
    fn on_hello(&mut self, from: Rank, bytes: &[u8]) -> Result<(), CoreError> {
        let hello = parse_hello(bytes)?;
        let Some(w) = self.watched.iter().find(|w| w.node == from) else {
            return Err(CoreError::Malformed {
                what: "hello",
                detail: format!("node {from} is not related"),
            });
        };
        if hello.incarnation < w.incarnation {
            return Ok(()); // from an incarnation we know is gone
        }
        if w.hello_sent != Some(hello.incarnation) {
            // Its hello came before the rendezvous told us: answer it the same way.
            self.on_rejoin(from, hello.incarnation, Phase::Running)?;
        }
        let now = Instant::now();
        let mut b = [0u8; 8];
        self.heartbeat_in.read(8 * from as usize, &mut b)?;
        let Some(w) = self.watched.iter_mut().find(|w| w.node == from) else { return Ok(()) };
        w.heartbeat_region = Some(hello.heartbeat);
        w.heard(u64::from_le_bytes(b), now);
        w.incarnation = hello.incarnation;
        let was_dead = self.record_back(from, hello.incarnation);
        if from != self.target {
            return Ok(());
        }
        let ring = hello.ring.ok_or_else(|| CoreError::Malformed {
            what: "hello",
            detail: format!("buddy node {from} offers no ring"),
        })?;
        let rewritten = self.path.retarget(self.provider, ring)?;
        self.core.segment.set(Status::BuddyState, segment::BUDDY_ALIVE);
        if was_dead || rewritten > 0 {
            self.summary.buddy_rejoins += 1;
            self.core.segment.bump(Status::BuddyRejoins);
        }
        tracing::info!(
            "reverb logger-core node {}: logging to buddy node {from} (incarnation {}) again; {rewritten} \
             record(s) since the last trim written again",
            self.me,
            hello.incarnation
        );
        Ok(())
    }
}
