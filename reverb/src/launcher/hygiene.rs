//! The job's files in /dev/shm. While a launch runs, a marker names its launcher
//! (`reverb.<job>.launcher.<pid>.job`); when it ends, the segments its killed processes left
//! are removed; and at its start, the same user's earlier jobs whose processes are all gone
//! (a launcher SIGKILLed, its ranks killed by their parent-death signal) are swept.
//!
//! A job's files are known by name: transport segments `reverb.<tag>.<rank>.<pid>.<what>`
//! (ranks under `<tag>`, its logger cores under `<tag>lg`) and the logger cores' node files
//! `reverb-<job>-node<N>-log...` (the node segment `.ctl` records its logger core's pid). A job
//! and its loggers' job live and die together: a sweep removes them only when no pid named by
//! either (markers, segments, node segments) lives, and never a job none of whose files names a
//! pid.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use reverb_logger::core::segment::creator_pid;
use reverb_transport::sys::liveness::{pid_exists, pid_running};
use reverb_transport::sys::shmfile::{
    create_private, job_and_pid_in_name, launcher_marker_path, pid_in_name, sanitize_job_id, shm_dir,
};

use super::signals::SignalGuard;

/// The loggers' transport job of job tag `t` is `<t>lg` (`<job>-lg`, sanitized).
const LOGGERS_SUFFIX: &str = "lg";

/// Held for one launch: its marker, removed with the segments of its dead processes on drop.
/// Create it before anything of the job starts and drop it after everything was reaped.
pub(super) struct JobFiles {
    tag: String,
    marker: Option<PathBuf>,
    /// A cancel from now on stops the launch (and so cleans up) rather than ending the process.
    _signals: SignalGuard,
}

impl JobFiles {
    /// Sweeps earlier dead jobs (not `job_id`, which other launchers of a job across hosts may
    /// share on this host) and writes this launcher's marker.
    pub(super) fn claim(job_id: &str) -> JobFiles {
        let signals = SignalGuard::install();
        let tag = sanitize_job_id(job_id);
        let swept = sweep_dead_jobs(&tag);
        if swept > 0 {
            eprintln!(
                "reverb run: removed {swept} /dev/shm file(s) of earlier jobs whose processes are all gone"
            );
        }
        let path = launcher_marker_path(&tag, std::process::id());
        let marker = match create_private(&path, pid_in_name) {
            Ok(_) => Some(path),
            Err(e) => {
                // Without it a concurrent sweep may take the job for dead between two of its
                // incarnations; the job itself runs as well.
                eprintln!("reverb run: {}: {e}", path.display());
                None
            }
        };
        JobFiles { tag, marker, _signals: signals }
    }
}

impl Drop for JobFiles {
    fn drop(&mut self) {
        remove_dead_segments(&self.tag);
        if let Some(marker) = self.marker.take() {
            let _ = std::fs::remove_file(marker);
        }
    }
}

/// What a file in /dev/shm is of reverb's: its job tag and, for a segment or marker, its pid.
fn classify(path: &Path) -> Option<(String, Option<u32>)> {
    if let Some((tag, pid)) = job_and_pid_in_name(path) {
        return Some((tag, Some(pid)));
    }
    let name = path.file_name()?.to_str()?;
    let rest = name.strip_prefix("reverb-")?;
    // `<job>-node<N>-log`, then nothing or `.<ext>` (`.ctl`, `.detq`, `.hosted-node<C>...`).
    let (job, tail) = rest.rmatch_indices("-node").find_map(|(at, _)| {
        let node = &rest[at + "-node".len()..];
        let digits = node.bytes().take_while(u8::is_ascii_digit).count();
        let tail = node[digits..].strip_prefix("-log")?;
        (digits > 0 && at > 0 && (tail.is_empty() || tail.starts_with('.'))).then(|| (&rest[..at], tail))
    })?;
    // The node segment records its logger core (a launcher's marker may have been swept by a
    // rank's per-file sweep already).
    let pid = if tail == ".ctl" { creator_pid(path) } else { None };
    Some((sanitize_job_id(job), pid))
}

#[derive(Default)]
struct Family {
    files: Vec<PathBuf>,
    pids: Vec<u32>,
}

