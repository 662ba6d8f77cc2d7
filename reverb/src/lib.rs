//! The `reverb` CLI crate: the launcher, the benchmark engine, the analytical models, the apps
//! run by `reverb app`, the demo and the fault-injection campaign. The fault-tolerant runtime
//! applications link is the `reverb-runtime` crate; the apps here are built on it.

pub mod apps;
pub mod bench;
pub mod chaos;
pub mod demo;
pub mod info;
pub mod job;
pub mod launcher;
pub mod logger_core;
pub mod model;
pub mod topo;
pub mod usage;
