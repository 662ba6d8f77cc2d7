//! Graph and distributed-graph topologies (`MPI_Graph_*`, `MPI_Dist_graph_*`), and the
//! `_map` calls (reverb never reorders ranks). Who each rank's neighbours are is what the
//! neighbourhood collectives (`neighbor.rs`) read.

use std::ffi::c_int;

use crate::abi::*;
use crate::errors::{MpiError, MpiResult};
use crate::ffi;
use crate::ffi::{In, Out};
use crate::state::{call, State};

/// mpi.h's `MPIR_Topo_type` members (an enum, which the build's constant scan skips).
pub const MPI_GRAPH: c_int = 1;
pub const MPI_DIST_GRAPH: c_int = 3;

/// A communicator's graph topology.
#[derive(Debug, Clone)]
pub enum Graph {
    /// `MPI_Graph_create`'s whole graph: `index[i]` is the end of node i's run in `edges`.
    Whole { index: Vec<c_int>, edges: Vec<c_int> },
    /// A distributed graph: this rank's in- and out-edges, with weights when given.
    Dist {
        sources: Vec<c_int>,
        source_weights: Vec<c_int>,
        dests: Vec<c_int>,
        dest_weights: Vec<c_int>,
        weighted: bool,
    },
}

impl Graph {
    /// Node `rank`'s neighbours in a whole graph.
    fn neighbours_of<'a>(index: &[c_int], edges: &'a [c_int], rank: usize) -> &'a [c_int] {
        let end = index.get(rank).map_or(0, |&e| e.max(0) as usize).min(edges.len());
        let start =
            if rank == 0 { 0 } else { index.get(rank - 1).map_or(0, |&e| e.max(0) as usize) }.min(end);
        &edges[start..end]
    }

    /// (sources, destinations) of rank `me`, in MPI's order for the neighbourhood collectives.
    pub fn adjacency(&self, me: usize) -> (Vec<c_int>, Vec<c_int>) {
        match self {
            Graph::Whole { index, edges } => {
                let n = Graph::neighbours_of(index, edges, me).to_vec();
                (n.clone(), n)
            }
            Graph::Dist { sources, dests, .. } => (sources.clone(), dests.clone()),
        }
    }
}

// `MPI_UNWEIGHTED` and `MPI_WEIGHTS_EMPTY` (mpi.h's `int * const` objects of the library,
// compared by address) are defined with what MPICH's Fortran binding needs (`fortran.rs`).
use crate::fortran::{MPI_UNWEIGHTED, MPI_WEIGHTS_EMPTY};
use std::sync::atomic::Ordering::Relaxed;

fn is_unweighted(p: In<'_, c_int>) -> bool {
    p.addr() == MPI_UNWEIGHTED.load(Relaxed) as usize
}

/// `n` weights from `p`, or none when `p` is `MPI_UNWEIGHTED` / `MPI_WEIGHTS_EMPTY`.
///
/// # Safety
/// `p` is a sentinel or an array of `n` weights (the FFI contract).
unsafe fn weights(p: In<'_, c_int>, n: usize) -> MpiResult<Vec<c_int>> {
    if is_unweighted(p) || p.addr() == MPI_WEIGHTS_EMPTY.load(Relaxed) as usize || n == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: the caller's promise.
    Ok(unsafe { ffi::array(p, n, "weights") }?.to_vec())
}

fn count(n: c_int, what: &str) -> MpiResult<usize> {
    usize::try_from(n).map_err(|_| MpiError::new(MPI_ERR_ARG, format!("{what} {n}")))
}

impl State {
    pub fn graph(&self, comm: c_int) -> MpiResult<&Graph> {
        self.comm(comm)?;
        self.graphs
            .get(&comm)
            .ok_or_else(|| MpiError::new(MPI_ERR_TOPOLOGY, "the communicator has no graph topology"))
    }

    /// A communicator of the first `members` ranks of `parent` carrying `graph` (or
    /// MPI_COMM_NULL at the others): collective on `parent`.
    fn with_graph(&mut self, parent: c_int, members: usize, graph: Graph) -> MpiResult<c_int> {
        let p = self.comm(parent)?;
        if p.remote.is_some() || members > p.size() as usize {
            return Err(MpiError::new(
                MPI_ERR_ARG,
                format!("{members} nodes on a communicator of {}", p.size()),
            ));
        }
        let (ranks, inside) = (p.ranks[..members].to_vec(), (p.me as usize) < members);
        let context = self.new_context(parent)?;
        if !inside {
            return Ok(MPI_COMM_NULL);
        }
        let h = self.derive(parent, ranks, context);
        self.graphs.insert(h, graph);
        Ok(h)
    }
}

