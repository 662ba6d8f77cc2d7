//! The receive path, common to every protocol: receives kept posted, completions taken from
//! the provider, channel ordering, matching (or the replay plan's choice) and delivery. The
//! protocol hooks in before a receive waits (`check_receive`), on piggybacked determinants
//! (`on_piggyback`), before delivery (`log_delivery`) and on idle rounds (`background`).

use std::collections::VecDeque;
use std::time::Duration;

use reverb_transport::spinwait::SpinWait;
use reverb_transport::{CompletionKind, Rank, RecvBuffer, Source, TagMatch, TransportError};

use super::delivery::{Arrived, DeliveredFrame, Delivery, Landing, Received};
use super::endpoint::POSTED_RECEIVES;
use super::{IncomingMessage, LogIo, LoggedEndpoint};
use crate::channel::Arrival;
use crate::determinant::{Determinant, Ssn};
use crate::envelope::{Envelope, MAX_ENVELOPE_LEN};
use crate::error::{LogError, Result};
use crate::framepool::{FrameBytes, COPY_OUT_MAX};
use crate::stats::{LogStats, ReceiveKind};

/// Receive-loop rounds without a match after which the receive counts as idle and pushes
/// pending log writes out.
const IDLE_ROUNDS: u32 = 8;

impl LoggedEndpoint {
    // Inlined into `collect_completions` as it was before the split into files (one caller
    // on the per-message path; the others are set-up and replay).
    #[inline]
    pub(super) fn post_receive(&mut self) -> Result<()> {
        // Largest envelope (full piggyback) + largest payload.
        let capacity = MAX_ENVELOPE_LEN + self.config.max_message;
        let tag = TagMatch::exact(self.config.provider_tag);
        // Into a registered region while large frames come in (read once, in place), else
        // (small-message traffic, or the pool's bound reached) into an owned buffer.
        let op = match self.recv_frames.acquire(&mut *self.provider, capacity)? {
            Some((slot, region)) => {
                let buffer = RecvBuffer::Region { region, offset: 0, capacity };
                let op = self.provider.post_recv_for(self.owner, Source::Any, tag, buffer)?;
                self.recv_frames.mark_posted(slot, op);
                op
            }
            None => {
                self.provider.post_recv_for(self.owner, Source::Any, tag, RecvBuffer::Owned { capacity })?
            }
        };
        self.posted.push(op);
        Ok(())
    }

    /// Receives the first message, in channel order, from `source` whose tag matches `tag`,
    /// waiting at most `timeout`. Pessimistic modes return only once the log is durable.
    /// During a replay (`begin_replay`) a wildcard receive takes the message its determinant
    /// names.
    pub fn recv(&mut self, source: Source, tag: TagMatch, timeout: Duration) -> Result<Delivery> {
        self.recv_in_place(source, tag, timeout).map(DeliveredFrame::into_delivery)
    }

    /// `recv`, handing over the frame the message arrived in instead of cutting the envelope
    /// off: no pass over the payload after the provider's (the one to take for large messages).
    pub fn recv_in_place(
        &mut self,
        source: Source,
        tag: TagMatch,
        timeout: Duration,
    ) -> Result<DeliveredFrame> {
        if self.pass_through {
            return self.recv_pass_through(source, tag, timeout, None).and_then(Received::into_frame);
        }
        if self.pending.receive_check {
            self.protocol.check_receive(&self.stats)?;
        }
        let kind = self.classify(source, tag);
        // One wait for the whole receive: its clock, and its spin budget, are not restarted
        // by each arrival that does not match.
        let mut wait = SpinWait::new(self.provider.config(), timeout);
        let mut rounds = 0u32;
        // Progressed once here, then by `await_own`, which returns with the completions it
        // found queued: a second progress before collecting them would be on the delivery's path.
        self.provider.progress()?;
        loop {
            self.collect_completions()?;
            if let Some(i) = self.find_ready(source, tag, kind)? {
                return self.deliver(i, kind);
            }
            // Waiting for a message: the time to push determinant writes along.
            rounds = rounds.saturating_add(1);
            self.background(rounds >= IDLE_ROUNDS)?;
            // Bounded even while arrivals for other receives keep coming.
            wait.busy()?;
            self.await_own(&mut wait, |k| matches!(k, CompletionKind::Recv { .. }))?;
        }
    }

