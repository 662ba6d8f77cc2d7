//! Bootstrap: who am I in the job (rank, size, node) and an out-of-band all-gather that
//! providers use to exchange their addresses. The TCP rendezvous at `REVERB_ROOT` is the
//! implementation; every connection presents `REVERB_JOB_TOKEN`.
//!
//! - [`env`]: [`JobInfo::from_env`] (launcher, Slurm, Open MPI, PMI) and [`BootParams`];
//! - [`wire`]: the framed, versioned protocol;
//! - [`tcp`]: [`BootServer`] and the [`TcpBootstrap`] client.

pub mod env;
pub mod tcp;
pub mod wire;

pub use env::{vars, BootParams};
pub use tcp::{BootServer, ServerOptions, TcpBootstrap};

use crate::api::Rank;
use crate::error::Result;

/// Where this process sits in the job, read from the launcher's or a resource manager's env.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    pub rank: Rank,
    pub size: u32,
    /// Simulated or real node index; ranks of one node share a failure fate.
    pub node: u32,
    pub local_rank: u32,
    pub ranks_per_node: u32,
    /// Names this job's shared-memory segments; unique per launch.
    pub job_id: String,
    /// Bumped each time a rank is respawned after a failure.
    pub incarnation: u32,
}

impl JobInfo {
    pub fn nodes(&self) -> u32 {
        self.size.div_ceil(self.ranks_per_node.max(1))
    }

    pub fn node_of(&self, rank: Rank) -> u32 {
        rank / self.ranks_per_node.max(1)
    }
}

/// Out-of-band exchange among all ranks of a job.
pub trait Bootstrap: Send {
    fn job(&self) -> &JobInfo;
    /// Every rank contributes `data`; all receive every contribution, indexed by rank.
    fn allgather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>>;
    fn barrier(&mut self) -> Result<()> {
        self.allgather(&[]).map(|_| ())
    }
}
