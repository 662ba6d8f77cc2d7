//! The `auto` provider: a transport per peer, as UCX and libfabric choose one. Peers on this
//! rank's host (same kernel, same `/dev/shm`, same host name: [`HostMap`]) go through shared
//! memory; the others through the network (tcp). One [`Provider`] to the layers above.
//!
//! - **One matcher.** The sub-providers share one tagged state ([`crate::subcore`]): a
//!   receive is posted here, matched against arrivals from every wire in one order (MPI's
//!   rules hold for wildcard receives), and a rendezvous it pairs with is fetched by the
//!   sub-provider that carried the announcement. Operation numbers come from disjoint ranges,
//!   so completions move from the sub-providers' queues to this one's untranslated (lazily,
//!   whenever the queues are looked at).
//! - **One registration.** A region is allocated by shm (a `/dev/shm` segment) and registered
//!   with tcp over the same memory under the same key, so a host-mate writes it through the
//!   mapping and a remote peer through tcp, each checked against its own table.
//! - **One host, no cost.** When every rank shares this host, only shm is opened and every
//!   call goes straight to it (own matcher, own queues): `auto` equals `shm` there.
//! - **Addresses** carry the host identity and each sub-provider's part ([`address`]), so a
//!   respawned rank learns its peers' hosts from the rendezvous, and `reconnect` routes a
//!   rank that came back on another host to the right sub-provider.
//!
//! Verbs between hosts under `auto` is not wired yet: `REVERB_PROVIDER=verbs` forces it for
//! every peer.

mod address;
mod view;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use self::address::{Address, Part};
use self::view::SubView;
use crate::api::*;
use crate::bootstrap::host::{HostId, HostMap};
use crate::bootstrap::Bootstrap;
use crate::completion::{CompletionQueues, Owner};
use crate::config::TransportConfig;
use crate::error::{Result, TransportError};
use crate::region::Region;
use crate::shm::ShmProvider;
use crate::subcore::SubCore;
use crate::tagged::{self, TaggedHome, TaggedState};
use crate::tagmatch::PostedRecv;
use crate::tcp::TcpProvider;

/// Operation numbers of each part of the job-wide space (2^44 operations each).
const SHM_FIRST_OP: u64 = 1 << 44;
const NET_FIRST_OP: u64 = 2 << 44;
/// The longest `block` sleeps on one sub-provider while the other may get traffic.
const BLOCK_SLICE: Duration = Duration::from_micros(500);

/// Runs `$call` on the sub-provider that carries `$rank`'s traffic, bound to `$p`.
macro_rules! via {
    ($self:ident, $rank:expr, |$p:ident| $call:expr) => {{
        let rank: Rank = $rank;
        let local = $self.is_local(rank);
        match $self.net.as_mut() {
            Some(net) if !local => {
                let $p = &mut net.tcp;
                $call
            }
            _ => {
                let $p = &mut $self.shm;
                $call
            }
        }
    }};
}

/// The network side: the sub-provider and the matcher it shares with shm.
struct Net {
    tcp: TcpProvider,
    tagged: Arc<Mutex<TaggedState>>,
    /// This provider's own queues: receives complete here (sub-providers' completions are
    /// moved in).
    cq: CompletionQueues,
}

/// The `auto` [`Provider`] of one rank (see the module doc).
pub struct AutoProvider {
    config: TransportConfig,
    rank: Rank,
    size: u32,
    host: HostId,
    shm: ShmProvider,
    /// None when every rank is on this host.
    net: Option<Net>,
    /// Whether each rank is on this host (carried by shm).
    local: Vec<bool>,
}

impl AutoProvider {
    /// Exchanges host identities (a collective), then opens shm for this host's ranks and, if
    /// any rank is elsewhere, tcp for the others. Publishes the combined address.
    pub fn open(config: TransportConfig, boot: &mut dyn Bootstrap) -> Result<AutoProvider> {
        let hosts = HostMap::gather(boot, &HostId::configured(&config))?;
        let me = boot.job().rank;
        let local = (0..boot.job().size).map(|r| hosts.same_host(me, r)).collect();
        Self::build(config, boot, local, hosts.hosts() > 1, false)
    }

