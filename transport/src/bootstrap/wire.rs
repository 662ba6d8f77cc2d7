//! Bootstrap wire format: versioned, length-prefixed frames.
//!
//! ```text
//! header (12 bytes, little endian): magic "RVBT" | version u16 | kind u8 | flags u8 (0) | length u32
//! payload: `length` bytes, layout per kind (see `Frame`)
//! ```
//!
//! Version 2 added the recovery frames (Publish, Lookup, Addresses, Rejoined); a version-1
//! peer is refused with "unsupported version" rather than misreading them. Version 3 added
//! Uniform (a round whose contributions are all equal, a barrier's: O(1) bytes, not O(n)).
//! Version 4 added the agent frames (AgentHello, Heartbeat, PartDone, TakeOver, JobEnd): a
//! per-host agent's control connection to the job's controller, on the rendezvous port.
//! Version 5 tells a lost rank from one that has not published yet in Addresses; version 6 a
//! retired rank (gone for good) from a lost one. Version 7 added MaskRequest and MaskReply
//! (partial redundancy across hosts: an agent asks the controller to mask a copy's death).
//!
//! Decoding never panics and never allocates more than the bytes actually present (or, when
//! reading a socket, more than the bytes that actually arrived), so a peer cannot make us
//! reserve an arbitrary length.

use std::io::{ErrorKind, Read};
use std::time::{Duration, Instant};

use super::PeerAddress;
use crate::codec::{Reader, Writer};
use crate::error::{Result, TransportError};

pub const MAGIC: [u8; 4] = *b"RVBT";
pub const VERSION: u16 = 7;
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
const K_UNIFORM: u8 = 12;
const K_AGENT_HELLO: u8 = 13;
const K_HEARTBEAT: u8 = 14;
const K_PART_DONE: u8 = 15;
const K_TAKE_OVER: u8 = 16;
const K_JOB_END: u8 = 17;
const K_MASK_REQUEST: u8 = 18;
const K_MASK_REPLY: u8 = 19;
const K_LAST: u8 = K_MASK_REPLY;
/// Longest host name an AgentHello may carry.
pub const MAX_HOST: usize = 255;

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
    /// Result of a round in which all `count` ranks contributed the same `part` (a barrier):
    /// `round u64 | count u32 | part: bytes`.
    Uniform { round: u64, count: u32, part: Vec<u8> },
    /// First frame of an agent's control connection: `token: bytes | size u32 | host: str |
    /// first u32 | count u32 | first_incarnation u32 | respawn u32`. The agent runs ranks
    /// `first..first+count` from `first_incarnation`, respawning its nodes at most `respawn`
    /// times; `count` 0 is a spare agent, idle until told to take over.
    AgentHello {
        token: Vec<u8>,
        size: u32,
        host: String,
        first: u32,
        count: u32,
        first_incarnation: u32,
        respawn: u32,
    },
    /// Either side of an agent connection: still alive (empty payload).
    Heartbeat,
    /// Agent to controller: its ranks ended, the launch's exit code: `code i32`.
    PartDone { code: i32 },
    /// Controller to a spare agent: run ranks `first..first+count` from `incarnation`:
    /// `first u32 | count u32 | incarnation u32`.
    TakeOver { first: u32, count: u32, incarnation: u32 },
    /// Controller to agents: the job ended with `code` (non-zero: stop your ranks):
    /// `code i32 | reason: str`.
    JobEnd { code: i32, reason: String },
    /// Agent to controller: copy `rank` at `incarnation` was killed; retire it if one of its
    /// `mates` (the other copies of its rank) is alive: `rank u32 | incarnation u32 | count u32
    /// | count × mate u32 | reason: str`.
    MaskRequest { rank: u32, incarnation: u32, mates: Vec<u32>, reason: String },
    /// Controller to agent: whether `rank`'s death was masked (retired): `rank u32 | masked u8`.
    MaskReply { rank: u32, masked: bool },
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
            Frame::Uniform { .. } => "Uniform",
            Frame::AgentHello { .. } => "AgentHello",
            Frame::Heartbeat => "Heartbeat",
            Frame::PartDone { .. } => "PartDone",
            Frame::TakeOver { .. } => "TakeOver",
            Frame::JobEnd { .. } => "JobEnd",
            Frame::MaskRequest { .. } => "MaskRequest",
            Frame::MaskReply { .. } => "MaskReply",
        }
    }
}

