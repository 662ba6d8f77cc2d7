//! Pass-through messaging, for a protocol that logs nothing and keeps no channel state
//! (`none`, whose failures are not recovered) on a provider that can peek at arrivals
//! ([`Capabilities::PEEK`]): a message goes as the provider's own tagged message under the
//! application's tag, bare (no envelope), and a receive claims an arrived message through the
//! provider's matching, which keeps each sender's order per tag. Nothing stays posted when a
//! wait times out. Left out, ~0.1 µs of an 8-byte message on shm: the envelope, ssns and
//! channel ordering with its stale and duplicate drops, determinants (deliveries carry ssn 0
//! and none), the endpoint's posted receives and their completions. Even an 8-byte ssn header
//! and the common send path cost ~0.035 µs of a 0.3 µs ping-pong here, so neither is kept.
//!
//! The application's tags share the provider with reverb's own layers here, so tags and
//! matches that reach into their ranges (`LIBRARY_TAG_PREFIXES`) are refused.

use std::time::Duration;

use reverb_transport::api::is_library_tag;
use reverb_transport::borrowed::Borrowed;
use reverb_transport::spinwait::{Idle, SpinWait};
use reverb_transport::{
    Capabilities, CompletionKind, EagerTake, OpId, Provider, Rank, RecvBuffer, Source, Tag, TagMatch,
    TransportError,
};

use super::delivery::{DeliveredFrame, Landing, Received};
use super::{LogConfig, LoggedEndpoint};
use crate::error::{LogError, Result};
use crate::framepool::{FrameBytes, COPY_OUT_MAX};
use crate::stats::{LogStats, ReceiveKind};

/// Bound on a claimed message's rendezvous read (immediate on shm; a network read of an
/// announced message): a sender that neither serves it nor dies is reported.
const FETCH_BOUND: Duration = Duration::from_secs(30);

/// Spinning rounds of a blocking receive per full provider progress (the others only claim).
const PROGRESS_EVERY: u32 = 4;

/// Whether an endpoint of a protocol that needs envelopes or not (`frames_messages`) goes
/// pass-through on `provider`.
pub(super) fn applies(frames_messages: bool, config: &LogConfig, provider: &dyn Provider) -> bool {
    !frames_messages && config.pass_through && provider.capabilities().contains(Capabilities::PEEK)
}

impl LoggedEndpoint {
    /// `send`, pass-through: the provider copies a small `payload`; a large one is written
    /// into the endpoint's frame pool, which the peer reads (the provider's own staging pool
    /// is sized for a few messages in flight, not an MPI window of them).
    pub(super) fn send_pass_through(&mut self, dest: Rank, tag: Tag, payload: &[u8]) -> Result<()> {
        if is_library_tag(tag) {
            return Err(reserved(format!("tag {tag:#x}")));
        }
        // A small message goes out at once where the provider can: no operation to complete.
        if self.provider.send_inline(dest, tag, payload)? {
            self.count_send(dest, payload.len())?;
            return Ok(());
        }
        self.send_buf.clear();
        let framed = self.frame_in_pool(payload)?;
        if self.send_frame(dest, tag, framed, payload)? {
            self.sends_in_flight += 1;
        }
        self.count_send(dest, payload.len())?;
        self.collect_completions()
    }

    /// Counts a pass-through message of `len` bytes to `dest`.
    fn count_send(&mut self, dest: Rank, len: usize) -> Result<()> {
        self.comm.record_app(dest, len as u64, 0)?;
        LogStats::bump(&self.stats.messages_sent, 1);
        LogStats::bump(&self.stats.messages_unlogged, 1);
        Ok(())
    }

    /// Sends a `payload` the caller lends until [`LoggedEndpoint::lent_sent`] says it left: in
    /// pass-through above the rendezvous threshold the provider may let the receiver read it
    /// where it is (shm: one copy in all). Some(op) to ask about; None when it was copied
    /// (logging on, or a small one), as `send` does.
    ///
    /// # Safety
    /// `payload` must stay valid and unchanged until `lent_sent(op)` returns true or an error,
    /// or the endpoint is dropped.
    pub unsafe fn send_lent(&mut self, dest: Rank, tag: Tag, payload: &[u8]) -> Result<Option<OpId>> {
        // Bytes the provider would copy anyway go the usual way, through the frame pool.
        if !self.lends(dest, payload.len()) {
            return self.send(dest, tag, payload).map(|()| None);
        }
        // Lent bytes are neither framed nor logged: no REVERB_LOG_MAX_MESSAGE bound.
        self.check_dest(dest)?;
        if is_library_tag(tag) {
            return Err(reserved(format!("tag {tag:#x}")));
        }
        // SAFETY: the caller lends `payload` until lent_sent reports op (the contract above).
        let op = unsafe { self.provider.send_lent_for(self.owner, dest, tag, payload) }?;
        self.lent.pending.push(op);
        self.sends_in_flight += 1;
        self.count_send(dest, payload.len())?;
        Ok(Some(op))
    }

