//! The one place this crate borrows registered memory directly (serializing a checkpoint and
//! encoding parity in place, without an extra copy). Everything else copies through `Region`.

use reverb_transport::Region;

use crate::error::CkptError;

/// Borrows `len` bytes of `region` at `offset` for writing.
///
/// Callers only pass ranges that no peer writes and that no reader trusts until a later commit:
/// a slot being filled for a new epoch, or a private staging area. A peer that reads the range
/// anyway sees torn bytes, which the CRC32C checks reject.
#[allow(clippy::mut_from_ref)]
pub(crate) fn bytes_mut(region: &Region, offset: usize, len: usize) -> Result<&mut [u8], CkptError> {
    region
        .check_bounds("checkpoint slot", offset, len)
        .map_err(|e| CkptError::transport("borrowing a checkpoint slot", e))?;
    // SAFETY: in bounds (checked above) and the memory lives as long as `region`; per the
    // contract above this process is the only writer of the range while the slice lives.
    Ok(unsafe { std::slice::from_raw_parts_mut(region.as_ptr().add(offset), len) })
}

/// Borrows `len` bytes of `region` at `offset` for reading; same contract as [`bytes_mut`].
pub(crate) fn bytes(region: &Region, offset: usize, len: usize) -> Result<&[u8], CkptError> {
    // SAFETY: the caller's range is written by nobody while the slice lives (staging areas whose
    // gets have completed, or this rank's own slots); `slice` checks the bounds.
    unsafe { region.slice(offset, len) }.map_err(|e| CkptError::transport("borrowing a checkpoint slot", e))
}
