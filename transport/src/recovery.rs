//! Reconnecting after a respawn, on the `Provider` and `Bootstrap` traits only.
//!
//! A respawned rank opens through [`crate::open`] (which rejoins: no collective) and is then
//! connected to every survivor that had an address at the rendezvous. Survivors, and the
//! respawned rank for node-mates that were still starting, call [`apply_rejoins`] from time
//! to time (non-blocking) or [`await_rejoin`] when they need one peer back.

use std::time::{Duration, Instant};

use crate::api::{PeerState, Provider, Rank};
use crate::bootstrap::{Bootstrap, Rejoin};
use crate::error::{Result, TransportError};

/// Whether `provider` is already connected to `rejoin`'s incarnation (or a newer one).
fn already_connected(provider: &dyn Provider, rejoin: &Rejoin) -> bool {
    provider.peer_state(rejoin.rank) == PeerState::Alive
        && provider.peer_incarnation(rejoin.rank).is_some_and(|i| i >= rejoin.incarnation)
}

/// Reconnects to every rank whose rejoin was announced since the last call; returns the
/// rejoins it acted on. Never blocks.
pub fn apply_rejoins(provider: &mut dyn Provider, boot: &mut dyn Bootstrap) -> Result<Vec<Rejoin>> {
    let mut done = Vec::new();
    for r in boot.poll_rejoins()? {
        if already_connected(provider, &r) {
            continue;
        }
        provider.reconnect(r.rank, r.incarnation, &r.address)?;
        done.push(r);
    }
    Ok(done)
}

/// Waits at most `timeout` until `rank` has rejoined at an incarnation newer than `after`
/// (None: any), reconnects to it and returns its incarnation. Returns at once if the provider
/// is connected to such an incarnation already.
pub fn await_rejoin(
    provider: &mut dyn Provider,
    boot: &mut dyn Bootstrap,
    rank: Rank,
    after: Option<u32>,
    timeout: Duration,
) -> Result<u32> {
    let deadline = Instant::now() + timeout;
    let newer = |i: u32| !matches!(after, Some(a) if i <= a);
    loop {
        if provider.peer_state(rank) == PeerState::Alive {
            if let Some(i) = provider.peer_incarnation(rank).filter(|&i| newer(i)) {
                return Ok(i);
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(TransportError::Timeout(timeout));
        }
        let r = match boot.wait_rejoin(rank, left) {
            Ok(r) => r,
            Err(TransportError::Timeout(_)) => return Err(TransportError::Timeout(timeout)),
            Err(e) => return Err(e),
        };
        if newer(r.incarnation) && !already_connected(provider, &r) {
            provider.reconnect(r.rank, r.incarnation, &r.address)?;
        }
    }
}
