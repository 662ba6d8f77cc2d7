//! The transport API: one `Provider` trait that every provider (shm, verbs) implements, and the
//! plain types it speaks. Layers above (logger, ckpt, runtime) use only this module.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

use crate::config::{TransportConfig, WaitMode};
use crate::error::{Result, TransportError};
use crate::region::Region;

/// A process's index in the job, `0..size`.
pub type Rank = u32;
/// A message tag. Matching uses `TagMatch` (tag + mask, as in UCX).
pub type Tag = u64;

/// Which provider to run. Chosen at run time by `REVERB_PROVIDER` or `--provider`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    Shm,
    Verbs,
    /// Every rank a thread of one process (in-process jobs and tests only).
    Loopback,
}

impl ProviderKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Shm => "shm",
            ProviderKind::Verbs => "verbs",
            ProviderKind::Loopback => "loopback",
        }
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ProviderKind {
    type Err = TransportError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "shm" => Ok(ProviderKind::Shm),
            "verbs" => Ok(ProviderKind::Verbs),
            "loopback" => Ok(ProviderKind::Loopback),
            other => Err(TransportError::Config(format!(
                "unknown provider {other:?} (expected shm, verbs or loopback)"
            ))),
        }
    }
}

/// Capability flags a provider advertises, UCX-style; upper layers pick protocols from them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Capabilities(pub u32);

impl Capabilities {
    pub const PUT: Capabilities = Capabilities(1 << 0);
    pub const PUT_IMM: Capabilities = Capabilities(1 << 1);
    pub const GET: Capabilities = Capabilities(1 << 2);
    pub const TAGGED: Capabilities = Capabilities(1 << 3);
    /// Rendezvous moves large messages straight from the sender's registered buffer.
    pub const RNDV_ZCOPY: Capabilities = Capabilities(1 << 4);
    /// `wait` can sleep on an OS event (futex, completion channel) instead of spinning.
    pub const EVENT_WAIT: Capabilities = Capabilities(1 << 5);
    /// Small puts are carried inline in the work request.
    pub const INLINE: Capabilities = Capabilities(1 << 6);
    /// Operations are load/store on mapped memory: they are complete when the call returns.
    pub const SYNC_RMA: Capabilities = Capabilities(1 << 7);
    /// Peers on another host can be reached.
    pub const INTER_NODE: Capabilities = Capabilities(1 << 8);

    const NAMES: [(Capabilities, &'static str); 9] = [
        (Self::PUT, "put"),
        (Self::PUT_IMM, "put_imm"),
        (Self::GET, "get"),
        (Self::TAGGED, "tagged"),
        (Self::RNDV_ZCOPY, "rndv_zcopy"),
        (Self::EVENT_WAIT, "event_wait"),
        (Self::INLINE, "inline"),
        (Self::SYNC_RMA, "sync_rma"),
        (Self::INTER_NODE, "inter_node"),
    ];

    pub fn contains(self, other: Capabilities) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Capabilities {
    type Output = Capabilities;
    fn bitor(self, rhs: Capabilities) -> Capabilities {
        Capabilities(self.0 | rhs.0)
    }
}

impl fmt::Display for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> =
            Self::NAMES.iter().filter(|(c, _)| self.contains(*c)).map(|(_, n)| *n).collect();
        f.write_str(&names.join(","))
    }
}

/// What a peer may do to a registered region. Regions get the least access they need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access(pub u8);

impl Access {
    pub const LOCAL: Access = Access(0);
    pub const REMOTE_READ: Access = Access(1);
    pub const REMOTE_WRITE: Access = Access(2);
    pub const REMOTE_RW: Access = Access(3);

    pub fn allows(self, needed: Access) -> bool {
        self.0 & needed.0 == needed.0
    }
}

/// The serializable remote descriptor of a registered region, `{addr, len, key}` plus its owner.
/// Peers receive it out of band (bootstrap, a message) and name it in put/get.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteRegion {
    pub owner: Rank,
    pub addr: u64,
    pub len: u64,
    pub key: u64,
}

impl RemoteRegion {
    pub const WIRE_LEN: usize = 28;