    /// Whether `send_lent` of `len` bytes to `dest` lends them (pass-through, and the provider
    /// lets the receiver read them where they are): then any length goes as one message.
    pub fn lends(&self, dest: Rank, len: usize) -> bool {
        self.pass_through && self.provider.lends_to(dest, len)
    }

    /// Whether lent send `op` has left (its receiver has the bytes; the payload is free), from
    /// the completions collected so far: no progress. Its failure, once, as an error.
    pub fn lent_sent(&mut self, op: OpId) -> Result<bool> {
        self.collect_completions()?;
        if let Some(i) = self.lent.done.iter().position(|(o, _)| *o == op) {
            let (_, error) = self.lent.done.swap_remove(i);
            return error.map_or(Ok(true), |e| Err(e.into()));
        }
        match self.lent.pending.contains(&op) {
            true => Ok(false),
            false => Err(LogError::InvalidArgument(format!("no lent send {op:?} in flight"))),
        }
    }

    /// Waits, at most `timeout`, until lent send `op` has left: progressing, spinning, then
    /// sleeping on the provider as its wait mode says. `Timeout` if it has not.
    pub fn wait_lent(&mut self, op: OpId, timeout: Duration) -> Result<()> {
        let mut wait = SpinWait::new(self.provider.config(), timeout);
        loop {
            self.provider.progress()?;
            if self.lent_sent(op)? {
                return Ok(());
            }
            wait.busy()?;
            self.provider.wait_with(self.owner, &mut wait, &mut |cq| {
                cq.iter().any(|c| matches!(c.kind, CompletionKind::Send { .. }))
            })?;
        }
    }

    /// `recv_into`, pass-through: claims the first arrival from `source` matching `tag`,
    /// progressing the provider while none is here, at most `timeout`.
    pub(super) fn recv_pass_through(
        &mut self,
        source: Source,
        tag: TagMatch,
        timeout: Duration,
        mut landing: Option<Landing<'_>>,
    ) -> Result<Received> {
        check_match(tag)?;
        let mut wait = SpinWait::new(self.provider.config(), timeout);
        if let Some(received) = self.claim(source, tag, &mut landing)? {
            return Ok(received);
        }
        let mut rounds = 0u32;
        loop {
            // A claim looks at what arrived (shm: at the FIFO's next slot itself, taking a
            // message there with no queueing); full progress every few rounds, so an arrival
            // is mostly found by the claim's quicker path.
            if rounds.is_multiple_of(PROGRESS_EVERY) {
                self.provider.progress()?;
            }
            rounds = rounds.wrapping_add(1);
            if let Some(received) = self.claim(source, tag, &mut landing)? {
                return Ok(received);
            }
            if let Idle::Sleep(slice) = wait.idle()? {
                self.provider.block(slice)?;
                rounds = 0;
            }
        }
    }

    /// `recv_collected_into`, pass-through: the arrival if it is here, no progress.
    pub(super) fn recv_collected_pass_through(
        &mut self,
        source: Source,
        tag: TagMatch,
        mut landing: Option<Landing<'_>>,
    ) -> Result<Option<Received>> {
        check_match(tag)?;
        self.claim(source, tag, &mut landing)
    }

    /// `probe`, pass-through: progresses once, then peeks.
    pub(super) fn probe_pass_through(
        &mut self,
        source: Source,
        tag: TagMatch,
    ) -> Result<Option<(Rank, Tag, usize)>> {
        check_match(tag)?;
        self.provider.progress()?;
        self.collect_completions()?;
        Ok(self.provider.peek_arrived(source, tag)?)
    }

