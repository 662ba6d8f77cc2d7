//! Memory a caller lends to one receive ([`Borrowed`], [`crate::RecvBuffer::Borrowed`]): the
//! payload lands in the application's own buffer, with no copy out of a receive region and
//! no registration. Only a claim on a provider whose reads are load/store
//! ([`crate::Capabilities::SYNC_RMA`]) takes it, which writes it before returning; every
//! other receive refuses it, so no write can come after the lender moved on.

use std::ptr::NonNull;

use crate::error::{Result, TransportError};

/// `len` bytes at `ptr`, lent for the duration of one claimed receive.
#[derive(Debug, Clone, Copy)]
pub struct Borrowed {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the lender hands the memory over for the receive alone (see `Borrowed::new`);
// moving the handle to the thread that does the copy shares nothing else.
unsafe impl Send for Borrowed {}

impl Borrowed {
    /// Lends `buf`.
    ///
    /// # Safety
    /// `buf` must stay valid, and untouched by anyone else, until the receive it is given to
    /// has completed (a claim returned).
    pub unsafe fn new(buf: &mut [u8]) -> Borrowed {
        let len = buf.len();
        Borrowed { ptr: NonNull::from(buf).cast(), len }
    }

    /// Bytes lent.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is lent.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The lent memory's start, for a writer that is not a slice copy (a cross-memory read);
    /// it writes at most `len()` bytes.
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Copies `data` in at `at`; `Truncated` when it does not fit.
    pub fn write(&self, at: usize, data: &[u8]) -> Result<()> {
        let end = at.checked_add(data.len()).filter(|&end| end <= self.len);
        if end.is_none() {
            let len = (at as u64).saturating_add(data.len() as u64);
            return Err(TransportError::Truncated { len, capacity: self.len as u64 });
        }
        // SAFETY: at + data.len() <= len, checked above, so the range lies inside the lent
        // buffer, which `new`'s caller keeps valid and unaliased until the receive completes;
        // `data` is another object (a slot, a region, an arrival's buffer).
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(at), data.len()) };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_land_inside_and_overruns_are_refused() {
        let mut buf = [0u8; 8];
        // SAFETY: `buf` outlives `b` and nothing else touches it meanwhile.
        let b = unsafe { Borrowed::new(&mut buf) };
        b.write(2, b"abc").unwrap();
        assert!(matches!(b.write(6, b"abc"), Err(TransportError::Truncated { len: 9, capacity: 8 })));
        assert!(b.write(usize::MAX, b"a").is_err());
        assert_eq!(&buf, b"\0\0abc\0\0\0");
    }
}
