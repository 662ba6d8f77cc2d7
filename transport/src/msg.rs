//! The message header both providers put in front of every eager slot: tagged data, rendezvous
//! control (RTS/FIN) and put-with-immediate notices. Always read from a peer, so every field is
//! validated before use. Encoded with the codec ([`crate::codec`]), little-endian.

use crate::codec::{CodecError, Fixed, Reader, Writer};

/// Message kinds.
pub mod kind {
    /// Tagged data carried in the slot itself.
    pub const EAGER: u32 = 1;
    /// Rendezvous announcement: the receiver reads the message from the sender's region.
    pub const RTS: u32 = 2;
    /// Rendezvous done: the receiver's answer to an RTS, with a [`super::fin`] status.
    pub const FIN: u32 = 3;
    /// Target-side notice of a `put_imm` (the data was written before it).
    pub const IMM: u32 = 4;
    /// Receiver to sender: "your message number `r_len` lands in this registered buffer"
    /// (see [`crate::advert`]).
    pub const ADVERT: u32 = 5;
    /// Sender to receiver: message number `r_len` was written into the advertised buffer.
    pub const DIRECT_FIN: u32 = 6;
    /// Rendezvous announcement of bytes the sender lends in its own memory (shm, cross-memory
    /// attach): the receiver reads `len` bytes at `r_addr` of the sender's process.
    pub const RTS_LENT: u32 = 7;
}

/// Header of every ring slot. Read from a peer, so every field is validated before use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlotHeader {
    /// One of [`kind`]; anything else is malformed.
    pub kind: u32,
    /// Immediate for IMM; status for FIN (0 = ok); [`advert_flags`] for ADVERT.
    pub imm: u32,
    /// The message tag (EAGER, RTS, DIRECT_FIN; echoed in FIN); the tag an ADVERT accepts.
    pub tag: u64,
    /// Eager payload length, or the full message / put length; an ADVERT's buffer capacity.
    pub len: u64,
    /// Sender's operation cookie, echoed in FIN; the receive id in ADVERT and DIRECT_FIN.
    pub cookie: u64,
    /// RTS: where the receiver reads the message from; ADVERT: the receiver's region base.
    pub r_addr: u64,
    /// RTS: length of the sender's region; ADVERT, DIRECT_FIN: the message sequence number.
    pub r_len: u64,
    /// RTS: remote key of the sender's region; ADVERT: the receiver's region key; RTS_LENT:
    /// the sender's lent slot + 1 (0: none).
    pub r_key: u64,
    /// RTS: offset of the message in the sender's region; ADVERT: the buffer's offset in the
    /// receiver's region.
    pub r_offset: u64,
}

/// Bytes of an encoded [`SlotHeader`]: two `u32`s, then seven `u64`s, little-endian.
pub const SLOT_HEADER_LEN: usize = 64;
/// A compact eager header: kind, length (in a slot) or reserved (on a byte-stream wire), tag.
pub const EAGER_WIRE_LEN: usize = 16;
const WHAT: &str = "message header";

/// FIN status codes: how the receiver's rendezvous read ended.
pub mod fin {
    /// The receiver read the whole message.
    pub const OK: u32 = 0;
    /// The receiver could not read the sender's region; the send fails.
    pub const READ_FAILED: u32 = 1;
    /// The message did not fit the receive buffer; the receive fails, the send does not.
    pub const TRUNCATED: u32 = 2;
}

/// ADVERT flags (in `imm`).
pub mod advert_flags {
    /// The receive accepts any tag (else only `tag`).
    pub const ANY_TAG: u32 = 1;
    /// Valid only if the sender's previous message to this receiver matched the advert for
    /// it (a receive posted behind other advertised ones: see [`crate::advert`]).
    pub const CHAINED: u32 = 2;
}

impl SlotHeader {
    /// The header of `len` bytes of eager data tagged `tag`.
    pub fn eager(tag: u64, len: usize) -> SlotHeader {
        SlotHeader { kind: kind::EAGER, tag, len: len as u64, ..Default::default() }
    }

