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

use std::time::{Duration, Instant};

use reverb_transport::{
    Access, Bootstrap, Owner, PeerState, Provider, Rank, Region, RemoteRegion, Rma, Signal,
};

use crate::error::CkptError;
use crate::image::{self, Epoch, ImageHeader, ImageKind, ImageSink, ProtectSet, RestoredImage, HEADER_LEN};
use crate::mem;
use crate::placement::{Group, Placement, RsLayout};
use crate::rs::{ParityCodec, ParityFormat};
use crate::team;

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
    /// The local slot is written (its chunks may still be in flight to the buddy).
    LocalWritten,
    /// Every body put to the buddy completed; the header (epoch word) is not written yet.
    BuddyBodyLanded,
    /// The buddy copy is flipped to the new epoch.
    BuddyFlipped,
}

/// Writes an image into a local slot and ships each finished chunk to the buddy's slot.
struct SlotSink<'a> {
    local: &'a Region,
    base: usize,
    target: Option<(RemoteRegion, u64)>,
    provider: &'a mut dyn Provider,
    /// The checkpointer's provider owner: its puts complete into its own queue.
    owner: Owner,
    pending: std::collections::VecDeque<reverb_transport::OpId>,
    piece: usize,
    timeout: Duration,
    /// Time spent posting and waiting for puts.
    in_transport: Duration,
}

impl SlotSink<'_> {
    fn wait_oldest(&mut self) -> Result<(), CkptError> {
        if let (Some(op), Some((remote, _))) = (self.pending.pop_front(), self.target) {
            team::wait_op_from(self.provider, op, remote.owner, self.timeout, "putting a buddy copy")?;
        }
        Ok(())
    }

    fn drain(&mut self) -> Result<(), CkptError> {
        let start = Instant::now();
        while !self.pending.is_empty() {
            self.wait_oldest()?;
        }
        self.in_transport += start.elapsed();
        Ok(())
    }
}

impl ImageSink for SlotSink<'_> {
    fn bytes_mut(&mut self, offset: usize, len: usize) -> Result<&mut [u8], CkptError> {
        mem::bytes_mut(self.local, self.base + offset, len)
    }

    fn chunk_done(&mut self, offset: usize, len: usize) -> Result<(), CkptError> {
        let Some((remote, base)) = self.target else { return Ok(()) };
        let start = Instant::now();
        let mut done = 0;
        while done < len {
            if self.pending.len() >= WINDOW {
                self.wait_oldest()?;
            }
            let n = self.piece.min(len - done);
            let rma = Rma {
                local: self.local,
                local_offset: self.base + offset + done,
                remote: &remote,
                remote_offset: base + (offset + done) as u64,
                len: n,
            };
            let op = self
                .provider
                .put_for(self.owner, rma, Signal::Yes)
                .map_err(|e| CkptError::transport("putting a buddy copy", e))?;
            self.pending.push_back(op);
            done += n;
        }
        self.in_transport += start.elapsed();
        Ok(())
    }
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

#[derive(Debug, Clone, Copy)]
struct PeerRegions {
    local: RemoteRegion,
    hosted: Option<RemoteRegion>,
    parity: Option<RemoteRegion>,
}

const DESC_LEN: usize = 1 + 3 * RemoteRegion::WIRE_LEN + 16;

impl PeerRegions {
    /// Parses `rank`'s slot descriptor (`flags | local | hosted | parity | slot_len | chunk_len`)
    /// from the all-gather; its sizes must match this rank's own descriptor `mine`.
    fn parse(rank: usize, blob: &[u8], mine: &[u8]) -> Result<PeerRegions, CkptError> {
        if blob.len() != DESC_LEN || mine.len() != DESC_LEN || blob[DESC_LEN - 16..] != mine[DESC_LEN - 16..]
        {
            return Err(CkptError::InvalidArgument(format!(
                "rank {rank} registered checkpoint slots of another size or chunk length (or sent a \
                 malformed descriptor)"
            )));
        }
        let desc = |i: usize| {
            let at = 1 + i * RemoteRegion::WIRE_LEN;
            RemoteRegion::from_bytes(&blob[at..at + RemoteRegion::WIRE_LEN])
                .map_err(|e| CkptError::transport("reading a checkpoint slot descriptor", e))
        };
        Ok(PeerRegions {
            local: desc(0)?,
            hosted: if blob[0] & 1 != 0 { Some(desc(1)?) } else { None },
            parity: if blob[0] & 2 != 0 { Some(desc(2)?) } else { None },
        })
    }
}
const META_ID: u32 = 0;
const SHARD_ID: u32 = 1;
/// Window of outstanding puts/gets in one transfer.
const WINDOW: usize = 16;

/// Parity metadata stored as entry 0 of a parity image.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ParityMeta {
    format: ParityFormat,
    parity_shards: usize,
    index: usize,
    shard_len: usize,
    members: Vec<(Rank, usize)>,
}

/// What a restore read of a group's parity blocks found.
struct ParityBlocks {
    /// Block p, or `None` where unreadable or inconsistent with the others.
    blocks: Vec<Option<Vec<u8>>>,
    /// The metadata the readable blocks agree on (`None`: no block was readable).
    meta: Option<ParityMeta>,
    /// The hosts whose block was used.
    hosts: Vec<Rank>,
}

impl ParityMeta {
    fn max_len() -> usize {
        16 + 256 * 12
    }

