//! Logger buddies: each rank's log lives on a rank of another node, so a node failure never
//! takes a log together with the ranks it protects (seed 000 ch.7: the node is the failure unit).
//!
//! The rule is a pair map, which seed 000 ch.7 finds more survivable than a ring map:
//! - nodes are numbered by their smallest rank, in order;
//! - node 2k pairs with node 2k+1; with an odd node count the last node logs to the one before
//!   it (which then hosts the logs of two nodes);
//! - the rank with local index `l` on its node logs to the rank with local index
//!   `l mod m` on the partner node, where `m` is that node's rank count.
//!
//! A job on one node has no other node to log to, so every logging protocol refuses it.

use reverb_transport::Rank;

use crate::error::{LogError, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuddyMap {
    buddy: Vec<Rank>,
}

impl BuddyMap {
    /// Builds the map from every rank's node id (indexed by rank; ids need not be dense).
    pub fn from_nodes(node_of_rank: &[u32]) -> Result<Self> {
        // Node order and local indices follow rank order.
        let mut node_ids: Vec<u32> = Vec::new();
        let mut members: Vec<Vec<Rank>> = Vec::new();
        for (rank, &node) in node_of_rank.iter().enumerate() {
            let rank = Rank::try_from(rank)
                .map_err(|_| LogError::InvalidArgument(format!("{} ranks", node_of_rank.len())))?;
            match node_ids.iter().position(|&n| n == node) {
                Some(i) => members[i].push(rank),
                None => {
                    node_ids.push(node);
                    members.push(vec![rank]);
                }
            }
        }
        let nodes = members.len();
        if nodes < 2 {
            return Err(LogError::Unsupported(format!(
                "message logging needs at least two nodes (the log must survive its node), \
                 and this job of {} ranks runs on {nodes}",
                node_of_rank.len()
            )));
        }
        let partner = |n: usize| if n ^ 1 < nodes { n ^ 1 } else { n - 1 };
        let mut buddy = vec![0; node_of_rank.len()];
        for (n, ranks) in members.iter().enumerate() {
            let peers = &members[partner(n)];
            for (local, &rank) in ranks.iter().enumerate() {
                buddy[rank as usize] = peers[local % peers.len()];
            }
        }
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
