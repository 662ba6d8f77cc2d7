//! The transport from C: open a job's provider (as `reverb run` set it up), registered regions,
//! one-sided put / put-with-immediate / get, tagged send and receive, and completions.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CString};
use std::mem::MaybeUninit;
use std::time::Duration;

use reverb_transport::bootstrap::TcpBootstrap;
use reverb_transport::{
    Access, Bootstrap, Completion, OpId, Provider, RecvBuffer, Region, RemoteRegion, Rma, Signal, Source,
    TagMatch, TransportConfig,
};

use crate::completion::{to_c, CompletionC};
use crate::ptr;
use crate::status::{guard, CError};

/// A `source` that accepts a message from any rank.
pub const REVERB_ANY_SOURCE: i64 = -1;

/// Peers may neither read nor write the region.
pub const REVERB_ACCESS_LOCAL: c_int = 0;
/// Peers may read it (`reverb_get`, rendezvous sends from it).
pub const REVERB_ACCESS_REMOTE_READ: c_int = 1;
/// Peers may write it (`reverb_put`, `reverb_put_imm`).
pub const REVERB_ACCESS_REMOTE_WRITE: c_int = 2;
/// Peers may read and write it.
pub const REVERB_ACCESS_REMOTE_RW: c_int = 3;

/// One rank's transport: the job's rendezvous and its provider.
pub struct ReverbTransport {
    boot: TcpBootstrap,
    provider: Box<dyn Provider>,
    provider_name: CString,
    /// Receives into caller memory (`reverb_recv`): where each one's bytes go on completion.
    into_caller: HashMap<OpId, (*mut c_void, usize)>,
    scratch: Vec<Completion>,
}

/// A registered memory region.
pub struct ReverbRegion {
    region: Region,
}

/// A peer's region as its owner described it (`reverb_region_remote`); plain data, sent to
/// the peers that access it in a message of the application's.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ReverbRemote {
    /// The rank that registered it.
    pub owner: u32,
    /// Its address in the owner's memory (checked by the owner, never dereferenced here).
    pub addr: u64,
    /// Its length in bytes.
    pub len: u64,
    /// The key the owner issued; a wrong or stale key fails the operation.
    pub key: u64,
}

impl From<&ReverbRemote> for RemoteRegion {
    fn from(r: &ReverbRemote) -> RemoteRegion {
        RemoteRegion { owner: r.owner, addr: r.addr, len: r.len, key: r.key }
    }
}

fn source_of(source: i64) -> Result<Source, CError> {
    match source {
        REVERB_ANY_SOURCE => Ok(Source::Any),
        s => u32::try_from(s)
            .map(Source::Rank)
            .map_err(|_| CError::invalid(format!("source {s}: a rank or REVERB_ANY_SOURCE"))),
    }
}

fn access_of(access: c_int) -> Result<Access, CError> {
    match access {
        REVERB_ACCESS_LOCAL => Ok(Access::LOCAL),
        REVERB_ACCESS_REMOTE_READ => Ok(Access::REMOTE_READ),
        REVERB_ACCESS_REMOTE_WRITE => Ok(Access::REMOTE_WRITE),
        REVERB_ACCESS_REMOTE_RW => Ok(Access::REMOTE_RW),
        a => Err(CError::invalid(format!("access {a}: one of REVERB_ACCESS_*"))),
    }
}

fn millis(timeout_ms: u32) -> Duration {
    Duration::from_millis(u64::from(timeout_ms))
}

/// Joins the job this process was started in (`reverb run`; `REVERB_PROVIDER` picks the
/// provider, shm by default) and stores the new handle in `*out`. Collective: every rank opens.
#[no_mangle]
pub extern "C" fn reverb_transport_open(out: *mut *mut ReverbTransport) -> c_int {
    guard(|| {
        ptr::check_out(out, "out")?;
        let mut boot = TcpBootstrap::connect_from_env()?;
        let config = TransportConfig::from_env()?;
        let provider = reverb_transport::open(&config, &mut boot)?;
        let provider_name = CString::new(provider.kind().as_str()).unwrap_or_default();
        let t = ReverbTransport {
            boot,
            provider,
            provider_name,
            into_caller: HashMap::new(),
            scratch: Vec::new(),
        };
        ptr::write(out, Box::into_raw(Box::new(t)), "out")
    })
}

