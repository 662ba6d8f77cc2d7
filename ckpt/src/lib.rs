//! In-memory checkpoints, Reed-Solomon parity and clustering. Filled in by the checkpoint issue.

pub mod cluster;
pub mod error;
pub mod rs;

pub use error::CkptError;
pub use rs::{ParityCodec, ParityFormat};
