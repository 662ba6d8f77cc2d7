//! Bootstrap: who am I in the job (rank, size, node) and an out-of-band all-gather that
//! providers use to exchange their addresses. The TCP rendezvous at `REVERB_ROOT` is the
//! implementation; every connection presents `REVERB_JOB_TOKEN`.
//!
//! - [`env`](mod@env): [`JobInfo::from_env`] (launcher, Slurm, Open MPI, PMI) and [`BootParams`];
//! - [`wire`]: the framed, versioned protocol;
//! - [`tcp`]: [`BootServer`] and the [`TcpBootstrap`] client;
//! - [`host`]: which ranks share a host ([`HostMap`], one allgather of [`HostId`]s).

pub mod env;
pub mod host;
pub mod tcp;
// Documented with the codec work.
#[allow(missing_docs)]
pub mod wire;

pub use env::{vars, BootParams};
pub use host::{HostId, HostMap};
pub use tcp::{
    traffic, AgentConn, AgentIntro, BootServer, FailureReporter, ServerOptions, TcpBootstrap, Traffic,
};

use std::net::IpAddr;
use std::time::Duration;

use crate::api::Rank;
use crate::error::{Result, TransportError};

/// Where this process sits in the job, read from the launcher's or a resource manager's env.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    /// This process's rank, `0..size`.
    pub rank: Rank,
    /// Ranks in the job (at least 1).
    pub size: u32,
    /// Simulated or real node index; ranks of one node share a failure fate.
    pub node: u32,
    /// Index of this rank among its node's ranks.
    pub local_rank: u32,
    /// Ranks per node (the launcher's placement; 0 is read as 1).
    pub ranks_per_node: u32,
    /// Names this job's shared-memory segments; unique per launch.
    pub job_id: String,
    /// Bumped each time a rank is respawned after a failure.
    pub incarnation: u32,
}

impl JobInfo {
    /// A job of this one rank on one node, first incarnation, its segments named `job_id`.
    pub fn single(job_id: impl Into<String>) -> JobInfo {
        JobInfo {
            rank: 0,
            size: 1,
            node: 0,
            local_rank: 0,
            ranks_per_node: 1,
            job_id: job_id.into(),
            incarnation: 0,
        }
    }

    /// Nodes in the job: `size / ranks_per_node`, rounded up.
    pub fn nodes(&self) -> u32 {
        self.size.div_ceil(self.ranks_per_node.max(1))
    }

    /// The node `rank` runs on under block placement (`rank / ranks_per_node`).
    pub fn node_of(&self, rank: Rank) -> u32 {
        rank / self.ranks_per_node.max(1)
    }
}

/// A rank's provider address as the rendezvous knows it (answer to [`Bootstrap::lookup`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerAddress {
    /// The rank.
    pub rank: Rank,
    /// Its current incarnation (0 for the original process).
    pub incarnation: u32,
    /// None while that incarnation has not published (not started yet, or failed).
    pub address: Option<Vec<u8>>,
    /// The rendezvous saw that incarnation fail (its connection dropped, or the launcher
    /// marked it failed): not merely a rank that has not published yet.
    pub lost: bool,
    /// Gone for good, the job going on without it (the launcher retired it: a copy whose
    /// death partial redundancy masked); `lost` too.
    pub retired: bool,
}

/// A respawned rank rejoined the job at `incarnation` and published `address`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejoin {
    /// The respawned rank.
    pub rank: Rank,
    /// Its new incarnation.
    pub incarnation: u32,
    /// Its provider address, for [`crate::Provider::reconnect`].
    pub address: Vec<u8>,
}

fn unsupported(what: &str) -> TransportError {
    TransportError::Unsupported(format!("{what} on this bootstrap"))
}

/// What a rank contributes to its job's last barrier ([`final_barrier`]). A recovery's first
/// collective can land in the same round as ranks that finished their work (both are the
/// next collective of their ranks); the mark lets each side tell.
pub const FINAL_BARRIER_MARK: &[u8] = b"reverb:final-barrier";