/// Waits (bounded) until every rank called it: before closing, so no rank leaves while a peer
/// still needs it.
#[no_mangle]
pub extern "C" fn reverb_transport_barrier(t: *mut ReverbTransport) -> c_int {
    guard(|| Ok(ptr::handle(t, "t")?.boot.barrier()?))
}

/// Closes the transport and frees `t` (NULL is ignored). Regions must be freed before.
#[no_mangle]
pub extern "C" fn reverb_transport_close(t: *mut ReverbTransport) {
    drop(ptr::take(t));
}

/// This rank's number, or `UINT32_MAX` for a NULL handle.
#[no_mangle]
pub extern "C" fn reverb_transport_rank(t: *const ReverbTransport) -> u32 {
    ptr::read(t, "t").map(|t| t.provider.rank()).unwrap_or(u32::MAX)
}

/// The number of ranks in the job, or 0 for a NULL handle.
#[no_mangle]
pub extern "C" fn reverb_transport_size(t: *const ReverbTransport) -> u32 {
    ptr::read(t, "t").map(|t| t.provider.size()).unwrap_or(0)
}

/// The provider's name (`"shm"`, `"tcp"`, `"verbs"`, `"auto"`), valid while `t` is open.
#[no_mangle]
pub extern "C" fn reverb_transport_provider(t: *const ReverbTransport) -> *const c_char {
    ptr::read(t, "t").map(|t| t.provider_name.as_ptr()).unwrap_or(c"".as_ptr())
}

/// Allocates and registers `len` bytes (zeroed) that peers may access as `access` says
/// (`REVERB_ACCESS_*`); the handle goes to `*out`.
#[no_mangle]
pub extern "C" fn reverb_region_alloc(
    t: *mut ReverbTransport,
    len: usize,
    access: c_int,
    out: *mut *mut ReverbRegion,
) -> c_int {
    guard(|| {
        let t = ptr::handle(t, "t")?;
        let region = t.provider.alloc_region(len, access_of(access)?)?;
        ptr::write(out, Box::into_raw(Box::new(ReverbRegion { region })), "out")
    })
}

/// The region's memory (`reverb_region_len` bytes), or NULL for a NULL handle.
#[no_mangle]
pub extern "C" fn reverb_region_ptr(r: *const ReverbRegion) -> *mut c_void {
    ptr::read(r, "r").map(|r| r.region.as_ptr().cast()).unwrap_or(std::ptr::null_mut())
}

/// The region's length in bytes (0 for a NULL handle).
#[no_mangle]
pub extern "C" fn reverb_region_len(r: *const ReverbRegion) -> usize {
    ptr::read(r, "r").map(|r| r.region.len()).unwrap_or(0)
}

/// Describes the region for peers (`*out`), who name it in put / get.
#[no_mangle]
pub extern "C" fn reverb_region_remote(r: *const ReverbRegion, out: *mut ReverbRemote) -> c_int {
    guard(|| {
        let d = ptr::read(r, "r")?.region.remote();
        ptr::write(out, ReverbRemote { owner: d.owner, addr: d.addr, len: d.len, key: d.key }, "out")
    })
}

/// Deregisters and frees the region (NULL is ignored). Operations on it must be complete.
#[no_mangle]
pub extern "C" fn reverb_region_free(r: *mut ReverbRegion) {
    drop(ptr::take(r));
}

/// Which RMA call.
#[derive(Clone, Copy)]
enum RmaOp {
    Put,
    PutImm(u32),
    Get,
}

#[allow(clippy::too_many_arguments)]
fn rma(
    t: *mut ReverbTransport,
    local: *const ReverbRegion,
    local_offset: usize,
    remote: *const ReverbRemote,
    remote_offset: u64,
    len: usize,
    signaled: c_int,
    op: RmaOp,
    out_op: *mut u64,
) -> c_int {
    guard(|| {
        let t = ptr::handle(t, "t")?;
        let local = &ptr::read(local, "local")?.region;
        let remote = RemoteRegion::from(ptr::read(remote, "remote")?);
        let rma = Rma { local, local_offset, remote: &remote, remote_offset, len };
        let signal = if signaled != 0 { Signal::Yes } else { Signal::No };
        let id = match op {
            RmaOp::Put => t.provider.put(rma, signal)?,
            RmaOp::PutImm(imm) => t.provider.put_imm(rma, imm, signal)?,
            RmaOp::Get => t.provider.get(rma, signal)?,
        };
        if out_op.is_null() {
            return Ok(());
        }
        ptr::write(out_op, id.0, "op")
    })
}

