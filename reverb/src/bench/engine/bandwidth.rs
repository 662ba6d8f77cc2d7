//! The windowed bandwidth loops and the peak-rate meter.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use reverb_transport::codec::{Reader, Writer};
use reverb_transport::{OpId, ProviderKind, Signal};

use super::completions::Deadline;
use super::{BwStats, Op, Role, Session, WaitStyle, MIB};

impl Session {
    // ----- bandwidth ---------------------------------------------------------------------

    /// Streams `warmup` then `iters` operations of `op`, `window` outstanding, RMA signaled
    /// every `cq_mod`-th; each phase ends with a FIN/ACK sync that proves the data landed.
    /// The initiator returns the measured phase's statistics.
    pub fn bandwidth(
        &mut self,
        op: Op,
        size: usize,
        iters: u64,
        warmup: u64,
        window: usize,
        cq_mod: usize,
    ) -> Result<Option<BwStats>> {
        self.check_size(size)?;
        let window = window.max(1);
        if warmup > 0 {
            self.bw_phase(op, size, warmup, window, cq_mod)?;
        }
        let stats = self.bw_phase(op, size, iters, window, cq_mod)?;
        Ok(stats)
    }

    fn bw_phase(
        &mut self,
        op: Op,
        size: usize,
        total: u64,
        window: usize,
        cq_mod: usize,
    ) -> Result<Option<BwStats>> {
        self.reset_events(size)?;
        let mut posted_recvs = 0u64;
        if self.role == Role::Responder && op == Op::Send {
            while posted_recvs < total.min(window as u64) {
                self.post_data_recv(size)?;
                posted_recvs += 1;
            }
        }
        self.boot.barrier().context("barrier before the bandwidth loop")?;
        if self.role == Role::Responder {
            return self.bw_respond(op, size, total, window, posted_recvs).map(|()| None);
        }
        // Peak: the best of 20 equal slices of the run (at least a window each), long enough
        // that batched completions or batched ring drains cannot fake a burst.
        let mut meter = PeakMeter::new(total, window, size);
        let mut signaled: VecDeque<(OpId, u64)> = VecDeque::new();
        let (mut posted, mut done) = (0u64, 0u64);
        let mut deadline = Deadline::new(self.timeout);
        let start = Instant::now();
        while done < total {
            while posted < total && posted - done < window as u64 {
                if op == Op::Send {
                    self.post_data_send(size)?;
                } else {
                    let signal = self.signal(posted, total, cq_mod);
                    let id = self.post_rma(op, size, posted as u32, signal)?;
                    if signal == Signal::Yes {
                        signaled.push_back((id, posted));
                    }
                }
                posted += 1;
            }
            self.pump()?;
            let before = done;
            if op == Op::Send {
                done = self.ev.data_sends;
            } else {
                // A signaled completion implies every earlier operation is done too.
                while let Some(id) = self.ev.rma.pop_front() {
                    if let Some(pos) = signaled.iter().position(|(s, _)| *s == id) {
                        done = done.max(signaled[pos].1 + 1);
                        signaled.drain(..=pos);
                    }
                }
            }
            if done != before {
                deadline.extend();
                meter.advance(done);
            } else if deadline.expired() {
                bail!("timed out after {:?} waiting for {} completions", self.timeout, op.as_str());
            }
        }
        // Final sync: the responder acknowledges only once everything arrived.
        self.send_ctrl(b"FIN")?;
        let bound = self.timeout;
        let ack = self.recv_ctrl(bound)?;
        let elapsed = start.elapsed();
        // For send the responder's arrivals give the peak: an eager send completes once
        // buffered, so the initiator's slices would show enqueue speed. (A put_imm's bytes are
        // placed when its completion is raised; its Imm notifications trail in bursts.)
        let arrival_peak = match ack.strip_prefix(b"ACK".as_slice()) {
            Some([]) => None,
            Some(rest) => {
                let mut r = Reader::new(rest, "bench ACK");
                let peak = f64::from_bits(r.u64("peak")?);
                r.finish()?;
                Some(peak)
            }
            None => bail!("protocol error: expected ACK, got {:?}", String::from_utf8_lossy(&ack)),
        };
        self.check_events()?;
        let secs = elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
        let bytes = total as f64 * size as f64;
        Ok(Some(BwStats {
            size,
            iters: total,
            window,
            cq_mod,
            avg_mib_s: bytes / secs / MIB,
            peak_mib_s: arrival_peak.unwrap_or(meter.peak).max(bytes / secs) / MIB,
            msg_rate_mps: total as f64 / secs / 1e6,
            elapsed,
        }))
    }

