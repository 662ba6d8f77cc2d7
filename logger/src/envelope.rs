//! The wire envelope every application message carries (little-endian):
//!
//! ```text
//! magic u16 | version u8 | flags u8 | sender u32 | receiver u32 | incarnation u32 |
//! ssn u64 | tag u64 | payload_len u32 | det_count u32 |
//! det_count × Determinant (24 B) | payload (payload_len B)
//! ```
//!
//! A message with nothing piggybacked may go with the short form (flag `SHORT`), which leaves
//! out what its channel implies: sender and receiver (the transport names the source, the
//! receiver is the rank reading it) and the payload length (the rest of the frame). With an
//! 8-byte payload the frame then fits one cache line of a shared-memory slot:
//!
//! ```text
//! magic u16 | version u8 | flags u8 (SHORT) | incarnation u32 | ssn u64 | tag u64 | payload
//! ```
//!
//! Only a channel's receiver can read it (`decode_on_channel`): frames kept apart from their
//! channel (receiver-based logs) use the full form.
//!
//! `decode` is strict: wrong magic, unknown version or flags, counts that exceed the bytes
//! present, and trailing bytes are all errors. Nothing is allocated before its size is checked
//! against the bytes actually received.

use reverb_transport::{Rank, Tag};

use crate::determinant::{Determinant, Ssn};
use crate::error::{LogError, Result};
use reverb_transport::codec::Reader;

pub const ENVELOPE_MAGIC: u16 = 0x5652; // "RV"
pub const ENVELOPE_VERSION: u8 = 1;
/// Bytes before the piggybacked determinants.
pub const HEADER_LEN: usize = 40;
/// Bytes of the short form's header.
pub const SHORT_HEADER_LEN: usize = 24;
/// Flag of the short form.
const SHORT: u8 = 1;
/// Most determinants one message may carry: keeps the piggyback (and every receive buffer)
/// bounded; a sender with more unstable determinants spreads them over later messages.
pub const MAX_PIGGYBACKED: usize = 256;
/// Largest envelope, payload excluded.
pub const MAX_ENVELOPE_LEN: usize = HEADER_LEN + MAX_PIGGYBACKED * Determinant::WIRE_LEN;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    pub sender: Rank,
    pub receiver: Rank,
    /// The sender's incarnation: bumped on each restart, so receivers can drop stale messages.
    pub incarnation: u32,
    pub ssn: Ssn,
    pub tag: Tag,
    pub payload_len: u32,
    /// Determinants the sender piggybacks (causal logging) until they are acknowledged.
    pub determinants: Vec<Determinant>,
}

impl Envelope {
    /// Bytes of the encoded envelope, payload excluded.
    pub fn encoded_len(&self) -> usize {
        HEADER_LEN + self.determinants.len() * Determinant::WIRE_LEN
    }

    /// Appends envelope and `payload` to `out` (sets `payload_len` from `payload`).
    pub fn encode_into(&mut self, payload: &[u8], out: &mut Vec<u8>) -> Result<()> {
        out.reserve(self.encoded_len() + payload.len());
        self.encode_header_into(payload.len(), out)?;
        out.extend_from_slice(payload);
        Ok(())
    }

    /// Appends the envelope alone, for a payload of `payload_len` bytes that the caller puts
    /// right behind it (a large message is framed in place, in a registered buffer).
    /// The header is built in one fixed array and appended at once: this runs per message.
    pub fn encode_header_into(&mut self, payload_len: usize, out: &mut Vec<u8>) -> Result<()> {
        let Ok(len) = u32::try_from(payload_len) else {
            return Err(LogError::InvalidArgument(format!("payload of {payload_len} bytes exceeds u32")));
        };
        if self.determinants.len() > MAX_PIGGYBACKED {
            return Err(LogError::InvalidArgument(format!(
                "{} piggybacked determinants, at most {MAX_PIGGYBACKED} per message",
                self.determinants.len()
            )));
        }
        self.payload_len = len;
        // Whole little-endian words, not a field writer's slice copies (~20 instructions a
        // field here): magic, version, flags (none defined in version 1), sender | receiver,
        // incarnation | ssn | tag | payload_len, det_count.
        let h = [
            head_word(0, self.sender).to_le_bytes(),
            (u64::from(self.receiver) | u64::from(self.incarnation) << 32).to_le_bytes(),
            self.ssn.to_le_bytes(),
            self.tag.to_le_bytes(),
            (u64::from(len) | (self.determinants.len() as u64) << 32).to_le_bytes(),
        ];
        out.reserve(self.encoded_len());
        out.extend_from_slice(h.as_flattened());
        for det in &self.determinants {
            out.extend_from_slice(det.wire().as_flattened());
        }
        Ok(())
    }