/// One-sided write of `len` bytes from `local` at `local_offset` to `remote` at
/// `remote_offset`. With `signaled` non-zero a `REVERB_COMPLETION_PUT` reports it done (its
/// id in `*op`, which may be NULL); an unsignaled one is done when a later signaled one is.
#[no_mangle]
pub extern "C" fn reverb_put(
    t: *mut ReverbTransport,
    local: *const ReverbRegion,
    local_offset: usize,
    remote: *const ReverbRemote,
    remote_offset: u64,
    len: usize,
    signaled: c_int,
    op: *mut u64,
) -> c_int {
    rma(t, local, local_offset, remote, remote_offset, len, signaled, RmaOp::Put, op)
}

/// As `reverb_put`, and the owner sees a `REVERB_COMPLETION_IMM` carrying `imm` once the
/// data is in place.
#[no_mangle]
pub extern "C" fn reverb_put_imm(
    t: *mut ReverbTransport,
    local: *const ReverbRegion,
    local_offset: usize,
    remote: *const ReverbRemote,
    remote_offset: u64,
    len: usize,
    imm: u32,
    signaled: c_int,
    op: *mut u64,
) -> c_int {
    rma(t, local, local_offset, remote, remote_offset, len, signaled, RmaOp::PutImm(imm), op)
}

/// One-sided read of `len` bytes of `remote` at `remote_offset` into `local` at
/// `local_offset`; the data is there once its `REVERB_COMPLETION_GET` is seen.
#[no_mangle]
pub extern "C" fn reverb_get(
    t: *mut ReverbTransport,
    local: *const ReverbRegion,
    local_offset: usize,
    remote: *const ReverbRemote,
    remote_offset: u64,
    len: usize,
    signaled: c_int,
    op: *mut u64,
) -> c_int {
    rma(t, local, local_offset, remote, remote_offset, len, signaled, RmaOp::Get, op)
}

/// Tagged send of `len` bytes at `data` to `dest`. The bytes are taken before it returns
/// (`data` may be reused at once); its `REVERB_COMPLETION_SEND` has its id (`*op`).
#[no_mangle]
pub extern "C" fn reverb_send(
    t: *mut ReverbTransport,
    dest: u32,
    tag: u64,
    data: *const c_void,
    len: usize,
    op: *mut u64,
) -> c_int {
    guard(|| {
        let t = ptr::handle(t, "t")?;
        let id = t.provider.send(dest, tag, ptr::bytes(data, len, "data")?)?;
        ptr::write(op, id.0, "op")
    })
}

/// Tagged send from a registered region without a copy for large messages (the receiver
/// reads it in place): the bytes must stay unchanged until its `REVERB_COMPLETION_SEND`.
#[no_mangle]
pub extern "C" fn reverb_send_region(
    t: *mut ReverbTransport,
    dest: u32,
    tag: u64,
    region: *const ReverbRegion,
    offset: usize,
    len: usize,
    op: *mut u64,
) -> c_int {
    guard(|| {
        let t = ptr::handle(t, "t")?;
        let region = &ptr::read(region, "region")?.region;
        let id = t.provider.send_region(dest, tag, region, offset, len)?;
        ptr::write(op, id.0, "op")
    })
}

/// Posts a receive of a message from `source` (a rank or `REVERB_ANY_SOURCE`) whose tag
/// matches `tag` on the bits set in `mask`, into `region` at `offset` (at most `capacity`
/// bytes; a longer message fails it with `REVERB_ERR_TRUNCATED`).
#[no_mangle]
pub extern "C" fn reverb_recv_region(
    t: *mut ReverbTransport,
    source: i64,
    tag: u64,
    mask: u64,
    region: *const ReverbRegion,
    offset: usize,
    capacity: usize,
    op: *mut u64,
) -> c_int {
    guard(|| {
        let t = ptr::handle(t, "t")?;
        let region = ptr::read(region, "region")?.region.clone();
        let buffer = RecvBuffer::Region { region, offset, capacity };
        let id = t.provider.post_recv(source_of(source)?, TagMatch { tag, mask }, buffer)?;
        ptr::write(op, id.0, "op")
    })
}

