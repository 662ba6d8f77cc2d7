//! Posting and reaping: control and data receives, the completion pump, bounded waits for
//! what the loops need, and the RMA posts.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use reverb_transport::{
    CompletionKind, OpId, Owner, PeerState, ProviderKind, RecvBuffer, Rma, Signal, Source, TagMatch,
    TransportError,
};

use super::{Op, Session, WaitStyle, CTRL_CAPACITY, SPINS_PER_CHECK, TAG_CTRL, TAG_DATA};

/// Completions seen so far, sorted by what the loops ask for.
#[derive(Default)]
pub(super) struct Events {
    /// Local completions of signaled put / put_imm / get, in arrival order.
    pub(super) rma: VecDeque<OpId>,
    pub(super) data_sends: u64,
    pub(super) data_recvs: u64,
    /// Length every data receive must have; a different one is recorded in `bad_len`.
    pub(super) expect_len: usize,
    pub(super) bad_len: Option<usize>,
    pub(super) ctrl: VecDeque<Vec<u8>>,
    pub(super) imms: VecDeque<u32>,
}

/// A bounded wait: created unarmed so fast paths never read the clock.
pub(super) struct Deadline {
    pub(super) at: Option<Instant>,
    pub(super) bound: Duration,
}

impl Deadline {
    pub(super) fn new(bound: Duration) -> Self {
        Deadline { at: None, bound }
    }
    /// Re-arms after progress was seen.
    pub(super) fn extend(&mut self) {
        self.at = None;
    }
    pub(super) fn expired(&mut self) -> bool {
        let now = Instant::now();
        now > *self.at.get_or_insert(now + self.bound)
    }
}

impl Session {
    // ----- completions -------------------------------------------------------------------

    pub(super) fn post_ctrl_recv(&mut self) -> Result<()> {
        self.provider
            .post_recv(
                Source::Rank(self.peer),
                TagMatch::exact(TAG_CTRL),
                RecvBuffer::Owned { capacity: CTRL_CAPACITY },
            )
            .context("posting a control receive")?;
        Ok(())
    }

    /// Progresses once (busy poll, or a short provider wait) and sorts the completions.
    /// Busy polling is `Provider::poll` minus its intermediate `Vec`: `progress`, then the
    /// completion queue is read in place, so an empty poll costs one `progress` call.
    pub(super) fn pump(&mut self) -> Result<()> {
        self.pump_as(self.wait)
    }

    /// [`Session::pump`] with an explicit wait style.
    pub(super) fn pump_as(&mut self, wait: WaitStyle) -> Result<()> {
        match wait {
            WaitStyle::BusyPoll => self.provider.progress().context("polling completions")?,
            WaitStyle::Provider(_) => {
                let slice = Duration::from_millis(10);
                match self.provider.wait_until(Owner::APP, slice, &mut |cq| !cq.is_empty()) {
                    Ok(()) | Err(TransportError::Timeout(_)) => {}
                    Err(e) => return Err(anyhow!(e).context("waiting for completions")),
                }
            }
        }
        let cq = self.provider.completions();
        let mut result = Ok(());
        while let Some(c) = cq.pop_front() {
            if let Err(e) = &c.status {
                result = Err(anyhow!(e.clone()).context(format!("failed completion {:?}", c.kind)));
                continue;
            }
            match c.kind {
                CompletionKind::Put | CompletionKind::PutImm | CompletionKind::Get => {
                    self.ev.rma.push_back(c.op)
                }
                CompletionKind::Send { tag, .. } => {
                    if tag == TAG_DATA {
                        self.ev.data_sends += 1;
                    }
                }
                CompletionKind::Recv { tag, len, data, .. } => {
                    if tag == TAG_DATA {
                        self.ev.data_recvs += 1;
                        if len != self.ev.expect_len {
                            self.ev.bad_len = Some(len);
                        }
                    } else if tag == TAG_CTRL {
                        self.ev.ctrl.push_back(data.unwrap_or_default());
                    }
                }
                CompletionKind::Imm { imm, .. } => self.ev.imms.push_back(imm),
            }
        }
        result
    }

    /// Progresses until `ready` holds; fails after `bound` without progress or if the peer dies.
    pub(super) fn wait_for(
        &mut self,
        what: &str,
        bound: Duration,
        ready: impl Fn(&Events) -> bool,
    ) -> Result<()> {
        let mut deadline = Deadline::new(bound);
        let mut spins = 0u32;
        loop {
            self.pump()?;
            if ready(&self.ev) {
                return Ok(());
            }
            spins = spins.wrapping_add(1);
            if spins & 255 == 0 || matches!(self.wait, WaitStyle::Provider(_)) {
                self.check_alive(what)?;
                if deadline.expired() {
                    bail!("timed out after {bound:?} waiting for {what}");
                }
            }
        }
    }

    pub(super) fn check_alive(&self, what: &str) -> Result<()> {
        if self.provider.peer_state(self.peer) == PeerState::Dead {
            bail!("rank {} died while waiting for {what}", self.peer);
        }
        Ok(())
    }