    /// `encode_header_into`, in the short form when nothing is piggybacked. The receiver
    /// must read it with `decode_on_channel`.
    pub fn encode_short_header_into(&mut self, payload_len: usize, out: &mut Vec<u8>) -> Result<()> {
        if !self.determinants.is_empty() {
            return self.encode_header_into(payload_len, out);
        }
        let Ok(len) = u32::try_from(payload_len) else {
            return Err(LogError::InvalidArgument(format!("payload of {payload_len} bytes exceeds u32")));
        };
        self.payload_len = len;
        // Whole words, as `encode_header_into`: magic, version, flags, incarnation | ssn | tag.
        let h = [
            head_word(SHORT, self.incarnation).to_le_bytes(),
            self.ssn.to_le_bytes(),
            self.tag.to_le_bytes(),
        ];
        out.extend_from_slice(h.as_flattened());
        Ok(())
    }

    pub fn encode(&mut self, payload: &[u8]) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.encode_into(payload, &mut out)?;
        Ok(out)
    }

    /// Parses one frame; returns the envelope and the payload it frames.
    pub fn decode(frame: &[u8]) -> Result<(Envelope, &[u8])> {
        Self::decode_reusing(frame, Vec::new())
    }

    /// `decode_reusing` of a frame that arrived from `sender` at `receiver`: takes the short
    /// form too, filling in what the channel implies.
    #[inline]
    pub fn decode_on_channel(
        frame: &[u8],
        sender: Rank,
        receiver: Rank,
        mut determinants: Vec<Determinant>,
    ) -> Result<(Envelope, &[u8])> {
        let Some((h, payload)) = frame.split_first_chunk::<SHORT_HEADER_LEN>() else {
            return Err(short_header_error(frame));
        };
        if h[3] != SHORT {
            return Self::decode_reusing(frame, determinants);
        }
        // Read at fixed offsets of the array (no per-field checks); a wrong magic or version
        // goes to the field reader for its error.
        let [m0, m1, version, _flags, i0, i1, i2, i3, ssn @ .., t0, t1, t2, t3, t4, t5, t6, t7] = *h;
        if u16::from_le_bytes([m0, m1]) != ENVELOPE_MAGIC || version != ENVELOPE_VERSION {
            check_magic_and_version(&mut Reader::new(h, WHAT))?;
        }
        let incarnation = u32::from_le_bytes([i0, i1, i2, i3]);
        let ssn = u64::from_le_bytes(ssn);
        let tag = u64::from_le_bytes([t0, t1, t2, t3, t4, t5, t6, t7]);
        let Ok(payload_len) = u32::try_from(payload.len()) else {
            return Err(LogError::malformed(WHAT, format!("payload of {} bytes", payload.len())));
        };
        // The short form carries none: what the reused vector held came with an earlier frame
        // (stored again, it outlives a restart's or a checkpoint's clearing of the detLog).
        determinants.clear();
        let envelope = Envelope { sender, receiver, incarnation, ssn, tag, payload_len, determinants };
        Ok((envelope, payload))
    }

    /// `decode`, filling `determinants` (cleared first) so a receiver can reuse its capacity.
    /// The header is read from one 40-byte array: this runs per message, and reads at constant
    /// offsets of an array need no bounds checks once inlined.
    pub fn decode_reusing(frame: &[u8], mut determinants: Vec<Determinant>) -> Result<(Envelope, &[u8])> {
        let Some((h, rest)) = frame.split_first_chunk::<HEADER_LEN>() else {
            return Err(short_header_error(frame));
        };
        let header = read_header(&mut Reader::new(h, WHAT))?;
        let det_count = header.det_count as usize;
        if det_count > MAX_PIGGYBACKED {
            return Err(LogError::malformed(
                WHAT,
                format!("{det_count} piggybacked determinants, at most {MAX_PIGGYBACKED}"),
            ));
        }
        // Bound the count by the bytes present before allocating anything for it.
        let Some((det_area, payload)) = rest.split_at_checked(det_count * Determinant::WIRE_LEN) else {
            return Err(LogError::malformed(
                WHAT,
                format!("{det_count} determinants do not fit in {} bytes", rest.len()),
            ));
        };
        if payload.len() != header.payload_len as usize {
            return Err(LogError::malformed(
                WHAT,
                format!("payload length {} but {} bytes follow", header.payload_len, payload.len()),
            ));
        }
        determinants.clear();
        if det_count > 0 {
            let (dets, _) = det_area.as_chunks::<{ Determinant::WIRE_LEN }>();
            determinants.extend(dets.iter().map(Determinant::from_wire));
        }
        let envelope = Envelope {
            sender: header.sender,
            receiver: header.receiver,
            incarnation: header.incarnation,
            ssn: header.ssn,
            tag: header.tag,
            payload_len: header.payload_len,
            determinants,
        };
        Ok((envelope, payload))
    }
}

