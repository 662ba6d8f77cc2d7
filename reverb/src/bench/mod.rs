//! `reverb bench` (being written).
use anyhow::{bail, Result};

#[derive(clap::Args, Debug)]
pub struct BenchArgs {}

pub fn main(_args: BenchArgs, _verbose: bool) -> Result<()> {
    bail!("reverb bench: not built yet")
}
