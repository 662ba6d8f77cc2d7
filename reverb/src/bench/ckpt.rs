//! `reverb bench ckpt`: checkpoint throughput (issue 5, in progress).

use anyhow::{bail, Result};

use super::Params;

pub fn main(_params: &Params) -> Result<()> {
    bail!("reverb bench ckpt: not built yet")
}
