//! Shared files in /dev/shm: their names, their creation for this user alone, and the sweep of
//! those crashed processes left.
//!
//! Every file is named `reverb.<job>.<rank>.<pid>.<what>` so that a later start can find the
//! files of crashed processes (their pid is gone) and unlink them. Every shared file reverb
//! makes (the shm provider's segments, the logger's node files) is created through
//! [`create_private`].

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::api::Rank;

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

/// The /dev/shm path of segment `what` of `rank` (process `pid`) in job `job` (already
/// sanitized, see `sanitize_job_id`).
pub fn segment_path(job: &str, rank: Rank, pid: u32, what: &str) -> PathBuf {
    PathBuf::from(SHM_DIR).join(format!("{PREFIX}{job}.{rank}.{pid}.{what}"))
}

/// The creator pid a file records in its header: the little-endian word at `creator_at`, read
/// only when the word at `magic_at` is `magic` (so a foreign or half-written file names no
/// one). `None` for a file that cannot be read, has another magic, or records pid 0.
pub fn recorded_creator(path: &Path, magic_at: usize, magic: u64, creator_at: usize) -> Option<u32> {
    use std::os::unix::fs::FileExt;
    let file = File::open(path).ok()?;
    let word = |at: usize| {
        let mut bytes = [0u8; 8];
        file.read_exact_at(&mut bytes, at as u64).ok().map(|()| u64::from_le_bytes(bytes))
    };
    if word(magic_at)? != magic {
        return None;
    }
    u32::try_from(word(creator_at)?).ok().filter(|&pid| pid != 0)
}

/// Creates `path` for this user alone: mode 0600 and exclusively (`O_CREAT|O_EXCL`), so other
/// users on a shared node cannot read what goes in and nothing is ever overwritten. An existing
/// file is replaced only when it is provably stale: `creator` names the pid that made it and that
/// process is gone. Otherwise the error is `AlreadyExists`, naming the file and its creator.
pub fn create_private(path: &Path, creator: impl Fn(&Path) -> Option<u32>) -> io::Result<File> {
    let create = || OpenOptions::new().read(true).write(true).create_new(true).mode(0o600).open(path);
    let exists = match create() {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => e,
        other => return other,
    };
    match creator(path) {
        Some(pid) if !super::liveness::pid_exists(pid) => {
            match std::fs::remove_file(path) {
                Ok(()) => {}
                // Another process swept it first.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
            create()
        }
        pid => {
            let by = pid.map_or("an unknown process".to_string(), |p| format!("live pid {p}"));
            Err(io::Error::new(
                exists.kind(),
                format!("{} already exists (made by {by}); not overwriting it", path.display()),
            ))
        }
    }
}

/// Sizes a freshly created shared file to `len` bytes and reserves its memory now
/// (`posix_fallocate`), so a full /dev/shm is an error here, naming the file, instead of a
/// SIGBUS when a page is first touched. Filesystems that cannot reserve keep a sparse file.
pub fn size_reserved(file: &File, path: &Path, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    file.set_len(len)?;
    let Ok(signed_len) = libc::off_t::try_from(len) else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{len} bytes is too large a file")));
    };
    if signed_len == 0 {
        return Ok(());
    }
    // SAFETY: the descriptor is open for as long as `file` is borrowed; posix_fallocate
    // touches only the file's blocks, not our memory.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, signed_len) };
    match rc {
        0 | libc::EOPNOTSUPP | libc::EINVAL => Ok(()),
        libc::ENOSPC => Err(io::Error::new(
            io::ErrorKind::StorageFull,
            format!(
                "{}: no room for {len} bytes in {} (shared memory is full: fewer or smaller \
                 log rings, or a larger /dev/shm)",
                path.display(),
                path.parent().map_or_else(|| SHM_DIR.into(), |d| d.display().to_string()),
            ),
        )),
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}

/// The creator pid in a segment's name (`reverb.<job>.<rank>.<pid>.<what>`).
pub fn pid_in_name(path: &Path) -> Option<u32> {
    job_and_pid_in_name(path).map(|(_, pid)| pid)
}

/// The job tag and the creator pid in a segment's name (`reverb.<job>.<rank>.<pid>.<what>`);
/// `None` for any other name.
pub fn job_and_pid_in_name(path: &Path) -> Option<(String, u32)> {
    let name = path.file_name()?.to_str()?;
    let rest = name.strip_prefix(PREFIX)?;
    // From the right: what, pid; the job tag is the first field (it holds no dot).
    let pid = rest.rsplit('.').nth(1)?.parse().ok()?;
    let (job, _) = rest.split_once('.')?;
    (!job.is_empty()).then(|| (job.to_string(), pid))
}

/// The directory the segments live in.
pub fn shm_dir() -> &'static Path {
    Path::new(SHM_DIR)
}

/// The file a launcher keeps while it runs (part of) job `job` (sanitized) on this host:
/// `reverb.<job>.launcher.<pid>.job`. A sweep that finds its pid alive leaves the job's
/// segments alone, even while none of its ranks runs (between a node's death and its respawn).
pub fn launcher_marker_path(job: &str, pid: u32) -> PathBuf {
    PathBuf::from(SHM_DIR).join(format!("{PREFIX}{job}.launcher.{pid}.job"))
}

/// Unlinks segments left by processes that no longer exist (crashed runs). Returns how many.
pub fn sweep_stale() -> usize {
    let Ok(dir) = std::fs::read_dir(SHM_DIR) else { return 0 };
    let mut removed = 0;
    for entry in dir.flatten() {
        let Some(pid) = pid_in_name(&entry.path()) else { continue };
        if !super::liveness::pid_exists(pid) && std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}
