//! The connection data a verbs rank publishes through the bootstrap (little-endian):
//!
//! ```text
//! 0:  magic "VBVR" u32 | version u32 | qp count u32 | lid u16 | gid_index u8 | mtu u8
//! 16: gid [16] | slots u32 | slot_size u32 | credit_addr u64 | credit_rkey u32 | pid u32
//! 56: boot u64 | incarnation u32 | wireup qpn u32 | wireup qkey u32 | zero padding to 80
//! 80: per peer: qpn u32 | psn u32
//! ```
//!
//! The per-peer list is empty with on-demand connections (the default: O(1) bytes per rank,
//! the RC QPs are made through the wireup channel on first traffic) and has one entry per rank
//! with `REVERB_VERBS_CONNECT=all`, where every QP is connected at open.

use crate::api::Rank;
use crate::codec::{Reader, Writer};
use crate::error::{Result, TransportError};

const ADDR_MAGIC: u32 = 0x5256_4256; // "VBVR" on the wire
const ADDR_VERSION: u32 = 3;
const ADDR_HEADER_LEN: usize = 80;
/// Bytes of the fields before the padding.
const ADDR_FIELDS_LEN: usize = 76;

/// This rank's connection data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RankAddress {
    pub(super) lid: u16,
    pub(super) gid: [u8; 16],
    pub(super) gid_index: u8,
    pub(super) mtu: u8,
    pub(super) slots: u32,
    pub(super) slot_size: u32,
    pub(super) credit_addr: u64,
    pub(super) credit_rkey: u32,
    pub(super) pid: u32,
    pub(super) boot: u64,
    pub(super) incarnation: u32,
    /// The wireup channel: our UD QP and its qkey.
    pub(super) ud_qpn: u32,
    pub(super) ud_qkey: u32,
    /// Per peer: (qpn, psn) of the QP we created for it; empty with on-demand connections.
    pub(super) qps: Vec<(u32, u32)>,
}

