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

fn main() {
    let cli = Cli::parse();
    let status = match dispatch(cli) {
        Ok(status) => status,
        // A bad option value or REVERB_* variable: clap's usage-error status.
        Err(e) if reverb::usage::is_usage(&e) => {
            eprintln!("error: {e:#}");
            2
        }
        Err(e) => {
            eprintln!("Error: {e:?}");
            1
        }
    };
    std::process::exit(status)
}

fn dispatch(cli: Cli) -> Result<i32> {
    check_env(&cli.command)?;
    reverb_transport::diag::init_stderr().context("diagnostics (REVERB_LOG_LEVEL)")?;
    match cli.command {
        Command::Run(args) => reverb::launcher::run(args, cli.verbose),
        Command::Agent(args) => reverb::launcher::agent(args, cli.verbose),
        Command::Topo(args) => reverb::topo::topo(args).map(|()| 0),
        Command::Bench(args) => reverb::bench::main(args, cli.verbose).map(|()| 0),
        Command::Model(args) => reverb::model::model(args).map(|()| 0),
        Command::Plan(args) => reverb::model::plan(args).map(|()| 0),
        Command::Cluster(args) => reverb::model::cluster::run(args).map(|()| 0),
        Command::Demo(args) => {
            needs_fault_injection("demo")?;
            reverb::demo::main(args)
        }
        Command::Chaos(args) => {
            needs_fault_injection("chaos")?;
            reverb::chaos::main(args)
        }
        Command::App(args) => reverb::apps::main(args).map(|()| 0),
        Command::Info(args) => reverb::info::main(args).map(|()| 0),
        Command::LoggerCore(args) => reverb::logger_core::main(args).map(|()| 0),
    }
}

/// Refuses a `REVERB_*` variable whose value is malformed or out of its bounds before
/// anything reads it. `info` lists bad values instead; the launchers check only their own
/// layer (their ranks check the rest themselves, and report it as the rank's failure).
fn check_env(command: &Command) -> Result<()> {
    use reverb_transport::config::registry::{Layer, VARS};
    let wanted = |layer: Layer| match command {
        Command::Info(_) => false,
        Command::Run(_) | Command::Agent(_) => layer == Layer::Launcher,
        _ => !matches!(layer, Layer::Build | Layer::Test | Layer::Ci),
    };
    for var in VARS.iter().filter(|v| wanted(v.layer)) {
        let Some(value) = std::env::var_os(var.name) else { continue };
        let value = value.to_string_lossy();
        if value.trim().is_empty() {
            continue;
        }
        if let Err(e) = var.check(&value) {
            return Err(reverb::usage::usage(format!("{}={value:?}: {e}", var.name)));
        }
    }
    Ok(())
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