pub(crate) unsafe fn mpi_graph_create(
    comm_old: c_int,
    nnodes: c_int,
    index: In<'_, c_int>,
    edges: In<'_, c_int>,
    _reorder: c_int,
    comm_graph: Out<'_, c_int>,
) -> c_int {
    call("MPI_Graph_create", comm_old, |s| {
        let n = count(nnodes, "nnodes")?;
        // SAFETY: `index` has `nnodes` entries (the FFI contract).
        let index = unsafe { ffi::array(index, n, "index") }?.to_vec();
        let m = count(index.last().copied().unwrap_or(0), "edges")?;
        // SAFETY: `edges` has `index[nnodes-1]` entries (the FFI contract).
        let edges = unsafe { ffi::array(edges, m, "edges") }?.to_vec();
        if edges.iter().any(|&e| !(0..nnodes).contains(&e)) || index.windows(2).any(|w| w[1] < w[0]) {
            return Err(MpiError::new(MPI_ERR_TOPOLOGY, "edges name nodes outside the graph"));
        }
        let h = s.with_graph(comm_old, n, Graph::Whole { index, edges })?;
        ffi::out(comm_graph, h, "comm_graph")
    })
}

pub(crate) unsafe fn mpi_graphdims_get(comm: c_int, nnodes: Out<'_, c_int>, nedges: Out<'_, c_int>) -> c_int {
    call("MPI_Graphdims_get", comm, |s| match s.graph(comm)? {
        Graph::Whole { index, edges } => {
            ffi::out(nnodes, index.len() as c_int, "nnodes")?;
            ffi::out(nedges, edges.len() as c_int, "nedges")
        }
        Graph::Dist { .. } => Err(MpiError::new(MPI_ERR_TOPOLOGY, "a distributed graph")),
    })
}

pub(crate) unsafe fn mpi_graph_get(
    comm: c_int,
    maxindex: c_int,
    maxedges: c_int,
    index: Out<'_, c_int>,
    edges: Out<'_, c_int>,
) -> c_int {
    call("MPI_Graph_get", comm, |s| {
        let Graph::Whole { index: i, edges: e } = s.graph(comm)? else {
            return Err(MpiError::new(MPI_ERR_TOPOLOGY, "a distributed graph"));
        };
        let (ni, ne) = (i.len().min(count(maxindex, "maxindex")?), e.len().min(count(maxedges, "maxedges")?));
        // SAFETY: `index` has room for `maxindex` >= ni entries (the FFI contract).
        unsafe { ffi::array_mut(index, ni, "index") }?.copy_from_slice(&i[..ni]);
        // SAFETY: `edges` has room for `maxedges` >= ne entries (the FFI contract).
        unsafe { ffi::array_mut(edges, ne, "edges") }?.copy_from_slice(&e[..ne]);
        Ok(())
    })
}

fn whole_neighbours(s: &State, comm: c_int, rank: c_int) -> MpiResult<Vec<c_int>> {
    let Graph::Whole { index, edges } = s.graph(comm)? else {
        return Err(MpiError::new(MPI_ERR_TOPOLOGY, "a distributed graph"));
    };
    let r = usize::try_from(rank).ok().filter(|&r| r < index.len());
    let r = r.ok_or_else(|| MpiError::new(MPI_ERR_RANK, format!("rank {rank}")))?;
    Ok(Graph::neighbours_of(index, edges, r).to_vec())
}

pub(crate) unsafe fn mpi_graph_neighbors_count(
    comm: c_int,
    rank: c_int,
    nneighbors: Out<'_, c_int>,
) -> c_int {
    call("MPI_Graph_neighbors_count", comm, |s| {
        ffi::out(nneighbors, whole_neighbours(s, comm, rank)?.len() as c_int, "nneighbors")
    })
}

pub(crate) unsafe fn mpi_graph_neighbors(
    comm: c_int,
    rank: c_int,
    maxneighbors: c_int,
    neighbors: Out<'_, c_int>,
) -> c_int {
    call("MPI_Graph_neighbors", comm, |s| {
        let n = whole_neighbours(s, comm, rank)?;
        let k = n.len().min(count(maxneighbors, "maxneighbors")?);
        // SAFETY: `neighbors` has room for `maxneighbors` >= k entries (the FFI contract).
        unsafe { ffi::array_mut(neighbors, k, "neighbors") }?.copy_from_slice(&n[..k]);
        Ok(())
    })
}

/// This rank's place in a topology of `nodes` ranks without reordering.
fn map_rank(s: &State, comm: c_int, nodes: usize, newrank: Out<'_, c_int>) -> MpiResult<()> {
    let c = s.comm(comm)?;
    if nodes > c.size() as usize {
        return Err(MpiError::new(MPI_ERR_ARG, format!("{nodes} nodes on a communicator of {}", c.size())));
    }
    let me = c.me as usize;
    ffi::out(newrank, if me < nodes { me as c_int } else { MPI_UNDEFINED }, "newrank")
}

