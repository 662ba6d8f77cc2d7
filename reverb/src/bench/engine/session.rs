//! [`Session`]: one rank's provider, bootstrap, registered regions and the peer's descriptors.

use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use reverb_transport::bootstrap::host::HostId;
use reverb_transport::bootstrap::{HostMap, TcpBootstrap};
use reverb_transport::codec::{Reader, Writer};
use reverb_transport::{Access, Bootstrap, Provider, Rank, Region, RemoteRegion, TransportConfig};

use super::completions::Events;
use super::{Role, WaitStyle, CTRL_DEPTH};

/// One rank's benchmark resources: the provider, the bootstrap, two registered regions and the
/// peer's descriptors of its two regions.
pub struct Session {
    pub(super) provider: Box<dyn Provider>,
    pub(super) boot: Box<dyn Bootstrap>,
    pub(super) role: Role,
    pub(super) peer: Rank,
    /// Source of puts and sends, and the region the peer's gets read.
    pub(super) src: Region,
    /// Target of the peer's puts and sends, and of this rank's gets.
    pub(super) dst: Region,
    pub(super) peer_src: RemoteRegion,
    pub(super) peer_dst: RemoteRegion,
    pub(super) capacity: usize,
    pub(super) wait: WaitStyle,
    pub(super) timeout: Duration,
    pub(super) ev: Events,
}

/// What the pair contributes to its last barrier, so ranks standing by know it is the last.
const FINISHED: &[u8] = b"reverb-bench:finished";

impl Session {
    /// Collective: where the two ranks run and which provider carries them, as one line
    /// ("rank 0 on host a, rank 1 on host b (2 hosts); provider tcp"). For `--verbose`.
    pub fn describe_hosts(&mut self) -> Result<String> {
        let hosts = HostMap::gather(self.boot.as_mut(), &HostId::configured(self.provider.config()))
            .context("exchanging host identities")?;
        let name = |r: Rank| hosts.host_of(r).and_then(|h| hosts.host(h)).map_or("?", |h| h.name.as_str());
        let (a, b) = match self.role {
            Role::Initiator => (self.provider.rank(), self.peer),
            Role::Responder => (self.peer, self.provider.rank()),
        };
        Ok(format!(
            "rank {a} on host {}, rank {b} on host {} ({} host{}); provider {} for the peer",
            name(a),
            name(b),
            hosts.hosts(),
            if hosts.hosts() == 1 { "" } else { "s" },
            self.provider.provider_for(self.peer)
        ))
    }

    /// Connects to the job's bootstrap, opens the provider and exchanges region descriptors.
    pub fn join(
        config: &TransportConfig,
        capacity: usize,
        wait: WaitStyle,
        timeout: Duration,
        pair: (Rank, Rank),
    ) -> Result<Session> {
        let boot = TcpBootstrap::connect_from_env().context("connecting to the job's bootstrap")?;
        let mut boot: Box<dyn Bootstrap> = Box::new(boot);
        let job = boot.job().clone();
        let mut provider = reverb_transport::open(config, boot.as_mut())
            .with_context(|| format!("opening the {} provider", config.provider))?;
        let capacity = capacity.max(1);
        let src =
            provider.alloc_region(capacity, Access::REMOTE_READ).context("registering the source region")?;
        let dst =
            provider.alloc_region(capacity, Access::REMOTE_RW).context("registering the target region")?;
        let mut mine = Vec::with_capacity(2 * RemoteRegion::WIRE_LEN);
        let mut w = Writer::new(&mut mine);
        src.remote().write(&mut w);
        dst.remote().write(&mut w);
        let all = boot.allgather(&mine).context("exchanging region descriptors")?;
        if pair.0.max(pair.1) >= job.size {
            bail!("--pair {},{}: this job has {} ranks", pair.0, pair.1, job.size);
        }
        // A rank outside the pair stands by (see `stand_by`); its "peer" is never used.
        let peer = if job.rank == pair.0 { pair.1 } else { pair.0 };
        let theirs =
            all.get(peer as usize).ok_or_else(|| anyhow!("rank {peer} sent no region descriptors"))?;
        let mut r = Reader::new(theirs, "bench region descriptors");
        let (peer_src, peer_dst) = (RemoteRegion::read(&mut r)?, RemoteRegion::read(&mut r)?);
        r.finish()?;
        let role = if job.rank == pair.0 { Role::Initiator } else { Role::Responder };
        let mut session = Session {
            provider,
            boot,
            role,
            peer,
            src,
            dst,
            peer_src,
            peer_dst,
            capacity,
            wait,
            timeout,
            ev: Events::default(),
        };
        for _ in 0..CTRL_DEPTH {
            session.post_ctrl_recv()?;
        }
        // Control receives are posted on both sides before anyone sends one.
        session.boot.barrier().context("bootstrap barrier after setup")?;
        Ok(session)
    }

    pub fn role(&self) -> Role {
        self.role
    }

    /// The provider's name, and for `auto` the one it chose for the peer ("auto (shm)").
    pub fn provider_label(&self) -> String {
        let (kind, carrier) = (self.provider.kind(), self.provider.provider_for(self.peer));
        if kind == carrier {
            kind.to_string()
        } else {
            format!("{kind} ({carrier})")
        }
    }

    pub fn provider(&self) -> &dyn Provider {
        self.provider.as_ref()
    }

    /// The provider and the bootstrap, for tests that layer a library on them (bench ckpt).
    pub fn parts(&mut self) -> (&mut dyn Provider, &mut dyn Bootstrap) {
        (self.provider.as_mut(), self.boot.as_mut())
    }

    /// Registered bytes per region (the largest message size).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Ends the session in step with the peer, so neither side tears down early.
    pub fn finish(mut self) -> Result<()> {
        self.boot.allgather(FINISHED).context("final bootstrap barrier")?;
        Ok(())
    }

    /// A rank outside the measuring pair: joins the pair's barriers (bootstrap collectives
    /// span the job) until their last one, keeping its provider open for them meanwhile.
    pub fn stand_by(mut self) -> Result<()> {
        loop {
            let all = self.boot.allgather(&[]).context("standing by in the pair's barriers")?;
            if all.iter().any(|c| c == FINISHED) {
                return Ok(());
            }
        }
    }

    pub(super) fn check_size(&self, size: usize) -> Result<()> {
        if size == 0 || size > self.capacity {
            bail!("message size {size} is outside 1..={}", self.capacity);
        }
        Ok(())
    }
}
