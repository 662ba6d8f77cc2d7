//! Logger buddies: each rank's log lives on a rank of another node, so a node failure never
//! takes a log together with the ranks it protects (seed 000 ch.7: the node is the failure unit).
//!
//! The rule is the pair map of `reverb_transport::nodemap` (node 2k with node 2k+1, same local
//! index), which seed 000 ch.7 finds more survivable than a ring map; checkpoint buddies use
//! the same map, so a rank's log and its checkpoint copy share one partner node.
//!
//! With teams of whole nodes as the failure unit (`crate::team::failure_units`), the map is
//! built over teams instead, so a log survives the failure of its whole team.
//!
//! A job on one node has no other node to log to, so every logging protocol refuses it.

use reverb_transport::nodemap::NodeMap;
use reverb_transport::Rank;

use crate::error::{LogError, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuddyMap {
    buddy: Vec<Rank>,
}

impl BuddyMap {
    /// Builds the map from every rank's node id (indexed by rank; ids need not be dense).
    pub fn from_nodes(node_of_rank: &[u32]) -> Result<Self> {
        let map = NodeMap::from_nodes(node_of_rank)
            .ok_or_else(|| LogError::InvalidArgument(format!("{} ranks", node_of_rank.len())))?;
        let nodes = map.nodes();
        if nodes < 2 {
            return Err(LogError::Unsupported(format!(
                "message logging needs at least two nodes (the log must survive its node), \
                 and this job of {} ranks runs on {nodes}",
                node_of_rank.len()
            )));
        }
        let buddy = map.pair_buddies();
        Ok(BuddyMap { buddy })
    }

    /// The rank that hosts `rank`'s log.
    pub fn buddy_of(&self, rank: Rank) -> Option<Rank> {
        self.buddy.get(rank as usize).copied()
    }

    /// The ranks whose logs `host` keeps (zero, one or, on an odd node count, more).
    pub fn clients_of(&self, host: Rank) -> Vec<Rank> {
        (0..self.buddy.len() as Rank).filter(|&r| self.buddy[r as usize] == host).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(size: u32, per_node: u32) -> Vec<u32> {
        (0..size).map(|r| r / per_node).collect()
    }

    #[test]
    fn pairs_nodes_and_matches_local_ranks() {
        let map = BuddyMap::from_nodes(&block(8, 2)).unwrap();
        let buddies: Vec<Rank> = (0..8).map(|r| map.buddy_of(r).unwrap()).collect();
        assert_eq!(buddies, [2, 3, 0, 1, 6, 7, 4, 5]);
        assert_eq!(map.clients_of(3), [1]);
    }

    #[test]
    fn odd_node_count_and_ragged_nodes() {
        // Nodes {0,1}, {2,3}, {4}: node 2 logs to node 1, which hosts two clients on rank 2.
        let map = BuddyMap::from_nodes(&block(5, 2)).unwrap();
        assert_eq!(map.buddy_of(4), Some(2));
        assert_eq!(map.clients_of(2), [0, 4]);
        assert_eq!(map.clients_of(4), Vec::<Rank>::new());
        // Cyclic placement (rank r on node r % 2): buddies still sit on the other node.
        let nodes: Vec<u32> = (0..6).map(|r| r % 2).collect();
        let map = BuddyMap::from_nodes(&nodes).unwrap();
        for r in 0..6 {
            let b = map.buddy_of(r).unwrap();
            assert_ne!(nodes[r as usize], nodes[b as usize], "rank {r} logs to its own node");
        }
    }

    #[test]
    fn every_rank_logs_off_node() {
        for size in 2..24u32 {
            for per_node in 1..=size / 2 {
                let nodes = block(size, per_node);
                let map = BuddyMap::from_nodes(&nodes).unwrap();
                for r in 0..size {
                    let b = map.buddy_of(r).unwrap();
                    assert_ne!(nodes[r as usize], nodes[b as usize], "size {size}, {per_node}/node");
                }
            }
        }
    }

    #[test]
    fn one_node_is_refused() {
        assert!(matches!(BuddyMap::from_nodes(&[0, 0, 0]), Err(LogError::Unsupported(_))));
        assert!(matches!(BuddyMap::from_nodes(&[]), Err(LogError::Unsupported(_))));
    }
}
