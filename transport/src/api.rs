//! The transport API: one `Provider` trait that every provider (shm, verbs, loopback) implements, and the
//! plain types it speaks. Layers above (logger, ckpt, runtime) use only this module.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::codec::{CodecError, Fixed, Reader, Sink, Writer};
use crate::completion::{CompletionQueues, Owner};
use crate::config::TransportConfig;
use crate::error::{Result, TransportError};
use crate::region::Region;
use crate::spinwait::{Idle, SpinWait};

/// A process's index in the job, `0..size`.
pub type Rank = u32;
/// A message tag. Matching uses `TagMatch` (tag + mask, as in UCX).
pub type Tag = u64;

/// Which provider to run, chosen at run time by `REVERB_PROVIDER` or `--provider`: the name
/// of a registered provider ([`ProviderKind::SHM`], [`ProviderKind::VERBS`],
/// [`ProviderKind::LOOPBACK`]; the table is `providers.rs`). Values are the registered
/// constants or parsed from a registered name.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ProviderKind(&'static str);

impl ProviderKind {
    /// The kind named `name`; only the registry calls it, for its constants.
    pub(crate) const fn named(name: &'static str) -> Self {
        ProviderKind(name)
    }

    /// The name `REVERB_PROVIDER` and `--provider` accept (`shm`, `verbs`, `loopback`).
    pub fn as_str(self) -> &'static str {
        self.0
    }
}

impl fmt::Debug for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// Parses a registered provider's name; any other is a [`TransportError::Config`].
impl FromStr for ProviderKind {
    type Err = TransportError;
    fn from_str(s: &str) -> Result<Self> {
        crate::providers::by_name(s).ok_or_else(|| {
            TransportError::Config(format!(
                "unknown provider {s:?} (expected {})",
                crate::providers::names_for_humans()
            ))
        })
    }
}

/// Capability flags a provider advertises, UCX-style; upper layers pick protocols from them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Capabilities(pub u32);

impl Capabilities {
    /// One-sided RDMA write ([`Provider::put`]).
    pub const PUT: Capabilities = Capabilities(1 << 0);
    /// RDMA write with an immediate raised at the target ([`Provider::put_imm`]).
    pub const PUT_IMM: Capabilities = Capabilities(1 << 1);
    /// One-sided RDMA read ([`Provider::get`]).
    pub const GET: Capabilities = Capabilities(1 << 2);
    /// Tagged send/receive with matching ([`Provider::send`], [`Provider::post_recv`]).
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
    /// Arrived messages can be peeked at and claimed ([`Provider::peek_arrived`],
    /// [`Provider::claim_recv_for`]).
    pub const PEEK: Capabilities = Capabilities(1 << 9);

    const NAMES: [(Capabilities, &'static str); 10] = [
        (Self::PUT, "put"),
        (Self::PUT_IMM, "put_imm"),
        (Self::GET, "get"),
        (Self::TAGGED, "tagged"),
        (Self::RNDV_ZCOPY, "rndv_zcopy"),
        (Self::EVENT_WAIT, "event_wait"),
        (Self::INLINE, "inline"),
        (Self::SYNC_RMA, "sync_rma"),
        (Self::INTER_NODE, "inter_node"),
        (Self::PEEK, "peek"),
    ];

    /// True when every flag of `other` is set in `self`.
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

/// Comma-separated flag names, e.g. `put,get,tagged` (empty when none is set).
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
    /// Only this process touches the region; peers can neither read nor write it.
    pub const LOCAL: Access = Access(0);
    /// Peers may read the region (`get`, rendezvous reads of a send buffer).
    pub const REMOTE_READ: Access = Access(1);
    /// Peers may write the region (`put`, `put_imm`).
    pub const REMOTE_WRITE: Access = Access(2);
    /// Peers may read and write the region.
    pub const REMOTE_RW: Access = Access(3);

    /// True when this access includes every right in `needed`.
    pub fn allows(self, needed: Access) -> bool {
        self.0 & needed.0 == needed.0
    }
}

/// The serializable remote descriptor of a registered region, `{addr, len, key}` plus its owner.
/// Peers receive it out of band (bootstrap, a message) and name it in put/get.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteRegion {
    /// The rank that registered the region.
    pub owner: Rank,
    /// The region's base address in the owner's address space (validated against the
    /// owner's registration, never dereferenced by the peer).
    pub addr: u64,
    /// Length of the region in bytes.
    pub len: u64,
    /// The remote key the owner issued; a deregistered region's key is refused.
    pub key: u64,
}

