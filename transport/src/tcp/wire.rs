//! The tcp provider's wire: length-prefixed frames (`u32 body length | u8 kind | fields`),
//! decoded with the project codec from untrusted bytes, and the listening address that ranks
//! exchange through the bootstrap. Tagged traffic reuses the slot header's byte-stream form
//! ([`SlotHeader::encode_wire`]); RMA is carried by request, data and acknowledgement frames
//! that the target's progress serves.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::codec::{Reader, Writer};
use crate::error::{Result, TransportError};
use crate::msg::{SlotHeader, SLOT_HEADER_LEN};

/// Bytes of the length prefix in front of every frame body.
pub(crate) const PREFIX: usize = 4;
/// Bytes of the largest fixed part of a frame body (a put chunk's), before its data.
pub(crate) const MAX_FIXED: usize = 1 + 8 * 6 + 4 + 4;

/// Frame kinds (the first byte of a body).
pub(crate) mod kind {
    /// A tagged message or rendezvous control: a slot header in wire form, then eager data.
    pub const MSG: u8 = 1;
    /// A chunk of a put or put_imm: where it goes, then the bytes.
    pub const PUT: u8 = 2;
    /// A read request (get, or the receiver's rendezvous read): the target streams DATA back.
    pub const GET: u8 = 3;
    /// A chunk of a read's answer.
    pub const DATA: u8 = 4;
    /// The target's verdict on a put, or its refusal of a read.
    pub const ACK: u8 = 5;
    /// The first frame on a connection: who connects, and the key the listener published.
    pub const HELLO: u8 = 6;
    /// After the hello of an endpoint opened by address: the dialer's own address.
    pub const INTRO: u8 = 7;
}

/// Put chunk flags.
pub(crate) mod flag {
    /// The initiator wants a completion (the target acknowledges every put anyway).
    pub const SIGNALED: u32 = 1;
    /// A put_imm: the last chunk raises an immediate at the target.
    pub const IMM: u32 = 2;
    /// The operation's last chunk: the target answers after it.
    pub const LAST: u32 = 4;
}

/// Acknowledgement statuses: what the target's registration table said.
pub(crate) mod status {
    /// Done.
    pub const OK: u32 = 0;
    /// No live registration with that key and address.
    pub const INVALID_KEY: u32 = 1;
    /// The range does not fit the registered region (its length travels in `limit`).
    pub const OUT_OF_BOUNDS: u32 = 2;
    /// The region does not allow the access.
    pub const ACCESS_DENIED: u32 = 3;
}

/// Which registered bytes an RMA frame names: key, base address, offset and length of the
/// whole operation (every chunk carries all of them, so each is checked on its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Target {
    pub cookie: u64,
    pub key: u64,
    pub addr: u64,
    pub offset: u64,
    pub len: u64,
}

