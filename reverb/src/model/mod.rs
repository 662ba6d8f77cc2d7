//! `reverb model` and `reverb plan` (being written).
use anyhow::{bail, Result};

#[derive(clap::Args, Debug)]
pub struct ModelArgs {}

#[derive(clap::Args, Debug)]
pub struct PlanArgs {}

pub fn model(_args: ModelArgs) -> Result<()> {
    bail!("reverb model: not built yet")
}

pub fn plan(_args: PlanArgs) -> Result<()> {
    bail!("reverb plan: not built yet")
}