    fn bw_respond(
        &mut self,
        op: Op,
        size: usize,
        total: u64,
        window: usize,
        mut posted_recvs: u64,
    ) -> Result<()> {
        let mut deadline = Deadline::new(self.timeout);
        let mut seen = 0u64;
        let mut meter = PeakMeter::new(total, window, size);
        // Over verbs, puts and gets need nothing from the target's CPU until the FIN: idle
        // between single non-blocking polls, as perftest's server sleeps in its TCP handshake
        // meanwhile. A spinning target would take a CPU from the initiator and, on soft-RoCE,
        // from the kernel moving the data. The FIN waits at most one nap (1 ms) longer, which
        // is noise for verbs runs but not for shm's millisecond-long runs: shm keeps spinning.
        let idle =
            matches!(op, Op::Put | Op::Get) && self.provider.provider_for(self.peer) == ProviderKind::VERBS;
        loop {
            if idle {
                self.pump_as(WaitStyle::BusyPoll)?;
                if self.ev.ctrl.is_empty() {
                    std::thread::sleep(Duration::from_millis(1));
                }
            } else {
                self.pump()?;
            }
            let arrived = match op {
                Op::Send => self.ev.data_recvs,
                Op::PutImm => self.ev.imms.len() as u64,
                // Puts and gets raise nothing here: the FIN says they are done.
                Op::Put | Op::Get => total,
            };
            if op == Op::Send {
                while posted_recvs < total && posted_recvs - arrived < window as u64 {
                    self.post_data_recv(size)?;
                    posted_recvs += 1;
                }
            }
            if arrived != seen || !self.ev.ctrl.is_empty() {
                seen = arrived;
                deadline.extend();
                if op == Op::Send {
                    meter.advance(arrived);
                }
            }
            if arrived >= total && !self.ev.ctrl.is_empty() {
                break;
            }
            if deadline.expired() {
                // Puts and gets are invisible here, so only the FIN can end the wait; allow
                // the whole phase at a pessimistic 1 MB/s before giving up.
                let budget = self.timeout + Duration::from_secs_f64(total as f64 * size as f64 / 1e6);
                if arrived >= total && deadline.bound < budget {
                    deadline = Deadline::new(budget);
                    continue;
                }
                bail!("timed out waiting for {} ({arrived} of {total} arrived)", op.as_str());
            }
            if self.wait == WaitStyle::BusyPoll {
                self.check_alive("data")?;
            }
        }
        if op == Op::PutImm {
            let imms: Vec<u32> = self.ev.imms.drain(..).collect();
            if let Some((i, imm)) = imms.iter().enumerate().find(|(i, imm)| **imm != *i as u32) {
                bail!("put_imm {i} delivered immediate {imm} (lost or reordered)");
            }
        }
        self.check_events()?;
        self.expect_ctrl(b"FIN", self.timeout)?;
        let mut ack = b"ACK".to_vec();
        if op == Op::Send {
            Writer::new(&mut ack).u64(meter.peak.to_bits());
        }
        self.send_ctrl(&ack)
    }
}

/// Tracks peak bandwidth: the best rate over equal slices of a run (at least a window each),
/// long enough that batched completions or ring drains cannot fake a burst.
struct PeakMeter {
    stride: u64,
    stride_bytes: f64,
    next_mark: u64,
    last_mark: Instant,
    /// Bytes per second.
    peak: f64,
}

impl PeakMeter {
    fn new(total: u64, window: usize, size: usize) -> PeakMeter {
        let stride = (total / PEAK_SLICES).max(window as u64);
        PeakMeter {
            stride,
            stride_bytes: (stride * size as u64) as f64,
            next_mark: stride,
            last_mark: Instant::now(),
            peak: 0.0,
        }
    }

    /// `done` operations have finished: credit every slice boundary crossed since the last one.
    fn advance(&mut self, done: u64) {
        if done < self.next_mark {
            return;
        }
        let crossed = (done - self.next_mark) / self.stride + 1;
        let now = Instant::now();
        let secs = (now - self.last_mark).as_secs_f64();
        if secs > 0.0 {
            self.peak = self.peak.max(crossed as f64 * self.stride_bytes / secs);
        }
        self.last_mark = now;
        self.next_mark += crossed * self.stride;
    }
}

/// Bandwidth peak: the best of this many equal slices of a run.
const PEAK_SLICES: u64 = 20;
