//! Bootstrap wire format: versioned, length-prefixed frames.
//!
//! ```text
//! header (12 bytes, little endian): magic "RVBT" | version u16 | kind u8 | flags u8 (0) | length u32
//! payload: `length` bytes, layout per kind (see `Frame`)
//! ```
//!
//! Version 2 added the recovery frames (Publish, Lookup, Addresses, Rejoined); a version-1
//! peer is refused with "unsupported version" rather than misreading them.
//!
//! Decoding never panics and never allocates more than the bytes actually present (or, when
//! reading a socket, more than the bytes that actually arrived), so a peer cannot make us
//! reserve an arbitrary length.

use std::io::{ErrorKind, Read};
use std::time::{Duration, Instant};

use super::PeerAddress;
use crate::error::{Result, TransportError};

pub const MAGIC: [u8; 4] = *b"RVBT";
pub const VERSION: u16 = 2;
pub const HEADER_LEN: usize = 12;
/// Largest payload accepted or produced.
pub const MAX_FRAME: usize = 64 << 20;
/// Largest Hello accepted before the peer has authenticated.
pub const MAX_HELLO: usize = 4096;
/// Longest token a Hello may carry.
pub const MAX_TOKEN: usize = 1024;
/// Reasons are clipped to this many bytes on encode.
pub const MAX_REASON: usize = 1024;
/// Largest provider address a rank may publish.
pub const MAX_ADDRESS: usize = 64 * 1024;

const K_HELLO: u8 = 1;
const K_WELCOME: u8 = 2;
const K_REFUSED: u8 = 3;
const K_CONTRIBUTE: u8 = 4;
const K_GATHERED: u8 = 5;
const K_ABORT: u8 = 6;
const K_BYE: u8 = 7;
const K_PUBLISH: u8 = 8;
const K_LOOKUP: u8 = 9;
const K_ADDRESSES: u8 = 10;
const K_REJOINED: u8 = 11;
const K_LAST: u8 = K_REJOINED;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// First frame of every connection: `token: bytes | rank u32 | size u32 | incarnation u32`.
    Hello { token: Vec<u8>, rank: u32, size: u32, incarnation: u32 },
    /// Server accepted the Hello: `size u32 | round u64`, the allgather round the job is at
    /// (0 at the start; a respawned rank joins the survivors' round).
    Welcome { size: u32, round: u64 },
    /// Server refused the connection: `reason: str`.
    Refused { reason: String },
    /// A rank's contribution to allgather round `round`: `round u64 | data: bytes`.
    Contribute { round: u64, data: Vec<u8> },
    /// Result of a round, indexed by rank: `round u64 | count u32 | count × bytes`.
    Gathered { round: u64, parts: Vec<Vec<u8>> },
    /// The job's collectives cannot proceed: `has_rank u8 | rank u32 | reason: str`.
    Abort { rank: Option<u32>, reason: String },
    /// Clean goodbye from a rank (empty payload).
    Bye,
    /// A rank publishes its provider address for its current incarnation: `address: bytes`.
    Publish { address: Vec<u8> },
    /// A rank asks for every rank's current address (empty payload).
    Lookup,
    /// Answer to Lookup, one entry per rank: `count u32 | count × (rank u32 | incarnation u32 |
    /// has u8 | address: bytes)`; `address` is None while that rank has not published (or failed).
    Addresses { entries: Vec<PeerAddress> },
    /// Unsolicited, to every other live rank: `rank` rejoined at `incarnation` and published
    /// `address`: `rank u32 | incarnation u32 | address: bytes`.
    Rejoined { rank: u32, incarnation: u32, address: Vec<u8> },
}

