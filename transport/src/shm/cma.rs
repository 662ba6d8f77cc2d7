//! Cross-memory attach (Linux `process_vm_readv`): the receiver of a large lent send reads it
//! straight from the sender's memory, one copy in all, where staging costs two (Open MPI's
//! vader calls it its single-copy mechanism). The kernel allows it between processes of one
//! user unless Yama says otherwise (scope 1: only a process the target named, so every rank
//! names any; scopes 2 and 3: never) or a seccomp filter refuses the call. Whether a peer can
//! be read is probed once per attach (`probe`), so a refusal, or a pid from another pid
//! namespace, only sends its messages the staged way.

use std::io;

const YAMA_SCOPE: &str = "/proc/sys/kernel/yama/ptrace_scope";

/// Lets the ranks of this user read this process under Yama scope 1 (the Ubuntu default),
/// which otherwise allows it only to ancestors. Nothing to do, or nothing that would help,
/// under the other scopes.
pub fn permit_peers() {
    let scope = std::fs::read_to_string(YAMA_SCOPE).ok();
    if scope.as_deref().map(str::trim) == Some("1") {
        // SAFETY: PR_SET_PTRACER takes a pid (here "any") and touches no memory of ours.
        unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
    }
}

/// Which way a transfer goes.
#[derive(Clone, Copy)]
enum Way {
    Read,
    Write,
}

/// Moves `len` bytes between `local` here and `remote` in process `pid`, in as many calls as
/// the kernel needs (it may stop short at a page it cannot reach: that is an error).
///
/// # Safety
/// `local..local + len` must be writable (`Read`) or readable (`Write`), and not aliased by
/// any reference while this runs.
unsafe fn transfer(way: Way, pid: u32, remote: u64, local: *mut u8, len: usize) -> io::Result<()> {
    let mut done = 0usize;
    while done < len {
        let here = libc::iovec { iov_base: local.wrapping_add(done).cast(), iov_len: len - done };
        let far =
            libc::iovec { iov_base: (remote as usize + done) as *mut libc::c_void, iov_len: len - done };
        let pid = pid as libc::pid_t;
        // SAFETY: `here` lies inside the caller's range, writable or readable as `way` needs;
        // the kernel checks `far` against the other process's mappings and fails rather than
        // fault.
        let n = unsafe {
            match way {
                Way::Read => libc::process_vm_readv(pid, &here, 1, &far, 1, 0),
                Way::Write => libc::process_vm_writev(pid, &here, 1, &far, 1, 0),
            }
        };
        match n {
            n if n > 0 => done += n as usize,
            0 => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "cross-memory transfer moved nothing",
                ))
            }
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// Reads `len` bytes at `remote` in process `pid` into `dst`.
///
/// # Safety
/// `dst..dst + len` must be writable and not aliased by any reference while this runs.
pub unsafe fn read(pid: u32, remote: u64, dst: *mut u8, len: usize) -> io::Result<()> {
    // SAFETY: the caller's contract is transfer's for a read.
    unsafe { transfer(Way::Read, pid, remote, dst, len) }
}

/// Writes `len` bytes from `src` to `remote` in process `pid`.
///
/// # Safety
/// `src..src + len` must be readable.
pub unsafe fn write(pid: u32, remote: u64, src: *const u8, len: usize) -> io::Result<()> {
    // SAFETY: the kernel only reads `src` for a write: transfer's contract for it.
    unsafe { transfer(Way::Write, pid, remote, src.cast_mut(), len) }
}

/// Whether `expect.len()` bytes at `remote` in process `pid` read back as `expect`: the peer's
/// segment header, read through its own mapping, proves that `pid` is that peer and that the
/// kernel lets us read it.
pub fn probe(pid: u32, remote: u64, expect: &[u8]) -> bool {
    let mut seen = vec![0u8; expect.len()];
    // SAFETY: `seen` is ours, writable for its length, and no other reference aliases it.
    let read = unsafe { read(pid, remote, seen.as_mut_ptr(), seen.len()) };
    read.is_ok() && seen == expect
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_this_process_and_refuses_an_unmapped_address() {
        let src: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        let pid = std::process::id();
        // SAFETY: dst is ours and writable.
        unsafe { read(pid, src.as_ptr() as u64, dst.as_mut_ptr(), dst.len()) }.unwrap();
        assert_eq!(dst, src);
        let mut back = vec![0u8; src.len()];
        // SAFETY: src is readable; back is ours and the kernel writes it.
        unsafe { write(pid, back.as_mut_ptr() as u64, src.as_ptr(), src.len()) }.unwrap();
        assert_eq!(back, src);
        assert!(probe(pid, src.as_ptr() as u64, &src[..64]));
        assert!(!probe(pid, 8, &src[..64]), "page 0 is never mapped");
    }
}
