//! The `auto` provider's published address: the rank's host identity, then each
//! sub-provider's own address (empty where it has none). A respawned rank reads its peers'
//! hosts from these, and `reconnect` hands each sub-provider its part.

use crate::api::Rank;
use crate::bootstrap::host::HostId;
use crate::codec::{Reader, Writer};
use crate::error::{Result, TransportError};

/// Wire version of the address.
const VERSION: u8 = 1;

/// Which sub-provider a part of the address belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    Shm = 0,
    Net = 1,
}

/// A decoded `auto` address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Address {
    pub host: HostId,
    pub shm: Vec<u8>,
    pub net: Vec<u8>,
}

impl Address {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        Writer::new(&mut out).u8(VERSION).bytes32(&self.host.encode()).bytes32(&self.shm).bytes32(&self.net);
        out
    }

    /// Decodes `rank`'s address from untrusted bytes.
    pub fn decode(bytes: &[u8], rank: Rank) -> Result<Address> {
        let malformed = |detail: String| TransportError::Malformed { what: "auto address", detail };
        let mut r = Reader::new(bytes, "auto address");
        let version = r.u8("version")?;
        if version != VERSION {
            return Err(malformed(format!("rank {rank}: version {version}, expected {VERSION}")));
        }
        let host = HostId::decode(r.bytes32("host")?)?;
        let shm = r.bytes32("shm address")?.to_vec();
        let net = r.bytes32("network address")?.to_vec();
        r.finish()?;
        Ok(Address { host, shm, net })
    }

    pub fn part(&self, part: Part) -> &[u8] {
        match part {
            Part::Shm => &self.shm,
            Part::Net => &self.net,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_garbage() {
        let host = HostId { name: "ha".into(), boot: 7, shm_dev: 9 };
        let a = Address { host, shm: vec![1, 2, 3], net: Vec::new() };
        assert_eq!(Address::decode(&a.encode(), 0).unwrap(), a);
        let mut bad = a.encode();
        bad[0] = 9;
        assert!(matches!(Address::decode(&bad, 0), Err(TransportError::Malformed { .. })));
        let cut = a.encode();
        assert!(Address::decode(&cut[..cut.len() - 1], 0).is_err());
    }
}
