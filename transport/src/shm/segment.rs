//! Named shared-memory segments in /dev/shm, mapped with memmap2.
//!
//! Every file is named `reverb.<job>.<rank>.<pid>.<what>` so that a later start can find the
//! segments of crashed processes (their pid is gone) and unlink them.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use memmap2::{MmapMut, MmapOptions, MmapRaw};

use crate::api::Rank;
use crate::error::{IoContext, Result};

const SHM_DIR: &str = "/dev/shm";
const PREFIX: &str = "reverb.";

/// Keeps only characters that are safe in a file name and cannot collide with the separator.
pub fn sanitize_job_id(job: &str) -> String {
    let s: String = job.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_').take(48).collect();
    if s.is_empty() {
        "job".to_string()
    } else {
        s
    }
}

pub fn segment_path(job: &str, rank: Rank, pid: u32, what: &str) -> PathBuf {
    PathBuf::from(SHM_DIR).join(format!("{PREFIX}{job}.{rank}.{pid}.{what}"))
}

/// A mapped segment that this process created; unlinked when dropped.
pub struct OwnedSegment {
    pub map: MmapMut,
    path: PathBuf,
}

impl OwnedSegment {
    pub fn create(path: PathBuf, len: usize) -> Result<OwnedSegment> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .context(|| format!("create {}", path.display()))?;
        file.set_len(len as u64).context(|| format!("size {} to {len} bytes", path.display()))?;
        // SAFETY: the file was just created by us with mode 0600; other processes map it too,
        // which is the point, and all access through the mapping uses atomics or raw copies.
        let map = unsafe { MmapOptions::new().len(len).map_mut(&file) }
            .context(|| format!("map {}", path.display()))?;
        Ok(OwnedSegment { map, path })
    }
}

impl Drop for OwnedSegment {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Maps a peer's segment. `writable` false maps it read-only, so the MMU enforces a region
/// that grants no remote write.
pub fn map_peer(path: &std::path::Path, len: usize, writable: bool) -> Result<MmapRaw> {
    let file: File = OpenOptions::new()
        .read(true)
        .write(writable)
        .open(path)
        .context(|| format!("open peer segment {}", path.display()))?;
    let actual = file.metadata().context(|| format!("stat {}", path.display()))?.len();
    if actual < len as u64 {
        return Err(crate::error::TransportError::Malformed {
            what: "peer segment",
            detail: format!("{} is {actual} bytes, expected at least {len}", path.display()),
        });
    }
    let mut opts = MmapOptions::new();
    opts.len(len);
    let map = if writable { opts.map_raw(&file) } else { opts.map_raw_read_only(&file) };
    map.context(|| format!("map peer segment {}", path.display()))
}

/// Unlinks segments left by processes that no longer exist (crashed runs). Returns how many.
pub fn sweep_stale() -> usize {
    let Ok(dir) = std::fs::read_dir(SHM_DIR) else { return 0 };
    let mut removed = 0;
    for entry in dir.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(rest) = name.strip_prefix(PREFIX) else { continue };
        let fields: Vec<&str> = rest.rsplitn(3, '.').collect();
        // rsplitn yields [what, pid, job.rank]
        let Some(pid) = fields.get(1).and_then(|p| p.parse::<u32>().ok()) else { continue };
        if !super::liveness::pid_exists(pid) && std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}
