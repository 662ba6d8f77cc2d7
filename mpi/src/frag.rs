//! Messages of any length over the runtime, whose messages have a largest size
//! (REVERB_LOG_MAX_MESSAGE): a longer one goes as a first piece flagged BIG, carrying the
//! whole length, and later pieces flagged MORE on the same channel, which only the receive
//! that took the first piece takes (the runtime keeps each sender's order).

use reverb_runtime::{McastKey, Message, Received, Runtime};
use reverb_transport::{Rank, Source, TagMatch};

use crate::abi::MPI_ERR_INTERN;
use crate::errors::{MpiError, MpiResult};
use crate::tags;

/// Sends `bytes` to `dest` under `tag`, in pieces if it is larger than the runtime takes.
pub fn send(rt: &mut Runtime, dest: Rank, tag: u64, bytes: &[u8]) -> MpiResult<()> {
    let limit = rt.config().log.max_message;
    if bytes.len() <= limit {
        return Ok(rt.send(dest, tag, bytes)?);
    }
    let first_len = limit - 8;
    let mut first = Vec::with_capacity(limit);
    first.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    first.extend_from_slice(&bytes[..first_len]);
    rt.send(dest, tag | (u64::from(tags::BIG) << 32), &first)?;
    for piece in bytes[first_len..].chunks(limit) {
        rt.send(dest, tags::continuation(tag), piece)?;
    }
    Ok(())
}

/// How many messages `send` makes of `len` bytes when the runtime takes `limit` at most.
pub fn pieces(len: usize, limit: usize) -> u64 {
    if len <= limit {
        return 1;
    }
    let rest = len - (limit - 8);
    1 + rest.div_ceil(limit) as u64
}

/// `send` of a multicast's bytes under collective-aware logging: piece i goes as multicast
/// piece `key.piece(i)` (its root logs it once; every tree send logs a stub).
pub fn send_multicast(rt: &mut Runtime, dest: Rank, tag: u64, bytes: &[u8], key: McastKey) -> MpiResult<()> {
    let limit = rt.config().log.max_message;
    if bytes.len() <= limit {
        return Ok(rt.send_multicast(dest, tag, bytes, key)?);
    }
    let first_len = limit - 8;
    let mut first = Vec::with_capacity(limit);
    first.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    first.extend_from_slice(&bytes[..first_len]);
    rt.send_multicast(dest, tag | (u64::from(tags::BIG) << 32), &first, key)?;
    for (i, piece) in bytes[first_len..].chunks(limit).enumerate() {
        rt.send_multicast(dest, tags::continuation(tag), piece, key.piece(i as u64 + 1))?;
    }
    Ok(())
}

/// The whole length a BIG first piece announces.
fn whole_len(msg: &Message) -> MpiResult<usize> {
    let bad = || {
        MpiError::new(MPI_ERR_INTERN, format!("a large message from rank {} without its length", msg.source))
    };
    let total: [u8; 8] = msg.payload.get(..8).and_then(|b| b.try_into().ok()).ok_or_else(bad)?;
    usize::try_from(u64::from_le_bytes(total)).map_err(|_| bad())
}

/// `complete` into `landing`, where a large message fits there: its pieces land in it one
/// after another (no buffer of the message's size is made: an 8 GB message needs the
/// receive's 8 GB, not 16). Anything else comes back as the message made whole.
pub fn complete_into(rt: &mut Runtime, msg: Message, landing: Option<&mut [u8]>) -> MpiResult<Received> {
    let big = tags::split(msg.tag).1 & tags::BIG != 0;
    let total = if big { whole_len(&msg)? } else { 0 };
    let landing = match landing {
        Some(l) if big && total <= l.len() => &mut l[..total],
        _ => return complete(rt, msg).map(Received::Message),
    };
    let (source, tag) = (msg.source, msg.tag & !(u64::from(tags::BIG) << 32));
    let first = &msg.payload[8..];
    landing.get_mut(..first.len()).ok_or_else(|| overrun(source))?.copy_from_slice(first);
    let mut at = first.len();
    drop(msg);
    let more = TagMatch::exact(tags::continuation(tag));
    while at < total {
        let room = &mut landing[at..];
        let len = match rt.recv_matching_into(Source::Rank(source), more, room, &|_, _| true)? {
            Received::Landed { len, .. } => len,
            Received::Message(piece) => {
                let n = piece.payload.len();
                room.get_mut(..n).ok_or_else(|| overrun(source))?.copy_from_slice(&piece.payload);
                n
            }
        };
        if len == 0 {
            return Err(MpiError::new(
                MPI_ERR_INTERN,
                format!("an empty piece of a message from rank {source}"),
            ));
        }
        at += len;
    }
    Ok(Received::Landed { source, tag, len: total })
}

fn overrun(source: Rank) -> MpiError {
    MpiError::new(MPI_ERR_INTERN, format!("a large message from rank {source} longer than it said"))
}

/// A matched message made whole: a BIG first piece is followed by its later pieces (waited
/// for: the sender sent them right after it). The tag returned has no piece flags.
pub fn complete(rt: &mut Runtime, mut msg: Message) -> MpiResult<Message> {
    let (_, flags) = tags::split(msg.tag);
    if flags & tags::BIG == 0 {
        return Ok(msg);
    }
    let total = whole_len(&msg)?;
    let mut whole = Vec::with_capacity(total);
    whole.extend_from_slice(&msg.payload[8..]);
    let more = TagMatch::exact(tags::continuation(msg.tag));
    while whole.len() < total {
        let piece = rt.recv_matching(Source::Rank(msg.source), more)?;
        whole.extend_from_slice(&piece.payload);
    }
    msg.payload = whole.into();
    msg.tag &= !(u64::from(tags::BIG) << 32);
    Ok(msg)
}