/// A decoded frame body; byte fields borrow the receive buffer.
#[derive(Debug)]
pub(crate) enum Frame<'a> {
    Msg { header: SlotHeader, payload: &'a [u8] },
    Put { target: Target, at: u64, imm: u32, flags: u32, bytes: &'a [u8] },
    Get(Target),
    Data { cookie: u64, at: u64, bytes: &'a [u8] },
    Ack { cookie: u64, status: u32, limit: u64 },
    Hello(Hello),
}

/// Who opened a connection: rank and incarnation, and the listener's key as published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hello {
    pub rank: u32,
    pub incarnation: u32,
    pub key: u64,
}

const HELLO_MAGIC: u32 = 0x5254_4331; // "RTC1"
/// Bytes of a whole hello frame, prefix included.
pub(crate) const HELLO_LEN: usize = PREFIX + 1 + 4 + 4 + 4 + 8;

/// Starts a frame of `body` bytes in `out`: the prefix and the kind byte.
fn begin(out: &mut Vec<u8>, body: usize, kind: u8) {
    Writer::new(out).u32(body as u32).u8(kind);
}

fn target(w: &mut Writer<'_, Vec<u8>>, t: &Target) {
    w.u64(t.cookie).u64(t.key).u64(t.addr).u64(t.offset).u64(t.len);
}

/// Appends a tagged message or control frame.
pub(crate) fn msg(out: &mut Vec<u8>, header: &SlotHeader, payload: &[u8]) {
    msg_start(out, header, payload.len());
    out.extend_from_slice(payload);
}

/// Appends the start of a tagged message whose `payload_len` bytes the caller appends.
pub(crate) fn msg_start(out: &mut Vec<u8>, header: &SlotHeader, payload_len: usize) {
    let mut h = [0u8; SLOT_HEADER_LEN];
    let n = header.encode_wire(&mut h);
    begin(out, 1 + n + payload_len, kind::MSG);
    out.extend_from_slice(&h[..n]);
}

/// Appends one put chunk: `bytes` land at `at` within the operation's range.
#[cfg(test)]
pub(crate) fn put(out: &mut Vec<u8>, t: &Target, at: u64, imm: u32, flags: u32, bytes: &[u8]) {
    put_start(out, t, at, imm, flags, bytes.len());
    out.extend_from_slice(bytes);
}

/// Appends the start of a put chunk whose `len` bytes the caller appends.
pub(crate) fn put_start(out: &mut Vec<u8>, t: &Target, at: u64, imm: u32, flags: u32, len: usize) {
    begin(out, MAX_FIXED + len, kind::PUT);
    let mut w = Writer::new(out);
    target(&mut w, t);
    w.u64(at).u32(imm).u32(flags);
}

/// Appends a read request.
pub(crate) fn get(out: &mut Vec<u8>, t: &Target) {
    begin(out, 1 + 40, kind::GET);
    target(&mut Writer::new(out), t);
}

/// Appends the header of a data chunk of `len` bytes; the caller appends the bytes.
pub(crate) fn data_header(out: &mut Vec<u8>, cookie: u64, at: u64, len: usize) {
    begin(out, 1 + 16 + len, kind::DATA);
    Writer::new(out).u64(cookie).u64(at);
}

/// Bytes of a data chunk's header, prefix included.
#[cfg(test)]
pub(crate) const DATA_HEADER_LEN: usize = PREFIX + 1 + 16;

/// Appends an acknowledgement.
pub(crate) fn ack(out: &mut Vec<u8>, cookie: u64, status: u32, limit: u64) {
    begin(out, 1 + 20, kind::ACK);
    Writer::new(out).u64(cookie).u32(status).u64(limit);
}

/// A whole hello frame.
pub(crate) fn hello(h: &Hello) -> Vec<u8> {
    let mut out = Vec::with_capacity(HELLO_LEN);
    begin(&mut out, HELLO_LEN - PREFIX, kind::HELLO);
    Writer::new(&mut out).u32(HELLO_MAGIC).u32(h.rank).u32(h.incarnation).u64(h.key);
    out
}

/// The rank a hello names when the dialer has no rank, only an address (an intro follows).
pub(crate) const BY_ADDRESS: u32 = u32::MAX;
/// Bytes of the longest encoded [`Address`] (IPv6).
const ADDRESS_MAX: usize = 4 + 4 + 8 + 2 + 1 + 16;
/// Bytes of a whole intro frame, prefix included: kind, address length, padded address.
pub(crate) const INTRO_LEN: usize = PREFIX + 1 + 1 + ADDRESS_MAX;

/// A whole intro frame: `address`, padded to [`INTRO_LEN`].
pub(crate) fn intro(address: &Address) -> Vec<u8> {
    let bytes = address.encode();
    let mut out = Vec::with_capacity(INTRO_LEN);
    begin(&mut out, INTRO_LEN - PREFIX, kind::INTRO);
    out.push(bytes.len() as u8);
    out.extend_from_slice(&bytes);
    out.resize(INTRO_LEN, 0);
    out
}

/// The address in a whole intro frame (prefix included), from untrusted bytes.
pub(crate) fn decode_intro(frame: &[u8]) -> Result<Address> {
    let bad = || malformed("not an intro frame");
    if frame.len() != INTRO_LEN || frame[PREFIX] != kind::INTRO {
        return Err(bad());
    }
    let len = frame[PREFIX + 1] as usize;
    let address = frame.get(PREFIX + 2..PREFIX + 2 + len).filter(|_| len <= ADDRESS_MAX).ok_or_else(bad)?;
    Address::decode(address, BY_ADDRESS)
}

fn read_target(r: &mut Reader<'_>) -> Result<Target, crate::codec::CodecError> {
    Ok(Target {
        cookie: r.u64("cookie")?,
        key: r.u64("key")?,
        addr: r.u64("addr")?,
        offset: r.u64("offset")?,
        len: r.u64("len")?,
    })
}

/// Decodes one frame body (prefix stripped) from a peer. Never panics: anything short, long
/// or of an unknown kind is an error naming what was wrong.
pub(crate) fn decode(body: &[u8]) -> Result<Frame<'_>> {
    let mut r = Reader::new(body, "tcp frame");
    let frame = match r.u8("kind")? {
        kind::MSG => {
            let (header, payload) =
                SlotHeader::decode_wire(r.rest()).ok_or_else(|| malformed("short message header"))?;
            return Ok(Frame::Msg { header, payload });
        }
        kind::PUT => {
            let target = read_target(&mut r)?;
            let (at, imm, flags) = (r.u64("at")?, r.u32("imm")?, r.u32("flags")?);
            return Ok(Frame::Put { target, at, imm, flags, bytes: r.rest() });
        }
        kind::GET => Frame::Get(read_target(&mut r)?),
        kind::DATA => {
            let (cookie, at) = (r.u64("cookie")?, r.u64("at")?);
            return Ok(Frame::Data { cookie, at, bytes: r.rest() });
        }
        kind::ACK => {
            Frame::Ack { cookie: r.u64("cookie")?, status: r.u32("status")?, limit: r.u64("limit")? }
        }
        kind::HELLO => {
            if r.u32("magic")? != HELLO_MAGIC {
                return Err(malformed("hello without the reverb tcp magic"));
            }
            Frame::Hello(Hello {
                rank: r.u32("rank")?,
                incarnation: r.u32("incarnation")?,
                key: r.u64("key")?,
            })
        }
        other => return Err(malformed(&format!("unknown frame kind {other}"))),
    };
    r.finish()?;
    Ok(frame)
}

