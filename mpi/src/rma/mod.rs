//! One-sided communication (MPI 4.0 ch. 12): windows, their epochs, and the operations on
//! them. An operation reaches its target memory one of four ways: on `MPI_Win_allocate`'s
//! memory, which same-host ranks map, the origin applies it itself (`direct`); without
//! logging, a put or get to a same-host rank's `MPI_Win_create` memory is a cross-memory copy
//! (`cross`), and to a rank on another host the provider's own put or get onto the window
//! memory that rank registered (`rdma`: RDMA WRITE and READ on verbs); everything else
//! (accumulates, which need the target's atomicity, and every operation under a logging
//! protocol, which a replay repeats) is a request on the window's own context that the target
//! applies whenever it progresses (any MPI call that waits).
//!
//! Files: `win` (window objects, creation, attributes), `wire` (the requests' bytes),
//! `mem` (the window memory's reads and writes: the `unsafe`), `shared` (shared-memory
//! windows, their mapping), `direct` (same-host origins applying operations themselves to
//! `MPI_Win_allocate`'s memory), `cross` (cross-memory puts and gets), `rdma` (the
//! provider's puts and gets), `serve` (a target's side),
//! `attr` (the program's attributes), `recover` (windows in checkpoints, after a restart),
//! `sync` (fences, locks, flushes, post-start-complete-wait), `ops` (put and get), `acc`
//! (accumulates, fetch-and-op, compare-and-swap).

pub(crate) mod acc;
pub(crate) mod attr;
mod cross;
mod direct;
mod mem;
pub(crate) mod ops;
mod rdma;
pub(crate) mod recover;
mod serve;
pub(crate) mod shared;
pub(crate) mod sync;
pub(crate) mod win;
mod wire;

pub use serve::serve_all;
pub use win::Win;

/// Handles of windows (MPICH's window kind, indirect).
pub const WIN_BASE: u32 = 0xe000_0000;
