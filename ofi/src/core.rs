//! The provider's logic, with no raw pointer in sight: an endpoint over a reverb transport
//! provider, its address vector, and its completion queues. The C entry points (`ep`, `cq`,
//! `av`) translate arguments and call in here.
//!
//! Wire format: every libfabric message is one reverb tagged message. The top two tag bits say
//! what it is: [`UNTAGGED`] for `fi_send` (the rest zero), [`WITH_DATA`] when 8 bytes of remote
//! CQ data lead the payload; the application's tag takes the other 62 bits
//! ([`MEM_TAG_FORMAT`]). RMA traffic has [`UNTAGGED`] and `rma::RMA` set, which no
//! application receive matches (see `rma`).

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;

use crate::name::Carrier;
use reverb_transport::error::TransportError;
use reverb_transport::{CompletionKind, OpId, Provider, ProviderKind, Rank, RecvBuffer, Source, TagMatch};

use crate::abi::*;
use crate::error::{OfiError, Result};
use crate::mr::MrTableRef;
use crate::rma::{Landing, RmaCntrs, RmaRole, RMA};

/// The message came from `fi_send`/`fi_recv`, not the tagged calls.
pub const UNTAGGED: u64 = 1 << 63;
/// 8 bytes of remote CQ data lead the payload.
pub const WITH_DATA: u64 = 1 << 62;
/// The tag bits an application may use.
pub const MEM_TAG_FORMAT: u64 = WITH_DATA - 1;
const DATA_LEN: usize = 8;

/// One completion as the CQ formats report it; `src` is the sender's address for readfrom.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    pub context: usize,
    pub flags: u64,
    pub len: usize,
    pub buf: usize,
    pub data: u64,
    pub tag: u64,
    pub src: fi_addr_t,
}

/// A failed operation for `fi_cq_readerr`: positive errno, and the bytes cut off (`olen`).
#[derive(Clone, Debug)]
pub struct ErrEntry {
    pub entry: Entry,
    pub err: i32,
    pub prov_errno: i32,
    pub olen: usize,
    pub text: String,
}

/// A completion queue's contents.
#[derive(Default)]
pub struct CqState {
    pub entries: VecDeque<Entry>,
    pub errors: VecDeque<ErrEntry>,
}

pub type CqRef = Rc<RefCell<CqState>>;

/// An address vector: the address blobs inserted, by fi_addr (FI_AV_TABLE indices; FI_AV_MAP
/// hands out the same numbers). A removed entry is None.
#[derive(Default)]
pub struct AvState {
    pub entries: Vec<Option<Vec<u8>>>,
}

pub type AvRef = Rc<RefCell<AvState>>;

/// A completion counter: the operations it counts that succeeded, and those that failed.
#[derive(Default, Debug)]
pub struct CntrState {
    pub count: u64,
    pub errors: u64,
}

pub type CntrRef = Rc<RefCell<CntrState>>;

/// Counts one completion on `cntr`, if one is bound: an error or a success.
pub(crate) fn bump(cntr: Option<&CntrRef>, failed: bool) {
    if let Some(c) = cntr {
        let mut c = c.borrow_mut();
        if failed {
            c.errors = c.errors.wrapping_add(1);
        } else {
            c.count = c.count.wrapping_add(1);
        }
    }
}

/// What an operation in flight reports when it completes.
pub(crate) struct Pending {
    pub(crate) context: usize,
    pub(crate) flags: u64,
    /// Raise a completion when it succeeds (not for inject or unselected operations).
    pub(crate) report: bool,
    /// The receive buffer lent by the consumer (a read's too): (address, capacity).
    pub(crate) recv_into: Option<(usize, usize)>,
    /// A claimed message the consumer discarded: its completion was raised already.
    pub(crate) discard: bool,
    /// A receive of the RMA protocol, not the application's.
    pub(crate) rma: Option<RmaRole>,
}

/// How a CQ is bound to an endpoint.
pub struct Binding {
    pub cq: CqRef,
    pub selective: bool,
}

/// One send as the calls describe it.
pub struct SendArgs<'a> {
    pub dest: fi_addr_t,
    pub payload: &'a [u8],
    /// The application's tag; None for `fi_send`.
    pub tag: Option<u64>,
    pub data: Option<u64>,
    pub context: usize,
    pub flags: u64,
}

/// One receive as the calls describe it.
pub struct RecvArgs {
    pub buf: usize,
    pub len: usize,
    pub src: fi_addr_t,
    /// (tag, ignore); None for `fi_recv`.
    pub tag: Option<(u64, u64)>,
    pub context: usize,
    pub flags: u64,
}

