//! Message logging for reverb (issue 4): the wire envelope and determinants, per-peer ordering,
//! the node determinant queue, the remote log ring, the accounting, and the protocols built on
//! them (`none`, `pessimistic-rb`, `pessimistic-sb`, `causal`), replay primitives for recovery,
//! the communication matrix and log GC. Only the transport's `Provider` API is used.
//!
//! - [`envelope`]: versioned, length-checked message envelope with piggybacked determinants;
//! - [`determinant`]: ⟨sender, receiver, ssn, rsn⟩ and the reception counter;
//! - [`channel`]: ssn assignment, in-order delivery, duplicate and stale-incarnation drops;
//! - [`detqueue`]: the node's lock-free determinant queue in shared memory (seed 000 Algs 22-24);
//! - [`logring`]: a log ring in a buddy's registered memory, written with one-sided puts;
//! - [`sendlog`]: the sender's bounded in-memory message log (sender-based logging);
//! - [`multicast`]: collective-aware logging's multicast keys, root copies and resolution;
//! - [`causal`]: simple causal logging's detList/detLog and the replay plan;
//! - [`commmatrix`]: application bytes and messages per rank pair, library traffic apart;
//! - [`protocol`]: [`LoggedEndpoint`], the protocols (`REVERB_LOG`) over one provider;
//! - [`core`]: the node logger core (offload process, client API, placements, heartbeat);
//! - [`oob`]: the out-of-band collective (all-gather, barrier) the protocols run over;
//! - [`sink`]: logger-core offload of an endpoint's log writes (`reverb run --logger`);
//! - [`team`]: team-based logging's teams (`REVERB_LOG_TEAMS`);
//! - [`buddy`]: which rank on another node hosts each rank's log;
//! - [`stats`]: counters, including deterministic vs wildcard receives;
//! - [`error`]: the [`LogError`] enum.

pub mod buddy;
pub mod causal;
pub mod channel;
pub mod commmatrix;
pub mod core;
pub mod determinant;
pub mod detqueue;
pub mod envelope;
pub mod error;
mod framepool;
pub mod logring;
pub mod multicast;
pub mod oob;
pub mod protocol;
pub mod reduction;
pub mod sendlog;
pub mod sink;
pub mod stats;
pub mod team;
mod wire;

pub use commmatrix::{CommCell, CommMatrix, CommRow};
pub use determinant::{Determinant, ReceptionCounter, Rsn, Ssn};
pub use envelope::Envelope;
pub use error::{LogError, Result};
pub use protocol::{
    DeliveredFrame, Delivery, DeterminantSink, GcReport, Landing, LogConfig, LogMode, LogUnit,
    LoggedEndpoint, LoggedProbe, Received, SetupFailed,
};
pub use team::Teams;
