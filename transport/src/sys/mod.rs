//! System utilities every part of reverb shares, as UCX keeps them in UCS: the shared files in
//! /dev/shm ([`shmfile`]), whether a process lives ([`liveness`]), a coarse clock for
//! checks asked about every progress pass and CPU time ([`clock`]). No provider's internals:
//! the shm provider, the verbs provider, the logger and the launcher all use them from here.

pub mod clock;
pub mod liveness;
pub mod shmfile;
