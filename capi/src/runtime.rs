//! The fault-tolerant runtime from C, in FTI's shape: protect memory, checkpoint, and after a
//! restart restore it; messages go through the runtime, which logs them, so only the failed
//! node rolls back.

use std::ffi::{c_int, c_void};

use reverb_runtime::{Runtime, FIRST_USER_ENTRY};

use crate::ptr;
use crate::status::{guard, CError, REVERB_ERR_TRUNCATED};
use crate::transport::REVERB_ANY_SOURCE;

/// One rank of a fault-tolerant job.
pub struct ReverbRuntime {
    runtime: Option<Runtime>,
    /// What `reverb_runtime_protect` registered: (id, memory, bytes), read at each checkpoint.
    protected: Vec<(u32, *mut c_void, usize)>,
}

impl ReverbRuntime {
    fn runtime(&mut self) -> Result<&mut Runtime, CError> {
        self.runtime.as_mut().ok_or_else(|| CError::invalid("the runtime was finalized"))
    }
}

/// The runtime's entry id of the application's protected id `id`.
fn entry(id: u32) -> Result<u32, CError> {
    id.checked_add(FIRST_USER_ENTRY).ok_or_else(|| CError::invalid(format!("protected id {id} is too large")))
}

/// Joins the fault-tolerant job this process was started in (`reverb run`, with
/// `--respawn N` for recovery); a restarted rank recovers here. Collective.
#[no_mangle]
pub extern "C" fn reverb_runtime_init(out: *mut *mut ReverbRuntime) -> c_int {
    guard(|| {
        ptr::check_out(out, "out")?;
        let runtime = Runtime::init()?;
        let rt = ReverbRuntime { runtime: Some(runtime), protected: Vec::new() };
        ptr::write(out, Box::into_raw(Box::new(rt)), "out")
    })
}

/// This rank's number (`UINT32_MAX` for a NULL or finalized handle).
#[no_mangle]
pub extern "C" fn reverb_runtime_rank(rt: *const ReverbRuntime) -> u32 {
    let rt = ptr::read(rt, "rt").ok().and_then(|r| r.runtime.as_ref());
    rt.map(Runtime::rank).unwrap_or(u32::MAX)
}

/// The number of ranks (0 for a NULL or finalized handle).
#[no_mangle]
pub extern "C" fn reverb_runtime_size(rt: *const ReverbRuntime) -> u32 {
    let rt = ptr::read(rt, "rt").ok().and_then(|r| r.runtime.as_ref());
    rt.map(Runtime::size).unwrap_or(0)
}

/// 1 if this process is a restarted incarnation of its rank, else 0.
#[no_mangle]
pub extern "C" fn reverb_runtime_restarted(rt: *const ReverbRuntime) -> c_int {
    let rt = ptr::read(rt, "rt").ok().and_then(|r| r.runtime.as_ref());
    c_int::from(rt.is_some_and(Runtime::restarted))
}

/// Protects `bytes` at `data` under `id` (as FTI_Protect): every checkpoint copies them, and
/// `reverb_runtime_restore` writes them back after a restart. The memory must stay valid
/// while the runtime is open; protecting an id again replaces it.
#[no_mangle]
pub extern "C" fn reverb_runtime_protect(
    rt: *mut ReverbRuntime,
    id: u32,
    data: *mut c_void,
    bytes: usize,
) -> c_int {
    guard(|| {
        let rt = ptr::handle(rt, "rt")?;
        entry(id)?;
        ptr::bytes(data, bytes, "data")?;
        rt.protected.retain(|(i, _, _)| *i != id);
        rt.protected.push((id, data, bytes));
        Ok(())
    })
}

/// Coordinated checkpoint of the protected memory (collective); its epoch goes to `*epoch`
/// (may be NULL; 0 with checkpoints off).
#[no_mangle]
pub extern "C" fn reverb_runtime_checkpoint(rt: *mut ReverbRuntime, epoch: *mut u64) -> c_int {
    guard(|| {
        let rt = ptr::handle(rt, "rt")?;
        let protected = rt.protected.clone();
        let runtime = rt.runtime()?;
        for (id, data, bytes) in protected {
            runtime.protect(entry(id)?, ptr::bytes(data, bytes, "protected memory")?)?;
        }
        let committed = runtime.checkpoint(&[])?.unwrap_or(0);
        if epoch.is_null() {
            return Ok(());
        }
        ptr::write(epoch, committed, "epoch")
    })
}

