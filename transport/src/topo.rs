//! Topology discovery (hwloc) and core pinning (core_affinity).
//!
//! hwloc2 2.2 against libhwloc 2.9, known problems worked around here:
//! - `Topology::objects_with_type(NUMANode)` panics: the crate maps hwloc's virtual NUMA depth
//!   (-3) to `TypeDepthBridge` and then indexes a depth that does not exist. We never ask for
//!   NUMA objects; NUMA membership comes from each PU's nodeset instead.
//! - The crate's `TopologyObject` lacks the `symmetric_subtree` field, so `memory_arity` reads
//!   the wrong word (pointers after it stay aligned and correct). We use neither.
//! - `depth_or_*_for_type` unwrap internally; we only call `depth_for_type`.

use std::collections::BTreeMap;

use hwloc2::{ObjectType, TopologyObject};

use crate::error::{Result, TransportError};

/// A processor package (socket).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Package {
    /// hwloc's logical index (dense, from 0).
    pub logical_index: u32,
    /// The OS's index for it.
    pub os_index: u32,
    /// OS cpu numbers (PU os indexes).
    pub cpus: Vec<usize>,
}

/// A NUMA node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumaNode {
    /// hwloc's logical index (dense, from 0).
    pub logical_index: u32,
    /// The OS's node number.
    pub os_index: u32,
    /// OS cpu numbers of its processing units.
    pub cpus: Vec<usize>,
}

/// A physical core.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Core {
    /// hwloc's logical index (dense, from 0).
    pub logical_index: u32,
    /// The OS's core id (not unique across packages).
    pub os_index: u32,
    /// Logical index of the package holding it, when hwloc reports packages.
    pub package: Option<u32>,
    /// Logical index of its (first) NUMA node.
    pub numa: Option<u32>,
    /// OS cpu numbers of its hardware threads.
    pub pus: Vec<usize>,
}

/// The machine as hwloc sees it, reduced to what placement needs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Topology {
    /// Packages in logical order (empty if hwloc reports none).
    pub packages: Vec<Package>,
    /// NUMA nodes in logical order (empty if none are reported).
    pub numa_nodes: Vec<NumaNode>,
    /// Cores in logical order.
    pub cores: Vec<Core>,
}

/// Bits of an hwloc bitmap; an infinite or absurd bitmap is an error, not an endless loop.
fn bits(b: Option<hwloc2::Bitmap>) -> Result<Vec<usize>> {
    let Some(b) = b else { return Ok(Vec::new()) };
    let w = b.weight();
    if !(0..=1 << 20).contains(&w) {
        return Err(TransportError::Unavailable("hwloc", format!("unbounded bitmap (weight {w})")));
    }
    Ok(b.into_iter().map(|i| i as usize).collect())
}

fn ancestor(o: &TopologyObject, ty: ObjectType) -> Option<&TopologyObject> {
    let mut cur = o.parent();
    while let Some(p) = cur {
        if p.object_type() == ty {
            return Some(p);
        }
        cur = p.parent();
    }
    None
}

fn objects(t: &hwloc2::Topology, ty: ObjectType) -> Vec<&TopologyObject> {
    // Only non-virtual depths reach objects_at_depth (see the module note).
    match t.depth_for_type(&ty) {
        Ok(d) if d < t.depth() => t.objects_at_depth(d),
        _ => Vec::new(),
    }
}