    fn to_bytes(&self) -> Vec<u8> {
        let mut out = vec![self.format.version_byte(), self.members.len() as u8, self.parity_shards as u8];
        out.push(self.index as u8);
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&(self.shard_len as u64).to_le_bytes());
        for &(rank, len) in &self.members {
            out.extend_from_slice(&rank.to_le_bytes());
            out.extend_from_slice(&(len as u64).to_le_bytes());
        }
        out
    }

    fn parse(bytes: &[u8], what: &str) -> Result<ParityMeta, CkptError> {
        let bad =
            |detail: &str| CkptError::HeaderCorrupt { what: what.to_string(), detail: detail.to_string() };
        if bytes.len() < 16 {
            return Err(bad("parity metadata too short"));
        }
        let format = ParityFormat::from_version_byte(bytes[0])?;
        let k = bytes[1] as usize;
        let u64_at = |o: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[o..o + 8]);
            u64::from_le_bytes(b)
        };
        let shard_len = usize::try_from(u64_at(8)).map_err(|_| bad("shard length"))?;
        if bytes.len() != 16 + k * 12 {
            return Err(bad("parity metadata length does not match its member count"));
        }
        let members = (0..k)
            .map(|i| {
                let o = 16 + i * 12;
                let rank = u32::from_le_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]);
                (rank, usize::try_from(u64_at(o + 4)).unwrap_or(usize::MAX))
            })
            .collect::<Vec<_>>();
        if members.iter().any(|&(_, len)| len > shard_len) {
            return Err(bad("a member image is longer than the shard"));
        }
        Ok(ParityMeta {
            format,
            parity_shards: bytes[2] as usize,
            index: bytes[3] as usize,
            shard_len,
            members,
        })
    }
}

/// One rank's checkpoint state: its registered slots and the peers' descriptors.
pub struct Checkpointer {
    me: Rank,
    /// The provider owner of its copies' puts and gets (votes are `APP` traffic).
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
    region.fill(0, region.len(), 0).map_err(|e| CkptError::transport(what, e))?;
    Ok(region)
}

impl Checkpointer {
    /// Collective over the whole job: registers this rank's slots and exchanges descriptors.
    pub fn new(
        provider: &mut dyn Provider,
        boot: &mut dyn Bootstrap,
        config: CkptConfig,
    ) -> Result<Checkpointer, CkptError> {
        let job = boot.job().clone();
        let node_of: Vec<u32> = (0..job.size).map(|r| job.node_of(r)).collect();
        Self::with_buddy_units(provider, boot, config, &node_of)
    }

    /// As `new`, with buddy copies paired over `unit_of_rank` (indexed by rank) instead of
    /// nodes: failure units of whole nodes (teams) keep their copies outside the unit.
    pub fn with_buddy_units(
        provider: &mut dyn Provider,
        boot: &mut dyn Bootstrap,
        config: CkptConfig,
        unit_of_rank: &[u32],
    ) -> Result<Checkpointer, CkptError> {
        if config.slot_len < HEADER_LEN * 2 || config.chunk_len == 0 || config.transfer_len == 0 {
            return Err(CkptError::InvalidArgument(format!(
                "slot_len {} (at least {}), chunk_len {}, transfer_len {} (at least 1)",
                config.slot_len,
                HEADER_LEN * 2,
                config.chunk_len,
                config.transfer_len
            )));
        }
        let job = boot.job().clone();
        let me = provider.rank();
        let node_of: Vec<u32> = (0..job.size).map(|r| job.node_of(r)).collect();
        let placement = Placement::with_buddy_units(&node_of, unit_of_rank, config.parity)?;
        let team = match &config.team {
            None => (0..job.size).collect::<Vec<Rank>>(),
            Some(members) => {
                let mut team = members.clone();
                team.sort_unstable();
                team.dedup();
                if !team.contains(&me) || team.iter().any(|&r| r >= job.size) {
                    return Err(CkptError::InvalidArgument(format!(
                        "rank {me}: team {members:?} must contain this rank and only ranks of the job (size {})",
                        job.size
                    )));
                }
                for &r in &team {
                    if let Some(g) = placement.group_of(r) {
                        if let Some(outside) = g.members.iter().find(|m| !team.contains(m)) {
                            return Err(CkptError::Unsupported(format!(
                                "Reed-Solomon group {:?} of rank {r} reaches rank {outside} outside the team \
                                 {team:?}: teams must hold whole groups (align teams with group_nodes)",
                                g.members
                            )));
                        }
                    }
                }
                team
            }
        };
        let clients = if config.buddy { placement.clients_of(me) } else { Vec::new() };
        let parity_slot_len = image::image_len(
            16 + ParityMeta::max_len() + 16 + shard_stride(config.slot_len),
            config.chunk_len,
        );
        let local = alloc(provider, 2 * config.slot_len, Access::REMOTE_READ, "registering the local slots")?;
        let hosted = if clients.is_empty() {
            None
        } else {
            Some(alloc(
                provider,
                clients.len() * 2 * config.slot_len,
                Access::REMOTE_RW,
                "registering buddy slots",
            )?)
        };
        let group = placement.group_of(me).cloned();
        let parity = match &group {
            Some(g) if g.parity_hosts.contains(&me) => {
                Some(alloc(provider, 2 * parity_slot_len, Access::REMOTE_RW, "registering the parity slots")?)
            }
            _ => None,
        };
        let staging = match &group {
            Some(g) if g.encoder() == Some(me) => Some(alloc(
                provider,
                g.members.len() * shard_stride(config.slot_len) + g.parity_hosts.len() * parity_slot_len,
                Access::LOCAL,
                "registering the encoding staging area",
            )?),
            _ => None,
        };
        let mut mine = Vec::with_capacity(DESC_LEN);
        mine.push(u8::from(hosted.is_some()) | (u8::from(parity.is_some()) << 1));
        for region in [Some(&local), hosted.as_ref(), parity.as_ref()] {
            mine.extend_from_slice(&region.map(Region::remote).map(|r| r.to_bytes()).unwrap_or([0; 28]));
        }
        mine.extend_from_slice(&(config.slot_len as u64).to_le_bytes());
        mine.extend_from_slice(&(config.chunk_len as u64).to_le_bytes());
        let all =
            boot.allgather(&mine).map_err(|e| CkptError::transport("exchanging checkpoint slots", e))?;
        let mut peers = Vec::with_capacity(all.len());
        for (rank, blob) in all.iter().enumerate() {
            peers.push(PeerRegions::parse(rank, blob, &mine)?);
        }
        let owner =
            provider.open_owner().map_err(|e| CkptError::transport("opening a completion owner", e))?;
        Ok(Checkpointer {
            me,
            owner,
            team,
            placement,
            local,
            hosted,
            #[cfg(feature = "fault-injection")]
            clients,
            parity,
            parity_slot_len,
            peers,
            committed: None,
            next_epoch: 1,
            staging,
            zero_header: alloc(provider, HEADER_LEN, Access::LOCAL, "registering a header buffer")?,
            #[cfg(feature = "fault-injection")]
            fault_hook: None,
            stats: CheckpointStats::default(),
            config,
        })
    }

