//! The consumer's own buffers handed to the transport, where libfabric's rules let them be:
//! a send's buffer and a receive's buffer are the provider's until their completion is read.
//! On the shm carrier a large send is then read by its receiver where it is (cross-memory
//! attach), and a message lands straight in the receive's buffer: one copy in all, where
//! staging and an owned landing cost three.
//!
//! Like [`crate::obj::copy_to_lent`], these take the buffers of [`crate::core::SendArgs`] and
//! [`crate::core::RecvArgs`], which `ep` builds only from a consumer's call, as lent under
//! those rules.

use reverb_transport::borrowed::Borrowed;
use reverb_transport::completion::Owner;
use reverb_transport::{OpId, Provider, Rank, RecvBuffer, Source, Tag, TagMatch};

use crate::error::{OfiError, Result};

/// Sends `payload` lent until the send's completion: read in place when the carrier lends to
/// `dest` ([`Provider::lends_to`]), else copied as any send.
///
/// `payload` is the buffer of a send posted without `FI_INJECT`: the consumer leaves it alone
/// until the send's completion is read (or the endpoint is closed).
pub fn send(provider: &mut dyn Provider, dest: Rank, tag: Tag, payload: &[u8]) -> Result<OpId> {
    // SAFETY: the bytes hold still until the `Send` completion, which the endpoint takes from
    // the queue before reporting it.
    Ok(unsafe { provider.send_lent_for(Owner::APP, dest, tag, payload) }?)
}

/// Posts a receive whose message lands in the consumer's `len` bytes at `buf` (a longer one
/// comes back owned in the completion).
///
/// `buf` holds `len` writable bytes, the buffer of a posted receive: the consumer leaves it
/// alone until the receive's completion is read, the receive is cancelled, or the endpoint is
/// closed (which drops `provider`). A null or empty one is refused: see [`lends_into`].
pub fn post_recv(
    provider: &mut dyn Provider,
    source: Source,
    matching: TagMatch,
    buf: usize,
    len: usize,
) -> Result<OpId> {
    if !lends_into(buf, len) {
        return Err(OfiError::Invalid("no memory to lend to a receive"));
    }
    // SAFETY: the receive's `len` writable bytes at `buf`, its alone until it completes.
    let memory = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, len) };
    // SAFETY: as above, until the completion is taken, a cancel, or the provider's drop:
    // `Borrowed::posted`'s contract.
    let lent = unsafe { Borrowed::posted(memory) };
    Ok(provider.post_recv(source, matching, RecvBuffer::Borrowed(lent))?)
}

/// Whether a receive buffer (`len` bytes at `buf`) can be lent: a null or empty one cannot
/// (it still takes an empty message, or CQ data alone, owned).
pub fn lends_into(buf: usize, len: usize) -> bool {
    buf != 0 && len > 0
}

/// Moves a message that landed in place with 8 bytes of CQ data first (`len` bytes at
/// `buf`) to the front of the buffer: the data word, and the payload's length.
///
/// `buf` holds `len` writable bytes, the buffer of a receive that just completed and whose
/// completion is not reported yet.
pub fn split_data(buf: usize, len: usize) -> (u64, usize) {
    const WORD: usize = 8;
    if len < WORD {
        return (0, len);
    }
    let mut word = [0u8; WORD];
    // SAFETY: `len >= 8` bytes at `buf`, the receive's until its completion is reported; the data
    // word is copied out before the payload moves over it (`copy` allows the overlap).
    unsafe {
        std::ptr::copy_nonoverlapping(buf as *const u8, word.as_mut_ptr(), WORD);
        std::ptr::copy((buf + WORD) as *const u8, buf as *mut u8, len - WORD);
    }
    (u64::from_le_bytes(word), len - WORD)
}
