//! Point-to-point messages: a send or receive that meets a failure recovers it and goes on.

use std::time::Duration;

use reverb_logger::error::{LogError, Result as LogResult};
use reverb_logger::{DeliveredFrame, Landing, LoggedEndpoint, LoggedProbe, Received as LogReceived};
use reverb_transport::spinwait::{Idle, SpinWait};
use reverb_transport::{OpId, Rank, Source, Tag, TagMatch, TransportError};

use super::detection::dead_peer_in;
use super::error::{Result, RuntimeError};
use super::fault::Here;
use super::{Message, Payload, Received, Runtime};

impl Runtime {
    /// A wait bounded by `timeout` that spins, yields or sleeps as the transport's
    /// `REVERB_WAIT_MODE` says (and whether the job oversubscribes its host): for a layer's
    /// own wait loop around [`Runtime::poll`] (MPI_Wait), with [`Runtime::idle`] after each
    /// round that found nothing.
    pub fn spin_wait(&mut self, timeout: Duration) -> Result<SpinWait> {
        Ok(SpinWait::new(self.endpoint()?.provider().config(), timeout))
    }

    /// After a round of a `spin_wait` wait that found nothing: spins, or sleeps on the
    /// transport (an arrival wakes it) at most `nap`. `Ok(false)` once the wait's bound passed.
    /// A dead peer found while asleep is left to the next `poll`, which recovers it.
    pub fn idle(&mut self, wait: &mut SpinWait, nap: Duration) -> Result<bool> {
        match wait.idle() {
            Ok(Idle::Spin) => Ok(true),
            Ok(Idle::Sleep(slice)) => match self.endpoint()?.provider().block(slice.min(nap)) {
                Ok(()) | Err(TransportError::PeerDead(_)) => Ok(true),
                Err(e) => Err(e.into()),
            },
            Err(_) => Ok(false),
        }
    }

    /// Sends `payload` to `dest` under `tag`. A dead destination is recovered first when
    /// found here; the message is in the sender log and is resent to the restarted rank.
    pub(super) fn send_now(&mut self, dest: Rank, tag: Tag, payload: &[u8]) -> Result<()> {
        let sent = self.endpoint()?.send(dest, tag, payload);
        self.after_send(sent).map(|_| ())
    }

    /// `send_now` of a lent payload (`Runtime::send_lent`).
    ///
    /// # Safety
    /// As `Runtime::send_lent`.
    pub(super) unsafe fn send_lent_now(
        &mut self,
        dest: Rank,
        tag: Tag,
        payload: &[u8],
    ) -> Result<Option<OpId>> {
        // SAFETY: the caller's lending contract passes on unchanged.
        let sent = unsafe { self.endpoint()?.send_lent(dest, tag, payload) };
        Ok(self.after_send(sent)?.flatten())
    }

    /// What follows every send: a dead destination recovered, the count, fault hooks. None
    /// for a send lost to a failure that recovery resends.
    pub(super) fn after_send<T>(&mut self, sent: LogResult<T>) -> Result<Option<T>> {
        let out = match sent {
            Ok(t) => Some(t),
            // The message is in the sender log (or left already, for a stale failure): recovery
            // resends it to the restarted rank.
            Err(e) => match dead_peer_in(&e) {
                Some(p) if self.death_handled(p)? => None,
                _ => return Err(e.into()),
            },
        };
        self.sends += 1;
        self.note_replay()?;
        let here = Here { rank: self.rank, incarnation: self.report.incarnation };
        self.config.faults.after_send(here, self.sends, &self.config);
        Ok(out)
    }

    /// A receive that does not wait: the matching message if it has arrived, else None (a
    /// failure found meanwhile is recovered first, as in `recv`).
    pub(super) fn try_recv_now(&mut self, source: Source, tag: TagMatch) -> Result<Option<Message>> {
        let got = self.endpoint()?.recv_in_place(source, tag, Duration::ZERO);
        match got {
            Ok(d) => {
                self.note_replay()?;
                Ok(Some(Message::from(d)))
            }
            Err(LogError::Transport(TransportError::Timeout(_))) => {
                self.check_failures()?;
                Ok(None)
            }
            Err(e) => match dead_peer_in(&e) {
                Some(p) if self.death_handled(p)? => Ok(None),
                _ => Err(e.into()),
            },
        }
    }

    /// Progresses and collects arrivals (recovering a failure found), delivering nothing.
    pub(super) fn poll_now(&mut self) -> Result<()> {
        match self.endpoint()?.poll() {
            Ok(()) => Ok(self.check_failures().map(drop)?),
            Err(e) => match dead_peer_in(&e) {
                Some(p) if self.death_handled(p)? => Ok(()),
                _ => Err(e.into()),
            },
        }
    }

    /// A receive of what `poll_now` (or an earlier receive) collected; no progress.
    /// A failure found meanwhile (a log write to a dead buddy) is recovered, as in `try_recv_now`.
    pub(super) fn take_collected_now(&mut self, source: Source, tag: TagMatch) -> Result<Option<Message>> {
        match self.endpoint()?.recv_collected_in_place(source, tag) {
            Ok(Some(d)) => {
                self.note_replay()?;
                Ok(Some(Message::from(d)))
            }
            Ok(None) => Ok(None),
            Err(e) => self.taken_none_after(e),
        }
    }