    /// Recovery, a survivor's side of the collective a restarted rank runs in
    /// [`Checkpointer::new`]: exchanges slot descriptors again (this rank's regions are
    /// unchanged) and takes the restarted ranks' new ones. The copies this rank keeps stay.
    pub fn rejoin(&mut self, boot: &mut dyn Bootstrap) -> Result<(), CkptError> {
        let mut mine = Vec::with_capacity(DESC_LEN);
        mine.push(u8::from(self.hosted.is_some()) | (u8::from(self.parity.is_some()) << 1));
        for region in [Some(&self.local), self.hosted.as_ref(), self.parity.as_ref()] {
            mine.extend_from_slice(&region.map(Region::remote).map(|r| r.to_bytes()).unwrap_or([0; 28]));
        }
        mine.extend_from_slice(&(self.config.slot_len as u64).to_le_bytes());
        mine.extend_from_slice(&(self.config.chunk_len as u64).to_le_bytes());
        let all = boot
            .allgather(&mine)
            .map_err(|e| CkptError::transport("exchanging checkpoint slots again", e))?;
        if all.len() != self.peers.len() {
            return Err(CkptError::InvalidArgument(format!(
                "{} slot descriptors for a job of {}",
                all.len(),
                self.peers.len()
            )));
        }
        for (rank, blob) in all.iter().enumerate() {
            self.peers[rank] = PeerRegions::parse(rank, blob, &mine)?;
        }
        Ok(())
    }

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
        match team::agree_min(provider, members, id, mine, self.config.timeout)? {
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

    /// Runs `hook` at each [`Stage`] of later checkpoints (fault-injection tests).
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn set_fault_hook(&mut self, hook: Option<FaultHook>) {
        self.fault_hook = hook;
    }

    /// A fault-injection point; nothing without the `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    fn stage(&self, epoch: Epoch, stage: Stage) {
        if let Some(hook) = self.fault_hook {
            hook(epoch, stage);
        }
    }

    #[cfg(not(feature = "fault-injection"))]
    fn stage(&self, _epoch: Epoch, _stage: Stage) {}

    /// Coordinated checkpoint of `set` across the job. Returns the committed epoch; on any
    /// failure (a dead buddy, a dead team member, a timeout) returns `NotCommitted` and the
    /// previous epoch stays the committed one everywhere.
    pub fn checkpoint(
        &mut self,
        provider: &mut dyn Provider,
        set: &ProtectSet<'_>,
    ) -> Result<Epoch, CkptError> {
        let epoch = self.next_epoch;
        self.next_epoch += 1;
        let slot = self.committed.map_or(0, |(_, s)| 1 - s);
        let image_len = set.image_len(self.config.chunk_len);
        self.stats = CheckpointStats { epoch, image_len, ..CheckpointStats::default() };
        let t0 = Instant::now();
        // Too large still votes (no): the team learns at once instead of waiting out its bound.
        let written = if image_len > self.config.slot_len {
            Err(CkptError::TooLarge { len: image_len, capacity: self.config.slot_len })
        } else {
            self.write_levels_1_2(provider, slot, epoch, set)
        };
        self.stats.write = t0.elapsed();
        self.stats.buddy = *written.as_ref().unwrap_or(&Duration::ZERO);
        // Only a group's encoder needs its members' level-1 copies: they report to it, and the
        // one job-wide round comes after the parity.
        let t2 = Instant::now();
        let ready = self.group_written(provider, epoch, written.is_ok());
        self.stats.agree = t2.elapsed();
        let t3 = Instant::now();
        // Err(None): a group member could not write; its own error says why.
        let encoded = match ready {
            Ok(true) => self.encode_group(provider, slot, epoch).map_err(Some),
            Ok(false) => Err(None),
            Err(e) => Err(Some(e)),
        };
        self.stats.parity = t3.elapsed();
        let t4 = Instant::now();
        let vote = team::Vote { ok: written.is_ok() && encoded.is_ok(), min: 0 };
        let verdict = team::agree_round(provider, &self.team, 2, epoch, vote, self.config.timeout)
            .map_err(|e| not_committed(epoch, Some(e), ""))?;
        self.stats.agree += t4.elapsed();
        if !verdict.ok {
            let mine = written.err().or(encoded.err().flatten());
            return Err(not_committed(epoch, mine, "levels 1-2 or the parity failed on a team member"));
        }
        self.committed = Some((epoch, slot));
        Ok(epoch)
    }