fn malformed(detail: &str) -> TransportError {
    TransportError::Malformed { what: "tcp frame", detail: detail.to_string() }
}

/// What a rank publishes: where it listens, for which incarnation, and the key a connecting
/// peer must present (it proves the peer learnt the address from the job's bootstrap).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Address {
    pub incarnation: u32,
    pub key: u64,
    pub socket: SocketAddr,
}

const ADDRESS_MAGIC: u32 = 0x5254_4341; // "RTCA"

impl Address {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(36);
        let mut w = Writer::new(&mut out);
        w.u32(ADDRESS_MAGIC).u32(self.incarnation).u64(self.key).u16(self.socket.port());
        match self.socket.ip() {
            IpAddr::V4(ip) => w.u8(4).raw(&ip.octets()),
            IpAddr::V6(ip) => w.u8(6).raw(&ip.octets()),
        };
        out
    }

    /// Decodes a peer's published address; `Malformed` naming `rank` when it is not one.
    pub(crate) fn decode(bytes: &[u8], rank: u32) -> Result<Address> {
        let bad = |detail: String| TransportError::Malformed { what: "tcp address", detail };
        let mut r = Reader::new(bytes, "tcp address");
        let parsed = (|| {
            let magic = r.u32("magic")?;
            let (incarnation, key, port) = (r.u32("incarnation")?, r.u64("key")?, r.u16("port")?);
            let ip = match r.u8("family")? {
                4 => Some(IpAddr::V4(Ipv4Addr::from(r.array::<4>("ipv4")?))),
                6 => Some(IpAddr::V6(Ipv6Addr::from(r.array::<16>("ipv6")?))),
                _ => None,
            };
            r.finish()?;
            Ok::<_, crate::codec::CodecError>((magic, incarnation, key, port, ip))
        })()
        .map_err(|e| bad(format!("rank {rank}: {e}")))?;
        match parsed {
            (ADDRESS_MAGIC, incarnation, key, port, Some(ip)) => {
                Ok(Address { incarnation, key, socket: SocketAddr::new(ip, port) })
            }
            _ => Err(bad(format!("rank {rank}: not a tcp provider address"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::kind as msg_kind;

    fn body(frame: &[u8]) -> &[u8] {
        let len = u32::from_le_bytes([frame[0], frame[1], frame[2], frame[3]]) as usize;
        assert_eq!(len + PREFIX, frame.len(), "the prefix counts the body");
        &frame[PREFIX..]
    }

    #[test]
    fn frames_round_trip() {
        let t = Target { cookie: 1, key: 2, addr: 3, offset: 4, len: 5 };
        let mut out = Vec::new();
        put(&mut out, &t, 9, 7, flag::LAST | flag::IMM, b"xyz");
        match decode(body(&out)).unwrap() {
            Frame::Put { target, at: 9, imm: 7, flags, bytes } => {
                assert_eq!((target, flags, bytes), (t, flag::LAST | flag::IMM, &b"xyz"[..]))
            }
            other => panic!("{other:?}"),
        }
        out.clear();
        msg(&mut out, &SlotHeader::eager(42, 3), b"abc");
        match decode(body(&out)).unwrap() {
            Frame::Msg { header, payload } => {
                assert_eq!((header.kind, header.tag, payload), (msg_kind::EAGER, 42, &b"abc"[..]))
            }
            other => panic!("{other:?}"),
        }
        out.clear();
        data_header(&mut out, 5, 6, 2);
        out.extend_from_slice(b"hi");
        assert_eq!(out.len(), DATA_HEADER_LEN + 2);
        assert!(matches!(decode(body(&out)).unwrap(), Frame::Data { cookie: 5, at: 6, bytes: b"hi" }));
        out.clear();
        ack(&mut out, 8, status::OUT_OF_BOUNDS, 4096);
        assert!(matches!(decode(body(&out)).unwrap(), Frame::Ack { cookie: 8, status: 2, limit: 4096 }));
        let h = Hello { rank: 3, incarnation: 1, key: 99 };
        let frame = hello(&h);
        assert_eq!(frame.len(), HELLO_LEN);
        assert!(matches!(decode(body(&frame)).unwrap(), Frame::Hello(x) if x == h));
    }

    #[test]
    fn truncated_and_unknown_frames_are_errors_not_panics() {
        let mut out = Vec::new();
        put(&mut out, &Target { cookie: 1, key: 2, addr: 3, offset: 4, len: 5 }, 0, 0, 0, b"data");
        out.extend_from_slice(&hello(&Hello { rank: 1, incarnation: 0, key: 1 })[PREFIX..]);
        let b = &out[PREFIX..];
        for cut in 0..b.len() {
            let _ = decode(&b[..cut]);
        }
        assert!(decode(&[]).is_err());
        assert!(decode(&[99, 1, 2]).is_err());
        assert!(decode(&[kind::ACK, 1]).is_err());
    }

    #[test]
    fn intros_round_trip_and_junk_is_malformed() {
        for socket in ["10.1.2.3:4000", "[fe80::1]:9"] {
            let a = Address { incarnation: 0, key: 11, socket: socket.parse().unwrap() };
            let frame = intro(&a);
            assert_eq!(frame.len(), INTRO_LEN);
            assert_eq!(decode_intro(&frame).unwrap(), a);
        }
        let mut frame = intro(&Address { incarnation: 0, key: 1, socket: "1.2.3.4:5".parse().unwrap() });
        frame[PREFIX + 1] = 200;
        assert!(matches!(decode_intro(&frame), Err(TransportError::Malformed { .. })));
        assert!(matches!(decode_intro(b"junk"), Err(TransportError::Malformed { .. })));
    }

    #[test]
    fn addresses_round_trip_and_junk_is_malformed() {
        for socket in ["127.0.0.1:4000", "[::1]:5"] {
            let a = Address { incarnation: 2, key: 7, socket: socket.parse().unwrap() };
            assert_eq!(Address::decode(&a.encode(), 1).unwrap(), a);
        }
        assert!(matches!(Address::decode(b"junk", 1), Err(TransportError::Malformed { .. })));
    }
}
