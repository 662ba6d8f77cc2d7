//! Where each rank's copies live: the buddy (level 2) and the Reed-Solomon group (level 3).
//!
//! - Buddies follow the pair map (seed 000 ch.7, as the logger's `BuddyMap`): node 2k pairs with
//!   node 2k+1 (an odd last node uses the one before it), and local index `l` maps to local index
//!   `l mod m` on the partner node. The buddy is always on another node.
//! - Groups follow FTI's rule (seed 004): nodes are cut into blocks of `group_nodes` consecutive
//!   nodes (a remainder joins the last block) and group j of a block holds the j-th rank of each
//!   of its nodes. So a group's members sit on different nodes and a node's ranks sit in
//!   different groups. The m parity blocks are hosted by the group's last m members, one each.

use reverb_transport::nodemap::NodeMap;
use reverb_transport::Rank;

use crate::error::CkptError;

/// Level-3 geometry: nodes per encoding group and parity blocks per group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RsLayout {
    pub group_nodes: usize,
    pub parity_shards: usize,
}

impl Default for RsLayout {
    fn default() -> Self {
        RsLayout { group_nodes: 4, parity_shards: 2 }
    }
}

/// One Reed-Solomon group: k data members (one per node) and the hosts of its m parity blocks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub members: Vec<Rank>,
    /// `parity_hosts[p]` keeps parity block p (the last m members).
    pub parity_hosts: Vec<Rank>,
}

impl Group {
    /// The member that encodes (the first parity host).
    pub fn encoder(&self) -> Option<Rank> {
        self.parity_hosts.first().copied()
    }

    pub fn index_of(&self, rank: Rank) -> Option<usize> {
        self.members.iter().position(|&r| r == rank)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    node_of: Vec<u32>,
    buddy: Vec<Rank>,
    groups: Vec<Group>,
    group_of: Vec<Option<usize>>,
}

impl Placement {
    /// Builds buddies and, with `rs`, groups from every rank's node id (indexed by rank).
    pub fn new(node_of_rank: &[u32], rs: Option<RsLayout>) -> Result<Placement, CkptError> {
        Self::with_buddy_units(node_of_rank, node_of_rank, rs)
    }

    /// As `new`, with buddies paired over `unit_of_rank` (failure units larger than a node,
    /// e.g. teams of whole nodes: a copy must survive its whole unit); groups stay per node.
    pub fn with_buddy_units(
        node_of_rank: &[u32],
        unit_of_rank: &[u32],
        rs: Option<RsLayout>,
    ) -> Result<Placement, CkptError> {
        if unit_of_rank.len() != node_of_rank.len() {
            return Err(CkptError::InvalidArgument(format!(
                "{} failure units for {} ranks",
                unit_of_rank.len(),
                node_of_rank.len()
            )));
        }
        let units = NodeMap::from_nodes(unit_of_rank)
            .ok_or_else(|| CkptError::InvalidArgument(format!("{} ranks", unit_of_rank.len())))?;
        if units.nodes() < 2 {
            return Err(CkptError::Unsupported(format!(
                "buddy checkpoints need at least two failure units (a copy must survive its unit); \
                 this job of {} ranks has one",
                unit_of_rank.len()
            )));
        }
        let map = NodeMap::from_nodes(node_of_rank)
            .ok_or_else(|| CkptError::InvalidArgument(format!("{} ranks", node_of_rank.len())))?;
        let members = map.members();
        let nodes = map.nodes();
        if nodes < 2 {
            return Err(CkptError::Unsupported(format!(
                "buddy checkpoints need at least two nodes (a copy must survive its node); this job of \
                 {} ranks runs on {nodes}",
                node_of_rank.len()
            )));
        }
        let buddy = units.pair_buddies();
        let mut groups = Vec::new();
        let mut group_of = vec![None; node_of_rank.len()];
        if let Some(rs) = rs {
            if rs.group_nodes < 2 || rs.parity_shards == 0 {
                return Err(CkptError::InvalidArgument(format!(
                    "Reed-Solomon groups of {} nodes with {} parity blocks",
                    rs.group_nodes, rs.parity_shards
                )));
            }
            let blocks = (nodes / rs.group_nodes).max(1);
            for block in 0..blocks {
                let first = block * rs.group_nodes;
                let last = if block + 1 == blocks { nodes } else { first + rs.group_nodes };
                let widest = members[first..last].iter().map(Vec::len).max().unwrap_or(0);
                for local in 0..widest {
                    let group_members: Vec<Rank> =
                        members[first..last].iter().filter_map(|ranks| ranks.get(local).copied()).collect();
                    let k = group_members.len();
                    if k <= rs.parity_shards || k + rs.parity_shards > 256 {
                        return Err(CkptError::Unsupported(format!(
                            "Reed-Solomon group of {k} members (nodes {first}..{last}, local rank {local}) \
                             cannot host {} parity blocks on distinct other members",
                            rs.parity_shards
                        )));
                    }
                    for &r in &group_members {
                        group_of[r as usize] = Some(groups.len());
                    }
                    let parity_hosts = group_members[k - rs.parity_shards..].to_vec();
                    groups.push(Group { members: group_members, parity_hosts });
                }
            }
        }
        Ok(Placement { node_of: node_of_rank.to_vec(), buddy, groups, group_of })
    }

