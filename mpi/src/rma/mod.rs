//! One-sided communication (MPI 4.0 ch. 12): windows, their epochs, and the operations on
//! them. An operation is applied at its target by the target itself: the origin sends a
//! request on the window's own context and the target serves it whenever it progresses (any
//! MPI call that waits); on `MPI_Win_allocate`'s memory, which same-host ranks map, the
//! origin applies it itself (`direct`). The provider's one-sided path (`Provider::put`/`get`) needs memory
//! the provider allocated, and MPI exposes the program's own (`MPI_Win_create`), so neither
//! put nor get use it yet; accumulates need the target's atomicity anyway.
//!
//! Files: `win` (window objects, creation, attributes), `wire` (the requests' bytes),
//! `mem` (the window memory's reads and writes: the `unsafe`), `shared` (shared-memory
//! windows, their mapping), `direct` (same-host origins applying operations themselves to
//! `MPI_Win_allocate`'s memory), `serve` (a target's side),
//! `attr` (the program's attributes), `recover` (windows in checkpoints, after a restart),
//! `sync` (fences, locks, flushes, post-start-complete-wait), `ops` (put and get), `acc`
//! (accumulates, fetch-and-op, compare-and-swap).

pub(crate) mod acc;
pub(crate) mod attr;
mod direct;
mod mem;
pub(crate) mod ops;
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