impl Frame {
    pub fn kind_name(&self) -> &'static str {
        match self {
            Frame::Hello { .. } => "Hello",
            Frame::Welcome { .. } => "Welcome",
            Frame::Refused { .. } => "Refused",
            Frame::Contribute { .. } => "Contribute",
            Frame::Gathered { .. } => "Gathered",
            Frame::Abort { .. } => "Abort",
            Frame::Bye => "Bye",
            Frame::Publish { .. } => "Publish",
            Frame::Lookup => "Lookup",
            Frame::Addresses { .. } => "Addresses",
            Frame::Rejoined { .. } => "Rejoined",
        }
    }
}

fn malformed(detail: impl Into<String>) -> TransportError {
    TransportError::Malformed { what: "bootstrap frame", detail: detail.into() }
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

fn clip(s: &str) -> &str {
    if s.len() <= MAX_REASON {
        return s;
    }
    let mut end = MAX_REASON;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn check_address(address: &[u8]) -> Result<()> {
    if address.len() > MAX_ADDRESS {
        return Err(malformed(format!("address of {} bytes (max {MAX_ADDRESS})", address.len())));
    }
    Ok(())
}

/// Encodes one frame (header + payload). Fails only when the payload exceeds [`MAX_FRAME`].
pub fn encode(frame: &Frame) -> Result<Vec<u8>> {
    let mut p = Vec::new();
    let kind = match frame {
        Frame::Hello { token, rank, size, incarnation } => {
            if token.len() > MAX_TOKEN {
                return Err(malformed(format!("token of {} bytes (max {MAX_TOKEN})", token.len())));
            }
            put_bytes(&mut p, token);
            p.extend_from_slice(&rank.to_le_bytes());
            p.extend_from_slice(&size.to_le_bytes());
            p.extend_from_slice(&incarnation.to_le_bytes());
            K_HELLO
        }
        Frame::Welcome { size, round } => {
            p.extend_from_slice(&size.to_le_bytes());
            p.extend_from_slice(&round.to_le_bytes());
            K_WELCOME
        }
        Frame::Refused { reason } => {
            put_bytes(&mut p, clip(reason).as_bytes());
            K_REFUSED
        }
        Frame::Contribute { round, data } => {
            if data.len() > MAX_FRAME - 12 {
                return Err(malformed(format!("contribution of {} bytes exceeds the limit", data.len())));
            }
            p.reserve(12 + data.len());
            p.extend_from_slice(&round.to_le_bytes());
            put_bytes(&mut p, data);
            K_CONTRIBUTE
        }
        Frame::Gathered { round, parts } => {
            let total: usize = 12 + parts.iter().map(|d| 4 + d.len()).sum::<usize>();
            if total > MAX_FRAME {
                return Err(malformed(format!(
                    "gathered result of {total} bytes exceeds the {MAX_FRAME}-byte frame limit"
                )));
            }
            p.reserve(total);
            p.extend_from_slice(&round.to_le_bytes());
            p.extend_from_slice(&(parts.len() as u32).to_le_bytes());
            for d in parts {
                put_bytes(&mut p, d);
            }
            K_GATHERED
        }
        Frame::Abort { rank, reason } => {
            p.push(rank.is_some() as u8);
            p.extend_from_slice(&rank.unwrap_or(0).to_le_bytes());
            put_bytes(&mut p, clip(reason).as_bytes());
            K_ABORT
        }
        Frame::Bye => K_BYE,
        Frame::Publish { address } => {
            check_address(address)?;
            put_bytes(&mut p, address);
            K_PUBLISH
        }
        Frame::Lookup => K_LOOKUP,
        Frame::Addresses { entries } => {
            let total: usize =
                4 + entries.iter().map(|e| 13 + e.address.as_ref().map_or(0, Vec::len)).sum::<usize>();
            if total > MAX_FRAME {
                return Err(malformed(format!("address table of {total} bytes exceeds the limit")));
            }
            p.reserve(total);
            p.extend_from_slice(&(entries.len() as u32).to_le_bytes());
            for e in entries {
                p.extend_from_slice(&e.rank.to_le_bytes());
                p.extend_from_slice(&e.incarnation.to_le_bytes());
                p.push(e.address.is_some() as u8);
                let address = e.address.as_deref().unwrap_or(&[]);
                check_address(address)?;
                put_bytes(&mut p, address);
            }
            K_ADDRESSES
        }
        Frame::Rejoined { rank, incarnation, address } => {
            check_address(address)?;
            p.extend_from_slice(&rank.to_le_bytes());
            p.extend_from_slice(&incarnation.to_le_bytes());
            put_bytes(&mut p, address);
            K_REJOINED
        }
    };
    if p.len() > MAX_FRAME {
        return Err(malformed(format!("payload of {} bytes exceeds the limit", p.len())));
    }
    let mut out = Vec::with_capacity(HEADER_LEN + p.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.push(kind);
    out.push(0);
    out.extend_from_slice(&(p.len() as u32).to_le_bytes());
    out.extend_from_slice(&p);
    Ok(out)
}

/// Validates a header; returns the kind and the payload length (at most `max_len`).
pub fn parse_header(h: &[u8; HEADER_LEN], max_len: usize) -> Result<(u8, usize)> {
    if h[0..4] != MAGIC {
        return Err(malformed(format!("bad magic {:02x?}", &h[0..4])));
    }
    let version = u16::from_le_bytes([h[4], h[5]]);
    if version != VERSION {
        return Err(malformed(format!("unsupported version {version} (expected {VERSION})")));
    }
    let kind = h[6];
    if !(K_HELLO..=K_LAST).contains(&kind) {
        return Err(malformed(format!("unknown kind {kind}")));
    }
    if h[7] != 0 {
        return Err(malformed(format!("unknown flags {:#x}", h[7])));
    }
    let len = u32::from_le_bytes([h[8], h[9], h[10], h[11]]) as usize;
    if len > max_len.min(MAX_FRAME) {
        return Err(malformed(format!("length {len} exceeds the limit of {}", max_len.min(MAX_FRAME))));
    }
    Ok((kind, len))
}

/// A cursor over a payload whose reads fail instead of panicking.
struct Cur<'a> {
    b: &'a [u8],
}

impl<'a> Cur<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if self.b.len() < n {
            return Err(malformed(format!("truncated {what}: need {n} bytes, have {}", self.b.len())));
        }
        let (head, tail) = self.b.split_at(n);
        self.b = tail;
        Ok(head)
    }
    fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.take(1, what)?[0])
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        let b = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn bytes(&mut self, what: &str) -> Result<&'a [u8]> {
        let n = self.u32(what)? as usize;
        self.take(n, what)
    }
    fn string(&mut self, what: &str) -> Result<String> {
        let b = self.bytes(what)?;
        String::from_utf8(b.to_vec()).map_err(|_| malformed(format!("{what} is not UTF-8")))
    }
    fn end(&self) -> Result<()> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(malformed(format!("{} trailing bytes", self.b.len())))
        }
    }
}

