//! `reverb run`'s command line, turned into a launch.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};

use super::{launch_report, LaunchOptions, LaunchSpec};

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Number of ranks.
    #[arg(short = 'n', long = "ranks", value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub ranks: u32,
    /// Ranks per simulated node (consecutive ranks share a node). Default: all on one node.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub ranks_per_node: Option<u32>,
    /// Kill every rank and fail after this many seconds.
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<f64>,
    /// Respawn a node whose rank is killed by a signal, at most N times in the job (0: the
    /// first failure fails the job).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub respawn: u32,
    /// Do not prefix output lines with `[rank] `.
    #[arg(long)]
    pub no_prefix: bool,
    /// Also write how the job ended as JSON to FILE: exit code, why it stopped (which rank,
    /// its exit status or signal; timeout; signal), the respawns taken.
    #[arg(long, value_name = "FILE")]
    pub report_json: Option<PathBuf>,
    /// Logger cores, one per node: dedicated, shared-pinned, shared-unpinned or off.
    #[arg(long, env = "REVERB_LOGGER", default_value = "off", value_name = "PLACEMENT")]
    pub logger: reverb_logger::core::Placement,
    /// The program to run and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "PROG")]
    pub command: Vec<String>,
}

/// `reverb run`: returns the job's exit code (0 when every rank exited 0).
pub fn run(args: RunArgs, verbose: bool) -> Result<i32> {
    let timeout = match args.timeout {
        None => None,
        Some(s) => Some(
            Duration::try_from_secs_f64(s)
                .ok()
                .filter(|d| !d.is_zero())
                .with_context(|| format!("--timeout {s}: expected a positive number of seconds"))?,
        ),
    };
    let Some((program, rest)) = args.command.split_first() else {
        bail!("reverb run: no program given");
    };
    let spec = LaunchSpec {
        ranks: args.ranks,
        ranks_per_node: args.ranks_per_node.unwrap_or(args.ranks),
        program: PathBuf::from(program),
        args: rest.to_vec(),
        env: Vec::new(),
        timeout,
        prefix_output: !args.no_prefix,
    };
    let opts =
        LaunchOptions { verbose, respawn: args.respawn, logger: args.logger, report_json: args.report_json };
    launch_report(&spec, &opts).map(|r| r.code)
}
