//! A copy's death under partial redundancy (`spheres`): while another copy of its virtual
//! rank lives it is masked, not recovered. This rank forgets it (no more sends to it, its
//! sphere's next copy serves named receives and leads wildcard ones) and nothing rolls back;
//! the launcher retires its slot at the rendezvous, after which collectives go on without it.
//! The death of a sphere's last copy goes to the recovery as any failure.

use std::time::{Duration, Instant};

use reverb_logger::LogError;
use reverb_transport::{Bootstrap, Rank};

use super::error::{Result, RuntimeError};
use super::spheres::Loss;
use super::Runtime;

/// How often a collective cut short by a masked copy's death is tried again while the
/// launcher retires its slot.
const RETIRE_POLL: Duration = Duration::from_millis(10);

impl Runtime {
    /// Whether `p`, found dead, is a masked copy (recorded the first time): a copy with a
    /// live mate that the launcher retired. A copy killed with its node for a respawn (its
    /// node-mate's sphere was lost) is recovered as any failure instead.
    pub(super) fn masked_copy(&mut self, p: Rank) -> bool {
        let Some(spheres) = self.spheres.as_ref() else { return false };
        if spheres.is_masked(p) {
            return true;
        }
        if !spheres.maskable(p) || !self.retired_at_rendezvous(p) {
            return false;
        }
        let Some(spheres) = self.spheres.as_mut() else { return false };
        match spheres.mark_dead(p) {
            Loss::Masked => {
                tracing::info!(
                    "reverb: rank {}: copy {p} of virtual rank {} died: masked by its sphere",
                    self.rank,
                    spheres.virtual_of(p)
                );
                self.report.masked_copies.push(p);
                let v = spheres.virtual_of(p);
                if let Some(endpoint) = self.endpoint.as_mut() {
                    endpoint.retire(&[p]);
                }
                self.set_stand_ins(v);
                if self.spheres.as_ref().is_some_and(|s| s.is_leader() && s.last_decision.is_some()) {
                    // Its mates may wait for the dead leader's last decision.
                    if let Err(e) = self.take_the_lead() {
                        tracing::warn!(
                            "reverb: rank {}: telling its mates the last decision: {e}",
                            self.rank
                        );
                    }
                }
                true
            }
            Loss::SphereLost(_) => false,
        }
    }

    /// A replay under partial redundancy that diverges once copies were retired: it needed
    /// messages a retired copy sent after this rank's checkpoint with no live copy to stand
    /// in (a master's dead leader's decisions, when its last copy's node is lost), and they
    /// died with that copy's sender log (chaos seed 2041, trial 190). Said as unrecoverable.
    pub(super) fn replay_loss(&mut self, e: RuntimeError) -> RuntimeError {
        if !matches!(e, RuntimeError::Log(LogError::ReplayDiverged { .. })) {
            return e;
        }
        let retired: Vec<Rank> = match self.boot.lookup() {
            Ok(table) => table.iter().filter(|a| a.retired).map(|a| a.rank).collect(),
            Err(_) => return e,
        };
        if retired.is_empty() {
            return e;
        }
        RuntimeError::Unrecoverable(format!(
            "the replay needs messages that retired copies {retired:?} sent after this rank's \
             checkpoint, lost with their sender logs ({e})"
        ))
    }

    /// Every masked copy of virtual rank `v` gets its sphere's other copies as the log's
    /// stand-ins (live ones first): a replay that names a masked copy's message (delivered
    /// after this rank's checkpoint) takes theirs, the same message under the same number.
    fn set_stand_ins(&mut self, v: u32) {
        let Some(spheres) = self.spheres.as_ref() else { return };
        let me = self.rank;
        let (masked, live): (Vec<Rank>, Vec<Rank>) =
            spheres.copies(v).iter().copied().filter(|&q| q != me).partition(|&q| spheres.is_masked(q));
        if let Some(endpoint) = self.endpoint.as_mut() {
            for &q in &masked {
                let others = live.iter().chain(&masked).copied().filter(|&o| o != q).collect();
                endpoint.stand_in(q, others);
            }
        }
    }

