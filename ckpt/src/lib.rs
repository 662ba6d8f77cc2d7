//! In-memory checkpoints, Reed-Solomon parity and clustering. Filled in by the checkpoint issue.

pub mod cluster;
