//! The address a shm rank publishes through the bootstrap (little-endian):
//! `pid u32 | size u32 | fifo_slots u32 | slot_size u32 | incarnation u32`. Peers map the
//! control segment it names and check its geometry against their own.

use super::control::Layout;
use crate::api::Rank;
use crate::codec::{Reader, Writer};
use crate::error::{Result, TransportError};

const ADDRESS_LEN: usize = 20;
const WHAT: &str = "shm address";

pub(super) fn encode_address(pid: u32, layout: Layout, incarnation: u32) -> Vec<u8> {
    let mut info = Vec::with_capacity(ADDRESS_LEN);
    let mut w = Writer::new(&mut info);
    w.u32(pid).u32(layout.size).u32(layout.fifo_slots).u32(layout.slot_size).u32(incarnation);
    info
}

/// Decodes `rank`'s address from untrusted bytes: (pid, layout, incarnation).
pub(super) fn decode_peer_info(bytes: &[u8], rank: Rank) -> Result<(u32, Layout, u32)> {
    if bytes.len() != ADDRESS_LEN {
        return Err(TransportError::Malformed {
            what: WHAT,
            detail: format!("rank {rank} sent {} bytes, expected {ADDRESS_LEN}", bytes.len()),
        });
    }
    let mut r = Reader::new(bytes, WHAT);
    let pid = r.u32("pid")?;
    let layout =
        Layout { size: r.u32("size")?, fifo_slots: r.u32("fifo_slots")?, slot_size: r.u32("slot_size")? };
    Ok((pid, layout, r.u32("incarnation")?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn pinned_encoding() {
        let layout = Layout { size: 2, fifo_slots: 0x0100, slot_size: 0x2040 };
        let want = [0x39, 0x30, 0, 0, 2, 0, 0, 0, 0, 1, 0, 0, 0x40, 0x20, 0, 0, 1, 0, 0, 0];
        assert_eq!(encode_address(12345, layout, 1), want);
        assert_eq!(decode_peer_info(&want, 1).unwrap(), (12345, layout, 1));
        let e = decode_peer_info(b"junk", 1).unwrap_err();
        assert!(matches!(e, TransportError::Malformed { .. }), "{e}");
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..40)) {
            prop_assert_eq!(decode_peer_info(&bytes, 0).is_ok(), bytes.len() == ADDRESS_LEN);
        }

        #[test]
        fn round_trips(pid: u32, size: u32, fifo_slots: u32, slot_size: u32, incarnation: u32) {
            let layout = Layout { size, fifo_slots, slot_size };
            prop_assert_eq!(decode_peer_info(&encode_address(pid, layout, incarnation), 0).unwrap(), (pid, layout, incarnation));
        }
    }
}