    /// Progresses the provider and collects what arrived, delivering nothing: receives tried
    /// after it with `recv_collected` all see the same arrivals.
    pub fn poll(&mut self) -> Result<()> {
        self.provider.progress()?;
        self.collect_completions()?;
        self.background(false)
    }

    /// `recv` of a message collected already (by `poll` or an earlier receive), without
    /// progressing: a layer that matches several posted receives in their order (MPI) tries
    /// them in a row against the same arrivals, so the first one posted gets the first message.
    pub fn recv_collected(&mut self, source: Source, tag: TagMatch) -> Result<Option<Delivery>> {
        Ok(self.recv_collected_in_place(source, tag)?.map(DeliveredFrame::into_delivery))
    }

    /// `recv_in_place` that may land the payload in `landing`'s buffer instead (logging off
    /// on a load/store provider: the payload's one copy on this side goes there).
    pub fn recv_into(
        &mut self,
        source: Source,
        tag: TagMatch,
        timeout: Duration,
        landing: Landing<'_>,
    ) -> Result<Received> {
        if self.pass_through {
            return self.recv_pass_through(source, tag, timeout, Some(landing));
        }
        self.recv_in_place(source, tag, timeout).map(Received::Frame)
    }

    /// `recv_collected_in_place` that may land the payload in `landing`, as `recv_into`.
    pub fn recv_collected_into(
        &mut self,
        source: Source,
        tag: TagMatch,
        landing: Landing<'_>,
    ) -> Result<Option<Received>> {
        if self.pass_through {
            return self.recv_collected_pass_through(source, tag, Some(landing));
        }
        Ok(self.recv_collected_in_place(source, tag)?.map(Received::Frame))
    }

    /// `recv_collected`, handing over the frame as `recv_in_place` does.
    pub fn recv_collected_in_place(
        &mut self,
        source: Source,
        tag: TagMatch,
    ) -> Result<Option<DeliveredFrame>> {
        if self.pass_through {
            return self
                .recv_collected_pass_through(source, tag, None)?
                .map(Received::into_frame)
                .transpose();
        }
        if self.pending.receive_check {
            self.protocol.check_receive(&self.stats)?;
        }
        let kind = self.classify(source, tag);
        match self.find_ready(source, tag, kind)? {
            Some(i) => self.deliver(i, kind).map(Some),
            None => Ok(None),
        }
    }

    /// The message a receive from `source` under `tag` would take now, without taking it:
    /// (sender, tag, payload length), or None if none has arrived. During a replay a wildcard
    /// names the message its determinant names, as a receive would take.
    pub fn probe(&mut self, source: Source, tag: TagMatch) -> Result<Option<(Rank, u64, usize)>> {
        if self.pass_through {
            self.probed_head = None;
            return self.probe_pass_through(source, tag);
        }
        self.provider.progress()?;
        self.collect_completions()?;
        let kind = self.classify(source, tag);
        let Some(i) = self.find_ready(source, tag, kind)? else {
            self.background(false)?;
            return Ok(None);
        };
        let (sender, _, tag, len) = self.note_probed(i);
        Ok(Some((sender, tag, len)))
    }

    /// Whether the next delivery's order is logged whatever the receive: set it while
    /// receives that could take the same arrivals in another order are outstanding together
    /// (several posted, or a collective's beside them). A delivery then gets a determinant,
    /// and a replay takes it at its logged rsn.
    pub fn set_order_logged(&mut self, logged: bool) {
        self.order_logged = logged;
    }

    /// The receive's kind, named receives counted as wildcard ones while `order_logged`.
    #[inline]
    pub(super) fn classify(&self, source: Source, tag: TagMatch) -> ReceiveKind {
        match self.order_logged {
            true => ReceiveKind::Wildcard,
            false => ReceiveKind::classify(source, tag),
        }
    }

    /// During a replay, the message (sender, ssn) the log names for the next delivery; None
    /// outside a replay or where the next rsn has no determinant (a receive whose order was
    /// not logged: any receive may take any message not named for a later rsn).
    pub fn replay_next(&self) -> Option<(Rank, Ssn)> {
        let rsn = self.reception.last_rsn() + 1;
        self.replay.as_ref().and_then(|p| p.get(rsn)).map(|d| (d.sender, d.ssn))
    }