    /// Spins on the last byte of the local target region until it holds `marker`
    /// (perftest's write-latency arrival test; RMA writes raise no completion at the target).
    pub(super) fn spin_byte(&mut self, offset: usize, marker: u8) -> Result<()> {
        let mut deadline = Deadline::new(self.timeout);
        let mut spins = 0u32;
        // tcp emulates puts with messages that the target's progress writes in place.
        let serve = self.provider.provider_for(self.peer) == ProviderKind::TCP;
        loop {
            if self.dst.load_volatile(offset)? == marker {
                return Ok(());
            }
            if serve {
                self.provider.progress().context("serving puts")?;
            }
            spins = spins.wrapping_add(1);
            if spins & (SPINS_PER_CHECK - 1) == 0 {
                self.check_alive("a put to arrive")?;
                if deadline.expired() {
                    bail!("timed out after {:?} waiting for a put to arrive", self.timeout);
                }
            }
            std::hint::spin_loop();
        }
    }

    /// Consumes finished signaled RMA operations; blocks (bounded) while `pending >= limit`.
    pub(super) fn reap_rma(&mut self, mut pending: usize, limit: usize) -> Result<usize> {
        if pending == 0 {
            return Ok(0);
        }
        self.pump()?;
        pending = pending.saturating_sub(std::mem::take(&mut self.ev.rma).len());
        if pending >= limit {
            let want = pending + 1 - limit;
            self.wait_for("RMA completions", self.timeout, |ev| ev.rma.len() >= want)?;
            pending = pending.saturating_sub(std::mem::take(&mut self.ev.rma).len());
        }
        Ok(pending)
    }

    pub fn send_ctrl(&mut self, msg: &[u8]) -> Result<()> {
        self.provider.send(self.peer, TAG_CTRL, msg).context("sending a control message")?;
        Ok(())
    }

    /// Waits (bounded by `bound`) for the next control message from the peer.
    pub fn recv_ctrl(&mut self, bound: Duration) -> Result<Vec<u8>> {
        if self.ev.ctrl.is_empty() {
            self.wait_for("a control message", bound, |ev| !ev.ctrl.is_empty())?;
        }
        let msg = self.ev.ctrl.pop_front().unwrap_or_default();
        self.post_ctrl_recv()?;
        Ok(msg)
    }

    pub(super) fn expect_ctrl(&mut self, want: &[u8], bound: Duration) -> Result<()> {
        let got = self.recv_ctrl(bound)?;
        if got != want {
            bail!(
                "protocol error: expected control message {:?}, got {:?}",
                String::from_utf8_lossy(want),
                String::from_utf8_lossy(&got)
            );
        }
        Ok(())
    }

    pub(super) fn signal(&self, i: u64, total: u64, cq_mod: usize) -> Signal {
        if (i + 1).is_multiple_of(cq_mod.max(1) as u64) || i + 1 == total {
            Signal::Yes
        } else {
            Signal::No
        }
    }

    /// Posts one RMA operation of `op` between the session's regions.
    pub(super) fn post_rma(&mut self, op: Op, size: usize, imm: u32, signal: Signal) -> Result<OpId> {
        let rma = match op {
            Op::Get => {
                Rma { local: &self.dst, local_offset: 0, remote: &self.peer_src, remote_offset: 0, len: size }
            }
            _ => {
                Rma { local: &self.src, local_offset: 0, remote: &self.peer_dst, remote_offset: 0, len: size }
            }
        };
        let posted = match op {
            Op::Put => self.provider.put(rma, signal),
            Op::PutImm => self.provider.put_imm(rma, imm, signal),
            Op::Get => self.provider.get(rma, signal),
            Op::Send => return Err(anyhow!("send is not an RMA operation")),
        };
        posted.with_context(|| format!("posting a {size}-byte {}", op.as_str()))
    }

    pub(super) fn post_data_recv(&mut self, size: usize) -> Result<()> {
        let buffer = RecvBuffer::Region { region: self.dst.clone(), offset: 0, capacity: size };
        self.provider
            .post_recv(Source::Rank(self.peer), TagMatch::exact(TAG_DATA), buffer)
            .context("posting a data receive")?;
        Ok(())
    }

    pub(super) fn post_data_send(&mut self, size: usize) -> Result<()> {
        self.provider
            .send_region(self.peer, TAG_DATA, &self.src, 0, size)
            .with_context(|| format!("posting a {size}-byte send"))?;
        Ok(())
    }

    /// Sets the expected receive length and clears per-phase counters.
    pub(super) fn reset_events(&mut self, size: usize) -> Result<()> {
        self.pump()?;
        if let Some(len) = self.ev.bad_len.take() {
            bail!("a data receive carried {len} bytes, expected {}", self.ev.expect_len);
        }
        let ctrl = std::mem::take(&mut self.ev.ctrl);
        self.ev = Events { expect_len: size, ctrl, ..Events::default() };
        Ok(())
    }

    pub(super) fn check_events(&mut self) -> Result<()> {
        if let Some(len) = self.ev.bad_len.take() {
            bail!("a data receive carried {len} bytes, expected {}", self.ev.expect_len);
        }
        Ok(())
    }
}
