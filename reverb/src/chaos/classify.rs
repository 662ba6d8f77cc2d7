//! A trial's outcome from what its job left behind.

use super::plan::{Baseline, Fault, Plan};
use crate::job::JobOutcome;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Survived,
    ReportedUnrecoverable,
    WrongAnswer,
    Hang,
    OtherFailure,
}

impl Outcome {
    pub(super) fn name(self) -> &'static str {
        match self {
            Outcome::Survived => "survived",
            Outcome::ReportedUnrecoverable => "reported-unrecoverable",
            Outcome::WrongAnswer => "WRONG-ANSWER",
            Outcome::Hang => "HANG",
            Outcome::OtherFailure => "OTHER-FAILURE",
        }
    }
}

/// Whether the design does not cover this trial's failure (the job must then stop with a
/// clear report, or may survive if the runtime has learnt it since).
pub(super) fn expected_unrecoverable(plan: &Plan) -> Option<&'static str> {
    match (plan.protocol, &plan.fault) {
        (_, Fault::None) => None,
        ("none", _) => Some("logging off"),
        (_, Fault::TwoNodes { .. }) => Some("two nodes at once"),
        (_, fault) => super::hosts::expected_unrecoverable(fault),
    }
}

/// Cases the design does not cover that only the job's log tells: under a pessimistic
/// protocol, a rank whose log buddy was a copy masked earlier has logged nothing since; a
/// rank's last copy restarted whose replay needs what a retired mate sent after its checkpoint.
fn unrecoverable_by_log(fault: &Fault, log: &str) -> Option<&'static str> {
    if !matches!(fault, Fault::ReplicaThenRank { .. }) {
        return None;
    }
    if log.contains("message logs stopped with a retired buddy") {
        return Some("log buddy retired");
    }
    log.contains("lost with their sender logs").then_some("a retired mate's messages needed by the replay")
}

/// A clear report: the launcher said once what could not be recovered (from its ranks'
/// reports, which it does not print), or a rank or the runtime said it.
fn clear_report(log: &str) -> bool {
    log.contains("reverb run: unrecoverable:")
        || log.contains("unrecoverable failure:")
        || log.contains("unsupported:")
}

/// Classifies a finished trial; `injected`: the campaign itself took a host down or cut it
/// (a fault that fired even when the job ended before saying so).
pub(super) fn classify(
    plan: &Plan,
    base: &Baseline,
    out: &JobOutcome,
    injected: bool,
) -> (Outcome, bool, String) {
    let log = out.log();
    let fired = injected
        || out.kill_ns.is_some()
        || log.contains("respawning node")
        || log.contains("killed by signal 9")
        || super::hosts::fired(&plan.fault, &log);
    let Some(status) = out.status else {
        return (
            Outcome::Hang,
            fired,
            format!("still running {:.0} s after the job's timeout", out.wall.as_secs_f64()),
        );
    };
    if status.code() == Some(124) && log.contains("reverb run: timeout after") {
        return (Outcome::Hang, fired, "the launcher's timeout killed the job".into());
    }
    if status.success() {
        return match &out.checksum {
            Some(c) if *c == base.checksum => (Outcome::Survived, fired, String::new()),
            Some(c) => (Outcome::WrongAnswer, fired, format!("checksum {c}, failure-free {}", base.checksum)),
            None => (Outcome::OtherFailure, fired, "exit 0 but no checksum written".into()),
        };
    }
    let why = log
        .lines()
        .find(|l| clear_report(l))
        // A rank's own error says why; the launcher's last line only how the job was stopped.
        .or_else(|| log.lines().find(|l| is_rank_error(l)))
        .or_else(|| log.lines().rev().find(|l| l.starts_with("reverb run:")))
        .unwrap_or("")
        .trim();
    // A lost-checkpoint report lists every level of every rank: the start says enough.
    let why: String = if why.chars().count() > 240 {
        format!("{}...", why.chars().take(240).collect::<String>())
    } else {
        why.to_string()
    };
    // What the log shows happened comes before what the plan meant to happen: a host lost
    // while the transports opened ends the job before a planned second loss.
    let case = super::hosts::unrecoverable_by_log(&plan.fault, &log)
        .or_else(|| expected_unrecoverable(plan))
        .or_else(|| unrecoverable_by_log(&plan.fault, &log));
    match case {
        Some(case) if fired && clear_report(&log) => {
            (Outcome::ReportedUnrecoverable, fired, format!("{case}: {why}"))
        }
        Some(case) => {
            (Outcome::OtherFailure, fired, format!("{case} without a clear report ({status}): {why}"))
        }
        None => (Outcome::OtherFailure, fired, format!("{status}: {why}")),
    }
}