    /// A call boundary of the layer above (an MPI call that may deliver, before its first
    /// delivery): takes an rsn for no message, so that a logged delivery's rsn also says in
    /// which call it came. A replay then takes each logged delivery inside the call that took
    /// it first, and what follows from it (a nonblocking collective's sends, a test's outcome)
    /// comes in the same call too. False during a replay while the log names a delivery for
    /// the next rsn: the caller progresses until it is taken, then ticks.
    pub fn tick(&mut self) -> bool {
        if self.replay_next().is_some() {
            return false;
        }
        self.reception.skip();
        self.ticks += 1;
        self.last_tick = self.reception.last_rsn();
        true
    }

    /// Ticks taken by this endpoint (`tick`): rsns that numbered no delivery.
    pub fn ticks(&self) -> u64 {
        self.ticks
    }

    /// The ready message this receive takes, if it has arrived: the one the replay plan names
    /// for this rsn, else the oldest matching one that the plan does not name for later.
    pub(super) fn find_ready(
        &mut self,
        source: Source,
        tag: TagMatch,
        kind: ReceiveKind,
    ) -> Result<Option<usize>> {
        loop {
            let rsn = self.reception.last_rsn() + 1;
            if self.replay.as_ref().is_some_and(|p| rsn > p.last_rsn()) {
                self.replay = None;
            }
            let Some(d) = self.replay.as_ref().and_then(|p| p.get(rsn)).copied() else {
                // An rsn missing from the plan: a named receive whose order was not logged, or
                // a wildcard one whose determinant never left the failed rank, so nothing
                // outside depends on it (seed 000 Lemma 2.1): any match is correct but one the
                // plan names for a later rsn, which would leave that rsn waiting. Not so once
                // copies retired (partial redundancy): a copy that followed its leader's
                // decisions with named receives, and replays as leader because that leader
                // retired, would take the plan's gaps freely where the decisions went
                // elsewhere.
                if kind != ReceiveKind::Deterministic && !self.stand_ins.is_empty() && self.replaying() {
                    return Err(LogError::ReplayDiverged {
                        rsn,
                        detail: format!(
                            "wildcard receive ({source:?}, {tag:?}) where the log has none, before its \
                             last logged one"
                        ),
                    });
                }
                // Every delivery with its order logged has a determinant, so an open rsn
                // before the plan's last one was a tick or an unlogged delivery: not this one.
                if self.order_logged && self.replay.is_some() {
                    return Ok(None);
                }
                let plan = self.replay.as_ref();
                return Ok(self.ready.iter().position(|a| {
                    source.matches(a.sender)
                        && tag.matches(a.tag)
                        && !plan.is_some_and(|p| p.names(a.sender, a.ssn))
                }));
            };
            // A named receive may be the one the log names (its order was logged); one from
            // another sender cannot be.
            if kind == ReceiveKind::Deterministic && !source.matches(d.sender) {
                return Err(LogError::ReplayDiverged {
                    rsn,
                    detail: format!(
                        "named receive from {source:?}, but the log has a wildcard receive of {d:?}"
                    ),
                });
            }
            let i = match self.ready.iter().position(|a| a.sender == d.sender && a.ssn == d.ssn) {
                Some(i) => i,
                None => match self.stand_in_for(d.sender, d.ssn) {
                    StandIn::Queued(i) => i,
                    StandIn::Duplicate => {
                        self.reception.deliver(d.sender, d.ssn);
                        continue;
                    }
                    StandIn::NotYet => return Ok(None),
                },
            };
            let a = &self.ready[i];
            if !(source.matches(a.sender) && tag.matches(a.tag)) {
                return Err(LogError::ReplayDiverged {
                    rsn,
                    detail: format!(
                        "receive ({source:?}, {tag:?}) cannot take the logged message {}#{} (tag {:#x})",
                        a.sender, a.ssn, a.tag
                    ),
                });
            }
            return Ok(Some(i));
        }
    }