    /// Opens a respawned rank without a collective: its peers' hosts come from the addresses
    /// they published (a rank without one yet counts as local until `reconnect` says where).
    pub fn rejoin(config: TransportConfig, boot: &mut dyn Bootstrap) -> Result<AutoProvider> {
        let host = HostId::configured(&config);
        let mut local = vec![true; boot.job().size as usize];
        for entry in boot.lookup()? {
            let Some(bytes) = entry.address else { continue };
            let Some(slot) = local.get_mut(entry.rank as usize) else { continue };
            match Address::decode(&bytes, entry.rank) {
                Ok(a) => *slot = a.host == host,
                Err(e) => tracing::warn!("auto: rank {}'s published address: {e}", entry.rank),
            }
        }
        let spans_hosts = local.iter().any(|l| !l);
        Self::build(config, boot, local, spans_hosts, true)
    }

    fn build(
        config: TransportConfig,
        boot: &mut dyn Bootstrap,
        local: Vec<bool>,
        spans_hosts: bool,
        rejoin: bool,
    ) -> Result<AutoProvider> {
        let job = boot.job().clone();
        let host = HostId::configured(&config);
        let tagged = spans_hosts.then(TaggedHome::shared);
        let core = |first_op| match &tagged {
            Some(t) => SubCore { tagged: TaggedHome::Shared(Arc::clone(t)), first_op },
            None => SubCore::default(),
        };
        let (shm_core, net_core) = (core(SHM_FIRST_OP), core(NET_FIRST_OP));
        let mut view = SubView {
            inner: boot,
            part: Part::Shm,
            carries: local.clone(),
            host: host.clone(),
            published: None,
        };
        let shm = match rejoin {
            false => ShmProvider::open_sub(config.clone(), &mut view, shm_core)?,
            true => ShmProvider::rejoin_sub(config.clone(), &mut view, shm_core)?,
        };
        let shm_address = view.published.take().unwrap_or_default();
        let (net, net_address) = match tagged {
            None => (None, Vec::new()),
            Some(tagged) => {
                view.part = Part::Net;
                view.carries = local.iter().map(|l| !l).collect();
                let tcp = match rejoin {
                    false => TcpProvider::open_sub(config.clone(), &mut view, net_core)?,
                    true => TcpProvider::rejoin_sub(config.clone(), &mut view, net_core)?,
                };
                (
                    Some(Net { tcp, tagged, cq: CompletionQueues::new() }),
                    view.published.take().unwrap_or_default(),
                )
            }
        };
        let address = Address { host: host.clone(), shm: shm_address, net: net_address }.encode();
        boot.publish(&address)?;
        Ok(AutoProvider { config, rank: job.rank, size: job.size, host, shm, net, local })
    }

    /// Whether `rank` is on this host (ranks outside the job count as local: shm refuses
    /// them with `InvalidRank`).
    #[inline(always)]
    fn is_local(&self, rank: Rank) -> bool {
        self.local.get(rank as usize).copied().unwrap_or(true)
    }

    /// Moves the sub-providers' completions into this provider's queues.
    fn gather_completions(net: &mut Net, shm: &mut ShmProvider) {
        shm.queues().move_into(&mut net.cq);
        net.tcp.queues().move_into(&mut net.cq);
    }

