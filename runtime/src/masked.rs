//! A copy's death under partial redundancy (`spheres`): while another copy of its virtual
//! rank lives it is masked, not recovered. This rank forgets it (no more sends to it, its
//! sphere's next copy serves named receives and leads wildcard ones) and nothing rolls back;
//! the launcher retires its slot at the rendezvous, after which collectives go on without it.
//! The death of a sphere's last copy goes to the recovery as any failure.

use std::time::{Duration, Instant};

use reverb_transport::Rank;

use super::error::{Result, RuntimeError};
use super::spheres::Loss;
use super::Runtime;

/// How often a collective cut short by a masked copy's death is tried again while the
/// launcher retires its slot.
const RETIRE_POLL: Duration = Duration::from_millis(10);

impl Runtime {
    /// Whether `p`, found dead, is a masked copy (recorded the first time).
    pub(super) fn masked_copy(&mut self, p: Rank) -> bool {
        let Some(spheres) = self.spheres.as_mut() else { return false };
        if spheres.is_masked(p) {
            return true;
        }
        match spheres.mark_dead(p) {
            Loss::Masked => {
                tracing::info!(
                    "reverb: rank {}: copy {p} of virtual rank {} died: masked by its sphere",
                    self.rank,
                    spheres.virtual_of(p)
                );
                self.report.masked_copies.push(p);
                true
            }
            Loss::SphereLost(_) => false,
        }
    }

    /// Whether an error naming dead peer `p` is dealt with: a masked copy, a stale report,
    /// or a failure found and recovered.
    pub(super) fn death_handled(&mut self, p: Rank) -> Result<bool> {
        Ok(self.masked_copy(p) || self.stale_failure(p) || self.failure_explains()?)
    }

    /// Paces a collective that a masked copy's death cut short (the rendezvous aborts rounds
    /// until the launcher retires the slot); `since` is when the first such abort came.
    pub(super) fn await_retirement(&self, p: Rank, since: Instant) -> Result<()> {
        let bound = self.config.rejoin_timeout;
        if since.elapsed() > bound {
            return Err(RuntimeError::Unrecoverable(format!(
                "the rendezvous still waits for masked copy {p} after {bound:?}: a redundant job \
                 needs a launcher that retires copies (reverb run --redundancy)"
            )));
        }
        std::thread::sleep(RETIRE_POLL);
        Ok(())
    }
}