const WHAT: &str = "envelope";

/// The fixed fields of the header, checked.
struct Header {
    sender: Rank,
    receiver: Rank,
    incarnation: u32,
    ssn: Ssn,
    tag: Tag,
    payload_len: u32,
    det_count: u32,
}

/// Reads and checks the fixed header: the one decoder of both the per-message path (over an
/// array) and the error of a short frame (which names the first field it cuts off).
#[inline(always)]
fn read_header(r: &mut Reader<'_>) -> Result<Header> {
    check_magic_and_version(r)?;
    let flags = r.u8("flags")?;
    if flags == SHORT {
        return Err(LogError::malformed(
            WHAT,
            "a short envelope names no sender: only its channel's receiver reads it".to_string(),
        ));
    }
    if flags != 0 {
        return Err(LogError::malformed(WHAT, format!("unknown flags {flags:#04x}")));
    }
    Ok(Header {
        sender: r.u32("sender")?,
        receiver: r.u32("receiver")?,
        incarnation: r.u32("incarnation")?,
        ssn: r.u64("ssn")?,
        tag: r.u64("tag")?,
        payload_len: r.u32("payload_len")?,
        det_count: r.u32("det_count")?,
    })
}

/// The first header word: magic, version, `flags`, then `high` (the sender, or in the short
/// form the incarnation).
#[inline(always)]
fn head_word(flags: u8, high: u32) -> u64 {
    u64::from(ENVELOPE_MAGIC)
        | u64::from(ENVELOPE_VERSION) << 16
        | u64::from(flags) << 24
        | u64::from(high) << 32
}

#[inline(always)]
fn check_magic_and_version(r: &mut Reader<'_>) -> Result<()> {
    let magic = r.u16("magic")?;
    if magic != ENVELOPE_MAGIC {
        return Err(LogError::malformed(WHAT, format!("bad magic {magic:#06x}")));
    }
    let version = r.u8("version")?;
    if version != ENVELOPE_VERSION {
        return Err(LogError::UnsupportedVersion {
            what: WHAT,
            found: version.into(),
            expected: ENVELOPE_VERSION.into(),
        });
    }
    Ok(())
}

