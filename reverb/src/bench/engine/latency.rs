//! The ping-pong latency loops.

use std::time::Duration;

use anyhow::{bail, Context, Result};
use reverb_transport::Signal;

use super::{marker, Op, Role, Session};

impl Session {
    // ----- latency -----------------------------------------------------------------------

    /// Runs `warmup + iters` ping-pong iterations of `op` (one get per iteration for get).
    /// The initiator returns one sample per measured iteration: the full round trip (the
    /// caller halves it for ping-pongs); the responder returns no samples.
    pub fn latency(
        &mut self,
        op: Op,
        size: usize,
        iters: u64,
        warmup: u64,
        cq_mod: usize,
    ) -> Result<Vec<Duration>> {
        self.check_size(size)?;
        self.reset_events(size)?;
        self.src.fill(0, size, 0)?;
        self.dst.fill(0, size, 0)?;
        if op == Op::Send && self.role == Role::Responder {
            self.post_data_recv(size)?;
        }
        self.boot.barrier().context("barrier before the latency loop")?;
        let total = warmup + iters;
        let mut pending = 0usize;
        let limit = 64usize;
        let last = size - 1;
        let initiator = self.role == Role::Initiator;
        // Consecutive iteration starts, as perftest stamps consecutive posts: a sample
        // includes everything the loop does per iteration (completion reaping too).
        let calibration = crate::bench::clock::Calibration::start();
        let mut ticks = Vec::with_capacity(iters as usize);
        let mut prev = crate::bench::clock::ticks();
        for i in 0..total {
            if initiator {
                let now = crate::bench::clock::ticks();
                if i > warmup {
                    ticks.push(now.wrapping_sub(prev));
                }
                prev = now;
            }
            let signal = self.signal(i, total, cq_mod);
            match op {
                Op::Put => {
                    let marker = marker(i);
                    if initiator {
                        self.src.store_volatile(last, marker)?;
                        self.post_rma(op, size, 0, signal)?;
                        pending += usize::from(signal == Signal::Yes);
                        self.spin_byte(last, marker)?;
                    } else {
                        self.spin_byte(last, marker)?;
                        self.src.store_volatile(last, marker)?;
                        self.post_rma(op, size, 0, signal)?;
                        pending += usize::from(signal == Signal::Yes);
                    }
                    pending = self.reap_rma(pending, limit)?;
                }
                Op::PutImm => {
                    let imm = i as u32;
                    if initiator {
                        self.post_rma(op, size, imm, signal)?;
                        pending += usize::from(signal == Signal::Yes);
                        self.wait_imm(imm)?;
                    } else {
                        self.wait_imm(imm)?;
                        self.post_rma(op, size, imm, signal)?;
                        pending += usize::from(signal == Signal::Yes);
                    }
                    pending = self.reap_rma(pending, limit)?;
                }
                Op::Send => {
                    if initiator {
                        self.post_data_recv(size)?;
                        self.post_data_send(size)?;
                    }
                    let bound = self.timeout;
                    self.wait_for("a reply", bound, |ev| ev.data_recvs > i)?;
                    if !initiator {
                        if i + 1 < total {
                            self.post_data_recv(size)?;
                        }
                        self.post_data_send(size)?;
                    }
                    let sent = i + 1;
                    if sent >= self.ev.data_sends + limit as u64 {
                        self.wait_for("send completions", bound, |ev| ev.data_sends + limit as u64 > sent)?;
                    }
                }
                Op::Get => {
                    if initiator {
                        let id = self.post_rma(op, size, 0, Signal::Yes)?;
                        let bound = self.timeout;
                        self.wait_for("a get", bound, |ev| ev.rma.back() == Some(&id))?;
                        self.ev.rma.clear();
                    }
                }
            }
        }
        if initiator {
            ticks.push(crate::bench::clock::ticks().wrapping_sub(prev));
        }
        let samples = calibration.to_durations(&ticks);
        // Drain: every signaled operation and every send has completed before the next size.
        let bound = self.timeout;
        if pending > 0 {
            self.wait_for("the last RMA completions", bound, |ev| ev.rma.len() >= pending)?;
            self.ev.rma.clear();
        }
        if op == Op::Send {
            self.wait_for("the last send completions", bound, |ev| ev.data_sends >= total)?;
        }
        if op == Op::Get {
            // The responder idled through the gets; its bound covers the whole run.
            if initiator {
                self.send_ctrl(b"FIN")?;
            } else {
                let bound = self.timeout + Duration::from_millis(total);
                self.expect_ctrl(b"FIN", bound)?;
            }
        }
        self.check_events()?;
        Ok(samples)
    }

    fn wait_imm(&mut self, imm: u32) -> Result<()> {
        let bound = self.timeout;
        self.wait_for("a put_imm to arrive", bound, |ev| !ev.imms.is_empty())?;
        let got = self.ev.imms.pop_front().unwrap_or_default();
        if got != imm {
            bail!("put_imm delivered immediate {got}, expected {imm} (lost or reordered)");
        }
        Ok(())
    }
}
