//! The remote region descriptor's bytes (what ranks trade to name a region in put/get):
//! pinned, never a panic on arbitrary input, and encode → decode round-trips.

use proptest::prelude::*;
use reverb_transport::codec::{Reader, Writer};
use reverb_transport::{RemoteRegion, TransportError};

fn sample() -> RemoteRegion {
    RemoteRegion { owner: 0x0102, addr: 0x1122_3344_5566_7788, len: 0x1000, key: 9 }
}

/// `owner u32 | addr u64 | len u64 | key u64`, little-endian: ranks of any build agree.
#[test]
fn pinned_encoding() {
    let mut want = vec![2, 1, 0, 0, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11];
    want.extend_from_slice(&[0, 0x10, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(sample().to_bytes(), want[..]);
    assert_eq!(RemoteRegion::from_bytes(&want).unwrap(), sample());
}

#[test]
fn wrong_lengths_keep_the_codec_error() {
    let bytes = sample().to_bytes();
    for bad in [&bytes[..RemoteRegion::WIRE_LEN - 1], &[bytes.as_slice(), &[0]].concat()[..]] {
        let e = RemoteRegion::from_bytes(bad).unwrap_err();
        assert!(matches!(e, TransportError::Decode { .. }), "{e}");
        assert!(std::error::Error::source(&e).is_some(), "{e}");
        assert!(e.to_string().starts_with("malformed remote region descriptor"), "{e}");
    }
}

fn any_region() -> impl Strategy<Value = RemoteRegion> {
    any::<(u32, u64, u64, u64)>().prop_map(|(owner, addr, len, key)| RemoteRegion { owner, addr, len, key })
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let decoded = RemoteRegion::from_bytes(&bytes);
        prop_assert_eq!(decoded.is_ok(), bytes.len() == RemoteRegion::WIRE_LEN);
        let _ = RemoteRegion::read(&mut Reader::new(&bytes, "arbitrary"));
    }

    #[test]
    fn round_trips(region in any_region(), other in any_region()) {
        prop_assert_eq!(RemoteRegion::from_bytes(&region.to_bytes()).unwrap(), region);
        // Inside a larger message too: `write` appends, `read` takes from the front.
        let mut msg = Vec::new();
        let mut w = Writer::new(&mut msg);
        region.write(&mut w);
        other.write(&mut w);
        let mut r = Reader::new(&msg, "two regions");
        prop_assert_eq!(RemoteRegion::read(&mut r).unwrap(), region);
        prop_assert_eq!(RemoteRegion::read(&mut r).unwrap(), other);
        prop_assert!(r.finish().is_ok());
    }
}
