//! One connection's byte streams: the send side queues frames when the socket is full and
//! streams read answers straight from registered memory in chunks; the receive side reads
//! into one fixed buffer and cuts length-prefixed frames out of it. Both are bounded: the
//! receive buffer holds one largest frame plus slack, the send queue's copied bytes are
//! capped by the provider (reads queue only a reference to the memory).

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::ops::Range;
use std::sync::Arc;

use crate::error::{Result, TransportError};
use crate::loopback::memory::Memory;
use crate::tcp::table;
use crate::tcp::wire;

/// Bytes of one data chunk: large enough to keep the socket busy, small enough that a
/// receive buffer holding one is cheap.
pub(crate) const CHUNK: usize = 256 << 10;
/// Small frames queued behind each other are packed into buffers of about this size.
const PACK: usize = 64 << 10;

/// Something waiting to be written.
enum Out {
    /// Whole frames, packed.
    Bytes(Vec<u8>),
    /// A read's answer: `len` bytes from `at` of `memory`, sent as data chunks of `cookie`.
    Stream { memory: Arc<Memory>, at: usize, len: usize, cookie: u64, sent: usize },
}

/// The send side: the frame being written, and what waits behind it.
#[derive(Default)]
pub(crate) struct Tx {
    head: Vec<u8>,
    head_pos: usize,
    queue: VecDeque<Out>,
    /// Copied bytes in `queue` (streams count nothing: they reference registered memory).
    queued: usize,
}

impl Tx {
    /// True when nothing waits to be written.
    pub(crate) fn is_empty(&self) -> bool {
        self.head_pos == self.head.len() && self.queue.is_empty()
    }

    /// Copied bytes waiting (the provider bounds this per connection).
    pub(crate) fn queued_bytes(&self) -> usize {
        self.queued + (self.head.len() - self.head_pos)
    }

    /// Queues a frame that `encode` appends to a buffer. Written straight into the head when
    /// nothing waits (no copy, no allocation), else packed behind what does.
    pub(crate) fn push(&mut self, encode: impl FnOnce(&mut Vec<u8>)) {
        if self.is_empty() {
            self.head.clear();
            self.head_pos = 0;
            encode(&mut self.head);
            return;
        }
        if !matches!(self.queue.back(), Some(Out::Bytes(b)) if b.len() < PACK) {
            self.queue.push_back(Out::Bytes(Vec::new()));
        }
        if let Some(Out::Bytes(b)) = self.queue.back_mut() {
            let before = b.len();
            encode(b);
            self.queued += b.len() - before;
        }
    }

    /// Queues the answer to a read: `len` bytes at `at` of `memory` (checked by the table).
    pub(crate) fn push_stream(&mut self, memory: Arc<Memory>, at: usize, len: usize, cookie: u64) {
        self.queue.push_back(Out::Stream { memory, at, len, cookie, sent: 0 });
    }

    /// Refills the head from the queue; false when nothing is left.
    fn refill(&mut self) -> bool {
        self.head.clear();
        self.head_pos = 0;
        match self.queue.front_mut() {
            None => false,
            Some(Out::Bytes(b)) => {
                std::mem::swap(&mut self.head, b);
                self.queued -= self.head.len();
                self.queue.pop_front();
                true
            }
            Some(Out::Stream { memory, at, len, cookie, sent }) => {
                let n = (*len - *sent).min(CHUNK);
                wire::data_header(&mut self.head, *cookie, *sent as u64, n);
                // The table checked at + len against the block when the read was served.
                let copied = table::append(memory, *at + *sent, n, &mut self.head);
                debug_assert!(copied);
                *sent += n;
                if *sent == *len {
                    self.queue.pop_front();
                }
                true
            }
        }
    }

    /// Everything waiting, as bytes (frames a rank sends itself never touch a socket).
    pub(crate) fn take_all(&mut self) -> Vec<u8> {
        let mut all = self.head[self.head_pos..].to_vec();
        while self.refill() {
            all.extend_from_slice(&self.head);
        }
        all
    }

    /// Writes as much as the socket takes. `Ok(true)` when everything went.
    pub(crate) fn flush(&mut self, stream: &mut TcpStream) -> io::Result<bool> {
        loop {
            if self.head_pos == self.head.len() && !self.refill() {
                return Ok(true);
            }
            match stream.write(&self.head[self.head_pos..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.head_pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// The receive side: one buffer, frames cut out of it in order.
pub(crate) struct Rx {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    max_body: usize,
}

/// What one read found.
pub(crate) enum Read1 {
    /// This many new bytes.
    Bytes(usize),
    /// Nothing now.
    Idle,
    /// The peer closed its side.
    Eof,
}

impl Rx {
    /// A receive side for frames whose bodies hold at most `max_body` bytes.
    pub(crate) fn new(max_body: usize) -> Rx {
        Rx { buf: Vec::new(), start: 0, end: 0, max_body }
    }

    /// Reads what the socket has, up to the buffer's free space.
    pub(crate) fn read(&mut self, stream: &mut TcpStream) -> io::Result<Read1> {
        if self.buf.is_empty() {
            // Allocated on first use: a peer that never sends costs nothing.
            self.buf = vec![0; wire::PREFIX + self.max_body + PACK];
        }
        if self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        loop {
            return match stream.read(&mut self.buf[self.end..]) {
                Ok(0) => Ok(Read1::Eof),
                Ok(n) => {
                    self.end += n;
                    Ok(Read1::Bytes(n))
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Read1::Idle),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => Err(e),
            };
        }
    }

    /// The next whole frame's body in `bytes()`, if one is buffered. A length beyond the
    /// largest frame is an error: the stream cannot be trusted after it.
    pub(crate) fn next_frame(&mut self) -> Result<Option<Range<usize>>> {
        let have = self.end - self.start;
        if have < wire::PREFIX {
            return Ok(None);
        }
        let p = &self.buf[self.start..self.start + wire::PREFIX];
        let len = u32::from_le_bytes([p[0], p[1], p[2], p[3]]) as usize;
        if len > self.max_body || len == 0 {
            return Err(TransportError::Malformed {
                what: "tcp frame",
                detail: format!("length {len} outside 1..={}", self.max_body),
            });
        }
        if have < wire::PREFIX + len {
            if self.start + wire::PREFIX + len > self.buf.len() {
                // Make room for the rest of this frame behind what is buffered.
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            return Ok(None);
        }
        let body = self.start + wire::PREFIX..self.start + wire::PREFIX + len;
        self.start = body.end;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        Ok(Some(body))
    }

    /// Reads and drops whatever the socket holds now (at most a few buffers' worth).
    pub(crate) fn discard(&mut self, stream: &mut TcpStream) -> io::Result<()> {
        let mut buf = [0u8; 16 << 10];
        for _ in 0..64 {
            match stream.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The buffer `next_frame`'s ranges index (valid until the next `read`).
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf
    }
}
