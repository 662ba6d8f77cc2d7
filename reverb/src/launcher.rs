//! `reverb run` and `reverb topo` (being written).
use anyhow::{bail, Result};

#[derive(clap::Args, Debug)]
pub struct RunArgs {}

#[derive(clap::Args, Debug)]
pub struct TopoArgs {}

pub fn run(_args: RunArgs, _verbose: bool) -> Result<i32> {
    bail!("reverb run: not built yet")
}

pub fn topo(_args: TopoArgs) -> Result<()> {
    bail!("reverb topo: not built yet")
}
