//! Topology discovery (hwloc) and core pinning (core_affinity). Filled by the bootstrap work.
