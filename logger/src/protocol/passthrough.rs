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
use reverb_transport::spinwait::{Idle, SpinWait};
use reverb_transport::{
    Capabilities, CompletionKind, OpId, Provider, Rank, RecvBuffer, Source, Tag, TagMatch, TransportError,
};

use super::delivery::DeliveredFrame;
use super::{LogConfig, LoggedEndpoint};
use crate::error::{LogError, Result};
use crate::framepool::{FrameBytes, COPY_OUT_MAX};
use crate::stats::{LogStats, ReceiveKind};

/// Bound on a claimed message's rendezvous read (immediate on shm; a network read of an
/// announced message): a sender that neither serves it nor dies is reported.
const FETCH_BOUND: Duration = Duration::from_secs(30);

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
        self.send_buf.clear();
        let framed = self.frame_in_pool(payload)?;
        self.send_frame(dest, tag, framed, payload)?;
        self.sends_in_flight += 1;
        self.comm.record_app(dest, payload.len() as u64, 0)?;
        LogStats::bump(&self.stats.messages_sent, 1);
        LogStats::bump(&self.stats.messages_unlogged, 1);
        self.collect_completions()
    }

    /// `recv_in_place`, pass-through: claims the first arrival from `source` matching `tag`,
    /// progressing the provider while none is here, at most `timeout`.
    pub(super) fn recv_pass_through(
        &mut self,
        source: Source,
        tag: TagMatch,
        timeout: Duration,
    ) -> Result<DeliveredFrame> {
        check_match(tag)?;
        let mut wait = SpinWait::new(self.provider.config(), timeout);
        if let Some(delivered) = self.claim(source, tag)? {
            return Ok(delivered);
        }
        loop {
            self.provider.progress()?;
            if let Some(delivered) = self.claim(source, tag)? {
                return Ok(delivered);
            }
            if let Idle::Sleep(slice) = wait.idle()? {
                self.provider.block(slice)?;
            }
        }
    }

    /// `recv_collected`, pass-through: the arrival if it is here, no progress.
    pub(super) fn recv_collected_pass_through(
        &mut self,
        source: Source,
        tag: TagMatch,
    ) -> Result<Option<DeliveredFrame>> {
        check_match(tag)?;
        self.claim(source, tag)
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

    /// Takes the arrival a receive for (`source`, `tag`) matches, if one is here: into an
    /// owned buffer of its length, or a pooled region for a large one (read once, in place).
    fn claim(&mut self, source: Source, tag: TagMatch) -> Result<Option<DeliveredFrame>> {
        let Some((sender, _, len)) = self.provider.peek_arrived(source, tag)? else { return Ok(None) };
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
        let Some(op) = self.provider.claim_recv_for(self.owner, source, tag, buffer)? else {
            return Err(LogError::InvalidArgument(format!("an arrival from {source:?} peeked and gone")));
        };
        if let Some((slot, _)) = pooled {
            self.recv_frames.mark_posted(slot, op);
        }
        self.take_claimed(op, sender, ReceiveKind::classify(source, tag)).map(Some)
    }

    /// The delivery of receive `op`, claimed from `sender`, once its data is here.
    fn take_claimed(&mut self, op: OpId, sender: Rank, kind: ReceiveKind) -> Result<DeliveredFrame> {
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
            });
        let region = self.recv_frames.complete(op);
        let completion = completion?.into_result()?;
        let CompletionKind::Recv { source, tag, len, data } = completion.kind else {
            return Err(malformed(sender, format!("completion {:?}", completion.kind)));
        };
        let frame = match (data, region) {
            (Some(bytes), _) => FrameBytes::Owned(bytes),
            (None, Some(region)) => FrameBytes::Pooled { region, len },
            (None, None) => return Err(malformed(source, "no data".to_string())),
        };
        let rsn = self.reception.deliver(source, 0).rsn;
        self.stats.record_receive(kind);
        LogStats::bump(&self.stats.messages_delivered, 1);
        Ok(DeliveredFrame { source, tag, ssn: 0, rsn, determinant: None, frame, payload_offset: 0 })
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