    /// Announces `len` bytes at `offset` of the sender's region `remote`; `cookie` comes back
    /// in the FIN.
    pub fn rts(
        tag: u64,
        len: usize,
        cookie: u64,
        remote: &crate::api::RemoteRegion,
        offset: usize,
    ) -> SlotHeader {
        SlotHeader {
            kind: kind::RTS,
            tag,
            len: len as u64,
            cookie,
            r_addr: remote.addr,
            r_len: remote.len,
            r_key: remote.key,
            r_offset: offset as u64,
            ..Default::default()
        }
    }

    /// Announces `len` bytes at address `addr` of the sender's own memory (see
    /// [`kind::RTS_LENT`]); `cookie` comes back in the FIN.
    pub fn rts_lent(tag: u64, len: usize, cookie: u64, addr: u64) -> SlotHeader {
        SlotHeader { kind: kind::RTS_LENT, tag, len: len as u64, cookie, r_addr: addr, ..Default::default() }
    }

    /// The answer to `rts` once the receiver's read ended with `status` (see `fin`).
    pub fn fin(rts: &SlotHeader, status: u32) -> SlotHeader {
        SlotHeader { kind: kind::FIN, imm: status, cookie: rts.cookie, tag: rts.tag, ..Default::default() }
    }

    /// Encodes all fields ([`SLOT_HEADER_LEN`] bytes, little-endian).
    #[inline]
    pub fn to_bytes(&self) -> [u8; SLOT_HEADER_LEN] {
        let mut out = Fixed::<SLOT_HEADER_LEN>::new();
        let mut w = Writer::new(&mut out);
        w.u32(self.kind).u32(self.imm).u64(self.tag).u64(self.len).u64(self.cookie);
        w.u64(self.r_addr).u64(self.r_len).u64(self.r_key).u64(self.r_offset);
        out.into_array()
    }

    /// Encodes an eager header in its compact form (`kind u32 | len u32 | tag u64`) for a
    /// slot: the length saturates at `u32::MAX`, so an oversized claim stays oversized.
    #[inline]
    pub fn to_eager_slot(&self) -> [u8; EAGER_WIRE_LEN] {
        let len = self.len.min(u64::from(u32::MAX)) as u32;
        let mut out = Fixed::<EAGER_WIRE_LEN>::new();
        Writer::new(&mut out).u32(self.kind).u32(len).u64(self.tag);
        out.into_array()
    }

    /// Bytes this header takes on a message wire (see `encode_wire`).
    pub fn wire_len(&self) -> usize {
        if self.kind == kind::EAGER {
            EAGER_WIRE_LEN
        } else {
            SLOT_HEADER_LEN
        }
    }

    /// Encodes for a byte-stream message (verbs SENDs): eager data needs only kind and tag
    /// (`kind u32 | 0 u32 | tag u64`), its length is the message's, so it takes 16 bytes
    /// instead of 64. Returns the encoded bytes.
    pub fn encode_wire(&self, out: &mut [u8; SLOT_HEADER_LEN]) -> usize {
        if self.kind == kind::EAGER {
            let mut eager = Fixed::<EAGER_WIRE_LEN>::new();
            Writer::new(&mut eager).u32(self.kind).zeros(4).u64(self.tag);
            out[..EAGER_WIRE_LEN].copy_from_slice(&eager.into_array());
            EAGER_WIRE_LEN
        } else {
            *out = self.to_bytes();
            SLOT_HEADER_LEN
        }
    }

    /// Decodes `encode_wire` output from untrusted bytes: the header and the payload after it.
    pub fn decode_wire(bytes: &[u8]) -> Option<(SlotHeader, &[u8])> {
        let mut r = Reader::new(bytes, WHAT);
        if r.clone().u32("kind").ok()? == kind::EAGER {
            r.skip(8, "kind and reserved").ok()?;
            let tag = r.u64("tag").ok()?;
            let payload = r.rest();
            return Some((SlotHeader::eager(tag, payload.len()), payload));
        }
        let header = Self::read(&mut r).ok()?;
        Some((header, r.rest()))
    }

