//! Host identity: which ranks share a host, so that a per-peer provider choice can put peers of
//! one host on shared memory and the others on the network.
//!
//! Two processes share a host for reverb when they can share memory segments: same kernel
//! (boot id), same `/dev/shm` (the tmpfs mount's device number: a container or a namespace
//! "host" with its own `/dev/shm` is another host even on one kernel) and same host name (the
//! UTS name, or the resource manager's node name). The identity is exchanged with one
//! bootstrap allgather ([`HostMap::gather`]).

use std::os::unix::fs::MetadataExt;

use super::Bootstrap;
use crate::api::Rank;
use crate::codec::{Reader, Writer};
use crate::error::{Result, TransportError};

/// Longest host name carried (Linux allows 64 bytes).
const MAX_NAME: usize = 255;

/// What makes a host one host (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostId {
    /// The UTS host name (`/proc/sys/kernel/hostname`, which follows the UTS namespace).
    pub name: String,
    /// FNV-1a of `/proc/sys/kernel/random/boot_id`: one value per running kernel.
    pub boot: u64,
    /// Device number of the `/dev/shm` mount (0 where there is none).
    pub shm_dev: u64,
}

impl HostId {
    /// This process's host.
    pub fn local() -> HostId {
        Self::named(None)
    }

    /// This process's host under the configured name (`REVERB_HOST_NAME`,
    /// [`crate::TransportConfig::host_name`]) where one is set, else the UTS host name.
    pub fn configured(config: &crate::TransportConfig) -> HostId {
        Self::named(config.host_name.as_deref())
    }

    fn named(configured: Option<&str>) -> HostId {
        let name = match configured {
            Some(name) => name.to_string(),
            None => std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default(),
        };
        let shm_dev = std::fs::metadata("/dev/shm").map(|m| m.dev()).unwrap_or(0);
        HostId { name: name.trim().chars().take(MAX_NAME).collect(), boot: boot_id(), shm_dev }
    }

    /// The wire form: boot (8), shm_dev (8), name (u32 length + bytes).
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(20 + self.name.len());
        Writer::new(&mut out).u64(self.boot).u64(self.shm_dev).bytes32(self.name.as_bytes());
        out
    }

    /// Decodes [`HostId::encode`] output from untrusted bytes.
    pub fn decode(bytes: &[u8]) -> Result<HostId> {
        let mut r = Reader::new(bytes, "host identity");
        let boot = r.u64("boot id")?;
        let shm_dev = r.u64("shm device")?;
        let name = r.bytes32("host name")?;
        r.finish()?;
        if name.len() > MAX_NAME {
            return Err(TransportError::Malformed {
                what: "host identity",
                detail: format!("host name of {} bytes (at most {MAX_NAME})", name.len()),
            });
        }
        let name = String::from_utf8(name.to_vec()).map_err(|_| TransportError::Malformed {
            what: "host identity",
            detail: "host name is not UTF-8".into(),
        })?;
        Ok(HostId { name, boot, shm_dev })
    }
}

/// FNV-1a of this kernel's boot id (0's hash where it cannot be read).
pub fn boot_id() -> u64 {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    id.trim().bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// Every rank's host: hosts numbered by their smallest rank, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostMap {
    /// Host index per rank.
    host_of: Vec<u32>,
    /// Each host's identity, by index.
    hosts: Vec<HostId>,
}

impl HostMap {
    /// Exchanges this rank's identity `me` with every rank (one allgather: a collective).
    pub fn gather(boot: &mut dyn Bootstrap, me: &HostId) -> Result<HostMap> {
        let all = boot.allgather(&me.encode())?;
        let ids = all.iter().map(|b| HostId::decode(b)).collect::<Result<Vec<_>>>()?;
        Ok(HostMap::from_ids(ids))
    }

