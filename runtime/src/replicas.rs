//! Partial redundancy's layout (paper: "Combining Partial Redundancy and Checkpointing for
//! HPC", §3, eq. 5-8): which virtual ranks run as several physical processes ("spheres"),
//! and which physical ranks those are.
//!
//! With degree `r` in [1, 3] and `n` virtual ranks, `floor((ceil(r) - r) n)` ranks keep
//! `floor(r)` copies and the others get `ceil(r)` (1.5: every other rank has a replica, the
//! even ones first, as the paper's runs place them). Physical ranks number the primaries first
//! (physical rank `v` is virtual rank `v`'s first copy, so degree 1 is the plain layout),
//! then each further copy in order of virtual rank: second copies, then third copies. Under
//! block placement with the primaries filling whole nodes, no two copies of a sphere share a
//! node; [`ReplicaMap::check_spread`] says so for any placement.

use crate::error::RuntimeError;

/// The most copies of one virtual rank.
pub const MAX_DEGREE: f64 = 3.0;

/// Virtual ranks and the physical ranks (copies) that run each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaMap {
    /// Copies of each virtual rank, primary first.
    spheres: Vec<Vec<u32>>,
    /// (virtual rank, copy index) of each physical rank.
    of_physical: Vec<(u32, u32)>,
}

impl ReplicaMap {
    /// The layout of `virtual_ranks` ranks at degree `degree` (1.0..=3.0).
    pub fn new(virtual_ranks: u32, degree: f64) -> Result<ReplicaMap, RuntimeError> {
        if !(1.0..=MAX_DEGREE).contains(&degree) {
            return Err(RuntimeError::InvalidArgument(format!(
                "redundancy degree {degree} is outside 1..={MAX_DEGREE}"
            )));
        }
        if virtual_ranks == 0 {
            return Err(RuntimeError::InvalidArgument("a job needs at least one rank".into()));
        }
        let n = virtual_ranks as u64;
        let (lo, hi) = (degree.floor() as u32, degree.ceil() as u32);
        // Eq. 5-8: ranks at floor(r) copies; the others have ceil(r).
        let at_floor = if lo == hi { 0 } else { ((hi as f64 - degree) * n as f64).floor() as u64 };
        let at_ceil = n - at_floor;
        // Spread the ceil(r) ranks evenly, rank 0 first (1.5 -> the even ranks).
        let copies =
            |v: u64| if ((v + 1) * at_ceil).div_ceil(n) > (v * at_ceil).div_ceil(n) { hi } else { lo };
        let mut spheres: Vec<Vec<u32>> = (0..virtual_ranks).map(|v| vec![v]).collect();
        let mut of_physical: Vec<(u32, u32)> = (0..virtual_ranks).map(|v| (v, 0)).collect();
        for copy in 1..hi {
            for v in 0..virtual_ranks {
                if copy < copies(v as u64) {
                    spheres[v as usize].push(of_physical.len() as u32);
                    of_physical.push((v, copy));
                }
            }
        }
        Ok(ReplicaMap { spheres, of_physical })
    }

    /// Virtual ranks (what the application sees as the job's size).
    pub fn virtual_ranks(&self) -> u32 {
        self.spheres.len() as u32
    }

    /// Physical processes (what the launcher starts).
    pub fn physical_ranks(&self) -> u32 {
        self.of_physical.len() as u32
    }

    /// The copies of virtual rank `v`, primary first; empty for a rank outside the job.
    pub fn sphere(&self, v: u32) -> &[u32] {
        self.spheres.get(v as usize).map_or(&[], Vec::as_slice)
    }

    /// The virtual rank physical rank `p` runs, and which copy it is (0: the primary).
    pub fn of_physical(&self, p: u32) -> Option<(u32, u32)> {
        self.of_physical.get(p as usize).copied()
    }

    /// Fails naming the first sphere two of whose copies `node_of` places on one node.
    pub fn check_spread(&self, node_of: impl Fn(u32) -> u32) -> Result<(), RuntimeError> {
        for (v, sphere) in self.spheres.iter().enumerate() {
            for (i, &a) in sphere.iter().enumerate() {
                if let Some(&b) = sphere[i + 1..].iter().find(|&&b| node_of(b) == node_of(a)) {
                    return Err(RuntimeError::InvalidArgument(format!(
                        "virtual rank {v}: copies {a} and {b} share node {} (a node's loss would take both)",
                        node_of(a)
                    )));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copies(map: &ReplicaMap) -> Vec<usize> {
        (0..map.virtual_ranks()).map(|v| map.sphere(v).len()).collect()
    }

    #[test]
    fn degree_one_is_the_plain_layout() {
        let map = ReplicaMap::new(4, 1.0).unwrap();
        assert_eq!(map.physical_ranks(), 4);
        assert_eq!(copies(&map), [1, 1, 1, 1]);
        assert_eq!(map.of_physical(3), Some((3, 0)));
        assert_eq!(map.of_physical(4), None);
    }

    /// 1.5x: every other rank has a replica, the even ones (the paper's runs).
    #[test]
    fn one_and_a_half_replicates_the_even_ranks() {
        let map = ReplicaMap::new(8, 1.5).unwrap();
        assert_eq!(copies(&map), [2, 1, 2, 1, 2, 1, 2, 1]);
        assert_eq!(map.physical_ranks(), 12);
        assert_eq!(map.sphere(2), [2, 9]);
        assert_eq!(map.of_physical(9), Some((2, 1)));
    }

    /// The counts are the model's eq. 5-8 (`reverb model redundancy`) at every quarter step.
    #[test]
    fn counts_follow_eq_5_to_8() {
        for n in [1u32, 3, 8, 10, 17] {
            for step in 0..=8 {
                let r = 1.0 + step as f64 * 0.25;
                let map = ReplicaMap::new(n, r).unwrap();
                let (lo, hi) = (r.floor() as usize, r.ceil() as usize);
                let at_floor = if lo == hi { 0 } else { ((hi as f64 - r) * n as f64).floor() as usize };
                let c = copies(&map);
                assert_eq!(
                    c.iter().filter(|&&k| k == lo).count(),
                    if lo == hi { n as usize } else { at_floor }
                );
                assert_eq!(map.physical_ranks() as usize, c.iter().sum::<usize>(), "n {n} r {r}");
                for p in 0..map.physical_ranks() {
                    let (v, copy) = map.of_physical(p).unwrap();
                    assert_eq!(map.sphere(v)[copy as usize], p);
                }
            }
        }
    }

    #[test]
    fn degrees_outside_one_to_three_are_refused() {
        for r in [0.5, 3.01, f64::NAN, f64::INFINITY] {
            assert!(ReplicaMap::new(4, r).is_err(), "{r}");
        }
        assert!(ReplicaMap::new(0, 2.0).is_err());
    }

    /// Block placement, primaries filling whole nodes: copies land on different nodes; a
    /// placement that puts two copies together is named.
    #[test]
    fn copies_of_a_sphere_are_spread_over_nodes() {
        let map = ReplicaMap::new(8, 3.0).unwrap();
        assert!(map.check_spread(|p| p / 2).is_ok());
        let e = map.check_spread(|p| p % 8).unwrap_err();
        assert!(e.to_string().contains("virtual rank 0: copies 0 and 8 share node 0"), "{e}");
    }
}
