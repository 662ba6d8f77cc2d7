//! The key of the indexed queues, the posting order stamp, and the hash from key to queue.

use std::hash::Hasher;

/// What an entry is indexed by: its sender and its full tag.
pub(super) type Key = (crate::api::Rank, crate::api::Tag);

/// Position in posting (or arrival) order; smaller is earlier.
pub(super) type Seq = u64;

/// A multiply-rotate hash (rustc's FxHash, as `rustc-hash` 2 finishes it) for the two integers
/// of a key: a few cycles instead of SipHash's tens. It is not DoS-resistant, which is fine for
/// the tags of ranks of one job.
#[derive(Default)]
pub(super) struct KeyHasher(u64);

const SEED: u64 = 0xf135_7aea_2e62_a9c5;

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }
    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = self.0.wrapping_add(i).wrapping_mul(SEED);
    }
    fn finish(&self) -> u64 {
        // The product's good bits are the high ones; hashbrown indexes with the low ones.
        self.0.rotate_left(26)
    }
}