    /// Groups ranks by identity (indexed by rank).
    pub fn from_ids(ids: Vec<HostId>) -> HostMap {
        let mut hosts: Vec<HostId> = Vec::new();
        let host_of = ids
            .into_iter()
            .map(|id| match hosts.iter().position(|h| *h == id) {
                Some(i) => i as u32,
                None => {
                    hosts.push(id);
                    hosts.len() as u32 - 1
                }
            })
            .collect();
        HostMap { host_of, hosts }
    }

    /// The host index of `rank` (`None` outside the job).
    pub fn host_of(&self, rank: Rank) -> Option<u32> {
        self.host_of.get(rank as usize).copied()
    }

    /// Whether `a` and `b` share a host (false if either is outside the job).
    pub fn same_host(&self, a: Rank, b: Rank) -> bool {
        matches!((self.host_of(a), self.host_of(b)), (Some(x), Some(y)) if x == y)
    }

    /// The identity of host `index`.
    pub fn host(&self, index: u32) -> Option<&HostId> {
        self.hosts.get(index as usize)
    }

    /// Distinct hosts in the job.
    pub fn hosts(&self) -> usize {
        self.hosts.len()
    }

    /// The ranks on `rank`'s host, in rank order (`rank` included).
    pub fn host_mates(&self, rank: Rank) -> Vec<Rank> {
        let Some(host) = self.host_of(rank) else { return Vec::new() };
        (0..self.host_of.len() as Rank).filter(|&r| self.host_of[r as usize] == host).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(name: &str, boot: u64, shm_dev: u64) -> HostId {
        HostId { name: name.into(), boot, shm_dev }
    }

    #[test]
    fn identity_round_trips_and_refuses_garbage() {
        let me = HostId::local();
        assert!(!me.name.is_empty(), "a host name is readable");
        assert_eq!(HostId::decode(&me.encode()).ok(), Some(me.clone()));
        let bytes = me.encode();
        assert!(HostId::decode(&bytes[..bytes.len() - 1]).is_err(), "truncated");
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(HostId::decode(&longer).is_err(), "trailing bytes");
        let mut bad_utf8 = Vec::new();
        Writer::new(&mut bad_utf8).u64(1).u64(2).bytes32(&[0xff, 0xfe]);
        assert!(matches!(HostId::decode(&bad_utf8), Err(TransportError::Malformed { .. })));
    }

    #[test]
    fn ranks_of_one_process_gather_one_host() {
        let boots = crate::loopback::InProcBootstrap::job("host-map-test", 3);
        let maps: Vec<HostMap> = std::thread::scope(|scope| {
            let handles: Vec<_> = boots
                .into_iter()
                .map(|mut b| scope.spawn(move || HostMap::gather(&mut b, &HostId::local()).expect("gather")))
                .collect();
            handles.into_iter().map(|h| h.join().expect("rank thread")).collect()
        });
        for map in &maps {
            assert_eq!(map.hosts(), 1);
            assert_eq!(map.host_mates(1), [0, 1, 2]);
            assert_eq!(map.host(0), Some(&HostId::local()));
        }
    }

    #[test]
    fn ranks_group_by_every_part_of_the_identity() {
        let map = HostMap::from_ids(vec![
            id("a", 1, 7),
            id("a", 1, 7),
            id("b", 1, 7),
            id("a", 1, 8), // same name and kernel, another /dev/shm: a namespace host
            id("a", 2, 7), // another kernel
            id("b", 1, 7),
        ]);
        assert_eq!(map.hosts(), 4);
        assert_eq!((0..6).map(|r| map.host_of(r).unwrap_or(99)).collect::<Vec<_>>(), [0, 0, 1, 2, 3, 1]);
        assert!(map.same_host(0, 1) && map.same_host(2, 5));
        assert!(!map.same_host(0, 3) && !map.same_host(0, 4) && !map.same_host(0, 6));
        assert_eq!(map.host_mates(2), [2, 5]);
        assert_eq!(map.host(1).map(|h| h.name.as_str()), Some("b"));
        assert!(map.host_mates(9).is_empty());
    }
}
