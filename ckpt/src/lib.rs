//! In-memory checkpoints, Reed-Solomon parity and clustering.
//!
//! - [`image`]: what an application protects ([`ProtectSet`]) and the checksummed image layout;
//! - [`placement`]: buddies (pair map) and Reed-Solomon groups (FTI rule);
//! - [`checkpoint`]: [`Checkpointer`], coordinated checkpoints at levels 1-3 and restore;
//! - [`rs`]: the parity codec; [`cluster`]: clustering metrics of seed 004.

pub mod checkpoint;
pub mod cluster;
pub mod error;
pub mod image;
mod mem;
pub mod placement;
pub mod rs;
pub mod team;

pub use checkpoint::{CheckpointStats, Checkpointer, CkptConfig, FaultHook, RestoreSource, Restored, Stage};
pub use error::CkptError;
pub use image::{Epoch, ProtectSet, RestoredImage};
pub use placement::{Placement, RsLayout};
pub use rs::{EncodeKernel, ParityCodec, ParityFormat};
