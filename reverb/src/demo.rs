//! `reverb demo`: the stencil on 8 ranks in 4 nodes, failure-free with logging off and on
//! (causal, buddy checkpoints, Reed-Solomon), then with one node SIGKILLed mid-run and
//! respawned. Each run is a real `reverb run` job of `reverb app stencil`; the ranks' JSON
//! reports (`REVERB_RUNTIME_REPORT`) give the numbers. Progress goes to stderr, the report
//! to stdout; a checksum that differs from the failure-free run fails the demo.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::Value;

#[derive(clap::Args, Debug)]
pub struct DemoArgs {
    /// Transport provider (shm, or verbs in the rxe VM).
    #[arg(long, default_value = "shm")]
    pub provider: String,
    /// Ranks (the demo kills the node of rank 3), 4..=1024.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(4..=1024))]
    pub ranks: u32,
    /// Ranks per node, 1..=--ranks.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub ranks_per_node: u32,
    /// Stencil iterations, 1..=10000000.
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub iters: u64,
    /// Stencil grid edge, 1..=4096.
    #[arg(long, default_value_t = 1024, value_parser = crate::usage::int::<usize>(1, 4096))]
    pub size: usize,
    /// Checkpoint every this many iterations, 1..=10000000.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub ckpt_every: u64,
    /// Where in the run the node dies, as a fraction of the iterations, 0..=1.
    #[arg(long, default_value_t = 0.6, value_parser = crate::usage::float(0.0, 1.0))]
    pub kill_at: f64,
    /// Failure-free runs of each configuration, 1..=100; the fastest counts (the machine may
    /// be shared).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub repeat: u32,
    /// Bound on each job, in seconds, 1..=86400.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub timeout: u64,
    /// Keep the work directory (job logs and rank reports).
    #[arg(long)]
    pub keep: bool,
    /// Run across hosts, `a:2,b:2,...` (as `reverb run --hosts`; started over REVERB_RSH, the
    /// work directory on a file system every host sees): the node killed is on the second host
    /// and its launcher respawns it there.
    #[arg(long, value_name = "HOST:N,...")]
    pub hosts: Option<String>,
}

/// The rank whose node the demo kills: a middle rank of the stencil, on node 1.
const VICTIM: u32 = 3;

struct RunResult {
    checksum: String,
    reports: Vec<Value>,
    kill_ns: Option<u64>,
    /// From the last rank leaving `init` to the last rank finalizing (the compute phase).
    compute_s: f64,
    /// CPU time of every rank over its compute phase, summed (s).
    cpu_s: f64,
}

use crate::job::{num, run_job as launch, JobSpec};

fn run_job(
    args: &DemoArgs,
    dir: &Path,
    name: &str,
    env: &[(&str, String)],
    respawn: u32,
) -> Result<RunResult> {
    let spec = JobSpec {
        provider: args.provider.clone(),
        ranks: args.ranks,
        ranks_per_node: args.ranks_per_node,
        respawn,
        timeout_s: args.timeout,
        app: "stencil".into(),
        app_args: vec![
            "--iters".into(),
            args.iters.to_string(),
            "--size".into(),
            args.size.to_string(),
            "--ckpt-every".into(),
            args.ckpt_every.to_string(),
        ],
        env: env.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
        hosts: args.hosts.clone(),
        spares: Vec::new(),
        redundancy: None,
        objects: None,
    };
    let out = launch(&spec, &dir.join(name), Duration::from_secs(30))?;
    if !out.success() {
        let status = out.status.map_or("killed by the watchdog".to_string(), |s| s.to_string());
        bail!(
            "{name}: the job failed ({status}); last lines of {}:\n{}",
            out.log_path.display(),
            out.log_tail(30)
        );
    }
    let checksum = out.checksum.with_context(|| format!("{name}: no checksum written"))?;
    let start = out.reports.iter().map(|r| num(r, "init_end_ns")).fold(0.0, f64::max);
    let end = out.reports.iter().map(|r| num(r, "finalize_ns")).fold(0.0, f64::max);
    let cpu_s = out.reports.iter().map(|r| num(r, "compute_cpu_ms")).sum::<f64>() / 1e3;
    Ok(RunResult {
        checksum,
        reports: out.reports,
        kill_ns: out.kill_ns,
        compute_s: (end - start) / 1e9,
        cpu_s,
    })
}

/// Wall and CPU time of every run of one configuration, in run order.
#[derive(Default)]
struct Times {
    wall: Vec<f64>,
    cpu: Vec<f64>,
}