    /// Takes the arrival a receive for (`source`, `tag`) matches, if one is here: into the
    /// caller's `landing` buffer when it fits and is wanted (a load/store provider writes it
    /// before returning), else into an owned buffer of its length, or a pooled region for a
    /// large one (read once, in place).
    fn claim(
        &mut self,
        source: Source,
        tag: TagMatch,
        landing: &mut Option<Landing<'_>>,
    ) -> Result<Option<Received>> {
        let kind = ReceiveKind::classify(source, tag);
        if let Some(l) = landing.as_mut() {
            // Eager data here already is copied out on the spot: no operation, no completion.
            match self.provider.take_eager_into(source, tag, l.buf, l.accept)? {
                EagerTake::Landed { source, tag, len } => {
                    self.count_delivery(source, kind);
                    return Ok(Some(Received::Landed { source, tag, len }));
                }
                EagerTake::NoneArrived => return Ok(None),
                EagerTake::Claim => {}
            }
        }
        let Some((sender, arrived, len)) = self.provider.peek_arrived(source, tag)? else { return Ok(None) };
        let lands = self.lands_in_place && landing.as_ref().is_some_and(|l| l.takes(arrived, len));
        if let (true, Some(l)) = (lands, landing.as_mut()) {
            // SAFETY: `l.buf` is borrowed for this call, and a load/store provider
            // (`lands_in_place`) writes it before `claim_recv_for` returns: the completion is
            // queued by then (`wait_claimed` finds it without waiting).
            let buffer = RecvBuffer::Borrowed(unsafe { Borrowed::new(l.buf) });
            let op = self.claim_op(source, tag, buffer)?;
            let (source, tag, len, _) = self.wait_claimed(op, sender)?;
            self.count_delivery(source, kind);
            return Ok(Some(Received::Landed { source, tag, len }));
        }
        let mut pooled = None;
        if len > COPY_OUT_MAX {
            self.recv_frames.note_frame(len);
            // Powers of two: a stream of sizes near one another reuses the same regions.
            pooled = self.recv_frames.acquire(&mut *self.provider, len.next_power_of_two())?;
        }
        let buffer = match &pooled {
            Some((_, region)) => RecvBuffer::Region { region: region.clone(), offset: 0, capacity: len },
            None => RecvBuffer::Owned { capacity: len },
        };
        let op = self.claim_op(source, tag, buffer)?;
        if let Some((slot, _)) = pooled {
            self.recv_frames.mark_posted(slot, op);
        }
        let completion = self.wait_claimed(op, sender);
        let region = self.recv_frames.complete(op);
        let (source, tag, len, data) = completion?;
        let frame = match (data, region) {
            (Some(bytes), _) => FrameBytes::Owned(bytes),
            (None, Some(region)) => FrameBytes::Pooled { region, len },
            (None, None) => return Err(malformed(source, "no data".to_string())),
        };
        let rsn = self.count_delivery(source, kind);
        Ok(Some(Received::Frame(DeliveredFrame {
            source,
            tag,
            ssn: 0,
            rsn,
            determinant: None,
            frame,
            payload_offset: 0,
        })))
    }

    /// Claims what `peek_arrived` just found (the matcher is this thread's: it is still there).
    fn claim_op(&mut self, source: Source, tag: TagMatch, buffer: RecvBuffer) -> Result<OpId> {
        let op = self.provider.claim_recv_for(self.owner, source, tag, buffer)?;
        op.ok_or_else(|| LogError::InvalidArgument(format!("an arrival from {source:?} peeked and gone")))
    }

    /// The outcome of claimed receive `op` from `sender` once its data is here: (source, tag,
    /// length, owned data).
    fn wait_claimed(&mut self, op: OpId, sender: Rank) -> Result<(Rank, Tag, usize, Option<Vec<u8>>)> {
        // An eager claim completed on the spot: no wait (and no clock read).
        let cq = self.provider.completions_of(self.owner);
        let done = cq.iter().position(|c| c.op == op).and_then(|i| cq.remove(i));
        let completion =
            done.map_or_else(|| self.provider.wait_op(op, FETCH_BOUND), Ok).map_err(|e| match e {
                TransportError::Timeout(_) => TransportError::Remote(
                    sender,
                    format!("its announced message was not read within {FETCH_BOUND:?}"),
                ),
                e => e,
            })?;
        let completion = completion.into_result()?;
        match completion.kind {
            CompletionKind::Recv { source, tag, len, data } => Ok((source, tag, len, data)),
            other => Err(malformed(sender, format!("completion {other:?}"))),
        }
    }

    /// Counts a delivery from `source`; its rsn.
    fn count_delivery(&mut self, source: Rank, kind: ReceiveKind) -> u64 {
        self.stats.record_receive(kind);
        LogStats::bump(&self.stats.messages_delivered, 1);
        self.reception.deliver(source, 0).rsn
    }
}

/// Lent sends in flight, and the outcomes of those that finished and were not asked about.
#[derive(Debug, Default)]
pub(super) struct LentSends {
    pending: Vec<OpId>,
    done: Vec<(OpId, Option<TransportError>)>,
}

impl LentSends {
    /// Records `op`'s outcome if it is a lent send; false if it is not one.
    pub(super) fn finish(&mut self, op: OpId, error: Option<&TransportError>) -> bool {
        let Some(i) = self.pending.iter().position(|&o| o == op) else { return false };
        self.pending.swap_remove(i);
        self.done.push((op, error.cloned()));
        true
    }
}

/// Refuses a receive match that accepts tags of reverb's own layers.
fn check_match(tag: TagMatch) -> Result<()> {
    match tag.may_match_library_tag() {
        true => Err(reserved(format!("a receive matching {tag:?}"))),
        false => Ok(()),
    }
}

fn malformed(source: Rank, detail: String) -> LogError {
    LogError::malformed("pass-through message", format!("from rank {source}: {detail}"))
}

fn reserved(what: String) -> LogError {
    LogError::InvalidArgument(format!(
        "{what} reaches into reverb's own tags (top 32 bits {:#x?}), which share the provider \
         when logging is off",
        reverb_transport::api::LIBRARY_TAG_PREFIXES
    ))
}
