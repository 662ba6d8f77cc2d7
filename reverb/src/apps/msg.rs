//! Messages of an exact size (`reverb app --msg-bytes`): the app's data, then filler that the
//! receiver checks, so the data and the answer do not depend on the size. A message larger
//! than the runtime takes (`REVERB_LOG_MAX_MESSAGE`) goes in pieces: the first under the
//! app's tag, the later ones under its continuation tag, which only the receive that took
//! the first one takes (the runtime keeps each sender's order).

use anyhow::{bail, Result};
use reverb_runtime::Runtime;
use reverb_transport::Rank;

/// Set in the tag of a message's later pieces (apps' tags are small).
const CONTINUATION: u64 = 1 << 40;

/// Bytes the runtime's collectives add to a broadcast's payload (its multicast key under
/// collective-aware logging, with room to spare).
pub(crate) const COLLECTIVE_HEADROOM: usize = 256;

/// Filler byte `i` of a message from `salt` (the sender and tag): cheap, and it differs
/// from one byte to the next, so a shifted or truncated copy is seen.
fn filler(salt: u64, i: usize) -> u8 {
    let h = (salt ^ i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (h >> 56) as u8
}

/// `data` followed by filler up to `bytes` (0: `data` as it is).
pub(crate) fn pad(what: &str, data: &[u8], bytes: usize, salt: u64) -> Result<Vec<u8>> {
    if bytes == 0 {
        return Ok(data.to_vec());
    }
    if bytes < data.len() {
        bail!("{what}: --msg-bytes {bytes} below the {} bytes of data", data.len());
    }
    let mut out = Vec::with_capacity(bytes);
    out.extend_from_slice(data);
    out.extend((data.len()..bytes).map(|i| filler(salt, i)));
    Ok(out)
}

/// The first `data_len` bytes of `msg`, once its filler is checked (`salt` as the sender's).
pub(crate) fn unpad<'a>(what: &str, msg: &'a [u8], data_len: usize, salt: u64) -> Result<&'a [u8]> {
    if msg.len() < data_len {
        bail!("{what}: {} bytes, expected at least {data_len}", msg.len());
    }
    if let Some(i) = (data_len..msg.len()).find(|&i| msg[i] != filler(salt, i)) {
        bail!("{what}: filler byte {i} of {} differs from what was sent", msg.len());
    }
    Ok(&msg[..data_len])
}

/// The salt of the filler rank `sender` puts in its messages under `tag`.
pub(crate) fn salt(sender: Rank, tag: u64) -> u64 {
    (u64::from(sender) << 32) ^ tag
}

/// Pieces of at most `limit` bytes that a message of `len` bytes goes in (at least one).
pub(crate) fn pieces(len: usize, limit: usize) -> usize {
    len.div_ceil(limit.max(1)).max(1)
}

/// The largest message the runtime takes (`REVERB_LOG_MAX_MESSAGE`).
pub(crate) fn limit(rt: &Runtime) -> usize {
    rt.config().log.max_message
}

/// Sends `msg` to `dest` under `tag`, in pieces when it is larger than the runtime takes.
pub(crate) fn send(rt: &mut Runtime, dest: Rank, tag: u64, msg: &[u8]) -> Result<()> {
    let limit = limit(rt);
    for (i, piece) in msg.chunks(limit.max(1)).enumerate() {
        rt.send(dest, if i == 0 { tag } else { tag | CONTINUATION }, piece)?;
    }
    if msg.is_empty() {
        rt.send(dest, tag, msg)?;
    }
    Ok(())
}

/// The later pieces of a `len`-byte message from `source` whose first piece is `first`.
fn rest(rt: &mut Runtime, source: Rank, tag: u64, first: Vec<u8>, len: usize) -> Result<Vec<u8>> {
    let mut msg = first;
    for _ in 1..pieces(len, limit(rt)) {
        msg.extend_from_slice(&rt.recv_from(source, tag | CONTINUATION)?.payload);
    }
    if msg.len() != len {
        bail!("a message of {} bytes from rank {source} under tag {tag:#x}, expected {len}", msg.len());
    }
    Ok(msg)
}

/// Receives a `len`-byte message from `source` under `tag` (sent by [`send`]).
pub(crate) fn recv_from(rt: &mut Runtime, source: Rank, tag: u64, len: usize) -> Result<Vec<u8>> {
    let first = rt.recv_from(source, tag)?.payload.into_vec();
    rest(rt, source, tag, first, len)
}

/// Receives a `len`-byte message under `tag` from any rank: its sender and bytes.
pub(crate) fn recv_any(rt: &mut Runtime, tag: u64, len: usize) -> Result<(Rank, Vec<u8>)> {
    let first = rt.recv_any(tag)?;
    let source = first.source;
    Ok((source, rest(rt, source, tag, first.payload.into_vec(), len)?))
}

/// Broadcasts `msg` (`len` bytes at every rank) from `root`, in pieces that leave the
/// runtime room for its header.
pub(crate) fn broadcast(rt: &mut Runtime, root: Rank, tag: u64, msg: &[u8], len: usize) -> Result<Vec<u8>> {
    let piece = limit(rt).saturating_sub(COLLECTIVE_HEADROOM).max(1);
    let mut out = Vec::with_capacity(len);
    for i in 0..pieces(len, piece) {
        let mine = msg.get(i * piece..((i + 1) * piece).min(msg.len())).unwrap_or_default();
        out.extend_from_slice(&rt.broadcast(root, tag, mine)?);
    }
    if out.len() != len {
        bail!("a broadcast of {} bytes from rank {root}, expected {len}", out.len());
    }
    Ok(out)
}

/// `Runtime::allreduce_sum` of `mine` in pieces that fit the runtime's largest message.
pub(crate) fn allreduce_sum(rt: &mut Runtime, tag: u64, mine: &[f64]) -> Result<Vec<f64>> {
    let values = (limit(rt).saturating_sub(COLLECTIVE_HEADROOM) / 8).max(1);
    let mut out = Vec::with_capacity(mine.len());
    for chunk in mine.chunks(values) {
        out.extend(rt.allreduce_sum(tag, chunk)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_is_checked_and_exact() {
        let data = [1u8, 2, 3];
        let msg = pad("t", &data, 8193, salt(3, 0x51)).expect("pad");
        assert_eq!(msg.len(), 8193);
        assert_eq!(unpad("t", &msg, 3, salt(3, 0x51)).expect("unpad"), &data);
        assert!(unpad("t", &msg, 3, salt(2, 0x51)).is_err(), "another sender's filler");
        let mut bad = msg.clone();
        bad[5000] ^= 1;
        assert!(unpad("t", &bad, 3, salt(3, 0x51)).is_err(), "a changed byte");
        assert_eq!(pad("t", &data, 0, 1).expect("as is"), data);
        assert!(pad("t", &data, 2, 1).is_err(), "smaller than the data");
    }

    #[test]
    fn pieces_cover_the_message() {
        assert_eq!(pieces(0, 100), 1);
        assert_eq!(pieces(100, 100), 1);
        assert_eq!(pieces(101, 100), 2);
        assert_eq!(pieces(300, 100), 3);
    }
}
