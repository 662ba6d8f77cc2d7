//! The driver's side: per job size and phase, the ranks' snapshots reduced to median / max per
//! process and the sum per node; printed as a table, JSON lines or CSV, and plotted.

use std::collections::BTreeMap;

use anyhow::{bail, Result};
use serde_json::{json, Value};

use super::rank::RankReport;
use super::stat::Snapshot;
use crate::model::svg::{LinePlot, Series};

/// Smallest, median (the lower one for an even count) and largest of one counter, in KiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spread {
    pub min: u64,
    pub median: u64,
    pub max: u64,
}

impl Spread {
    fn of(mut values: Vec<u64>) -> Spread {
        values.sort_unstable();
        match (values.first(), values.last()) {
            (Some(&min), Some(&max)) => Spread { min, median: values[(values.len() - 1) / 2], max },
            _ => Spread::default(),
        }
    }
}

/// One job size at one phase.
#[derive(Debug, Clone, Default)]
pub struct Row {
    pub ranks: u32,
    pub nodes: u32,
    pub phase: String,
    pub size: Option<usize>,
    /// Ranks whose report was read (all of them, or the job failed).
    pub reported: u32,
    pub rss: Spread,
    pub pss: Spread,
    pub pte: Spread,
    /// The largest sum of PSS over one node's ranks (all ranks: one node for shm).
    pub node_pss_kib: u64,
    /// The largest sum of page tables over one node's ranks (kernel memory PSS leaves out).
    pub node_pte_kib: u64,
    pub own_shm_size: Spread,
    pub own_shm_rss: Spread,
    pub peer_maps: Spread,
    pub peer_shm_size: Spread,
    pub peer_shm_rss: Spread,
    pub wall_s: f64,
}

impl Row {
    /// `start`, `opened`, `after 8 B`, ...
    pub fn label(&self) -> String {
        match self.size {
            Some(s) => format!("{} {}", self.phase, human_bytes(s)),
            None => self.phase.clone(),
        }
    }