fn address(c: &mut Cur<'_>) -> Result<Vec<u8>> {
    let b = c.bytes("address")?;
    check_address(b)?;
    Ok(b.to_vec())
}

/// Decodes a payload of the given kind.
pub fn decode_payload(kind: u8, payload: &[u8]) -> Result<Frame> {
    let mut c = Cur { b: payload };
    let frame = match kind {
        K_HELLO => {
            let token = c.bytes("token")?;
            if token.len() > MAX_TOKEN {
                return Err(malformed("token too long"));
            }
            Frame::Hello {
                token: token.to_vec(),
                rank: c.u32("rank")?,
                size: c.u32("size")?,
                incarnation: c.u32("incarnation")?,
            }
        }
        K_WELCOME => Frame::Welcome { size: c.u32("size")?, round: c.u64("round")? },
        K_REFUSED => Frame::Refused { reason: c.string("reason")? },
        K_CONTRIBUTE => {
            let round = c.u64("round")?;
            Frame::Contribute { round, data: c.bytes("data")?.to_vec() }
        }
        K_GATHERED => {
            let round = c.u64("round")?;
            let count = c.u32("count")? as usize;
            // Each part takes at least 4 bytes: bound the reservation by what is present.
            if count > c.b.len() / 4 {
                return Err(malformed(format!("count {count} larger than the payload allows")));
            }
            let mut parts = Vec::with_capacity(count);
            for _ in 0..count {
                parts.push(c.bytes("part")?.to_vec());
            }
            Frame::Gathered { round, parts }
        }
        K_ABORT => {
            let has = c.u8("has_rank")?;
            let rank = c.u32("rank")?;
            let rank = match has {
                0 => None,
                1 => Some(rank),
                x => return Err(malformed(format!("bad has_rank {x}"))),
            };
            Frame::Abort { rank, reason: c.string("reason")? }
        }
        K_BYE => Frame::Bye,
        K_PUBLISH => Frame::Publish { address: address(&mut c)? },
        K_LOOKUP => Frame::Lookup,
        K_ADDRESSES => {
            let count = c.u32("count")? as usize;
            // Each entry takes at least 13 bytes: bound the reservation by what is present.
            if count > c.b.len() / 13 {
                return Err(malformed(format!("count {count} larger than the payload allows")));
            }
            let mut entries = Vec::with_capacity(count);
            for _ in 0..count {
                let rank = c.u32("rank")?;
                let incarnation = c.u32("incarnation")?;
                let has = c.u8("has_address")?;
                let addr = address(&mut c)?;
                let address = match has {
                    0 if addr.is_empty() => None,
                    1 => Some(addr),
                    x => {
                        return Err(malformed(format!(
                            "bad has_address {x} (address of {} bytes)",
                            addr.len()
                        )))
                    }
                };
                entries.push(PeerAddress { rank, incarnation, address });
            }
            Frame::Addresses { entries }
        }
        K_REJOINED => {
            let rank = c.u32("rank")?;
            let incarnation = c.u32("incarnation")?;
            Frame::Rejoined { rank, incarnation, address: address(&mut c)? }
        }
        other => return Err(malformed(format!("unknown kind {other}"))),
    };
    c.end()?;
    Ok(frame)
}