/// An endpoint: a reverb provider and the libfabric bookkeeping around it.
pub struct EpCore {
    pub(crate) provider: Box<dyn Provider>,
    pub caps: u64,
    pub(crate) tx_op_flags: u64,
    rx_op_flags: u64,
    pub av: Option<AvRef>,
    pub tx: Option<Binding>,
    pub rx: Option<Binding>,
    /// Counters of transmits and receives: every completion counts, selected or not.
    pub tx_cntr: Option<CntrRef>,
    pub rx_cntr: Option<CntrRef>,
    /// Ranks of the AV entries this endpoint connected, by fi_addr, and back.
    to_rank: HashMap<fi_addr_t, Rank>,
    from_rank: HashMap<Rank, fi_addr_t>,
    pub(crate) pending: HashMap<OpId, Pending>,
    /// The domain's memory regions, which peers' RMA requests reach.
    pub mrs: Option<MrTableRef>,
    /// Counters of RMA operations, this endpoint's and its peers'.
    pub rma_cntrs: RmaCntrs,
    /// The id of the last RMA operation started (its reply's tag).
    pub(crate) next_rma_id: u64,
    /// A receive for peers' RMA requests is posted.
    pub(crate) serving: bool,
    /// Messages peeked with FI_CLAIM, by the peek's context: (sender, wire tag, length).
    claims: HashMap<usize, (Rank, u64, usize)>,
    /// The carrier lets messages land in receive buffers and large sends be read in place
    /// (shm; see `lend`).
    pub(crate) lends: bool,
    /// Large RMA writes whose bytes this target waits for, by their receive.
    pub(crate) landings: HashMap<OpId, Landing>,
}

pub type EpRef = Rc<RefCell<EpCore>>;

impl EpCore {
    /// `op_flags`: the default flags of transmits and receives (`tx_attr`, `rx_attr`).
    pub fn new(provider: Box<dyn Provider>, caps: u64, [tx_op_flags, rx_op_flags]: [u64; 2]) -> EpCore {
        let lends = provider.kind() == ProviderKind::SHM;
        EpCore {
            lends,
            landings: HashMap::new(),
            provider,
            caps,
            tx_op_flags,
            rx_op_flags,
            av: None,
            tx: None,
            rx: None,
            tx_cntr: None,
            rx_cntr: None,
            to_rank: HashMap::new(),
            from_rank: HashMap::new(),
            pending: HashMap::new(),
            mrs: None,
            rma_cntrs: RmaCntrs::default(),
            next_rma_id: 0,
            serving: false,
            claims: HashMap::new(),
        }
    }

    /// What carries this endpoint.
    fn carrier(&self) -> Carrier {
        match self.provider.kind() {
            ProviderKind::TCP => Carrier::Tcp,
            _ => Carrier::Shm,
        }
    }

    /// This endpoint's address (`fi_getname`).
    pub fn name(&self) -> Result<Vec<u8>> {
        crate::name::encode(self.carrier(), &self.provider.peer_address()?)
    }

    /// The rank of AV entry `addr`, connecting to it the first time.
    pub(crate) fn rank_of(&mut self, addr: fi_addr_t) -> Result<Rank> {
        if let Some(&rank) = self.to_rank.get(&addr) {
            return Ok(rank);
        }
        let av = self.av.as_ref().ok_or(OfiError::NotBound("an address vector"))?;
        let blob = av.borrow().entries.get(addr as usize).cloned().flatten();
        let blob = blob.ok_or(OfiError::UnknownAddress(addr))?;
        let rank = self.provider.connect_peer(crate::name::decode(self.carrier(), &blob)?)?;
        self.to_rank.insert(addr, rank);
        self.from_rank.entry(rank).or_insert(addr);
        Ok(rank)
    }

    /// The fi_addr of the sender `rank`, connecting AV entries not connected yet to find it;
    /// FI_ADDR_NOTAVAIL for a sender not in the AV.
    pub(crate) fn addr_of(&mut self, rank: Rank) -> fi_addr_t {
        if let Some(&addr) = self.from_rank.get(&rank) {
            return addr;
        }
        let count = self.av.as_ref().map_or(0, |av| av.borrow().entries.len());
        for addr in 0..count as fi_addr_t {
            if !self.to_rank.contains_key(&addr) && self.rank_of(addr).ok() == Some(rank) {
                return addr;
            }
        }
        FI_ADDR_NOTAVAIL
    }

