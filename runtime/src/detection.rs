//! Detection: finding dead peers (the provider, the rendezvous, the node's logger core),
//! waiting for their units to rejoin, then handing over to the recovery.

use std::time::{Duration, Instant};

use reverb_logger::error::LogError;
use reverb_transport::recovery::await_rejoin;
use reverb_transport::sys::clock::CoarseInstant;
use reverb_transport::{Bootstrap, PeerState, Rank, TransportError};

use super::error::{Result, RuntimeError};
use super::report::unix_ns;
use super::{initboot, Runtime};

impl Runtime {
    /// A failure report about `peer` from before its recovery (a send that failed while it
    /// was dead, collected later): it is alive again at a newer incarnation.
    pub(super) fn stale_failure(&mut self, peer: Rank) -> bool {
        let recovered = self.incarnation_of.get(peer as usize).is_some_and(|&i| i > 0);
        recovered && self.endpoint.as_mut().is_some_and(|e| e.provider().peer_state(peer) == PeerState::Alive)
    }

    /// Dead peers, widened to their whole failure units (nodes or teams).
    fn dead_ranks(&mut self) -> Result<Vec<Rank>> {
        let me = self.rank;
        let size = self.size;
        let endpoint =
            self.endpoint.as_mut().ok_or_else(|| RuntimeError::InvalidArgument("finalized".into()))?;
        // `block` runs the provider's liveness check when it is due (`progress` only now and then).
        let tolerate_dead = |r: reverb_transport::Result<()>| match r {
            Err(TransportError::PeerDead(_)) => Ok(()),
            other => other,
        };
        tolerate_dead(endpoint.provider().progress())?;
        tolerate_dead(endpoint.provider().block(Duration::ZERO))?;
        let dead: Vec<Rank> =
            (0..size).filter(|&r| r != me && endpoint.provider().peer_state(r) == PeerState::Dead).collect();
        if dead.is_empty() {
            // The answer after every poll: no second pass over the ranks.
            return Ok(dead);
        }
        // A masked copy's unit mates live on (the launcher fails only it).
        let dead_units = self.units_to_recover(dead);
        let masked = |r: Rank| self.spheres.as_ref().is_some_and(|s| s.is_masked(r));
        Ok((0..size).filter(|&r| dead_units.contains(&self.unit_of[r as usize]) && !masked(r)).collect())
    }

    /// The failure units of ranks found dead, but for masked copies (partial redundancy).
    fn units_to_recover(&mut self, dead: Vec<Rank>) -> Vec<u32> {
        let mut units = Vec::new();
        for r in dead {
            if !self.masked_copy(r) {
                units.push(self.unit_of[r as usize]);
            }
        }
        units
    }

    /// Ranks, outside `known`, whose unit the rendezvous shows failed: a rank lost (no
    /// address) or at an incarnation newer than the one this rank knows, with its unit mates.
    fn also_failed(&mut self, known: &[Rank]) -> Result<Vec<Rank>> {
        let table = self.boot.lookup()?;
        let failed: Vec<Rank> = table
            .iter()
            .filter(|a| a.rank != self.rank && !known.contains(&a.rank))
            .filter(|a| {
                a.address.is_none()
                    || self.incarnation_of.get(a.rank as usize).is_some_and(|&i| a.incarnation > i)
            })
            .map(|a| a.rank)
            .collect();
        let failed_units = self.units_to_recover(failed);
        let masked = |r: Rank| self.spheres.as_ref().is_some_and(|s| s.is_masked(r));
        Ok((0..self.size)
            .filter(|r| {
                !known.contains(r) && !masked(*r) && failed_units.contains(&self.unit_of[*r as usize])
            })
            .collect())
    }