/// Decodes one whole frame from the front of `buf`; returns it and the bytes consumed.
/// An incomplete frame is `Malformed` too.
pub fn decode(buf: &[u8]) -> Result<(Frame, usize)> {
    let Some(h) = buf.get(..HEADER_LEN) else {
        return Err(malformed(format!("truncated header: {} bytes", buf.len())));
    };
    let mut hdr = [0u8; HEADER_LEN];
    hdr.copy_from_slice(h);
    let (kind, len) = parse_header(&hdr, MAX_FRAME)?;
    let Some(payload) = buf.get(HEADER_LEN..HEADER_LEN + len) else {
        return Err(malformed(format!("truncated payload: {} of {len} bytes", buf.len() - HEADER_LEN)));
    };
    Ok((decode_payload(kind, payload)?, HEADER_LEN + len))
}

/// How long [`read_frame`] may wait. The reader's own read timeout must be set to a short
/// tick: it is the granularity at which deadlines and `cancel` are checked.
pub struct Wait<'a> {
    /// Deadline for the first byte of the frame; `None` waits while idle (checking `cancel`).
    pub idle_deadline: Option<Instant>,
    /// Once the first byte arrived, the whole frame must arrive within this.
    pub frame_timeout: Duration,
    /// Polled on every tick; `true` stops the read.
    pub cancel: &'a dyn Fn() -> bool,
}

/// What [`read_frame`] found.
#[derive(Debug)]
pub enum Read1 {
    Frame(Frame),
    /// The peer closed cleanly between frames.
    Eof,
}

