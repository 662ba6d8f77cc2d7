//! The hello a respawned logger and each related logger trade (a tagged send): the
//! sender's incarnation, its heartbeat region and the ring it hosts for the receiver.

use reverb_transport::{OpId, Provider, Rank, RecvBuffer, Region, RemoteRegion, Source, Tag, TagMatch};

use super::CoreError;

/// Tag of the hello a respawned logger and each related logger trade.
const HELLO_TAG: Tag = 0x524c_4845_4c4c_4f00;
const HELLO_MAGIC: u32 = 0x4c48_4c52; // "RLHL"
const HELLO_VERSION: u16 = 1;
const HELLO_MAX: usize = 256;

/// What a hello carries: the sender's incarnation and heartbeat region, and the ring it
/// hosts for the receiver (if the receiver logs to it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Hello {
    pub(super) incarnation: u32,
    pub(super) heartbeat: RemoteRegion,
    pub(super) ring: Option<RemoteRegion>,
}

/// `magic u32 | version u16 | has_ring u16 | incarnation u32 | heartbeat | [ring]`.
pub(super) fn encode_hello(hello: &Hello) -> Vec<u8> {
    let mut b = Vec::with_capacity(12 + 2 * RemoteRegion::WIRE_LEN);
    b.extend_from_slice(&HELLO_MAGIC.to_le_bytes());
    b.extend_from_slice(&HELLO_VERSION.to_le_bytes());
    b.extend_from_slice(&u16::from(hello.ring.is_some()).to_le_bytes());
    b.extend_from_slice(&hello.incarnation.to_le_bytes());
    b.extend_from_slice(&hello.heartbeat.to_bytes());
    if let Some(r) = &hello.ring {
        b.extend_from_slice(&r.to_bytes());
    }
    b
}

pub(super) fn parse_hello(b: &[u8]) -> Result<Hello, CoreError> {
    let bad = |detail: String| CoreError::Malformed { what: "logger hello", detail };
    let d = RemoteRegion::WIRE_LEN;
    if b.len() < 12 + d {
        return Err(bad(format!("{} bytes", b.len())));
    }
    let magic = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let version = u16::from_le_bytes([b[4], b[5]]);
    let has_ring = u16::from_le_bytes([b[6], b[7]]);
    if magic != HELLO_MAGIC || version != HELLO_VERSION || has_ring > 1 {
        return Err(bad(format!("magic {magic:#x}, version {version}, ring flag {has_ring}")));
    }
    let expected = 12 + d * (1 + has_ring as usize);
    if b.len() != expected {
        return Err(bad(format!("{} bytes, expected {expected}", b.len())));
    }
    let incarnation = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
    let heartbeat = RemoteRegion::from_bytes(&b[12..12 + d])?;
    let ring = if has_ring == 1 { Some(RemoteRegion::from_bytes(&b[12 + d..])?) } else { None };
    Ok(Hello { incarnation, heartbeat, ring })
}

/// The hello receive kept posted, and hellos in flight.
#[derive(Default)]
pub(super) struct Hellos {
    pub(super) recv: Option<OpId>,
    pub(super) sends: Vec<OpId>,
}

impl Hellos {
    pub(super) fn post(&mut self, provider: &mut dyn Provider) -> Result<(), CoreError> {
        if self.recv.is_none() {
            let op = provider.post_recv(
                Source::Any,
                TagMatch::exact(HELLO_TAG),
                RecvBuffer::Owned { capacity: HELLO_MAX },
            )?;
            self.recv = Some(op);
        }
        Ok(())
    }

    /// Says hello to `to` with the ring this logger hosts for it, if any. A failed send means
    /// `to` is dead too (its node failed with ours): its next incarnation will say hello.
    pub(super) fn send_or_await(
        &mut self,
        provider: &mut dyn Provider,
        me: Rank,
        to: Rank,
        incarnation: u32,
        heartbeat: &RemoteRegion,
        hosted: &[(Rank, Region)],
    ) {
        let ring = hosted.iter().find(|(c, _)| *c == to).map(|(_, r)| r.remote());
        if let Err(e) = self.send(provider, to, incarnation, heartbeat, ring.as_ref()) {
            tracing::warn!("reverb logger-core node {me}: no hello to node {to}: {e}; awaiting it");
        }
    }

    pub(super) fn send(
        &mut self,
        provider: &mut dyn Provider,
        to: Rank,
        incarnation: u32,
        heartbeat: &RemoteRegion,
        ring: Option<&RemoteRegion>,
    ) -> Result<(), CoreError> {
        let hello = Hello { incarnation, heartbeat: *heartbeat, ring: ring.copied() };
        self.sends.push(provider.send(to, HELLO_TAG, &encode_hello(&hello))?);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(key: u64) -> RemoteRegion {
        RemoteRegion { owner: 1, addr: 0x1000 * key, len: 4096, key }
    }

    #[test]
    fn hello_round_trips_and_rejects_garbage() {
        for ring in [None, Some(region(7))] {
            let hello = Hello { incarnation: 3, heartbeat: region(1), ring };
            let bytes = encode_hello(&hello);
            assert_eq!(parse_hello(&bytes).unwrap(), hello);
            for cut in [0, 11, bytes.len() - 1] {
                assert!(parse_hello(&bytes[..cut]).is_err(), "cut {cut}");
            }
            let mut bad = bytes.clone();
            bad[0] ^= 1;
            assert!(parse_hello(&bad).is_err(), "magic");
            let mut lying = bytes.clone();
            lying[6] = u8::from(ring.is_none()); // ring flag disagrees with the length
            assert!(parse_hello(&lying).is_err());
        }
    }
}
