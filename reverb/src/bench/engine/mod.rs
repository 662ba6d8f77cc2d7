//! The shared benchmark engine (perftest's shape: one engine, thin mains per test).
//!
//! - parameters: [`Params`], the size list parser [`parse_sizes`], default iteration counts;
//! - the job: [`run_in_job`] re-executes the binary as a two-rank job when it was not launched,
//!   or joins the job it is in (rank 0 initiates and prints, rank 1 responds);
//! - resources: [`Session`] opens the provider, allocates two registered regions per rank and
//!   exchanges their descriptors through the bootstrap all-gather;
//! - the measured loops: ping-pong latency ([`Session::latency`]) and windowed bandwidth
//!   ([`Session::bandwidth`]), with data verified on a first pass per size ([`Session::verify`]);
//! - statistics ([`LatStats`], [`BwStats`]) and output ([`Output`]: table or JSON lines).
//!
//! Modules: `params`, `job`, `session`, `completions` (posting and waiting), `verify`,
//! `latency`, `bandwidth`, `stats`, `output`.

mod bandwidth;
mod completions;
mod job;
mod latency;
mod output;
mod params;
mod session;
mod stats;
mod verify;

use reverb_transport::Tag;

pub(super) use job::launch_self;
pub use job::{pin_self, run_in_job};
pub use output::Output;
pub use params::{parse_sizes, Op, Params, Role, WaitStyle};
pub use session::Session;
pub use stats::{BwStats, LatStats, MIB};

/// Tags of the benchmark's messages; the high bytes spell "rvb" so they stand out in traces.
pub const TAG_DATA: Tag = 0x7276_6200_0000_0001;
/// Control messages (FIN/ACK of the final sync, commands of the criterion responder).
pub const TAG_CTRL: Tag = 0x7276_6200_0000_0002;
/// Control receives kept posted, so a burst of control messages never arrives unexpected.
const CTRL_DEPTH: usize = 4;
const CTRL_CAPACITY: usize = 256;
/// How often spin loops look at the clock and the peer's liveness (a power of two).
const SPINS_PER_CHECK: u32 = 4096;

/// A never-zero byte that differs from the previous iteration's.
fn marker(i: u64) -> u8 {
    (i % 251) as u8 + 1
}

/// Bytes that depend on position, size and direction, so stale data cannot pass.
fn pattern(size: usize, salt: u32) -> Vec<u8> {
    (0..size)
        .map(|i| {
            let x = (i as u32).wrapping_mul(0x9E37_79B1) ^ salt.wrapping_mul(0x85EB_CA6B);
            (x >> 24) as u8 ^ (i as u8)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_change_and_are_never_zero() {
        for i in 0..1000u64 {
            assert_ne!(marker(i), 0);
            assert_ne!(marker(i), marker(i + 1));
        }
    }

    #[test]
    fn patterns_differ_by_salt() {
        assert_ne!(pattern(64, 1), pattern(64, 2));
        assert_eq!(pattern(64, 1), pattern(64, 1));
    }
}
