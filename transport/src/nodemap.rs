//! Ranks grouped by node, and the pair map of buddy nodes (seed 000 ch.7: it survives more
//! double failures than a ring map). The logger's log buddies and the checkpoint buddies both
//! come from here, so a rank's log and its checkpoint copy always sit on the same partner node.
//!
//! - nodes are numbered by their smallest rank, in order (ids need not be dense);
//! - node 2k pairs with node 2k+1; with an odd node count the last node pairs with the one
//!   before it (which then serves two nodes);
//! - the rank with local index `l` maps to the rank with local index `l mod m` on the partner
//!   node, where `m` is that node's rank count.

use crate::api::Rank;

/// The job's ranks grouped by node, and the pair map over those nodes (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeMap {
    members: Vec<Vec<Rank>>,
}

impl NodeMap {
    /// Groups ranks by their node id (indexed by rank). `None` beyond `u32::MAX` ranks.
    pub fn from_nodes(node_of_rank: &[u32]) -> Option<NodeMap> {
        let mut node_ids: Vec<u32> = Vec::new();
        let mut members: Vec<Vec<Rank>> = Vec::new();
        for (rank, &node) in node_of_rank.iter().enumerate() {
            let rank = Rank::try_from(rank).ok()?;
            match node_ids.iter().position(|&n| n == node) {
                Some(i) => members[i].push(rank),
                None => {
                    node_ids.push(node);
                    members.push(vec![rank]);
                }
            }
        }
        Some(NodeMap { members })
    }

    /// The number of nodes.
    pub fn nodes(&self) -> usize {
        self.members.len()
    }

    /// The ranks of every node, in node order, each in rank order.
    pub fn members(&self) -> &[Vec<Rank>] {
        &self.members
    }

    /// The pair-map partner of node `node` (itself on a one-node job).
    pub fn partner(&self, node: usize) -> usize {
        if node ^ 1 < self.nodes() {
            node ^ 1
        } else {
            node.saturating_sub(1)
        }
    }

    /// Every rank's buddy on the partner node, indexed by rank.
    pub fn pair_buddies(&self) -> Vec<Rank> {
        let ranks = self.members.iter().map(Vec::len).sum();
        let mut buddy = vec![0; ranks];
        for (n, ranks) in self.members.iter().enumerate() {
            let peers = &self.members[self.partner(n)];
            for (local, &rank) in ranks.iter().enumerate() {
                buddy[rank as usize] = peers[local % peers.len()];
            }
        }
        buddy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_nodes_and_local_indices() {
        let map = NodeMap::from_nodes(&[7, 7, 3, 3, 9, 9]).unwrap();
        assert_eq!(map.nodes(), 3);
        assert_eq!(map.members(), &[vec![0, 1], vec![2, 3], vec![4, 5]]);
        assert_eq!((map.partner(0), map.partner(1), map.partner(2)), (1, 0, 1));
        assert_eq!(map.pair_buddies(), vec![2, 3, 0, 1, 2, 3]);
        let one = NodeMap::from_nodes(&[0, 0]).unwrap();
        assert_eq!(one.partner(0), 0);
    }
}
