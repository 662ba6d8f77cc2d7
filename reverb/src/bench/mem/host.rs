//! The host limits a job of N local ranks runs into: descriptors (the launcher holds three
//! per rank: two output pipes and a bootstrap connection; a shm rank holds a pidfd per peer),
//! processes and threads (the launcher runs three threads per rank), and the memory behind
//! /dev/shm.

use std::ffi::CString;

use anyhow::{bail, Result};
use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// Descriptors the launcher needs for `ranks` ranks (a rank needs fewer: one per peer).
fn fds_needed(ranks: u32) -> u64 {
    3 * u64::from(ranks) + 256
}

/// Raises the soft descriptor limit to what `ranks` ranks need (children inherit it), within
/// the hard limit; fails, saying what to change, when the hard limit is too low. Also checks
/// the process limit. Returns the descriptor limit now in force.
pub fn raise_limits(ranks: u32) -> Result<u64> {
    let need = fds_needed(ranks);
    let nofile = getrlimit(Resource::Nofile);
    let (soft, hard) = (nofile.current.unwrap_or(u64::MAX), nofile.maximum.unwrap_or(u64::MAX));
    if soft < need {
        if hard < need {
            bail!(
                "{ranks} ranks need about {need} file descriptors in the launcher, but the hard \
                 limit is {hard} (ulimit -Hn): raise it (limits.conf, or `ulimit -Hn {need}` as root)"
            );
        }
        setrlimit(Resource::Nofile, Rlimit { current: Some(need), maximum: nofile.maximum })
            .map_err(|e| anyhow::anyhow!("raising the soft descriptor limit to {need}: {e}"))?;
    }
    // Threads count against RLIMIT_NPROC: three per rank in the launcher, plus the ranks.
    let tasks = 4 * u64::from(ranks) + 256;
    if let Some(nproc) = getrlimit(Resource::Nproc).current {
        if nproc < tasks {
            bail!("{ranks} ranks need about {tasks} processes and threads, but ulimit -u is {nproc}");
        }
    }
    Ok(soft.max(need))
}

/// Free bytes of the file system behind /dev/shm (where the shm segments live), if known.
pub fn shm_free_bytes() -> Option<u64> {
    let path = CString::new("/dev/shm").ok()?;
    // SAFETY: statvfs only writes into the zeroed struct we own; the path is NUL-terminated.
    let (rc, st) = unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        (libc::statvfs(path.as_ptr(), &mut st), st)
    };
    (rc == 0).then(|| st.f_bavail.saturating_mul(st.f_frsize))
}

/// `MemAvailable` of /proc/meminfo, in bytes.
pub fn mem_available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// One line on the host's memory, for notes and failure messages.
pub fn describe() -> String {
    let gib =
        |b: Option<u64>| b.map_or("?".to_string(), |b| format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64));
    format!("/dev/shm free: {}, MemAvailable: {}", gib(shm_free_bytes()), gib(mem_available_bytes()))
}
