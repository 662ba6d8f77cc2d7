//! The provider registry: one row per provider, naming it and saying how a rank opens it
//! (as libfabric's provider list). [`crate::open`] and `REVERB_PROVIDER` parsing ask this
//! table, so a new provider is its folder plus one name and one row here.

use crate::api::{Provider, ProviderKind};
use crate::bootstrap::Bootstrap;
use crate::config::TransportConfig;
use crate::error::Result;
#[cfg(not(feature = "verbs"))]
use crate::error::TransportError;
use crate::{auto, loopback, shm, tcp};

impl ProviderKind {
    /// Shared memory between the processes of one host (`/dev/shm` segments, futex wakeups).
    pub const SHM: ProviderKind = ProviderKind::named("shm");
    /// RDMA verbs (InfiniBand, RoCE); needs a build with the `verbs` feature.
    pub const VERBS: ProviderKind = ProviderKind::named("verbs");
    /// TCP sockets between any two hosts (RMA emulated by messages the target serves).
    pub const TCP: ProviderKind = ProviderKind::named("tcp");
    /// Per peer: shm for peers on this host, the network (tcp) for the others.
    pub const AUTO: ProviderKind = ProviderKind::named("auto");
    /// Every rank a thread of one process (in-process jobs and tests only).
    pub const LOOPBACK: ProviderKind = ProviderKind::named("loopback");
}

/// How a rank opens a provider: `open` is the job's collective start; a respawned rank
/// (incarnation > 0) rejoins the running job instead (see [`crate::recovery`]).
pub(crate) struct ProviderEntry {
    pub kind: ProviderKind,
    pub open: fn(&TransportConfig, &mut dyn Bootstrap) -> Result<Box<dyn Provider>>,
    pub rejoin: fn(&TransportConfig, &mut dyn Bootstrap) -> Result<Box<dyn Provider>>,
}

/// Every provider, in the order `REVERB_PROVIDER`'s help names them.
pub(crate) static PROVIDERS: &[ProviderEntry] = &[
    ProviderEntry {
        kind: ProviderKind::AUTO,
        open: |c, b| auto::open(c.clone(), b),
        rejoin: |c, b| auto::rejoin(c.clone(), b),
    },
    ProviderEntry {
        kind: ProviderKind::SHM,
        open: |c, b| Ok(Box::new(shm::ShmProvider::open(c.clone(), b)?)),
        rejoin: |c, b| Ok(Box::new(shm::ShmProvider::rejoin(c.clone(), b)?)),
    },
    #[cfg(feature = "verbs")]
    ProviderEntry {
        kind: ProviderKind::VERBS,
        open: |c, b| Ok(Box::new(crate::verbs::VerbsProvider::open(c.clone(), b)?)),
        rejoin: |c, b| Ok(Box::new(crate::verbs::VerbsProvider::rejoin(c.clone(), b)?)),
    },
    // Named without the feature, so that asking for it says what is missing.
    #[cfg(not(feature = "verbs"))]
    ProviderEntry { kind: ProviderKind::VERBS, open: verbs_not_built, rejoin: verbs_not_built },
    ProviderEntry {
        kind: ProviderKind::TCP,
        open: |c, b| Ok(Box::new(tcp::TcpProvider::open(c.clone(), b)?)),
        rejoin: |c, b| Ok(Box::new(tcp::TcpProvider::rejoin(c.clone(), b)?)),
    },
    ProviderEntry {
        kind: ProviderKind::LOOPBACK,
        // Loopback jobs live in one process: there is no respawned rank to rejoin.
        open: |c, b| Ok(Box::new(loopback::LoopbackProvider::open(c.clone(), b)?)),
        rejoin: |c, b| Ok(Box::new(loopback::LoopbackProvider::open(c.clone(), b)?)),
    },
];

#[cfg(not(feature = "verbs"))]
fn verbs_not_built(_: &TransportConfig, _: &mut dyn Bootstrap) -> Result<Box<dyn Provider>> {
    Err(TransportError::Unavailable(
        "verbs",
        "this build has no verbs support (build with --features verbs)".into(),
    ))
}

/// The row of `kind`.
pub(crate) fn entry(kind: ProviderKind) -> Option<&'static ProviderEntry> {
    PROVIDERS.iter().find(|e| e.kind == kind)
}

/// The registered kind named `name` (a `REVERB_PROVIDER` value).
pub(crate) fn by_name(name: &str) -> Option<ProviderKind> {
    PROVIDERS.iter().map(|e| e.kind).find(|k| k.as_str() == name)
}

/// "a, b or c": the registered names, for error messages.
pub(crate) fn names_for_humans() -> String {
    let names: Vec<&str> = PROVIDERS.iter().map(|e| e.kind.as_str()).collect();
    crate::config::or_list(&names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_parse_back() {
        for (i, e) in PROVIDERS.iter().enumerate() {
            assert!(PROVIDERS[i + 1..].iter().all(|o| o.kind != e.kind), "{}", e.kind);
            assert_eq!(by_name(e.kind.as_str()), Some(e.kind));
            assert_eq!(e.kind.as_str().parse::<ProviderKind>().ok(), Some(e.kind));
        }
        assert_eq!(names_for_humans(), "auto, shm, verbs, tcp or loopback");
        assert!("Shm".parse::<ProviderKind>().is_err(), "names are exact");
    }
}