/// A rank's error line as its launcher prefixes it: `[3] Error: ...`.
fn is_rank_error(line: &str) -> bool {
    line.strip_prefix('[')
        .and_then(|rest| rest.split_once("] "))
        .is_some_and(|(rank, text)| rank.parse::<u32>().is_ok() && text.starts_with("Error: "))
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;
    use std::time::Duration;

    use super::*;
    use crate::chaos::plan::tests::base;

    /// A finished job whose log says `log`, in a fresh directory.
    fn outcome(name: &str, status: Option<ExitStatus>, checksum: Option<&str>, log: &str) -> JobOutcome {
        let dir = std::env::temp_dir().join(format!("reverb-chaos-unit-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let log_path = dir.join("job.log");
        std::fs::write(&log_path, log).expect("log");
        JobOutcome {
            status,
            dir,
            log_path,
            checksum: checksum.map(str::to_string),
            reports: Vec::new(),
            kill_ns: None,
            wall: Duration::from_secs(1),
        }
    }

    #[test]
    fn outcomes_are_classified_strictly() {
        let p = |protocol, fault| Plan { trial: 0, app: "stencil", protocol, fault };
        let rank = Fault::Rank { rank: 3, sends: 5 };
        let killed = "reverb run: rank 3 was killed by signal 9 (SIGKILL); respawning node 1\n";
        let ok = Some(ExitStatus::from_raw(0));
        let failed = Some(ExitStatus::from_raw(1 << 8));
        let cases = [
            (p("causal", rank.clone()), outcome("ok", ok, Some("abc"), killed), Outcome::Survived),
            (p("causal", rank.clone()), outcome("wrong", ok, Some("abd"), killed), Outcome::WrongAnswer),
            (p("causal", rank.clone()), outcome("nosum", ok, None, killed), Outcome::OtherFailure),
            (p("causal", rank.clone()), outcome("watchdog", None, None, killed), Outcome::Hang),
            (
                p("causal", rank.clone()),
                outcome(
                    "timeout",
                    Some(ExitStatus::from_raw(124 << 8)),
                    None,
                    "reverb run: timeout after 9.0 s",
                ),
                Outcome::Hang,
            ),
            (
                p("none", rank.clone()),
                outcome("none", failed, None, &format!("{killed}[1] unrecoverable failure: no log\n")),
                Outcome::ReportedUnrecoverable,
            ),
            // Covered by the design: a clear report is still a bug.
            (
                p("causal", rank.clone()),
                outcome("causal", failed, None, &format!("{killed}[1] unrecoverable failure: lost\n")),
                Outcome::OtherFailure,
            ),
            // One node failing inside init is covered: it must survive.
            (
                p("causal", Fault::Init { rank: 2, step: "log-rings", late: Some(5) }),
                outcome("init", failed, None, &format!("{killed}[1] unrecoverable failure: init\n")),
                Outcome::OtherFailure,
            ),
            // The launcher's one line for the job (the ranks' own lines are taken by it).
            (
                p("none", rank.clone()),
                outcome(
                    "launcher",
                    failed,
                    None,
                    &format!("{killed}reverb run: unrecoverable failure: no log\n"),
                ),
                Outcome::ReportedUnrecoverable,
            ),
            (
                p("none", Fault::Init { rank: 2, step: "ckpt-slots", late: None }),
                outcome("init-none", failed, None, &format!("{killed}[1] unrecoverable failure: no log\n")),
                Outcome::ReportedUnrecoverable,
            ),
            // Not covered, but no clear report.
            (p("none", rank.clone()), outcome("unclear", failed, None, killed), Outcome::OtherFailure),
            // pessimistic-rb recovers now: a failure to recover is a bug, not an expected report.
            (
                p("pessimistic-rb", rank),
                outcome("rb", failed, None, &format!("{killed}[1] unsupported: rb\n")),
                Outcome::OtherFailure,
            ),
        ];
        for (plan, out, expected) in cases {
            assert_eq!(classify(&plan, &base(), &out, false).0, expected, "{}", out.dir.display());
            let _ = std::fs::remove_dir_all(&out.dir);
        }
    }

    #[test]
    fn a_rank_s_error_explains_a_failure_before_the_launcher_s_last_line() {
        let log = "[0] Error: logger: log ring full: 60352 bytes needed\n\
                   reverb run: rank 0 (node 0) exited with status 1\n\
                   reverb run: received SIGTERM; killed 2 rank(s)\n";
        let plan =
            Plan { trial: 0, app: "ring", protocol: "causal", fault: Fault::Rank { rank: 3, sends: 5 } };
        let out = outcome("why", Some(ExitStatus::from_raw(1 << 8)), None, log);
        let (got, _, why) = classify(&plan, &base(), &out, false);
        let _ = std::fs::remove_dir_all(&out.dir);
        assert_eq!(got, Outcome::OtherFailure);
        assert!(why.contains("log ring full"), "{why}");
        assert!(!is_rank_error("[x] Error: no rank") && !is_rank_error("reverb run: Error: x"));
    }

    #[test]
    fn a_host_lost_while_the_transports_open_is_reported_even_if_the_job_never_said_lost() {
        let fault = Fault::HostInRecovery {
            first: "cc".into(),
            at_ms: 325,
            second: "cd".into(),
            after_ms: 256,
            buddies: true,
        };
        let plan = Plan { trial: 14, app: "master-worker", protocol: "pessimistic-sb", fault };
        let log = "reverb boot server: rank 4 (10.79.0.12:35302) lost: connection closed without Bye\n\
                   reverb run: unrecoverable failure: rank 4 failed while the transport was opening \
                   (the first collective of init); a failure there is not recovered\n";
        let out = outcome("opening", Some(ExitStatus::from_raw(1 << 8)), None, log);
        let unseen = classify(&plan, &base(), &out, false);
        let injected = classify(&plan, &base(), &out, true);
        let _ = std::fs::remove_dir_all(&out.dir);
        assert_eq!(unseen.0, Outcome::OtherFailure, "the log alone does not show the loss");
        assert_eq!(injected.0, Outcome::ReportedUnrecoverable);
        assert!(injected.2.starts_with("a host lost while the transports opened"), "{}", injected.2);
    }
}