    /// After an error: waits (bounded by `detect_grace`) for a dead peer to explain it and
    /// recovers (or masks it); false if none died.
    pub(super) fn failure_explains(&mut self) -> Result<bool> {
        let start = Instant::now();
        let masked = self.report.masked_copies.len();
        loop {
            // A copy masked meanwhile (partial redundancy) explains it as well.
            if self.check_failures()? || self.report.masked_copies.len() > masked {
                return Ok(true);
            }
            if start.elapsed() > self.config.detect_grace {
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether the node's logger core (heartbeats to related nodes' loggers) has a new
    /// verdict about a node it found dead that this rank knows at that incarnation or older.
    /// A heartbeat verdict may be a false suspicion on a loaded machine, so it only makes
    /// the rendezvous be asked now; the rendezvous decides.
    fn logger_suspects(&mut self) -> bool {
        let Some(client) = self.endpoint.as_ref().and_then(|e| e.logger_offload()).map(|o| o.client()) else {
            return false;
        };
        let generation = client.verdict_generation();
        if generation == self.logger_verdicts_seen {
            return false;
        }
        self.logger_verdicts_seen = generation;
        client.dead_nodes().iter().any(|v| {
            (0..self.size).any(|r| {
                r != self.rank
                    && self.node_of[r as usize] == v.node
                    && self.incarnation_of[r as usize] <= v.incarnation
            })
        })
    }

    /// Says why `dead` count as failed (the provider's view, the rendezvous', the incarnation
    /// known here): a failure seen twice, or a stale one, shows in the job's log.
    fn note_evidence(&mut self, dead: &[Rank], suspected: bool) {
        let table = self.boot.lookup().unwrap_or_default();
        let Some(endpoint) = self.endpoint.as_mut() else { return };
        for &r in dead {
            let entry = table.iter().find(|a| a.rank == r);
            tracing::info!(
                "reverb: rank {}: rank {r} seen failed: provider {:?} at incarnation {:?}, rendezvous {}, known here {}{}",
                self.rank,
                endpoint.provider().peer_state(r),
                endpoint.provider().peer_incarnation(r),
                entry.map_or("no entry".to_string(), |a| format!(
                    "incarnation {}{}",
                    a.incarnation,
                    if a.address.is_none() { " without an address" } else { "" }
                )),
                self.incarnation_of[r as usize],
                if suspected { " (the logger core suspects its node)" } else { "" },
            );
        }
    }

    /// Recovers if a peer died; returns whether it did.
    pub(super) fn check_failures(&mut self) -> Result<bool> {
        let mut dead = self.dead_ranks()?;
        let suspected = dead.is_empty() && self.logger_suspects();
        if dead.is_empty() && (suspected || self.last_boot_check.elapsed() >= self.config.detect_interval) {
            // The provider only watches peers this rank talked to: a failure elsewhere shows
            // in the rendezvous (the launcher marks it), and the survivors' recovery
            // collectives need this rank too.
            self.last_boot_check = CoarseInstant::now();
            dead = self.also_failed(&[])?;
        }
        if dead.is_empty() {
            return Ok(false);
        }
        self.note_evidence(&dead, suspected);
        let detected = unix_ns();
        // Nodes failing together are recovered together: let the others show up first.
        std::thread::sleep(self.config.detect_interval);
        let seen_by_provider = self.dead_ranks()?;
        dead.extend(seen_by_provider);
        dead.sort_unstable();
        dead.dedup();
        let start = Instant::now();
        Self::check_recoverable(&self.config.log, &self.node_of)?;
        // Ranks awaited already: `dead` is re-sorted as more are found, so a position in it
        // would skip the new ones and await an old one's next incarnation.
        let mut awaited: Vec<Rank> = Vec::new();
        while let Some(r) = dead.iter().copied().find(|r| !awaited.contains(r)) {
            let before = self.incarnation_of[r as usize];
            let rejoin_timeout = self.config.rejoin_timeout;
            let endpoint =
                self.endpoint.as_mut().ok_or_else(|| RuntimeError::InvalidArgument("finalized".into()))?;
            let now = await_rejoin(endpoint.provider(), &mut self.boot, r, Some(before), rejoin_timeout)
                .map_err(|e| {
                    RuntimeError::Unrecoverable(format!(
                        "rank {r} did not come back within {rejoin_timeout:?}: {e}"
                    ))
                })?;
            self.incarnation_of[r as usize] = now;
            endpoint.peer_restarted(r, now).map_err(|e| RuntimeError::from(e).during_recovery())?;
            awaited.push(r);
            if awaited.len() == dead.len() {
                // Another node may have failed meanwhile (or together with this one, seen
                // later): the rendezvous knows it as lost or at a newer incarnation. All are
                // recovered in one round.
                let more = self.also_failed(&dead)?;
                dead.extend(more);
                dead.sort_unstable();
            }
        }
        {
            let endpoint =
                self.endpoint.as_mut().ok_or_else(|| RuntimeError::InvalidArgument("finalized".into()))?;
            // The recovery's first collective may meet a survivor's log GC round (framed):
            // `Recovering` repeats such a round, which moves that rank into this recovery.
            endpoint
                .rejoin(&mut initboot::Recovering(&mut self.boot), &dead)
                .map_err(|e| RuntimeError::from(e).during_recovery())?;
        }
        if let Some(ckpt) = self.ckpt.as_mut() {
            // The first collective when the logger sets up nothing (`REVERB_LOG=none`).
            ckpt.rejoin(&mut initboot::Recovering(&mut self.boot))
                .map_err(|e| RuntimeError::from(e).during_recovery())?;
        }
        self.recovery_collective(&dead, false).map_err(RuntimeError::during_recovery)?;
        self.recoveries += 1;
        self.report.detected_ns.push(detected);
        self.report.recovery_ms.push(start.elapsed().as_secs_f64() * 1e3);
        Ok(true)
    }
}

/// The peer whose death may explain an endpoint error: one found dead, or one that failed a
/// one-sided access (a log write into a killed peer's memory: its registration went with the
/// process, so soft-RoCE answers with a remote access error, not a retry exhaustion). The
/// caller recovers only if the peer is found dead; a live peer's error stands.
pub(super) fn dead_peer_in(e: &LogError) -> Option<Rank> {
    match e {
        LogError::Transport(TransportError::PeerDead(p) | TransportError::Remote(p, _))
        | LogError::WriteFailed(TransportError::PeerDead(p) | TransportError::Remote(p, _)) => Some(*p),
        _ => None,
    }
}
