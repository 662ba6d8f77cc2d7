//! The message header both providers put in front of every eager slot: tagged data, rendezvous
//! control (RTS/FIN) and put-with-immediate notices. Always read from a peer, so every field is
//! validated before use.

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
}

/// Header of every ring slot. Read from a peer, so every field is validated before use.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SlotHeader {
    /// One of [`kind`]; anything else is malformed.
    pub kind: u32,
    /// Immediate for IMM; status for FIN (0 = ok).
    pub imm: u32,
    /// The message tag (EAGER, RTS; echoed in FIN).
    pub tag: u64,
    /// Eager payload length, or the full message / put length.
    pub len: u64,
    /// Sender's operation cookie, echoed in FIN.
    pub cookie: u64,
    /// RTS: where the receiver reads the message from.
    pub r_addr: u64,
    /// RTS: length of the sender's region.
    pub r_len: u64,
    /// RTS: remote key of the sender's region.
    pub r_key: u64,
    /// RTS: offset of the message in the sender's region.
    pub r_offset: u64,
}

/// Bytes of an encoded [`SlotHeader`] (64): two `u32`s, then seven `u64`s, little-endian.
pub const SLOT_HEADER_LEN: usize = std::mem::size_of::<SlotHeader>();
/// An eager header on a byte-stream wire: kind, reserved, tag.
pub const EAGER_WIRE_LEN: usize = 16;

/// FIN status codes: how the receiver's rendezvous read ended.
pub mod fin {
    /// The receiver read the whole message.
    pub const OK: u32 = 0;
    /// The receiver could not read the sender's region; the send fails.
    pub const READ_FAILED: u32 = 1;
    /// The message did not fit the receive buffer; the receive fails, the send does not.
    pub const TRUNCATED: u32 = 2;
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

    /// The answer to `rts` once the receiver's read ended with `status` (see `fin`).
    pub fn fin(rts: &SlotHeader, status: u32) -> SlotHeader {
        SlotHeader { kind: kind::FIN, imm: status, cookie: rts.cookie, tag: rts.tag, ..Default::default() }
    }

    /// Encodes all fields ([`SLOT_HEADER_LEN`] bytes, little-endian).
    pub fn to_bytes(&self) -> [u8; SLOT_HEADER_LEN] {
        let mut out = [0u8; SLOT_HEADER_LEN];
        out[0..4].copy_from_slice(&self.kind.to_le_bytes());
        out[4..8].copy_from_slice(&self.imm.to_le_bytes());
        for (i, v) in [self.tag, self.len, self.cookie, self.r_addr, self.r_len, self.r_key, self.r_offset]
            .iter()
            .enumerate()
        {
            out[8 + i * 8..16 + i * 8].copy_from_slice(&v.to_le_bytes());
        }
        out
    }

    /// Bytes this header takes on a message wire (see `encode_wire`).
    pub fn wire_len(&self) -> usize {
        if self.kind == kind::EAGER {
            EAGER_WIRE_LEN
        } else {
            SLOT_HEADER_LEN
        }
    }

    /// Encodes for a byte-stream message (verbs SENDs): eager data needs only kind and tag, its
    /// length is the message's, so it takes 16 bytes instead of 64. Returns the encoded bytes.
    pub fn encode_wire(&self, out: &mut [u8; SLOT_HEADER_LEN]) -> usize {
        if self.kind == kind::EAGER {
            out[0..4].copy_from_slice(&self.kind.to_le_bytes());
            out[4..8].fill(0);
            out[8..16].copy_from_slice(&self.tag.to_le_bytes());
            EAGER_WIRE_LEN
        } else {
            *out = self.to_bytes();
            SLOT_HEADER_LEN
        }
    }

    /// Decodes `encode_wire` output from untrusted bytes: the header and the payload after it.
    pub fn decode_wire(bytes: &[u8]) -> Option<(SlotHeader, &[u8])> {
        let kind = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?);
        if kind == kind::EAGER {
            let tag = u64::from_le_bytes(bytes.get(8..16)?.try_into().ok()?);
            let payload = &bytes[EAGER_WIRE_LEN..];
            return Some((SlotHeader::eager(tag, payload.len()), payload));
        }
        Some((SlotHeader::from_bytes(bytes)?, &bytes[SLOT_HEADER_LEN..]))
    }

    /// Decodes a header from untrusted bytes; `None` when too short.
    pub fn from_bytes(b: &[u8]) -> Option<SlotHeader> {
        let b: &[u8; SLOT_HEADER_LEN] = b.get(..SLOT_HEADER_LEN)?.try_into().ok()?;
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(w)
        };
        Some(SlotHeader {
            kind: u32_at(0),
            imm: u32_at(4),
            tag: u64_at(8),
            len: u64_at(16),
            cookie: u64_at(24),
            r_addr: u64_at(32),
            r_len: u64_at(40),
            r_key: u64_at(48),
            r_offset: u64_at(56),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
