//! The one little-endian codec of every wire and on-disk format (bootstrap frames, verbs
//! addresses, remote region descriptors, message slot headers, envelopes and piggybacked
//! determinants, log ring records, logger hellos and start-up exchanges, endpoint snapshots,
//! communication rows, checkpoint image headers).
//!
//! - [`Writer`] appends fields to a [`Sink`]: a `Vec<u8>` that grows, or a [`Fixed`] array for
//!   fixed-size headers built on a hot path (its positions fold to constants once inlined).
//! - [`Reader`] reads fields from untrusted bytes: every read is bounds-checked and fails with a
//!   [`CodecError`] naming the format and the field, never panics and never allocates.

use thiserror::Error;

/// Why bytes could not be decoded. The layers' errors keep it as their source
/// (`TransportError::Decode`, and the logger's and logger core's `Decode`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CodecError {
    /// The input ends before a field does.
    #[error("{what}: {field} needs {need} more bytes, {have} left")]
    Short {
        /// The format being decoded.
        what: &'static str,
        /// The field that did not fit.
        field: &'static str,
        /// Bytes the field needs.
        need: usize,
        /// Bytes left in the input.
        have: usize,
    },
    /// Bytes remain after the last field.
    #[error("{what}: {count} trailing bytes")]
    Trailing {
        /// The format being decoded.
        what: &'static str,
        /// Bytes left over.
        count: usize,
    },
}

impl CodecError {
    /// The format being decoded.
    pub fn what(&self) -> &'static str {
        match self {
            CodecError::Short { what, .. } | CodecError::Trailing { what, .. } => what,
        }
    }

    /// What is wrong, without the format's name.
    pub fn detail(&self) -> String {
        match self {
            CodecError::Short { field, need, have, .. } => {
                format!("{field} needs {need} more bytes, {have} left")
            }
            CodecError::Trailing { count, .. } => format!("{count} trailing bytes"),
        }
    }
}

/// Where a [`Writer`] puts its bytes.
pub trait Sink {
    /// Appends `bytes` after what was written so far.
    fn put(&mut self, bytes: &[u8]);
}

impl Sink for Vec<u8> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// A fixed-size buffer filled front to back, the rest left zero. Writing past its end is a
/// bug in the (fixed-layout) encoder, not something input can cause, and panics.
#[derive(Debug, Clone)]
pub struct Fixed<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> Fixed<N> {
    /// An empty buffer.
    pub fn new() -> Self {
        Fixed { buf: [0; N], len: 0 }
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was written yet.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The whole buffer, zero after the bytes written.
    pub fn into_array(self) -> [u8; N] {
        self.buf
    }
}

impl<const N: usize> Default for Fixed<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Sink for Fixed<N> {
    #[inline]
    fn put(&mut self, bytes: &[u8]) {
        self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }
}

/// Appends little-endian fields to a sink.
pub struct Writer<'a, S: Sink + ?Sized> {
    sink: &'a mut S,
}

impl<'a, S: Sink + ?Sized> Writer<'a, S> {
    #[inline]
    /// A writer appending to `sink`.
    pub fn new(sink: &'a mut S) -> Self {
        Writer { sink }
    }

    #[inline]
    /// Appends a little-endian `u8`.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.sink.put(&[v]);
        self
    }

    #[inline]
    /// Appends a little-endian `u16`.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.sink.put(&v.to_le_bytes());
        self
    }

    #[inline]
    /// Appends a little-endian `u32`.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.sink.put(&v.to_le_bytes());
        self
    }

    #[inline]
    /// Appends a little-endian `u64`.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.sink.put(&v.to_le_bytes());
        self
    }

    /// Raw bytes, no length.
    #[inline]
    pub fn raw(&mut self, bytes: &[u8]) -> &mut Self {
        self.sink.put(bytes);
        self
    }

    /// `n` zero bytes (reserved fields, padding).
    #[inline]
    pub fn zeros(&mut self, n: usize) -> &mut Self {
        const ZEROS: [u8; 64] = [0; 64];
        let mut left = n;
        while left > 0 {
            let k = left.min(ZEROS.len());
            self.sink.put(&ZEROS[..k]);
            left -= k;
        }
        self
    }

    /// `len u32 | bytes`. The caller bounds the length (every format's limit is far below
    /// `u32::MAX`); a longer slice is a bug and panics rather than writing a wrong length.
    #[inline]
    pub fn bytes32(&mut self, bytes: &[u8]) -> &mut Self {
        let len = u32::try_from(bytes.len()).expect("length-prefixed field over 4 GiB");
        self.u32(len).raw(bytes)
    }
}