    /// Whether an operation posted with `flags` raises a completion on `binding`.
    pub(crate) fn reports(binding: Option<&Binding>, flags: u64) -> bool {
        binding.is_some_and(|b| !b.selective || flags & FI_COMPLETION != 0)
    }

    pub fn send(&mut self, args: SendArgs<'_>, inject: bool) -> Result<()> {
        let tag = match args.tag {
            Some(tag) if tag & !MEM_TAG_FORMAT != 0 => return Err(OfiError::TagBits(tag)),
            Some(tag) => tag,
            None => UNTAGGED,
        };
        let rank = self.rank_of(args.dest)?;
        let flags = args.flags | self.tx_op_flags;
        // An injected send's buffer is the consumer's again when the call returns.
        let lent = self.lends && !inject && flags & FI_INJECT == 0;
        let op = match args.data {
            Some(data) => {
                let mut wire = Vec::with_capacity(DATA_LEN + args.payload.len());
                wire.extend_from_slice(&data.to_le_bytes());
                wire.extend_from_slice(args.payload);
                self.provider.send(rank, tag | WITH_DATA, &wire)?
            }
            None if lent => crate::lend::send(&mut *self.provider, rank, tag, args.payload)?,
            None => self.provider.send(rank, tag, args.payload)?,
        };
        let kind = if args.tag.is_some() { FI_TAGGED } else { FI_MSG };
        let report = !inject && Self::reports(self.tx.as_ref(), flags);
        let pending = Pending {
            context: args.context,
            flags: FI_SEND | kind,
            report,
            recv_into: None,
            discard: false,
            rma: None,
        };
        self.pending.insert(op, pending);
        self.progress();
        Ok(())
    }

    /// The source and tag match of a receive.
    fn matching(&mut self, args: &RecvArgs) -> Result<(Source, TagMatch, u64)> {
        let source = if args.src != FI_ADDR_UNSPEC && self.caps & FI_DIRECTED_RECV != 0 {
            Source::Rank(self.rank_of(args.src)?)
        } else {
            Source::Any
        };
        let (matching, kind) = match args.tag {
            Some((tag, ignore)) => (
                TagMatch { tag: tag & MEM_TAG_FORMAT, mask: (!ignore & MEM_TAG_FORMAT) | UNTAGGED },
                FI_TAGGED,
            ),
            None => (TagMatch { tag: UNTAGGED, mask: UNTAGGED | RMA }, FI_MSG),
        };
        Ok((source, matching, kind))
    }

    pub fn recv(&mut self, args: RecvArgs) -> Result<()> {
        let (source, matching, kind) = self.matching(&args)?;
        let op = if self.lends && crate::lend::lends_into(args.buf, args.len) {
            // Into the consumer's buffer; one that does not fit comes back owned (below).
            crate::lend::post_recv(&mut *self.provider, source, matching, args.buf, args.len)?
        } else {
            // Room for the CQ data too; a payload longer than `len` is cut off here (FI_ETRUNC).
            let buffer = RecvBuffer::Owned { capacity: args.len + DATA_LEN };
            self.provider.post_recv(source, matching, buffer)?
        };
        let report = Self::reports(self.rx.as_ref(), args.flags | self.rx_op_flags);
        let pending = Pending {
            context: args.context,
            flags: FI_RECV | kind,
            report,
            recv_into: Some((args.buf, args.len)),
            discard: false,
            rma: None,
        };
        self.pending.insert(op, pending);
        self.progress();
        Ok(())
    }

    /// fi_trecvmsg with FI_PEEK, FI_CLAIM or FI_DISCARD: a peek completes at once, with the
    /// arrived message's length and tag or FI_ENOMSG; FI_CLAIM then receives the message a
    /// claiming peek with the same context found; FI_DISCARD drops it instead.
    pub fn peek_or_claim(&mut self, args: RecvArgs) -> Result<()> {
        let (flags, context) = (args.flags, args.context);
        self.progress();
        let found = if flags & FI_PEEK != 0 {
            let (source, matching, _) = self.matching(&args)?;
            self.provider.peek_arrived(source, matching)?
        } else if flags & FI_CLAIM != 0 {
            self.claims.remove(&context)
        } else {
            return Err(OfiError::Invalid("FI_DISCARD without FI_PEEK or FI_CLAIM"));
        };
        let entry = Entry { context, flags: FI_RECV | FI_TAGGED, len: 0, buf: 0, data: 0, tag: 0, src: 0 };
        let Some((rank, tag, len)) = found else {
            let text = "no message matches".to_string();
            let miss = ErrEntry { entry, err: FI_ENOMSG, prov_errno: 0, olen: 0, text };
            self.rx_queue()?.borrow_mut().errors.push_back(miss);
            return Ok(());
        };
        let payload_len = if tag & WITH_DATA != 0 { len.saturating_sub(DATA_LEN) } else { len };
        let peeked = Entry { len: payload_len, tag: tag & MEM_TAG_FORMAT, src: self.addr_of(rank), ..entry };
        match (flags & FI_PEEK != 0, flags & (FI_CLAIM | FI_DISCARD)) {
            (true, FI_CLAIM) => {
                self.claims.insert(context, (rank, tag, len));
            }
            (false, FI_CLAIM) => {
                let claimed = RecvArgs { tag: None, ..args };
                return self.take_claimed(claimed, rank, tag, len, false);
            }
            (_, _) if flags & FI_DISCARD != 0 => {
                let claimed = RecvArgs { tag: None, ..args };
                self.take_claimed(claimed, rank, tag, len, true)?;
            }
            _ => {}
        }
        self.rx_queue()?.borrow_mut().entries.push_back(peeked);
        Ok(())
    }