/// Runs each failure-free configuration `repeat` times, interleaved (in turn forwards and
/// backwards) so that a change in the machine's load hits both alike; keeps the fastest run of
/// each and every run's times.
fn best_of_interleaved(
    args: &DemoArgs,
    dir: &Path,
    configs: &[(&str, &[(&str, String)])],
) -> Result<(Vec<RunResult>, Vec<Times>)> {
    let mut best: Vec<Option<RunResult>> = configs.iter().map(|_| None).collect();
    let mut times: Vec<Times> = configs.iter().map(|_| Times::default()).collect();
    for i in 0..args.repeat.max(1) {
        let mut order: Vec<usize> = (0..configs.len()).collect();
        if i % 2 == 1 {
            order.reverse();
        }
        for c in order {
            let (name, env) = configs[c];
            let r = run_job(args, dir, &format!("{name}-{i}"), env, 0)?;
            eprintln!(
                "reverb demo:   {name} run {}: {:.3} s, cpu {:.2} s, checksum {}",
                i + 1,
                r.compute_s,
                r.cpu_s,
                r.checksum
            );
            times[c].wall.push(r.compute_s);
            times[c].cpu.push(r.cpu_s);
            let best = &mut best[c];
            if let Some(b) = best.as_ref() {
                if b.checksum != r.checksum {
                    bail!("{name}: failure-free runs disagree ({} vs {})", b.checksum, r.checksum);
                }
            }
            if best.as_ref().is_none_or(|b| r.compute_s < b.compute_s) {
                *best = Some(r);
            }
        }
    }
    let best = best.into_iter().map(|b| b.context("no run")).collect::<Result<Vec<_>>>()?;
    Ok((best, times))
}

/// The per-pair overheads (%) of interleaved runs (run i of `logged` against run i of `base`,
/// which saw about the same machine load): their median and a distribution-free 95 % confidence
/// interval of it (the order statistics n/2 ± 0.98·√n; with fewer than 6 pairs, just the range).
fn pair_overhead(base: &[f64], logged: &[f64]) -> (f64, f64, f64) {
    let mut ratios: Vec<f64> =
        base.iter().zip(logged).filter(|(b, _)| **b > 0.0).map(|(b, l)| (l / b - 1.0) * 100.0).collect();
    ratios.sort_by(f64::total_cmp);
    let n = ratios.len();
    if n == 0 {
        return (0.0, 0.0, 0.0);
    }
    let median = if n % 2 == 1 { ratios[n / 2] } else { (ratios[n / 2 - 1] + ratios[n / 2]) / 2.0 };
    let half_width = 0.98 * (n as f64).sqrt();
    // 1-based ranks floor(n/2 - h) and ceil(n/2 + h), clamped to the sample.
    let lo = ((n as f64 / 2.0 - half_width).floor() as usize).clamp(1, n);
    let hi = ((n as f64 / 2.0 + half_width).ceil() as usize).clamp(1, n);
    (median, ratios[lo - 1], ratios[hi - 1])
}

fn mib(bytes: f64) -> String {
    format!("{:.2} MiB", bytes / (1024.0 * 1024.0))
}

