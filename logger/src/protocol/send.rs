//! The send path, common to every protocol: validation, ssn, envelope, framing in a pooled
//! registered buffer for large messages, the provider send. The protocol hooks in before
//! the ssn (`prepare_send`: back-pressure, piggyback), before the message leaves
//! (`log_send`) and after (`background`).

use reverb_transport::{Rank, Tag, TransportError};

use super::{Background, LoggedEndpoint, OutgoingMessage};
use crate::determinant::{Determinant, Ssn};
use crate::envelope::Envelope;
use crate::error::{LogError, Result};
use crate::framepool::LEASE_MIN;
use crate::multicast::McastKey;
use crate::stats::LogStats;

impl LoggedEndpoint {
    /// Sends `payload` to `dest` under application tag `tag`. The provider copies it, so the
    /// buffer is free on return. Causal logging piggybacks this rank's unstable determinants
    /// and then posts their log write; neither waits.
    pub fn send(&mut self, dest: Rank, tag: Tag, payload: &[u8]) -> Result<()> {
        self.send_logged(dest, tag, payload, None)
    }

    /// `send`, logging a stub for multicast piece `stub` instead of the payload (the caller
    /// checked that the root keeps it: `send_multicast`).
    #[inline]
    pub(super) fn send_logged(
        &mut self,
        dest: Rank,
        tag: Tag,
        payload: &[u8],
        stub: Option<McastKey>,
    ) -> Result<()> {
        self.check_outgoing(dest, payload.len())?;
        if self.pass_through {
            return self.send_pass_through(dest, tag, payload);
        }
        let payload_logged = self.logs_payload_with(dest);
        let mut piggyback = std::mem::take(&mut self.piggyback);
        piggyback.clear();
        // Room first, so a full send log refuses the message before it takes an ssn. With no
        // payload to log and no unstable determinant to piggyback there is nothing to prepare.
        if payload_logged || self.pending.background != Background::Idle {
            let prepared =
                self.protocol.prepare_send(dest, payload.len(), payload_logged, &mut piggyback, &self.stats);
            if let Err(e) = prepared {
                self.piggyback = piggyback;
                return Err(e);
            }
        }
        // A failed provider send leaves a gap in this channel's ssns: the peer is then gone,
        // and recovery (which resends from the log) owns the channel.
        let ssn = self.sequencer.next_ssn(dest)?;
        let encoded = self.encode_header(dest, ssn, tag, payload.len(), &mut piggyback);
        self.piggyback = piggyback;
        encoded?;
        let framed = self.frame_in_pool(payload)?;
        // Logged before it leaves, so the log covers every message a receiver can hold. A
        // mid-sized payload is copied into the log instead: a leased region stays out of the
        // pool until the log is trimmed, and each message would register (and fault in) a
        // fresh one.
        let leased = payload_logged && stub.is_none() && payload.len() > LEASE_MIN;
        let lease = framed.filter(|_| leased).and_then(|i| self.frames.lease(i));
        let msg = OutgoingMessage {
            dest,
            ssn,
            tag,
            payload,
            framed: lease.map(|region| (region, self.send_buf.len())),
            payload_logged,
            stub: stub.filter(|_| payload_logged),
        };
        self.protocol.log_send(&msg, &self.stats)?;
        let overhead = self.send_buf.len() as u64;
        let posted = self.send_frame(dest, self.config.provider_tag, framed, payload)?;
        self.sends_in_flight += u64::from(posted);
        self.comm.record_app(dest, payload.len() as u64, overhead)?;
        LogStats::bump(&self.stats.library_bytes_sent, overhead);
        LogStats::bump(&self.stats.messages_sent, 1);
        // After the message left: its piggyback is on the wire, the log write goes behind it.
        self.background(false)?;
        if posted {
            self.collect_completions()?;
        }
        Ok(())
    }

    /// Encodes message `ssn` to `dest` into `send_buf`, carrying `piggyback` (left empty).
    pub(super) fn encode_frame(
        &mut self,
        dest: Rank,
        ssn: Ssn,
        tag: Tag,
        payload: &[u8],
        piggyback: &mut Vec<Determinant>,
    ) -> Result<()> {
        self.encode_header(dest, ssn, tag, payload.len(), piggyback)?;
        self.send_buf.extend_from_slice(payload);
        Ok(())
    }

