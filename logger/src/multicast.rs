//! Collective-aware logging of multicasts (CAML, seed 000 ch. 6, Algs 16-20;
//! `REVERB_LOG_CAML=1`): a broadcast's payload is logged once, at its root, under a
//! [`McastKey`]; every tree send of it (the root's and the forwarders') logs a stub naming
//! the key instead of the bytes. At a recovery, the stubs a survivor must resend are
//! resolved from the roots' logs in one exchange ([`Resolution`]), so the restarted rank
//! receives the same frames as without CAML.
//!
//! A stub is resolvable while its root lives. A forwarder logs the whole payload when the
//! destination shares the root's failure unit (they would restart together, and the root's
//! copy with them); a failure that takes a root and another unit down at once can leave a
//! stub unresolved, which recovery reports as unrecoverable (never a wrong payload).

use std::collections::{BTreeMap, BTreeSet};

use reverb_transport::codec::Writer;
use reverb_transport::Rank;

use crate::error::{LogError, Result};
use crate::wire::Reader;

/// Names one multicast piece job-wide: its root and the root's sequence number. The number
/// is part of the root's checkpoint, so a restarted root re-executing a multicast gives it
/// the key it had (and logs it again): a later recovery of another rank still finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct McastKey {
    pub root: Rank,
    pub seq: u64,
}

impl McastKey {
    /// Bytes on the wire.
    pub const WIRE_LEN: usize = 12;

    pub fn to_bytes(self) -> [u8; Self::WIRE_LEN] {
        let mut out = [0u8; Self::WIRE_LEN];
        out[..4].copy_from_slice(&self.root.to_le_bytes());
        out[4..].copy_from_slice(&self.seq.to_le_bytes());
        out
    }

    /// Reads a key from the front of untrusted `bytes`.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let mut r = Reader::new(bytes, "multicast key");
        Ok(McastKey { root: r.u32()?, seq: r.u64()? })
    }

    /// The key of piece `i` of a multicast whose first piece is `self`.
    pub fn piece(self, i: u64) -> Self {
        McastKey { seq: self.seq + i, ..self }
    }
}

/// The root's copies of the multicasts it sent, by key. Emptied at each coordinated
/// checkpoint: every stub that names an older key is covered by its receiver's checkpoint
/// (a blocking collective completes at each member before that member checkpoints).
#[derive(Debug, Default)]
pub struct MulticastLog {
    payloads: BTreeMap<McastKey, Vec<u8>>,
}

impl MulticastLog {
    /// Keeps `payload` under `key` unless it is kept already (the root sends one piece to
    /// each child). Returns whether it was added.
    pub fn record(&mut self, key: McastKey, payload: &[u8]) -> bool {
        if self.payloads.contains_key(&key) {
            return false;
        }
        self.payloads.insert(key, payload.to_vec());
        true
    }

    pub fn get(&self, key: &McastKey) -> Option<&[u8]> {
        self.payloads.get(key).map(Vec::as_slice)
    }

    pub fn len(&self) -> usize {
        self.payloads.len()
    }

    pub fn is_empty(&self) -> bool {
        self.payloads.is_empty()
    }

    /// Payload bytes kept.
    pub fn bytes(&self) -> u64 {
        self.payloads.values().map(|p| p.len() as u64).sum()
    }

    /// Drops every copy; returns the payload bytes freed.
    pub fn clear(&mut self) -> u64 {
        let freed = self.bytes();
        self.payloads.clear();
        freed
    }
}

/// The payloads this rank's stubs need, gathered at a recovery.
#[derive(Debug, Default)]
pub struct Resolution {
    payloads: BTreeMap<McastKey, Vec<u8>>,
}

impl Resolution {
    pub fn get(&self, key: &McastKey) -> Option<&[u8]> {
        self.payloads.get(key).map(Vec::as_slice)
    }

    /// From every rank's wanted keys (`all_wanted`, one encoded list each) and every rank's
    /// offers (`all_offers`): the payloads this rank wanted (`mine`). Every rank sees the same
    /// lists, so all decide alike: a key someone wants that nobody offered is an error at
    /// every rank.
    pub fn settle(mine: &BTreeSet<McastKey>, all_wanted: &[Vec<u8>], all_offers: &[Vec<u8>]) -> Result<Self> {
        let mut offered = BTreeMap::new();
        for bytes in all_offers {
            for (key, payload) in decode_offers(bytes)? {
                offered.entry(key).or_insert(payload);
            }
        }
        let mut missing = BTreeSet::new();
        for bytes in all_wanted {
            missing.extend(decode_keys(bytes)?.into_iter().filter(|k| !offered.contains_key(k)));
        }
        if let Some(k) = missing.first() {
            return Err(LogError::MulticastLost(format!(
                "{} piece(s) (first: root {}, number {}); the restarted ranks cannot receive \
                 them again",
                missing.len(),
                k.root,
                k.seq
            )));
        }
        let payloads = offered.into_iter().filter(|(k, _)| mine.contains(k)).collect();
        Ok(Resolution { payloads })
    }
}

