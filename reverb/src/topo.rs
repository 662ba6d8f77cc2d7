//! `reverb topo`: the cores, packages and NUMA domains hwloc found.

use anyhow::{Context, Result};
use reverb_transport::topo::Topology;

#[derive(clap::Args, Debug)]
pub struct TopoArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `0-3,8,10-11`.
fn cpu_list(cpus: &[usize]) -> String {
    let mut out = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let mut j = i;
        while j + 1 < cpus.len() && cpus[j + 1] == cpus[j] + 1 {
            j += 1;
        }
        out.push(if i == j { cpus[i].to_string() } else { format!("{}-{}", cpus[i], cpus[j]) });
        i = j + 1;
    }
    if out.is_empty() {
        "-".into()
    } else {
        out.join(",")
    }
}

fn opt(v: Option<u32>) -> String {
    v.map(|x| x.to_string()).unwrap_or_else(|| "-".into())
}

/// `reverb topo`: what hwloc found.
pub fn topo(args: TopoArgs) -> Result<()> {
    let t = Topology::discover().context("discovering the topology with hwloc")?;
    if args.json {
        let v = serde_json::json!({
            "pus": t.pu_count(),
            "packages": t.packages.iter().map(|p| serde_json::json!({
                "index": p.logical_index, "os_index": p.os_index, "cpus": p.cpus,
            })).collect::<Vec<_>>(),
            "numa_nodes": t.numa_nodes.iter().map(|n| serde_json::json!({
                "index": n.logical_index, "os_index": n.os_index, "cpus": n.cpus,
            })).collect::<Vec<_>>(),
            "cores": t.cores.iter().map(|c| serde_json::json!({
                "index": c.logical_index, "os_index": c.os_index, "package": c.package,
                "numa": c.numa, "pus": c.pus,
            })).collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "packages: {}  NUMA nodes: {}  cores: {}  PUs: {}",
        t.packages.len(),
        t.numa_nodes.len(),
        t.cores.len(),
        t.pu_count()
    );
    println!();
    println!("{:<8} {:<8} cpus", "package", "os");
    for p in &t.packages {
        println!("{:<8} {:<8} {}", p.logical_index, p.os_index, cpu_list(&p.cpus));
    }
    println!();
    println!("{:<8} {:<8} cpus", "NUMA", "os");
    for n in &t.numa_nodes {
        println!("{:<8} {:<8} {}", n.logical_index, n.os_index, cpu_list(&n.cpus));
    }
    println!();
    println!("{:<8} {:<8} {:<8} {:<8} PUs", "core", "os", "package", "NUMA");
    for c in &t.cores {
        println!(
            "{:<8} {:<8} {:<8} {:<8} {}",
            c.logical_index,
            c.os_index,
            opt(c.package),
            opt(c.numa),
            cpu_list(&c.pus)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_compress_ranges() {
        assert_eq!(cpu_list(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(cpu_list(&[5]), "5");
        assert_eq!(cpu_list(&[]), "-");
    }
}