/// Rounds [`allgather_past_final_barrier`] repeats before giving up: one per rank is more
/// than enough, as each repeated round moves every finishing rank into the recovery.
const FINAL_BARRIER_RETRIES: usize = 64;

/// The job's last barrier. `Ok(true)` when every rank was in it; `Ok(false)` when some ranks
/// were in a recovery collective instead: the caller must join that recovery (whose ranks
/// repeat the round, see [`allgather_past_final_barrier`]) and then try again.
pub fn final_barrier(boot: &mut dyn Bootstrap) -> Result<bool> {
    let all = boot.allgather(FINAL_BARRIER_MARK)?;
    Ok(all.iter().all(|c| c == FINAL_BARRIER_MARK))
}

/// `allgather` for the first collective of a recovery (survivors and restarted ranks): a
/// round in which some ranks were in their final barrier is repeated, since those ranks
/// learn of the recovery from that round and join it at the next one.
pub fn allgather_past_final_barrier(boot: &mut dyn Bootstrap, data: &[u8]) -> Result<Vec<Vec<u8>>> {
    for _ in 0..FINAL_BARRIER_RETRIES {
        let all = boot.allgather(data)?;
        if !all.iter().any(|c| c == FINAL_BARRIER_MARK) {
            return Ok(all);
        }
    }
    Err(TransportError::Bootstrap(format!(
        "ranks stayed in their final barrier for {FINAL_BARRIER_RETRIES} rounds of a recovery collective"
    )))
}

/// The most bytes one `allgather` may return in all (its parts with their 4-byte lengths and a
/// 12-byte header): a collective that may gather more splits it into rounds.
pub const MAX_GATHER_BYTES: usize = wire::MAX_FRAME;

/// Out-of-band exchange among all ranks of a job.
///
/// Collectives (`allgather`, `barrier`) need every rank: they fail with `PeerDead` while a
/// rank is lost and work again once every lost rank has rejoined (respawned ranks join the
/// survivors' round). Recovery itself uses the point-to-point calls: each rank `publish`es its provider address;
/// a respawned rank `lookup`s the survivors' addresses; survivors learn of the respawned rank
/// through `poll_rejoins` / `wait_rejoin`.
pub trait Bootstrap: Send {
    /// This process's place in the job.
    fn job(&self) -> &JobInfo;
    /// The local IP address this rank reaches the rendezvous from: the interface the other
    /// ranks can reach it on, where the tcp provider listens by default. None without a
    /// network connection (in-process bootstraps).
    fn local_ip(&self) -> Option<IpAddr> {
        None
    }
    /// Every rank contributes `data`; all receive every contribution, indexed by rank.
    fn allgather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>>;
    /// Returns once every rank has entered the barrier (an `allgather` of nothing).
    fn barrier(&mut self) -> Result<()> {
        self.allgather(&[]).map(|_| ())
    }
    /// Records this rank's provider address for its incarnation. Fire and forget: this
    /// rank's later calls are ordered after it, and so is every rank's view once a collective
    /// this rank joins after publishing has completed. A bootstrap without recovery support
    /// ignores it.
    fn publish(&mut self, _address: &[u8]) -> Result<()> {
        Ok(())
    }
    /// Every rank's current incarnation and published address (bounded by the boot timeout).
    fn lookup(&mut self) -> Result<Vec<PeerAddress>> {
        Err(unsupported("lookup"))
    }
    /// Rejoins announced since the last call, without blocking.
    fn poll_rejoins(&mut self) -> Result<Vec<Rejoin>> {
        Err(unsupported("poll_rejoins"))
    }
    /// Waits at most `timeout` for `rank` to rejoin; other announcements stay queued for
    /// `poll_rejoins`. `Err(Timeout)` if it did not.
    fn wait_rejoin(&mut self, _rank: Rank, _timeout: Duration) -> Result<Rejoin> {
        Err(unsupported("wait_rejoin"))
    }
}