impl RemoteRegion {
    /// Bytes of [`RemoteRegion::to_bytes`]: owner (4) + addr, len, key (8 each), little-endian.
    pub const WIRE_LEN: usize = 28;

    /// Encodes the descriptor for sending to a peer (see [`RemoteRegion::WIRE_LEN`]).
    pub fn to_bytes(&self) -> [u8; Self::WIRE_LEN] {
        let mut out = Fixed::<{ Self::WIRE_LEN }>::new();
        self.write(&mut Writer::new(&mut out));
        out.into_array()
    }

    /// Appends the descriptor to a larger message.
    pub fn write<S: Sink + ?Sized>(&self, w: &mut Writer<'_, S>) {
        w.u32(self.owner).u64(self.addr).u64(self.len).u64(self.key);
    }

    /// Decodes [`RemoteRegion::to_bytes`] output from untrusted bytes: an error unless `bytes`
    /// is exactly [`RemoteRegion::WIRE_LEN`] long. The fields themselves are only checked when
    /// the descriptor is used.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader::new(bytes, "remote region descriptor");
        let region = Self::read(&mut r)?;
        r.finish()?;
        Ok(region)
    }

    /// Reads a descriptor from the front of a larger message.
    pub fn read(r: &mut Reader<'_>) -> Result<Self, CodecError> {
        Ok(RemoteRegion {
            owner: r.u32("owner")?,
            addr: r.u64("addr")?,
            len: r.u64("len")?,
            key: r.u64("key")?,
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
/// The high 16 bits name the operation's [`Owner`] ([`OpId::new`], [`OpId::owner`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OpId(pub u64);

impl OpId {
    /// The id of completions no local operation posted (the target side of `put_imm`).
    /// Providers number their own operations from 1 ([`CompletionQueues::next_op`]), so it
    /// never names one.
    pub const REMOTE: OpId = OpId(0);
}

/// Whether an RMA operation raises a local completion. Unsignaled operations are batched:
/// a later signaled completion on the same endpoint implies they are done too (as in verbs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Raise a completion when the operation is done.
    Yes,
    /// Raise none; the operation still fails loudly (its call or a later completion) on error.
    No,
}

/// One RMA operation: `len` bytes between a local registered region and a remote one.
#[derive(Debug, Clone, Copy)]
pub struct Rma<'a> {
    /// The local registered region: source of a put, destination of a get.
    pub local: &'a Region,
    /// Byte offset into `local`.
    pub local_offset: usize,
    /// The peer's region, as its owner described it.
    pub remote: &'a RemoteRegion,
    /// Byte offset into `remote`.
    pub remote_offset: u64,
    /// Bytes to move; `[offset, offset + len)` must fit both regions.
    pub len: usize,
}

/// Which sender a receive accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Any rank of the job.
    Any,
    /// Only this rank.
    Rank(Rank),
}

impl Source {
    /// True when a message from `rank` is accepted.
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
    /// The tag bits to compare.
    pub tag: Tag,
    /// Which bits of the tag take part in matching (set bits are compared).
    pub mask: Tag,
}

impl TagMatch {
    /// Matches `tag` and nothing else.
    pub fn exact(tag: Tag) -> Self {
        TagMatch { tag, mask: Tag::MAX }
    }
    /// Matches every tag.
    pub fn any() -> Self {
        TagMatch { tag: 0, mask: 0 }
    }
    /// True when a message tagged `tag` is accepted.
    pub fn matches(self, tag: Tag) -> bool {
        tag & self.mask == self.tag & self.mask
    }
    /// Whether some tag in reverb's own ranges ([`LIBRARY_TAG_PREFIXES`]) is accepted.
    pub fn may_match_library_tag(self) -> bool {
        LIBRARY_TAG_PREFIXES.iter().any(|&p| (library_tag(p, 0) ^ self.tag) & self.mask & PREFIX_MASK == 0)
    }
}

/// The top 32 bits of the provider tags reverb's own layers send under: the logged
/// endpoint's frames ("RVLG"), checkpoint teams ("ckpt") and logger-core hellos ("RLHE").
/// Application messages that share a provider with them (the logged endpoint's pass-through)
/// must neither use these tags nor receive with a match that accepts them.
pub const LIBRARY_TAG_PREFIXES: [u32; 3] = [0x5256_4c47, 0x636b_7074, 0x524c_4845];
const PREFIX_MASK: Tag = 0xffff_ffff_0000_0000;

