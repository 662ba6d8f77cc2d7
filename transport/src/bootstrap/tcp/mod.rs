//! Token-guarded TCP rendezvous: a [`BootServer`] and the [`TcpBootstrap`] client.
//!
//! Threads of the server: one gate (accept and handshakes, non-blocking: see `gate`), one
//! reader and one writer per admitted rank, one coordinator that owns all job state (rank
//! slots and the current allgather round) and queues every write to admitted connections. Readers only parse frames and send events to
//! the coordinator, so the state has a single owner and admission (duplicate checks) is
//! race-free; writers drain per-connection queues, so a rank that stops reading stalls no one
//! (a full queue or a write past the I/O bound marks it lost).
//!
//! A rank slot keeps its incarnation, status and published provider address. A failed slot
//! (lost connection, or [`BootServer::mark_failed`] from the launcher) is re-admitted at a
//! higher incarnation; once the respawned rank publishes its address, every other live rank
//! gets an unsolicited `Rejoined` frame, which [`TcpBootstrap`] queues for `poll_rejoins`.
//! A loss aborts the current allgather round without advancing it; once no slot is failed,
//! collectives resume at that round (the Welcome tells a respawned rank which).
//!
//! Modules: `server` ([`BootServer`]), `gate` (accept, handshake deadlines, the cap on
//! unauthenticated connections), `conn` (a rank's admission and reader), `outbox` (a
//! connection's writer), `coordinator` (the job state), `client` ([`TcpBootstrap`]).

mod client;
mod conn;
mod coordinator;
mod gate;
mod outbox;
mod server;

use std::time::Duration;

pub use client::TcpBootstrap;
pub use server::{traffic, AgentConn, AgentIntro, BootServer, FailureReporter, ServerOptions, Traffic};

/// Granularity at which blocked threads notice deadlines and shutdown.
const TICK: Duration = Duration::from_millis(50);

/// Read timeout of a connection idle between frames (a rank waiting for the slowest one, the
/// server's reader of an admitted rank): shutdown wakes those at once (the coordinator shuts
/// the socket), so only deadlines need the tick, and a thousand idle sockets ticking at
/// [`TICK`] would wake 20 000 threads a second on the cores the ranks start on.
const IDLE_TICK: Duration = Duration::from_millis(500);
