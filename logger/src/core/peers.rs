//! What a logger knows of its related loggers (its buddy, the nodes it hosts rings for):
//! heartbeats out, heartbeat words in, deaths reported, the slow found alive again, and the
//! dead given up on after the rejoin bound.

use std::time::{Instant, SystemTime};

use reverb_transport::{PeerState, Rank, RemoteRegion, Rma, Signal};

use super::segment::{self, unix_ms, DeathCause, NodeVerdict, Status};
use super::session::Session;
use super::CoreError;

/// The last heartbeat value of a logger that stopped cleanly.
pub(super) const STOPPED: u64 = u64::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PeerLife {
    Alive,
    Dead,
    Stopped,
    /// A (new) incarnation whose hello has not come yet.
    Awaiting,
}

/// What this logger knows of one related logger (its buddy, or a node it hosts a ring for).
pub(super) struct Watched {
    pub(super) node: Rank,
    /// None until its hello (or the start-up exchange) gave it.
    pub(super) heartbeat_region: Option<RemoteRegion>,
    pub(super) last_value: u64,
    pub(super) last_change: Instant,
    pub(super) last_change_wall: SystemTime,
    pub(super) life: PeerLife,
    /// When `life` last changed.
    pub(super) since: Instant,
    pub(super) incarnation: u32,
    /// The incarnation our hello went to (u32::MAX: given up on it).
    pub(super) hello_sent: Option<u32>,
}

impl Watched {
    pub(super) fn new(node: Rank, incarnation: u32, now: Instant) -> Self {
        Watched {
            node,
            heartbeat_region: None,
            last_value: 0,
            last_change: now,
            last_change_wall: SystemTime::now(),
            life: PeerLife::Alive,
            since: now,
            incarnation,
            hello_sent: None,
        }
    }

    pub(super) fn given_up(&self) -> bool {
        self.hello_sent == Some(u32::MAX)
    }

    /// Heard from now with heartbeat `value`: alive.
    pub(super) fn heard(&mut self, value: u64, now: Instant) {
        self.last_value = value;
        self.last_change = now;
        self.last_change_wall = SystemTime::now();
        self.life = PeerLife::Alive;
        self.since = now;
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Running,
    Draining(Instant),
    Parting(Instant),
}

impl Session<'_> {
    /// Every heartbeat period: our heartbeat out, the related loggers' words read, deaths and
    /// revivals acted on, the long-dead given up.
    pub(super) fn heartbeat_tick(&mut self, counter: u64, now: Instant) -> Result<(), CoreError> {
        if !matches!(self.phase, Phase::Parting(_)) {
            self.send_heartbeat(counter);
        }
        for node in self.related.clone() {
            if self.check_revived(node, now) && node == self.target {
                self.log_to_revived_buddy()?;
            }
            if let Some((why, cause)) = self.check_peer(node, now) {
                if self.report_dead(node, &why, cause) && node == self.target {
                    self.path.drop_writer(self.provider);
                }
            }
        }
        self.give_up_on_the_long_dead(now);
        Ok(())
    }

    /// The buddy was only slow (same incarnation): the log goes to the ring it kept.
    fn log_to_revived_buddy(&mut self) -> Result<(), CoreError> {
        let Some(remote) = self.path.remote.filter(|_| self.path.writer.is_none()) else { return Ok(()) };
        let rewritten = self.path.retarget(self.provider, remote)?;
        self.core.segment.set(Status::BuddyState, segment::BUDDY_ALIVE);
        tracing::info!(
            "reverb logger-core node {}: logging to buddy node {} again (same incarnation); {rewritten} \
             record(s) since the last trim written again",
            self.me,
            self.target
        );
        Ok(())
    }

