//! Reconnecting after a respawn, on the `Provider` and `Bootstrap` traits only.
//!
//! A respawned rank opens through [`crate::open`] (which rejoins: no collective) and is then
//! connected to every survivor that had an address at the rendezvous. Survivors, and the
//! respawned rank for node-mates that were still starting, call [`apply_rejoins`] from time
//! to time (non-blocking) or [`await_rejoin`] when they need one peer back. Until a survivor
//! has reconnected, what the respawned rank sends it waits (verbs: queued until the survivor's
//! hello; shm: until the survivor opens its ring), so survivors should not wait on the
//! respawned rank before reconnecting to it.
//!
//! A rank can fail again before everyone reconnected to it: reconnecting to an incarnation
//! that is already gone fails with `PeerDead`, which both helpers take as "wait for the next
//! one" rather than as an error.
//!
//! ```no_run
//! use std::time::Duration;
//! use reverb_transport::bootstrap::TcpBootstrap;
//! use reverb_transport::recovery::{apply_rejoins, await_rejoin};
//! use reverb_transport::{Bootstrap, PeerState, Provider, TransportConfig};
//!
//! # fn main() -> reverb_transport::Result<()> {
//! let mut boot = TcpBootstrap::connect_from_env()?;
//! // Incarnation 0: a collective open. A respawned rank: rejoins, connected to the survivors.
//! let mut p = reverb_transport::open(&TransportConfig::from_env()?, &mut boot)?;
//! let me = boot.job().rank;
//! // ... later, a peer is found Dead (PeerDead completions, peer_state):
//! for peer in (0..p.size()).filter(|&r| r != me) {
//!     if p.peer_state(peer) == PeerState::Dead {
//!         let before = p.peer_incarnation(peer);
//!         let now = await_rejoin(p.as_mut(), &mut boot, peer, before, Duration::from_secs(30))?;
//!         println!("rank {peer} is back at incarnation {now}");
//!     }
//! }
//! // Or, without blocking, from a progress loop:
//! apply_rejoins(p.as_mut(), &mut boot)?;
//! # Ok(())
//! # }
//! ```

use std::time::{Duration, Instant};

use crate::api::{PeerState, Provider, Rank};
use crate::bootstrap::{Bootstrap, Rejoin};
use crate::error::{Result, TransportError};

/// Whether `provider` is already connected to `rejoin`'s incarnation (or a newer one).
/// The checks every provider's `reconnect` makes before touching any state: not to itself, a
/// known rank, and an incarnation newer than the one it holds (or, for a peer not connected
/// yet, at least that one).
pub(crate) fn check_reconnect(
    me: Rank,
    size: u32,
    peer: Rank,
    incarnation: u32,
    current: Option<(u32, bool)>,
) -> Result<()> {
    if peer == me {
        return Err(TransportError::Config(format!("rank {peer} cannot reconnect to itself")));
    }
    let (held, connected) = current.ok_or(TransportError::InvalidRank(peer, size))?;
    let stale = if connected { incarnation <= held } else { incarnation < held };
    if stale {
        return Err(TransportError::StaleIncarnation { rank: peer, incarnation, current: held });
    }
    Ok(())
}

fn already_connected(provider: &dyn Provider, rejoin: &Rejoin) -> bool {
    provider.peer_state(rejoin.rank) == PeerState::Alive
        && provider.peer_incarnation(rejoin.rank).is_some_and(|i| i >= rejoin.incarnation)
}

/// Reconnects to every rank whose rejoin was announced since the last call (the newest
/// incarnation of each); returns the rejoins it connected to. Never blocks. A rank whose
/// announced incarnation died already is skipped: its next rejoin will be announced.
pub fn apply_rejoins(provider: &mut dyn Provider, boot: &mut dyn Bootstrap) -> Result<Vec<Rejoin>> {
    let mut newest: Vec<Rejoin> = Vec::new();
    for r in boot.poll_rejoins()? {
        match newest.iter_mut().find(|n| n.rank == r.rank) {
            Some(n) if n.incarnation < r.incarnation => *n = r,
            Some(_) => {}
            None => newest.push(r),
        }
    }
    let mut done = Vec::new();
    for r in newest {
        if already_connected(provider, &r) {
            continue;
        }
        match provider.reconnect(r.rank, r.incarnation, &r.address) {
            Ok(()) => done.push(r),
            Err(TransportError::PeerDead(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Waits at most `timeout` until no first-incarnation rank is still inside the job's first
/// open: live at the rendezvous, at incarnation 0, with no address published yet. A rank
/// respawned meanwhile would find no address for such a rank and take it for dead, though it
/// publishes as soon as its open ends. Past the bound it returns anyway (those ranks are then
/// treated as a rejoin would: connected when they announce themselves).
pub fn await_initial_opens(boot: &mut dyn Bootstrap, timeout: Duration) -> Result<()> {
    let me = boot.job().rank;
    let deadline = Instant::now() + timeout;
    loop {
        let table = match boot.lookup() {
            Ok(t) => t,
            // A rendezvous that keeps no table: nothing to wait for.
            Err(TransportError::Unsupported(_)) => return Ok(()),
            Err(e) => return Err(e),
        };
        let opening =
            table.iter().any(|a| a.rank != me && a.incarnation == 0 && a.address.is_none() && !a.lost);
        if !opening || Instant::now() >= deadline {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
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
    let mut after = after;
    loop {
        let newer = |i: u32| !matches!(after, Some(a) if i <= a);
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
        if !newer(r.incarnation) || already_connected(provider, &r) {
            continue;
        }
        match provider.reconnect(r.rank, r.incarnation, &r.address) {
            Ok(()) => {}
            // That incarnation died already: wait for the next.
            Err(TransportError::PeerDead(_)) => after = Some(r.incarnation),
            Err(e) => return Err(e),
        }
    }
}