    /// Receives the arrived message (`rank`, `tag`) for `args`, or drops it (`discard`).
    fn take_claimed(
        &mut self,
        args: RecvArgs,
        rank: Rank,
        tag: u64,
        len: usize,
        discard: bool,
    ) -> Result<()> {
        let buffer = RecvBuffer::Owned { capacity: len.max(args.len + DATA_LEN) };
        let claimed = self.provider.claim_recv_for(
            reverb_transport::completion::Owner::APP,
            Source::Rank(rank),
            TagMatch::exact(tag),
            buffer,
        )?;
        let Some(op) = claimed else { return Err(OfiError::Invalid("the claimed message is gone")) };
        let recv_into = (!discard).then_some((args.buf, args.len));
        let pending = Pending {
            context: args.context,
            flags: FI_RECV | FI_TAGGED,
            report: true,
            recv_into,
            discard,
            rma: None,
        };
        self.pending.insert(op, pending);
        self.progress();
        Ok(())
    }

    /// `fi_cancel`: takes back the oldest receive posted with `context` that no message has
    /// matched yet; it completes in error (FI_ECANCELED) on the receive CQ and counter.
    /// Nothing to take back is no error (libfabric's util providers answer 0 too): a receive
    /// that matched completes as usual.
    pub fn cancel(&mut self, context: usize) -> Result<()> {
        let mut ops: Vec<OpId> = self
            .pending
            .iter()
            .filter(|(_, p)| p.context == context && p.flags & FI_RECV != 0 && !p.discard)
            .map(|(op, _)| *op)
            .collect();
        ops.sort_unstable();
        for op in ops {
            if !self.provider.cancel_recv(op)? {
                continue;
            }
            let Some(p) = self.pending.remove(&op) else { continue };
            let (buf, _) = p.recv_into.unwrap_or((0, 0));
            let entry = Entry {
                context: p.context,
                flags: p.flags,
                len: 0,
                buf,
                data: 0,
                tag: 0,
                src: FI_ADDR_NOTAVAIL,
            };
            let text = "the receive was cancelled".to_string();
            let cancelled = ErrEntry { entry, err: FI_ECANCELED, prov_errno: 0, olen: 0, text };
            bump(self.rx_cntr.as_ref(), true);
            if let Some(rx) = &self.rx {
                rx.cq.borrow_mut().errors.push_back(cancelled);
            }
            return Ok(());
        }
        Ok(())
    }

    fn rx_queue(&self) -> Result<&CqRef> {
        self.rx.as_ref().map(|b| &b.cq).ok_or(OfiError::NotBound("a receive CQ"))
    }

    /// Moves what the provider completed into the bound CQs.
    pub fn progress(&mut self) {
        // A malformed message from a peer is dropped by the provider; the endpoint goes on.
        let _ = self.provider.progress();
        self.serve_rma();
        while let Some(c) = self.provider.completions().pop_front() {
            let Some(p) = self.pending.remove(&c.op) else { continue };
            if p.discard {
                continue;
            }
            let error = c.error().cloned();
            if p.rma.is_some() {
                self.finish_rma(c.op, p, c.kind, error);
                continue;
            }
            match c.kind {
                CompletionKind::Recv { source, tag, len, data } => {
                    self.finish_recv(p, source, tag, len, data, error)
                }
                CompletionKind::Send { len, tag, .. } => self.finish_send(p, len, tag, error),
                _ => {}
            }
        }
    }

