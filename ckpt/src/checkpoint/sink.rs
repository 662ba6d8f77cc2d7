//! The image sink of levels 1-2: writes each chunk into the local slot and puts it to the
//! buddy's slot while it is still in cache.

use std::time::{Duration, Instant};

use reverb_transport::{Owner, Provider, Region, RemoteRegion, Rma, Signal};

use super::transfer::WINDOW;
use crate::error::CkptError;
use crate::image::ImageSink;
use crate::mem;
use crate::team;

/// Writes an image into a local slot and ships each finished chunk to the buddy's slot.
pub(super) struct SlotSink<'a> {
    pub(super) local: &'a Region,
    pub(super) base: usize,
    pub(super) target: Option<(RemoteRegion, u64)>,
    pub(super) provider: &'a mut dyn Provider,
    /// The checkpointer's provider owner: its puts complete into its own queue.
    pub(super) owner: Owner,
    pub(super) pending: std::collections::VecDeque<reverb_transport::OpId>,
    pub(super) piece: usize,
    pub(super) timeout: Duration,
    /// Time spent posting and waiting for puts.
    pub(super) in_transport: Duration,
}

impl SlotSink<'_> {
    fn wait_oldest(&mut self) -> Result<(), CkptError> {
        if let (Some(op), Some((remote, _))) = (self.pending.pop_front(), self.target) {
            team::wait_op_from(self.provider, op, remote.owner, self.timeout, "putting a buddy copy")?;
        }
        Ok(())
    }

    pub(super) fn drain(&mut self) -> Result<(), CkptError> {
        let start = Instant::now();
        while !self.pending.is_empty() {
            self.wait_oldest()?;
        }
        self.in_transport += start.elapsed();
        Ok(())
    }
}

impl ImageSink for SlotSink<'_> {
    fn bytes_mut(&mut self, offset: usize, len: usize) -> Result<&mut [u8], CkptError> {
        mem::bytes_mut(self.local, self.base + offset, len)
    }

    fn chunk_done(&mut self, offset: usize, len: usize) -> Result<(), CkptError> {
        let Some((remote, base)) = self.target else { return Ok(()) };
        let start = Instant::now();
        let mut done = 0;
        while done < len {
            if self.pending.len() >= WINDOW {
                self.wait_oldest()?;
            }
            let n = self.piece.min(len - done);
            let rma = Rma {
                local: self.local,
                local_offset: self.base + offset + done,
                remote: &remote,
                remote_offset: base + (offset + done) as u64,
                len: n,
            };
            let op = self
                .provider
                .put_for(self.owner, rma, Signal::Yes)
                .map_err(|e| CkptError::transport("putting a buddy copy", e))?;
            self.pending.push_back(op);
            done += n;
        }
        self.in_transport += start.elapsed();
        Ok(())
    }
}
