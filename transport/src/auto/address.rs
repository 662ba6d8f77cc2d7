//! The `auto` provider's published address: the rank's host identity, then each
//! sub-provider's own address (empty where it has none). A respawned rank reads its peers'
//! hosts from these, and `reconnect` hands each sub-provider its part.

use crate::api::{ProviderKind, Rank};
use crate::bootstrap::host::HostId;
use crate::codec::{Reader, Writer};
use crate::error::{Result, TransportError};

/// What an `auto` address starts with: no other provider's address can (shm's starts with
/// a pid, below this; tcp's with an incarnation, which would have to be this large).
const MAGIC: [u8; 4] = *b"rvba";
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
    /// The provider the job uses between hosts (a rejoining rank opens the same).
    pub net_kind: ProviderKind,
    pub net: Vec<u8>,
}

impl Address {
    /// Whether `bytes` is an `auto` address (a job that spans hosts publishes these; a
    /// one-host job's ranks publish plain shm addresses).
    pub fn is_auto(bytes: &[u8]) -> bool {
        bytes.starts_with(&MAGIC)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        Writer::new(&mut out)
            .u8(VERSION)
            .bytes32(&self.host.encode())
            .bytes32(&self.shm)
            .bytes32(self.net_kind.as_str().as_bytes())
            .bytes32(&self.net);
        out
    }

    /// Decodes `rank`'s address from untrusted bytes.
    pub fn decode(bytes: &[u8], rank: Rank) -> Result<Address> {
        let malformed = |detail: String| TransportError::Malformed { what: "auto address", detail };
        let Some(bytes) = bytes.strip_prefix(&MAGIC) else {
            return Err(malformed(format!("rank {rank}: not an auto address")));
        };
        let mut r = Reader::new(bytes, "auto address");
        let version = r.u8("version")?;
        if version != VERSION {
            return Err(malformed(format!("rank {rank}: version {version}, expected {VERSION}")));
        }
        let host = HostId::decode(r.bytes32("host")?)?;
        let shm = r.bytes32("shm address")?.to_vec();
        let kind = r.bytes32("network provider")?;
        let net_kind = std::str::from_utf8(kind)
            .ok()
            .and_then(crate::providers::by_name)
            .ok_or_else(|| malformed(format!("rank {rank}: unknown network provider {kind:?}")))?;
        let net = r.bytes32("network address")?.to_vec();
        r.finish()?;
        Ok(Address { host, shm, net_kind, net })
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
        let a = Address { host, shm: vec![1, 2, 3], net_kind: ProviderKind::TCP, net: vec![4] };
        assert_eq!(Address::decode(&a.encode(), 0).unwrap(), a);
        assert!(Address::is_auto(&a.encode()));
        for at in [0, 4] {
            let mut bad = a.encode();
            bad[at] = 9;
            assert!(matches!(Address::decode(&bad, 0), Err(TransportError::Malformed { .. })), "byte {at}");
        }
        let cut = a.encode();
        assert!(Address::decode(&cut[..cut.len() - 1], 0).is_err());
    }
}