    /// Whether the rendezvous shows `p` retired, waiting (bounded by `detect_grace`) while
    /// its slot is lost but not yet retired (the launcher decides within a reaping pass); false
    /// once it is back at a newer incarnation, or still there.
    fn retired_at_rendezvous(&mut self, p: Rank) -> bool {
        let start = Instant::now();
        let known = self.incarnation_of.get(p as usize).copied().unwrap_or(0);
        loop {
            let entry = self.boot.lookup().ok().and_then(|t| t.into_iter().find(|a| a.rank == p));
            match entry {
                Some(a) if a.retired => return true,
                Some(a) if a.address.is_some() && a.incarnation > known => return false,
                _ if start.elapsed() > self.config.detect_grace => return false,
                _ => std::thread::sleep(RETIRE_POLL),
            }
        }
    }

    /// Whether an error naming dead peer `p` is dealt with: a masked copy, a stale report,
    /// or a failure found and recovered.
    pub(super) fn death_handled(&mut self, p: Rank) -> Result<bool> {
        Ok(self.masked_copy(p) || self.stale_failure(p) || self.failure_explains()?)
    }

    /// After a failed step of a collective (a checkpoint, the shutdown): whether to try it
    /// again, because a masked copy's death cut it short (paced until the launcher retires
    /// the copy, since `masked_since`) or a failure was found and recovered.
    pub(super) fn retry_after(
        &mut self,
        e: &RuntimeError,
        masked_since: &mut Option<Instant>,
    ) -> Result<bool> {
        if let Some(p) = e.dead_peer() {
            if self.masked_copy(p) {
                self.await_retirement(p, *masked_since.get_or_insert_with(Instant::now))?;
                return Ok(true);
            }
        }
        self.failure_explains()
    }

    /// Before a checkpoint under redundancy: every rank learns the copies any rank masked (an
    /// all-gather, framed as the log GC's), so all retire the same ones from it. The transport
    /// progresses meanwhile: a copy that lags its mates is still sending them duplicates, which
    /// must land (in this rank's queues) for it to reach the checkpoint at all.
    pub(super) fn agree_retired(&mut self) -> Result<()> {
        if self.spheres.is_none() {
            return Ok(());
        }
        self.mask_lost_copies()?;
        let mine: Vec<u8> = self.report.masked_copies.iter().flat_map(|r| r.to_le_bytes()).collect();
        let endpoint =
            self.endpoint.as_mut().ok_or_else(|| RuntimeError::InvalidArgument("finalized".into()))?;
        let known = &self.incarnation_of;
        let parts = endpoint
            .progressing(&mut self.boot, |boot| super::initboot::GcRound { boot, known }.allgather(&mine))
            .map_err(RuntimeError::from)?;
        for part in parts {
            for r in part.chunks_exact(4).filter_map(|b| b.try_into().ok()).map(Rank::from_le_bytes) {
                self.masked_copy(r);
            }
        }
        if let Some(ckpt) = self.ckpt.as_mut() {
            ckpt.retire(&self.report.masked_copies);
        }
        Ok(())
    }

    /// Before a collective under redundancy: masks the copies the rendezvous shows lost. A
    /// leader that died having told only some mates its last decision leaves one waiting for
    /// it, which cannot join the collective until the next leader repeats it (on masking).
    pub(super) fn mask_lost_copies(&mut self) -> Result<()> {
        if self.spheres.is_none() {
            return Ok(());
        }
        let lost: Vec<Rank> = self
            .boot
            .lookup()?
            .into_iter()
            .filter(|a| a.rank != self.rank && (a.retired || (a.lost && a.address.is_none())))
            .map(|a| a.rank)
            .collect();
        for r in lost {
            self.masked_copy(r);
        }
        Ok(())
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