    /// Levels 1-2 done (`ok` for this rank): a group member reports to its encoder; the encoder
    /// returns whether every member wrote (itself included). Other ranks return `ok`.
    fn group_written(&self, provider: &mut dyn Provider, epoch: Epoch, ok: bool) -> Result<bool, CkptError> {
        let Some(group) = self.placement.group_of(self.me) else { return Ok(ok) };
        let Some(encoder) = group.encoder() else { return Ok(ok) };
        if encoder != self.me {
            team::report_written(provider, encoder, epoch, ok, self.config.timeout)?;
            return Ok(ok);
        }
        // Gathered even when this rank failed, so no report is left unclaimed.
        let others_wrote = team::gather_written(provider, &group.members, epoch, self.config.timeout)?;
        Ok(ok && others_wrote)
    }

    fn hosted_offset(&self, client_index: usize, slot: usize) -> u64 {
        ((client_index * 2 + slot) * self.config.slot_len) as u64
    }

    /// Levels 1 and 2 in one pass: each payload chunk is copied into the local slot, checksummed
    /// and put to the buddy while still in cache; then the chunk table; once every put has
    /// completed, the header (the epoch word) flips the buddy's slot to this epoch.
    /// Returns the time spent in the transport.
    fn write_levels_1_2(
        &self,
        provider: &mut dyn Provider,
        slot: usize,
        epoch: Epoch,
        set: &ProtectSet<'_>,
    ) -> Result<Duration, CkptError> {
        let local_base = slot * self.config.slot_len;
        // No stale header of an older epoch may survive a crash in the middle of this slot.
        self.local
            .fill(local_base, HEADER_LEN, 0)
            .map_err(|e| CkptError::transport("clearing a header", e))?;
        let target = if self.config.buddy {
            let buddy =
                self.placement.buddy_of(self.me).ok_or(CkptError::InvalidArgument("no buddy".into()))?;
            let remote = self.peers[buddy as usize].hosted.ok_or_else(|| {
                CkptError::InvalidArgument(format!("buddy rank {buddy} registered no slots"))
            })?;
            let index =
                self.placement.clients_of(buddy).iter().position(|&c| c == self.me).ok_or_else(|| {
                    CkptError::InvalidArgument(format!("rank {buddy} does not keep rank {}'s copy", self.me))
                })?;
            let base = ((index * 2 + slot) * self.config.slot_len) as u64;
            self.transfer(provider, Dir::Put, &self.zero_header, 0, &remote, base, HEADER_LEN)?;
            Some((remote, base))
        } else {
            None
        };
        let mut sink = SlotSink {
            local: &self.local,
            base: local_base,
            target,
            provider,
            owner: self.owner,
            pending: std::collections::VecDeque::new(),
            piece: self.config.transfer_len,
            timeout: self.config.timeout,
            in_transport: Duration::ZERO,
        };
        let header =
            image::write_image_to(&mut sink, ImageKind::Data, self.me, epoch, self.config.chunk_len, set)?;
        self.stage(epoch, Stage::LocalWritten);
        let Some((remote, base)) = target else { return Ok(Duration::ZERO) };
        sink.chunk_done(HEADER_LEN, header.table_len())?;
        sink.drain()?;
        self.stage(epoch, Stage::BuddyBodyLanded);
        let flip = Instant::now();
        self.transfer(sink.provider, Dir::Put, &self.local, local_base, &remote, base, HEADER_LEN)?;
        let in_transport = sink.in_transport + flip.elapsed();
        self.stage(epoch, Stage::BuddyFlipped);
        Ok(in_transport)
    }

    /// Moves `len` bytes in windowed pieces, every piece signaled, and waits for all of them.
    // The arguments are one RMA (`Rma`'s five fields, one to one) and its direction.
    #[allow(clippy::too_many_arguments)]
    fn transfer(
        &self,
        provider: &mut dyn Provider,
        dir: Dir,
        local: &Region,
        local_offset: usize,
        remote: &RemoteRegion,
        remote_offset: u64,
        len: usize,
    ) -> Result<(), CkptError> {
        transfer(
            (provider, self.owner),
            dir,
            local,
            local_offset,
            remote,
            remote_offset,
            len,
            self.config.transfer_len,
            self.config.timeout,
        )
    }

