//! The `auto` provider: a transport per peer, as UCX and libfabric choose one. Peers on this
//! rank's host (same kernel, same `/dev/shm`, same host name: [`HostMap`]) go through shared
//! memory; the others through the network (verbs or tcp). One [`Provider`] to the layers above.
//!
//! - **One matcher.** The sub-providers share one tagged state (`subcore.rs`): a
//!   receive is posted here, matched against arrivals from every wire in one order (MPI's
//!   rules hold for wildcard receives), and a rendezvous it pairs with is fetched by the
//!   sub-provider that carried the announcement. Operation numbers come from disjoint ranges,
//!   so completions move from the sub-providers' queues to this one's untranslated (lazily,
//!   whenever the queues are looked at).
//! - **One registration.** A region is allocated by shm (a `/dev/shm` segment) and registered
//!   with the network provider over the same memory under one key (keys share one layout:
//!   incarnation, shm's table index, then verbs' rkey or random bits), so a host-mate writes it
//!   through the mapping and a remote peer through the NIC or tcp, each checked against its
//!   own registration.
//! - **Between hosts** verbs where every rank has a usable RDMA device, else tcp
//!   (`REVERB_AUTO_NET` forces one; `net.rs`).
//! - **One host, no cost.** When every rank shares this host, [`open`] returns the shm
//!   provider itself (and a respawned rank of such a job rejoins on shm): `auto` is `shm`
//!   there, to the instruction.
//! - **Addresses** carry the host identity and each sub-provider's part (`address.rs`), so a
//!   respawned rank learns its peers' hosts from the rendezvous, and `reconnect` routes a
//!   rank that came back on another host to the right sub-provider.

mod address;
mod net;
mod view;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use self::address::{Address, Part};
use self::net::NetProvider;
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

/// Operation numbers of each part of the job-wide space (2^44 operations each).
const SHM_FIRST_OP: u64 = 1 << 44;
const NET_FIRST_OP: u64 = 2 << 44;
/// The longest `block` sleeps on one sub-provider while the other may get traffic.
const BLOCK_SLICE: Duration = Duration::from_micros(500);

/// Runs `$call` on the sub-provider that carries `$rank`'s traffic, bound to `$p`.
macro_rules! via {
    ($self:ident, $rank:expr, |$p:ident| $call:expr) => {{
        if $self.is_local($rank) {
            let $p = &mut $self.shm;
            $call
        } else {
            let $p = &mut *$self.net;
            $call
        }
    }};
}

/// Opens the provider of a job: the shm provider itself when every rank shares this host (one
/// allgather of host identities says so), an [`AutoProvider`] otherwise.
pub fn open(mut config: TransportConfig, boot: &mut dyn Bootstrap) -> Result<Box<dyn Provider>> {
    let hosts = HostMap::gather(boot, &HostId::configured(&config))?;
    let me = boot.job().rank;
    let local: Vec<bool> = (0..boot.job().size).map(|r| hosts.same_host(me, r)).collect();
    config.oversubscribed = on_this_host(&local, config.host_cpus);
    if hosts.hosts() <= 1 {
        return Ok(Box::new(ShmProvider::open(config, boot)?));
    }
    let flags = boot.allgather(&[u8::from(net::verbs_usable(&config))])?;
    let kind = net::choose(&config, flags.iter().all(|f| f[..] == [1]))?;
    Ok(Box::new(AutoProvider::build(config, boot, local, kind, false)?))
}

/// Opens a respawned rank without a collective. Its peers' hosts come from the addresses they
/// published: none in `auto`'s form means a one-host job, which runs on plain shm. A rank
/// without an address yet counts as local until `reconnect` says where it is.
pub fn rejoin(config: TransportConfig, boot: &mut dyn Bootstrap) -> Result<Box<dyn Provider>> {
    let host = HostId::configured(&config);
    let mut local = vec![true; boot.job().size as usize];
    let mut net_kind = None;
    for entry in boot.lookup()? {
        let Some(bytes) = entry.address.filter(|b| Address::is_auto(b)) else { continue };
        let Some(slot) = local.get_mut(entry.rank as usize) else { continue };
        match Address::decode(&bytes, entry.rank) {
            Ok(a) => {
                *slot = a.host == host;
                net_kind = Some(a.net_kind);
            }
            Err(e) => tracing::warn!("auto: rank {}'s published address: {e}", entry.rank),
        }
    }
    let mut config = config;
    config.oversubscribed = on_this_host(&local, config.host_cpus);
    match net_kind {
        None => Ok(Box::new(ShmProvider::rejoin(config, boot)?)),
        Some(kind) => Ok(Box::new(AutoProvider::build(config, boot, local, kind, true)?)),
    }
}

