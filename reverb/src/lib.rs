//! The reverb top crate: launcher, benchmark engine, the fault-tolerant runtime, its apps,
//! the demo and the fault-injection campaign.

pub mod apps;
pub mod bench;
pub mod chaos;
pub mod demo;
pub mod info;
pub mod job;
pub mod launcher;
pub mod logger_core;
pub mod model;
pub mod runtime;
pub mod topo;
