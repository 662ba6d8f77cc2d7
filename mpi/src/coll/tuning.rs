//! Which algorithm each collective runs: a pure function of the operation, its size in bytes
//! (alike at every rank: MPI requires matching type signatures) and the communicator's size,
//! so every rank, every run and a recovered rank's replay choose alike, send the same messages
//! and combine a reduction's operands in the same order. The thresholds are MPICH's
//! defaults (`MPIR_CVAR_*`) but for the ring's and the broadcast's rank bound, which are
//! estimates: none is tuned by measurement on reverb yet (docs/benchmarks.md).

/// Broadcasts of this many bytes and more scatter the bytes and all-gather them (van de
/// Geijn): each rank moves about 2 B instead of B log n. MPICH's short limit.
pub(crate) const BCAST_SCATTER_MIN_BYTES: usize = 12 << 10;
/// ... on communicators of this many ranks or more. Below, the binomial tree runs in the
/// program's buffer, each send lent (one copy), which beat the scatter's copied pieces on
/// shared memory: IMB Bcast on 2 cores, 4 ranks 64 KiB 48 -> 17 us and 1 MiB 829 -> 154
/// (Open MPI 11 and 239); 8 ranks 64 KiB 2.0x Open MPI instead of 6.6x, 1 MiB 0.73x. MPICH
/// keeps the tree below 8 ranks.
pub(crate) const BCAST_SCATTER_MIN_RANKS: usize = 9;
/// All-reduces of this many bytes and more split the vector: reduce-scatter then all-gather
/// (Rabenseifner). MPICH's short limit.
pub(crate) const ALLREDUCE_SPLIT_MIN_BYTES: usize = 2 << 10;
/// Split all-reduces of this many bytes and more on a communicator that is not a power of two
/// go round a ring: no folding of the extra ranks, which moves the whole vector twice.
pub(crate) const ALLREDUCE_RING_MIN_BYTES: usize = 64 << 10;
/// All-to-alls of blocks up to this many bytes go in log n rounds (Bruck); larger ones
/// pairwise. MPICH's short limit.
pub(crate) const ALLTOALL_BRUCK_MAX_BYTES: usize = 256;
/// All-gathers of this many bytes in all and more go round a ring; smaller ones on a power of
/// two double (recursive doubling). MPICH's long limit.
pub(crate) const ALLGATHER_RING_MIN_BYTES: usize = 512 << 10;

/// Collectives of small messages on up to this many ranks go in one round, every rank
/// sending to every other (n - 1 messages each), instead of log n rounds of one: each round
/// is a wait for the peer, and on a host with more ranks than cores a context switch. IMB's
/// 8-byte Allreduce, 4 ranks on 2 cores: 4.4-7.6 -> 3.9-6.7 us; 8 ranks 17-32 -> 18-19.
pub(crate) const FLAT_MAX_RANKS: usize = 8;
/// ... all-reduces of at most this many bytes (each rank then combines n vectors).
pub(crate) const ALLREDUCE_FLAT_MAX_BYTES: usize = 512;
/// A broadcast's algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bcast {
    Binomial,
    ScatterAllgather,
}

/// An all-reduce's algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Allreduce {
    /// Binomial reduction to rank 0 and a broadcast: the shape collective-aware logging
    /// knows (`MPI_Allreduce`'s contributions are dropped by tree position).
    Tree,
    /// Every rank's vector to every other, combined where it lands in recursive doubling's
    /// association: one round, the same bits.
    Flat,
    RecursiveDoubling,
    /// Reduce-scatter by recursive halving, all-gather by recursive doubling.
    Rabenseifner,
    Ring,
}

/// An all-to-all's algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Alltoall {
    Bruck,
    Pairwise,
}

/// An all-gather's algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Allgather {
    RecursiveDoubling,
    Ring,
}

/// Under collective-aware logging (`caml`, alike at every rank) a broadcast keeps the tree
/// whose forwarders pass the multicast key on.
pub(crate) fn bcast(bytes: usize, ranks: usize, caml: bool) -> Bcast {
    if caml || bytes < BCAST_SCATTER_MIN_BYTES || ranks < BCAST_SCATTER_MIN_RANKS {
        return Bcast::Binomial;
    }
    Bcast::ScatterAllgather
}