    /// The row's fields in a fixed order, for JSON and CSV (KiB throughout).
    fn fields(&self, provider: &str) -> Vec<(String, Value)> {
        let mut f: Vec<(String, Value)> = vec![
            ("provider", json!(provider)),
            ("ranks", json!(self.ranks)),
            ("peers", json!(self.ranks.saturating_sub(1))),
            ("nodes", json!(self.nodes)),
            ("phase", json!(self.phase)),
            ("bytes", json!(self.size)),
            ("reported", json!(self.reported)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let spreads = [
            ("rss_kib", self.rss),
            ("pss_kib", self.pss),
            ("pte_kib", self.pte),
            ("own_shm_size_kib", self.own_shm_size),
            ("own_shm_rss_kib", self.own_shm_rss),
            ("peer_maps", self.peer_maps),
            ("peer_shm_size_kib", self.peer_shm_size),
            ("peer_shm_rss_kib", self.peer_shm_rss),
        ];
        for (name, s) in spreads {
            f.push((format!("{name}_min"), json!(s.min)));
            f.push((format!("{name}_median"), json!(s.median)));
            f.push((format!("{name}_max"), json!(s.max)));
        }
        f.push(("node_pss_kib".into(), json!(self.node_pss_kib)));
        f.push(("node_pte_kib".into(), json!(self.node_pte_kib)));
        f.push(("wall_s".into(), json!((self.wall_s * 1000.0).round() / 1000.0)));
        f
    }
}

/// Reduces one job's reports to one row per phase. Every rank must report the same phases.
pub fn aggregate(ranks: u32, reports: &[RankReport], wall_s: f64) -> Result<Vec<Row>> {
    let Some(first) = reports.first() else { bail!("no rank reported") };
    for r in reports {
        let same = r.phases.len() == first.phases.len()
            && r.phases.iter().zip(&first.phases).all(|(a, b)| a.name == b.name && a.size == b.size);
        if !same {
            bail!("rank {} reported other phases than rank {}", r.rank, first.rank);
        }
    }
    let nodes = reports.iter().map(|r| r.node).max().map_or(0, |n| n + 1);
    let rows = first
        .phases
        .iter()
        .enumerate()
        .map(|(i, phase)| {
            let mems: Vec<&Snapshot> = reports.iter().map(|r| &r.phases[i].mem).collect();
            let of = |f: fn(&Snapshot) -> u64| Spread::of(mems.iter().map(|m| f(m)).collect());
            let mut per_node: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
            for r in reports {
                let sums = per_node.entry(r.node).or_default();
                sums.0 += r.phases[i].mem.pss_kib;
                sums.1 += r.phases[i].mem.pte_kib;
            }
            Row {
                ranks,
                nodes,
                phase: phase.name.clone(),
                size: phase.size,
                reported: reports.len() as u32,
                rss: of(|m| m.rss_kib),
                pss: of(|m| m.pss_kib),
                pte: of(|m| m.pte_kib),
                node_pss_kib: per_node.values().map(|s| s.0).max().unwrap_or(0),
                node_pte_kib: per_node.values().map(|s| s.1).max().unwrap_or(0),
                own_shm_size: of(|m| m.own_shm.size_kib),
                own_shm_rss: of(|m| m.own_shm.rss_kib),
                peer_maps: of(|m| m.peer_shm.count),
                peer_shm_size: of(|m| m.peer_shm.size_kib),
                peer_shm_rss: of(|m| m.peer_shm.rss_kib),
                wall_s,
            }
        })
        .collect();
    Ok(rows)
}

/// Table, JSON lines or CSV on stdout, a job size at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
    Csv,
}

pub const TABLE_HEADER: &str = concat!(
    " peers  ranks  phase         RSS med   RSS max   PSS med   PSS max  node PSS   PTE med  node PTE  own shm  peer maps  peer shm  peer shm\n",
    "                               [MiB]     [MiB]     [MiB]     [MiB]     [MiB]     [MiB]     [MiB]  RSS[MiB]  (median)  virt[GiB]  RSS[MiB]"
);

pub fn print_header(format: Format, provider: &str) {
    match format {
        Format::Table => println!("{TABLE_HEADER}"),
        Format::Csv => {
            let names: Vec<String> = Row::default().fields(provider).into_iter().map(|(n, _)| n).collect();
            println!("{}", names.join(","));
        }
        Format::Json => {}
    }
}

pub fn print_rows(format: Format, provider: &str, rows: &[Row]) {
    for row in rows {
        match format {
            Format::Table => println!("{}", table_line(row)),
            Format::Json => {
                let obj: serde_json::Map<String, Value> = row.fields(provider).into_iter().collect();
                println!("{}", Value::Object(obj));
            }
            Format::Csv => {
                let cells: Vec<String> = row
                    .fields(provider)
                    .into_iter()
                    .map(|(_, v)| match v {
                        Value::String(s) => s,
                        Value::Null => String::new(),
                        other => other.to_string(),
                    })
                    .collect();
                println!("{}", cells.join(","));
            }
        }
    }
}

/// A job size not run, and why.
pub fn print_skipped(format: Format, provider: &str, ranks: u32, why: &str) {
    match format {
        Format::Table => println!(" {:>5}  {:>5}  {why}", ranks.saturating_sub(1), ranks),
        Format::Json => println!("{}", json!({"provider": provider, "ranks": ranks, "skipped": why})),
        Format::Csv => eprintln!("bench mem: {ranks} ranks {why}"),
    }
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn table_line(r: &Row) -> String {
    format!(
        " {:>5}  {:>5}  {:<12} {:>8.2}  {:>8.2}  {:>8.2}  {:>8.2}  {:>8.1}  {:>8.2}  {:>8.1}  {:>7.2}  {:>9}  {:>9.1}  {:>8.2}",
        r.ranks.saturating_sub(1),
        r.ranks,
        r.label(),
        mib(r.rss.median),
        mib(r.rss.max),
        mib(r.pss.median),
        mib(r.pss.max),
        mib(r.node_pss_kib),
        mib(r.pte.median),
        mib(r.node_pte_kib),
        mib(r.own_shm_rss.median),
        r.peer_maps.median,
        r.peer_shm_size.median as f64 / (1u64 << 20) as f64,
        mib(r.peer_shm_rss.median),
    )
}

/// `8 B`, `8 KiB`, `1 MiB`.
pub fn human_bytes(b: usize) -> String {
    match b {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// Per-process PSS (median, max), RSS (median) and the node's sum of PSS against peers, at
/// the last phase of each job (after the last pass).
pub fn plot(provider: &str, rows: &[Row]) -> LinePlot {
    let mut last: BTreeMap<u32, &Row> = BTreeMap::new();
    for r in rows {
        last.insert(r.ranks, r);
    }
    let line = |f: &dyn Fn(&Row) -> u64| -> Vec<(f64, f64)> {
        last.values().map(|r| (f64::from(r.ranks.saturating_sub(1)), mib(f(r)))).collect()
    };
    let phase = last.values().next().map_or(String::new(), |r| r.label());
    let mut p = LinePlot::new(
        &format!("Receive memory against job size ({provider}, {phase})"),
        "peers (ranks - 1)",
        "MiB",
    )
    .log2_x()
    .log10_y();
    p.add(Series::new("node: sum of PSS", line(&|r| r.node_pss_kib)));
    p.add(Series::new("node: page tables", line(&|r| r.node_pte_kib)));
    p.add(Series::new("process PSS, max", line(&|r| r.pss.max)));
    p.add(Series::new("process PSS, median", line(&|r| r.pss.median)));
    p.add(Series::new("process RSS, median", line(&|r| r.rss.median)));
    p.add(Series::new("page tables, median", line(&|r| r.pte.median)));
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_takes_the_lower_median() {
        assert_eq!(Spread::of(vec![5, 1, 3, 2]), Spread { min: 1, median: 2, max: 5 });
        assert_eq!(Spread::of(vec![7]), Spread { min: 7, median: 7, max: 7 });
        assert_eq!(Spread::of(vec![]), Spread::default());
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(human_bytes(8), "8 B");
        assert_eq!(human_bytes(8192), "8 KiB");
        assert_eq!(human_bytes(1 << 20), "1 MiB");
        assert_eq!(human_bytes(1000), "1000 B");
    }
}
