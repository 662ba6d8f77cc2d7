//! The campaign's report: counts per outcome, per fault kind, per message size class and per
//! kill phase, as a table or JSON; each failed trial with the commands that re-run it.

use serde_json::{json, Value};

use super::classify::Outcome;
use super::hosts::HOST_FAULT_KINDS;
use super::phase::PHASES;
use super::plan::FAULT_KINDS;
use super::size::SIZE_CLASSES;
use super::TrialResult;

/// The size classes and the host campaigns' own.
const SIZE_NAMES: [&str; 5] = [SIZE_CLASSES[0], SIZE_CLASSES[1], SIZE_CLASSES[2], SIZE_CLASSES[3], "natural"];

/// Fault kinds, in [`FAULT_KINDS`] then [`HOST_FAULT_KINDS`] order.
fn kinds() -> Vec<&'static str> {
    FAULT_KINDS.iter().chain(&HOST_FAULT_KINDS).copied().collect()
}

/// One group's share of a campaign (a fault kind, a size class, a phase): its trials and
/// their outcomes.
struct Counts {
    name: &'static str,
    trials: usize,
    survived: usize,
    unrecoverable: usize,
    wrong: usize,
    hangs: usize,
    other: usize,
    fired: usize,
}

impl Counts {
    /// Per name of `names` (in that order) that `name_of` gives some trial; the others are
    /// left out.
    fn by(
        results: &[TrialResult],
        names: &[&'static str],
        name_of: impl Fn(&TrialResult) -> &'static str,
    ) -> Vec<Counts> {
        names
            .iter()
            .map(|&name| {
                let mine: Vec<&TrialResult> = results.iter().filter(|r| name_of(r) == name).collect();
                let with = |o: Outcome| mine.iter().filter(|r| r.outcome == o).count();
                Counts {
                    name,
                    trials: mine.len(),
                    survived: with(Outcome::Survived),
                    unrecoverable: with(Outcome::ReportedUnrecoverable),
                    wrong: with(Outcome::WrongAnswer),
                    hangs: with(Outcome::Hang),
                    other: with(Outcome::OtherFailure),
                    fired: mine.iter().filter(|r| r.fired).count(),
                }
            })
            .filter(|k| k.trials > 0)
            .collect()
    }

    /// Wrong answers, hangs and other failures.
    fn failed(&self) -> usize {
        self.wrong + self.hangs + self.other
    }

    fn json(&self, key: &str) -> Value {
        json!({
            key: self.name,
            "trials": self.trials,
            "survived": self.survived,
            "reported_unrecoverable": self.unrecoverable,
            "wrong_answers": self.wrong,
            "hangs": self.hangs,
            "other_failures": self.other,
            "failed": self.failed(),
            "fired": self.fired,
        })
    }

    fn print(&self, what: &str, width: usize) {
        println!(
            "  {what} {:<width$} {:>4} trials, {:>4} survived, {:>4} unrecoverable, {:>3} wrong, {:>3} hang, {:>3} other ({} fired)",
            self.name, self.trials, self.survived, self.unrecoverable, self.wrong, self.hangs, self.other, self.fired
        );
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// A campaign's counts.
pub(super) struct Summary {
    wall_s: f64,
    survived: usize,
    unrecoverable: usize,
    pub(super) wrong: usize,
    pub(super) hangs: usize,
    other: usize,
    /// Wrong answers, hangs and other failures.
    pub(super) failed: usize,
    fired: usize,
    /// Survivor recovery times, sorted.
    recovery_ms: Vec<f64>,
    by_kind: Vec<Counts>,
    by_size: Vec<Counts>,
    by_phase: Vec<Counts>,
}

impl Summary {
    pub(super) fn of(results: &[TrialResult], wall_s: f64) -> Summary {
        let count = |o: Outcome| results.iter().filter(|r| r.outcome == o).count();
        let mut recovery_ms: Vec<f64> = results.iter().filter_map(|r| r.recovery_ms).collect();
        recovery_ms.sort_by(f64::total_cmp);
        Summary {
            wall_s,
            survived: count(Outcome::Survived),
            unrecoverable: count(Outcome::ReportedUnrecoverable),
            wrong: count(Outcome::WrongAnswer),
            hangs: count(Outcome::Hang),
            other: count(Outcome::OtherFailure),
            failed: results.iter().filter(|r| !r.passed()).count(),
            fired: results.iter().filter(|r| r.fired).count(),
            recovery_ms,
            by_kind: Counts::by(results, &kinds(), |r| r.plan.fault.kind()),
            by_size: Counts::by(results, &SIZE_NAMES, |r| r.size.class.name()),
            by_phase: Counts::by(results, &PHASES, |r| r.phase.name()),
        }
    }

    /// (min, median, p90, max) of the recovery times.
    fn recovery_spread(&self) -> (f64, f64, f64, f64) {
        let rec = &self.recovery_ms;
        (
            rec.first().copied().unwrap_or(0.0),
            percentile(rec, 0.5),
            percentile(rec, 0.9),
            rec.last().copied().unwrap_or(0.0),
        )
    }

    /// The `--json` report.
    pub(super) fn json(&self, seed: u64, rerun: &dyn Fn(u64) -> String, results: &[TrialResult]) -> Value {
        let (min, median, p90, max) = self.recovery_spread();
        json!({
            "seed": seed,
            "trials": results.len(),
            "survived": self.survived,
            "reported_unrecoverable": self.unrecoverable,
            "wrong_answers": self.wrong,
            "hangs": self.hangs,
            "other_failures": self.other,
            "faults_fired": self.fired,
            "wall_s": self.wall_s,
            "recovery_ms": { "count": self.recovery_ms.len(), "min": min, "median": median, "p90": p90, "max": max },
            "by_fault": self.by_kind.iter().map(|k| k.json("fault")).collect::<Vec<_>>(),
            "by_size_class": self.by_size.iter().map(|k| k.json("size_class")).collect::<Vec<_>>(),
            "by_phase": self.by_phase.iter().map(|k| k.json("phase")).collect::<Vec<_>>(),
            "failures": results.iter().filter(|r| !r.passed()).map(|r| json!({
                "trial": r.plan.trial,
                "outcome": r.outcome.name(),
                "app": r.plan.app,
                "protocol": r.plan.protocol,
                "fault": r.plan.fault.describe(),
                "size_class": r.size.class.name(),
                "msg_bytes": r.size.bytes,
                "max_message": r.size.max_message,
                "phase": r.phase.name(),
                "why": r.why,
                "rerun": rerun(r.plan.trial),
                "job": r.job,
            })).collect::<Vec<_>>(),
        })
    }

    /// The human report.
    pub(super) fn print(&self, seed: u64, rerun: &dyn Fn(u64) -> String, results: &[TrialResult]) {
        println!("reverb chaos report (seed {seed}, {:.0} s)", self.wall_s);
        println!("  trials                           {}", results.len());
        println!("  survived                         {}", self.survived);
        println!("  correctly-reported-unrecoverable {}", self.unrecoverable);
        println!("  wrong answers                    {}", self.wrong);
        println!("  hangs                            {}", self.hangs);
        println!("  other failures                   {}", self.other);
        println!("  faults that fired                {}", self.fired);
        let (min, median, p90, max) = self.recovery_spread();
        println!(
            "  recovery time (ms, {} recoveries) min {min:.0} / median {median:.0} / p90 {p90:.0} / max {max:.0}",
            self.recovery_ms.len(),
        );
        let width = [&self.by_kind, &self.by_size, &self.by_phase]
            .iter()
            .flat_map(|g| g.iter().map(|k| k.name.len()))
            .max()
            .unwrap_or(0);
        for (what, group) in [("fault", &self.by_kind), ("size ", &self.by_size), ("phase", &self.by_phase)] {
            for k in group.iter() {
                k.print(what, width);
            }
        }
        for r in results.iter().filter(|r| !r.passed()) {
            println!(
                "  {} trial {}: {} {} {} [{}, {}]: {}\n    re-run: {}\n    job: {}",
                r.outcome.name(),
                r.plan.trial,
                r.plan.app,
                r.plan.protocol,
                r.plan.fault.describe(),
                r.size.describe(),
                r.phase.name(),
                r.why,
                rerun(r.plan.trial),
                r.job
            );
        }
    }
}
