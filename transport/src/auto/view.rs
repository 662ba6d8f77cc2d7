//! A sub-provider's view of the job's bootstrap: collectives pass through (every rank opens
//! the same sub-providers in the same order, so they line up), but the addresses it sees are
//! only those of the ranks it carries (others read as empty: "reached another way"), and what
//! it publishes is kept for the `auto` provider to publish with the others' parts.

use std::net::IpAddr;
use std::time::Duration;

use super::address::{Address, Part};
use crate::api::Rank;
use crate::bootstrap::host::HostId;
use crate::bootstrap::{Bootstrap, JobInfo, PeerAddress, Rejoin};
use crate::error::{Result, TransportError};

pub(crate) struct SubView<'a> {
    pub inner: &'a mut dyn Bootstrap,
    /// Which part of a published `auto` address is this sub-provider's.
    pub part: Part,
    /// Whether this sub-provider carries the rank's traffic, by rank (for `allgather`).
    pub carries: Vec<bool>,
    /// This rank's host: on `lookup`, the sub-provider carries ranks whose host test says so.
    pub host: HostId,
    /// What the sub-provider published.
    pub published: Option<Vec<u8>>,
}

impl SubView<'_> {
    /// Whether this sub-provider carries a rank on `host`.
    fn carries_host(&self, host: &HostId) -> bool {
        (*host == self.host) == (self.part == Part::Shm)
    }
}

impl Bootstrap for SubView<'_> {
    fn job(&self) -> &JobInfo {
        self.inner.job()
    }

    fn local_ip(&self) -> Option<IpAddr> {
        self.inner.local_ip()
    }

    fn allgather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let mut all = self.inner.allgather(data)?;
        for (rank, entry) in all.iter_mut().enumerate() {
            if !self.carries.get(rank).copied().unwrap_or(false) {
                entry.clear();
            }
        }
        Ok(all)
    }

    fn barrier(&mut self) -> Result<()> {
        self.inner.barrier()
    }

    fn publish(&mut self, address: &[u8]) -> Result<()> {
        self.published = Some(address.to_vec());
        Ok(())
    }

    /// The ranks' parts of their published `auto` addresses; None for ranks on hosts this
    /// sub-provider does not carry, or whose address does not decode.
    fn lookup(&mut self) -> Result<Vec<PeerAddress>> {
        let mut entries = self.inner.lookup()?;
        for entry in &mut entries {
            entry.address =
                entry.address.take().and_then(|bytes| match Address::decode(&bytes, entry.rank) {
                    Ok(a) if self.carries_host(&a.host) => Some(a.part(self.part).to_vec()),
                    Ok(_) => None,
                    Err(e) => {
                        tracing::warn!("auto: rank {}'s published address: {e}", entry.rank);
                        None
                    }
                });
        }
        Ok(entries)
    }

    fn poll_rejoins(&mut self) -> Result<Vec<Rejoin>> {
        Err(TransportError::Unsupported("poll_rejoins while a sub-provider opens".into()))
    }

    fn wait_rejoin(&mut self, _rank: Rank, _timeout: Duration) -> Result<Rejoin> {
        Err(TransportError::Unsupported("wait_rejoin while a sub-provider opens".into()))
    }
}
