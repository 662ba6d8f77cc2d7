//! A received message's bytes ([`Payload`]): left where they arrived, so a large message is
//! copied once more only by the application that reads it (`reverb_logger::DeliveredFrame`).

use std::fmt;
use std::ops::Deref;

use reverb_logger::DeliveredFrame;

/// The bytes of a [`crate::Message`], read as a slice. A large message stays in the registered
/// region its rendezvous read landed in (kept from reuse while this lives): an MPI receive
/// copies it straight into the user's buffer, with no owned copy in between.
#[derive(Clone)]
pub struct Payload(Bytes);

#[derive(Clone)]
enum Bytes {
    Owned(Vec<u8>),
    Delivered(DeliveredFrame),
}

impl Payload {
    /// The bytes as an owned buffer (a copy only if they are still in a receive region).
    pub fn into_vec(self) -> Vec<u8> {
        match self.0 {
            Bytes::Owned(bytes) => bytes,
            Bytes::Delivered(frame) => frame.into_payload(),
        }
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        self
    }
}

impl Deref for Payload {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.0 {
            Bytes::Owned(bytes) => bytes,
            Bytes::Delivered(frame) => frame.payload(),
        }
    }
}

impl From<Vec<u8>> for Payload {
    fn from(bytes: Vec<u8>) -> Payload {
        Payload(Bytes::Owned(bytes))
    }
}

impl From<DeliveredFrame> for Payload {
    fn from(frame: DeliveredFrame) -> Payload {
        Payload(Bytes::Delivered(frame))
    }
}

impl PartialEq for Payload {
    fn eq(&self, other: &Payload) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Payload {}

impl PartialEq<[u8]> for Payload {
    fn eq(&self, other: &[u8]) -> bool {
        self.as_slice() == other
    }
}

impl PartialEq<Vec<u8>> for Payload {
    fn eq(&self, other: &Vec<u8>) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Payload({} bytes)", self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_bytes_read_and_compare_as_a_slice() {
        let p = Payload::from(vec![1, 2, 3]);
        assert_eq!(&p[..2], &[1, 2]);
        assert_eq!(p, vec![1, 2, 3]);
        assert_eq!(format!("{p:?}"), "Payload(3 bytes)");
        assert_eq!(p.into_vec(), vec![1, 2, 3]);
    }
}
