//! The `reverb` command line.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "reverb", version, about = "RDMA transport with fault-tolerance logging offload")]
struct Cli {
    /// Print the effective configuration.
    #[arg(long, global = true)]
    verbose: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Launch N local ranks grouped into simulated nodes.
    Run(reverb::launcher::RunArgs),
    /// A host's agent: runs its ranks for the job's controller (one per host; started by
    /// `reverb run --hosts`, or by `srun -N H --ntasks-per-node=1 reverb agent -- PROG`).
    Agent(reverb::launcher::AgentArgs),
    /// Print the cores and NUMA domains hwloc found.
    Topo(reverb::topo::TopoArgs),
    /// perftest-style latency and bandwidth benchmarks.
    Bench(reverb::bench::BenchArgs),
    /// The papers' analytical models (intervals, performance, energy, survival, redundancy).
    Model(reverb::model::ModelArgs),
    /// Recommend checkpoint interval, protocol, placement and cluster sizes from measurements.
    Plan(reverb::model::PlanArgs),
    /// Seed 004 clustering metrics for a communication matrix (same as `reverb model cluster`).
    Cluster(reverb::model::cluster::ClusterArgs),
    /// Run the failure-free / node-killed stencil demo and print its report.
    Demo(reverb::demo::DemoArgs),
    /// Fault-injection campaign: random apps, protocols and SIGKILLs, checked against failure-free runs.
    Chaos(reverb::chaos::ChaosArgs),
    /// An application on the fault-tolerant runtime (run it under `reverb run`).
    App(reverb::apps::AppArgs),
    /// Configuration: every REVERB_* variable with default, current value and meaning (--config).
    Info(reverb::info::InfoArgs),
    /// A node's logger core (spawned by `reverb run`; not for direct use).
    #[command(hide = true)]
    LoggerCore(reverb::logger_core::LoggerCoreArgs),
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    reverb_transport::diag::init_stderr().context("diagnostics (REVERB_LOG_LEVEL)")?;
    match cli.command {
        Command::Run(args) => std::process::exit(reverb::launcher::run(args, cli.verbose)?),
        Command::Agent(args) => std::process::exit(reverb::launcher::agent(args, cli.verbose)?),
        Command::Topo(args) => reverb::topo::topo(args),
        Command::Bench(args) => reverb::bench::main(args, cli.verbose),
        Command::Model(args) => reverb::model::model(args),
        Command::Plan(args) => reverb::model::plan(args),
        Command::Cluster(args) => reverb::model::cluster::run(args),
        Command::Demo(args) => {
            needs_fault_injection("demo")?;
            std::process::exit(reverb::demo::main(args)?)
        }
        Command::Chaos(args) => {
            needs_fault_injection("chaos")?;
            std::process::exit(reverb::chaos::main(args)?)
        }
        Command::App(args) => reverb::apps::main(args),
        Command::Info(args) => reverb::info::main(args),
        Command::LoggerCore(args) => reverb::logger_core::main(args),
    }
}

/// `reverb demo` and `reverb chaos` kill ranks through the runtime's `REVERB_FAULT*` hooks,
/// which only builds with the `fault-injection` feature have.
fn needs_fault_injection(command: &str) -> Result<()> {
    if cfg!(feature = "fault-injection") {
        return Ok(());
    }
    anyhow::bail!(
        "`reverb {command}` injects faults, but this binary was built without them; build with \
         --features fault-injection (e.g. `cargo build --release -p reverb --features fault-injection`, \
         or scripts/demo.sh)"
    )
}