    /// A replayed delivery of `sender`'s message `ssn` where `sender` is a retired copy whose
    /// sender log died with it (partial redundancy): its other copies sent the same message
    /// under the same number. If one of them was delivered already (here, or before the
    /// checkpoint), the retired copy's was a duplicate the runtime dropped: the delivery is
    /// skipped. Else, once one has arrived, a relabelled copy of it goes first (theirs stays
    /// for its own delivery, a duplicate then).
    pub(super) fn stand_in_for(&mut self, sender: Rank, ssn: Ssn) -> StandIn {
        let Some(copies) = self.stand_ins.iter().find(|(r, _)| *r == sender).map(|(_, c)| c.clone()) else {
            return StandIn::NotYet;
        };
        let waiting =
            |ready: &VecDeque<Arrived>, q: Rank| ready.iter().position(|a| a.sender == q && a.ssn == ssn);
        // Released in channel order and gone from `ready`: delivered.
        let delivered = copies.iter().any(|&q| {
            waiting(&self.ready, q).is_none()
                && self.channels.delivered_through(q).is_some_and(|through| through >= ssn)
        });
        let found = copies.iter().find_map(|&q| waiting(&self.ready, q));
        if !delivered && found.is_none() {
            return StandIn::NotYet;
        }
        if self.stand_ins_used.insert(sender) {
            tracing::info!(
                "reverb: rank {}: the replay takes retired copy {sender}'s messages from its mates",
                self.rank
            );
        }
        // A late arrival of the retired copy's own is a duplicate from now on.
        self.channels.skip_through(sender, ssn);
        match found {
            Some(i) if !delivered => {
                let a = &self.ready[i];
                let copy = Arrived {
                    sender,
                    ssn,
                    tag: a.tag,
                    frame: FrameBytes::Owned(a.frame.as_slice().to_vec()),
                    payload_offset: a.payload_offset,
                    stood_in: true,
                };
                self.ready.push_front(copy);
                StandIn::Queued(0)
            }
            _ => StandIn::Duplicate,
        }
    }

    /// Posts receives up to `POSTED_RECEIVES` (none in pass-through: its claims are waited
    /// for on the spot).
    #[inline]
    fn top_up_receives(&mut self) -> Result<()> {
        while self.posted.len() < POSTED_RECEIVES && !self.pass_through {
            self.post_receive()?;
        }
        Ok(())
    }

    /// Takes this endpoint's completions: its owner's queue, whole.
    pub(super) fn collect_completions(&mut self) -> Result<()> {
        // One at a time off the owner's queue (a swap with a spare queue and its drain cost
        // ~200 instructions a message): a receive posted below that completes at once into
        // the queue is taken in the same pass. A failed completion (a send to a peer that
        // died) must not leave the ones behind it: the first failure is returned at the end.
        let mut failed = None;
        let mut received = None;
        self.top_up_receives()?;
        while let Some(mut c) = self.provider.completions_of(self.owner).pop_front() {
            match &mut c.kind {
                CompletionKind::Recv { len, data, .. } => {
                    // A small frame leaves its pooled region before the next receive is posted,
                    // so that one region serves a stream of them.
                    let pooled = self.recv_frames.complete(c.op);
                    self.recv_frames.note_frame(*len);
                    received = match (data.take(), pooled) {
                        (Some(bytes), _) => Some(FrameBytes::Owned(bytes)),
                        (None, Some(region)) if c.status.is_ok() => {
                            let frame = FrameBytes::Pooled { region, len: *len };
                            Some(if *len <= COPY_OUT_MAX {
                                FrameBytes::Owned(frame.into_vec_from(0))
                            } else {
                                frame
                            })
                        }
                        (None, _) => None,
                    };
                    self.posted.retain(|&op| op != c.op);
                    // Reposted at the next collection (`top_up_receives`), off this delivery's
                    // path (~550 instructions), unless a burst took half of them.
                    if self.posted.len() < POSTED_RECEIVES / 2 {
                        self.top_up_receives()?;
                    }
                }
                CompletionKind::Send { .. } => {
                    self.sends_in_flight = self.sends_in_flight.saturating_sub(1);
                    // A lent send's outcome is kept for `lent_sent`, its failure included.
                    if self.lent.finish(c.op, c.error()) {
                        continue;
                    }
                    self.frames.release(c.op);
                }
                _ => {}
            }
            let c = match c.into_result() {
                Ok(c) => c,
                // A send that failed when a retired copy died: its death was dealt with.
                Err(TransportError::PeerDead(p)) if self.retired.contains(&p) => continue,
                Err(e) => {
                    failed.get_or_insert(e);
                    continue;
                }
            };
            // Pass-through takes its claims' completions itself; one seen here finished after
            // its wait gave up (an error reported then), so it is dropped, not decoded.
            if let (CompletionKind::Recv { source, .. }, false) = (c.kind, self.pass_through) {
                let frame = received.take().ok_or_else(|| {
                    LogError::malformed("logged message", format!("no data from rank {source}"))
                })?;
                self.accept_frame(source, frame)?;
            }
        }
        failed.map_or(Ok(()), |e| Err(e.into()))
    }