/// Tag `low` in the library range `prefix`.
pub const fn library_tag(prefix: u32, low: u32) -> Tag {
    (prefix as Tag) << 32 | low as Tag
}

/// Whether `tag` lies in one of reverb's own ranges.
pub fn is_library_tag(tag: Tag) -> bool {
    LIBRARY_TAG_PREFIXES.contains(&((tag >> 32) as u32))
}

/// Where a received message lands.
#[derive(Debug, Clone)]
pub enum RecvBuffer {
    /// Straight into a registered region (zero-copy for rendezvous).
    /// `capacity` bytes at `offset` of `region`, which must lie inside it (checked when posted).
    Region {
        /// The region written into.
        region: Region,
        /// Byte offset of the buffer in `region`.
        offset: usize,
        /// The buffer's size in bytes.
        capacity: usize,
    },
    /// Into a fresh `Vec` returned in the completion.
    /// At most `capacity` bytes.
    Owned {
        /// The largest message accepted, in bytes.
        capacity: usize,
    },
    /// Into memory the caller lends ([`crate::borrowed`]): only for
    /// [`Provider::claim_recv_for`] on a provider with [`Capabilities::SYNC_RMA`], which
    /// writes it before returning, and for [`Provider::post_recv_for`] on shm when lent with
    /// [`crate::borrowed::Borrowed::posted`] (a longer message then comes back owned);
    /// everything else refuses it (`Unsupported`).
    Borrowed(crate::borrowed::Borrowed),
}

impl RecvBuffer {
    /// The most bytes this buffer takes; a longer message fails the receive with
    /// [`TransportError::Truncated`].
    pub fn capacity(&self) -> usize {
        match self {
            RecvBuffer::Region { capacity, .. } | RecvBuffer::Owned { capacity } => *capacity,
            RecvBuffer::Borrowed(b) => b.len(),
        }
    }
}

/// What [`Provider::take_eager_into`] found for a receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EagerTake {
    /// The message was copied into the caller's buffer and is gone from the provider:
    /// `len` bytes from `source` under `tag`.
    Landed {
        /// Its sender.
        source: Rank,
        /// Its tag.
        tag: Tag,
        /// Its length in bytes.
        len: usize,
    },
    /// Nothing the receive matches has arrived.
    NoneArrived,
    /// The message the receive matches is not one to take this way (a rendezvous, a longer
    /// one, one `accept` refused), or the provider has no such path: claim it instead.
    Claim,
}

/// What completed.
#[derive(Debug, Clone)]
pub enum CompletionKind {
    /// A signaled [`Provider::put`] finished: the local buffer may be reused.
    Put,
    /// A signaled [`Provider::put_imm`] finished: the local buffer may be reused.
    PutImm,
    /// A signaled [`Provider::get`] finished: the data is in the local region.
    Get,
    /// A tagged send finished: its buffer may be reused.
    Send {
        /// The destination rank.
        dest: Rank,
        /// The tag it was sent with.
        tag: Tag,
        /// Message length in bytes.
        len: usize,
    },
    /// A tagged receive finished. `data` is set for `RecvBuffer::Owned`.
    Recv {
        /// The sender.
        source: Rank,
        /// The message's tag (a receive may match several).
        tag: Tag,
        /// Message length in bytes; 0 when the receive failed because the sender died.
        len: usize,
        /// The message, for an [`RecvBuffer::Owned`] receive; `None` for a region receive.
        data: Option<Vec<u8>>,
    },
    /// Target side of a `put_imm`: the data is in place when this is seen.
    Imm {
        /// The rank that wrote.
        source: Rank,
        /// The immediate value the writer passed.
        imm: u32,
        /// Bytes written.
        len: usize,
    },
}

/// One completion-queue entry.
#[derive(Debug, Clone)]
pub struct Completion {
    /// The operation's id as its post returned it ([`OpId::REMOTE`] for an [`CompletionKind::Imm`]).
    pub op: OpId,
    /// What completed, with its details.
    pub kind: CompletionKind,
    /// `Ok` if the operation succeeded, else why it failed (e.g. [`TransportError::PeerDead`],
    /// [`TransportError::Truncated`]). Boxed: the error is rare and large, and a completion
    /// that fits one cache line moves without a `memcpy` call on every message.
    pub status: std::result::Result<(), Box<TransportError>>,
}