/// After a restart, writes the last checkpoint's copy back into every protected region and
/// sets `*restored` to 1; a rank with nothing to restore (its first run, or no checkpoint
/// yet) gets 0 and its memory untouched. Protect first, then restore, as FTI_Recover.
#[no_mangle]
pub extern "C" fn reverb_runtime_restore(rt: *mut ReverbRuntime, restored: *mut c_int) -> c_int {
    guard(|| {
        let rt = ptr::handle(rt, "rt")?;
        let protected = rt.protected.clone();
        let runtime = rt.runtime()?;
        let mut fresh = false;
        runtime.restore_or_else(|| {
            fresh = true;
            Vec::new()
        });
        if !fresh {
            for (id, data, bytes) in protected {
                let copy = runtime
                    .restored(entry(id)?)
                    .ok_or_else(|| CError::invalid(format!("protected id {id} is not in the checkpoint")))?;
                if copy.len() != bytes {
                    let had = copy.len();
                    return Err(CError::invalid(format!(
                        "protected id {id}: {bytes} bytes now, {had} checkpointed"
                    )));
                }
                ptr::bytes_mut(data, bytes, "protected memory")?.copy_from_slice(&copy);
            }
        }
        ptr::write(restored, c_int::from(!fresh), "restored")
    })
}

/// Sends `len` bytes at `data` to `dest` under `tag` (logged; resent to a restarted peer).
#[no_mangle]
pub extern "C" fn reverb_runtime_send(
    rt: *mut ReverbRuntime,
    dest: u32,
    tag: u64,
    data: *const c_void,
    len: usize,
) -> c_int {
    guard(|| {
        let rt = ptr::handle(rt, "rt")?;
        let payload = ptr::bytes(data, len, "data")?;
        Ok(rt.runtime()?.send(dest, tag, payload)?)
    })
}

/// Receives the next message under `tag` from `source` (a rank or `REVERB_ANY_SOURCE`) into
/// `buf` (`capacity` bytes). Its length goes to `*len` and its sender to `*from` (either may
/// be NULL). A longer message fills `buf` and returns `REVERB_ERR_TRUNCATED` with `*len` its
/// full length.
#[no_mangle]
pub extern "C" fn reverb_runtime_recv(
    rt: *mut ReverbRuntime,
    source: i64,
    tag: u64,
    buf: *mut c_void,
    capacity: usize,
    len: *mut usize,
    from: *mut u32,
) -> c_int {
    guard(|| {
        let rt = ptr::handle(rt, "rt")?;
        let buf = ptr::bytes_mut(buf, capacity, "buf")?;
        let runtime = rt.runtime()?;
        let msg = match source {
            REVERB_ANY_SOURCE => runtime.recv_any(tag)?,
            s => {
                let s = u32::try_from(s).map_err(|_| CError::invalid(format!("source {s}")))?;
                runtime.recv_from(s, tag)?
            }
        };
        let n = msg.payload.len().min(capacity);
        buf[..n].copy_from_slice(&msg.payload[..n]);
        if !len.is_null() {
            ptr::write(len, msg.payload.len(), "len")?;
        }
        if !from.is_null() {
            ptr::write(from, msg.source, "from")?;
        }
        if msg.payload.len() > capacity {
            let message = format!("message of {} bytes, buffer of {capacity}", msg.payload.len());
            return Err(CError { code: REVERB_ERR_TRUNCATED, message });
        }
        Ok(())
    })
}

/// Collective shutdown (drains the logs, writes the report), then frees `rt` whatever the
/// result (NULL is ignored).
#[no_mangle]
pub extern "C" fn reverb_runtime_finalize(rt: *mut ReverbRuntime) -> c_int {
    let Some(mut rt) = ptr::take(rt) else { return crate::status::REVERB_OK };
    guard(move || match rt.runtime.take() {
        Some(runtime) => runtime.finalize().map(drop).map_err(CError::from),
        None => Ok(()),
    })
}