fn is_tick(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

/// Fills `buf` from `r` (or returns the count at clean EOF); `started` tells whether any byte
/// of the current frame has arrived already.
fn fill<R: Read>(r: &mut R, buf: &mut [u8], started: &mut Option<Instant>, w: &Wait<'_>) -> Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => return Ok(got),
            Ok(n) => {
                got += n;
                started.get_or_insert_with(Instant::now);
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if is_tick(&e) => {
                if (w.cancel)() {
                    return Err(TransportError::Bootstrap("cancelled".into()));
                }
                match started {
                    // A frame that stalls halfway is broken, not merely late.
                    Some(t0) if t0.elapsed() > w.frame_timeout => {
                        return Err(malformed(format!(
                            "incomplete frame: stalled for over {:?}",
                            w.frame_timeout
                        )));
                    }
                    Some(_) => {}
                    None => {
                        if let Some(d) = w.idle_deadline {
                            if Instant::now() >= d {
                                return Err(TransportError::Timeout(w.frame_timeout));
                            }
                        }
                    }
                }
            }
            Err(e) => return Err(TransportError::io("bootstrap read", e)),
        }
    }
    Ok(got)
}

/// Reads one frame of at most `max_len` payload bytes. Memory grows only with bytes that
/// actually arrived.
pub fn read_frame<R: Read>(r: &mut R, max_len: usize, w: &Wait<'_>) -> Result<Read1> {
    let mut started = None;
    let mut hdr = [0u8; HEADER_LEN];
    let got = fill(r, &mut hdr, &mut started, w)?;
    if got == 0 {
        return Ok(Read1::Eof);
    }
    if got < HEADER_LEN {
        return Err(malformed(format!("connection closed inside a header ({got} bytes)")));
    }
    let (kind, len) = parse_header(&hdr, max_len)?;
    let mut payload = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    while payload.len() < len {
        let want = (len - payload.len()).min(chunk.len());
        let n = fill(r, &mut chunk[..want], &mut started, w)?;
        payload.extend_from_slice(&chunk[..n]);
        if n < want {
            return Err(malformed(format!(
                "connection closed inside a payload ({} of {len} bytes)",
                payload.len()
            )));
        }
    }
    decode_payload(kind, &payload).map(Read1::Frame)
}

/// Constant-time equality (time depends on lengths only).
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().max(b.len());
    let mut diff = (a.len() != b.len()) as u8;
    for i in 0..n {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= x ^ y;
    }
    // black_box keeps the optimizer from turning the fold into an early exit.
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_each_kind() {
        let frames = vec![
            Frame::Hello { token: b"tok".to_vec(), rank: 3, size: 4, incarnation: 1 },
            Frame::Welcome { size: 4, round: 9 },
            Frame::Refused { reason: "no".into() },
            Frame::Contribute { round: 7, data: vec![1, 2, 3] },
            Frame::Gathered { round: 7, parts: vec![vec![], vec![9]] },
            Frame::Abort { rank: Some(2), reason: "gone".into() },
            Frame::Abort { rank: None, reason: String::new() },
            Frame::Bye,
            Frame::Publish { address: vec![1, 2, 3] },
            Frame::Lookup,
            Frame::Addresses {
                entries: vec![
                    PeerAddress { rank: 0, incarnation: 0, address: Some(vec![7; 20]) },
                    PeerAddress { rank: 1, incarnation: 3, address: None },
                ],
            },
            Frame::Rejoined { rank: 1, incarnation: 4, address: vec![9; 20] },
        ];
        for f in frames {
            let b = encode(&f).unwrap();
            let (g, n) = decode(&b).unwrap();
            assert_eq!(f, g);
            assert_eq!(n, b.len());
        }
    }

    #[test]
    fn constant_time_eq() {
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"abcd"));
        assert!(!ct_eq(b"", b"a"));
        assert!(ct_eq(b"", b""));
    }
}