    /// Decodes a full header from the front of untrusted bytes; `None` when too short.
    pub fn from_bytes(b: &[u8]) -> Option<SlotHeader> {
        Self::read(&mut Reader::new(b, WHAT)).ok()
    }

    /// Decodes a slot's compact eager header (`to_eager_slot`; its length is whatever the
    /// peer wrote and must still be validated); `None` when the slot holds another kind,
    /// whose full header [`SlotHeader::from_array`] decodes.
    #[inline]
    pub fn eager_from_slot(compact: &[u8; EAGER_WIRE_LEN]) -> Option<SlotHeader> {
        let mut r = Reader::new(compact, WHAT);
        // The reads cannot fail (the array holds every field); `ok()?` only type-checks.
        if r.u32("kind").ok()? != kind::EAGER {
            return None;
        }
        let len = r.u32("len").ok()?;
        Some(SlotHeader::eager(r.u64("tag").ok()?, len as usize))
    }

    /// Decodes a full header; every bit pattern is one (its fields are validated on use).
    #[inline]
    pub fn from_array(b: &[u8; SLOT_HEADER_LEN]) -> SlotHeader {
        // Cannot fail: the array holds every field.
        Self::read(&mut Reader::new(b, WHAT)).unwrap_or_default()
    }

    /// Reads the full header (`kind u32 | imm u32 | tag | len | cookie | r_addr | r_len |
    /// r_key | r_offset`, `u64`s).
    #[inline]
    fn read(r: &mut Reader<'_>) -> Result<SlotHeader, CodecError> {
        Ok(SlotHeader {
            kind: r.u32("kind")?,
            imm: r.u32("imm")?,
            tag: r.u64("tag")?,
            len: r.u64("len")?,
            cookie: r.u64("cookie")?,
            r_addr: r.u64("r_addr")?,
            r_len: r.u64("r_len")?,
            r_key: r.u64("r_key")?,
            r_offset: r.u64("r_offset")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_header() -> impl Strategy<Value = SlotHeader> {
        (0u32..6, any::<u32>(), any::<[u64; 7]>()).prop_map(
            |(kind, imm, [tag, len, cookie, r_addr, r_len, r_key, r_offset])| SlotHeader {
                kind,
                imm,
                tag,
                len,
                cookie,
                r_addr,
                r_len,
                r_key,
                r_offset,
            },
        )
    }

    /// Both forms, written out by hand: a peer built from another commit must agree.
    #[test]
    fn pinned_encoding() {
        let rts = SlotHeader {
            kind: kind::RTS,
            imm: 5,
            tag: 0x0102,
            len: 3,
            cookie: 4,
            r_addr: 6,
            r_len: 7,
            r_key: 8,
            r_offset: 9,
        };
        let mut want = vec![2, 0, 0, 0, 5, 0, 0, 0, 2, 1, 0, 0, 0, 0, 0, 0];
        for v in [3u8, 4, 6, 7, 8, 9] {
            want.extend_from_slice(&[v, 0, 0, 0, 0, 0, 0, 0]);
        }
        assert_eq!(rts.to_bytes(), want[..]);
        let eager = SlotHeader::eager(0x0a0b, 0x0c0d);
        assert_eq!(eager.to_eager_slot(), [1, 0, 0, 0, 0x0d, 0x0c, 0, 0, 0x0b, 0x0a, 0, 0, 0, 0, 0, 0]);
        let mut wire = [0xff; SLOT_HEADER_LEN];
        assert_eq!(eager.encode_wire(&mut wire), EAGER_WIRE_LEN);
        assert_eq!(wire[..EAGER_WIRE_LEN], [1, 0, 0, 0, 0, 0, 0, 0, 0x0b, 0x0a, 0, 0, 0, 0, 0, 0]);
        let huge = SlotHeader { len: u64::MAX, ..eager };
        assert_eq!(huge.to_eager_slot()[4..8], [0xff; 4], "an oversized length stays oversized");
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..96)) {
            let _ = SlotHeader::from_bytes(&bytes);
            if let Some((h, payload)) = SlotHeader::decode_wire(&bytes) {
                prop_assert_eq!(h.wire_len() + payload.len(), bytes.len());
            }
            let mut compact = [0u8; EAGER_WIRE_LEN];
            let n = bytes.len().min(EAGER_WIRE_LEN);
            compact[..n].copy_from_slice(&bytes[..n]);
            let _ = SlotHeader::eager_from_slot(&compact);
        }

        #[test]
        fn round_trips(h in any_header(), payload in prop::collection::vec(any::<u8>(), 0..24)) {
            prop_assert_eq!(SlotHeader::from_array(&h.to_bytes()), h);
            prop_assert_eq!(SlotHeader::from_bytes(&h.to_bytes()), Some(h));
            let mut buf = [0u8; SLOT_HEADER_LEN];
            let n = h.encode_wire(&mut buf);
            let mut msg = buf[..n].to_vec();
            msg.extend_from_slice(&payload);
            let (back, rest) = SlotHeader::decode_wire(&msg).unwrap();
            prop_assert_eq!(rest, &payload[..]);
            if h.kind == kind::EAGER {
                // Only kind and tag travel; the length is the payload's.
                prop_assert_eq!(back, SlotHeader::eager(h.tag, payload.len()));
                let slot = SlotHeader::eager(h.tag, h.len.min(u64::from(u32::MAX)) as usize);
                prop_assert_eq!(SlotHeader::eager_from_slot(&h.to_eager_slot()), Some(slot));
            } else {
                prop_assert_eq!(back, h);
                let mut compact = [0u8; EAGER_WIRE_LEN];
                compact.copy_from_slice(&h.to_bytes()[..EAGER_WIRE_LEN]);
                prop_assert!(SlotHeader::eager_from_slot(&compact).is_none());
            }
        }
    }

    #[test]
    fn header_round_trips_and_rejects_short_input() {
        let h = SlotHeader {
            kind: kind::RTS,
            imm: 3,
            tag: 9,
            len: 1 << 20,
            cookie: 77,
            r_addr: 1,
            r_len: 2,
            r_key: 3,
            r_offset: 4,
        };
        let back = SlotHeader::from_bytes(&h.to_bytes()).unwrap();
        assert_eq!(back.to_bytes(), h.to_bytes());
        assert!(SlotHeader::from_bytes(&[0u8; 10]).is_none());
    }

    #[test]
    fn wire_encoding_is_compact_for_eager_and_round_trips() {
        let mut buf = [0u8; SLOT_HEADER_LEN];
        let eager = SlotHeader::eager(42, 3);
        let n = eager.encode_wire(&mut buf);
        assert_eq!(n, EAGER_WIRE_LEN);
        let mut msg = buf[..n].to_vec();
        msg.extend_from_slice(b"abc");
        let (h, payload) = SlotHeader::decode_wire(&msg).unwrap();
        assert_eq!((h.kind, h.tag, h.len, payload), (kind::EAGER, 42, 3, &b"abc"[..]));
        let rts = SlotHeader { kind: kind::RTS, tag: 7, len: 1 << 20, cookie: 9, ..Default::default() };
        let n = rts.encode_wire(&mut buf);
        let (h, payload) = SlotHeader::decode_wire(&buf[..n]).unwrap();
        assert_eq!((h.kind, h.cookie, payload.len()), (kind::RTS, 9, 0));
        for cut in 0..n {
            let _ = SlotHeader::decode_wire(&buf[..cut]);
        }
        assert!(SlotHeader::decode_wire(&buf[..10]).is_none());
        assert!(SlotHeader::decode_wire(&[]).is_none());
    }
}