fn malformed(detail: impl Into<String>) -> TransportError {
    TransportError::Malformed { what: "bootstrap frame", detail: detail.into() }
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

/// Checks the limits a frame must respect before any byte of it is written.
fn check_limits(frame: &Frame) -> Result<()> {
    match frame {
        Frame::Hello { token, .. } | Frame::AgentHello { token, .. } if token.len() > MAX_TOKEN => {
            Err(malformed(format!("token of {} bytes (max {MAX_TOKEN})", token.len())))
        }
        Frame::AgentHello { host, .. } if host.len() > MAX_HOST => {
            Err(malformed(format!("host name of {} bytes (max {MAX_HOST})", host.len())))
        }
        Frame::Uniform { part, .. } if part.len() > MAX_FRAME - 16 => {
            Err(malformed(format!("uniform result of {} bytes exceeds the limit", part.len())))
        }
        Frame::Contribute { data, .. } if data.len() > MAX_FRAME - 12 => {
            Err(malformed(format!("contribution of {} bytes exceeds the limit", data.len())))
        }
        Frame::Gathered { parts, .. } => {
            let total: usize = 12 + parts.iter().map(|d| 4 + d.len()).sum::<usize>();
            if total > MAX_FRAME {
                return Err(malformed(format!(
                    "gathered result of {total} bytes exceeds the {MAX_FRAME}-byte frame limit"
                )));
            }
            Ok(())
        }
        Frame::Publish { address } | Frame::Rejoined { address, .. } => check_address(address),
        Frame::Addresses { entries } => {
            let total: usize =
                4 + entries.iter().map(|e| 13 + e.address.as_ref().map_or(0, Vec::len)).sum::<usize>();
            if total > MAX_FRAME {
                return Err(malformed(format!("address table of {total} bytes exceeds the limit")));
            }
            entries.iter().try_for_each(|e| check_address(e.address.as_deref().unwrap_or(&[])))
        }
        _ => Ok(()),
    }
}

/// Writes the payload of `frame`; returns its kind code.
fn encode_payload(frame: &Frame, p: &mut Vec<u8>) -> u8 {
    let mut w = Writer::new(p);
    match frame {
        Frame::Hello { token, rank, size, incarnation } => {
            w.bytes32(token).u32(*rank).u32(*size).u32(*incarnation);
            K_HELLO
        }
        Frame::Welcome { size, round } => {
            w.u32(*size).u64(*round);
            K_WELCOME
        }
        Frame::Refused { reason } => {
            w.bytes32(clip(reason).as_bytes());
            K_REFUSED
        }
        Frame::Contribute { round, data } => {
            w.u64(*round).bytes32(data);
            K_CONTRIBUTE
        }
        Frame::Gathered { round, parts } => {
            w.u64(*round).u32(parts.len() as u32);
            parts.iter().for_each(|d| _ = w.bytes32(d));
            K_GATHERED
        }
        Frame::Abort { rank, reason } => {
            w.u8(rank.is_some() as u8).u32(rank.unwrap_or(0)).bytes32(clip(reason).as_bytes());
            K_ABORT
        }
        Frame::Bye => K_BYE,
        Frame::Publish { address } => {
            w.bytes32(address);
            K_PUBLISH
        }
        Frame::Lookup => K_LOOKUP,
        Frame::Addresses { entries } => {
            w.u32(entries.len() as u32);
            for e in entries {
                // 0: no address yet, 1: an address, 2: lost, 3: retired.
                let state = match (&e.address, e.lost, e.retired) {
                    (Some(_), ..) => 1,
                    (None, _, true) => 3,
                    (None, true, false) => 2,
                    (None, false, false) => 0,
                };
                w.u32(e.rank).u32(e.incarnation).u8(state);
                w.bytes32(e.address.as_deref().unwrap_or(&[]));
            }
            K_ADDRESSES
        }
        Frame::Rejoined { rank, incarnation, address } => {
            w.u32(*rank).u32(*incarnation).bytes32(address);
            K_REJOINED
        }
        Frame::Uniform { round, count, part } => {
            w.u64(*round).u32(*count).bytes32(part);
            K_UNIFORM
        }
        Frame::AgentHello { token, size, host, first, count, first_incarnation, respawn } => {
            w.bytes32(token).u32(*size).bytes32(host.as_bytes());
            w.u32(*first).u32(*count).u32(*first_incarnation).u32(*respawn);
            K_AGENT_HELLO
        }
        Frame::Heartbeat => K_HEARTBEAT,
        Frame::PartDone { code } => {
            w.u32(*code as u32);
            K_PART_DONE
        }
        Frame::TakeOver { first, count, incarnation } => {
            w.u32(*first).u32(*count).u32(*incarnation);
            K_TAKE_OVER
        }
        Frame::JobEnd { code, reason } => {
            w.u32(*code as u32).bytes32(clip(reason).as_bytes());
            K_JOB_END
        }
        Frame::MaskRequest { rank, incarnation, mates, reason } => {
            w.u32(*rank).u32(*incarnation).u32(mates.len() as u32);
            mates.iter().for_each(|m| _ = w.u32(*m));
            w.bytes32(clip(reason).as_bytes());
            K_MASK_REQUEST
        }
        Frame::MaskReply { rank, masked } => {
            w.u32(*rank).u8(u8::from(*masked));
            K_MASK_REPLY
        }
    }
}

/// Encodes one frame (header + payload). Fails only when the frame exceeds a limit.
pub fn encode(frame: &Frame) -> Result<Vec<u8>> {
    check_limits(frame)?;
    let mut p = Vec::new();
    let kind = encode_payload(frame, &mut p);
    if p.len() > MAX_FRAME {
        return Err(malformed(format!("payload of {} bytes exceeds the limit", p.len())));
    }
    let mut out = Vec::with_capacity(HEADER_LEN + p.len());
    Writer::new(&mut out).raw(&MAGIC).u16(VERSION).u8(kind).u8(0).u32(p.len() as u32).raw(&p);
    Ok(out)
}

/// Validates a header; returns the kind and the payload length (at most `max_len`).
pub fn parse_header(h: &[u8; HEADER_LEN], max_len: usize) -> Result<(u8, usize)> {
    let mut r = Reader::new(h, "bootstrap header");
    let magic = r.array::<4>("magic")?;
    if magic != MAGIC {
        return Err(malformed(format!("bad magic {magic:02x?}")));
    }
    let version = r.u16("version")?;
    if version != VERSION {
        return Err(malformed(format!("unsupported version {version} (expected {VERSION})")));
    }
    let kind = r.u8("kind")?;
    if !(K_HELLO..=K_LAST).contains(&kind) {
        return Err(malformed(format!("unknown kind {kind}")));
    }
    let flags = r.u8("flags")?;
    if flags != 0 {
        return Err(malformed(format!("unknown flags {flags:#x}")));
    }
    let len = r.u32("length")? as usize;
    if len > max_len.min(MAX_FRAME) {
        return Err(malformed(format!("length {len} exceeds the limit of {}", max_len.min(MAX_FRAME))));
    }
    Ok((kind, len))
}

fn address(r: &mut Reader<'_>) -> Result<Vec<u8>> {
    let b = r.bytes32("address")?;
    check_address(b)?;
    Ok(b.to_vec())
}

fn string(r: &mut Reader<'_>, field: &'static str) -> Result<String> {
    let b = r.bytes32(field)?;
    String::from_utf8(b.to_vec()).map_err(|_| malformed(format!("{field} is not UTF-8")))
}

/// Reads a count of items taking at least `min_item` bytes each, bounded by the bytes present
/// so that a peer cannot make us reserve an arbitrary length.
fn count(r: &mut Reader<'_>, min_item: usize) -> Result<usize> {
    let count = r.u32("count")? as usize;
    if count > r.remaining() / min_item {
        return Err(malformed(format!("count {count} larger than the payload allows")));
    }
    Ok(count)
}

fn decode_hello(r: &mut Reader<'_>) -> Result<Frame> {
    let token = r.bytes32("token")?;
    if token.len() > MAX_TOKEN {
        return Err(malformed("token too long"));
    }
    Ok(Frame::Hello {
        token: token.to_vec(),
        rank: r.u32("rank")?,
        size: r.u32("size")?,
        incarnation: r.u32("incarnation")?,
    })
}

fn decode_agent_hello(r: &mut Reader<'_>) -> Result<Frame> {
    let token = r.bytes32("token")?;
    if token.len() > MAX_TOKEN {
        return Err(malformed("token too long"));
    }
    let size = r.u32("size")?;
    let host = string(r, "host")?;
    if host.len() > MAX_HOST {
        return Err(malformed("host name too long"));
    }
    Ok(Frame::AgentHello {
        token: token.to_vec(),
        size,
        host,
        first: r.u32("first")?,
        count: r.u32("count")?,
        first_incarnation: r.u32("first_incarnation")?,
        respawn: r.u32("respawn")?,
    })
}

fn decode_abort(r: &mut Reader<'_>) -> Result<Frame> {
    let has = r.u8("has_rank")?;
    let rank = r.u32("rank")?;
    let rank = match has {
        0 => None,
        1 => Some(rank),
        x => return Err(malformed(format!("bad has_rank {x}"))),
    };
    Ok(Frame::Abort { rank, reason: string(r, "reason")? })
}

fn decode_addresses(r: &mut Reader<'_>) -> Result<Frame> {
    let count = count(r, 13)?;
    let mut entries = Vec::with_capacity(count);
    for _ in 0..count {
        let rank = r.u32("rank")?;
        let incarnation = r.u32("incarnation")?;
        let has = r.u8("address state")?;
        let addr = address(r)?;
        let (address, lost, retired) = match has {
            0 if addr.is_empty() => (None, false, false),
            1 => (Some(addr), false, false),
            2 if addr.is_empty() => (None, true, false),
            3 if addr.is_empty() => (None, true, true),
            x => return Err(malformed(format!("bad address state {x} (address of {} bytes)", addr.len()))),
        };
        entries.push(PeerAddress { rank, incarnation, address, lost, retired });
    }
    Ok(Frame::Addresses { entries })
}

/// Decodes a payload of the given kind.
pub fn decode_payload(kind: u8, payload: &[u8]) -> Result<Frame> {
    let mut r = Reader::new(payload, "bootstrap frame");
    let r = &mut r;
    let frame = match kind {
        K_HELLO => decode_hello(r)?,
        K_WELCOME => Frame::Welcome { size: r.u32("size")?, round: r.u64("round")? },
        K_REFUSED => Frame::Refused { reason: string(r, "reason")? },
        K_CONTRIBUTE => {
            let round = r.u64("round")?;
            Frame::Contribute { round, data: r.bytes32("data")?.to_vec() }
        }
        K_GATHERED => {
            let round = r.u64("round")?;
            let count = count(r, 4)?;
            let parts =
                (0..count).map(|_| r.bytes32("part").map(<[u8]>::to_vec)).collect::<Result<_, _>>()?;
            Frame::Gathered { round, parts }
        }
        K_ABORT => decode_abort(r)?,
        K_BYE => Frame::Bye,
        K_PUBLISH => Frame::Publish { address: address(r)? },
        K_LOOKUP => Frame::Lookup,
        K_ADDRESSES => decode_addresses(r)?,
        K_REJOINED => {
            let rank = r.u32("rank")?;
            let incarnation = r.u32("incarnation")?;
            Frame::Rejoined { rank, incarnation, address: address(r)? }
        }
        K_UNIFORM => {
            let round = r.u64("round")?;
            let count = r.u32("count")?;
            Frame::Uniform { round, count, part: r.bytes32("part")?.to_vec() }
        }
        K_AGENT_HELLO => decode_agent_hello(r)?,
        K_HEARTBEAT => Frame::Heartbeat,
        K_PART_DONE => Frame::PartDone { code: r.u32("code")? as i32 },
        K_TAKE_OVER => {
            let first = r.u32("first")?;
            let count = r.u32("count")?;
            Frame::TakeOver { first, count, incarnation: r.u32("incarnation")? }
        }
        K_JOB_END => {
            let code = r.u32("code")? as i32;
            Frame::JobEnd { code, reason: string(r, "reason")? }
        }
        K_MASK_REQUEST => {
            let (rank, incarnation) = (r.u32("rank")?, r.u32("incarnation")?);
            let n = count(r, 4)?;
            let mates = (0..n).map(|_| r.u32("mate")).collect::<Result<Vec<u32>, _>>()?;
            Frame::MaskRequest { rank, incarnation, mates, reason: string(r, "reason")? }
        }
        K_MASK_REPLY => {
            let rank = r.u32("rank")?;
            let masked = match r.u8("masked")? {
                0 => false,
                1 => true,
                x => return Err(malformed(format!("mask reply: masked {x}"))),
            };
            Frame::MaskReply { rank, masked }
        }
        other => return Err(malformed(format!("unknown kind {other}"))),
    };
    r.finish()?;
    Ok(frame)
}

/// Decodes one whole frame from the front of `buf`; returns it and the bytes consumed.
/// An incomplete frame is `Malformed` too.
pub fn decode(buf: &[u8]) -> Result<(Frame, usize)> {
    let Some((hdr, rest)) = buf.split_first_chunk::<HEADER_LEN>() else {
        return Err(malformed(format!("truncated header: {} bytes", buf.len())));
    };
    let (kind, len) = parse_header(hdr, MAX_FRAME)?;
    let Some(payload) = rest.get(..len) else {
        return Err(malformed(format!("truncated payload: {} of {len} bytes", rest.len())));
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
    use proptest::prelude::*;

    #[test]
    fn roundtrip_each_kind() {
        let frames = vec![
            Frame::Hello { token: b"tok".to_vec(), rank: 3, size: 4, incarnation: 1 },
            Frame::Welcome { size: 4, round: 9 },
            Frame::Refused { reason: "no".into() },
            Frame::Contribute { round: 7, data: vec![1, 2, 3] },
            Frame::Gathered { round: 7, parts: vec![vec![], vec![9]] },
            Frame::Uniform { round: 8, count: 1024, part: vec![] },
            Frame::Abort { rank: Some(2), reason: "gone".into() },
            Frame::Abort { rank: None, reason: String::new() },
            Frame::Bye,
            Frame::Publish { address: vec![1, 2, 3] },
            Frame::Lookup,
            Frame::Addresses {
                entries: vec![
                    PeerAddress {
                        rank: 0,
                        incarnation: 0,
                        address: Some(vec![7; 20]),
                        lost: false,
                        retired: false,
                    },
                    PeerAddress { rank: 1, incarnation: 3, address: None, lost: true, retired: false },
                    PeerAddress { rank: 2, incarnation: 0, address: None, lost: true, retired: true },
                ],
            },
            Frame::Rejoined { rank: 1, incarnation: 4, address: vec![9; 20] },
            Frame::AgentHello {
                token: b"tok".to_vec(),
                size: 8,
                host: "hc".into(),
                first: 4,
                count: 2,
                first_incarnation: 3,
                respawn: 1,
            },
            Frame::Heartbeat,
            Frame::PartDone { code: -9 },
            Frame::TakeOver { first: 4, count: 2, incarnation: 5 },
            Frame::JobEnd { code: 1, reason: "host hc lost".into() },
            Frame::MaskRequest { rank: 5, incarnation: 0, mates: vec![2], reason: "killed".into() },
            Frame::MaskRequest { rank: 5, incarnation: 1, mates: vec![], reason: String::new() },
            Frame::MaskReply { rank: 5, masked: true },
            Frame::MaskReply { rank: 6, masked: false },
        ];
        for f in frames {
            let b = encode(&f).unwrap();
            let (g, n) = decode(&b).unwrap();
            assert_eq!(f, g);
            assert_eq!(n, b.len());
        }
    }

    /// The bytes of version 7, written out by hand: old and new peers must agree on them.
    #[test]
    fn pinned_encodings() {
        let hello = Frame::Hello { token: b"tok".to_vec(), rank: 3, size: 4, incarnation: 1 };
        let mut want = b"RVBT\x07\x00\x01\x00\x13\x00\x00\x00\x03\x00\x00\x00tok".to_vec();
        want.extend_from_slice(&[3, 0, 0, 0, 4, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(encode(&hello).unwrap(), want);
        let abort = Frame::Abort { rank: Some(2), reason: "gone".into() };
        let want = b"RVBT\x07\x00\x06\x00\x0d\x00\x00\x00\x01\x02\x00\x00\x00\x04\x00\x00\x00gone";
        assert_eq!(encode(&abort).unwrap(), want);
        let table = Frame::Addresses {
            entries: vec![
                PeerAddress {
                    rank: 1,
                    incarnation: 2,
                    address: Some(vec![0xaa]),
                    lost: false,
                    retired: false,
                },
                PeerAddress { rank: 5, incarnation: 0, address: None, lost: false, retired: false },
                PeerAddress { rank: 6, incarnation: 1, address: None, lost: true, retired: true },
            ],
        };
        let mut want = b"RVBT\x07\x00\x0a\x00\x2c\x00\x00\x00\x03\x00\x00\x00".to_vec();
        want.extend_from_slice(&[1, 0, 0, 0, 2, 0, 0, 0, 1, 1, 0, 0, 0, 0xaa]);
        want.extend_from_slice(&[5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        want.extend_from_slice(&[6, 0, 0, 0, 1, 0, 0, 0, 3, 0, 0, 0, 0]);
        assert_eq!(encode(&table).unwrap(), want);
        let welcome = Frame::Welcome { size: 2, round: 0x0102 };
        let want = b"RVBT\x07\x00\x02\x00\x0c\x00\x00\x00\x02\x00\x00\x00\x02\x01\x00\x00\x00\x00\x00\x00";
        assert_eq!(encode(&welcome).unwrap(), want);
        let uniform = Frame::Uniform { round: 1, count: 3, part: vec![7] };
        let want = b"RVBT\x07\x00\x0c\x00\x11\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x01\x00\x00\x00\x07";
        assert_eq!(encode(&uniform).unwrap(), want);
        let take = Frame::TakeOver { first: 4, count: 2, incarnation: 5 };
        let want = b"RVBT\x07\x00\x10\x00\x0c\x00\x00\x00\x04\x00\x00\x00\x02\x00\x00\x00\x05\x00\x00\x00";
        assert_eq!(encode(&take).unwrap(), want);
        let ask = Frame::MaskRequest { rank: 4, incarnation: 0, mates: vec![0], reason: "k".into() };
        let want = b"RVBT\x07\x00\x12\x00\x15\x00\x00\x00\x04\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00k";
        assert_eq!(encode(&ask).unwrap(), want);
        let reply = Frame::MaskReply { rank: 4, masked: true };
        assert_eq!(encode(&reply).unwrap(), b"RVBT\x07\x00\x13\x00\x05\x00\x00\x00\x04\x00\x00\x00\x01");
    }

    fn bytes() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(any::<u8>(), 0..24)
    }

    fn frame() -> impl Strategy<Value = Frame> {
        let peer = (any::<u32>(), any::<u32>(), prop::option::of(bytes()), any::<bool>(), any::<bool>())
            .prop_map(|(rank, incarnation, address, lost, retired)| {
                let retired = retired && address.is_none();
                let lost = (lost && address.is_none()) || retired;
                PeerAddress { rank, incarnation, address, lost, retired }
            });
        prop_oneof![
            (bytes(), any::<u32>(), any::<u32>(), any::<u32>())
                .prop_map(|(token, rank, size, incarnation)| Frame::Hello { token, rank, size, incarnation }),
            (any::<u32>(), any::<u64>()).prop_map(|(size, round)| Frame::Welcome { size, round }),
            ".{0,12}".prop_map(|reason| Frame::Refused { reason }),
            (any::<u64>(), bytes()).prop_map(|(round, data)| Frame::Contribute { round, data }),
            (any::<u64>(), prop::collection::vec(bytes(), 0..4))
                .prop_map(|(round, parts)| Frame::Gathered { round, parts }),
            (any::<u64>(), any::<u32>(), bytes()).prop_map(|(round, count, part)| Frame::Uniform {
                round,
                count,
                part
            }),
            (prop::option::of(any::<u32>()), ".{0,12}")
                .prop_map(|(rank, reason)| Frame::Abort { rank, reason }),
            Just(Frame::Bye),
            bytes().prop_map(|address| Frame::Publish { address }),
            Just(Frame::Lookup),
            prop::collection::vec(peer, 0..4).prop_map(|entries| Frame::Addresses { entries }),
            (any::<u32>(), any::<u32>(), bytes()).prop_map(|(rank, incarnation, address)| Frame::Rejoined {
                rank,
                incarnation,
                address
            }),
            (bytes(), any::<u32>(), "[a-z]{0,8}", any::<[u32; 4]>()).prop_map(|(token, size, host, n)| {
                Frame::AgentHello {
                    token,
                    size,
                    host,
                    first: n[0],
                    count: n[1],
                    first_incarnation: n[2],
                    respawn: n[3],
                }
            }),
            Just(Frame::Heartbeat),
            any::<i32>().prop_map(|code| Frame::PartDone { code }),
            any::<[u32; 3]>().prop_map(|n| Frame::TakeOver { first: n[0], count: n[1], incarnation: n[2] }),
            (any::<i32>(), ".{0,12}").prop_map(|(code, reason)| Frame::JobEnd { code, reason }),
            (any::<[u32; 2]>(), prop::collection::vec(any::<u32>(), 0..4), ".{0,12}").prop_map(
                |(n, mates, reason)| Frame::MaskRequest { rank: n[0], incarnation: n[1], mates, reason }
            ),
            (any::<u32>(), any::<bool>()).prop_map(|(rank, masked)| Frame::MaskReply { rank, masked }),
        ]
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(kind in 0u8..22, payload in prop::collection::vec(any::<u8>(), 0..128)) {
            let _ = decode_payload(kind, &payload);
            let mut framed = MAGIC.to_vec();
            framed.extend_from_slice(&VERSION.to_le_bytes());
            framed.extend_from_slice(&[kind, 0]);
            framed.extend_from_slice(&payload);
            let _ = decode(&framed);
            let _ = decode(&payload);
        }

        #[test]
        fn round_trips_what_the_encoder_wrote(f in frame()) {
            let b = encode(&f).unwrap();
            let (g, n) = decode(&b).unwrap();
            prop_assert_eq!(g, f);
            prop_assert_eq!(n, b.len());
            for cut in HEADER_LEN..b.len() {
                prop_assert!(decode(&b[..cut]).is_err());
            }
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
