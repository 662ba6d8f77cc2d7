//! The hello a respawned logger and each related logger trade (a tagged send): the
//! sender's incarnation, its heartbeat region and the ring it hosts for the receiver.

use reverb_transport::codec::{Reader, Writer};
use reverb_transport::{OpId, Provider, Rank, RecvBuffer, Region, RemoteRegion, Source, Tag, TagMatch};

use super::CoreError;

/// Tag of the hello a respawned logger and each related logger trade.
const HELLO_TAG: Tag =
    reverb_transport::api::library_tag(reverb_transport::api::LIBRARY_TAG_PREFIXES[2], 0x4c4c_4f00);
const HELLO_MAGIC: u32 = 0x4c48_4c52; // "RLHL"
const HELLO_VERSION: u16 = 1;
const HELLO_MAX: usize = 256;
const WHAT: &str = "logger hello";

/// What a hello carries: the sender's incarnation and heartbeat region, and the ring it
/// hosts for the receiver (if the receiver logs to it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Hello {
    pub(super) incarnation: u32,
    pub(super) heartbeat: RemoteRegion,
    pub(super) ring: Option<RemoteRegion>,
}

/// `magic u32 | version u16 | has_ring u16 | incarnation u32 | heartbeat | [ring]`, each
/// region as [`RemoteRegion::to_bytes`] writes it.
pub(super) fn encode_hello(hello: &Hello) -> Vec<u8> {
    let mut b = Vec::with_capacity(12 + 2 * RemoteRegion::WIRE_LEN);
    let mut w = Writer::new(&mut b);
    w.u32(HELLO_MAGIC).u16(HELLO_VERSION).u16(u16::from(hello.ring.is_some()));
    w.u32(hello.incarnation);
    hello.heartbeat.write(&mut w);
    if let Some(r) = &hello.ring {
        r.write(&mut w);
    }
    b
}

/// Decodes a hello from untrusted bytes: exactly the fields its ring flag announces.
pub(super) fn parse_hello(b: &[u8]) -> Result<Hello, CoreError> {
    let mut r = Reader::new(b, WHAT);
    let (magic, version, has_ring) = (r.u32("magic")?, r.u16("version")?, r.u16("ring flag")?);
    if magic != HELLO_MAGIC || version != HELLO_VERSION || has_ring > 1 {
        return Err(CoreError::Malformed {
            what: WHAT,
            detail: format!("magic {magic:#x}, version {version}, ring flag {has_ring}"),
        });
    }
    let incarnation = r.u32("incarnation")?;
    let heartbeat = RemoteRegion::read(&mut r)?;
    let ring = if has_ring == 1 { Some(RemoteRegion::read(&mut r)?) } else { None };
    r.finish()?;
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
    use proptest::prelude::*;

    fn region(key: u64) -> RemoteRegion {
        RemoteRegion { owner: 1, addr: 0x1000 * key, len: 4096, key }
    }

    /// Version 1 bytes, written out by hand: a respawned logger and an old one must agree.
    #[test]
    fn pinned_encoding() {
        let hello = Hello { incarnation: 3, heartbeat: region(1), ring: Some(region(2)) };
        let mut want = b"RLHL\x01\0\x01\0\x03\0\0\0".to_vec();
        want.extend_from_slice(&region(1).to_bytes());
        want.extend_from_slice(&region(2).to_bytes());
        assert_eq!(encode_hello(&hello), want);
        assert_eq!(&want[12..16], [1, 0, 0, 0], "region owner first");
        assert_eq!(parse_hello(&want).unwrap(), hello);
    }

    #[test]
    fn hello_round_trips_and_rejects_garbage() {
        for ring in [None, Some(region(7))] {
            let hello = Hello { incarnation: 3, heartbeat: region(1), ring };
            let bytes = encode_hello(&hello);
            assert_eq!(parse_hello(&bytes).unwrap(), hello);
            for cut in 0..bytes.len() {
                assert!(parse_hello(&bytes[..cut]).is_err(), "cut {cut}");
            }
            let mut bad = bytes.clone();
            bad[0] ^= 1;
            assert!(parse_hello(&bad).is_err(), "magic");
            let mut lying = bytes.clone();
            lying[6] = u8::from(ring.is_none()); // ring flag disagrees with the length
            assert!(parse_hello(&lying).is_err());
        }
        let short = parse_hello(b"RLHL\x01\0").unwrap_err();
        assert!(matches!(short, CoreError::Decode(_)), "{short}");
        assert!(std::error::Error::source(&short).is_some(), "the codec error is kept");
    }

    fn any_region() -> impl Strategy<Value = RemoteRegion> {
        any::<(u32, u64, u64, u64)>().prop_map(|(owner, addr, len, key)| RemoteRegion {
            owner,
            addr,
            len,
            key,
        })
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..100), ring: bool) {
            let _ = parse_hello(&bytes);
            // Past the magic too: a valid prefix, then anything.
            let mut framed = b"RLHL\x01\0".to_vec();
            framed.extend_from_slice(&[u8::from(ring), 0]);
            framed.extend_from_slice(&bytes);
            let _ = parse_hello(&framed);
        }

        #[test]
        fn round_trips(incarnation: u32, heartbeat in any_region(), ring in prop::option::of(any_region())) {
            let hello = Hello { incarnation, heartbeat, ring };
            prop_assert_eq!(parse_hello(&encode_hello(&hello)).unwrap(), hello);
        }
    }
}