/// Returns the exit code: 0 when the recovered run's checksum equals the failure-free one.
pub fn main(args: DemoArgs) -> Result<i32> {
    if args.ranks <= VICTIM || args.ranks_per_node == 0 || args.ranks / args.ranks_per_node < 4 {
        bail!(
            "the demo needs at least 4 nodes and rank {VICTIM} (got {} ranks, {} per node)",
            args.ranks,
            args.ranks_per_node
        );
    }
    if args.hosts.is_some() && args.provider == "shm" {
        bail!("--hosts: shared memory does not reach other hosts; use --provider auto (or tcp, verbs)");
    }
    if !(0.05..=0.95).contains(&args.kill_at) || args.iters < 4 {
        bail!("--kill-at {} must lie in 0.05..0.95 and --iters {} be at least 4", args.kill_at, args.iters);
    }
    let dir: PathBuf = std::env::temp_dir().join(format!("reverb-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let result = demo(&args, &dir);
    if args.keep || result.is_err() {
        eprintln!("reverb demo: job logs and rank reports kept in {}", dir.display());
    } else {
        // Best effort: a leftover temp directory is harmless.
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

fn demo(args: &DemoArgs, dir: &Path) -> Result<i32> {
    let nodes = args.ranks / args.ranks_per_node;
    eprintln!(
        "reverb demo: Jacobi 2D {}x{}, {} iterations, {} ranks on {nodes} nodes, provider {}",
        args.size, args.size, args.iters, args.ranks, args.provider
    );
    let off = [("REVERB_LOG", "none".to_string()), ("REVERB_CKPT", "off".to_string())];
    let on = [
        ("REVERB_LOG", "causal".to_string()),
        ("REVERB_LOG_UNIT", "node".to_string()),
        ("REVERB_CKPT", "rs".to_string()),
    ];
    eprintln!(
        "reverb demo: 1-2/3 failure-free, logging and checkpoints off (off) and causal logging + buddy \
         checkpoints + Reed-Solomon 4+2 (causal), interleaved"
    );
    let (runs, times) = best_of_interleaved(args, dir, &[("off", &off[..]), ("causal", &on[..])])?;
    let (median_overhead, ci_lo, ci_hi) = pair_overhead(&times[0].wall, &times[1].wall);
    let (cpu_overhead, cpu_ci_lo, cpu_ci_hi) = pair_overhead(&times[0].cpu, &times[1].cpu);
    let mut runs = runs.into_iter();
    let (Some(base), Some(logged)) = (runs.next(), runs.next()) else { bail!("failure-free runs missing") };
    // The victim sends two halos per iteration.
    let kill_after = 2 * ((args.iters as f64 * args.kill_at) as u64).max(1) + 1;
    eprintln!(
        "reverb demo: 3/3 the same, node 1 (ranks 2-3) SIGKILLed at ~{:.0}% and respawned",
        args.kill_at * 100.0
    );
    let mut faulty_env = on.to_vec();
    faulty_env.push(("REVERB_FAULT", format!("{VICTIM}:{kill_after}")));
    let faulty = run_job(args, dir, "killed", &faulty_env, 1)?;
    let kill_ns = faulty.kill_ns.context("the victim did not record its death (no kill.ns)")? as f64;
    if !faulty.reports.iter().any(|r| num(r, "incarnation") > 0.0) {
        bail!("the killed node was not restarted");
    }
    let identical = faulty.checksum == base.checksum && logged.checksum == base.checksum;
    let pairs = Pairs { wall: (median_overhead, ci_lo, ci_hi), cpu: (cpu_overhead, cpu_ci_lo, cpu_ci_hi) };
    print_failure_free(args, (&base, &logged, &faulty), &pairs);
    print_recovery(&logged, &faulty, kill_ns)?;
    print_memory(&logged);
    if !identical {
        eprintln!("reverb demo: FAILED: the recovered run's checksum differs from the failure-free run");
        return Ok(1);
    }
    eprintln!("reverb demo: passed");
    Ok(0)
}

/// Overheads of causal + checkpoints over logging off, medians of interleaved pairs with
/// their 95% CI (%): wall time and CPU time.
struct Pairs {
    wall: (f64, f64, f64),
    cpu: (f64, f64, f64),
}

/// The report's failure-free part: checksums, overheads, checkpoint times.
fn print_failure_free(
    args: &DemoArgs,
    (base, logged, faulty): (&RunResult, &RunResult, &RunResult),
    pairs: &Pairs,
) {
    let nodes = args.ranks / args.ranks_per_node;
    let (median_overhead, ci_lo, ci_hi) = pairs.wall;
    let (cpu_overhead, cpu_ci_lo, cpu_ci_hi) = pairs.cpu;
    let slowest =
        logged.reports.iter().max_by(|a, b| num(a, "checkpoint_ms").total_cmp(&num(b, "checkpoint_ms")));
    let ckpt_ms = slowest.map_or(0.0, |r| num(r, "checkpoint_ms"));
    let ckpt_steps = slowest.map_or(String::new(), |r| {
        format!(
            " (levels 1-2 {:.1}, agreement {:.1}, parity {:.1}, log GC {:.1})",
            num(r, "checkpoint_write_ms"),
            num(r, "checkpoint_agree_ms"),
            num(r, "checkpoint_parity_ms"),
            num(r, "checkpoint_gc_ms")
        )
    });
    let overhead = (logged.compute_s / base.compute_s - 1.0) * 100.0;
    let identical = faulty.checksum == base.checksum && logged.checksum == base.checksum;
    println!("reverb demo report ({} ranks, {nodes} nodes, provider {})", args.ranks, args.provider);
    println!("  final checksum, failure-free (logging off): {}", base.checksum);
    println!("  final checksum, failure-free (causal):      {}", logged.checksum);
    println!("  final checksum, node 1 killed + recovered:  {}", faulty.checksum);
    println!("  checksums identical:                        {}", if identical { "yes" } else { "NO" });
    println!(
        "  failure-free time: off {:.3} s, causal + checkpoints {:.3} s: overhead {overhead:+.1}% (best of {}), \
         {median_overhead:+.1}% (median of {} interleaved pairs, 95% CI {ci_lo:+.1}% .. {ci_hi:+.1}%)",
        base.compute_s, logged.compute_s, args.repeat, args.repeat
    );
    println!(
        "  failure-free cpu time, all ranks: overhead {cpu_overhead:+.1}% (median of pairs, 95% CI \
         {cpu_ci_lo:+.1}% .. {cpu_ci_hi:+.1}%)"
    );
    println!(
        "  checkpoints: {} per rank, {:.1} ms in total on the slowest rank{ckpt_steps}",
        args.iters.saturating_sub(1) / args.ckpt_every.max(1),
        ckpt_ms
    );
}

/// The report's recovery part: detection, recovery and replay, from the killed run's reports
/// (`kill_ns`: when the victim died) and the failure-free causal run's.
fn print_recovery(logged: &RunResult, faulty: &RunResult, kill_ns: f64) -> Result<()> {
    let restarted: Vec<&Value> = faulty.reports.iter().filter(|r| num(r, "incarnation") > 0.0).collect();
    let survivors: Vec<&Value> = faulty.reports.iter().filter(|r| num(r, "incarnation") == 0.0).collect();
    let detected = survivors
        .iter()
        .filter_map(|r| {
            r.get("detected_ns").and_then(Value::as_array).and_then(|a| a.first()).and_then(Value::as_f64)
        })
        .fold(f64::INFINITY, f64::min);
    let resumed = restarted.iter().map(|r| num(r, "init_end_ns")).fold(0.0, f64::max);
    let restart_to_progress =
        restarted.iter().map(|r| num(r, "init_end_ns") - num(r, "init_start_ns")).fold(0.0, f64::max) / 1e6;
    let victim_report = restarted.iter().find(|r| num(r, "rank") == f64::from(VICTIM)).copied();
    let forward_report = logged.reports.iter().find(|r| num(r, "rank") == f64::from(VICTIM));
    let replay = victim_report.map_or((0.0, 0.0), |r| (num(r, "replayed_sends"), num(r, "replay_ms")));
    let forward = forward_report.map_or((0.0, 0.0), |r| {
        (num(r, "messages_sent"), (num(r, "finalize_ns") - num(r, "init_end_ns")) / 1e6)
    });
    let rate = |(msgs, ms): (f64, f64)| if ms > 0.0 { msgs / ms * 1e3 } else { 0.0 };
    if detected.is_finite() {
        println!(
            "  detection time (SIGKILL to first survivor noticing): {:.1} ms",
            (detected - kill_ns) / 1e6
        );
    }
    println!(
        "  recovery time (SIGKILL to restarted ranks resuming):  {:.1} ms; restart-to-progress {restart_to_progress:.1} ms",
        (resumed - kill_ns) / 1e6
    );
    if let Some(r) = victim_report {
        println!(
            "  restored epoch {} from {}",
            num(r, "restored_epoch"),
            r.get("restored_from").and_then(Value::as_str).unwrap_or("?")
        );
    }
    println!(
        "  replay: {:.0} msgs in {:.1} ms = {:.0} msg/s vs forward {:.0} msg/s ({:.1}x)",
        replay.0,
        replay.1,
        rate(replay),
        rate(forward),
        if rate(forward) > 0.0 { rate(replay) / rate(forward) } else { 0.0 }
    );
    Ok(())
}

/// The report's memory line, from the failure-free causal run.
fn print_memory(logged: &RunResult) {
    let send_log = logged.reports.iter().map(|r| num(r, "send_log_peak_bytes")).fold(0.0, f64::max);
    let det_log = logged.reports.iter().map(|r| num(r, "det_log_peak_bytes")).fold(0.0, f64::max);
    let ckpt_mem: f64 = logged.reports.iter().map(|r| num(r, "checkpoint_memory_bytes")).sum();
    let image = logged.reports.iter().map(|r| num(r, "checkpoint_image_bytes")).fold(0.0, f64::max);
    println!(
        "  memory: sender log peak {} per rank, detLog peak {} per rank, checkpoint image {} per rank, checkpoint slots {} in all",
        mib(send_log),
        mib(det_log),
        mib(image),
        mib(ckpt_mem)
    );
}

#[cfg(test)]
mod tests {
    use super::pair_overhead;

    #[test]
    fn pair_overhead_gives_the_median_and_order_statistic_bounds() {
        // Pair i: base 100, logged 100 + i - 10 (i = 0..21): overheads -10..+10 %.
        let base = vec![100.0; 21];
        let logged: Vec<f64> = (0..21).map(|i| 90.0 + i as f64).collect();
        let (median, lo, hi) = pair_overhead(&base, &logged);
        assert!(median.abs() < 1e-9, "{median}");
        // n = 21: ranks floor(10.5 - 4.49) = 6 and ceil(10.5 + 4.49) = 15, i.e. -5 % and +4 %.
        assert!((lo + 5.0).abs() < 1e-9 && (hi - 4.0).abs() < 1e-9, "{lo} {hi}");
        // Too few pairs for a 95 % interval: the range.
        let (m, lo, hi) = pair_overhead(&[1.0, 1.0], &[1.1, 0.9]);
        assert!(m.abs() < 1e-9 && (lo + 10.0).abs() < 1e-6 && (hi - 10.0).abs() < 1e-6);
        assert_eq!(pair_overhead(&[], &[]), (0.0, 0.0, 0.0));
    }
}