    /// A dead or silent related logger is awaited back only so long.
    fn give_up_on_the_long_dead(&mut self, now: Instant) {
        let cfg = &self.core.cfg;
        for w in self.watched.iter_mut() {
            let waiting = w.life == PeerLife::Awaiting || (w.life == PeerLife::Dead && cfg.expect_rejoin);
            if waiting && !w.given_up() && now.duration_since(w.since) >= cfg.rejoin_timeout {
                w.life = PeerLife::Dead;
                w.hello_sent = Some(u32::MAX); // marks "given up"
                if w.node == self.target {
                    self.core.segment.set(Status::BuddyState, segment::BUDDY_DEAD);
                }
                tracing::info!(
                    "reverb logger-core node {}: node {} did not come back within {:?}; given up",
                    self.me,
                    w.node,
                    cfg.rejoin_timeout
                );
            }
        }
    }

    /// Puts `value` into our word of every related logger's heartbeat region.
    fn send_heartbeat(&mut self, value: u64) {
        for i in 0..self.watched.len() {
            let w = &self.watched[i];
            // A node found dead by its heartbeat alone still gets ours while the transport has
            // it alive: if it was only slow, it must not find us dead in turn.
            let suspected = w.life == PeerLife::Dead
                && !w.given_up()
                && self.provider.peer_state(w.node) == PeerState::Alive;
            if w.life != PeerLife::Alive && !suspected {
                continue;
            }
            let node = w.node;
            let Some(remote) = w.heartbeat_region else { continue };
            match self.put_heartbeat_word(&remote, value) {
                Ok(op) => self.hb_ops.push(op),
                Err(e) => {
                    let why = format!("heartbeat write failed: {e}");
                    self.report_dead(node, &why, DeathCause::WriteFailed);
                }
            }
        }
    }

    fn put_heartbeat_word(
        &mut self,
        remote: &RemoteRegion,
        value: u64,
    ) -> Result<reverb_transport::OpId, CoreError> {
        let out = &self.heartbeat_out;
        out.write(0, &value.to_le_bytes())?;
        let rma = Rma { local: out, local_offset: 0, remote, remote_offset: 8 * u64::from(self.me), len: 8 };
        Ok(self.provider.put(rma, Signal::Yes)?)
    }

    /// The last heartbeat says "stopped" (also to peers that already stopped: they may still
    /// be waiting for it); waits (bounded) for it to land.
    pub(super) fn send_stopped(&mut self) {
        let out = &self.heartbeat_out;
        for w in self.watched.iter().filter(|w| matches!(w.life, PeerLife::Alive | PeerLife::Stopped)) {
            let Some(remote) = w.heartbeat_region else { continue };
            let _ = out.write(0, &STOPPED.to_le_bytes());
            let rma = Rma {
                local: out,
                local_offset: 0,
                remote: &remote,
                remote_offset: 8 * u64::from(self.me),
                len: 8,
            };
            if let Ok(op) = self.provider.put(rma, Signal::Yes) {
                let _ = self.provider.wait_op(op, self.core.cfg.heartbeat);
            }
        }
    }

    /// `node`'s heartbeat word, if readable.
    fn heartbeat_word(&self, node: Rank) -> Option<u64> {
        let mut b = [0u8; 8];
        self.heartbeat_in.read(8 * node as usize, &mut b).ok().map(|_| u64::from_le_bytes(b))
    }

    /// Reads `node`'s heartbeat word; `Some(reason, cause)` when it is newly found dead.
    fn check_peer(&mut self, node: Rank, now: Instant) -> Option<(String, DeathCause)> {
        let heartbeat = self.core.cfg.heartbeat;
        let i = self.watched.iter().position(|w| w.node == node)?;
        if self.watched[i].life != PeerLife::Alive || self.watched[i].heartbeat_region.is_none() {
            return None;
        }
        let transport_dead = self.provider.peer_state(node) == PeerState::Dead;
        // Read after the transport's verdict: a clean exit's STOPPED lands before the exit.
        let value = self.heartbeat_word(node)?;
        let w = &mut self.watched[i];
        if value == STOPPED {
            w.life = PeerLife::Stopped;
            return None;
        }
        if value != w.last_value {
            w.last_value = value;
            w.last_change = now;
            w.last_change_wall = SystemTime::now();
        }
        if transport_dead {
            return Some(("the transport reports it dead (PeerDead)".into(), DeathCause::Transport));
        }
        let silent = now.duration_since(w.last_change);
        (silent >= heartbeat)
            .then(|| (format!("heartbeat silent for {} ms", silent.as_millis()), DeathCause::Heartbeat))
    }