    pub fn ranks(&self) -> usize {
        self.node_of.len()
    }

    pub fn node_of(&self, rank: Rank) -> Option<u32> {
        self.node_of.get(rank as usize).copied()
    }

    /// The rank that keeps `rank`'s buddy copy.
    pub fn buddy_of(&self, rank: Rank) -> Option<Rank> {
        self.buddy.get(rank as usize).copied()
    }

    /// The ranks whose buddy copies `host` keeps, in rank order (the order of its slots).
    pub fn clients_of(&self, host: Rank) -> Vec<Rank> {
        (0..self.buddy.len() as Rank).filter(|&r| self.buddy[r as usize] == host).collect()
    }

    pub fn groups(&self) -> &[Group] {
        &self.groups
    }

    pub fn group_of(&self, rank: Rank) -> Option<&Group> {
        self.group_of.get(rank as usize).copied().flatten().map(|g| &self.groups[g])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(size: u32, per_node: u32) -> Vec<u32> {
        (0..size).map(|r| r / per_node).collect()
    }

    #[test]
    fn pair_map_buddies_are_off_node() {
        let p = Placement::new(&block(8, 2), None).unwrap();
        let buddies: Vec<Rank> = (0..8).map(|r| p.buddy_of(r).unwrap()).collect();
        assert_eq!(buddies, [2, 3, 0, 1, 6, 7, 4, 5]);
        for size in 2..20u32 {
            for per_node in 1..=size / 2 {
                let nodes = block(size, per_node);
                let p = Placement::new(&nodes, None).unwrap();
                for r in 0..size {
                    let b = p.buddy_of(r).unwrap();
                    assert_ne!(nodes[r as usize], nodes[b as usize], "size {size}, {per_node}/node");
                }
            }
        }
        assert!(matches!(Placement::new(&[0, 0], None), Err(CkptError::Unsupported(_))));
    }

    #[test]
    fn groups_follow_the_fti_rule() {
        let nodes = block(16, 2); // 8 nodes of 2 ranks: 2 blocks of 4 nodes, 2 groups each
        let p = Placement::new(&nodes, Some(RsLayout::default())).unwrap();
        assert_eq!(p.groups().len(), 4);
        assert_eq!(p.groups()[0].members, [0, 2, 4, 6]);
        assert_eq!(p.groups()[0].parity_hosts, [4, 6]);
        for g in p.groups() {
            let mut seen: Vec<u32> = g.members.iter().map(|&r| nodes[r as usize]).collect();
            seen.dedup();
            assert_eq!(seen.len(), g.members.len(), "two members of {g:?} on one node");
        }
        for r in 0..16 {
            assert!(p.group_of(r).unwrap().index_of(r).is_some());
        }
        // Ranks of one node are in different groups.
        assert_ne!(p.group_of(0), p.group_of(1));
        // A remainder node joins the last block; too small a group is refused.
        let p = Placement::new(&block(10, 2), Some(RsLayout::default())).unwrap();
        assert_eq!(p.groups()[0].members, [0, 2, 4, 6, 8]);
        assert!(matches!(
            Placement::new(&block(4, 2), Some(RsLayout::default())),
            Err(CkptError::Unsupported(_))
        ));
    }

    #[test]
    fn buddies_by_unit_leave_the_unit_and_groups_stay_per_node() {
        let nodes = block(8, 2);
        let teams = [0, 0, 0, 0, 1, 1, 1, 1];
        let p = Placement::with_buddy_units(&nodes, &teams, Some(RsLayout::default())).unwrap();
        let buddies: Vec<Rank> = (0..8).map(|r| p.buddy_of(r).unwrap()).collect();
        assert_eq!(buddies, [4, 5, 6, 7, 0, 1, 2, 3]);
        let by_node = Placement::new(&nodes, Some(RsLayout::default())).unwrap();
        assert_eq!(p.groups(), by_node.groups());
        assert!(matches!(Placement::with_buddy_units(&nodes, &[0; 8], None), Err(CkptError::Unsupported(_))));
        assert!(Placement::with_buddy_units(&nodes, &teams[..4], None).is_err());
    }
}