    /// Runs channel ordering on one arrival; in-order messages join `ready`.
    #[inline]
    pub(super) fn accept_frame(&mut self, source: Rank, frame: FrameBytes) -> Result<()> {
        let (envelope, payload) = Envelope::decode_on_channel(
            frame.as_slice(),
            source,
            self.rank,
            std::mem::take(&mut self.incoming_dets),
        )?;
        if envelope.sender != source || envelope.receiver != self.rank {
            return Err(LogError::malformed(
                "logged message",
                format!(
                    "envelope {} -> {} arrived from rank {source} at rank {}",
                    envelope.sender, envelope.receiver, self.rank
                ),
            ));
        }
        let payload_offset = frame.as_slice().len() - payload.len();
        let Envelope { incarnation, ssn, tag, determinants, .. } = envelope;
        let arrived = Arrived { sender: source, ssn, tag, frame, payload_offset, stood_in: false };
        let outcome = self.channels.accept(source, incarnation, ssn, arrived, &mut self.released)?;
        match outcome {
            Arrival::DroppedStale => LogStats::bump(&self.stats.stale_dropped, 1),
            Arrival::DroppedDuplicate => LogStats::bump(&self.stats.duplicates_dropped, 1),
            Arrival::Delivered { .. } | Arrival::Buffered => {}
        }
        let stored = match determinants.is_empty() {
            true => Ok(()),
            false => {
                let stale = outcome == Arrival::DroppedStale;
                self.protocol.on_piggyback(&determinants, stale, &self.stats).map(|p| self.pending = p)
            }
        };
        self.incoming_dets = determinants;
        stored?;
        // Mostly the one arrival itself: pushed, not extended (~140 instructions less).
        match self.released.len() {
            1 => self.ready.extend(self.released.pop().map(|(_, a)| a)),
            _ => self.ready.extend(self.released.drain(..).map(|(_, a)| a)),
        }
        Ok(())
    }

    /// Hands `ready[index]` to the application, after the protocol logged it.
    fn deliver(&mut self, index: usize, kind: ReceiveKind) -> Result<DeliveredFrame> {
        let Some(arrived) = self.ready.get(index) else {
            return Err(LogError::InvalidArgument(format!("no ready message {index}")));
        };
        let determinant = kind.needs_determinant().then(|| Determinant {
            sender: arrived.sender,
            receiver: self.rank,
            ssn: arrived.ssn,
            rsn: self.reception.last_rsn() + 1,
        });
        // A replaying rank's deliveries are logged already. Log first: on back-pressure the
        // message stays queued and nothing is half-delivered.
        if !self.replaying() {
            let msg = IncomingMessage {
                frame: arrived.frame.as_slice(),
                determinant,
                payload_logged: self.logs_payload_with(arrived.sender),
            };
            // Built field by field, not by `protocol_io`: `msg` borrows `self.ready`.
            let mut io = LogIo {
                provider: &mut *self.provider,
                log: self.rings.log.as_mut(),
                sink: &self.sink,
                offload: self.offload.as_ref(),
                config: &self.config,
                stats: &self.stats,
                comm: &mut self.comm,
            };
            self.pending = self.protocol.log_delivery(&mut io, &msg)?;
        }
        // Mostly the oldest: popped, not removed at an index.
        let taken = if index == 0 { self.ready.pop_front() } else { self.ready.remove(index) };
        let Some(arrived) = taken else {
            return Err(LogError::InvalidArgument(format!("no ready message {index}")));
        };
        let rsn = self.reception.deliver(arrived.sender, arrived.ssn).rsn;
        self.stats.record_receive(kind);
        LogStats::bump(&self.stats.messages_delivered, 1);
        // The frame is handed over whole: the payload is read in place (`DeliveredFrame`).
        let Arrived { sender, ssn, tag, frame, payload_offset, stood_in } = arrived;
        self.last_stood_in = stood_in;
        Ok(DeliveredFrame { source: sender, tag, ssn, rsn, determinant, frame, payload_offset })
    }
}

/// Where a replayed delivery from a retired copy stands (`stand_in_for`).
pub(super) enum StandIn {
    /// Its stand-in's copy is queued at this index of `ready`.
    Queued(usize),
    /// The message was a duplicate already delivered from the stand-in: skip the delivery.
    Duplicate,
    /// Not arrived yet (or no stand-in).
    NotYet,
}
