//! `reverb logger-core`: the process that runs a node's logger core (issue 4, in progress).

use anyhow::{bail, Result};

#[derive(clap::Args, Debug)]
pub struct LoggerCoreArgs {}

pub fn main(_args: LoggerCoreArgs) -> Result<()> {
    bail!("reverb logger-core: not built yet")
}