impl Completion {
    /// A successful completion.
    pub fn ok(op: OpId, kind: CompletionKind) -> Self {
        Completion { op, kind, status: Ok(()) }
    }

    /// A failed completion carrying `error`.
    pub fn failed(op: OpId, kind: CompletionKind, error: TransportError) -> Self {
        Completion { op, kind, status: Err(Box::new(error)) }
    }

    /// Why the operation failed, if it did.
    pub fn error(&self) -> Option<&TransportError> {
        self.status.as_ref().err().map(|e| &**e)
    }

    /// The completion if it succeeded, else its error.
    pub fn into_result(self) -> Result<Completion> {
        match self.status {
            Ok(()) => Ok(self),
            Err(e) => Err(*e),
        }
    }
}

/// Liveness of a peer as this provider sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerState {
    /// Reachable: operations towards it are posted.
    Alive,
    /// Gone (exited, crashed, or outside the job): operations towards it fail with
    /// [`TransportError::PeerDead`] until a [`Provider::reconnect`] to a new incarnation.
    Dead,
}

/// The one trait every transport provider implements.
///
/// Operations are posted and complete asynchronously; completions are collected by `poll`
/// (busy) or `wait` (bounded block). Every error a peer can cause returns `Err` or a failed
/// completion; nothing waits without a bound.
///
/// The rules every provider keeps:
/// - **Posting.** A post that returns `Err` raises no completion; argument checks (bounds,
///   keys, ranks) fail before anything moves. One that returns an [`OpId`] raises one
///   [`Completion`] with that id, successful or failed (an unsignaled RMA raises none unless it
///   fails). Ids are unique per provider and never [`OpId::REMOTE`].
/// - **Routing.** Every post names an [`Owner`] (`put_for`, `send_for`, ...; the plain `put`,
///   `send`, ... post for [`Owner::APP`]), and its completion goes to that owner's queue only
///   ([`Provider::completions_of`]); target-side events ([`CompletionKind::Imm`]) go to the
///   owner [`Provider::route_remote`] names (`APP` by default). A closed owner's completions
///   are dropped (its posted receives still take the messages they match). So components
///   sharing a provider each open an owner and drain their own queue; `wait_op` and
///   `wait_until` look at one owner's queue only.
/// - **Progress.** Nothing moves unless the user calls [`Provider::progress`] (directly or
///   through `poll`/`wait`/`wait_op`): a rank that stops progressing stalls its peers'
///   rendezvous sends to it and its own backlog.
/// - **Ordering.** Tagged messages from one sender are matched in the order they were sent
///   (no overtaking), as in MPI. Completions of different operations may arrive in any order.
/// - **Ownership.** Buffers passed by slice are copied before the call returns. A [`Region`]
///   named by a pending operation is kept alive by the provider (it holds a clone), but its
///   bytes must not be changed until that operation completes.
/// - **Failure.** When a peer dies, every pending operation that needs it fails with
///   [`TransportError::PeerDead`], and new posts towards it return that error.
///
/// # Example
///
/// The shape of every rank's program (see the README's quick start): bootstrap from the
/// environment the launcher set, open the configured provider, exchange a message.
///
/// ```no_run
/// use std::time::Duration;
/// use reverb_transport::bootstrap::TcpBootstrap;
/// use reverb_transport::{Provider, RecvBuffer, Source, TagMatch, TransportConfig};
///
/// # fn main() -> reverb_transport::Result<()> {
/// let mut boot = TcpBootstrap::connect_from_env()?;
/// let config = TransportConfig::from_env()?;
/// let mut provider: Box<dyn Provider> = reverb_transport::open(&config, &mut boot)?;
/// let (rank, size) = (provider.rank(), provider.size());
/// let timeout = Duration::from_secs(10);
///
/// let buffer = RecvBuffer::Owned { capacity: 64 };
/// let recv = provider.post_recv(Source::Any, TagMatch::exact(7), buffer)?;
/// let send = provider.send((rank + 1) % size, 7, b"hello")?;
/// provider.wait_op(send, timeout)?.into_result()?;
/// let got = provider.wait_op(recv, timeout)?.into_result()?;
/// println!("rank {rank} got {:?}", got.kind);
/// # Ok(())
/// # }
/// ```
pub trait Provider: Send {
    /// Which provider this is.
    fn kind(&self) -> ProviderKind;
    /// What this provider can do; fixed for its lifetime.
    fn capabilities(&self) -> Capabilities;
    /// This process's rank in the job.
    fn rank(&self) -> Rank;
    /// The number of ranks in the job.
    fn size(&self) -> u32;
    /// The configuration it was opened with.
    fn config(&self) -> &TransportConfig;

