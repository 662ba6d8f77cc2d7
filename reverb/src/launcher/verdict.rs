//! How a launch ended, as JSON for machines (`reverb run --report-json FILE`): the exit code,
//! why the job stopped and the respawns it took. The lines on stderr say the same for people;
//! tests and scripts read this instead of their wording.

use std::os::unix::process::ExitStatusExt;

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