    /// A logger found dead by a silent heartbeat alone may only have been slow (a loaded
    /// machine): if the same incarnation heartbeats again and the transport has it alive, it
    /// is alive again (the verdict records it back). Returns whether it revived now.
    fn check_revived(&mut self, node: Rank, now: Instant) -> bool {
        let Some(i) = self.watched.iter().position(|w| w.node == node) else { return false };
        let w = &self.watched[i];
        if w.life != PeerLife::Dead || w.heartbeat_region.is_none() || w.given_up() {
            return false;
        }
        let same = self.provider.peer_incarnation(node).is_none_or(|inc| inc == w.incarnation);
        if self.provider.peer_state(node) != PeerState::Alive || !same {
            return false;
        }
        let Some(value) = self.heartbeat_word(node) else { return false };
        let w = &mut self.watched[i];
        if value == w.last_value || value == STOPPED {
            return false;
        }
        w.heard(value, now);
        let incarnation = w.incarnation;
        self.record_back(node, incarnation);
        tracing::warn!("reverb logger-core: node {node} heartbeats again: it was only slow, not dead");
        true
    }

    /// The segment's verdict on `node`, if dead, records it back at `incarnation`; returns
    /// whether there was one.
    pub(super) fn record_back(&self, node: Rank, incarnation: u32) -> bool {
        let segment = &self.core.segment;
        let verdict = segment.verdicts().into_iter().find(|v| v.node == node && v.is_dead());
        if let Some(mut v) = verdict {
            v.back = Some((incarnation, unix_ms(SystemTime::now())));
            segment.record_verdict(&v);
        }
        verdict.is_some()
    }

    /// Records `node` dead (verdict, buddy state, stderr); false if it was not alive.
    pub(super) fn report_dead(&mut self, node: Rank, why: &str, cause: DeathCause) -> bool {
        self.report_dead_in(node, why, cause, self.phase)
    }

    /// `report_dead` as if in `phase` (a respawn is awaited only while running).
    pub(super) fn report_dead_in(&mut self, node: Rank, why: &str, cause: DeathCause, phase: Phase) -> bool {
        let segment = &self.core.segment;
        let buddy = segment.get(Status::BuddyNode);
        let Some(w) = self.watched.iter_mut().find(|w| w.node == node) else { return false };
        if w.life != PeerLife::Alive {
            return false;
        }
        w.life = PeerLife::Dead;
        w.since = Instant::now();
        let since = w.last_change.elapsed().as_millis() as u64;
        segment.record_verdict(&NodeVerdict {
            node,
            incarnation: w.incarnation,
            cause,
            last_heard_unix_ms: unix_ms(w.last_change_wall),
            reported_unix_ms: unix_ms(SystemTime::now()),
            back: None,
        });
        let role = if u64::from(node) == buddy { "buddy " } else { "" };
        let awaited = self.core.cfg.expect_rejoin && phase == Phase::Running;
        if u64::from(node) == buddy {
            segment.set(Status::DetectionMs, since);
            let state = if awaited { segment::BUDDY_REJOINING } else { segment::BUDDY_DEAD };
            segment.set(Status::BuddyState, state);
        }
        tracing::warn!(
            "reverb logger-core: {role}node {node} is dead ({why}); reported {since} ms after its last heartbeat{}",
            if awaited { "; awaiting its respawn" } else { "" }
        );
        true
    }
}
