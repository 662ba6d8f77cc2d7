//! Where in an app's run a trial's fault strikes (its kill phase), and the send counts that
//! put a kill there: the app runs `iters` iterations of a rank's sends per iteration (its
//! failure-free sends over `iters`) and checkpoints after every `every`-th iteration.

use super::plan::Rng;

/// Kill phases, in report order.
pub const PHASES: [&str; 16] = [
    "none",
    "init",
    "early",
    "before-checkpoint",
    "ckpt-entered",
    "ckpt-local-written",
    "ckpt-buddy-body-landed",
    "ckpt-buddy-flipped",
    "ckpt-voting",
    "ckpt-committed",
    "log-gc",
    "log-gc-trim",
    "after-commit",
    "mid-interval",
    "recovery",
    "timed",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// No fault.
    None,
    /// Inside `Runtime::init`'s collectives.
    Init,
    /// The first two iterations' sends.
    Early,
    /// The last iteration before a checkpoint.
    BeforeCheckpoint,
    /// Inside a checkpoint, at a stage of `REVERB_FAULT_CKPT`.
    Checkpoint(&'static str),
    /// At the log GC after a checkpoint committed, before its collective.
    LogGc,
    /// At the log GC, after its collective, before the logs are trimmed.
    LogGcTrim,
    /// The first iteration after a checkpoint committed.
    AfterCommit,
    /// Between the first and the last iteration of a checkpoint interval.
    MidInterval,
    /// A restarted rank killed again during its replay.
    Recovery,
    /// Across hosts: a wall-clock point of the run.
    Timed,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::None => "none",
            Phase::Init => "init",
            Phase::Early => "early",
            Phase::BeforeCheckpoint => "before-checkpoint",
            Phase::Checkpoint("entered") => "ckpt-entered",
            Phase::Checkpoint("local-written") => "ckpt-local-written",
            Phase::Checkpoint("buddy-body-landed") => "ckpt-buddy-body-landed",
            Phase::Checkpoint("voting") => "ckpt-voting",
            Phase::Checkpoint("committed") => "ckpt-committed",
            Phase::Checkpoint("buddy-flipped") => "ckpt-buddy-flipped",
            // Stages come from the plan's list, each named above (`names_are_listed`).
            Phase::Checkpoint(_) => "ckpt-unknown",
            Phase::LogGc => "log-gc",
            Phase::LogGcTrim => "log-gc-trim",
            Phase::AfterCommit => "after-commit",
            Phase::MidInterval => "mid-interval",
            Phase::Recovery => "recovery",
            Phase::Timed => "timed",
        }
    }

    /// A phase of a kill at a send count, weighted to the checkpoint boundaries and the
    /// first iterations: early 3, before a checkpoint 4, after a commit 3, mid-interval 1.
    pub(super) fn draw_send_phase(rng: &mut Rng) -> Phase {
        match rng.below(11) {
            0..=2 => Phase::Early,
            3..=6 => Phase::BeforeCheckpoint,
            7..=9 => Phase::AfterCommit,
            _ => Phase::MidInterval,
        }
    }

    /// As `draw_send_phase`, past the first interval's start (for a kill after an early one).
    pub(super) fn draw_late_send_phase(rng: &mut Rng) -> Phase {
        match rng.below(8) {
            0..=3 => Phase::BeforeCheckpoint,
            4..=6 => Phase::AfterCommit,
            _ => Phase::MidInterval,
        }
    }
}

/// An app's iterations and checkpoint interval (`--iters`, `--ckpt-every`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Timeline {
    pub iters: u64,
    pub every: u64,
}

impl Timeline {
    /// Checkpoints of a run: after every `every`-th iteration but the last.
    pub(super) fn checkpoints(&self) -> u64 {
        self.iters.saturating_sub(1) / self.every.max(1)
    }

    /// A send count in `phase` of a rank with `total` failure-free sends, within 1..=total:
    /// a checkpoint interval is drawn, then a count in its part. A send phase's count puts
    /// the kill right after that send; phases that are not send phases draw over the run.
    pub(super) fn sends_in(&self, phase: Phase, total: u64, rng: &mut Rng) -> u64 {
        let total = total.max(1);
        let per_iter = (total / self.iters.max(1)).max(1);
        let k = rng.between(1, self.checkpoints().max(1));
        // The sends up to the end of the iteration after which checkpoint k is taken.
        let end = k * self.every * per_iter;
        let (lo, hi) = match phase {
            Phase::Early => (1, 2 * per_iter),
            Phase::BeforeCheckpoint => (end - per_iter + 1, end),
            Phase::AfterCommit => (end + 1, end + per_iter),
            Phase::MidInterval => {
                let start = (k - 1) * self.every * per_iter;
                (start + per_iter + 1, (end - per_iter).max(start + per_iter + 1))
            }
            _ => (1, total),
        };
        rng.between(lo.min(total), hi.min(total))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_phases_land_where_they_say() {
        // The stencil's middle rank: 60 iterations of two halos, a checkpoint every 10 (5).
        let tl = Timeline { iters: 60, every: 10 };
        assert_eq!(tl.checkpoints(), 5);
        let total = 121;
        for t in 0..200 {
            let mut rng = Rng::new(11, t);
            let s = tl.sends_in(Phase::BeforeCheckpoint, total, &mut rng);
            assert!([19, 20, 39, 40, 59, 60, 79, 80, 99, 100].contains(&s), "before: {s}");
            let s = tl.sends_in(Phase::AfterCommit, total, &mut rng);
            assert!([21, 22, 41, 42, 61, 62, 81, 82, 101, 102].contains(&s), "after: {s}");
            let s = tl.sends_in(Phase::Early, total, &mut rng);
            assert!((1..=4).contains(&s), "early: {s}");
            let s = tl.sends_in(Phase::MidInterval, total, &mut rng);
            let in_interval = s % 20;
            assert!((3..=18).contains(&in_interval), "mid: {s}");
        }
    }

    #[test]
    fn counts_stay_within_the_run() {
        let tl = Timeline { iters: 12, every: 3 };
        for t in 0..300 {
            let mut rng = Rng::new(5, t);
            for phase in [Phase::Early, Phase::BeforeCheckpoint, Phase::AfterCommit, Phase::MidInterval] {
                for total in [1, 5, 13, 400] {
                    let s = tl.sends_in(phase, total, &mut rng);
                    assert!((1..=total).contains(&s), "{phase:?} of {total}: {s}");
                }
            }
        }
    }

    #[test]
    fn names_are_listed() {
        for stage in crate::chaos::plan::CKPT_STAGES {
            let p = Phase::Checkpoint(stage);
            assert!(PHASES.contains(&p.name()), "{p:?}");
        }
        assert!(PHASES.contains(&Phase::LogGcTrim.name()));
    }
}
