//! Coordinated in-memory checkpoints over the `Provider` trait: level 1 (local copy), level 2
//! (buddy copy by one-sided puts) and level 3 (Reed-Solomon parity on other nodes), and restore
//! from whichever level still holds a valid copy.
//!
//! Every copy lives in a double-buffered slot pair. A checkpoint writes the slot that does not
//! hold the last committed epoch: body first, then, once every put has completed, the 64-byte
//! header (the epoch word). A crash at any point leaves the committed slot untouched. The team
//! then agrees (see `team`): the epoch is committed on every live member or on none (a leader
//! dying mid-release can split that; survivors then take [`Checkpointer::recovery_epoch`], the
//! minimum, which both slots still hold).
//!
//! Epoch `e` of a checkpoint:
//! 1. zero the old header of the target slot, locally and on the buddy;
//! 2. per payload chunk: copy into the local slot (level 1), CRC32C, put to the buddy's slot
//!    (level 2) while the chunk is still in cache; then the chunk table; once every put has
//!    completed, the header;
//! 3. each group member reports to its group's encoder that its level 1 is written (no
//!    job-wide barrier here: an encoder waits for its own group only);
//! 4. each group's encoder gets its members' level-1 images, encodes inline (the hook for a
//!    logger-core offload is `encode_group`), writes its parity block and puts the others;
//! 5. agree (one job-wide round): every level and every parity block is written; committed.
//!
//! Submodules by step: `setup` (slots and descriptors), `write` with `sink` (levels 1-2, the
//! agreement) and `encode` (level 3), `restore` with `restore_parity`, `transfer` (windowed
//! RMA), `parity_meta` (the parity image's metadata), `fault` (test hooks).

mod encode;
mod fault;
mod parity_meta;
mod restore;
mod restore_parity;
mod setup;
mod sink;
mod transfer;
mod write;

use std::time::Duration;

use reverb_transport::{Access, Owner, Provider, Rank, Region};

use crate::error::CkptError;
use crate::image::{self, Epoch, RestoredImage};
use crate::placement::{Placement, RsLayout};
use crate::team;
use setup::PeerRegions;

/// Where the protected data of a job is kept, and the bounds of every wait.
#[derive(Debug, Clone)]
pub struct CkptConfig {
    /// Largest checkpoint image of one rank (bytes); every slot is this big.
    pub slot_len: usize,
    /// Payload bytes covered by one CRC32C.
    pub chunk_len: usize,
    /// Bytes moved by one put or get.
    pub transfer_len: usize,
    /// Level 2: keep a buddy copy on the paired node.
    pub buddy: bool,
    /// Level 3: Reed-Solomon groups, or none.
    pub parity: Option<RsLayout>,
    /// Bound of every wait.
    pub timeout: Duration,
    /// The ranks that checkpoint together (an L1 cluster), or `None` for the whole job. Teams
    /// commit their own epochs independently; buddy copies may live in another team (they are
    /// passive targets), but a Reed-Solomon group must lie inside one team.
    pub team: Option<Vec<Rank>>,
}

impl Default for CkptConfig {
    fn default() -> Self {
        CkptConfig {
            slot_len: 16 << 20,
            chunk_len: image::DEFAULT_CHUNK_LEN,
            transfer_len: image::DEFAULT_CHUNK_LEN,
            buddy: true,
            parity: Some(RsLayout::default()),
            timeout: Duration::from_secs(30),
            team: None,
        }
    }
}

/// Points of a checkpoint where a test hook may run (e.g. to SIGKILL the process there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// The checkpoint began: nothing of it is written yet (before level 1).
    Entered,
    /// The local slot is written (its chunks may still be in flight to the buddy).
    LocalWritten,
    /// Every body put to the buddy completed; the header (epoch word) is not written yet.
    BuddyBodyLanded,
    /// The buddy copy is flipped to the new epoch.
    BuddyFlipped,
    /// Every level and the parity are written; the team's agreement round is next.
    Voting,
    /// The team agreed: the epoch is committed here (the log GC comes next).
    Committed,
}

/// Called at each [`Stage`] with the epoch being written.
pub type FaultHook = fn(Epoch, Stage);

/// Which level a restore read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreSource {
    /// The rank's own level-1 copy.
    Local,
    /// The level-2 copy kept by this buddy.
    Buddy(Rank),
    /// Reed-Solomon reconstruction from these surviving data members and parity hosts.
    Parity { members: Vec<Rank>, parity_hosts: Vec<Rank> },
}

/// A restored checkpoint and why the levels tried before it failed.
#[derive(Debug, Clone)]
pub struct Restored {
    pub image: RestoredImage,
    pub source: RestoreSource,
    pub skipped: Vec<(&'static str, CkptError)>,
}

/// Time spent in each step of the last checkpoint.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CheckpointStats {
    pub epoch: Epoch,
    pub image_len: usize,
    /// Levels 1 and 2: copy + CRC32C into the local slot, puts to the buddy, header flip.
    pub write: Duration,
    /// The part of `write` spent in the transport: posting and completing the buddy puts and
    /// the flip (what the buddy copy costs over the local copy).
    pub buddy: Duration,
    /// Waiting for the group's level-1 reports (encoders) and the job-wide agreement round.
    pub agree: Duration,
    pub parity: Duration,
}