    /// Allocates and registers `len` bytes with the given remote access, zeroed; the memory is
    /// deregistered when the last clone of the returned [`Region`] drops. Errors: `len == 0` or
    /// a full registration table ([`TransportError::Config`]), or the OS / NIC refusing the
    /// memory ([`TransportError::Io`]).
    fn alloc_region(&mut self, len: usize, access: Access) -> Result<Region>;

    /// Registers `len` bytes at `ptr` that the caller owns (memory no provider allocated, such
    /// as an MPI window's) with the given remote access, for peers that reach this rank over
    /// the network: verbs and tcp register it; shm and loopback, whose peers map the memory
    /// their provider allocated, refuse (`Unsupported`), and `auto` registers it with its
    /// network side only (a put or get from a rank on this host finds no key). Errors: `len ==
    /// 0` ([`TransportError::Config`]), the NIC refusing the memory ([`TransportError::Io`]).
    ///
    /// # Safety
    /// `ptr..ptr + len` must stay mapped, readable and writable while the returned region (or
    /// a clone) lives; peers write it at any time.
    unsafe fn register_memory(&mut self, _ptr: *mut u8, _len: usize, _access: Access) -> Result<Region> {
        Err(TransportError::Unsupported(format!(
            "the {} provider registers only memory it allocated",
            self.kind()
        )))
    }

