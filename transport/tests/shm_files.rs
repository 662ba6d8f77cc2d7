//! Shared-memory hygiene: every file is private (0600) and created exclusively; a leftover file
//! is swept only when its creator pid is dead.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use reverb_transport::loopback::InProcBootstrap;
use reverb_transport::sys::liveness;
use reverb_transport::sys::shmfile::{create_private, pid_in_name, segment_path, size_reserved, sweep_stale};
use reverb_transport::{Access, ProviderKind, TransportConfig};

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o777
}

/// A pid that no process has (a child that already exited and was reaped), if one is found.
fn dead_pid() -> Option<u32> {
    let mut child = std::process::Command::new("true").spawn().expect("spawn true");
    let pid = child.id();
    child.wait().expect("wait");
    (!liveness::pid_exists(pid)).then_some(pid)
}

#[test]
fn created_files_are_private_and_exclusive() {
    let me = std::process::id();
    let path = segment_path(&format!("hyg{me}"), 0, me, "excl");
    let _ = std::fs::remove_file(&path);
    drop(create_private(&path, pid_in_name).expect("first create"));
    assert_eq!(mode(&path), 0o600);
    // Our own pid is alive: the file is not stale, and is never overwritten.
    let err = create_private(&path, pid_in_name).expect_err("second exclusive create");
    assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists);
    assert!(err.to_string().contains(&format!("live pid {me}")), "{err}");
    // A creator that cannot be named is not provably dead either.
    assert!(create_private(&path, |_| None).is_err());
    std::fs::remove_file(&path).expect("cleanup");
}

#[test]
fn a_stale_file_is_swept_and_a_live_one_kept() {
    let Some(dead) = dead_pid() else { return eprintln!("skipped: no dead pid found") };
    let me = std::process::id();
    let job = format!("hygstale{me}");
    let stale = segment_path(&job, 0, dead, "ctl");
    let live = segment_path(&job, 1, me, "ctl");
    for p in [&stale, &live] {
        std::fs::write(p, b"leftover").expect("plant file");
    }
    // create_private replaces the dead creator's file, privately.
    drop(create_private(&stale, pid_in_name).expect("stale file replaced"));
    assert_eq!(mode(&stale), 0o600);
    assert_eq!(std::fs::read(&stale).expect("read").len(), 0, "the stale content is gone");
    // The start-up sweep removes it again, and keeps the live process's file.
    sweep_stale();
    assert!(!stale.exists(), "stale segment not swept");
    assert!(live.exists(), "a live process's segment was swept");
    std::fs::remove_file(&live).expect("cleanup");
}

#[test]
fn shm_provider_files_are_private() {
    let job = format!("hygprov{}", std::process::id());
    let mut boot = InProcBootstrap::job(&job, 1).pop().expect("one rank");
    let config = TransportConfig { provider: ProviderKind::SHM, ..TransportConfig::default() };
    let mut p = reverb_transport::open(&config, &mut boot).expect("open shm");
    let _region = p.alloc_region(4096, Access::REMOTE_RW).expect("alloc");
    let prefix = format!("reverb.{job}.");
    let files: Vec<_> = std::fs::read_dir("/dev/shm")
        .expect("/dev/shm")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    assert_eq!(files.len(), 2, "control segment and one region: {files:?}");
    for f in &files {
        assert_eq!(mode(f), 0o600, "{}", f.display());
    }
}

#[test]
fn a_full_shared_memory_filesystem_is_an_error_not_a_sigbus() {
    // A 1 MiB tmpfs of our own stands for a full /dev/shm; mounting one needs root.
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return eprintln!("skipped: mounting a small tmpfs needs root");
    }
    let dir = std::env::temp_dir().join(format!("reverb-shm-full-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mount point");
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&dir)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        let _ = std::fs::remove_dir(&dir);
        return eprintln!("skipped: this container refuses tmpfs mounts");
    }
    let path = dir.join("reverb.full.0.1.ring");
    let file = create_private(&path, pid_in_name).expect("create");
    let small = size_reserved(&file, &path, 256 << 10);
    let big = size_reserved(&file, &path, 4 << 20);
    drop(file);
    let _ = std::process::Command::new("umount").arg(&dir).status();
    let _ = std::fs::remove_dir(&dir);
    small.expect("256 KiB fits in 1 MiB");
    let err = big.expect_err("4 MiB cannot fit in 1 MiB");
    assert_eq!(err.kind(), std::io::ErrorKind::StorageFull, "{err}");
    assert!(err.to_string().contains("shared memory is full"), "{err}");
}