    /// Blocks in the provider for at most `timeout` (an event may have come).
    pub fn block(&mut self, timeout: std::time::Duration) {
        let _ = self.provider.block(timeout);
    }

    fn finish_send(&mut self, p: Pending, len: usize, tag: u64, error: Option<TransportError>) {
        bump(self.tx_cntr.as_ref(), error.is_some());
        let Some(tx) = &self.tx else { return };
        let wire_tag = tag & MEM_TAG_FORMAT;
        let entry = Entry { context: p.context, flags: p.flags, len, buf: 0, data: 0, tag: wire_tag, src: 0 };
        let mut cq = tx.cq.borrow_mut();
        match error {
            Some(e) => cq.errors.push_back(error_entry(entry, &e, 0)),
            None if p.report => cq.entries.push_back(entry),
            None => {}
        }
    }

    fn finish_recv(
        &mut self,
        p: Pending,
        source: Rank,
        tag: u64,
        len: usize,
        data: Option<Vec<u8>>,
        error: Option<TransportError>,
    ) {
        let src = self.addr_of(source);
        let (buf, capacity) = p.recv_into.unwrap_or((0, 0));
        let mut entry = Entry {
            context: p.context,
            flags: p.flags,
            len: 0,
            buf,
            data: 0,
            tag: tag & MEM_TAG_FORMAT,
            src,
        };
        let outcome = match error {
            Some(e) => {
                let olen = match &e {
                    TransportError::Truncated { len, .. } => (*len as usize).saturating_sub(capacity),
                    _ => 0,
                };
                Err(error_entry(entry, &e, olen))
            }
            None => match data {
                Some(bytes) => land(&mut entry, tag, len, bytes, capacity),
                None => {
                    landed_in_place(&mut entry, tag, len);
                    Ok(())
                }
            },
        };
        bump(self.rx_cntr.as_ref(), outcome.is_err());
        let Some(rx) = &self.rx else { return };
        let mut cq = rx.cq.borrow_mut();
        match outcome {
            Err(failed) => cq.errors.push_back(failed),
            Ok(()) if p.report => cq.entries.push_back(entry),
            Ok(()) => {}
        }
    }
}

/// Copies a received message (`len` bytes of `bytes`, CQ data first when `tag` says so) into
/// the consumer's buffer of `capacity` bytes and fills `entry` in; a payload longer than the
/// buffer is cut off there and fails with FI_ETRUNC.
fn land(entry: &mut Entry, tag: u64, len: usize, bytes: Vec<u8>, capacity: usize) -> Result<(), ErrEntry> {
    let payload = if tag & WITH_DATA != 0 && bytes.len() >= DATA_LEN {
        let mut word = [0u8; DATA_LEN];
        word.copy_from_slice(&bytes[..DATA_LEN]);
        entry.data = u64::from_le_bytes(word);
        entry.flags |= FI_REMOTE_CQ_DATA;
        &bytes[DATA_LEN..]
    } else {
        &bytes[..len.min(bytes.len())]
    };
    crate::obj::copy_to_lent(entry.buf, capacity, payload);
    entry.len = payload.len().min(capacity);
    if payload.len() > capacity {
        let text = format!("message of {} bytes does not fit the {capacity}-byte buffer", payload.len());
        let olen = payload.len() - capacity;
        return Err(ErrEntry { entry: *entry, err: FI_ETRUNC, prov_errno: 0, olen, text });
    }
    Ok(())
}

/// Fills `entry` in for a message of `len` bytes that landed in the consumer's buffer, moving
/// the CQ data out of the payload's way when `tag` says it leads.
fn landed_in_place(entry: &mut Entry, tag: u64, len: usize) {
    if tag & WITH_DATA != 0 && len >= DATA_LEN {
        let (data, payload) = crate::lend::split_data(entry.buf, len);
        entry.data = data;
        entry.flags |= FI_REMOTE_CQ_DATA;
        entry.len = payload;
    } else {
        entry.len = len;
    }
}

/// The error entry of a failed operation: a lost peer is FI_EHOSTUNREACH, a message too long
/// FI_ETRUNC, anything else FI_EIO; the text keeps reverb's reason.
pub(crate) fn error_entry(entry: Entry, e: &TransportError, olen: usize) -> ErrEntry {
    let err = match e {
        TransportError::PeerDead(_) => FI_EHOSTUNREACH,
        TransportError::Truncated { .. } => FI_ETRUNC,
        _ => FI_EIO,
    };
    ErrEntry { entry, err, prov_errno: err, olen, text: reverb_transport::error::error_chain(e) }
}