impl RankAddress {
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(ADDR_HEADER_LEN + 8 * self.qps.len());
        let mut w = Writer::new(&mut b);
        w.u32(ADDR_MAGIC).u32(ADDR_VERSION).u32(self.qps.len() as u32);
        w.u16(self.lid).u8(self.gid_index).u8(self.mtu).raw(&self.gid);
        w.u32(self.slots).u32(self.slot_size).u64(self.credit_addr).u32(self.credit_rkey);
        w.u32(self.pid).u64(self.boot).u32(self.incarnation).u32(self.ud_qpn).u32(self.ud_qkey);
        w.zeros(ADDR_HEADER_LEN - ADDR_FIELDS_LEN);
        for &(qpn, psn) in &self.qps {
            w.u32(qpn).u32(psn);
        }
        b
    }

    /// Decodes `rank`'s address in a job of `size` ranks: a QP list of none or `size` entries.
    pub(super) fn decode(b: &[u8], rank: Rank, size: u32) -> Result<RankAddress> {
        let bad = |detail: String| TransportError::Malformed {
            what: "verbs address",
            detail: format!("rank {rank}: {detail}"),
        };
        if b.len() < ADDR_HEADER_LEN {
            return Err(bad(format!("{} bytes, at least {ADDR_HEADER_LEN} expected", b.len())));
        }
        let mut r = Reader::new(b, "verbs address");
        let (magic, version, count) = (r.u32("magic")?, r.u32("version")?, r.u32("qp count")?);
        if magic != ADDR_MAGIC || version != ADDR_VERSION || (count != size && count != 0) {
            return Err(bad("bad magic, version or job size".into()));
        }
        let expected = ADDR_HEADER_LEN + 8 * count as usize;
        if b.len() != expected {
            return Err(bad(format!("{} bytes, expected {expected}", b.len())));
        }
        let mut address = RankAddress {
            lid: r.u16("lid")?,
            gid_index: r.u8("gid_index")?,
            mtu: r.u8("mtu")?,
            gid: r.array("gid")?,
            slots: r.u32("slots")?,
            slot_size: r.u32("slot_size")?,
            credit_addr: r.u64("credit_addr")?,
            credit_rkey: r.u32("credit_rkey")?,
            pid: r.u32("pid")?,
            boot: r.u64("boot")?,
            incarnation: r.u32("incarnation")?,
            ud_qpn: r.u32("wireup qpn")?,
            ud_qkey: r.u32("wireup qkey")?,
            qps: Vec::with_capacity(count as usize),
        };
        r.skip(ADDR_HEADER_LEN - ADDR_FIELDS_LEN, "padding")?;
        for _ in 0..count {
            address.qps.push((r.u32("qpn")?, r.u32("psn")?));
        }
        r.finish()?;
        Ok(address)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample(qps: Vec<(u32, u32)>) -> RankAddress {
        RankAddress {
            lid: 0x0102,
            gid: [0xfe; 16],
            gid_index: 3,
            mtu: 5,
            slots: 64,
            slot_size: 0x2000,
            credit_addr: 0x1122_3344_5566_7788,
            credit_rkey: 0xabcd,
            pid: 4242,
            boot: 9,
            incarnation: 1,
            ud_qpn: 0x33,
            ud_qkey: 0x4455,
            qps,
        }
    }

    /// Version 3 bytes, written out by hand: old and new ranks must agree.
    #[test]
    fn pinned_encoding() {
        let b = sample(vec![(0x10, 0x20), (0x30, 0x40)]).encode();
        let mut want = b"VBVR\x03\0\0\0\x02\0\0\0\x02\x01\x03\x05".to_vec();
        want.extend_from_slice(&[0xfe; 16]);
        want.extend_from_slice(&[64, 0, 0, 0, 0, 0x20, 0, 0]);
        want.extend_from_slice(&[0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0xcd, 0xab, 0, 0]);
        want.extend_from_slice(&[0x92, 0x10, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0]);
        want.extend_from_slice(&[0x33, 0, 0, 0, 0x55, 0x44, 0, 0]);
        want.resize(ADDR_HEADER_LEN, 0);
        want.extend_from_slice(&[0x10, 0, 0, 0, 0x20, 0, 0, 0, 0x30, 0, 0, 0, 0x40, 0, 0, 0]);
        assert_eq!(b, want);
        assert_eq!(RankAddress::decode(&want, 1, 2).unwrap(), sample(vec![(0x10, 0x20), (0x30, 0x40)]));
        assert!(RankAddress::decode(&want, 1, 3).is_err());
        // On demand: no QP list, the same header for any job size.
        let short = sample(vec![]).encode();
        assert_eq!(short.len(), ADDR_HEADER_LEN);
        assert_eq!(&short[..8], b"VBVR\x03\0\0\0");
        assert_eq!(RankAddress::decode(&short, 1, 1000).unwrap(), sample(vec![]));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..160), size in 0u32..12) {
            let _ = RankAddress::decode(&bytes, 0, size);
            let mut framed = bytes.clone();
            framed.resize(ADDR_HEADER_LEN + 8 * size as usize, 0);
            framed[..12].copy_from_slice(&[0x56, 0x42, 0x56, 0x52, 3, 0, 0, 0, size as u8, 0, 0, 0]);
            let _ = RankAddress::decode(&framed, 0, size);
        }

        #[test]
        fn round_trips_what_the_encoder_wrote(
            qps in prop::collection::vec(any::<(u32, u32)>(), 0..8), lid: u16, credit_addr: u64, boot: u64,
        ) {
            let a = RankAddress { lid, credit_addr, boot, ..sample(qps) };
            let size = a.qps.len() as u32;
            prop_assert_eq!(RankAddress::decode(&a.encode(), 2, size).unwrap(), a);
        }
    }
}
