//! The campaign's report: counts per outcome and per fault kind, as a table or JSON.

use serde_json::{json, Value};

use super::classify::Outcome;
use super::hosts::HOST_FAULT_KINDS;
use super::plan::FAULT_KINDS;
use super::TrialResult;

/// One fault kind's share of a campaign: its trials and their outcomes.
struct KindCounts {
    kind: &'static str,
    trials: usize,
    survived: usize,
    unrecoverable: usize,
    /// Wrong answers, hangs and other failures.
    failed: usize,
    fired: usize,
}

impl KindCounts {
    /// Per kind, in [`FAULT_KINDS`] then [`HOST_FAULT_KINDS`] order; kinds without trials are left out.
    fn of(results: &[TrialResult]) -> Vec<KindCounts> {
        FAULT_KINDS
            .iter()
            .chain(&HOST_FAULT_KINDS)
            .map(|&kind| {
                let mine: Vec<&TrialResult> =
                    results.iter().filter(|r| r.plan.fault.kind() == kind).collect();
                let with = |o: Outcome| mine.iter().filter(|r| r.outcome == o).count();
                KindCounts {
                    kind,
                    trials: mine.len(),
                    survived: with(Outcome::Survived),
                    unrecoverable: with(Outcome::ReportedUnrecoverable),
                    failed: mine.len() - with(Outcome::Survived) - with(Outcome::ReportedUnrecoverable),
                    fired: mine.iter().filter(|r| r.fired).count(),
                }
            })
            .filter(|k| k.trials > 0)
            .collect()
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
    by_kind: Vec<KindCounts>,
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
            by_kind: KindCounts::of(results),
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
    pub(super) fn json(&self, seed: u64, rerun: &str, results: &[TrialResult]) -> Value {
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
            "by_fault": self.by_kind.iter().map(|k| json!({
                "fault": k.kind,
                "trials": k.trials,
                "survived": k.survived,
                "reported_unrecoverable": k.unrecoverable,
                "failed": k.failed,
                "fired": k.fired,
            })).collect::<Vec<_>>(),
            "failures": results.iter().filter(|r| !r.passed()).map(|r| json!({
                "trial": r.plan.trial,
                "outcome": r.outcome.name(),
                "app": r.plan.app,
                "protocol": r.plan.protocol,
                "fault": r.plan.fault.describe(),
                "why": r.why,
                "rerun": format!("reverb chaos --seed {seed} --trial {}{rerun}", r.plan.trial),
            })).collect::<Vec<_>>(),
        })
    }

    /// The human report.
    pub(super) fn print(&self, seed: u64, rerun: &str, results: &[TrialResult]) {
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
        // The host kinds have longer names.
        let width = self.by_kind.iter().map(|k| k.kind.len()).max().unwrap_or(0).max(11);
        for k in &self.by_kind {
            println!(
                "  fault {:<width$} {:>4} trials, {:>4} survived, {:>4} reported unrecoverable, {:>4} failed ({} fired)",
                k.kind, k.trials, k.survived, k.unrecoverable, k.failed, k.fired
            );
        }
        for r in results.iter().filter(|r| !r.passed()) {
            println!(
                "  {} trial {}: {} {} {}: {}  (re-run: reverb chaos --seed {seed} --trial {}{rerun})",
                r.outcome.name(),
                r.plan.trial,
                r.plan.app,
                r.plan.protocol,
                r.plan.fault.describe(),
                r.why,
                r.plan.trial
            );
        }
    }
}