/// Whether the ranks `local` marks (those on this host) outnumber its CPUs (`host_cpus`).
fn on_this_host(local: &[bool], host_cpus: Option<u32>) -> bool {
    crate::spinwait::oversubscribed(local.iter().filter(|&&l| l).count() as u32, host_cpus)
}

/// The `auto` [`Provider`] of one rank of a job that spans hosts (see the module doc).
pub struct AutoProvider {
    config: TransportConfig,
    rank: Rank,
    size: u32,
    host: HostId,
    shm: ShmProvider,
    /// Carries the ranks on other hosts (verbs or tcp).
    net: Box<dyn NetProvider>,
    /// The matcher both sub-providers share.
    tagged: Arc<Mutex<TaggedState>>,
    /// This provider's queues: receives complete here, the sub-providers' completions are
    /// moved in.
    cq: CompletionQueues,
    /// Whether each rank is on this host (carried by shm).
    local: Vec<bool>,
}

impl AutoProvider {
    /// Opens shm for this host's ranks and the network provider for the others, each through
    /// a view of `boot` that shows it only its own ranks, and publishes the combined address.
    fn build(
        config: TransportConfig,
        boot: &mut dyn Bootstrap,
        local: Vec<bool>,
        net_kind: ProviderKind,
        rejoin: bool,
    ) -> Result<AutoProvider> {
        let job = boot.job().clone();
        let host = HostId::configured(&config);
        let tagged = TaggedHome::shared();
        let share = |first_op| SubCore { tagged: TaggedHome::Shared(Arc::clone(&tagged)), first_op };
        let mut view = SubView {
            inner: boot,
            part: Part::Shm,
            carries: local.clone(),
            host: host.clone(),
            published: None,
        };
        let shm = match rejoin {
            false => ShmProvider::open_sub(config.clone(), &mut view, share(SHM_FIRST_OP))?,
            true => ShmProvider::rejoin_sub(config.clone(), &mut view, share(SHM_FIRST_OP))?,
        };
        let shm_address = view.published.take().unwrap_or_default();
        view.part = Part::Net;
        view.carries = local.iter().map(|l| !l).collect();
        let net = net::open(net_kind, config.clone(), &mut view, share(NET_FIRST_OP), rejoin)?;
        let net_address = view.published.take().unwrap_or_default();
        boot.publish(&Address { host: host.clone(), shm: shm_address, net_kind, net: net_address }.encode())?;
        let cq = CompletionQueues::new();
        Ok(AutoProvider { config, rank: job.rank, size: job.size, host, shm, net, tagged, cq, local })
    }

    /// Whether `rank` is on this host (ranks outside the job count as local: shm refuses
    /// them with `InvalidRank`).
    #[inline(always)]
    fn is_local(&self, rank: Rank) -> bool {
        self.local.get(rank as usize).copied().unwrap_or(true)
    }

    /// Moves the sub-providers' completions into this provider's queues.
    fn gather_completions(&mut self) {
        self.shm.queues().move_into(&mut self.cq);
        self.net.queues().move_into(&mut self.cq);
    }
}