/// A non-commutative operation keeps rank order: recursive doubling combines contiguous
/// blocks of ranks, lower on the left, at every size.
pub(crate) fn allreduce(commutative: bool, bytes: usize, ranks: usize, caml: bool) -> Allreduce {
    if caml {
        return Allreduce::Tree;
    }
    if bytes <= ALLREDUCE_FLAT_MAX_BYTES && flat(ranks) {
        return Allreduce::Flat;
    }
    if !commutative || bytes < ALLREDUCE_SPLIT_MIN_BYTES || ranks < 2 {
        return Allreduce::RecursiveDoubling;
    }
    if !ranks.is_power_of_two() && bytes >= ALLREDUCE_RING_MIN_BYTES {
        return Allreduce::Ring;
    }
    Allreduce::Rabenseifner
}

/// Whether a small collective on `ranks` goes in one round (`FLAT_MAX_RANKS`); two ranks
/// take one round anyway.
pub(crate) fn flat(ranks: usize) -> bool {
    (3..=FLAT_MAX_RANKS).contains(&ranks)
}

/// `block`: the bytes each rank sends each other rank (MPI_Alltoall's, alike everywhere).
pub(crate) fn alltoall(block: usize, ranks: usize) -> Alltoall {
    if block <= ALLTOALL_BRUCK_MAX_BYTES && ranks > 2 {
        return Alltoall::Bruck;
    }
    Alltoall::Pairwise
}

/// `total`: the bytes every rank ends up with.
pub(crate) fn allgather(total: usize, ranks: usize) -> Allgather {
    if ranks.is_power_of_two() && total < ALLGATHER_RING_MIN_BYTES {
        return Allgather::RecursiveDoubling;
    }
    Allgather::Ring
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_threshold_switches_where_it_says() {
        let b = BCAST_SCATTER_MIN_BYTES;
        let r = BCAST_SCATTER_MIN_RANKS;
        assert_eq!(bcast(b - 1, r, false), Bcast::Binomial);
        assert_eq!(bcast(b, r, false), Bcast::ScatterAllgather);
        assert_eq!(bcast(b, r - 1, false), Bcast::Binomial);
        assert_eq!(bcast(b << 4, 8, true), Bcast::Binomial);
        let a = ALLREDUCE_SPLIT_MIN_BYTES;
        let f = ALLREDUCE_FLAT_MAX_BYTES;
        assert_eq!(allreduce(false, f, FLAT_MAX_RANKS, false), Allreduce::Flat);
        assert_eq!(allreduce(true, f + 1, 4, false), Allreduce::RecursiveDoubling);
        assert_eq!(allreduce(true, f, FLAT_MAX_RANKS + 1, false), Allreduce::RecursiveDoubling);
        assert_eq!(allreduce(true, 8, 2, false), Allreduce::RecursiveDoubling);
        assert_eq!(allreduce(true, a - 1, 4, false), Allreduce::RecursiveDoubling);
        assert_eq!(allreduce(true, a, 4, false), Allreduce::Rabenseifner);
        assert_eq!(allreduce(true, a, 5, false), Allreduce::Rabenseifner);
        assert_eq!(allreduce(true, ALLREDUCE_RING_MIN_BYTES, 5, false), Allreduce::Ring);
        assert_eq!(allreduce(true, ALLREDUCE_RING_MIN_BYTES, 8, false), Allreduce::Rabenseifner);
        assert_eq!(allreduce(false, a << 10, 5, false), Allreduce::RecursiveDoubling);
        assert_eq!(allreduce(true, 8, 4, true), Allreduce::Tree);
        assert_eq!(alltoall(ALLTOALL_BRUCK_MAX_BYTES, 5), Alltoall::Bruck);
        assert_eq!(alltoall(ALLTOALL_BRUCK_MAX_BYTES + 1, 5), Alltoall::Pairwise);
        assert_eq!(alltoall(8, 2), Alltoall::Pairwise);
        assert_eq!(allgather(ALLGATHER_RING_MIN_BYTES - 1, 4), Allgather::RecursiveDoubling);
        assert_eq!(allgather(ALLGATHER_RING_MIN_BYTES, 4), Allgather::Ring);
        assert_eq!(allgather(8, 3), Allgather::Ring);
    }
}