/// This user's reverb files in /dev/shm, by job tag.
fn families() -> HashMap<String, Family> {
    let uid = rustix::process::geteuid().as_raw();
    let mut by_tag: HashMap<String, Family> = HashMap::new();
    let Ok(dir) = std::fs::read_dir(shm_dir()) else { return by_tag };
    for entry in dir.flatten() {
        let path = entry.path();
        let Some((tag, pid)) = classify(&path) else { continue };
        // Regular files of this user only (no links, nobody else's).
        let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
        if !meta.is_file() || meta.uid() != uid {
            continue;
        }
        let family = by_tag.entry(tag).or_default();
        family.files.push(path);
        family.pids.extend(pid);
    }
    by_tag
}

/// A job tag and its loggers' (or, for a loggers' tag, its job's).
fn related(tag: &str) -> Vec<String> {
    let mut tags = vec![tag.to_string(), format!("{tag}{LOGGERS_SUFFIX}")];
    tags.extend(tag.strip_suffix(LOGGERS_SUFFIX).map(str::to_string));
    tags
}

/// Removes the files of every job but `own` that names pids, none of which exists; returns
/// how many files went.
fn sweep_dead_jobs(own: &str) -> usize {
    let by_tag = families();
    let live: HashMap<&str, bool> =
        by_tag.iter().map(|(t, f)| (t.as_str(), f.pids.iter().any(|&p| lives(p)))).collect();
    let mut removed = 0;
    for (tag, family) in &by_tag {
        let kin = related(tag);
        if kin.iter().any(|t| t == own || live.get(t.as_str()).copied().unwrap_or(false)) {
            continue;
        }
        if !kin.iter().any(|t| by_tag.get(t).is_some_and(|f| !f.pids.is_empty())) {
            continue; // nothing says whose it is
        }
        removed += family.files.iter().filter(|p| std::fs::remove_file(p).is_ok()).count();
    }
    removed
}

/// At the end of a launch (its processes reaped): the segments of job `tag` and its loggers'
/// whose process is gone. A part of a job leaves the live ranks of other parts on this host
/// alone; logger node files are the logger cores' to remove (`logger_cores`).
fn remove_dead_segments(tag: &str) {
    let Ok(dir) = std::fs::read_dir(shm_dir()) else { return };
    let ours = [tag.to_string(), format!("{tag}{LOGGERS_SUFFIX}")];
    for entry in dir.flatten() {
        let path = entry.path();
        let Some((t, pid)) = job_and_pid_in_name(&path) else { continue };
        if ours.contains(&t) && !path_is_marker(&path) && !lives(pid) {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// Process `pid` exists and has not exited: an orphaned zombie nobody reaps holds no segment.
/// Without a readable /proc every existing pid counts as alive.
fn lives(pid: u32) -> bool {
    pid_exists(pid) && (pid_running(pid) || !Path::new("/proc/self/stat").exists())
}

fn path_is_marker(path: &Path) -> bool {
    path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(".job") && n.contains(".launcher."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_classified_by_job() {
        let c = |name: &str| classify(&Path::new("/dev/shm").join(name));
        assert_eq!(c("reverb.rvab12.3.4242.ctl"), Some(("rvab12".into(), Some(4242))));
        assert_eq!(c("reverb.rvab12lg.0.77.00000000000a0001"), Some(("rvab12lg".into(), Some(77))));
        assert_eq!(c("reverb.rvab12.launcher.99.job"), Some(("rvab12".into(), Some(99))));
        assert_eq!(c("reverb-rvab12-node1-log.ctl"), Some(("rvab12".into(), None)));
        assert_eq!(c("reverb-slurm-7-node0-log.hosted-node1-r2"), Some(("slurm7".into(), None)));
        assert_eq!(c("reverb-rvab12-node1-log"), Some(("rvab12".into(), None)));
        assert_eq!(c("reverb-a-node-1-node2-log.tmp"), Some(("anode1".into(), None)));
        for foreign in ["reverb-x-node-log", "reverb-rv-node1-detq", "other.rv.1.2.ctl", "reverb.rv.ctl", "x"]
        {
            assert_eq!(c(foreign), None, "{foreign}");
        }
    }

    #[test]
    fn a_job_and_its_loggers_are_kin() {
        assert_eq!(related("rvab"), ["rvab", "rvablg"]);
        assert_eq!(related("rvablg"), ["rvablg", "rvablglg", "rvab"]);
    }
}