const KEYS: &str = "wanted multicast keys";
const OFFERS: &str = "offered multicast payloads";

/// `count u32 | count × key`; an empty contribution (a retired rank's) reads as none.
pub fn encode_keys(keys: &BTreeSet<McastKey>) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + keys.len() * McastKey::WIRE_LEN);
    Writer::new(&mut out).u32(keys.len() as u32);
    for k in keys {
        out.extend_from_slice(&k.to_bytes());
    }
    out
}

pub fn decode_keys(bytes: &[u8]) -> Result<Vec<McastKey>> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let mut r = Reader::new(bytes, KEYS);
    let count = r.u32()?;
    let mut keys = Vec::new();
    for _ in 0..count {
        keys.push(McastKey::from_bytes(r.take(McastKey::WIRE_LEN)?)?);
    }
    if r.remaining() != 0 {
        return Err(LogError::malformed(KEYS, format!("{} bytes left over", r.remaining())));
    }
    Ok(keys)
}

/// `count u32 | count × (key | len u32 | payload)`.
pub fn encode_offers<'a>(offers: impl Iterator<Item = (McastKey, &'a [u8])>) -> Vec<u8> {
    let offers: Vec<_> = offers.collect();
    let mut out = Vec::new();
    Writer::new(&mut out).u32(offers.len() as u32);
    for (k, payload) in offers {
        out.extend_from_slice(&k.to_bytes());
        Writer::new(&mut out).bytes32(payload);
    }
    out
}

pub fn decode_offers(bytes: &[u8]) -> Result<Vec<(McastKey, Vec<u8>)>> {
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let mut r = Reader::new(bytes, OFFERS);
    let count = r.u32()?;
    let mut offers = Vec::new();
    for _ in 0..count {
        let key = McastKey::from_bytes(r.take(McastKey::WIRE_LEN)?)?;
        let len = r.u32()? as usize;
        offers.push((key, r.take(len)?.to_vec()));
    }
    if r.remaining() != 0 {
        return Err(LogError::malformed(OFFERS, format!("{} bytes left over", r.remaining())));
    }
    Ok(offers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(root: Rank, seq: u64) -> McastKey {
        McastKey { root, seq }
    }

    #[test]
    fn keys_and_offers_round_trip() {
        let keys: BTreeSet<_> = [key(1, 2), key(3, 4)].into();
        assert_eq!(decode_keys(&encode_keys(&keys)).unwrap(), keys.iter().copied().collect::<Vec<_>>());
        let bytes = encode_offers([(key(1, 2), &b"ab"[..])].into_iter());
        assert_eq!(decode_offers(&bytes).unwrap(), vec![(key(1, 2), b"ab".to_vec())]);
        assert!(decode_offers(&bytes[..bytes.len() - 1]).is_err(), "cut payload");
        assert!(decode_keys(&[1, 0, 0, 0]).is_err(), "a key missing");
        assert_eq!(key(5, 7).piece(3), key(5, 10));
    }

    #[test]
    fn settles_what_was_wanted_and_refuses_a_lost_root() {
        let mine: BTreeSet<_> = [key(0, 1)].into();
        let wanted = vec![encode_keys(&mine), Vec::new(), encode_keys(&[key(0, 2)].into())];
        let offers = vec![encode_offers([(key(0, 1), &b"x"[..]), (key(0, 2), &b"y"[..])].into_iter())];
        let got = Resolution::settle(&mine, &wanted, &offers).unwrap();
        assert_eq!(got.get(&key(0, 1)), Some(&b"x"[..]));
        assert_eq!(got.get(&key(0, 2)), None, "another rank's");
        let short = vec![encode_offers([(key(0, 1), &b"x"[..])].into_iter())];
        let err = Resolution::settle(&mine, &wanted, &short).unwrap_err().to_string();
        assert!(err.contains("lost with their root"), "{err}");
    }

    #[test]
    fn the_log_keeps_one_copy_per_key() {
        let mut log = MulticastLog::default();
        assert!(log.record(key(0, 1), b"abc"));
        assert!(!log.record(key(0, 1), b"abc"));
        assert_eq!((log.len(), log.bytes()), (1, 3));
        assert_eq!(log.clear(), 3);
        assert!(log.is_empty());
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..96)) {
            let _ = decode_keys(&bytes);
            let _ = decode_offers(&bytes);
        }
    }
}