    /// Level 3 for this rank's group: only the encoder works; the others return at once.
    /// Inline today; an offload to the node's logger core would take over this step.
    fn encode_group(
        &mut self,
        provider: &mut dyn Provider,
        slot: usize,
        epoch: Epoch,
    ) -> Result<(), CkptError> {
        let Some(group) = self.placement.group_of(self.me).cloned() else { return Ok(()) };
        if group.encoder() != Some(self.me) {
            return Ok(());
        }
        let staging =
            self.staging.clone().ok_or(CkptError::InvalidArgument("encoder without staging".into()))?;
        let (k, m) = (group.members.len(), group.parity_hosts.len());
        let slot_len = self.config.slot_len;
        let stride = shard_stride(slot_len);
        let lens = self.gather_group_images(provider, &group, &staging, slot, epoch)?;
        let shard_len = lens.iter().copied().max().unwrap_or(0).div_ceil(64) * 64;
        for (i, &len) in lens.iter().enumerate() {
            mem::bytes_mut(&staging, i * stride + len, shard_len - len)?.fill(0);
        }
        let codec = ParityCodec::new(k, m)?;
        let mut parity: Vec<Vec<u8>> = vec![vec![0u8; shard_len]; m];
        {
            let data: Vec<&[u8]> =
                (0..k).map(|i| mem::bytes(&staging, i * stride, shard_len)).collect::<Result<_, _>>()?;
            let mut outs: Vec<&mut [u8]> = parity.iter_mut().map(Vec::as_mut_slice).collect();
            codec.encode(&data, &mut outs)?;
        }
        let members: Vec<(Rank, usize)> = group.members.iter().copied().zip(lens.iter().copied()).collect();
        let parity_base = k * stride;
        for (p, &host) in group.parity_hosts.iter().enumerate() {
            let meta = ParityMeta {
                format: codec.format(),
                parity_shards: m,
                index: p,
                shard_len,
                members: members.clone(),
            }
            .to_bytes();
            let mut set = ProtectSet::new();
            set.protect(META_ID, &meta)?.protect(SHARD_ID, &parity[p])?;
            let at = parity_base + p * self.parity_slot_len;
            let out = mem::bytes_mut(&staging, at, self.parity_slot_len)?;
            let header =
                image::write_image(out, ImageKind::Parity, host, epoch, self.config.chunk_len, &set)?;
            let len = header.image_len();
            self.place_parity_block(provider, &staging, at, len, host, slot)?;
        }
        Ok(())
    }

    /// Copies the group members' level-1 images of `epoch` (own slot `slot`) into `staging`, one
    /// per stride, and returns their lengths.
    fn gather_group_images(
        &mut self,
        provider: &mut dyn Provider,
        group: &Group,
        staging: &Region,
        slot: usize,
        epoch: Epoch,
    ) -> Result<Vec<usize>, CkptError> {
        let slot_len = self.config.slot_len;
        let stride = shard_stride(slot_len);
        let mut lens = Vec::with_capacity(group.members.len());
        for (i, &member) in group.members.iter().enumerate() {
            let at = i * stride;
            if member == self.me {
                let bytes = mem::bytes(&self.local, slot * slot_len, slot_len)?;
                let header = ImageHeader::parse(bytes, "own level-1 copy")?;
                let own = bytes.get(..header.image_len()).ok_or(CkptError::Truncated {
                    what: "own level-1 copy".into(),
                    have: slot_len,
                    need: header.image_len(),
                })?;
                mem::bytes_mut(staging, at, own.len())?.copy_from_slice(own);
                lens.push(header.image_len());
                continue;
            }
            let remote = self.peers[member as usize].local;
            let off = (slot * slot_len) as u64;
            self.transfer(provider, Dir::Get, staging, at, &remote, off, HEADER_LEN)?;
            let what = format!("rank {member}'s level-1 copy");
            let header = ImageHeader::parse(mem::bytes(staging, at, HEADER_LEN)?, &what)?;
            if header.epoch != epoch || header.rank != member || header.image_len() > slot_len {
                return Err(CkptError::WrongEpoch {
                    what,
                    rank: member,
                    epoch,
                    found_rank: header.rank,
                    found_epoch: header.epoch,
                });
            }
            let body = header.image_len() - HEADER_LEN;
            self.transfer(
                provider,
                Dir::Get,
                staging,
                at + HEADER_LEN,
                &remote,
                off + HEADER_LEN as u64,
                body,
            )?;
            lens.push(header.image_len());
        }
        Ok(lens)
    }

    /// Writes parity block image `at..at + len` of `staging` into `host`'s parity slot `slot`:
    /// the header cleared first and written last, so a torn write never reads as valid.
    fn place_parity_block(
        &mut self,
        provider: &mut dyn Provider,
        staging: &Region,
        at: usize,
        len: usize,
        host: Rank,
        slot: usize,
    ) -> Result<(), CkptError> {
        if host == self.me {
            let own =
                self.parity.clone().ok_or(CkptError::InvalidArgument("parity host without slots".into()))?;
            let dst = slot * self.parity_slot_len;
            own.fill(dst, HEADER_LEN, 0).map_err(|e| CkptError::transport("clearing a parity header", e))?;
            mem::bytes_mut(&own, dst + HEADER_LEN, len - HEADER_LEN)?.copy_from_slice(mem::bytes(
                staging,
                at + HEADER_LEN,
                len - HEADER_LEN,
            )?);
            mem::bytes_mut(&own, dst, HEADER_LEN)?.copy_from_slice(mem::bytes(staging, at, HEADER_LEN)?);
            return Ok(());
        }
        let remote = self.peers[host as usize]
            .parity
            .ok_or_else(|| CkptError::InvalidArgument(format!("parity host {host} registered no slots")))?;
        let dst = (slot * self.parity_slot_len) as u64;
        let zero = self.zero_header.clone();
        self.transfer(provider, Dir::Put, &zero, 0, &remote, dst, HEADER_LEN)?;
        self.transfer(
            provider,
            Dir::Put,
            staging,
            at + HEADER_LEN,
            &remote,
            dst + HEADER_LEN as u64,
            len - HEADER_LEN,
        )?;
        self.transfer(provider, Dir::Put, staging, at, &remote, dst, HEADER_LEN)?;
        Ok(())
    }

