//! One process's memory as the kernel accounts it: `/proc/self/smaps_rollup` (RSS, PSS),
//! `/proc/self/status` (page tables) and `/proc/self/smaps`, streamed, for the reverb
//! shared-memory segments mapped: this rank's own (its control segment, its registered
//! regions) and its peers' (their control segments and the regions it named).

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// Size, RSS and PSS of a set of mappings, in KiB, and how many there are.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Maps {
    pub count: u64,
    pub size_kib: u64,
    pub rss_kib: u64,
    pub pss_kib: u64,
}

/// A process's memory at one instant, in KiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    pub rss_kib: u64,
    /// Proportional set size: each page divided by the number of processes mapping it.
    pub pss_kib: u64,
    pub pss_anon_kib: u64,
    pub pss_file_kib: u64,
    pub pss_shmem_kib: u64,
    /// Page tables (`VmPTE`): not in RSS, but per process and growing with what is mapped.
    pub pte_kib: u64,
    /// Segments this rank created (`reverb.<job>.<rank>.<pid>.<what>`: its control segment,
    /// its registered regions).
    pub own_shm: Maps,
    /// Segments of other ranks mapped here (their control segments, regions named in RMA).
    pub peer_shm: Maps,
}

impl Snapshot {
    /// Reads this process's counters; `rank` tells its own control segment from its peers'.
    /// The rollup is read first, so the smaps walk that follows cannot inflate it.
    pub fn take(rank: u32) -> Result<Snapshot> {
        let mut s = Snapshot::default();
        read_fields("/proc/self/smaps_rollup", |key, kib| match key {
            "Rss" => s.rss_kib = kib,
            "Pss" => s.pss_kib = kib,
            "Pss_Anon" => s.pss_anon_kib = kib,
            "Pss_File" => s.pss_file_kib = kib,
            "Pss_Shmem" => s.pss_shmem_kib = kib,
            _ => {}
        })?;
        read_fields("/proc/self/status", |key, kib| {
            if key == "VmPTE" {
                s.pte_kib = kib;
            }
        })?;
        s.read_segments(Path::new("/proc/self/smaps"), rank)?;
        Ok(s)
    }

    fn read_segments(&mut self, path: &Path, rank: u32) -> Result<()> {
        let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let mut current: Option<Kind> = None;
        for line in BufReader::new(file).lines() {
            let line = line.with_context(|| format!("reading {}", path.display()))?;
            match field(&line) {
                Some((key, kib)) => {
                    let Some(kind) = current else { continue };
                    let maps = if kind == Kind::Own { &mut self.own_shm } else { &mut self.peer_shm };
                    match key {
                        "Size" => maps.size_kib += kib,
                        "Rss" => maps.rss_kib += kib,
                        "Pss" => maps.pss_kib += kib,
                        _ => {}
                    }
                }
                // Not a "Key: N kB" line: a mapping's header, or a flag line (VmFlags).
                None if is_header(&line) => {
                    current = classify(&line, rank);
                    let maps = match current {
                        Some(Kind::Own) => &mut self.own_shm,
                        Some(Kind::Peer) => &mut self.peer_shm,
                        None => continue,
                    };
                    maps.count += 1;
                }
                None => {}
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Own,
    Peer,
}

/// Calls `f(key, kib)` for every `Key:   N kB` line of `path`.
fn read_fields(path: &str, mut f: impl FnMut(&str, u64)) -> Result<()> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    for (key, kib) in text.lines().filter_map(field) {
        f(key, kib);
    }
    Ok(())
}

/// `Rss:   1234 kB` as ("Rss", 1234).
fn field(line: &str) -> Option<(&str, u64)> {
    let (key, rest) = line.split_once(':')?;
    let value = rest.trim().strip_suffix("kB")?.trim();
    Some((key, value.parse().ok()?))
}

/// A mapping's first line starts with its address range, `7f12...-7f13... `.
fn is_header(line: &str) -> bool {
    let first = line.split(' ').next().unwrap_or("");
    first.split_once('-').is_some_and(|(a, b)| {
        !a.is_empty() && a.bytes().all(|c| c.is_ascii_hexdigit()) && b.bytes().all(|c| c.is_ascii_hexdigit())
    })
}

/// Which reverb segment a mapping's header names, if any: the file name is
/// `reverb.<job>.<rank>.<pid>.<what>` (see `reverb_transport::sys::shmfile::segment_path`), with
/// ` (deleted)` once its owner unlinked it.
fn classify(header: &str, rank: u32) -> Option<Kind> {
    // Address, perms, offset, device, inode, then the path (which may hold spaces).
    let path = header.split_whitespace().nth(5)?;
    let name = path.strip_prefix("/dev/shm/")?.strip_prefix("reverb.")?;
    let mut parts = name.rsplit('.');
    let (_what, _pid) = (parts.next()?, parts.next()?);
    let owner: u32 = parts.next()?.parse().ok()?;
    Some(if owner == rank { Kind::Own } else { Kind::Peer })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_and_headers_parse() {
        assert_eq!(field("Rss:                1672 kB"), Some(("Rss", 1672)));
        assert_eq!(field("VmFlags: rd wr sh mr mw me ms sd"), None);
        assert!(is_header("7f1c2e000000-7f1c4f000000 rw-s 00000000 00:1a 17 /dev/shm/x"));
        assert!(!is_header("Rss:                1672 kB"));
    }

    #[test]
    fn segments_are_classified_by_owner_and_kind() {
        let h = |path: &str| format!("7f00-7f10 rw-s 00000000 00:1a 17                  {path}");
        assert_eq!(classify(&h("/dev/shm/reverb.rvab12.3.4242.ctl"), 3), Some(Kind::Own));
        assert_eq!(classify(&h("/dev/shm/reverb.rvab12.4.4243.ctl (deleted)"), 3), Some(Kind::Peer));
        assert_eq!(classify(&h("/dev/shm/reverb.rvab12.3.4242.00000000000a0001"), 3), Some(Kind::Own));
        assert_eq!(classify(&h("/usr/lib/libc.so.6"), 3), None);
        assert_eq!(classify("7f00-7f10 rw-p 00000000 00:00 0", 3), None);
    }

    #[test]
    fn this_process_has_memory() {
        let s = Snapshot::take(0).expect("reading /proc/self");
        assert!(s.rss_kib > 0 && s.pss_kib > 0 && s.pss_kib <= s.rss_kib, "{s:?}");
    }
}
