//! The reverb top crate: launcher, benchmark engine, the fault-tolerant runtime, its apps
//! and the demo.

pub mod apps;
pub mod bench;
pub mod demo;
pub mod launcher;
pub mod logger_core;
pub mod model;
pub mod runtime;
pub mod topo;