    /// A receive posted to the shared matcher; a rendezvous it pairs with at once is fetched
    /// by the sub-provider that carried it.
    fn post_shared(
        &mut self,
        owner: Owner,
        source: Source,
        tag: TagMatch,
        buffer: RecvBuffer,
    ) -> Result<OpId> {
        tagged::check_recv(source, &buffer, self.size)?;
        // Liveness is read before the matcher is locked (tcp's takes its own lock).
        let named_dead = matches!(source, Source::Rank(r) if self.peer_state(r) == PeerState::Dead);
        let Some(net) = self.net.as_mut() else { return self.shm.post_recv_for(owner, source, tag, buffer) };
        let (shm, local) = (&self.shm, &self.local);
        let dead = |r: Rank| match source {
            Source::Rank(named) if named == r => named_dead,
            // A network peer's death shows in the fetch's own result.
            _ => local.get(r as usize).copied().unwrap_or(false) && shm.peer_state(r) == PeerState::Dead,
        };
        let op = net.cq.next_op(owner);
        let recv = PostedRecv { op, source, tag, buffer };
        // Never advertised: direct writes are per wire, not wired through `auto` yet.
        let matched = tagged::lock_shared(&net.tagged).post(recv, dead, &mut net.cq, usize::MAX)?;
        if let Some(fetch) = matched {
            via!(self, fetch.source, |p| p.rndv_fetch(fetch));
        }
        Ok(op)
    }

    /// This rank's address, as published to the rendezvous.
    pub fn address(&self) -> Vec<u8> {
        Address { host: self.host.clone(), shm: self.shm.address(), net: self.net_address() }.encode()
    }

    fn net_address(&self) -> Vec<u8> {
        self.net.as_ref().map(|n| n.tcp.address()).unwrap_or_default()
    }
}

