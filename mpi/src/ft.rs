//! reverb's extension for fault-tolerant MPI programs, in FTI's shape (declared in
//! `mpix_reverb.h`): protect memory, checkpoint it, and after a restart restore it. Messages
//! are logged without any call: under `reverb run --mpi --respawn N` with a logging protocol,
//! only the failed node's ranks roll back.

use std::ffi::{c_int, c_long, c_void};

use reverb_runtime::FIRST_USER_ENTRY;

use crate::abi::*;
use crate::errors::MpiError;
use crate::ffi;
use crate::ffi::{Out, UserBuf};
use crate::journal::JOURNAL_ENTRY;
use crate::state::call;

/// Protects `bytes` at `ptr` for every later checkpoint; the n-th call's region is restored
/// by the n-th call after a restart (call it in the same order).
pub(crate) unsafe fn mpix_reverb_protect(ptr: UserBuf, bytes: c_long) -> c_int {
    call("MPIX_Reverb_protect", MPI_COMM_WORLD, |s| {
        let len = usize::try_from(bytes).map_err(|_| MpiError::new(MPI_ERR_ARG, format!("{bytes} bytes")))?;
        // SAFETY: the contract above: `len` readable bytes (checked here, read at checkpoints).
        unsafe { ptr.bytes(len) }?;
        let id = s.protected.len() as u32;
        s.protected.insert(id, (ptr.addr(), len));
        Ok(())
    })
}

/// A coordinated checkpoint of the protected memory over MPI_COMM_WORLD (collective). Take it
/// where every message sent to this rank so far has been received.
pub(crate) fn mpix_reverb_checkpoint() -> c_int {
    call("MPIX_Reverb_checkpoint", MPI_COMM_WORLD, |s| {
        // Its tick before the checkpoint's rsn is taken: a restored rank resumes after it.
        s.tick_once()?;
        // A restarted rank resumes here with no collective running, numbering them afresh.
        s.finish_colls("MPIX_Reverb_checkpoint")?;
        s.renumber_colls();
        let regions: Vec<(u32, usize, usize)> = s.protected.iter().map(|(&id, &(p, n))| (id, p, n)).collect();
        for (id, p, n) in regions {
            // SAFETY: a region MPIX_Reverb_protect was given: `n` bytes valid until MPI_Finalize.
            let buf = unsafe { UserBuf::from_raw(p as *mut c_void) };
            // SAFETY: as above.
            let data = unsafe { buf.bytes(n) }?;
            s.rt.protect(id + FIRST_USER_ENTRY, data)?;
        }
        let journal = s.journal.encode();
        s.rt.protect(JOURNAL_ENTRY, &journal)?;
        let windows = crate::rma::recover::encode(s)?;
        s.rt.protect(crate::rma::recover::WINDOWS_ENTRY, &windows)?;
        s.rt.checkpoint(&[])?;
        Ok(())
    })
}

/// After a restart, writes the last checkpoint's copy back into the protected memory and
/// sets `*restored` to 1; 0 on a first run (or before the first checkpoint), memory untouched.
pub(crate) unsafe fn mpix_reverb_restore(restored: Out<'_, c_int>) -> c_int {
    call("MPIX_Reverb_restore", MPI_COMM_WORLD, |s| {
        s.journal.end_setup();
        // The setup's calls were counted before the checkpoint; this rank's count (its rsn)
        // stands there now, and the calls after this one tick as they did after it.
        s.ticks_on = s.rt.logging();
        s.ticked = true;
        s.finish_colls("MPIX_Reverb_restore")?;
        let mut fresh = false;
        s.rt.restore_or_else(|| {
            fresh = true;
            Vec::new()
        });
        if !fresh {
            // As the survivors did at the checkpoint this one resumes from.
            s.renumber_colls();
            let regions: Vec<(u32, usize, usize)> =
                s.protected.iter().map(|(&id, &(p, n))| (id, p, n)).collect();
            for (id, p, n) in regions {
                let copy = s.rt.restored(id + FIRST_USER_ENTRY).ok_or_else(|| {
                    MpiError::new(MPI_ERR_OTHER, format!("protected region {id} is not in the checkpoint"))
                })?;
                if copy.len() != n {
                    return Err(MpiError::new(
                        MPI_ERR_OTHER,
                        format!("protected region {id}: {n} bytes now, {} checkpointed", copy.len()),
                    ));
                }
                // SAFETY: a protected region: `n` writable bytes valid until MPI_Finalize.
                let buf = unsafe { UserBuf::from_raw(p as *mut c_void) };
                // SAFETY: as above; the program is inside this call, not touching it.
                unsafe { buf.bytes_mut(n) }?.copy_from_slice(&copy);
            }
            // The windows its setup re-created: their memory and epochs as checkpointed.
            crate::rma::recover::restore(s)?;
        }
        ffi::out(restored, c_int::from(!fresh), "restored")
    })
}

/// 1 if this process is a restarted incarnation of its rank.
pub(crate) unsafe fn mpix_reverb_restarted(flag: Out<'_, c_int>) -> c_int {
    call("MPIX_Reverb_restarted", MPI_COMM_WORLD, |s| ffi::out(flag, c_int::from(s.rt.restarted()), "flag"))
}
