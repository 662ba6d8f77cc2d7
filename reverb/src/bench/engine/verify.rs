//! The first pass per size: one patterned message, every byte checked at the receiver.

use anyhow::{bail, Context, Result};
use reverb_transport::Signal;

use super::{pattern, Op, Role, Session};

const VERIFY_IMM: u32 = 0x5EED_0001;

impl Session {
    // ----- verification ------------------------------------------------------------------

    /// Moves one patterned message of `size` bytes with `op` and checks every byte at the
    /// receiving side; both ranks fail if it does not match. `initiator_acts` picks the
    /// direction (the acting rank issues the put, put_imm, send or get).
    pub fn verify(&mut self, op: Op, size: usize, initiator_acts: bool) -> Result<()> {
        self.check_size(size)?;
        self.reset_events(size)?;
        let acting = (self.role == Role::Initiator) == initiator_acts;
        let salt = (size as u32).rotate_left(7) ^ u32::from(initiator_acts) ^ op as u32;
        let expected = pattern(size, salt);
        // The side whose bytes are read (put/send source, get target) writes the pattern;
        // the other clears the bytes the pattern must arrive in.
        let writes_pattern = acting != (op == Op::Get);
        if writes_pattern {
            self.src.write(0, &expected)?;
        } else {
            self.dst.fill(0, size, 0)?;
            if op == Op::Send {
                self.post_data_recv(size)?;
            }
        }
        self.boot.barrier().context("barrier before verification")?;
        let bound = self.timeout;
        let mut checks = false;
        if acting {
            match op {
                Op::Send => {
                    self.post_data_send(size)?;
                    self.wait_for("the verification send", bound, |ev| ev.data_sends >= 1)?;
                }
                _ => {
                    let id = self.post_rma(op, size, VERIFY_IMM, Signal::Yes)?;
                    self.wait_for("the verification RMA", bound, |ev| ev.rma.contains(&id))?;
                    self.ev.rma.clear();
                    checks = op == Op::Get;
                }
            }
        } else {
            match op {
                Op::Send => {
                    self.wait_for("the verification receive", bound, |ev| ev.data_recvs >= 1)?;
                    self.check_events()?;
                    checks = true;
                }
                Op::PutImm => {
                    self.wait_for("the verification immediate", bound, |ev| !ev.imms.is_empty())?;
                    let imm = self.ev.imms.pop_front().unwrap_or_default();
                    if imm != VERIFY_IMM {
                        bail!("put_imm delivered immediate {imm:#x}, expected {VERIFY_IMM:#x}");
                    }
                    checks = true;
                }
                Op::Put => checks = true,
                Op::Get => {}
            }
        }
        // Orders the data movement before the check (a put raises nothing at the target).
        self.boot.barrier().context("barrier after the verification transfer")?;
        let mut verdict = Vec::new();
        if checks {
            let got = self.dst.to_vec(0, size)?;
            if let Some(i) = got.iter().zip(&expected).position(|(a, b)| a != b) {
                verdict = format!("byte {i} of {size} is {:#04x}, expected {:#04x}", got[i], expected[i])
                    .into_bytes();
            }
        }
        let all = self.boot.allgather(&verdict).context("exchanging verification results")?;
        for (rank, v) in all.iter().enumerate() {
            if !v.is_empty() {
                bail!(
                    "data verification failed for {} of {size} bytes at rank {rank}: {}",
                    op.as_str(),
                    String::from_utf8_lossy(v)
                );
            }
        }
        // Leave the target bytes cleared: the latency loops look for changing markers.
        self.dst.fill(0, size, 0)?;
        Ok(())
    }
}
