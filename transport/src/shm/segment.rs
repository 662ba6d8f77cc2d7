//! Named shared-memory segments in /dev/shm, mapped with memmap2. Their names, creation and
//! sweep are the system utilities' (`crate::sys::shmfile`).

use std::fs::{File, OpenOptions};
use std::path::PathBuf;

use memmap2::{MmapMut, MmapOptions, MmapRaw};

use crate::error::{IoContext, Result};
use crate::sys::shmfile::{create_private, pid_in_name};

/// A mapped segment that this process created; unlinked when dropped.
pub struct OwnedSegment {
    pub map: MmapMut,
    path: PathBuf,
}

impl OwnedSegment {
    pub fn create(path: PathBuf, len: usize) -> Result<OwnedSegment> {
        let file = create_private(&path, pid_in_name).context(|| format!("create {}", path.display()))?;
        crate::sys::shmfile::size_reserved(&file, &path, len as u64)
            .context(|| format!("size {} to {len} bytes", path.display()))?;
        // SAFETY: the file was just created by us with mode 0600; other processes map it too,
        // which is the point, and all access through the mapping uses atomics or raw copies.
        let map = unsafe { MmapOptions::new().len(len).map_mut(&file) }
            .context(|| format!("map {}", path.display()))?;
        Ok(OwnedSegment { map, path })
    }
}

impl OwnedSegment {
    /// Removes the file's name now (the mapping stays); dropping removes it otherwise.
    pub fn unlink(&mut self) {
        if !self.path.as_os_str().is_empty() {
            let _ = std::fs::remove_file(std::mem::take(&mut self.path));
        }
    }
}

impl Drop for OwnedSegment {
    fn drop(&mut self) {
        self.unlink();
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
