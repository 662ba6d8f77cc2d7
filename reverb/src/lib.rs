//! The reverb top crate: launcher, benchmark engine and (later) the fault-tolerant runtime.

pub mod bench;
pub mod launcher;
pub mod logger_core;
pub mod model;
pub mod topo;