pub(crate) unsafe fn mpi_graph_map(
    comm: c_int,
    nnodes: c_int,
    _index: In<'_, c_int>,
    _edges: In<'_, c_int>,
    newrank: Out<'_, c_int>,
) -> c_int {
    call("MPI_Graph_map", comm, |s| map_rank(s, comm, count(nnodes, "nnodes")?, newrank))
}

pub(crate) unsafe fn mpi_cart_map(
    comm: c_int,
    ndims: c_int,
    dims: In<'_, c_int>,
    _periods: In<'_, c_int>,
    newrank: Out<'_, c_int>,
) -> c_int {
    call("MPI_Cart_map", comm, |s| {
        // SAFETY: `dims` has `ndims` entries (the FFI contract).
        let dims = unsafe { ffi::array(dims, count(ndims, "ndims")?, "dims") }?;
        let nodes = dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(count(d, "dims").ok()?));
        map_rank(
            s,
            comm,
            nodes.ok_or_else(|| MpiError::new(MPI_ERR_DIMS, format!("dims {dims:?}")))?,
            newrank,
        )
    })
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_dist_graph_create_adjacent(
    comm_old: c_int,
    indegree: c_int,
    sources: In<'_, c_int>,
    sourceweights: In<'_, c_int>,
    outdegree: c_int,
    destinations: In<'_, c_int>,
    destweights: In<'_, c_int>,
    _info: c_int,
    _reorder: c_int,
    comm_dist_graph: Out<'_, c_int>,
) -> c_int {
    call("MPI_Dist_graph_create_adjacent", comm_old, |s| {
        let (ni, no) = (count(indegree, "indegree")?, count(outdegree, "outdegree")?);
        let size = s.comm(comm_old)?.size() as usize;
        // SAFETY: the arrays are as long as the degrees say (the FFI contract).
        let sources = unsafe { ffi::array(sources, ni, "sources") }?.to_vec();
        // SAFETY: as above.
        let dests = unsafe { ffi::array(destinations, no, "destinations") }?.to_vec();
        if sources.iter().chain(&dests).any(|&r| !(0..size as c_int).contains(&r)) {
            return Err(MpiError::new(MPI_ERR_RANK, "a neighbour outside the communicator"));
        }
        let weighted = !is_unweighted(sourceweights) || !is_unweighted(destweights);
        // SAFETY: weights arrays are as long as the degrees say, or sentinels (the contract).
        let (source_weights, dest_weights) =
            unsafe { (weights(sourceweights, ni)?, weights(destweights, no)?) };
        let graph = Graph::Dist { sources, source_weights, dests, dest_weights, weighted };
        let h = s.with_graph(comm_old, size, graph)?;
        ffi::out(comm_dist_graph, h, "comm_dist_graph")
    })
}