impl Provider for AutoProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::AUTO
    }

    fn provider_for(&self, peer: Rank) -> ProviderKind {
        match &self.net {
            Some(net) if !self.is_local(peer) => net.tcp.kind(),
            _ => self.shm.kind(),
        }
    }

    fn capabilities(&self) -> Capabilities {
        match &self.net {
            // What both wires can do (tcp's RMA is not synchronous).
            Some(net) => {
                Capabilities(self.shm.capabilities().0 & net.tcp.capabilities().0) | Capabilities::INTER_NODE
            }
            None => self.shm.capabilities(),
        }
    }

    fn rank(&self) -> Rank {
        self.rank
    }

    fn size(&self) -> u32 {
        self.size
    }

    fn config(&self) -> &TransportConfig {
        &self.config
    }

    fn alloc_region(&mut self, len: usize, access: Access) -> Result<Region> {
        let region = self.shm.alloc_region(len, access)?;
        match self.net.as_mut() {
            Some(net) => Ok(region.with_backing(net.tcp.register_region(&region)?)),
            None => Ok(region),
        }
    }

    fn put_for(&mut self, owner: Owner, rma: Rma<'_>, signal: Signal) -> Result<OpId> {
        via!(self, rma.remote.owner, |p| p.put_for(owner, rma, signal))
    }

    fn put_imm_for(&mut self, owner: Owner, rma: Rma<'_>, imm: u32, signal: Signal) -> Result<OpId> {
        via!(self, rma.remote.owner, |p| p.put_imm_for(owner, rma, imm, signal))
    }

    fn get_for(&mut self, owner: Owner, rma: Rma<'_>, signal: Signal) -> Result<OpId> {
        via!(self, rma.remote.owner, |p| p.get_for(owner, rma, signal))
    }

    fn send_for(&mut self, owner: Owner, dest: Rank, tag: Tag, data: &[u8]) -> Result<OpId> {
        via!(self, dest, |p| p.send_for(owner, dest, tag, data))
    }

    fn send_region_for(
        &mut self,
        owner: Owner,
        dest: Rank,
        tag: Tag,
        region: &Region,
        offset: usize,
        len: usize,
    ) -> Result<OpId> {
        via!(self, dest, |p| p.send_region_for(owner, dest, tag, region, offset, len))
    }

    fn post_recv_for(
        &mut self,
        owner: Owner,
        source: Source,
        tag: TagMatch,
        buffer: RecvBuffer,
    ) -> Result<OpId> {
        match self.net {
            Some(_) => self.post_shared(owner, source, tag, buffer),
            None => self.shm.post_recv_for(owner, source, tag, buffer),
        }
    }

    fn rndv_stats(&self) -> crate::advert::RndvStats {
        match &self.net {
            Some(net) => tagged::lock_shared(&net.tagged).rndv_stats(),
            None => self.shm.rndv_stats(),
        }
    }

    fn peer_state(&self, peer: Rank) -> PeerState {
        match &self.net {
            Some(net) if !self.is_local(peer) => net.tcp.peer_state(peer),
            _ => self.shm.peer_state(peer),
        }
    }

    fn peer_incarnation(&self, peer: Rank) -> Option<u32> {
        match &self.net {
            Some(net) if !self.is_local(peer) => net.tcp.peer_incarnation(peer),
            _ => self.shm.peer_incarnation(peer),
        }
    }

    /// Routes `peer` by the host in its new address (it may have come back elsewhere), then
    /// hands that sub-provider its part.
    fn reconnect(&mut self, peer: Rank, incarnation: u32, address: &[u8]) -> Result<()> {
        let address = Address::decode(address, peer)?;
        let local = address.host == self.host;
        if !local && self.net.is_none() {
            return Err(TransportError::Unsupported(format!(
                "rank {peer} came back on host {}, but this job was opened on one host",
                address.host.name
            )));
        }
        let Some(slot) = self.local.get_mut(peer as usize) else {
            return Err(TransportError::InvalidRank(peer, self.size));
        };
        *slot = local;
        let part = if local { Part::Shm } else { Part::Net };
        via!(self, peer, |p| p.reconnect(peer, incarnation, address.part(part)))
    }

    fn progress(&mut self) -> Result<()> {
        let Some(net) = self.net.as_mut() else { return self.shm.progress() };
        // Both wires move every call; the first error is reported, the other kept for later.
        let shm = self.shm.progress();
        let tcp = net.tcp.progress();
        shm.and(tcp)
    }

    fn block(&mut self, timeout: Duration) -> Result<()> {
        let Some(net) = self.net.as_mut() else { return self.shm.block(timeout) };
        Self::gather_completions(net, &mut self.shm);
        if net.cq.any_queued() {
            return Ok(());
        }
        // Neither wire can wake the other's sleep: short turns on each, within `timeout`.
        let start = Instant::now();
        self.shm.block(timeout.min(BLOCK_SLICE))?;
        let left = timeout.saturating_sub(start.elapsed());
        net.tcp.block(left.min(BLOCK_SLICE))
    }

    fn queues(&mut self) -> &mut CompletionQueues {
        match self.net.as_mut() {
            Some(net) => {
                Self::gather_completions(net, &mut self.shm);
                &mut net.cq
            }
            None => self.shm.queues(),
        }
    }

    fn open_owner(&mut self) -> Result<Owner> {
        let Some(net) = self.net.as_mut() else { return self.shm.open_owner() };
        // Opened in every queue set, in step, so an owner has one number everywhere.
        let owner = net.cq.open()?;
        for (name, sub) in [("shm", self.shm.open_owner()?), ("tcp", net.tcp.open_owner()?)] {
            if sub != owner {
                return Err(TransportError::Config(format!(
                    "auto: owner {owner:?} opened as {sub:?} in {name}"
                )));
            }
        }
        Ok(owner)
    }

    fn close_owner(&mut self, owner: Owner) {
        self.shm.close_owner(owner);
        if let Some(net) = self.net.as_mut() {
            net.tcp.close_owner(owner);
            net.cq.close(owner);
        }
    }

    fn route_remote(&mut self, owner: Owner) {
        self.shm.route_remote(owner);
        if let Some(net) = self.net.as_mut() {
            net.tcp.route_remote(owner);
            net.cq.route_remote(owner);
        }
    }

    fn completions_of(&mut self, owner: Owner) -> &mut VecDeque<Completion> {
        self.queues().of(owner)
    }
}