/// One rank's checkpoint state: its registered slots and the peers' descriptors.
pub struct Checkpointer {
    me: Rank,
    /// The provider owner its copies' puts and gets and its votes complete to.
    owner: Owner,
    config: CkptConfig,
    placement: Placement,
    team: Vec<Rank>,
    /// Level 1: two slots of `slot_len`, readable by encoders and restorers.
    local: Region,
    /// Level 2 copies this rank keeps: two slots per client, in `clients` order.
    hosted: Option<Region>,
    #[cfg(feature = "fault-injection")]
    clients: Vec<Rank>,
    /// Level 3 parity block this rank keeps: two slots of `parity_slot_len`.
    parity: Option<Region>,
    parity_slot_len: usize,
    peers: Vec<PeerRegions>,
    committed: Option<(Epoch, usize)>,
    next_epoch: Epoch,
    staging: Option<Region>,
    /// 64 zero bytes, put over a slot's old header before its body is rewritten.
    zero_header: Region,
    #[cfg(feature = "fault-injection")]
    fault_hook: Option<FaultHook>,
    stats: CheckpointStats,
    /// Ranks gone for good (masked copies under partial redundancy), sorted: see `retire`.
    retired: Vec<Rank>,
}

impl std::fmt::Debug for Checkpointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpointer")
            .field("rank", &self.me)
            .field("config", &self.config)
            .field("committed", &self.committed)
            .finish()
    }
}

fn alloc(
    provider: &mut dyn Provider,
    len: usize,
    access: Access,
    what: &'static str,
) -> Result<Region, CkptError> {
    let region = provider.alloc_region(len.max(1), access).map_err(|e| CkptError::transport(what, e))?;
    // Fault the pages in now, not during the first checkpoint.
    region.fault_in().map_err(|e| CkptError::transport(what, e))?;
    Ok(region)
}

impl Checkpointer {
    /// The committed epoch, the slot holding it and the next epoch number: what a restarted
    /// rank adopts from the survivors ([`Checkpointer::adopt_commit_state`]).
    pub fn commit_state(&self) -> (Option<(Epoch, usize)>, Epoch) {
        (self.committed, self.next_epoch)
    }

    /// At a restarted rank, after restoring its own image: continues the job's epoch
    /// sequence (and slot alternation) where the survivors are.
    pub fn adopt_commit_state(
        &mut self,
        committed: Option<(Epoch, usize)>,
        next_epoch: Epoch,
    ) -> Result<(), CkptError> {
        if committed.is_some_and(|(e, s)| s > 1 || e >= next_epoch) || next_epoch == 0 {
            return Err(CkptError::InvalidArgument(format!(
                "commit state {committed:?} / next epoch {next_epoch} is inconsistent"
            )));
        }
        self.committed = committed;
        self.next_epoch = next_epoch;
        Ok(())
    }

    pub fn rank(&self) -> Rank {
        self.me
    }

    pub fn config(&self) -> &CkptConfig {
        &self.config
    }

    /// The ranks this rank checkpoints with, sorted.
    pub fn team(&self) -> &[Rank] {
        &self.team
    }

    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// Takes `ranks` out of this rank's checkpoints for good (copies whose death partial
    /// redundancy masked; every rank of the team must retire the same ranks before the same
    /// epoch). From the next checkpoint on they do not vote; a rank whose buddy is retired
    /// keeps its level-1 copy only, so its parity is what survives its node; a Reed-Solomon
    /// group encodes a retired member's shard as zeros (its length 0 in the parity metadata)
    /// and writes no block to a retired parity host, and one whose encoder is retired encodes
    /// no more parity.
    pub fn retire(&mut self, ranks: &[Rank]) {
        self.retired.extend_from_slice(ranks);
        self.retired.sort_unstable();
        self.retired.dedup();
    }

    /// The team less the retired ranks: who votes on a checkpoint.
    pub(super) fn voters(&self) -> Vec<Rank> {
        self.team.iter().copied().filter(|r| !self.is_retired(*r)).collect()
    }

    pub(super) fn is_retired(&self, rank: Rank) -> bool {
        self.retired.binary_search(&rank).is_ok()
    }

    /// Whether `group` encodes parity still: its encoder (first parity host) is not retired.
    pub(super) fn group_encodes(&self, group: &crate::placement::Group) -> bool {
        group.encoder().is_some_and(|e| !self.is_retired(e))
    }

    /// The last epoch every team member committed.
    pub fn committed_epoch(&self) -> Option<Epoch> {
        self.committed.map(|(e, _)| e)
    }

    /// The recovery line after a failure: the newest epoch that every rank of `members` (the
    /// survivors, led by `members[0]`) committed. A member that missed the last commit's
    /// release still holds the epoch before it, and so does everyone else (both slots are kept
    /// until the next commit), so the minimum is restorable everywhere. `id` tells calls apart.
    pub fn recovery_epoch(
        &self,
        provider: &mut dyn Provider,
        members: &[Rank],
        id: u64,
    ) -> Result<Epoch, CkptError> {
        let mine = self.committed_epoch().unwrap_or(0);
        match team::agree_min_for((provider, self.owner), members, id, mine, self.config.timeout)? {
            Some(0) => Err(CkptError::Unrecoverable {
                rank: self.me,
                epoch: 0,
                attempts: "no checkpoint was committed by every survivor".into(),
            }),
            Some(epoch) => Ok(epoch),
            None => Err(CkptError::NotCommitted {
                epoch: 0,
                reason: "survivors could not agree on a recovery epoch".into(),
            }),
        }
    }

    pub fn last_stats(&self) -> CheckpointStats {
        self.stats
    }

    fn hosted_offset(&self, client_index: usize, slot: usize) -> u64 {
        ((client_index * 2 + slot) * self.config.slot_len) as u64
    }
}

/// Staging bytes per data shard: a slot rounded up to the 64-byte shard granularity.
fn shard_stride(slot_len: usize) -> usize {
    slot_len.div_ceil(64) * 64
}