    /// Restores `rank`'s checkpoint of `epoch` from the first level that has a valid copy:
    /// its own level-1 copy (if alive), its buddy's copy, then Reed-Solomon reconstruction.
    /// Never returns unchecked bytes: every candidate passes the header and chunk CRC32Cs.
    pub fn restore(
        &mut self,
        provider: &mut dyn Provider,
        rank: Rank,
        epoch: Epoch,
    ) -> Result<Restored, CkptError> {
        if rank as usize >= self.peers.len() {
            return Err(CkptError::InvalidArgument(format!("rank {rank} is not in this job")));
        }
        let mut skipped = Vec::new();
        let expect = (ImageKind::Data, rank, epoch);
        if rank == self.me || provider.peer_state(rank) == PeerState::Alive {
            match self.read_slots(
                provider,
                rank,
                &self.peers[rank as usize].local.clone(),
                0,
                self.config.slot_len,
                expect,
            ) {
                Ok((image, _)) => return Ok(Restored { image, source: RestoreSource::Local, skipped }),
                Err(e) => skipped.push(("level 1 (own copy)", e)),
            }
        } else {
            skipped
                .push(("level 1 (own copy)", CkptError::PeerDead { rank, during: "reading its own copy" }));
        }
        if self.config.buddy {
            match self.restore_from_buddy(provider, rank, epoch) {
                Ok((image, buddy)) => {
                    return Ok(Restored { image, source: RestoreSource::Buddy(buddy), skipped })
                }
                Err(e) => skipped.push(("level 2 (buddy copy)", e)),
            }
        }
        if self.placement.group_of(rank).is_some() {
            match self.restore_from_parity(provider, rank, epoch) {
                Ok((image, source)) => return Ok(Restored { image, source, skipped }),
                Err(e) => skipped.push(("level 3 (Reed-Solomon)", e)),
            }
        }
        let attempts =
            skipped.iter().map(|(level, e)| format!("{level}: {e}")).collect::<Vec<_>>().join("; ");
        Err(CkptError::Unrecoverable {
            rank,
            epoch,
            attempts: if attempts.is_empty() { "no level configured".into() } else { attempts },
        })
    }

    fn restore_from_buddy(
        &mut self,
        provider: &mut dyn Provider,
        rank: Rank,
        epoch: Epoch,
    ) -> Result<(RestoredImage, Rank), CkptError> {
        let buddy = self.placement.buddy_of(rank).ok_or(CkptError::InvalidArgument("no buddy".into()))?;
        if buddy != self.me && provider.peer_state(buddy) == PeerState::Dead {
            return Err(CkptError::PeerDead { rank: buddy, during: "reading the buddy copy" });
        }
        let remote = self.peers[buddy as usize]
            .hosted
            .ok_or_else(|| CkptError::InvalidArgument(format!("rank {buddy} keeps no copies")))?;
        let index = self.placement.clients_of(buddy).iter().position(|&c| c == rank).ok_or_else(|| {
            CkptError::InvalidArgument(format!("rank {buddy} does not keep rank {rank}'s copy"))
        })?;
        let base = self.hosted_offset(index, 0) as usize;
        let (image, _) = self.read_slots(
            provider,
            buddy,
            &remote,
            base,
            self.config.slot_len,
            (ImageKind::Data, rank, epoch),
        )?;
        Ok((image, buddy))
    }

