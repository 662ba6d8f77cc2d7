//! Files the logger writes next to the node segment: snapshots of the rings it hosts, read
//! by clients for replay.

use std::path::PathBuf;

use reverb_transport::Rank;

use super::CoreError;

pub(super) fn retired_snapshot_path(segment_base: &str, client: Rank, k: u64) -> PathBuf {
    PathBuf::from(format!("{segment_base}.hosted-node{client}-r{k}"))
}

/// Where a snapshot of the ring hosted for node `client` goes (next to the segment).
pub fn hosted_snapshot_path(segment_base: &str, client: Rank) -> PathBuf {
    PathBuf::from(format!("{segment_base}.hosted-node{client}"))
}

/// Readers never see a half-written snapshot: write aside, then rename. Private (0600) like
/// the segment, as it holds logged payloads; a leftover aside file is this logger's to replace.
pub(super) fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> Result<(), CoreError> {
    use std::io::Write as _;
    let tmp = path.with_extension("tmp");
    std::fs::remove_file(&tmp).ok();
    reverb_transport::sys::shmfile::create_private(&tmp, |_| None)
        .and_then(|mut file| file.write_all(bytes))
        .map_err(|e| CoreError::io(format!("write {}", tmp.display()), e))?;
    std::fs::rename(&tmp, path).map_err(|e| CoreError::io(format!("rename to {}", path.display()), e))
}
