//! How a launch ended, as JSON for machines (`reverb run --report-json FILE`): the exit code,
//! why the job stopped and the respawns it took. The lines on stderr say the same for people;
//! tests and scripts read this instead of their wording. Also [`Causes`]: what ranks said
//! could not be recovered, which the launcher says once for them.

use std::os::unix::process::ExitStatusExt;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use super::masking::Masked;
use super::spawn::{RankProc, RankStatus};
use super::watch::Stop;
use super::Respawn;

/// What `exit_code` decided, with the facts behind it.
pub(super) struct Verdict<'a> {
    pub code: i32,
    pub stop: Option<&'a Stop>,
    pub procs: &'a [RankProc],
    pub respawns: &'a [Respawn],
    pub respawn_failed: Option<&'a anyhow::Error>,
    pub respawn_limit: u32,
    pub masked: &'a [Masked],
    /// Why the job could not recover, as its ranks said ([`Causes::summary`]).
    pub unrecoverable: Option<&'a str>,
}

impl Verdict<'_> {
    pub(super) fn to_json(&self) -> Value {
        let killed = self.procs.iter().filter(|p| p.status == RankStatus::Killed).count();
        json!({
            "code": self.code,
            "stop": self.stop.map(|s| self.stop_json(s)),
            "killed_ranks": killed,
            "respawn_limit": self.respawn_limit,
            "respawn_failed": self.respawn_failed.map(|e| format!("{e:#}")),
            "respawns": self.respawns.iter().map(respawn_json).collect::<Vec<_>>(),
            "masked": self.masked.iter().map(masked_json).collect::<Vec<_>>(),
            "unrecoverable": self.unrecoverable,
        })
    }

    fn stop_json(&self, stop: &Stop) -> Value {
        match stop {
            Stop::RankFailed(i) => {
                let p = &self.procs[*i];
                let (exit_code, signal) = match p.status {
                    RankStatus::Exited(c) => (Some(c), None),
                    RankStatus::Signaled(s) => (None, Some(s)),
                    RankStatus::Running | RankStatus::Killed => (None, None),
                };
                json!({
                    "kind": "rank_failed",
                    "rank": p.rank,
                    "node": p.node,
                    "incarnation": p.incarnation,
                    "exit_code": exit_code,
                    "signal": signal,
                })
            }
            Stop::LoggerFailed { what, status } => json!({
                "kind": "logger_failed",
                "what": what,
                "exit_code": status.code(),
                "signal": status.signal(),
            }),
            Stop::Timeout(t) => json!({ "kind": "timeout", "after_s": t.as_secs_f64() }),
            Stop::Signal(s) => json!({ "kind": "signal", "signal": s }),
        }
    }
}

fn respawn_json(r: &Respawn) -> Value {
    json!({
        "node": r.node,
        "nodes": r.nodes,
        "rank": r.rank,
        "signal": r.signal,
        "by_logger": r.by_logger,
        "logger_restarted": r.logger_restarted,
        "ranks": r.ranks,
        "incarnation": r.incarnation,
        "at_s": r.at.as_secs_f64(),
    })
}

fn masked_json(m: &Masked) -> Value {
    json!({
        "rank": m.rank,
        "virtual_rank": m.virtual_rank,
        "signal": m.signal,
        "live_mates": m.live_mates,
        "at_s": m.at.as_secs_f64(),
    })
}

/// What a rank prints when the runtime cannot recover (`RuntimeError::Unrecoverable`).
const UNRECOVERABLE: &str = "unrecoverable failure: ";

/// Ranks' unrecoverable reports, taken from their stderr by the output pumps: every surviving
/// rank finds the same loss, and the launcher says it once instead of each rank.
#[derive(Clone, Default)]
pub(super) struct Causes(Arc<Mutex<Vec<(u32, String)>>>);

impl Causes {
    /// Records `line` of `rank`'s stderr when it is an unrecoverable report; whether it was
    /// (then the pump does not print it).
    pub(super) fn take(&self, rank: u32, line: &[u8]) -> bool {
        let line = String::from_utf8_lossy(line);
        let Some(at) = line.find(UNRECOVERABLE) else { return false };
        let cause = line[at + UNRECOVERABLE.len()..].trim();
        // An MPI rank's line ends with its error class ("... (MPI_ERR_OTHER)").
        let cause = match cause.rfind(" (MPI_ERR_") {
            Some(end) if cause.ends_with(')') => &cause[..end],
            _ => cause,
        }
        .to_string();
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        g.push((rank, cause));
        true
    }

    /// The cause most ranks gave (the first among equals), if any rank gave one.
    pub(super) fn summary(&self) -> Option<String> {
        let g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let count = |c: &str| g.iter().filter(|(_, d)| d == c).count();
        let mut best: Option<(&str, usize)> = None;
        for (_, c) in g.iter() {
            let n = count(c);
            if best.is_none_or(|(_, m)| n > m) {
                best = Some((c, n));
            }
        }
        best.map(|(c, _)| c.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cause_most_ranks_gave_is_said_once() {
        let causes = Causes::default();
        assert!(!causes.take(0, b"checksum: 12\n"));
        assert_eq!(causes.summary(), None);
        assert!(causes.take(3, b"unrecoverable failure: rank 3 failed while a recovery was under way\n"));
        for r in [0, 1] {
            let line =
                format!("[{r}] unrecoverable failure: rank 2 and its log buddy rank 3 were lost together\n");
            assert!(causes.take(r, line.as_bytes()));
        }
        assert_eq!(causes.summary().as_deref(), Some("rank 2 and its log buddy rank 3 were lost together"));
    }

    #[test]
    fn an_mpi_ranks_error_class_is_not_part_of_the_cause() {
        let causes = Causes::default();
        let line =
            b"[2] reverb MPI: MPI_Init: unrecoverable failure: node 1 (ranks 2-3) was lost (MPI_ERR_OTHER)\n";
        assert!(causes.take(2, line));
        assert_eq!(causes.summary().as_deref(), Some("node 1 (ranks 2-3) was lost"));
    }
}
