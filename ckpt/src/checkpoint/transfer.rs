//! Windowed one-sided transfers of checkpoint copies, every piece signaled and waited for.

use std::time::Duration;

use reverb_transport::{Owner, Provider, Region, RemoteRegion, Rma, Signal};

use super::Checkpointer;
use crate::error::CkptError;
use crate::team;

/// Window of outstanding puts/gets in one transfer.
pub(super) const WINDOW: usize = 16;

impl Checkpointer {
    /// Moves `len` bytes in windowed pieces, every piece signaled, and waits for all of them.
    // The arguments are one RMA (`Rma`'s five fields, one to one) and its direction.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn transfer(
        &self,
        provider: &mut dyn Provider,
        dir: Dir,
        local: &Region,
        local_offset: usize,
        remote: &RemoteRegion,
        remote_offset: u64,
        len: usize,
    ) -> Result<(), CkptError> {
        transfer(
            (provider, self.owner),
            dir,
            local,
            local_offset,
            remote,
            remote_offset,
            len,
            self.config.transfer_len,
            self.config.timeout,
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Dir {
    Put,
    Get,
}

// One RMA (`Rma`'s five fields), its direction and its pacing (piece size, bound).
#[allow(clippy::too_many_arguments)]
fn transfer(
    (provider, owner): (&mut dyn Provider, Owner),
    dir: Dir,
    local: &Region,
    local_offset: usize,
    remote: &RemoteRegion,
    remote_offset: u64,
    len: usize,
    piece: usize,
    timeout: Duration,
) -> Result<(), CkptError> {
    let during = match dir {
        Dir::Put => "putting a checkpoint copy",
        Dir::Get => "getting a checkpoint copy",
    };
    let mut pending = std::collections::VecDeque::new();
    let mut done = 0usize;
    while done < len || !pending.is_empty() {
        if done < len && pending.len() < WINDOW {
            let n = piece.min(len - done);
            let rma = Rma {
                local,
                local_offset: local_offset + done,
                remote,
                remote_offset: remote_offset + done as u64,
                len: n,
            };
            let op = match dir {
                Dir::Put => provider.put_for(owner, rma, Signal::Yes),
                Dir::Get => provider.get_for(owner, rma, Signal::Yes),
            }
            .map_err(|e| CkptError::transport(during, e))?;
            pending.push_back(op);
            done += n;
            continue;
        }
        if let Some(op) = pending.pop_front() {
            team::wait_op_from(provider, op, remote.owner, timeout, during)?;
        }
    }
    Ok(())
}
