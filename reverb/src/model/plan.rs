//! `reverb plan`: from measured numbers (checkpoint time, node MTBF, node count, the slowest
//! rank's compute/communication ratio) to a checkpoint interval, a logging protocol, a logger
//! placement and cluster sizes, with the expected efficiency.
//!
//! - Interval and efficiency: seed 000 eq. 4.4 (no logging) and eq. 4.5 (logging), minimised
//!   over tau; Daly's interval (seed 001 eq. 15) is shown for reference.
//! - Protocol: logging slows the forward path by mu = 1 + overhead x communication share and
//!   speeds recovery by phi (seed 000 Table 4.2: 1.2). The per-protocol overheads are
//!   assumptions to be replaced by `reverb bench` measurements.
//! - Placement (seed 003): communication-bound ranks hide the logger's compute cost, so
//!   sharing cores unpinned is enough; balanced ranks share cores with pinned, evenly spread
//!   loggers (seed 003's default); compute-bound ranks get a dedicated core per node.
//! - Cluster sizes (seed 004): containment clusters of whole nodes, at least 4 nodes, logging
//!   at most 20 % of traffic and restarting at most 20 % of processes; encoding clusters of 4
//!   processes on 4 distinct nodes.

use super::interval::daly;
use super::perf::{self, Protocol};
use super::table::{sig, Table};
use super::{human_duration, parse_count, parse_nonnegative_duration, parse_positive_duration, print_out};
use anyhow::{bail, Context, Result};
use reverb_ckpt::cluster::{evaluate as cluster_metrics, CommMatrix, Strategy, Topology};
use serde::Serialize;
use serde_json::json;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct PlanArgs {
    /// Measured checkpoint time (later from `reverb bench ckpt`).
    #[arg(long, value_parser = parse_positive_duration)]
    pub ckpt_time: f64,
    /// MTBF of one node.
    #[arg(long, value_parser = parse_positive_duration)]
    pub node_mtbf: f64,
    /// Node count.
    #[arg(long, value_parser = parse_count)]
    pub nodes: u64,
    /// Compute time / communication time of the slowest rank per iteration, 0..=1000000000.
    #[arg(long, value_parser = crate::usage::float(0.0, 1e9))]
    pub compute_comm_ratio: f64,
    /// Application processes per node, 1..=4096.
    #[arg(long, default_value_t = 16, value_parser = crate::usage::int::<usize>(1, 4096))]
    pub procs_per_node: usize,
    /// Restart time (default: the checkpoint time, as an in-memory restart reloads it).
    #[arg(long, value_parser = parse_nonnegative_duration)]
    pub restart_time: Option<f64>,
    /// Failure-free run length used for the efficiency.
    #[arg(long, default_value = "24h", value_parser = parse_positive_duration)]
    pub work: f64,
    /// Recovery speedup of message logging (phi, seed 000 Table 4.2), 0.001..=1000.
    #[arg(long, default_value_t = 1.2, value_parser = crate::usage::float(1e-3, 1e3))]
    pub recovery_speedup: f64,
    /// Forward overhead of pessimistic receiver-based logging, as a fraction of communication
    /// time, 0..=1000.
    #[arg(long, default_value_t = 0.5, value_parser = crate::usage::float(0.0, 1e3))]
    pub overhead_pessimistic_rb: f64,
    /// Forward overhead of pessimistic sender-based logging, as a fraction of communication
    /// time, 0..=1000.
    #[arg(long, default_value_t = 0.25, value_parser = crate::usage::float(0.0, 1e3))]
    pub overhead_pessimistic_sb: f64,
    /// Forward overhead of causal logging, as a fraction of communication time, 0..=1000.
    #[arg(long, default_value_t = 0.1, value_parser = crate::usage::float(0.0, 1e3))]
    pub overhead_causal: f64,
    /// Communication matrix (see `reverb model cluster`) to size containment clusters.
    #[arg(long)]
    pub matrix: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoggingProtocol {
    None,
    PessimisticRb,
    PessimisticSb,
    Causal,
}

impl LoggingProtocol {
    pub const ALL: [LoggingProtocol; 4] = [
        LoggingProtocol::None,
        LoggingProtocol::PessimisticRb,
        LoggingProtocol::PessimisticSb,
        LoggingProtocol::Causal,
    ];

    pub fn name(self) -> &'static str {
        match self {
            LoggingProtocol::None => "none",
            LoggingProtocol::PessimisticRb => "pessimistic-rb",
            LoggingProtocol::PessimisticSb => "pessimistic-sb",
            LoggingProtocol::Causal => "causal",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    NotApplicable,
    Dedicated,
    SharedPinned,
    SharedUnpinned,
}

impl Placement {
    pub fn name(self) -> &'static str {
        match self {
            Placement::NotApplicable => "n/a",
            Placement::Dedicated => "dedicated",
            Placement::SharedPinned => "shared-pinned",
            Placement::SharedUnpinned => "shared-unpinned",
        }
    }
}

/// Measured inputs, validated.
#[derive(Debug, Clone, Copy)]
pub struct Inputs {
    pub ckpt_time: f64,
    pub node_mtbf: f64,
    pub nodes: u64,
    pub compute_comm_ratio: f64,
    pub procs_per_node: usize,
    pub restart_time: f64,
    pub work: f64,
    pub recovery_speedup: f64,
    /// Forward overheads (fraction of communication time) for rb, sb, causal.
    pub overheads: [f64; 3],
}

impl Inputs {
    pub fn validate(&self) -> Result<()> {
        if self.nodes == 0 {
            bail!("node count must be at least 1");
        }
        if self.procs_per_node == 0 {
            bail!("processes per node must be at least 1");
        }
        for (name, v) in
            [("checkpoint time", self.ckpt_time), ("node MTBF", self.node_mtbf), ("work", self.work)]
        {
            if !(v.is_finite() && v > 0.0) {
                bail!("{name} must be positive, got {v}");
            }
        }
        if !(self.compute_comm_ratio.is_finite() && self.compute_comm_ratio >= 0.0) {
            bail!(
                "compute/communication ratio must be a non-negative number, got {}",
                self.compute_comm_ratio
            );
        }
        if !(self.recovery_speedup.is_finite() && self.recovery_speedup > 0.0) {
            bail!("recovery speedup must be positive");
        }
        if self.overheads.iter().any(|o| !(o.is_finite() && *o >= 0.0)) {
            bail!("logging overheads must be non-negative");
        }
        if !(self.restart_time.is_finite() && self.restart_time >= 0.0) {
            bail!("restart time must not be negative");
        }
        Ok(())
    }

    /// Share of an iteration spent communicating.
    pub fn comm_share(&self) -> f64 {
        1.0 / (1.0 + self.compute_comm_ratio)
    }

    pub fn system_mtbf(&self) -> f64 {
        self.node_mtbf / self.nodes as f64
    }

    fn model_params(&self, mu: f64) -> perf::Params {
        perf::Params {
            work: self.work,
            socket_mtbf: self.node_mtbf,
            sockets: self.nodes as f64,
            ckpt_time: self.ckpt_time,
            restart_time: self.restart_time,
            mu,
            phi: self.recovery_speedup,
            parallelism: 1.0,
            ..perf::Params::default()
        }
    }
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct ProtocolOutcome {
    pub protocol: LoggingProtocol,
    pub slowdown: f64,
    pub interval_s: Option<f64>,
    pub efficiency: f64,
}

/// Efficiency of every protocol at its own optimal interval.
pub fn compare_protocols(inputs: &Inputs) -> Result<Vec<ProtocolOutcome>> {
    inputs.validate()?;
    LoggingProtocol::ALL
        .iter()
        .map(|&protocol| {
            let (mu, model) = match protocol {
                LoggingProtocol::None => (1.0, Protocol::CheckpointRestart),
                LoggingProtocol::PessimisticRb => {
                    (1.0 + inputs.overheads[0] * inputs.comm_share(), Protocol::MessageLogging)
                }
                LoggingProtocol::PessimisticSb => {
                    (1.0 + inputs.overheads[1] * inputs.comm_share(), Protocol::MessageLogging)
                }
                LoggingProtocol::Causal => {
                    (1.0 + inputs.overheads[2] * inputs.comm_share(), Protocol::MessageLogging)
                }
            };
            let outcome = perf::evaluate(&inputs.model_params(mu), model)?;
            Ok(ProtocolOutcome {
                protocol,
                slowdown: mu,
                interval_s: outcome.tau_time,
                efficiency: outcome.time.map_or(0.0, |t| inputs.work / t),
            })
        })
        .collect()
}

/// Seed 003's placement rule from the slowest rank's compute/communication ratio.
pub fn placement(protocol: LoggingProtocol, compute_comm_ratio: f64, procs_per_node: usize) -> Placement {
    match protocol {
        LoggingProtocol::None => Placement::NotApplicable,
        _ if compute_comm_ratio < 1.0 => Placement::SharedUnpinned,
        _ if compute_comm_ratio < 2.0 || procs_per_node < 2 => Placement::SharedPinned,
        _ => Placement::Dedicated,
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ClusterPlan {
    /// Containment cluster, in nodes (coordinated checkpoint inside, logging between).
    pub containment_nodes: u64,
    /// Encoding cluster, in processes on distinct nodes.
    pub encoding_procs: u64,
    pub restart_percent: f64,
    pub logged_percent: Option<f64>,
    pub note: String,
}

/// Seed 004 sizing: smallest power-of-two node group >= 4 that logs <= 20 % of the traffic.
pub fn cluster_plan(
    inputs: &Inputs,
    protocol: LoggingProtocol,
    matrix: Option<&CommMatrix>,
) -> Result<ClusterPlan> {
    let nodes = inputs.nodes;
    let encoding = nodes.min(4);
    if protocol == LoggingProtocol::None {
        return Ok(ClusterPlan {
            containment_nodes: nodes,
            encoding_procs: encoding,
            restart_percent: 100.0,
            logged_percent: None,
            note: "no logging: one coordinated checkpoint, every failure restarts all".into(),
        });
    }
    let minimum = nodes.min(4);
    let Some(matrix) = matrix else {
        return Ok(ClusterPlan {
            containment_nodes: minimum,
            encoding_procs: encoding,
            restart_percent: 100.0 * minimum as f64 / nodes as f64,
            logged_percent: None,
            note: "no communication matrix: the seed-004 minimum of 4 nodes; pass --matrix to size by logged traffic".into(),
        });
    };
    let topo = Topology::for_ranks(matrix.ranks(), inputs.procs_per_node)?;
    if topo.nodes as u64 != nodes {
        bail!(
            "the matrix has {} ranks = {} nodes of {}, but --nodes is {nodes}",
            matrix.ranks(),
            topo.nodes,
            inputs.procs_per_node
        );
    }
    let mut best: Option<ClusterPlan> = None;
    let mut size = minimum;
    loop {
        let l1 = usize::try_from(size).context("cluster size")?;
        let l2 = l1.min(4);
        let m = cluster_metrics(
            Strategy::Hierarchical { l1_nodes: l1, l2_nodes: l2 },
            topo,
            Some(matrix),
            6.375,
        )?;
        let logged = m.logged_percent.unwrap_or(0.0);
        let plan = ClusterPlan {
            containment_nodes: size,
            encoding_procs: encoding,
            restart_percent: m.restart_percent_node_failure,
            logged_percent: Some(logged),
            note: String::new(),
        };
        let fits = logged <= 20.0 && plan.restart_percent <= 20.0;
        if fits {
            return Ok(ClusterPlan {
                note: "smallest group logging <= 20 % and restarting <= 20 %".into(),
                ..plan
            });
        }
        let better = match &best {
            None => true,
            Some(b) => {
                plan.restart_percent <= 20.0
                    && (b.restart_percent > 20.0 || logged < b.logged_percent.unwrap_or(f64::INFINITY))
            }
        };
        if better {
            best = Some(plan);
        }
        if size >= nodes {
            break;
        }
        size = (size * 2).min(nodes);
    }
    let mut fallback = best.context("no cluster size evaluated")?;
    fallback.note =
        "no size meets both 20 % limits; least logging with restart <= 20 % (or the smallest)".into();
    Ok(fallback)
}

#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub system_mtbf_s: f64,
    pub daly_interval_s: f64,
    pub interval_s: Option<f64>,
    pub protocol: LoggingProtocol,
    pub placement: Placement,
    pub clusters: ClusterPlan,
    pub efficiency: f64,
    pub alternatives: Vec<ProtocolOutcome>,
}

pub fn make_plan(inputs: &Inputs, matrix: Option<&CommMatrix>) -> Result<Plan> {
    let alternatives = compare_protocols(inputs)?;
    let best = alternatives
        .iter()
        .copied()
        .max_by(|a, b| a.efficiency.total_cmp(&b.efficiency))
        .context("no protocol evaluated")?;
    if best.efficiency <= 0.0 {
        bail!(
            "no protocol makes progress: the system MTBF ({}) is too short for a {} checkpoint",
            human_duration(inputs.system_mtbf()),
            human_duration(inputs.ckpt_time)
        );
    }
    Ok(Plan {
        system_mtbf_s: inputs.system_mtbf(),
        daly_interval_s: daly(inputs.ckpt_time, inputs.system_mtbf())?,
        interval_s: best.interval_s,
        protocol: best.protocol,
        placement: placement(best.protocol, inputs.compute_comm_ratio, inputs.procs_per_node),
        clusters: cluster_plan(inputs, best.protocol, matrix)?,
        efficiency: best.efficiency,
        alternatives,
    })
}

pub fn run(args: PlanArgs) -> Result<()> {
    let inputs = Inputs {
        ckpt_time: args.ckpt_time,
        node_mtbf: args.node_mtbf,
        nodes: args.nodes,
        compute_comm_ratio: args.compute_comm_ratio,
        procs_per_node: args.procs_per_node,
        restart_time: args.restart_time.unwrap_or(args.ckpt_time),
        work: args.work,
        recovery_speedup: args.recovery_speedup,
        overheads: [args.overhead_pessimistic_rb, args.overhead_pessimistic_sb, args.overhead_causal],
    };
    crate::usage::as_usage(inputs.validate())?;
    let matrix = match &args.matrix {
        Some(path) => Some(super::cluster::read_matrix(path)?),
        None => None,
    };
    let plan = make_plan(&inputs, matrix.as_ref())?;
    if args.json {
        print_out(&format!(
            "{}\n",
            serde_json::to_string_pretty(&json!({"inputs": {
            "ckpt_time_s": inputs.ckpt_time, "node_mtbf_s": inputs.node_mtbf, "nodes": inputs.nodes,
            "compute_comm_ratio": inputs.compute_comm_ratio, "procs_per_node": inputs.procs_per_node,
            "restart_time_s": inputs.restart_time, "work_s": inputs.work}, "plan": plan}))?
        ))?;
        return Ok(());
    }
    let mut summary = Table::new(["recommendation", "value"]);
    summary.row(["system MTBF".to_string(), human_duration(plan.system_mtbf_s)]);
    summary.row(["checkpoint interval".to_string(), plan.interval_s.map_or("-".into(), human_duration)]);
    summary.row(["  (Daly, for reference)".to_string(), human_duration(plan.daly_interval_s)]);
    summary.row(["logging protocol".to_string(), plan.protocol.name().into()]);
    summary.row(["logger placement".to_string(), plan.placement.name().into()]);
    summary.row(["containment cluster".to_string(), format!("{} nodes", plan.clusters.containment_nodes)]);
    summary.row([
        "encoding cluster".to_string(),
        format!("{} processes on distinct nodes", plan.clusters.encoding_procs),
    ]);
    summary.row([
        "restart after a node failure".to_string(),
        format!("{} %", sig(plan.clusters.restart_percent, 3)),
    ]);
    if let Some(l) = plan.clusters.logged_percent {
        summary.row(["traffic logged".to_string(), format!("{} %", sig(l, 3))]);
    }
    summary.row(["expected efficiency".to_string(), sig(plan.efficiency, 3)]);
    let mut alternatives = Table::new(["protocol", "slowdown mu", "interval", "efficiency"]);
    for a in &plan.alternatives {
        alternatives.row([
            a.protocol.name().to_string(),
            sig(a.slowdown, 4),
            a.interval_s.map_or("no progress".into(), human_duration),
            sig(a.efficiency, 3),
        ]);
    }
    print_out(&format!("{}\n{}\nclusters: {}\n", summary.render(), alternatives.render(), plan.clusters.note))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{HOUR, YEAR};

    fn inputs(nodes: u64, ratio: f64) -> Inputs {
        Inputs {
            ckpt_time: 180.0,
            node_mtbf: 10.0 * YEAR,
            nodes,
            compute_comm_ratio: ratio,
            procs_per_node: 16,
            restart_time: 30.0,
            work: 24.0 * HOUR,
            recovery_speedup: 1.2,
            overheads: [0.5, 0.25, 0.1],
        }
    }

    #[test]
    fn small_reliable_systems_do_not_log() {
        let plan = make_plan(&inputs(64, 4.0), None).unwrap();
        assert_eq!(plan.protocol, LoggingProtocol::None);
        assert_eq!(plan.placement, Placement::NotApplicable);
        assert!(plan.efficiency > 0.95);
    }

    #[test]
    fn large_systems_log_with_the_cheapest_protocol() {
        // Seed 000 Fig. 4.3: at 1M sockets logging (phi = 1.2) beats checkpoint/restart.
        let plan = make_plan(&inputs(1 << 20, 4.0), None).unwrap();
        assert_eq!(plan.protocol, LoggingProtocol::Causal);
        let none = plan.alternatives.iter().find(|a| a.protocol == LoggingProtocol::None).unwrap();
        assert!(plan.efficiency > none.efficiency);
        assert_eq!(plan.clusters.containment_nodes, 4);
    }

    #[test]
    fn interval_matches_the_chapter4_model() {
        // With mu = 1 the "none" interval is seed 000's tau^T for C/R, close to Daly's.
        let i = inputs(65_536, 4.0);
        let plan = make_plan(&i, None).unwrap();
        let none = plan.alternatives[0];
        let daly_tau = daly(180.0, i.system_mtbf()).unwrap();
        assert!((none.interval_s.unwrap() / daly_tau - 1.0).abs() < 0.1);
    }

    #[test]
    fn seed003_placement_rule() {
        assert_eq!(placement(LoggingProtocol::Causal, 0.5, 16), Placement::SharedUnpinned);
        assert_eq!(placement(LoggingProtocol::PessimisticRb, 1.5, 16), Placement::SharedPinned);
        assert_eq!(placement(LoggingProtocol::PessimisticSb, 5.0, 16), Placement::Dedicated);
        assert_eq!(placement(LoggingProtocol::PessimisticSb, 5.0, 1), Placement::SharedPinned);
        assert_eq!(placement(LoggingProtocol::None, 5.0, 16), Placement::NotApplicable);
    }

    #[test]
    fn matrix_sizes_the_containment_cluster() {
        // 1-D neighbour exchange over 64 nodes of 16: 4-node clusters log 16 boundary
        // messages of 2016, under 20 %, and restart 4/64 = 6.25 %.
        let matrix = CommMatrix::stencil_2d(1, 1024, 1).unwrap();
        let plan = cluster_plan(&inputs(64, 4.0), LoggingProtocol::Causal, Some(&matrix)).unwrap();
        assert_eq!(plan.containment_nodes, 4);
        assert!((plan.restart_percent - 6.25).abs() < 1e-9);
        assert!(plan.logged_percent.unwrap() < 20.0);
        // A matrix of the wrong size is an error, not a panic.
        assert!(cluster_plan(&inputs(8, 4.0), LoggingProtocol::Causal, Some(&matrix)).is_err());
    }

    #[test]
    fn bad_input_is_an_error() {
        assert!(make_plan(&Inputs { nodes: 0, ..inputs(64, 1.0) }, None).is_err());
        assert!(make_plan(&Inputs { node_mtbf: -1.0, ..inputs(64, 1.0) }, None).is_err());
        assert!(make_plan(&Inputs { compute_comm_ratio: f64::NAN, ..inputs(64, 1.0) }, None).is_err());
        // An MTBF far below the checkpoint time leaves no feasible plan.
        assert!(make_plan(&Inputs { node_mtbf: 60.0, nodes: 1000, ..inputs(64, 1.0) }, None).is_err());
    }
}