/// The error for a frame shorter than the header.
#[cold]
fn short_header_error(frame: &[u8]) -> LogError {
    match read_header(&mut Reader::new(frame, WHAT)) {
        Err(e) => e,
        Ok(_) => LogError::malformed(WHAT, format!("{} bytes, shorter than the header", frame.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn det() -> impl Strategy<Value = Determinant> {
        (any::<u32>(), any::<u32>(), any::<u64>(), any::<u64>())
            .prop_map(|(sender, receiver, ssn, rsn)| Determinant { sender, receiver, ssn, rsn })
    }

    fn envelope_and_payload() -> impl Strategy<Value = (Envelope, Vec<u8>)> {
        (
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
            prop::collection::vec(det(), 0..8),
            prop::collection::vec(any::<u8>(), 0..256),
        )
            .prop_map(|(sender, receiver, incarnation, ssn, tag, determinants, payload)| {
                let env = Envelope {
                    sender,
                    receiver,
                    incarnation,
                    ssn,
                    tag,
                    payload_len: payload.len() as u32,
                    determinants,
                };
                (env, payload)
            })
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            let _ = Envelope::decode(&bytes);
        }

        #[test]
        fn random_frames_on_a_channel_never_panic(tail in prop::collection::vec(any::<u8>(), 0..64)) {
            let mut frame = vec![0x52, 0x56, 1, SHORT];
            frame.extend_from_slice(&tail);
            let _ = Envelope::decode_on_channel(&frame, 0, 1, Vec::new());
            let _ = Envelope::decode_on_channel(&tail, 0, 1, Vec::new());
        }

        #[test]
        fn random_bytes_after_valid_magic_never_panic(
            mut bytes in prop::collection::vec(any::<u8>(), 0..512)
        ) {
            // Get past the magic/version/flags checks so the length logic is exercised.
            if bytes.len() >= 4 {
                bytes[0..2].copy_from_slice(&ENVELOPE_MAGIC.to_le_bytes());
                bytes[2] = ENVELOPE_VERSION;
                bytes[3] = 0;
            }
            let _ = Envelope::decode(&bytes);
        }

        #[test]
        fn encode_decode_round_trips((mut env, payload) in envelope_and_payload()) {
            let frame = env.encode(&payload).unwrap();
            prop_assert_eq!(frame.len(), env.encoded_len() + payload.len());
            let (decoded, body) = Envelope::decode(&frame).unwrap();
            prop_assert_eq!(decoded, env);
            prop_assert_eq!(body, &payload[..]);
        }

        #[test]
        fn header_then_payload_is_the_whole_frame((mut env, payload) in envelope_and_payload()) {
            let whole = env.encode(&payload).unwrap();
            let mut framed = Vec::new();
            env.encode_header_into(payload.len(), &mut framed).unwrap();
            prop_assert_eq!(framed.len(), env.encoded_len());
            framed.extend_from_slice(&payload);
            prop_assert_eq!(framed, whole);
        }

        #[test]
        fn every_truncation_is_rejected((mut env, payload) in envelope_and_payload()) {
            let frame = env.encode(&payload).unwrap();
            for cut in 0..frame.len() {
                prop_assert!(Envelope::decode(&frame[..cut]).is_err(), "cut at {}", cut);
            }
        }

        #[test]
        fn trailing_bytes_are_rejected((mut env, payload) in envelope_and_payload(), extra in 1usize..16) {
            let mut frame = env.encode(&payload).unwrap();
            frame.extend(std::iter::repeat_n(0u8, extra));
            prop_assert!(Envelope::decode(&frame).is_err());
        }
    }

    /// Rank 1 → 2, ssn 1, tag 0, no determinants.
    fn sample_envelope() -> Envelope {
        Envelope {
            sender: 1,
            receiver: 2,
            incarnation: 0,
            ssn: 1,
            tag: 0,
            payload_len: 0,
            determinants: vec![],
        }
    }

    /// Version 1 bytes, written out by hand: old and new peers must agree on them.
    #[test]
    fn pinned_encoding() {
        let det = Determinant { sender: 6, receiver: 7, ssn: 8, rsn: 9 };
        let mut env =
            Envelope { incarnation: 3, ssn: 4, tag: 5, determinants: vec![det], ..sample_envelope() };
        let frame = env.encode(b"hi").unwrap();
        let mut want = vec![0x52, 0x56, 1, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0];
        want.extend_from_slice(&[4, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0]);
        want.extend_from_slice(&[6, 0, 0, 0, 7, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0]);
        want.extend_from_slice(b"hi");
        assert_eq!(frame, want);
        assert_eq!(Envelope::decode(&want).unwrap(), (env, &b"hi"[..]));
    }

    #[test]
    fn short_form_is_24_bytes_and_read_on_its_channel_only() {
        let mut env = Envelope { incarnation: 3, ssn: 4, tag: 5, ..sample_envelope() };
        let mut frame = Vec::new();
        env.encode_short_header_into(2, &mut frame).unwrap();
        frame.extend_from_slice(b"hi");
        let mut want = vec![0x52, 0x56, 1, SHORT, 3, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0];
        want.extend_from_slice(&[5, 0, 0, 0, 0, 0, 0, 0, b'h', b'i']);
        assert_eq!(frame, want);
        env.payload_len = 2;
        let (got, payload) = Envelope::decode_on_channel(&frame, 1, 2, Vec::new()).unwrap();
        assert_eq!((got, payload), (env, &b"hi"[..]));
        let Err(LogError::Malformed { detail, .. }) = Envelope::decode(&frame) else {
            panic!("read off its channel")
        };
        assert!(detail.contains("short envelope"), "{detail}");
    }

    /// A receiver reuses one vector for every frame's determinants: a short frame after one
    /// that carried some has none.
    #[test]
    fn a_short_frame_read_into_a_used_vector_carries_no_determinants() {
        let det = Determinant { sender: 6, receiver: 7, ssn: 8, rsn: 9 };
        let mut long = Envelope { determinants: vec![det], ..sample_envelope() };
        let (got, _) = Envelope::decode_on_channel(&long.encode(b"x").unwrap(), 1, 2, Vec::new()).unwrap();
        assert_eq!(got.determinants, vec![det]);
        let mut short = Vec::new();
        sample_envelope().encode_short_header_into(1, &mut short).unwrap();
        short.push(b'y');
        let (got, payload) = Envelope::decode_on_channel(&short, 1, 2, got.determinants).unwrap();
        assert_eq!((got.determinants, payload), (vec![], &b"y"[..]));
    }

    /// The short form is read at fixed offsets: a wrong magic or version is still refused.
    #[test]
    fn short_form_with_a_wrong_magic_or_version_is_refused_on_its_channel() {
        let mut env = Envelope { incarnation: 3, ssn: 4, tag: 5, ..sample_envelope() };
        let mut frame = Vec::new();
        env.encode_short_header_into(1, &mut frame).unwrap();
        frame.push(9);
        let mut bad = frame.clone();
        bad[2] = 9;
        let found = Envelope::decode_on_channel(&bad, 1, 2, Vec::new());
        assert!(matches!(found, Err(LogError::UnsupportedVersion { found: 9, .. })));
        let mut bad = frame.clone();
        bad[1] ^= 1;
        let Err(LogError::Malformed { detail, .. }) = Envelope::decode_on_channel(&bad, 1, 2, Vec::new())
        else {
            panic!("a bad magic was read")
        };
        assert!(detail.contains("bad magic"), "{detail}");
        assert!(Envelope::decode_on_channel(&frame, 1, 2, Vec::new()).is_ok());
    }

    #[test]
    fn short_form_falls_back_to_full_with_a_piggyback() {
        let det = Determinant { sender: 6, receiver: 7, ssn: 8, rsn: 9 };
        let mut env = Envelope { determinants: vec![det], ..sample_envelope() };
        let mut frame = Vec::new();
        env.encode_short_header_into(0, &mut frame).unwrap();
        assert_eq!(frame.len(), HEADER_LEN + Determinant::WIRE_LEN);
        assert_eq!(Envelope::decode_on_channel(&frame, 1, 2, Vec::new()).unwrap().0, env);
    }

    #[test]
    fn huge_det_count_is_rejected_without_allocating() {
        let mut env = sample_envelope();
        let mut frame = env.encode(&[]).unwrap();
        frame[36..40].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(Envelope::decode(&frame), Err(LogError::Malformed { .. })));
    }

    #[test]
    fn oversized_piggyback_is_refused_both_ways() {
        let det = Determinant { sender: 1, receiver: 2, ssn: 3, rsn: 4 };
        let mut env = Envelope { determinants: vec![det; MAX_PIGGYBACKED + 1], ..sample_envelope() };
        assert!(matches!(env.encode(&[]), Err(LogError::InvalidArgument(_))));
        env.determinants.pop();
        let mut frame = env.encode(&[]).unwrap();
        assert_eq!(frame.len(), MAX_ENVELOPE_LEN);
        assert!(Envelope::decode(&frame).is_ok());
        // One more determinant on the wire, with the bytes for it present: still refused.
        frame[36..40].copy_from_slice(&(MAX_PIGGYBACKED as u32 + 1).to_le_bytes());
        frame.extend_from_slice(&det.to_bytes());
        assert!(matches!(Envelope::decode(&frame), Err(LogError::Malformed { .. })));
    }

    #[test]
    fn short_frames_name_what_is_wrong() {
        let mut env = sample_envelope();
        let frame = env.encode(&[]).unwrap();
        let err = |bytes: &[u8]| Envelope::decode(bytes).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err(&[0x00, 0x00, 1]).contains("bad magic"));
        assert!(matches!(
            Envelope::decode(&[frame[0], frame[1], 7]),
            Err(LogError::UnsupportedVersion { found: 7, .. })
        ));
        assert!(err(&frame[..20]).contains("more bytes"), "{}", err(&frame[..20]));
        assert!(Envelope::decode(&frame).is_ok());
    }

    #[test]
    fn wrong_version_and_magic_are_rejected() {
        let mut env = sample_envelope();
        let frame = env.encode(b"x").unwrap();
        let mut bad = frame.clone();
        bad[2] = 9;
        assert!(matches!(Envelope::decode(&bad), Err(LogError::UnsupportedVersion { found: 9, .. })));
        let mut bad = frame.clone();
        bad[0] ^= 1;
        assert!(Envelope::decode(&bad).is_err());
        let mut bad = frame;
        bad[3] = 1;
        assert!(Envelope::decode(&bad).is_err());
    }
}
