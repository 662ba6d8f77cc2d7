//! GF(2^8) arithmetic with polynomial 0x11D (x^8 + x^4 + x^3 + x^2 + 1, generator 2), the field of
//! `reed-solomon-erasure`'s `galois_8`, and the per-coefficient tables the encode kernels use.

/// Low byte of the field polynomial 0x11D (the x^8 term is implicit).
const POLY_LOW: u8 = 0x1D;

/// `EXP[i]` = 2^i for i in 0..510, doubled so `EXP[log a + log b]` needs no reduction mod 255.
static EXP: [u8; 510] = exp_table();
/// `LOG[a]` for a != 0; `LOG[0]` is unused.
static LOG: [u8; 256] = log_table();

const fn exp_table() -> [u8; 510] {
    let mut table = [0u8; 510];
    let mut value: u8 = 1;
    let mut i = 0;
    while i < 510 {
        table[i] = value;
        let carry = value & 0x80 != 0;
        value <<= 1;
        if carry {
            value ^= POLY_LOW;
        }
        i += 1;
    }
    table
}

const fn log_table() -> [u8; 256] {
    let exp = exp_table();
    let mut table = [0u8; 256];
    let mut i = 0;
    while i < 255 {
        table[exp[i] as usize] = i as u8;
        i += 1;
    }
    table
}

/// a * b in GF(2^8) mod 0x11D.
pub(crate) fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        0
    } else {
        EXP[usize::from(LOG[usize::from(a)]) + usize::from(LOG[usize::from(b)])]
    }
}

/// The 256 products `c * x` for x = 0..=255: the scalar kernel's lookup row for coefficient c.
pub(crate) fn product_row(c: u8) -> [u8; 256] {
    let mut row = [0u8; 256];
    for (x, product) in row.iter_mut().enumerate() {
        *product = mul(c, x as u8);
    }
    row
}

/// Split-nibble tables for `pshufb`: bytes 0..16 hold `c * x` for x = 0..16 (low nibble), bytes
/// 32..48 hold `c * (x << 4)` (high nibble); each half is repeated so one 32-byte load fills both
/// 128-bit lanes of a ymm register. `c * x = lo[x & 15] ^ hi[x >> 4]` because multiplication by c
/// is linear over GF(2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, align(64))]
pub(crate) struct NibbleTable(pub(crate) [u8; 64]);

impl NibbleTable {
    pub(crate) fn new(c: u8) -> Self {
        let mut bytes = [0u8; 64];
        for x in 0..16u8 {
            let (lo, hi) = (mul(c, x), mul(c, x << 4));
            let x = usize::from(x);
            bytes[x] = lo;
            bytes[16 + x] = lo;
            bytes[32 + x] = hi;
            bytes[48 + x] = hi;
        }
        NibbleTable(bytes)
    }

    /// `c * x` from the two nibble lookups (the kernels' scalar tail).
    pub(crate) fn mul(&self, x: u8) -> u8 {
        self.0[usize::from(x & 0x0F)] ^ self.0[32 + usize::from(x >> 4)]
    }
}

/// The 8x8 bit matrix of "multiply by c mod 0x11D" in `gf2p8affineqb` layout.
///
/// `vgf2p8mulb` is hard-wired to 0x11B, but multiplication by a constant is linear over GF(2) in
/// any GF(2^8), so it is an affine transform with zero offset. `gf2p8affineqb` computes output bit
/// i as parity(matrix byte (7 - i) AND x); so byte (7 - i) has bit b set when bit i of c * 2^b is.
pub(crate) fn affine_matrix(c: u8) -> u64 {
    let mut matrix = 0u64;
    for b in 0..8 {
        let column = mul(c, 1 << b);
        for i in 0..8 {
            if column & (1 << i) != 0 {
                matrix |= 1u64 << (8 * (7 - i) + b);
            }
        }
    }
    matrix
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Shift-and-add multiply, independent of the log/exp tables.
    pub(crate) fn mul_slow(mut a: u8, mut b: u8) -> u8 {
        let mut product = 0u8;
        while b != 0 {
            if b & 1 != 0 {
                product ^= a;
            }
            let carry = a & 0x80 != 0;
            a <<= 1;
            if carry {
                a ^= POLY_LOW;
            }
            b >>= 1;
        }
        product
    }

    /// What `gf2p8affineqb` does to one byte with a zero offset (Intel SDM definition).
    fn affine_apply(matrix: u64, x: u8) -> u8 {
        (0..8).fold(0u8, |out, i| {
            let row = (matrix >> (8 * (7 - i))) as u8;
            out | ((((row & x).count_ones() & 1) as u8) << i)
        })
    }

    #[test]
    fn every_product_matches_shift_and_add_and_every_table_agrees() {
        for c in 0..=255u8 {
            let row = product_row(c);
            let nibbles = NibbleTable::new(c);
            let matrix = affine_matrix(c);
            for x in 0..=255u8 {
                let expected = mul_slow(c, x);
                assert_eq!(mul(c, x), expected, "{c} * {x}");
                assert_eq!(row[usize::from(x)], expected, "row {c} * {x}");
                assert_eq!(nibbles.mul(x), expected, "nibbles {c} * {x}");
                assert_eq!(affine_apply(matrix, x), expected, "affine {c} * {x}");
            }
        }
    }
}
