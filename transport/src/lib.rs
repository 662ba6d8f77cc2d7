//! reverb's transport layer.
//!
//! - [`api`]: the [`Provider`] trait and its types (regions, RMA, tagged messages, completions);
//! - [`shm`]: the multi-process shared-memory provider (default, and the intra-node path);
//! - [`bootstrap`]: job discovery and the token-guarded TCP rendezvous;
//! - [`codec`]: the little-endian reader/writer of every wire and on-disk format;
//! - [`topo`]: hwloc topology discovery and core pinning.

pub mod api;
pub mod bootstrap;
pub mod codec;
pub mod config;
pub mod error;
pub mod msg;
pub mod nodemap;
pub mod recovery;
pub mod region;
pub mod shm;
pub mod tagged;
pub mod tagmatch;
pub mod testkit;
pub mod topo;
#[cfg(feature = "verbs")]
pub mod verbs;

pub use api::{
    Access, Capabilities, Completion, CompletionKind, OpId, PeerState, Provider, ProviderKind, Rank,
    RecvBuffer, RemoteRegion, Rma, Signal, Source, Tag, TagMatch,
};
pub use bootstrap::{Bootstrap, JobInfo};
pub use config::{TransportConfig, WaitMode};
pub use error::{Result, TransportError};
pub use region::Region;

/// Opens the provider named by `config.provider` for this job. A respawned rank
/// (incarnation > 0) rejoins the running job instead of taking part in a collective open;
/// see [`recovery`].
pub fn open(config: &TransportConfig, boot: &mut dyn Bootstrap) -> Result<Box<dyn Provider>> {
    let respawned = boot.job().incarnation > 0;
    match config.provider {
        ProviderKind::Shm if respawned => Ok(Box::new(shm::ShmProvider::rejoin(config.clone(), boot)?)),
        ProviderKind::Shm => Ok(Box::new(shm::ShmProvider::open(config.clone(), boot)?)),
        #[cfg(feature = "verbs")]
        ProviderKind::Verbs if respawned => Ok(Box::new(verbs::VerbsProvider::rejoin(config.clone(), boot)?)),
        #[cfg(feature = "verbs")]
        ProviderKind::Verbs => Ok(Box::new(verbs::VerbsProvider::open(config.clone(), boot)?)),
        #[cfg(not(feature = "verbs"))]
        ProviderKind::Verbs => Err(TransportError::Unavailable(
            "verbs",
            "this build has no verbs support (build with --features verbs)".into(),
        )),
    }
}
