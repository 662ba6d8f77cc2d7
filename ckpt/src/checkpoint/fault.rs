//! Fault injection for tests: stage hooks and damaged copies (the `fault-injection` feature).

#[cfg(feature = "fault-injection")]
use reverb_transport::{Rank, Region};

#[cfg(feature = "fault-injection")]
use super::FaultHook;
use super::{Checkpointer, Stage};
#[cfg(feature = "fault-injection")]
use crate::error::CkptError;
use crate::image::Epoch;
#[cfg(feature = "fault-injection")]
use crate::image::{ImageHeader, HEADER_LEN};
#[cfg(feature = "fault-injection")]
use crate::mem;

impl Checkpointer {
    /// Runs `hook` at each [`Stage`] of later checkpoints (fault-injection tests).
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn set_fault_hook(&mut self, hook: Option<FaultHook>) {
        self.fault_hook = hook;
    }

    /// A fault-injection point; nothing without the `fault-injection` feature.
    #[cfg(feature = "fault-injection")]
    pub(super) fn stage(&self, epoch: Epoch, stage: Stage) {
        if let Some(hook) = self.fault_hook {
            hook(epoch, stage);
        }
    }

    #[cfg(not(feature = "fault-injection"))]
    pub(super) fn stage(&self, _epoch: Epoch, _stage: Stage) {}

    /// Flips bytes in a copy this rank keeps for `client` (level 2), in the slot of `epoch`:
    /// XORs `len` bytes from `offset` of the image with 0x5a, or zeroes them from there to the
    /// slot end when `truncate`. For corruption tests.
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn damage_hosted_copy(
        &self,
        client: Rank,
        epoch: Epoch,
        offset: usize,
        len: usize,
        truncate: bool,
    ) -> Result<(), CkptError> {
        let index = self.clients.iter().position(|&c| c == client).ok_or_else(|| {
            CkptError::InvalidArgument(format!("rank {} keeps no copy of rank {client}", self.me))
        })?;
        let region = self.hosted.as_ref().ok_or(CkptError::InvalidArgument("no hosted copies".into()))?;
        let base = self.hosted_offset(index, 0) as usize;
        damage(region, base, self.config.slot_len, epoch, offset, len, truncate)
    }

    /// Same for the parity block this rank keeps.
    #[cfg(feature = "fault-injection")]
    #[doc(hidden)]
    pub fn damage_parity_block(&self, epoch: Epoch, offset: usize, len: usize) -> Result<(), CkptError> {
        let region = self.parity.as_ref().ok_or(CkptError::InvalidArgument("no parity block here".into()))?;
        damage(region, 0, self.parity_slot_len, epoch, offset, len, false)
    }
}

#[cfg(feature = "fault-injection")]
fn damage(
    region: &Region,
    base: usize,
    slot_len: usize,
    epoch: Epoch,
    offset: usize,
    len: usize,
    truncate: bool,
) -> Result<(), CkptError> {
    for slot in 0..2 {
        let at = base + slot * slot_len;
        let header = region.to_vec(at, HEADER_LEN).map_err(|e| CkptError::transport("reading a slot", e))?;
        if ImageHeader::parse(&header, "slot").is_ok_and(|h| h.epoch == epoch) {
            let len = if truncate {
                slot_len.saturating_sub(offset)
            } else {
                len.min(slot_len.saturating_sub(offset))
            };
            let bytes = mem::bytes_mut(region, at + offset, len)?;
            if truncate {
                bytes.fill(0);
            } else {
                bytes.iter_mut().for_each(|b| *b ^= 0x5a);
            }
            return Ok(());
        }
    }
    Err(CkptError::InvalidArgument(format!("no slot holds epoch {epoch}")))
}