impl Provider for AutoProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::AUTO
    }

    fn provider_for(&self, peer: Rank) -> ProviderKind {
        if self.is_local(peer) {
            self.shm.kind()
        } else {
            self.net.kind()
        }
    }

    /// What both wires can do (RMA through the network is not synchronous), between hosts.
    fn capabilities(&self) -> Capabilities {
        Capabilities(self.shm.capabilities().0 & self.net.capabilities().0) | Capabilities::INTER_NODE
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
        let reg = self.net.register(&region)?;
        // A region no peer may access needs no network key (a NIC may give it rkey 0).
        let remote = access.allows(Access::REMOTE_READ) || access.allows(Access::REMOTE_WRITE);
        let key = match reg.key_low {
            Some(low) if remote => self.shm.rekey(&region, low)?,
            _ => region.remote().key,
        };
        Ok(region.also_registered(reg.backing, reg.local_key, key))
    }

    /// With the network side only: the ranks on this host map what shm allocates instead.
    unsafe fn register_memory(&mut self, ptr: *mut u8, len: usize, access: Access) -> Result<Region> {
        // SAFETY: the caller's promise passes on.
        unsafe { self.net.register_memory(ptr, len, access) }
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

    unsafe fn send_lent_for(&mut self, owner: Owner, dest: Rank, tag: Tag, data: &[u8]) -> Result<OpId> {
        // SAFETY: the caller's lending contract passes on unchanged.
        via!(self, dest, |p| unsafe { p.send_lent_for(owner, dest, tag, data) })
    }

    fn lends_to(&self, dest: Rank, len: usize) -> bool {
        self.is_local(dest) && self.shm.lends_to(dest, len)
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

    /// Posted to the shared matcher; a rendezvous it pairs with at once is fetched by the
    /// sub-provider that carried the announcement.
    fn peek_arrived(&mut self, source: Source, tag: TagMatch) -> Result<Option<(Rank, Tag, usize)>> {
        Ok(tagged::lock_shared(&self.tagged).peek(source, tag))
    }

    fn take_eager_into(
        &mut self,
        source: Source,
        tag: TagMatch,
        buf: &mut [u8],
        accept: &dyn Fn(Tag, usize) -> bool,
    ) -> Result<EagerTake> {
        Ok(tagged::lock_shared(&self.tagged).take_eager_into(source, tag, buf, accept))
    }

    fn send_inline(&mut self, dest: Rank, tag: Tag, data: &[u8]) -> Result<bool> {
        match self.is_local(dest) {
            true => self.shm.send_inline(dest, tag, data),
            false => Ok(false),
        }
    }

    fn post_recv_for(
        &mut self,
        owner: Owner,
        source: Source,
        tag: TagMatch,
        buffer: RecvBuffer,
    ) -> Result<OpId> {
        tagged::check_recv(source, &buffer, self.size)?;
        // Liveness is read before the matcher is locked (tcp's takes its own lock first).
        let named_dead = matches!(source, Source::Rank(r) if self.peer_state(r) == PeerState::Dead);
        let (shm, local) = (&self.shm, &self.local);
        let dead = |r: Rank| match source {
            Source::Rank(named) if named == r => named_dead,
            // A network peer's death shows in the fetch's own result.
            _ => local.get(r as usize).copied().unwrap_or(false) && shm.peer_state(r) == PeerState::Dead,
        };
        let op = self.cq.next_op(owner);
        let recv = PostedRecv { op, source, tag, buffer };
        // Never advertised: direct writes into a buffer are per wire, not wired through auto.
        let matched = tagged::lock_shared(&self.tagged).post(recv, dead, &mut self.cq, usize::MAX)?;
        if let Some(fetch) = matched {
            if self.is_local(fetch.source) {
                self.shm.rndv_fetch(fetch);
            } else {
                self.net.fetch(fetch);
            }
        }
        Ok(op)
    }

    fn cancel_recv(&mut self, op: OpId) -> Result<bool> {
        // Receives are posted in the shared matcher, under auto's operation numbers.
        Ok(tagged::lock_shared(&self.tagged).cancel_recv(op))
    }

    fn rndv_stats(&self) -> crate::advert::RndvStats {
        tagged::lock_shared(&self.tagged).rndv_stats()
    }

    fn peer_state(&self, peer: Rank) -> PeerState {
        if self.is_local(peer) {
            self.shm.peer_state(peer)
        } else {
            self.net.peer_state(peer)
        }
    }

    fn peer_incarnation(&self, peer: Rank) -> Option<u32> {
        if self.is_local(peer) {
            self.shm.peer_incarnation(peer)
        } else {
            self.net.peer_incarnation(peer)
        }
    }

    /// Routes `peer` by the host in its new address (it may have come back elsewhere), then
    /// hands that sub-provider its part.
    fn reconnect(&mut self, peer: Rank, incarnation: u32, address: &[u8]) -> Result<()> {
        let address = Address::decode(address, peer)?;
        let local = address.host == self.host;
        let Some(slot) = self.local.get_mut(peer as usize) else {
            return Err(TransportError::InvalidRank(peer, self.size));
        };
        *slot = local;
        let part = if local { Part::Shm } else { Part::Net };
        via!(self, peer, |p| p.reconnect(peer, incarnation, address.part(part)))
    }

    fn progress(&mut self) -> Result<()> {
        // Both wires move every call; the first error is reported, the other's next time.
        let shm = self.shm.progress();
        let net = self.net.progress_beside();
        shm.and(net)
    }

    fn block(&mut self, timeout: Duration) -> Result<()> {
        self.gather_completions();
        if self.cq.any_queued() {
            return Ok(());
        }
        // Neither wire can wake the other's sleep: short turns on each, within `timeout`.
        let start = Instant::now();
        self.shm.block(timeout.min(BLOCK_SLICE))?;
        let left = timeout.saturating_sub(start.elapsed());
        self.net.block(left.min(BLOCK_SLICE))
    }

    fn queues(&mut self) -> &mut CompletionQueues {
        self.gather_completions();
        &mut self.cq
    }

    fn open_owner(&mut self) -> Result<Owner> {
        // Opened in every queue set, in step, so an owner has one number everywhere.
        let owner = self.cq.open()?;
        for (name, sub) in [("shm", self.shm.open_owner()?), ("network", self.net.open_owner()?)] {
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
        self.net.close_owner(owner);
        self.cq.close(owner);
    }

    fn route_remote(&mut self, owner: Owner) {
        self.shm.route_remote(owner);
        self.net.route_remote(owner);
        self.cq.route_remote(owner);
    }

    fn completions_of(&mut self, owner: Owner) -> &mut VecDeque<Completion> {
        self.queues().of(owner)
    }
}
