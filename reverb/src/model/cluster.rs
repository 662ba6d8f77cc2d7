//! `reverb model cluster`: the seed 004 metrics (code in `reverb_ckpt::cluster`).

use super::table::{sig, Table};
use super::OutputArgs;
use anyhow::{bail, Context, Result};
use reverb_ckpt::cluster::{evaluate, measure_encoding_seconds_per_gb, CommMatrix, Strategy, Topology};
use serde_json::json;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct ClusterArgs {
    /// Communication matrix: N lines of N whitespace-separated byte counts (row = sender); a
    /// regular file of at most 64 MiB, N at most 1024.
    #[arg(long, conflicts_with = "stencil")]
    pub matrix: Option<PathBuf>,
    /// Instead of a file, a ROWSxCOLS 2-D halo exchange (e.g. 32x32), at most 1024 ranks
    /// (ROWS x COLS; the matrix is dense).
    #[arg(long)]
    pub stencil: Option<String>,
    /// Ranks when no matrix is given (matrix metrics are then left out), 1..=1024; at most
    /// 128 nodes (ranks / procs-per-node).
    #[arg(long, value_parser = crate::usage::int::<usize>(1, MAX_RANKS))]
    pub ranks: Option<usize>,
    /// Processes per node (ranks fill nodes consecutively), 1..=4096.
    #[arg(long, default_value_t = 16, value_parser = crate::usage::int::<usize>(1, 4096))]
    pub procs_per_node: usize,
    /// Clusterings: consecutive:N, distributed:N, hierarchical:L1NODES:L2NODES,
    /// traffic:MINNODES:L2NODES (L1 clusters from the matrix). Default: the four of seed 004
    /// Table II (naive, size-guided, distributed, hierarchical), plus traffic:4:4 with a matrix.
    #[arg(long = "clustering", value_delimiter = ',')]
    pub clusterings: Vec<Strategy>,
    /// Reed-Solomon encoding cost per cluster member per GB (s), 0..=1000000; 6.375 fits
    /// seed 004 Table II.
    #[arg(long, default_value_t = 6.375, value_parser = crate::usage::float(0.0, 1e6))]
    pub encode_secs_per_gb: f64,
    /// Measure the encoding time per GB on this machine (reverb-ckpt's codec, one core, 1 MiB
    /// shards from a 256 MiB pool, m = k/2) for each clustering's encoding cluster size,
    /// instead of the model.
    #[arg(long)]
    pub measure_encode: bool,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// The most ranks of `--ranks` and of a `--matrix` file.
pub const MAX_RANKS: u64 = 1024;
/// The most nodes (ranks / procs-per-node): the catastrophic-failure probability enumerates
/// node pairs against every cluster.
pub const MAX_NODES: usize = 128;
/// The most ranks of `--stencil` (its dense matrix holds ranks^2 counts).
pub const MAX_STENCIL_RANKS: u64 = 1024;

fn parse_stencil(text: &str) -> Result<(usize, usize)> {
    let (r, c) = text.split_once(['x', 'X']).context("--stencil must be ROWSxCOLS, e.g. 32x32")?;
    let side = crate::usage::int::<usize>(1, MAX_STENCIL_RANKS);
    let rows = side(r).map_err(|e| anyhow::anyhow!("--stencil rows: {e}"))?;
    let cols = side(c).map_err(|e| anyhow::anyhow!("--stencil columns: {e}"))?;
    if rows * cols > MAX_STENCIL_RANKS as usize {
        bail!("--stencil {rows}x{cols}: {} ranks, not in 1..={MAX_STENCIL_RANKS}", rows * cols);
    }
    Ok((rows, cols))
}

/// `--matrix FILE`: a regular file of at most 64 MiB, at most [`MAX_RANKS`] ranks; any
/// error is a usage error.
pub fn read_matrix(path: &std::path::Path) -> Result<CommMatrix> {
    crate::usage::as_usage((|| {
        let text = crate::usage::read_input("--matrix", path)?;
        let matrix = CommMatrix::parse(&text).with_context(|| format!("--matrix {}", path.display()))?;
        crate::usage::in_range("--matrix ranks", matrix.ranks() as u64, 1, MAX_RANKS)?;
        Ok(matrix)
    })())
}

/// The matrix of `--matrix FILE` (a bounded regular file) or `--stencil`, if any.
fn input_matrix(args: &ClusterArgs) -> Result<Option<CommMatrix>> {
    if let Some(path) = &args.matrix {
        return read_matrix(path).map(Some);
    }
    match &args.stencil {
        Some(spec) => {
            let (rows, cols) = parse_stencil(spec)?;
            Ok(Some(CommMatrix::stencil_2d(rows, cols, 1)?))
        }
        None => Ok(None),
    }
}

pub fn run(args: ClusterArgs) -> Result<()> {
    let matrix = crate::usage::as_usage(input_matrix(&args))?;
    let ranks = crate::usage::as_usage(match (&matrix, args.ranks) {
        (Some(m), None) => Ok(m.ranks()),
        (Some(m), Some(r)) if r == m.ranks() => Ok(r),
        (Some(m), Some(r)) => {
            Err(anyhow::anyhow!("--ranks {r} disagrees with the matrix ({} ranks)", m.ranks()))
        }
        (None, Some(r)) => Ok(r),
        (None, None) => Err(anyhow::anyhow!("give --matrix FILE, --stencil ROWSxCOLS or --ranks N")),
    })?;
    let topo = crate::usage::as_usage(Topology::for_ranks(ranks, args.procs_per_node).map_err(Into::into))?;
    if topo.nodes > MAX_NODES {
        return Err(crate::usage::usage(format!(
            "{ranks} ranks at --procs-per-node {} make {} nodes, not in 1..={MAX_NODES}",
            topo.procs_per_node, topo.nodes
        )));
    }
    let strategies = if args.clusterings.is_empty() {
        let mut defaults = vec![
            Strategy::Consecutive { size: 32 },
            Strategy::Consecutive { size: 8 },
            Strategy::Distributed { size: 16 },
            Strategy::Hierarchical { l1_nodes: 4, l2_nodes: 4 },
        ];
        if matrix.is_some() {
            defaults.push(Strategy::Traffic { min_nodes: 4, l2_nodes: 4 });
        }
        // Seed 004's sizes assume 1024 ranks; keep only what fits this job.
        defaults.retain(|s| reverb_ckpt::cluster::Clustering::build_for(*s, topo, matrix.as_ref()).is_ok());
        defaults
    } else {
        args.clusterings.clone()
    };
    let mut table = Table::new([
        "clustering",
        "logged %",
        "restart % (node)",
        "restart % (process)",
        if args.measure_encode { "encode s/GB (measured)" } else { "encode s/GB (model)" },
        "P(catastrophic | 2 nodes)",
    ]);
    let mut rows = Vec::new();
    for strategy in strategies {
        let mut m = evaluate(strategy, topo, matrix.as_ref(), args.encode_secs_per_gb)
            .with_context(|| format!("clustering {strategy}"))?;
        if args.measure_encode {
            let members = reverb_ckpt::cluster::Clustering::build_for(strategy, topo, matrix.as_ref())?
                .encoding_cluster_size();
            m.encoding_seconds_per_gb = measure_encoding_seconds_per_gb(
                members,
                1 << 20,
                256 << 20,
                std::time::Duration::from_millis(300),
            )
            .with_context(|| format!("measuring the encoding of {members} members"))?;
        }
        table.row([
            strategy.to_string(),
            m.logged_percent.map_or("-".into(), |v| sig(v, 3)),
            sig(m.restart_percent_node_failure, 3),
            sig(m.restart_percent_process_failure, 3),
            sig(m.encoding_seconds_per_gb, 3),
            sig(m.catastrophic_probability_two_nodes, 3),
        ]);
        rows.push(json!({
            "clustering": strategy.to_string(),
            "logged_percent": m.logged_percent,
            "restart_percent_node_failure": m.restart_percent_node_failure,
            "restart_percent_process_failure": m.restart_percent_process_failure,
            "encoding_seconds_per_gb": m.encoding_seconds_per_gb,
            "catastrophic_probability_two_nodes": m.catastrophic_probability_two_nodes,
        }));
    }
    let text =
        format!("{} ranks on {} nodes of {}\n{}", ranks, topo.nodes, topo.procs_per_node, table.render());
    let json =
        json!({"ranks": ranks, "nodes": topo.nodes, "procs_per_node": topo.procs_per_node, "rows": rows});
    args.output.emit(&text, json, None)
}
