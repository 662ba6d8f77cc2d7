//! Memory a caller lends to one receive ([`Borrowed`], [`crate::RecvBuffer::Borrowed`]): the
//! payload lands in the application's own buffer, with no copy out of a receive region and
//! no registration. Only a claim on a provider whose reads are load/store
//! ([`crate::Capabilities::SYNC_RMA`]) takes it, which writes it before returning; every
//! other receive refuses it, so no write can come after the lender moved on. The one
//! exception is memory lent to a posted receive ([`Borrowed::posted`], libfabric's rule for a
//! receive buffer): the shm provider keeps it until a message lands, and a message longer than
//! it comes back owned instead ([`Borrowed::falls_back`]).

use std::ptr::NonNull;

use crate::error::{Result, TransportError};

/// `len` bytes at `ptr`, lent for the duration of one claimed receive.
#[derive(Debug, Clone, Copy)]
pub struct Borrowed {
    ptr: NonNull<u8>,
    len: usize,
    /// Lent to a posted receive: kept until a message lands; a longer one comes back owned.
    posted: bool,
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
        Borrowed { ptr: NonNull::from(buf).cast(), len, posted: false }
    }

    /// Lends `buf` to a receive that may wait for its message (the shm provider's
    /// `post_recv_for`): a message that fits lands in it, a longer one comes back owned in
    /// the completion (`data`), leaving `buf` as it was.
    ///
    /// # Safety
    /// `buf` must stay valid, and untouched by anyone else, until the receive's completion is
    /// taken from its owner's queue, `cancel_recv` took the receive back, or the provider is
    /// dropped.
    pub unsafe fn posted(buf: &mut [u8]) -> Borrowed {
        // SAFETY: the caller's contract covers `new`'s.
        Borrowed { posted: true, ..unsafe { Borrowed::new(buf) } }
    }

    /// Whether this memory was lent to a posted receive ([`Borrowed::posted`]).
    pub fn is_posted(&self) -> bool {
        self.posted
    }

    /// Whether a message of `len` bytes comes back owned rather than landing here: too long
    /// for memory lent to a posted receive.
    pub fn falls_back(&self, len: usize) -> bool {
        self.posted && len > self.len
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