impl Topology {
    /// Loads this machine's topology. [`TransportError::Unavailable`] (`hwloc`) when hwloc
    /// cannot load it or reports no processing units.
    pub fn discover() -> Result<Topology> {
        let t = hwloc2::Topology::new()
            .ok_or_else(|| TransportError::Unavailable("hwloc", "topology init/load failed".into()))?;
        let pus = objects(&t, ObjectType::PU);
        if pus.is_empty() {
            return Err(TransportError::Unavailable("hwloc", "no processing units found".into()));
        }

        let packages = objects(&t, ObjectType::Package)
            .into_iter()
            .map(|p| {
                Ok(Package {
                    logical_index: p.logical_index(),
                    os_index: p.os_index(),
                    cpus: bits(p.cpuset())?,
                })
            })
            .collect::<Result<Vec<_>>>()?;

        // NUMA node os index -> cpus, from each PU's nodeset.
        let mut numa: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        let mut pu_numa: BTreeMap<usize, u32> = BTreeMap::new();
        for pu in &pus {
            let cpu = pu.os_index() as usize;
            for n in bits(pu.nodeset())? {
                numa.entry(n as u32).or_default().push(cpu);
                pu_numa.entry(cpu).or_insert(n as u32);
            }
        }
        let numa_nodes: Vec<NumaNode> = numa
            .into_iter()
            .enumerate()
            .map(|(i, (os, mut cpus))| {
                cpus.sort_unstable();
                NumaNode { logical_index: i as u32, os_index: os, cpus }
            })
            .collect();
        let numa_logical = |os: u32| numa_nodes.iter().find(|n| n.os_index == os).map(|n| n.logical_index);

        let mut cores = Vec::new();
        let core_objs = objects(&t, ObjectType::Core);
        if core_objs.is_empty() {
            // No core level reported: each PU is its own core.
            for pu in &pus {
                let cpu = pu.os_index() as usize;
                cores.push(Core {
                    logical_index: pu.logical_index(),
                    os_index: pu.os_index(),
                    package: ancestor(pu, ObjectType::Package).map(|p| p.logical_index()),
                    numa: pu_numa.get(&cpu).and_then(|&n| numa_logical(n)),
                    pus: vec![cpu],
                });
            }
        } else {
            for c in core_objs {
                let pus = bits(c.cpuset())?;
                let numa = pus.first().and_then(|cpu| pu_numa.get(cpu)).and_then(|&n| numa_logical(n));
                cores.push(Core {
                    logical_index: c.logical_index(),
                    os_index: c.os_index(),
                    package: ancestor(c, ObjectType::Package).map(|p| p.logical_index()),
                    numa,
                    pus,
                });
            }
        }
        Ok(Topology { packages, numa_nodes, cores })
    }

    /// All OS cpu numbers, ascending.
    pub fn cpus(&self) -> Vec<usize> {
        let mut v: Vec<usize> = self.cores.iter().flat_map(|c| c.pus.iter().copied()).collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The number of distinct processing units (hardware threads).
    pub fn pu_count(&self) -> usize {
        self.cpus().len()
    }
}

/// Pins the calling thread to OS cpu `cpu`. Errors if that cpu does not exist or is not
/// available to this process.
pub fn pin_current_thread(cpu: usize) -> Result<()> {
    let ids = core_affinity::get_core_ids()
        .ok_or_else(|| TransportError::Unavailable("pinning", "cannot read this process's cpu set".into()))?;
    let Some(id) = ids.iter().find(|c| c.id == cpu).copied() else {
        let allowed: Vec<usize> = ids.iter().map(|c| c.id).collect();
        return Err(TransportError::Config(format!(
            "cpu {cpu} does not exist or is not allowed here (allowed: {allowed:?})"
        )));
    };
    if core_affinity::set_for_current(id) {
        Ok(())
    } else {
        Err(TransportError::Unavailable("pinning", format!("sched_setaffinity to cpu {cpu} failed")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discover_matches_available_parallelism() {
        let t = Topology::discover().unwrap();
        assert!(!t.cores.is_empty());
        assert!(!t.numa_nodes.is_empty());
        let n = std::thread::available_parallelism().unwrap().get();
        assert_eq!(t.pu_count(), n, "{t:?}");
    }

    #[test]
    fn pinning_checks_the_cpu() {
        assert!(pin_current_thread(1 << 20).is_err());
        let cpus = Topology::discover().unwrap().cpus();
        // In its own thread so the test harness thread keeps its affinity.
        std::thread::spawn(move || pin_current_thread(cpus[0]).unwrap()).join().unwrap();
    }
}