    /// Above the rendezvous threshold, writes the frame (the envelope in `send_buf`, then
    /// `payload`) once into a pooled registered buffer and returns its index; `None` below
    /// the threshold or with the pool in use or unavailable.
    pub(super) fn frame_in_pool(&mut self, payload: &[u8]) -> Result<Option<usize>> {
        let len = self.send_buf.len() + payload.len();
        if len <= self.provider.config().rndv_thresh {
            return Ok(None);
        }
        // A failed registration only costs the provider's copy.
        let Ok(Some(i)) = self.frames.acquire(&mut *self.provider, len) else { return Ok(None) };
        let Some(region) = self.frames.region(i) else { return Ok(None) };
        region.write(0, &self.send_buf)?;
        region.write(self.send_buf.len(), payload)?;
        Ok(Some(i))
    }

    /// Sends the frame under provider tag `tag`: from pooled buffer `framed`, which the peer
    /// reads in place, else with `payload` joining the envelope in `send_buf` (if any: a
    /// pass-through message has none) and the provider copying it. Returns whether an
    /// operation was posted (its completion to collect): an enveloped small frame goes out
    /// inline where the provider can (shm), with none.
    pub(super) fn send_frame(
        &mut self,
        dest: Rank,
        tag: Tag,
        framed: Option<usize>,
        payload: &[u8],
    ) -> Result<bool> {
        if let Some(i) = framed {
            if let Some(region) = self.frames.region(i) {
                let len = self.send_buf.len() + payload.len();
                let op = self.provider.send_region_for(self.owner, dest, tag, region, 0, len)?;
                self.frames.mark_busy(i, op);
                return Ok(true);
            }
        }
        if self.send_buf.is_empty() {
            self.provider.send_for(self.owner, dest, tag, payload)?;
            return Ok(true);
        }
        self.send_buf.extend_from_slice(payload);
        if self.send_inline(dest, tag)? {
            return Ok(false);
        }
        self.provider.send_for(self.owner, dest, tag, &self.send_buf)?;
        Ok(true)
    }

    /// `send_buf` out through the provider's inline path: true if it went (no operation, no
    /// completion: an operation and its completion cost ~700 instructions of a ~4000
    /// instruction logged ping-pong leg). A send to a retired copy that died counts as sent,
    /// as its failed completion would (`collect_completions`).
    fn send_inline(&mut self, dest: Rank, tag: Tag) -> Result<bool> {
        match self.provider.send_inline(dest, tag, &self.send_buf) {
            Ok(sent) => Ok(sent),
            Err(TransportError::PeerDead(p)) if self.retired.contains(&p) => Ok(true),
            Err(e) => Err(e.into()),
        }
    }

    /// Refuses a destination outside the job.
    pub(super) fn check_dest(&self, dest: Rank) -> Result<()> {
        if dest >= self.size {
            return Err(LogError::InvalidArgument(format!("destination {dest} in a job of {}", self.size)));
        }
        Ok(())
    }

    /// Refuses a destination outside the job and a payload above REVERB_LOG_MAX_MESSAGE.
    pub(super) fn check_outgoing(&self, dest: Rank, len: usize) -> Result<()> {
        self.check_dest(dest)?;
        if len > self.config.max_message {
            return Err(LogError::InvalidArgument(format!(
                "payload of {len} bytes above REVERB_LOG_MAX_MESSAGE {}",
                self.config.max_message
            )));
        }
        Ok(())
    }

    /// Encodes the envelope of message `ssn` to `dest` (a payload of `payload_len` bytes)
    /// into `send_buf`, carrying `piggyback` (left empty).
    fn encode_header(
        &mut self,
        dest: Rank,
        ssn: Ssn,
        tag: Tag,
        payload_len: usize,
        piggyback: &mut Vec<Determinant>,
    ) -> Result<()> {
        let mut envelope = Envelope {
            sender: self.rank,
            receiver: dest,
            incarnation: self.incarnation,
            ssn,
            tag,
            payload_len: 0,
            determinants: std::mem::take(piggyback),
        };
        self.send_buf.clear();
        let encoded = match self.short_envelopes {
            true => envelope.encode_short_header_into(payload_len, &mut self.send_buf),
            false => envelope.encode_header_into(payload_len, &mut self.send_buf),
        };
        *piggyback = envelope.determinants;
        piggyback.clear();
        encoded
    }
}