/// As `reverb_recv_region`, into caller memory: `buf` (`capacity` bytes) must stay valid and
/// untouched until this receive's completion is returned by poll / wait, which copies the
/// message there.
#[no_mangle]
pub extern "C" fn reverb_recv(
    t: *mut ReverbTransport,
    source: i64,
    tag: u64,
    mask: u64,
    buf: *mut c_void,
    capacity: usize,
    op: *mut u64,
) -> c_int {
    guard(|| {
        let t = ptr::handle(t, "t")?;
        if buf.is_null() && capacity > 0 {
            return Err(CError::invalid(format!("buf is NULL with a capacity of {capacity}")));
        }
        let id = t.provider.post_recv(
            source_of(source)?,
            TagMatch { tag, mask },
            RecvBuffer::Owned { capacity },
        )?;
        t.into_caller.insert(id, (buf, capacity));
        ptr::write(op, id.0, "op")
    })
}

impl ReverbTransport {
    /// The C form of `c`, its bytes copied to the caller's buffer if it was a `reverb_recv`.
    fn deliver(&mut self, c: Completion) -> Result<CompletionC, CError> {
        let into = self.into_caller.remove(&c.op);
        to_c(c, |data| {
            let Some((buf, capacity)) = into else { return Ok(()) };
            let dest = ptr::bytes_mut(buf, capacity, "buf")?;
            let dest = dest.get_mut(..data.len()).ok_or_else(|| {
                CError::invalid(format!("a message of {} bytes for a {capacity}-byte buffer", data.len()))
            })?;
            dest.copy_from_slice(data);
            Ok(())
        })
    }

    /// Moves up to `out.len()` queued completions out; how many.
    fn deliver_all(&mut self, out: &mut [MaybeUninit<CompletionC>]) -> Result<usize, CError> {
        let ready: Vec<Completion> = self.scratch.drain(..out.len().min(self.scratch.len())).collect();
        let count = ready.len();
        for (slot, c) in out.iter_mut().zip(ready) {
            slot.write(self.deliver(c)?);
        }
        Ok(count)
    }
}

/// Progresses and moves up to `max` completions to `out`; their number goes to `*n` (0 if
/// none). Completions beyond `max` stay for the next call.
#[no_mangle]
pub extern "C" fn reverb_poll(
    t: *mut ReverbTransport,
    out: *mut CompletionC,
    max: usize,
    n: *mut usize,
) -> c_int {
    guard(|| {
        let t = ptr::handle(t, "t")?;
        let out = ptr::entries(out, max, "out")?;
        if t.scratch.len() < max {
            let mut more = Vec::new();
            t.provider.poll(&mut more)?;
            t.scratch.extend(more);
        }
        let count = t.deliver_all(out)?;
        ptr::write(n, count, "n")
    })
}

/// As `reverb_poll`, waiting up to `timeout_ms` for at least one completion
/// (`REVERB_ERR_TIMEOUT` if none came).
#[no_mangle]
pub extern "C" fn reverb_wait(
    t: *mut ReverbTransport,
    out: *mut CompletionC,
    max: usize,
    timeout_ms: u32,
    n: *mut usize,
) -> c_int {
    guard(|| {
        let t = ptr::handle(t, "t")?;
        let out = ptr::entries(out, max, "out")?;
        if t.scratch.is_empty() {
            let mut more = Vec::new();
            t.provider.wait(&mut more, millis(timeout_ms))?;
            t.scratch.extend(more);
        }
        let count = t.deliver_all(out)?;
        ptr::write(n, count, "n")
    })
}

/// Waits up to `timeout_ms` for operation `op`'s completion (others stay queued) and stores
/// it in `*out` (may be NULL). Returns the completion's own status: a failed operation's code.
#[no_mangle]
pub extern "C" fn reverb_wait_op(
    t: *mut ReverbTransport,
    op: u64,
    timeout_ms: u32,
    out: *mut CompletionC,
) -> c_int {
    guard(|| {
        let t = ptr::handle(t, "t")?;
        let op = OpId(op);
        let c = match t.scratch.iter().position(|c| c.op == op) {
            Some(i) => t.scratch.remove(i),
            None => t.provider.wait_op(op, millis(timeout_ms))?,
        };
        let failed = c.error().cloned();
        let c = t.deliver(c)?;
        if !out.is_null() {
            ptr::write(out, c, "out")?;
        }
        failed.map_or(Ok(()), |e| Err(e.into()))
    })
}
