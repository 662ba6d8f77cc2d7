//! The seam between `auto` and the provider it uses between hosts: what it needs beyond
//! [`Provider`] (fetching a rendezvous its shared matcher paired, registering memory shm
//! allocated), and which one a job uses ([`AutoNet`]: verbs where every rank can, else tcp).

use std::any::Any;

use crate::api::{Provider, ProviderKind};
use crate::bootstrap::Bootstrap;
use crate::config::{AutoNet, TransportConfig};
use crate::error::{Result, TransportError};
use crate::region::Region;
use crate::subcore::SubCore;
use crate::tagged::Fetch;
use crate::tcp::TcpProvider;

/// A second registration of a region's memory, by the network provider.
pub(crate) struct Registration {
    /// Deregisters when dropped.
    pub backing: Box<dyn Any + Send + Sync>,
    /// The local key posts from the region name (verbs lkey; 0 for tcp).
    pub local_key: u32,
    /// The low 32 bits the descriptor's key must carry, where the provider dictates them
    /// (verbs: the rkey); None where it took the key it was given (tcp).
    pub key_low: Option<u32>,
}

/// What `auto` needs of its network sub-provider.
pub(crate) trait NetProvider: Provider {
    /// Fetches a rendezvous that the shared matcher paired with a receive.
    fn fetch(&mut self, fetch: Fetch);
    /// Registers memory that shm allocated (and keyed) for peers on other hosts.
    fn register(&mut self, region: &Region) -> Result<Registration>;
    /// `progress`, skipped where it cheaply knows nothing happened (`auto` calls it beside
    /// every shm progress).
    fn progress_beside(&mut self) -> Result<()> {
        self.progress()
    }
}

impl NetProvider for TcpProvider {
    fn fetch(&mut self, fetch: Fetch) {
        self.rndv_fetch(fetch)
    }

    fn register(&mut self, region: &Region) -> Result<Registration> {
        Ok(Registration { backing: self.register_region(region)?, local_key: 0, key_low: None })
    }

    fn progress_beside(&mut self) -> Result<()> {
        self.progress_when_ready()
    }
}

/// Whether this rank could use verbs between hosts (a build with verbs, a usable device).
pub(crate) fn verbs_usable(config: &TransportConfig) -> bool {
    config.auto_net != AutoNet::Tcp && cfg!(feature = "verbs") && verbs_device()
}

#[cfg(feature = "verbs")]
fn verbs_device() -> bool {
    crate::verbs::usable()
}

#[cfg(not(feature = "verbs"))]
fn verbs_device() -> bool {
    false
}

/// The network provider a job uses, given whether every rank can use verbs.
pub(crate) fn choose(config: &TransportConfig, all_have_verbs: bool) -> Result<ProviderKind> {
    match (config.auto_net, all_have_verbs) {
        (AutoNet::Tcp, _) | (AutoNet::Any, false) => Ok(ProviderKind::TCP),
        (_, true) => Ok(ProviderKind::VERBS),
        (AutoNet::Verbs, false) => Err(TransportError::Unavailable(
            "verbs",
            "REVERB_AUTO_NET=verbs, but not every rank has a usable RDMA device (or a verbs build)".into(),
        )),
    }
}

/// Opens (or, after a respawn, rejoins with) the network provider `kind`.
pub(crate) fn open(
    kind: ProviderKind,
    config: TransportConfig,
    boot: &mut dyn Bootstrap,
    core: SubCore,
    rejoin: bool,
) -> Result<Box<dyn NetProvider>> {
    if kind == ProviderKind::TCP {
        return Ok(match rejoin {
            false => Box::new(TcpProvider::open_sub(config, boot, core)?),
            true => Box::new(TcpProvider::rejoin_sub(config, boot, core)?),
        });
    }
    open_verbs(config, boot, core, rejoin)
}

#[cfg(feature = "verbs")]
fn open_verbs(
    config: TransportConfig,
    boot: &mut dyn Bootstrap,
    core: SubCore,
    rejoin: bool,
) -> Result<Box<dyn NetProvider>> {
    use crate::verbs::VerbsProvider;
    Ok(match rejoin {
        false => Box::new(VerbsProvider::open_sub(config, boot, core)?),
        true => Box::new(VerbsProvider::rejoin_sub(config, boot, core)?),
    })
}

#[cfg(not(feature = "verbs"))]
fn open_verbs(
    _: TransportConfig,
    _: &mut dyn Bootstrap,
    _: SubCore,
    _: bool,
) -> Result<Box<dyn NetProvider>> {
    Err(TransportError::Unavailable(
        "verbs",
        "this build has no verbs support (build with --features verbs)".into(),
    ))
}

#[cfg(feature = "verbs")]
impl NetProvider for crate::verbs::VerbsProvider {
    fn fetch(&mut self, fetch: Fetch) {
        self.rndv_fetch(fetch)
    }

    fn register(&mut self, region: &Region) -> Result<Registration> {
        let (backing, local_key, rkey) = self.register_region(region)?;
        Ok(Registration { backing, local_key, key_low: Some(rkey) })
    }
}
