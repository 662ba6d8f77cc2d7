//! reverb's transport layer.
//!
//! - [`api`]: the [`Provider`] trait and its types (regions, RMA, tagged messages, completions);
//! - [`completion`]: completion routing: one queue per [`Owner`], found from the [`OpId`];
//! - [`shm`]: the multi-process shared-memory provider (default, and the intra-node path);
//! - [`tcp`]: sockets between hosts, RMA emulated by messages (the fallback without RDMA);
//! - [`loopback`]: every rank a thread of one process, with an in-process bootstrap (tests);
//! - [`bootstrap`]: job discovery and the token-guarded TCP rendezvous;
//! - [`codec`]: the little-endian reader/writer of every wire and on-disk format;
//! - [`topo`]: hwloc topology discovery and core pinning;
//! - [`sys`]: system utilities every layer shares: /dev/shm files and process liveness.
//!
//! The other modules: [`config`] (the `REVERB_*` variables and their grammar), [`error`],
//! [`region`] (registered memory), [`recovery`] (rejoining a job after a respawn), [`nodemap`]
//! (buddy placement), and the pieces providers share: [`msg`] (the slot header), [`tagged`] and
//! [`tagmatch`] (tag matching and rendezvous state), [`spinwait`] (how a polling wait spins,
//! sleeps and reads the clock).
//!
//! # Quick start
//!
//! A rank program joins its job from the environment `reverb run` sets, opens the provider
//! `REVERB_PROVIDER` names with [`open`], and posts operations on it; the README's quick start
//! is the whole program (a token passed around a ring). In short:
//!
//! ```no_run
//! use std::time::Duration;
//! use reverb_transport::bootstrap::TcpBootstrap;
//! use reverb_transport::{RecvBuffer, Source, TagMatch, TransportConfig};
//!
//! # fn main() -> reverb_transport::Result<()> {
//! let mut boot = TcpBootstrap::connect_from_env()?; // join the job
//! let mut p = reverb_transport::open(&TransportConfig::from_env()?, &mut boot)?;
//! let next = (p.rank() + 1) % p.size();
//! let recv = p.post_recv(Source::Any, TagMatch::exact(1), RecvBuffer::Owned { capacity: 8 })?;
//! let send = p.send(next, 1, &u64::from(p.rank()).to_le_bytes())?;
//! p.wait_op(send, Duration::from_secs(30))?.into_result()?;
//! let got = p.wait_op(recv, Duration::from_secs(30))?.into_result()?;
//! println!("{:?}", got.kind);
//! # Ok(())
//! # }
//! ```

#![warn(missing_docs)]

pub mod advert;
pub mod api;
pub mod auto;
pub mod bootstrap;
pub mod borrowed;
pub mod codec;
pub mod completion;
pub mod config;
pub mod diag;
pub mod error;
pub mod loopback;
pub mod msg;
pub mod nodemap;
mod providers;
pub mod recovery;
pub mod region;
pub mod shm;
pub mod spinwait;
mod subcore;
pub mod sys;
pub mod tagged;
pub mod tagmatch;
pub mod tcp;
/// The multi-process test harness: test-only, so only in builds with the fault hooks (every
/// crate's tests turn them on through a self dev-dependency).
#[cfg(feature = "fault-injection")]
pub mod testkit;
pub mod topo;
#[cfg(feature = "verbs")]
pub mod verbs;

pub use api::{
    Access, Capabilities, Completion, CompletionKind, EagerTake, OpId, PeerState, Provider, ProviderKind,
    Rank, RecvBuffer, RemoteRegion, Rma, Signal, Source, Tag, TagMatch,
};
pub use bootstrap::{Bootstrap, JobInfo, MAX_GATHER_BYTES};
pub use completion::{CompletionQueues, Owner};
pub use config::{TransportConfig, WaitMode};
pub use error::{Result, TransportError};
pub use region::Region;

/// How long a respawned rank waits for ranks still in the job's first open to publish.
const INITIAL_OPENS_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Opens the provider named by `config.provider` for this job. A respawned rank
/// (incarnation > 0) rejoins the running job instead of taking part in a collective open;
/// see [`recovery`].
pub fn open(config: &TransportConfig, boot: &mut dyn Bootstrap) -> Result<Box<dyn Provider>> {
    let entry = providers::entry(config.provider)
        .ok_or_else(|| TransportError::Config(format!("provider {} is not registered", config.provider)))?;
    let single_host = [ProviderKind::SHM, ProviderKind::LOOPBACK].contains(&config.provider);
    let mut config = config.clone();
    config.oversubscribed =
        spinwait::oversubscribed(spinwait::ranks_on_host(boot.job(), single_host), config.host_cpus);
    let config = &config;
    if boot.job().incarnation > 0 {
        recovery::await_initial_opens(boot, INITIAL_OPENS_WAIT)?;
        (entry.rejoin)(config, boot)
    } else {
        (entry.open)(config, boot)
    }
}
