//! The logger's side of the one codec ([`reverb_transport::codec`]): a [`Reader`] whose reads
//! fail with `LogError::Decode` (the codec's error as the source) instead of panicking, and
//! the record checksum.

use reverb_transport::codec;

use crate::error::Result;

/// [`codec::Reader`] for the logger's decoders, whose fields need no names in errors.
pub(crate) struct Reader<'a> {
    inner: codec::Reader<'a>,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Reader { inner: codec::Reader::new(bytes, what) }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.inner.remaining()
    }

    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        Ok(self.inner.take(n, "field")?)
    }

    pub(crate) fn u8(&mut self) -> Result<u8> {
        Ok(self.inner.u8("a u8")?)
    }

    pub(crate) fn u32(&mut self) -> Result<u32> {
        Ok(self.inner.u32("a u32")?)
    }

    pub(crate) fn u64(&mut self) -> Result<u64> {
        Ok(self.inner.u64("a u64")?)
    }
}

/// Integrity check of log records and ring headers: catches torn, stale and flipped bytes,
/// which is all the log needs (it is not an adversarial MAC). Four independent
/// multiply-rotate lanes over 8-byte words (xxHash64's round and avalanche): a 1 MiB record
/// costs tens of microseconds, where the byte-wise FNV-1a used before took over a
/// millisecond on every receiver-based delivery.
pub(crate) fn checksum(parts: &[&[u8]]) -> u32 {
    const P1: u64 = 0x9e37_79b1_85eb_ca87;
    const P2: u64 = 0xc2b2_ae3d_27d4_eb4f;
    const P3: u64 = 0x1656_67b1_9e37_79f9;
    fn round(acc: u64, word: u64) -> u64 {
        acc.wrapping_add(word.wrapping_mul(P2)).rotate_left(31).wrapping_mul(P1)
    }
    fn word(bytes: &[u8]) -> u64 {
        <[u8; 8]>::try_from(bytes).map_or(0, u64::from_le_bytes)
    }
    let mut h = P3;
    for part in parts {
        let mut lanes = [P1.wrapping_add(P2), P2, P3, P1.wrapping_neg()];
        let mut blocks = part.chunks_exact(32);
        for block in &mut blocks {
            for (lane, bytes) in lanes.iter_mut().zip(block.chunks_exact(8)) {
                *lane = round(*lane, word(bytes));
            }
        }
        h = round(h, part.len() as u64);
        for lane in lanes {
            h = round(h, lane);
        }
        let mut words = blocks.remainder().chunks_exact(8);
        for bytes in &mut words {
            h = round(h, word(bytes));
        }
        for &b in words.remainder() {
            h = (h ^ u64::from(b).wrapping_mul(P3)).rotate_left(11).wrapping_mul(P1);
        }
    }
    h ^= h >> 33;
    h = h.wrapping_mul(P2);
    h ^= h >> 29;
    h = h.wrapping_mul(P3);
    h ^= h >> 32;
    h as u32
}

#[cfg(test)]
mod tests {
    use super::checksum;

    #[test]
    fn checksum_sees_every_flipped_bit_and_part_boundaries() {
        for len in [0usize, 1, 7, 8, 31, 32, 33, 100, 4096 + 5] {
            let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(13).wrapping_add(1)).collect();
            let sum = checksum(&[&data]);
            assert_eq!(sum, checksum(&[&data]), "deterministic");
            for bit in 0..len * 8 {
                let mut flipped = data.clone();
                flipped[bit / 8] ^= 1 << (bit % 8);
                assert_ne!(checksum(&[&flipped]), sum, "len {len}: bit {bit} flipped unseen");
            }
            let mut longer = data.clone();
            longer.push(0);
            assert_ne!(checksum(&[&longer]), sum, "len {len}: a trailing zero unseen");
        }
        assert_ne!(checksum(&[b"ab", b"c"]), checksum(&[b"a", b"bc"]));
    }
}
