//! What the endpoint hands to the application ([`Delivery`], [`DeliveredFrame`]) and what it
//! holds between arrival and delivery (`Arrived`).

use std::fmt;

use reverb_transport::{Rank, Tag};

use crate::determinant::{Determinant, Rsn, Ssn};
use crate::framepool::FrameBytes;

/// One message handed to the application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub source: Rank,
    pub tag: Tag,
    pub payload: Vec<u8>,
    /// The message's number on its (source → this rank) channel; 0 when logging is off and
    /// messages go pass-through (`passthrough.rs`: no channel numbers).
    pub ssn: Ssn,
    /// This delivery's number among all of this rank's deliveries.
    pub rsn: Rsn,
    /// Set for wildcard receives only: deterministic ones replay without it. Never set
    /// pass-through, where nothing is logged.
    pub determinant: Option<Determinant>,
}

/// One message handed to the application in the buffer it arrived in: the received frame,
/// envelope in front of the payload. `payload()` reads the payload in place, so a large
/// message is touched once on its way in (the rendezvous read into a registered receive
/// region); `into_delivery` makes it an owned `Vec` for callers that want one (one more pass
/// over the payload). A large frame keeps its receive region from reuse until it is dropped.
#[derive(Clone)]
pub struct DeliveredFrame {
    pub source: Rank,
    pub tag: Tag,
    /// As [`Delivery::ssn`].
    pub ssn: Ssn,
    /// This delivery's number among all of this rank's deliveries.
    pub rsn: Rsn,
    /// As [`Delivery::determinant`].
    pub determinant: Option<Determinant>,
    pub(super) frame: FrameBytes,
    /// Where the payload starts in `frame` (the envelope's length); at most its length.
    pub(super) payload_offset: usize,
}

impl fmt::Debug for DeliveredFrame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeliveredFrame")
            .field("source", &self.source)
            .field("tag", &self.tag)
            .field("ssn", &self.ssn)
            .field("rsn", &self.rsn)
            .field("determinant", &self.determinant)
            .field("payload_len", &self.payload().len())
            .finish()
    }
}

impl PartialEq for DeliveredFrame {
    fn eq(&self, other: &Self) -> bool {
        (self.source, self.tag, self.ssn, self.rsn, self.determinant)
            == (other.source, other.tag, other.ssn, other.rsn, other.determinant)
            && self.payload() == other.payload()
    }
}

impl Eq for DeliveredFrame {}

impl DeliveredFrame {
    /// The application payload, in place.
    pub fn payload(&self) -> &[u8] {
        self.frame.as_slice().get(self.payload_offset..).unwrap_or_default()
    }

    /// The payload as an owned buffer. A small frame (its own `Vec`) gives up its allocation
    /// with the envelope cut off in place (a second buffer per message once cost a MiB of
    /// fresh pages per 1 MiB delivery); a large one is copied out of its receive region.
    pub fn into_payload(self) -> Vec<u8> {
        self.frame.into_vec_from(self.payload_offset)
    }

    /// The classic [`Delivery`], payload owned.
    pub fn into_delivery(self) -> Delivery {
        let (source, tag, ssn, rsn, determinant) =
            (self.source, self.tag, self.ssn, self.rsn, self.determinant);
        Delivery { source, tag, payload: self.into_payload(), ssn, rsn, determinant }
    }
}

/// A message released in channel order, waiting for a matching receive.
#[derive(Debug)]
pub(super) struct Arrived {
    pub sender: Rank,
    pub ssn: Ssn,
    pub tag: Tag,
    /// The whole received frame: it is what receiver-based logging writes.
    pub frame: FrameBytes,
    pub payload_offset: usize,
    /// A stand-in's copy of a retired sender's message, replayed in its place.
    pub stood_in: bool,
}

/// Where a receive may land its payload: the caller's buffer, for a message `accept`s by
/// (tag, length). Used where the provider can write it before returning (pass-through on a
/// load/store provider); elsewhere the message comes as a frame, to be copied out.
pub struct Landing<'a> {
    pub buf: &'a mut [u8],
    pub accept: &'a dyn Fn(Tag, usize) -> bool,
}

impl Landing<'_> {
    /// Whether a message of `len` bytes under `tag` lands here.
    pub(super) fn takes(&self, tag: Tag, len: usize) -> bool {
        len <= self.buf.len() && (self.accept)(tag, len)
    }
}

/// What a receive with a [`Landing`] got.
#[derive(Debug)]
pub enum Received {
    /// The payload is in the landing buffer: `len` bytes from `source` under `tag`.
    Landed { source: Rank, tag: Tag, len: usize },
    /// The message, in the frame it arrived in.
    Frame(DeliveredFrame),
}

impl Received {
    /// The frame of a receive that had no landing buffer.
    pub(super) fn into_frame(self) -> crate::error::Result<DeliveredFrame> {
        match self {
            Received::Frame(frame) => Ok(frame),
            Received::Landed { .. } => {
                Err(crate::error::LogError::InvalidArgument("landed without a landing buffer".into()))
            }
        }
    }
}