    /// Reads the slot pair at `base` of `remote` (owned by `owner`) and returns the slot holding
    /// the expected image, checked. Reads locally when `owner` is this rank.
    fn read_slots(
        &self,
        provider: &mut dyn Provider,
        owner: Rank,
        remote: &RemoteRegion,
        base: usize,
        slot_len: usize,
        expect: (ImageKind, Rank, Epoch),
    ) -> Result<(RestoredImage, Vec<u8>), CkptError> {
        let what = |slot: usize| format!("rank {owner}'s copy of rank {} (slot {slot})", expect.1);
        let mut errors = Vec::new();
        for slot in 0..2 {
            let at = base + slot * slot_len;
            let header_bytes = self.fetch(provider, owner, remote, at, HEADER_LEN)?;
            let header = match ImageHeader::parse(&header_bytes, &what(slot)) {
                Ok(h) => h,
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            if header.epoch != expect.2 || header.rank != expect.1 || header.kind != expect.0 {
                errors.push(CkptError::WrongEpoch {
                    what: what(slot),
                    rank: expect.1,
                    epoch: expect.2,
                    found_rank: header.rank,
                    found_epoch: header.epoch,
                });
                continue;
            }
            // A header promising more than the slot holds is a truncated copy.
            let len = header.image_len().min(slot_len);
            let bytes = self.fetch(provider, owner, remote, at, len)?;
            return image::validate_image(&bytes, &what(slot), expect).map(|image| (image, bytes));
        }
        // Prefer an integrity error over "other epoch" when both slots failed.
        let pick = errors.iter().position(|e| !matches!(e, CkptError::WrongEpoch { .. })).unwrap_or(0);
        Err(errors.swap_remove(pick))
    }

    /// Copies `len` bytes at `offset` of a (possibly remote) region into a fresh buffer.
    fn fetch(
        &self,
        provider: &mut dyn Provider,
        owner: Rank,
        remote: &RemoteRegion,
        offset: usize,
        len: usize,
    ) -> Result<Vec<u8>, CkptError> {
        if owner == self.me {
            let region = [Some(&self.local), self.hosted.as_ref(), self.parity.as_ref()]
                .into_iter()
                .flatten()
                .find(|r| r.remote() == *remote)
                .ok_or(CkptError::InvalidArgument("no such local region".into()))?;
            return region.to_vec(offset, len).map_err(|e| CkptError::transport("reading a local slot", e));
        }
        let staging = alloc(provider, len, Access::LOCAL, "registering a restore buffer")?;
        self.transfer(provider, Dir::Get, &staging, 0, remote, offset as u64, len)?;
        staging.to_vec(0, len).map_err(|e| CkptError::transport("reading a restore buffer", e))
    }

    fn restore_from_parity(
        &mut self,
        provider: &mut dyn Provider,
        rank: Rank,
        epoch: Epoch,
    ) -> Result<(RestoredImage, RestoreSource), CkptError> {
        let group: Group =
            self.placement.group_of(rank).cloned().ok_or(CkptError::InvalidArgument("no group".into()))?;
        let (k, m) = (group.members.len(), group.parity_hosts.len());
        let lost_index =
            group.index_of(rank).ok_or(CkptError::InvalidArgument("rank not in its group".into()))?;
        let mut notes = Vec::new();
        // Parity blocks first: their metadata names the members' image lengths.
        let ParityBlocks { blocks: parity, meta, hosts: hosts_used } =
            self.read_parity_blocks(provider, &group, epoch, &mut notes)?;
        let Some(meta) = meta else {
            return Err(CkptError::Unrecoverable { rank, epoch, attempts: notes.join("; ") });
        };
        let codec = ParityCodec::new(k, m)?;
        if codec.format() != meta.format {
            return Err(CkptError::UnknownParityFormat(meta.format.version_byte()));
        }
        let (mut shards, members_used) =
            self.read_data_shards(provider, &group, lost_index, &meta, epoch, &mut notes);
        shards.extend(parity);
        let present = shards.iter().filter(|s| s.is_some()).count();
        if present < k {
            notes.push(format!("{present} of {} shards survive, {k} needed", k + m));
            return Err(CkptError::Unrecoverable { rank, epoch, attempts: notes.join("; ") });
        }
        codec.reconstruct(&mut shards)?;
        let rebuilt = shards[lost_index].take().unwrap_or_default();
        let len = meta.members[lost_index].1.min(rebuilt.len());
        let image = image::validate_image(
            &rebuilt[..len],
            "Reed-Solomon reconstruction",
            (ImageKind::Data, rank, epoch),
        )?;
        Ok((image, RestoreSource::Parity { members: members_used, parity_hosts: hosts_used }))
    }

    /// Reads the group's parity blocks of `epoch` from their live hosts. What failed goes into
    /// `notes`.
    fn read_parity_blocks(
        &self,
        provider: &mut dyn Provider,
        group: &Group,
        epoch: Epoch,
        notes: &mut Vec<String>,
    ) -> Result<ParityBlocks, CkptError> {
        let m = group.parity_hosts.len();
        let mut parity: Vec<Option<Vec<u8>>> = vec![None; m];
        let mut meta: Option<ParityMeta> = None;
        let mut hosts_used = Vec::new();
        for (p, &host) in group.parity_hosts.iter().enumerate() {
            if host != self.me && provider.peer_state(host) == PeerState::Dead {
                notes.push(format!("parity host {host} dead"));
                continue;
            }
            let remote = self.peers[host as usize].parity.ok_or_else(|| {
                CkptError::InvalidArgument(format!("parity host {host} registered no slots"))
            })?;
            match self.read_parity_block(provider, group, p, host, &remote, epoch) {
                Ok((parsed, shard)) => {
                    if meta.as_ref().is_some_and(|known| {
                        known.members != parsed.members || known.shard_len != parsed.shard_len
                    }) {
                        notes.push(format!("parity block {p} disagrees with the others"));
                        continue;
                    }
                    meta.get_or_insert(parsed);
                    parity[p] = Some(shard);
                    hosts_used.push(host);
                }
                Err(e) => notes.push(format!("parity block {p} on rank {host}: {e}")),
            }
        }
        Ok(ParityBlocks { blocks: parity, meta, hosts: hosts_used })
    }

    /// Reads parity block `p` from `host` and checks that its metadata describes `group`.
    fn read_parity_block(
        &self,
        provider: &mut dyn Provider,
        group: &Group,
        p: usize,
        host: Rank,
        remote: &RemoteRegion,
        epoch: Epoch,
    ) -> Result<(ParityMeta, Vec<u8>), CkptError> {
        let m = group.parity_hosts.len();
        let (image, _) = self.read_slots(
            provider,
            host,
            remote,
            0,
            self.parity_slot_len,
            (ImageKind::Parity, host, epoch),
        )?;
        let what = format!("parity block {p} on rank {host}");
        let parsed = ParityMeta::parse(image.entry(META_ID).unwrap_or(&[]), &what)?;
        let shard = image.entry(SHARD_ID).unwrap_or(&[]).to_vec();
        let expected: Vec<Rank> = parsed.members.iter().map(|&(r, _)| r).collect();
        if parsed.index != p
            || parsed.parity_shards != m
            || expected != group.members
            || shard.len() != parsed.shard_len
        {
            return Err(CkptError::HeaderCorrupt {
                what,
                detail: "metadata does not match the group".into(),
            });
        }
        Ok((parsed, shard))
    }

    /// Reads the surviving members' images of `epoch` as data shards (`None` for the lost member
    /// and for any image that is unreadable or not the length the parity names), and the members
    /// read. What failed goes into `notes`.
    fn read_data_shards(
        &self,
        provider: &mut dyn Provider,
        group: &Group,
        lost_index: usize,
        meta: &ParityMeta,
        epoch: Epoch,
        notes: &mut Vec<String>,
    ) -> (Vec<Option<Vec<u8>>>, Vec<Rank>) {
        let mut shards: Vec<Option<Vec<u8>>> =
            Vec::with_capacity(group.members.len() + group.parity_hosts.len());
        let mut members_used = Vec::new();
        for (i, &member) in group.members.iter().enumerate() {
            if i == lost_index || (member != self.me && provider.peer_state(member) == PeerState::Dead) {
                shards.push(None);
                continue;
            }
            let remote = self.peers[member as usize].local;
            let expect = (ImageKind::Data, member, epoch);
            match self.read_slots(provider, member, &remote, 0, self.config.slot_len, expect) {
                Ok((_, mut bytes)) if bytes.len() == meta.members[i].1 => {
                    // A checked image of this epoch: its exact bytes are the data shard.
                    bytes.resize(meta.shard_len, 0);
                    shards.push(Some(bytes));
                    members_used.push(member);
                }
                Ok((_, bytes)) => {
                    let expected = meta.members[i].1;
                    notes.push(format!(
                        "member {member}: image of {} bytes, parity says {expected}",
                        bytes.len()
                    ));
                    shards.push(None);
                }
                Err(e) => {
                    notes.push(format!("member {member}: {e}"));
                    shards.push(None);
                }
            }
        }
        (shards, members_used)
    }

    /// Flips bytes in a copy this rank keeps for `client` (level 2), in the slot of `epoch`:
    /// XORs `len` bytes from `offset` of the image with 0x5a, or zeroes them from there to the
    /// slot end when `truncate`. For corruption tests.
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn damage_hosted_copy(
        &self,
        client: Rank,
        epoch: Epoch,
        offset: usize,
        len: usize,
        truncate: bool,
    ) -> Result<(), CkptError> {
        let index = self.clients.iter().position(|&c| c == client).ok_or_else(|| {
            CkptError::InvalidArgument(format!("rank {} keeps no copy of rank {client}", self.me))
        })?;
        let region = self.hosted.as_ref().ok_or(CkptError::InvalidArgument("no hosted copies".into()))?;
        let base = self.hosted_offset(index, 0) as usize;
        damage(region, base, self.config.slot_len, epoch, offset, len, truncate)
    }

    /// Same for the parity block this rank keeps.
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn damage_parity_block(&self, epoch: Epoch, offset: usize, len: usize) -> Result<(), CkptError> {
        let region = self.parity.as_ref().ok_or(CkptError::InvalidArgument("no parity block here".into()))?;
        damage(region, 0, self.parity_slot_len, epoch, offset, len, false)
    }
}

#[cfg(feature = "fault-injection")]
fn damage(
    region: &Region,
    base: usize,
    slot_len: usize,
    epoch: Epoch,
    offset: usize,
    len: usize,
    truncate: bool,
) -> Result<(), CkptError> {
    for slot in 0..2 {
        let at = base + slot * slot_len;
        let header = region.to_vec(at, HEADER_LEN).map_err(|e| CkptError::transport("reading a slot", e))?;
        if ImageHeader::parse(&header, "slot").is_ok_and(|h| h.epoch == epoch) {
            let len = if truncate {
                slot_len.saturating_sub(offset)
            } else {
                len.min(slot_len.saturating_sub(offset))
            };
            let bytes = mem::bytes_mut(region, at + offset, len)?;
            if truncate {
                bytes.fill(0);
            } else {
                bytes.iter_mut().for_each(|b| *b ^= 0x5a);
            }
            return Ok(());
        }
    }
    Err(CkptError::InvalidArgument(format!("no slot holds epoch {epoch}")))
}

/// Staging bytes per data shard: a slot rounded up to the 64-byte shard granularity.
fn shard_stride(slot_len: usize) -> usize {
    slot_len.div_ceil(64) * 64
}

fn not_committed(epoch: Epoch, mine: Option<CkptError>, theirs: &str) -> CkptError {
    let reason = match mine {
        Some(e) => e.to_string(),
        None => theirs.to_string(),
    };
    CkptError::NotCommitted { epoch, reason }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    Put,
    Get,
}

// One RMA (`Rma`'s five fields), its direction and its pacing (piece size, bound).
#[allow(clippy::too_many_arguments)]
fn transfer(
    (provider, owner): (&mut dyn Provider, Owner),
    dir: Dir,
    local: &Region,
    local_offset: usize,
    remote: &RemoteRegion,
    remote_offset: u64,
    len: usize,
    piece: usize,
    timeout: Duration,
) -> Result<(), CkptError> {
    let during = match dir {
        Dir::Put => "putting a checkpoint copy",
        Dir::Get => "getting a checkpoint copy",
    };
    let mut pending = std::collections::VecDeque::new();
    let mut done = 0usize;
    while done < len || !pending.is_empty() {
        if done < len && pending.len() < WINDOW {
            let n = piece.min(len - done);
            let rma = Rma {
                local,
                local_offset: local_offset + done,
                remote,
                remote_offset: remote_offset + done as u64,
                len: n,
            };
            let op = match dir {
                Dir::Put => provider.put_for(owner, rma, Signal::Yes),
                Dir::Get => provider.get_for(owner, rma, Signal::Yes),
            }
            .map_err(|e| CkptError::transport(during, e))?;
            pending.push_back(op);
            done += n;
            continue;
        }
        if let Some(op) = pending.pop_front() {
            team::wait_op_from(provider, op, remote.owner, timeout, during)?;
        }
    }
    Ok(())
}