/// Every rank's edges (source, destination, weight), gathered: each rank keeps its own.
fn gather_edges(
    s: &mut State,
    comm: c_int,
    mine: &[(c_int, c_int, c_int)],
) -> MpiResult<Vec<(c_int, c_int, c_int)>> {
    let bytes: Vec<u8> = mine.iter().flat_map(|&(a, b, w)| [a, b, w]).flat_map(|v| v.to_le_bytes()).collect();
    let all = crate::coll::allgather_bytes(s, comm, &bytes)?;
    let ints = |b: &Vec<u8>| -> Vec<c_int> {
        b.chunks_exact(4).map(|c| c_int::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
    };
    Ok(all
        .iter()
        .flat_map(|b| ints(b).chunks_exact(3).map(|t| (t[0], t[1], t[2])).collect::<Vec<_>>())
        .collect())
}

#[allow(clippy::too_many_arguments)] // MPI's parameters, as the prototype lists them
pub(crate) unsafe fn mpi_dist_graph_create(
    comm_old: c_int,
    n: c_int,
    sources: In<'_, c_int>,
    degrees: In<'_, c_int>,
    destinations: In<'_, c_int>,
    weights_in: In<'_, c_int>,
    _info: c_int,
    _reorder: c_int,
    comm_dist_graph: Out<'_, c_int>,
) -> c_int {
    call("MPI_Dist_graph_create", comm_old, |s| {
        let n = count(n, "n")?;
        let (size, me) = (s.comm(comm_old)?.size() as c_int, s.comm(comm_old)?.me as c_int);
        // SAFETY: `sources` and `degrees` have `n` entries (the FFI contract).
        let (srcs, degs) =
            unsafe { (ffi::array(sources, n, "sources")?, ffi::array(degrees, n, "degrees")?) };
        let total = degs.iter().try_fold(0usize, |acc, &d| Some(acc + count(d, "degree").ok()?));
        let total = total.ok_or_else(|| MpiError::new(MPI_ERR_ARG, "a negative degree"))?;
        // SAFETY: `destinations` (and `weights`) hold the degrees' sum (the FFI contract).
        let dests = unsafe { ffi::array(destinations, total, "destinations") }?;
        // SAFETY: as above, or a sentinel.
        let w = unsafe { weights(weights_in, total) }?;
        let mut mine = Vec::with_capacity(total);
        let mut at = 0;
        for (&src, &deg) in srcs.iter().zip(degs) {
            for _ in 0..deg {
                mine.push((src, dests[at], w.get(at).copied().unwrap_or(1)));
                at += 1;
            }
        }
        if mine.iter().any(|&(a, b, _)| !(0..size).contains(&a) || !(0..size).contains(&b)) {
            return Err(MpiError::new(MPI_ERR_RANK, "an edge outside the communicator"));
        }
        // Whether any rank gave weights: agreed with the edges (a flag edge of (-1, -1, w)).
        let weighted = !is_unweighted(weights_in);
        mine.push((-1, -1, c_int::from(weighted)));
        let all = gather_edges(s, comm_old, &mine)?;
        let weighted = all.iter().any(|&(a, b, w)| a == -1 && b == -1 && w != 0);
        let edges = all.iter().filter(|e| e.0 >= 0);
        let (mut sources, mut source_weights, mut dests, mut dest_weights) = (vec![], vec![], vec![], vec![]);
        for &(a, b, w) in edges {
            if b == me {
                sources.push(a);
                source_weights.push(w);
            }
            if a == me {
                dests.push(b);
                dest_weights.push(w);
            }
        }
        let graph = Graph::Dist { sources, source_weights, dests, dest_weights, weighted };
        let h = s.with_graph(comm_old, size as usize, graph)?;
        ffi::out(comm_dist_graph, h, "comm_dist_graph")
    })
}

pub(crate) unsafe fn mpi_dist_graph_neighbors_count(
    comm: c_int,
    indegree: Out<'_, c_int>,
    outdegree: Out<'_, c_int>,
    weighted: Out<'_, c_int>,
) -> c_int {
    call("MPI_Dist_graph_neighbors_count", comm, |s| {
        let me = s.comm(comm)?.me as usize;
        let g = s.graph(comm)?;
        let (ins, outs) = g.adjacency(me);
        let w = matches!(g, Graph::Dist { weighted: true, .. });
        ffi::out(indegree, ins.len() as c_int, "indegree")?;
        ffi::out(outdegree, outs.len() as c_int, "outdegree")?;
        ffi::out(weighted, c_int::from(w), "weighted")
    })
}

pub(crate) unsafe fn mpi_dist_graph_neighbors(
    comm: c_int,
    maxindegree: c_int,
    sources: Out<'_, c_int>,
    sourceweights: Out<'_, c_int>,
    maxoutdegree: c_int,
    destinations: Out<'_, c_int>,
    destweights: Out<'_, c_int>,
) -> c_int {
    call("MPI_Dist_graph_neighbors", comm, |s| {
        let me = s.comm(comm)?.me as usize;
        let g = s.graph(comm)?;
        let (ins, outs) = g.adjacency(me);
        let (iw, ow) = match g {
            Graph::Dist { source_weights, dest_weights, .. } => {
                (source_weights.clone(), dest_weights.clone())
            }
            Graph::Whole { .. } => (vec![1; ins.len()], vec![1; outs.len()]),
        };
        let (ni, no) = (
            ins.len().min(count(maxindegree, "maxindegree")?),
            outs.len().min(count(maxoutdegree, "maxoutdegree")?),
        );
        // SAFETY: room for `maxindegree` >= ni entries (the FFI contract).
        unsafe { ffi::array_mut(sources, ni, "sources") }?.copy_from_slice(&ins[..ni]);
        // SAFETY: room for `maxoutdegree` >= no entries (the FFI contract).
        unsafe { ffi::array_mut(destinations, no, "destinations") }?.copy_from_slice(&outs[..no]);
        if !is_unweighted(sourceweights.as_in()) && iw.len() >= ni {
            // SAFETY: as for `sources`.
            unsafe { ffi::array_mut(sourceweights, ni, "sourceweights") }?.copy_from_slice(&iw[..ni]);
        }
        if !is_unweighted(destweights.as_in()) && ow.len() >= no {
            // SAFETY: as for `destinations`.
            unsafe { ffi::array_mut(destweights, no, "destweights") }?.copy_from_slice(&ow[..no]);
        }
        Ok(())
    })
}