    pub fn to_bytes(&self) -> [u8; Self::WIRE_LEN] {
        let mut out = [0u8; Self::WIRE_LEN];
        out[0..4].copy_from_slice(&self.owner.to_le_bytes());
        out[4..12].copy_from_slice(&self.addr.to_le_bytes());
        out[12..20].copy_from_slice(&self.len.to_le_bytes());
        out[20..28].copy_from_slice(&self.key.to_le_bytes());
        out
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        if bytes.len() != Self::WIRE_LEN {
            return Err(TransportError::Malformed {
                what: "remote region descriptor",
                detail: format!("{} bytes, expected {}", bytes.len(), Self::WIRE_LEN),
            });
        }
        let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap_or([0; 8]));
        Ok(RemoteRegion {
            owner: u32::from_le_bytes(bytes[0..4].try_into().unwrap_or([0; 4])),
            addr: u64_at(4),
            len: u64_at(12),
            key: u64_at(20),
        })
    }

    /// Checks that `[offset, offset + len)` lies inside the region.
    pub fn check_bounds(&self, op: &'static str, offset: u64, len: u64) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(TransportError::OutOfBounds { op, offset, len, region_len: self.len }),
        }
    }
}

/// Identifies a posted operation in its completion. `OpId::REMOTE` marks target-side events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub u64);

impl OpId {
    pub const REMOTE: OpId = OpId(0);
}

/// Whether an RMA operation raises a local completion. Unsignaled operations are batched:
/// a later signaled completion on the same endpoint implies they are done too (as in verbs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Yes,
    No,
}

/// One RMA operation: `len` bytes between a local registered region and a remote one.
#[derive(Debug, Clone, Copy)]
pub struct Rma<'a> {
    pub local: &'a Region,
    pub local_offset: usize,
    pub remote: &'a RemoteRegion,
    pub remote_offset: u64,
    pub len: usize,
}

/// Which sender a receive accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Any,
    Rank(Rank),
}

impl Source {
    pub fn matches(self, rank: Rank) -> bool {
        match self {
            Source::Any => true,
            Source::Rank(r) => r == rank,
        }
    }
}

/// Tag matching: a message with tag `t` matches when `t & mask == tag & mask`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TagMatch {
    pub tag: Tag,
    pub mask: Tag,
}

impl TagMatch {
    pub fn exact(tag: Tag) -> Self {
        TagMatch { tag, mask: Tag::MAX }
    }
    pub fn any() -> Self {
        TagMatch { tag: 0, mask: 0 }
    }
    pub fn matches(self, tag: Tag) -> bool {
        tag & self.mask == self.tag & self.mask
    }
}

/// Where a received message lands.
#[derive(Debug, Clone)]
pub enum RecvBuffer {
    /// Straight into a registered region (zero-copy for rendezvous).
    Region { region: Region, offset: usize, capacity: usize },
    /// Into a fresh `Vec` returned in the completion.
    Owned { capacity: usize },
}

impl RecvBuffer {
    pub fn capacity(&self) -> usize {
        match self {
            RecvBuffer::Region { capacity, .. } | RecvBuffer::Owned { capacity } => *capacity,
        }
    }
}

/// What completed.
#[derive(Debug, Clone)]
pub enum CompletionKind {
    Put,
    PutImm,
    Get,
    /// A tagged send finished: its buffer may be reused.
    Send {
        dest: Rank,
        tag: Tag,
        len: usize,
    },
    /// A tagged receive finished. `data` is set for `RecvBuffer::Owned`.
    Recv {
        source: Rank,
        tag: Tag,
        len: usize,
        data: Option<Vec<u8>>,
    },
    /// Target side of a `put_imm`: the data is in place when this is seen.
    Imm {
        source: Rank,
        imm: u32,
        len: usize,
    },
}

/// One completion-queue entry.
#[derive(Debug, Clone)]
pub struct Completion {
    pub op: OpId,
    pub kind: CompletionKind,
    pub status: std::result::Result<(), TransportError>,
}

impl Completion {
    pub fn ok(op: OpId, kind: CompletionKind) -> Self {
        Completion { op, kind, status: Ok(()) }
    }

    pub fn failed(op: OpId, kind: CompletionKind, error: TransportError) -> Self {
        Completion { op, kind, status: Err(error) }
    }

    /// The completion if it succeeded, else its error.
    pub fn into_result(self) -> Result<Completion> {
        match self.status {
            Ok(()) => Ok(self),
            Err(e) => Err(e),
        }
    }
}

/// Liveness of a peer as this provider sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerState {
    Alive,
    Dead,
}

/// The one trait every transport provider implements.
///
/// Operations are posted and complete asynchronously; completions are collected by `poll`
/// (busy) or `wait` (bounded block). Every error a peer can cause returns `Err` or a failed
/// completion; nothing waits without a bound.
pub trait Provider: Send {
    fn kind(&self) -> ProviderKind;
    fn capabilities(&self) -> Capabilities;
    fn rank(&self) -> Rank;
    fn size(&self) -> u32;
    fn config(&self) -> &TransportConfig;

    /// Allocates and registers `len` bytes with the given remote access.
    fn alloc_region(&mut self, len: usize, access: Access) -> Result<Region>;