    /// RDMA write of `rma.len` bytes from the local region to the remote one, for `owner`.
    /// Bounds, key, access and peer liveness are checked before any byte moves (`OutOfBounds`,
    /// `InvalidKey`, `AccessDenied`, `PeerDead`); on verbs the NIC checks the remote side again
    /// and reports a failure in the completion. With [`Capabilities::SYNC_RMA`] (shm, loopback)
    /// the data is in place when the call returns; otherwise only when the completion is seen.
    /// To tell the target that the data is there, use `put_imm`.
    fn put_for(&mut self, owner: Owner, rma: Rma<'_>, signal: Signal) -> Result<OpId>;
    /// RDMA write that also raises [`CompletionKind::Imm`] carrying `imm` at the target; the
    /// data is in place when the target sees it. Checked as `put`.
    fn put_imm_for(&mut self, owner: Owner, rma: Rma<'_>, imm: u32, signal: Signal) -> Result<OpId>;
    /// RDMA read of `rma.len` bytes from the remote region into the local one; checked as
    /// `put` (the remote region needs [`Access::REMOTE_READ`]). The local bytes are valid once
    /// the call returns with [`Capabilities::SYNC_RMA`], else once the completion is seen.
    fn get_for(&mut self, owner: Owner, rma: Rma<'_>, signal: Signal) -> Result<OpId>;

    /// Tagged send from any buffer, for `owner`. `data` is copied before the call returns, so
    /// it may be reused at once: up to `config().rndv_thresh` bytes go eagerly; above it shm and
    /// verbs stage the bytes in a pooled registered region and use rendezvous (loopback sends
    /// every slice eagerly). Completes with [`CompletionKind::Send`]: eager sends once the
    /// message is handed to the peer, rendezvous sends once the receiver has read it.
    /// `InvalidRank` / `PeerDead` for a bad or dead `dest`.
    fn send_for(&mut self, owner: Owner, dest: Rank, tag: Tag, data: &[u8]) -> Result<OpId>;
    /// Tagged send from a registered region; above the threshold the peer reads it in place
    /// (rendezvous, zero copy), so the bytes must stay unchanged until the `Send` completion.
    /// Up to the threshold the bytes are copied at once, as in `send`. `OutOfBounds` if
    /// `[offset, offset + len)` does not fit `region`; `AccessDenied` for a rendezvous from a
    /// region without [`Access::REMOTE_READ`].
    fn send_region_for(
        &mut self,
        owner: Owner,
        dest: Rank,
        tag: Tag,
        region: &Region,
        offset: usize,
        len: usize,
    ) -> Result<OpId>;
    /// Tagged send of bytes the caller lends until the `Send` completion: above the threshold
    /// a provider may let the receiver read them where they are (shm: cross-memory attach, one
    /// copy in all, as Open MPI's single-copy mechanism); otherwise they are copied as in
    /// `send` (the default). Errors as `send_for`.
    ///
    /// # Safety
    /// `data` must stay valid and unchanged until this operation's `Send` completion is taken
    /// from the owner's queue, or the provider is dropped.
    unsafe fn send_lent_for(&mut self, owner: Owner, dest: Rank, tag: Tag, data: &[u8]) -> Result<OpId> {
        self.send_for(owner, dest, tag, data)
    }
    /// Whether a lent send of `len` bytes to `dest` would be read where it is now (not
    /// copied): a caller with its own staging keeps the others for it.
    fn lends_to(&self, _dest: Rank, _len: usize) -> bool {
        false
    }
    /// Posts a tagged receive for `owner`; it completes with [`CompletionKind::Recv`] when a
    /// message from `source` whose tag matches `tag` arrives (or already had). A message longer
    /// than the buffer fails the receive with `Truncated` (the sender's completion still
    /// succeeds). `InvalidRank` for a source outside the job, `OutOfBounds` for a region buffer
    /// that does not fit, `PeerDead` if `source` names a dead rank with nothing left to deliver.
    fn post_recv_for(
        &mut self,
        owner: Owner,
        source: Source,
        tag: TagMatch,
        buffer: RecvBuffer,
    ) -> Result<OpId>;

    /// Takes back the receive `op` (from `post_recv_for`) if no message has matched it yet, as
    /// libfabric's `fi_cancel` and `MPI_Cancel` do: Ok(true) when it is gone, and no
    /// completion follows for it; Ok(false) when a message matched it already (its completion
    /// came or comes), `op` names no posted receive, or its buffer was advertised to a peer
    /// that may be writing into it. Every provider here matches in the shared tag matcher
    /// and takes receives back; the default, false, is for one that cannot.
    fn cancel_recv(&mut self, _op: OpId) -> Result<bool> {
        Ok(false)
    }

    /// The message a receive for (`source`, `tag`) would take now, left in place, as
    /// `MPI_Iprobe` and libfabric's `FI_PEEK` see it: (sender, tag, length). No progress is
    /// made. Providers with [`Capabilities::PEEK`] implement it; others say `Unsupported`.
    fn peek_arrived(&mut self, _source: Source, _tag: TagMatch) -> Result<Option<(Rank, Tag, usize)>> {
        Err(TransportError::Unsupported(format!("{} cannot peek at arrived messages", self.kind())))
    }
    /// Posts a receive only if a message it takes has arrived ([`Provider::peek_arrived`]),
    /// as libfabric's `FI_CLAIM`: Some(op), whose completion is queued already (eager) or
    /// follows the rendezvous read; None, and nothing posted, when no such message is here.
    fn claim_recv_for(
        &mut self,
        owner: Owner,
        source: Source,
        tag: TagMatch,
        buffer: RecvBuffer,
    ) -> Result<Option<OpId>> {
        match self.peek_arrived(source, tag)? {
            Some(_) => self.post_claim_for(owner, source, tag, buffer).map(Some),
            None => Ok(None),
        }
    }
    /// How [`Provider::claim_recv_for`] posts once it found the arrival: as any receive. A
    /// load/store provider, whose claims complete before they return, lets them land in lent
    /// memory ([`RecvBuffer::Borrowed`]).
    fn post_claim_for(
        &mut self,
        owner: Owner,
        source: Source,
        tag: TagMatch,
        buffer: RecvBuffer,
    ) -> Result<OpId> {
        self.post_recv_for(owner, source, tag, buffer)
    }

    /// The fast path of a blocking receive: if the message a receive for (`source`, `tag`)
    /// would take now is eager data already here, no longer than `buf` and wanted by
    /// `accept(tag, len)`, copies it into `buf` and forgets it, with no operation and no
    /// completion. No progress is made. Providers without it answer `Claim` (the default).
    fn take_eager_into(
        &mut self,
        _source: Source,
        _tag: TagMatch,
        _buf: &mut [u8],
        _accept: &dyn Fn(Tag, usize) -> bool,
    ) -> Result<EagerTake> {
        Ok(EagerTake::Claim)
    }
    /// The fast path of a small send: true when `data` went out copied with no operation and
    /// no completion to collect (shm publishes it in the peer's FIFO at once); false, with
    /// nothing sent, where the provider cannot (the default): use `send_for`.
    fn send_inline(&mut self, _dest: Rank, _tag: Tag, _data: &[u8]) -> Result<bool> {
        Ok(false)
    }

    /// [`Provider::put_for`] for [`Owner::APP`].
    fn put(&mut self, rma: Rma<'_>, signal: Signal) -> Result<OpId> {
        self.put_for(Owner::APP, rma, signal)
    }
    /// [`Provider::put_imm_for`] for [`Owner::APP`].
    fn put_imm(&mut self, rma: Rma<'_>, imm: u32, signal: Signal) -> Result<OpId> {
        self.put_imm_for(Owner::APP, rma, imm, signal)
    }
    /// [`Provider::get_for`] for [`Owner::APP`].
    fn get(&mut self, rma: Rma<'_>, signal: Signal) -> Result<OpId> {
        self.get_for(Owner::APP, rma, signal)
    }
    /// [`Provider::send_for`] for [`Owner::APP`].
    fn send(&mut self, dest: Rank, tag: Tag, data: &[u8]) -> Result<OpId> {
        self.send_for(Owner::APP, dest, tag, data)
    }
    /// [`Provider::send_region_for`] for [`Owner::APP`].
    fn send_region(
        &mut self,
        dest: Rank,
        tag: Tag,
        region: &Region,
        offset: usize,
        len: usize,
    ) -> Result<OpId> {
        self.send_region_for(Owner::APP, dest, tag, region, offset, len)
    }
    /// [`Provider::post_recv_for`] for [`Owner::APP`].
    fn post_recv(&mut self, source: Source, tag: TagMatch, buffer: RecvBuffer) -> Result<OpId> {
        self.post_recv_for(Owner::APP, source, tag, buffer)
    }

    /// Counters of the receiver-advertised rendezvous ([`crate::advert`]): adverts sent,
    /// sends written straight into an advertised buffer, receives completed that way. Zeros
    /// for a provider that keeps none.
    fn rndv_stats(&self) -> crate::advert::RndvStats {
        crate::advert::RndvStats::default()
    }

    /// The provider that carries traffic with `peer`: itself, except for the `auto`
    /// provider, which names the sub-provider it chose for that peer.
    fn provider_for(&self, _peer: Rank) -> ProviderKind {
        self.kind()
    }

    /// Liveness of `peer` as last seen by `progress`/`block` (no probe is made); a rank outside
    /// the job is [`PeerState::Dead`].
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

    /// The address a peer passes to [`Provider::connect_peer`] to reach this endpoint (what
    /// libfabric's `fi_getname` returns). `Unsupported` where peers come only from the
    /// bootstrap (the default; shm opened by address has it).
    fn peer_address(&self) -> Result<Vec<u8>> {
        Err(TransportError::Unsupported(format!("peer addresses on the {} provider", self.kind())))
    }

    /// Connects to the endpoint whose [`Provider::peer_address`] is `address` (libfabric's
    /// `fi_av_insert`) and returns the rank that names it here; the same address gives the
    /// same rank again. `Malformed` for bytes that are no address, `PeerDead` for an endpoint
    /// that is gone.
    fn connect_peer(&mut self, _address: &[u8]) -> Result<Rank> {
        Err(TransportError::Unsupported(format!("connecting by address on the {} provider", self.kind())))
    }

    /// Makes progress without blocking: drains incoming rings or CQs, checks peer liveness and
    /// moves finished operations to the completion queue. An `Err` is mostly one malformed
    /// message a peer sent (`Malformed`, oldest first, see [`crate::error::ErrorQueue`]): the
    /// provider stays usable, so callers may log it and keep going. Verbs also returns device
    /// errors (`Io`) from polling its completion queue.
    fn progress(&mut self) -> Result<()>;
    /// Sleeps until an event may have arrived, at most `timeout`; may return early (spurious
    /// wakeups are fine: callers loop on `progress`). Returns at once if completions are queued
    /// (for any owner). A zero timeout never sleeps: it runs the liveness check if one is due.
    fn block(&mut self, timeout: Duration) -> Result<()>;
    /// The provider's completion queues, one per owner, filled by `progress` (and by posts
    /// that complete at once).
    fn queues(&mut self) -> &mut CompletionQueues;

    /// A new owner with an empty queue, for a component that posts on this provider.
    fn open_owner(&mut self) -> Result<Owner> {
        self.queues().open()
    }
    /// Drops `owner`'s queued completions and every later one (a component that goes away
    /// with operations still in flight).
    fn close_owner(&mut self, owner: Owner) {
        self.queues().close(owner)
    }
    /// Sends target-side events ([`CompletionKind::Imm`]) to `owner`'s queue.
    fn route_remote(&mut self, owner: Owner) {
        self.queues().route_remote(owner)
    }
    /// `owner`'s completion queue. Callers may take entries out of it in any order.
    fn completions_of(&mut self, owner: Owner) -> &mut VecDeque<Completion> {
        self.queues().of(owner)
    }
    /// The [`Owner::APP`] completion queue.
    fn completions(&mut self) -> &mut VecDeque<Completion> {
        self.queues().of(Owner::APP)
    }

    /// Busy-poll: progresses once and moves all [`Owner::APP`] completions to `out`.
    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<usize> {
        self.progress()?;
        let cq = self.completions();
        let n = cq.len();
        out.extend(cq.drain(..));
        Ok(n)
    }

    /// Waits up to `timeout` for at least one [`Owner::APP`] completion; `Err(Timeout)` if
    /// none came.
    fn wait(&mut self, out: &mut Vec<Completion>, timeout: Duration) -> Result<usize> {
        self.wait_until(Owner::APP, timeout, &mut |cq| !cq.is_empty())?;
        self.poll(out)
    }

    /// Waits up to `timeout` for the completion of `op`, leaving other completions queued.
    /// Only `op`'s owner's queue is looked at.
    fn wait_op(&mut self, op: OpId, timeout: Duration) -> Result<Completion> {
        let owner = op.owner();
        self.wait_until(owner, timeout, &mut |cq| cq.iter().any(|c| c.op == op))?;
        let cq = self.completions_of(owner);
        match cq.iter().position(|c| c.op == op) {
            Some(i) => cq.remove(i).ok_or(TransportError::Timeout(timeout)),
            None => Err(TransportError::Timeout(timeout)),
        }
    }

    /// Progresses until `ready` holds for `owner`'s queue, spinning or sleeping as
    /// `config().wait_mode` says.
    fn wait_until(
        &mut self,
        owner: Owner,
        timeout: Duration,
        ready: &mut dyn FnMut(&VecDeque<Completion>) -> bool,
    ) -> Result<()> {
        let mut wait = SpinWait::new(self.config(), timeout);
        self.wait_with(owner, &mut wait, ready)
    }

    /// `wait_until` as one leg of a caller's longer wait: `wait` carries its bound, its clock
    /// and how long it has spun across the legs (a loop that calls `wait_until` per round
    /// would spin its hybrid budget again, and read the clock, every round).
    fn wait_with(
        &mut self,
        owner: Owner,
        wait: &mut SpinWait,
        ready: &mut dyn FnMut(&VecDeque<Completion>) -> bool,
    ) -> Result<()> {
        loop {
            self.progress()?;
            if ready(self.completions_of(owner)) {
                return Ok(());
            }
            if let Idle::Sleep(slice) = wait.idle()? {
                self.block(slice)?;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_tags_are_their_prefixes_and_matches_that_reach_them() {
        assert_eq!(library_tag(0x5256_4c47, 1), 0x5256_4c47_0000_0001);
        assert!(LIBRARY_TAG_PREFIXES.iter().all(|&p| is_library_tag(library_tag(p, 42))));
        assert!(!is_library_tag(7) && !is_library_tag(0x5256_4c48_0000_0001));
        // Wildcards over the top bits reach them; a pinned context outside them does not.
        assert!(TagMatch::any().may_match_library_tag());
        assert!(TagMatch { tag: 0, mask: 0xffff_ffff }.may_match_library_tag());
        assert!(TagMatch::exact(library_tag(0x636b_7074, 9)).may_match_library_tag());
        assert!(!TagMatch::exact(9).may_match_library_tag());
        assert!(!TagMatch { tag: 5 << 32, mask: 0xffff_ffff_0000_0000 }.may_match_library_tag());
        // A mask leaving out one flag bit still pins the rest of the prefix.
        assert!(!TagMatch { tag: 5 << 32, mask: !(1 << 62) }.may_match_library_tag());
    }
}