/// Reads little-endian fields from the front of untrusted bytes.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// `what` names the format in errors.
    #[inline]
    pub fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Reader { bytes, what }
    }

    /// Bytes not read yet.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.bytes.len()
    }

    /// The bytes not read yet, consuming the reader.
    #[inline]
    pub fn rest(self) -> &'a [u8] {
        self.bytes
    }

    /// Fails unless every byte was read.
    pub fn finish(&self) -> Result<(), CodecError> {
        match self.bytes.len() {
            0 => Ok(()),
            count => Err(CodecError::Trailing { what: self.what, count }),
        }
    }

    #[cold]
    fn short(&self, field: &'static str, need: usize) -> CodecError {
        CodecError::Short { what: self.what, field, need, have: self.bytes.len() }
    }

    /// The next `n` bytes.
    #[inline]
    pub fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], CodecError> {
        if n > self.bytes.len() {
            return Err(self.short(field, n));
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Ok(head)
    }

    /// The next `N` bytes as an array.
    #[inline]
    pub fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], CodecError> {
        match self.bytes.split_first_chunk::<N>() {
            Some((head, tail)) => {
                self.bytes = tail;
                Ok(*head)
            }
            None => Err(self.short(field, N)),
        }
    }

    #[inline]
    /// Reads a little-endian `u8` called `field` (for the error).
    pub fn u8(&mut self, field: &'static str) -> Result<u8, CodecError> {
        Ok(self.array::<1>(field)?[0])
    }

    #[inline]
    /// Reads a little-endian `u16` called `field` (for the error).
    pub fn u16(&mut self, field: &'static str) -> Result<u16, CodecError> {
        self.array(field).map(u16::from_le_bytes)
    }

    #[inline]
    /// Reads a little-endian `u32` called `field` (for the error).
    pub fn u32(&mut self, field: &'static str) -> Result<u32, CodecError> {
        self.array(field).map(u32::from_le_bytes)
    }

    #[inline]
    /// Reads a little-endian `u64` called `field` (for the error).
    pub fn u64(&mut self, field: &'static str) -> Result<u64, CodecError> {
        self.array(field).map(u64::from_le_bytes)
    }

    /// `len u32 | bytes`, borrowed: nothing is allocated, so a huge length costs nothing.
    #[inline]
    pub fn bytes32(&mut self, field: &'static str) -> Result<&'a [u8], CodecError> {
        let n = self.u32(field)? as usize;
        self.take(n, field)
    }

    /// Skips `n` bytes (reserved fields, padding) without checking their value.
    #[inline]
    pub fn skip(&mut self, n: usize, field: &'static str) -> Result<(), CodecError> {
        self.take(n, field).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn pinned_encoding() {
        let mut out = Vec::new();
        Writer::new(&mut out)
            .u8(1)
            .u16(0x0302)
            .u32(0x0706_0504)
            .u64(0x0f0e_0d0c_0b0a_0908)
            .bytes32(b"xy")
            .zeros(2);
        assert_eq!(out, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 2, 0, 0, 0, b'x', b'y', 0, 0]);
        let mut fixed = Fixed::<8>::new();
        Writer::new(&mut fixed).u16(0xbeef).zeros(1).u8(7);
        assert_eq!(fixed.len(), 4);
        assert_eq!(fixed.into_array(), [0xef, 0xbe, 0, 7, 0, 0, 0, 0]);
    }

    #[test]
    fn short_input_names_the_field() {
        let mut r = Reader::new(&[1, 2, 3], "sample");
        assert_eq!(r.u16("first"), Ok(0x0201));
        let err = r.u32("second").unwrap_err();
        assert_eq!(err, CodecError::Short { what: "sample", field: "second", need: 4, have: 1 });
        assert_eq!(err.to_string(), "sample: second needs 4 more bytes, 1 left");
        assert_eq!(r.finish(), Err(CodecError::Trailing { what: "sample", count: 1 }));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            let mut r = Reader::new(&bytes, "arbitrary");
            let _ = (r.u8("a"), r.u64("b"), r.bytes32("c"), r.u16("d"), r.skip(3, "e"), r.finish());
        }

        #[test]
        fn round_trips(a: u8, b: u16, c: u32, d: u64, e in prop::collection::vec(any::<u8>(), 0..40)) {
            let mut out = Vec::new();
            Writer::new(&mut out).u8(a).u16(b).u32(c).u64(d).bytes32(&e);
            let mut r = Reader::new(&out, "round trip");
            prop_assert_eq!(r.u8("a")?, a);
            prop_assert_eq!(r.u16("b")?, b);
            prop_assert_eq!(r.u32("c")?, c);
            prop_assert_eq!(r.u64("d")?, d);
            prop_assert_eq!(r.bytes32("e")?, &e[..]);
            prop_assert!(r.finish().is_ok());
        }
    }
}
