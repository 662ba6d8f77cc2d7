//! Byte framing shared by the collectives: several ranks' pieces in one message, and a
//! vector's split into element-aligned chunks.

use std::ops::Range;

use crate::abi::*;
use crate::errors::{MpiError, MpiResult};

/// `parts` in one message, each behind its length.
pub(crate) fn frame(parts: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(parts.iter().map(|p| p.len() + 8).sum());
    for p in parts {
        out.extend_from_slice(&(p.len() as u64).to_le_bytes());
        out.extend_from_slice(p);
    }
    out
}

/// The `n` parts `frame` put in `bytes`.
pub(crate) fn unframe(bytes: &[u8], n: usize) -> MpiResult<Vec<Vec<u8>>> {
    let bad = || MpiError::new(MPI_ERR_INTERN, "a malformed collective message");
    let mut parts = Vec::with_capacity(n);
    let mut at = 0;
    for _ in 0..n {
        let len: [u8; 8] = bytes.get(at..at + 8).and_then(|b| b.try_into().ok()).ok_or_else(bad)?;
        let len = usize::try_from(u64::from_le_bytes(len)).map_err(|_| bad())?;
        at += 8;
        parts.push(bytes.get(at..at + len).ok_or_else(bad)?.to_vec());
        at += len;
    }
    Ok(parts)
}

/// `count` elements of `elem` bytes each in `chunks` chunks, the first `count % chunks` one
/// element longer than the rest.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Chunks {
    pub(crate) count: usize,
    pub(crate) elem: usize,
    pub(crate) chunks: usize,
}

impl Chunks {
    /// The elements of chunks `range`.
    pub(crate) fn elements(&self, range: Range<usize>) -> Range<usize> {
        let (base, extra) = (self.count / self.chunks, self.count % self.chunks);
        let start = |c: usize| c * base + c.min(extra);
        start(range.start)..start(range.end)
    }

    /// The bytes of chunks `range`.
    pub(crate) fn bytes(&self, range: Range<usize>) -> Range<usize> {
        let e = self.elements(range);
        e.start * self.elem..e.end * self.elem
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_chunks_tile_the_vector() {
        let parts = vec![vec![1, 2, 3], vec![], vec![9]];
        assert_eq!(unframe(&frame(&parts), 3).expect("framed"), parts);
        assert!(unframe(&frame(&parts)[..5], 3).is_err());
        let c = Chunks { count: 10, elem: 4, chunks: 4 };
        assert_eq!(c.elements(0..1), 0..3);
        assert_eq!(c.elements(1..2), 3..6);
        assert_eq!(c.elements(3..4), 8..10);
        assert_eq!(c.bytes(0..4), 0..40);
        let few = Chunks { count: 2, elem: 8, chunks: 4 };
        assert_eq!(few.elements(2..4), 2..2);
    }
}