    /// RDMA write. Bounds and key are checked before any byte moves.
    fn put(&mut self, rma: Rma<'_>, signal: Signal) -> Result<OpId>;
    /// RDMA write that also raises `CompletionKind::Imm` carrying `imm` at the target.
    fn put_imm(&mut self, rma: Rma<'_>, imm: u32, signal: Signal) -> Result<OpId>;
    /// RDMA read into the local region.
    fn get(&mut self, rma: Rma<'_>, signal: Signal) -> Result<OpId>;

    /// Tagged send from any buffer (copied: eager below the threshold, staged above it).
    fn send(&mut self, dest: Rank, tag: Tag, data: &[u8]) -> Result<OpId>;
    /// Tagged send from a registered region; above the threshold the peer reads it in place
    /// (rendezvous, zero copy), so the bytes must stay unchanged until the `Send` completion.
    fn send_region(
        &mut self,
        dest: Rank,
        tag: Tag,
        region: &Region,
        offset: usize,
        len: usize,
    ) -> Result<OpId>;
    /// Posts a tagged receive; it completes with `CompletionKind::Recv`.
    fn post_recv(&mut self, source: Source, tag: TagMatch, buffer: RecvBuffer) -> Result<OpId>;

    fn peer_state(&self, peer: Rank) -> PeerState;

    /// The incarnation of `peer` this provider is connected to (or was, if it died since);
    /// None when never connected, or when the provider does not track incarnations.
    fn peer_incarnation(&self, _peer: Rank) -> Option<u32> {
        None
    }

    /// Connects to `peer`'s respawned `incarnation` at `address` (from `Bootstrap::lookup`,
    /// `poll_rejoins` or `wait_rejoin`). Everything pending on the previous incarnation first
    /// fails with `PeerDead`, and nothing it sent is delivered afterwards; old `RemoteRegion`s
    /// of `peer` are refused (`InvalidKey`). Then `peer_state(peer)` is `Alive` again.
    /// `StaleIncarnation` if `incarnation` is not newer than the connected one.
    fn reconnect(&mut self, _peer: Rank, _incarnation: u32, _address: &[u8]) -> Result<()> {
        Err(TransportError::Unsupported(format!("reconnect on the {} provider", self.kind())))
    }

    /// Makes progress without blocking: drains incoming rings or CQs, checks peer liveness and
    /// moves finished operations to the completion queue.
    fn progress(&mut self) -> Result<()>;
    /// Sleeps until an event may have arrived, at most `timeout`.
    fn block(&mut self, timeout: Duration) -> Result<()>;
    /// The provider's completion queue, filled by `progress`.
    fn completions(&mut self) -> &mut VecDeque<Completion>;

    /// Busy-poll: progresses once and moves all completions to `out`.
    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<usize> {
        self.progress()?;
        let cq = self.completions();
        let n = cq.len();
        out.extend(cq.drain(..));
        Ok(n)
    }

    /// Waits up to `timeout` for at least one completion; `Err(Timeout)` if none came.
    fn wait(&mut self, out: &mut Vec<Completion>, timeout: Duration) -> Result<usize> {
        self.wait_until(timeout, &mut |cq| !cq.is_empty())?;
        self.poll(out)
    }

    /// Waits up to `timeout` for the completion of `op`, leaving other completions queued.
    fn wait_op(&mut self, op: OpId, timeout: Duration) -> Result<Completion> {
        self.wait_until(timeout, &mut |cq| cq.iter().any(|c| c.op == op))?;
        let cq = self.completions();
        match cq.iter().position(|c| c.op == op) {
            Some(i) => cq.remove(i).ok_or(TransportError::Timeout(timeout)),
            None => Err(TransportError::Timeout(timeout)),
        }
    }

    /// Progresses until `ready(cq)` holds, spinning or sleeping as `config().wait_mode` says.
    fn wait_until(
        &mut self,
        timeout: Duration,
        ready: &mut dyn FnMut(&VecDeque<Completion>) -> bool,
    ) -> Result<()> {
        let start = Instant::now();
        let (mode, spin) = (self.config().wait_mode, self.config().spin);
        loop {
            self.progress()?;
            if ready(self.completions()) {
                return Ok(());
            }
            let elapsed = start.elapsed();
            if elapsed >= timeout {
                return Err(TransportError::Timeout(timeout));
            }
            let spinning = match mode {
                WaitMode::Poll => true,
                WaitMode::Event => false,
                WaitMode::Hybrid => elapsed < spin,
            };
            if spinning {
                std::hint::spin_loop();
            } else {
                // Short slices keep liveness checks running while asleep.
                self.block((timeout - elapsed).min(Duration::from_millis(10)))?;
            }
        }
    }
}