    /// No message for a take whose endpoint found a peer dead, once that death is handled.
    fn taken_none_after<T>(&mut self, e: LogError) -> Result<Option<T>> {
        match dead_peer_in(&e) {
            Some(p) if self.death_handled(p)? => Ok(None),
            _ => Err(e.into()),
        }
    }

    /// `probe_now`, logged at the call's tick (`Runtime::probe_logged`).
    pub(super) fn probe_logged_now(&mut self, source: Source, tag: TagMatch) -> Result<LoggedProbe> {
        match self.endpoint()?.probe_logged(source, tag) {
            Ok(LoggedProbe::Found(sender, t, len)) => {
                self.note_replay()?;
                Ok(LoggedProbe::Found(sender, t, len))
            }
            Ok(other) => {
                self.check_failures()?;
                Ok(other)
            }
            Err(e) => match dead_peer_in(&e) {
                Some(p) if self.death_handled(p)? => Ok(LoggedProbe::Nothing),
                _ => Err(e.into()),
            },
        }
    }

    /// What `try_recv_now` would take, left in place: (source, tag, length).
    pub(super) fn probe_now(&mut self, source: Source, tag: TagMatch) -> Result<Option<(Rank, Tag, usize)>> {
        match self.endpoint()?.probe(source, tag) {
            Ok(Some(found)) => Ok(Some(found)),
            Ok(None) => {
                self.check_failures()?;
                Ok(None)
            }
            Err(e) => match dead_peer_in(&e) {
                Some(p) if self.death_handled(p)? => Ok(None),
                _ => Err(e.into()),
            },
        }
    }

    pub(super) fn recv(&mut self, source: Source, tag: TagMatch) -> Result<Message> {
        self.recv_with(source, tag, |e, slice| e.recv_in_place(source, tag, slice)).map(Message::from)
    }

    /// `recv` that may land the payload in `buf` (see [`Runtime::recv_matching_into`]).
    pub(super) fn recv_landing(
        &mut self,
        source: Source,
        tag: TagMatch,
        buf: &mut [u8],
        accept: &dyn Fn(Tag, usize) -> bool,
    ) -> Result<Received> {
        let got =
            self.recv_with(source, tag, |e, slice| e.recv_into(source, tag, slice, Landing { buf, accept }));
        got.map(Received::from)
    }

    /// `take_collected_now` that may land the payload in `buf`.
    pub(super) fn take_collected_landing(
        &mut self,
        source: Source,
        tag: TagMatch,
        buf: &mut [u8],
        accept: &dyn Fn(Tag, usize) -> bool,
    ) -> Result<Option<Received>> {
        match self.endpoint()?.recv_collected_into(source, tag, Landing { buf, accept }) {
            Ok(Some(r)) => {
                self.note_replay()?;
                Ok(Some(Received::from(r)))
            }
            Ok(None) => Ok(None),
            Err(e) => self.taken_none_after(e),
        }
    }

    /// A blocking receive by `attempt` (one bounded endpoint receive per detection slice),
    /// recovering the failures found meanwhile.
    fn recv_with<T>(
        &mut self,
        source: Source,
        tag: TagMatch,
        mut attempt: impl FnMut(&mut LoggedEndpoint, Duration) -> LogResult<T>,
    ) -> Result<T> {
        // Idle time since the call or the last recovery, counted in slices that each waited
        // at least `slice`: no clock read on a receive that finds its message.
        let mut waited = Duration::ZERO;
        loop {
            let slice = self.config.detect_interval;
            let got = attempt(self.endpoint()?, slice);
            match got {
                Ok(d) => {
                    self.note_replay()?;
                    return Ok(d);
                }
                Err(LogError::Transport(TransportError::Timeout(_))) => {
                    waited += slice;
                    // A masked copy never sends again: the caller takes its sphere's next copy.
                    if let Source::Rank(p) = source {
                        if self.spheres.as_ref().is_some_and(|s| s.is_masked(p)) {
                            return Err(TransportError::PeerDead(p).into());
                        }
                    }
                    if self.check_failures()? {
                        waited = Duration::ZERO;
                    } else if waited > self.config.recv_timeout {
                        return Err(RuntimeError::Timeout {
                            what: format!("rank {} receiving {source:?} tag {:#x}", self.rank, tag.tag),
                            after: self.config.recv_timeout,
                        });
                    }
                }
                Err(e) => match dead_peer_in(&e) {
                    Some(p) if source == Source::Rank(p) && self.masked_copy(p) => return Err(e.into()),
                    Some(p) if self.death_handled(p)? => waited = Duration::ZERO,
                    _ => return Err(e.into()),
                },
            }
        }
    }
}

impl From<DeliveredFrame> for Message {
    fn from(d: DeliveredFrame) -> Message {
        Message { source: d.source, tag: d.tag, payload: Payload::from(d) }
    }
}

impl From<LogReceived> for Received {
    fn from(r: LogReceived) -> Received {
        match r {
            LogReceived::Landed { source, tag, len } => Received::Landed { source, tag, len },
            LogReceived::Frame(d) => Received::Message(Message::from(d)),
        }
    }
}
