//! Partial redundancy combined with checkpoint/restart: seed 001 (Elliott et al.), eq. 1-15.
//!
//! Eq. 13 as printed multiplies the integral int_0^x t e^{-t/Theta} / Theta dt (which already
//! carries the failure probability) by Pr(failure before x) again. The corrected form is
//! E[min(T, x)] = Theta (1 - e^{-x/Theta}). Both are offered (`--eq13`); the CLI default is
//! `corrected`; the paper's own crossover counts are reproduced only by `printed`.

use super::interval::daly;
use super::table::{sig, Table};
use super::{
    human_duration, parse_count, parse_nonnegative_duration, parse_positive_duration, svg, OutputArgs, YEAR,
};
use anyhow::{bail, Result};
use serde_json::json;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Eq13 {
    /// As printed in seed 001 (double-counts the failure probability).
    Printed,
    /// Theta (1 - e^{-x/Theta}), the expected length of a restart+rework phase cut by a failure.
    Corrected,
}

/// Inputs of seed 001 sec. 4.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    /// N: virtual processes.
    pub processes: u64,
    /// t: failure-free time without redundancy (s).
    pub work: f64,
    /// theta: MTBF of one node (s).
    pub node_mtbf: f64,
    /// alpha: communication / computation ratio (share of t spent communicating).
    pub alpha: f64,
    /// c: checkpoint time (s).
    pub ckpt_time: f64,
    /// R: restart time (s).
    pub restart_time: f64,
    pub eq13: Eq13,
}

impl Params {
    pub fn validate(&self) -> Result<()> {
        if self.processes == 0 {
            bail!("process count must be at least 1");
        }
        for (name, v) in
            [("work", self.work), ("node MTBF", self.node_mtbf), ("checkpoint time", self.ckpt_time)]
        {
            if !(v.is_finite() && v > 0.0) {
                bail!("{name} must be positive, got {v}");
            }
        }
        if !(self.restart_time.is_finite() && self.restart_time >= 0.0) {
            bail!("restart time must not be negative");
        }
        if !(0.0..=1.0).contains(&self.alpha) {
            bail!("alpha (communication share) must be in 0..=1, got {}", self.alpha);
        }
        Ok(())
    }
}

fn check_degree(r: f64) -> Result<()> {
    if !(r.is_finite() && r >= 1.0) {
        bail!("redundancy degree must be >= 1, got {r}");
    }
    Ok(())
}

/// Eq. 1: t_Red = (1 - alpha) t + alpha t r.
pub fn redundant_time(work: f64, alpha: f64, r: f64) -> f64 {
    (1.0 - alpha) * work + alpha * work * r
}

/// Eq. 5-8: processes at floor(r) and at ceil(r) copies, and the physical process total.
pub fn partition(n: u64, r: f64) -> (u64, u64, u64) {
    let (lo, hi) = (r.floor(), r.ceil());
    let at_floor = if lo == hi { 0 } else { ((hi - r) * n as f64).floor() as u64 };
    let at_ceil = n - at_floor;
    let total = at_ceil * hi as u64 + at_floor * lo as u64;
    (at_floor, at_ceil, total)
}

/// Eq. 9 (with the eq. 3-4 approximation Pr(node fails before t) = t / theta):
/// R_sys = [1 - (t_Red/theta)^floor(r)]^N_floor [1 - (t_Red/theta)^ceil(r)]^N_ceil.
/// Returned as ln R_sys to stay accurate for large N.
pub fn ln_reliability(p: &Params, r: f64) -> Result<f64> {
    check_degree(r)?;
    let t_red = redundant_time(p.work, p.alpha, r);
    let x = t_red / p.node_mtbf;
    if x >= 1.0 {
        bail!(
            "the run ({}) is longer than the node MTBF: eq. 3's t/theta approximation breaks down",
            human_duration(t_red)
        );
    }
    let (at_floor, at_ceil, _) = partition(p.processes, r);
    let term =
        |copies: f64, count: u64| if count == 0 { 0.0 } else { count as f64 * (-x.powf(copies)).ln_1p() };
    Ok(term(r.floor(), at_floor) + term(r.ceil(), at_ceil))
}

/// Eq. 12: expected work lost per failure with checkpoint interval delta and cost c.
pub fn lost_work(delta: f64, c: f64, theta: f64) -> f64 {
    let dc = delta + c;
    (theta - theta * (-delta / theta).exp() - delta * (-dc / theta).exp()) / (1.0 - (-dc / theta).exp())
}

/// Eq. 13: expected length of a restart + rework phase of nominal length x = R + t_lw.
pub fn restart_rework(x: f64, theta: f64, form: Eq13) -> f64 {
    let survive = (-x / theta).exp();
    let integral = theta - survive * (x + theta);
    match form {
        Eq13::Printed => (1.0 - survive) * integral + survive * x,
        Eq13::Corrected => integral + survive * x,
    }
}

/// Everything eq. 1-15 give for one redundancy degree.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Outcome {
    pub degree: f64,
    pub physical_processes: u64,
    pub redundant_time_s: f64,
    pub reliability: f64,
    pub system_mtbf_s: f64,
    pub interval_s: f64,
    pub lost_work_s: f64,
    pub restart_rework_s: f64,
    /// None when failures outpace progress (lambda t_RR >= 1).
    pub total_time_s: Option<f64>,
    pub checkpoints: f64,
}

pub fn evaluate(p: &Params, r: f64) -> Result<Outcome> {
    p.validate()?;
    let ln_r = ln_reliability(p, r)?;
    let t_red = redundant_time(p.work, p.alpha, r);
    // Eq. 10.
    let lambda = -ln_r / t_red;
    let theta = if lambda > 0.0 { 1.0 / lambda } else { f64::INFINITY };
    // Eq. 15 (Daly), then eq. 12-14.
    let interval = if theta.is_finite() { daly(p.ckpt_time, theta)? } else { t_red };
    let lost = if theta.is_finite() { lost_work(interval, p.ckpt_time, theta) } else { 0.0 };
    let rr = if theta.is_finite() { restart_rework(p.restart_time + lost, theta, p.eq13) } else { 0.0 };
    let share = 1.0 - lambda * rr;
    let total = (share > 0.0).then(|| (t_red + t_red * p.ckpt_time / interval) / share);
    let (_, _, physical) = partition(p.processes, r);
    Ok(Outcome {
        degree: r,
        physical_processes: physical,
        redundant_time_s: t_red,
        reliability: ln_r.exp(),
        system_mtbf_s: theta,
        interval_s: interval,
        lost_work_s: lost,
        restart_rework_s: rr,
        total_time_s: total,
        checkpoints: t_red / interval,
    })
}

/// The degree with the lowest total time.
pub fn best_degree(p: &Params, degrees: &[f64]) -> Result<Option<Outcome>> {
    let mut best: Option<Outcome> = None;
    for &r in degrees {
        let o = evaluate(p, r)?;
        if let Some(t) = o.total_time_s {
            let best_time = best.and_then(|b| b.total_time_s).unwrap_or(f64::INFINITY);
            if t < best_time {
                best = Some(o);
            }
        }
    }
    Ok(best)
}

/// Smallest process count at which `faster` beats `slower` by `factor` (T_slower >= factor
/// T_faster), searched in 1..=limit; None if it never does.
pub fn crossover(p: &Params, slower: f64, faster: f64, factor: f64, limit: u64) -> Result<Option<u64>> {
    let wins = |n: u64| -> Result<bool> {
        let q = Params { processes: n, ..*p };
        let a = evaluate(&q, slower)?.total_time_s;
        let b = evaluate(&q, faster)?.total_time_s;
        Ok(match (a, b) {
            (None, Some(_)) => true,
            (Some(a), Some(b)) => a >= factor * b,
            _ => false,
        })
    };
    if wins(1)? {
        return Ok(Some(1));
    }
    if !wins(limit)? {
        return Ok(None);
    }
    let (mut lo, mut hi) = (1u64, limit);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if wins(mid)? {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Ok(Some(hi))
}

#[derive(clap::Args, Debug)]
pub struct RedundancyArgs {
    /// N: virtual processes (comma-separated list sweeps and plots T_total against N).
    #[arg(long, value_delimiter = ',', value_parser = parse_count, default_value = "10000")]
    pub processes: Vec<u64>,
    /// t: failure-free time without redundancy.
    #[arg(long, default_value = "128h", value_parser = parse_positive_duration)]
    pub work: f64,
    /// theta: MTBF of one node.
    #[arg(long, default_value = "5y", value_parser = parse_positive_duration)]
    pub node_mtbf: f64,
    /// alpha: communication / computation ratio, 0..=1000.
    #[arg(long, default_value_t = 0.2, value_parser = crate::usage::float(0.0, 1e3))]
    pub alpha: f64,
    /// c: checkpoint time.
    #[arg(long, default_value = "10m", value_parser = parse_positive_duration)]
    pub ckpt_time: f64,
    /// R: restart time.
    #[arg(long, default_value = "10m", value_parser = parse_nonnegative_duration)]
    pub restart_time: f64,
    /// Redundancy degrees r in 1..=16 (fractions are partial redundancy).
    #[arg(long, value_delimiter = ',', value_parser = crate::usage::float(1.0, 16.0), default_values_t = [1.0, 1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75, 3.0])]
    pub degrees: Vec<f64>,
    /// Which eq. 13 to use: `corrected` (default) or `printed` (reproduces the paper's numbers).
    #[arg(long, value_enum, default_value_t = Eq13::Corrected)]
    pub eq13: Eq13,
    /// Also search the crossover process counts (1x vs 2x, 1x vs 3x, 2x twice as fast, 2x vs 3x).
    #[arg(long)]
    pub crossovers: bool,
    #[command(flatten)]
    pub output: OutputArgs,
}

pub fn run(args: RedundancyArgs) -> Result<()> {
    for &r in &args.degrees {
        check_degree(r)?;
    }
    let base = |n: u64| Params {
        processes: n,
        work: args.work,
        node_mtbf: args.node_mtbf,
        alpha: args.alpha,
        ckpt_time: args.ckpt_time,
        restart_time: args.restart_time,
        eq13: args.eq13,
    };
    let mut text = format!(
        "t = {}, node MTBF = {}, alpha = {}, c = {}, R = {}, eq. 13 {:?}\n",
        human_duration(args.work),
        human_duration(args.node_mtbf),
        args.alpha,
        human_duration(args.ckpt_time),
        human_duration(args.restart_time),
        args.eq13
    );
    let mut json_rows = Vec::new();
    let mut lines: Vec<Vec<(f64, f64)>> = vec![Vec::new(); args.degrees.len()];
    for &n in &args.processes {
        let p = base(n);
        p.validate()?;
        let mut table = Table::new([
            "r",
            "physical",
            "t_Red",
            "R_sys",
            "Theta_sys",
            "Daly delta",
            "t_lw",
            "t_RR",
            "T_total",
            "checkpoints",
        ]);
        let mut outcomes = Vec::new();
        for (i, &r) in args.degrees.iter().enumerate() {
            let o = evaluate(&p, r)?;
            table.row([
                format!("{r}x"),
                o.physical_processes.to_string(),
                human_duration(o.redundant_time_s),
                sig(o.reliability, 4),
                human_duration(o.system_mtbf_s),
                human_duration(o.interval_s),
                human_duration(o.lost_work_s),
                human_duration(o.restart_rework_s),
                o.total_time_s.map_or("never".into(), human_duration),
                sig(o.checkpoints, 4),
            ]);
            lines[i].push((n as f64, o.total_time_s.map_or(f64::NAN, |t| t / 3600.0)));
            outcomes.push(o);
        }
        let best = best_degree(&p, &args.degrees)?;
        text.push_str(&format!("\nN = {n}\n{}", table.render()));
        text.push_str(&match best {
            Some(b) => format!(
                "best r = {}x ({})\n",
                b.degree,
                b.total_time_s.map_or("never".into(), human_duration)
            ),
            None => "no degree finishes\n".into(),
        });
        json_rows.push(json!({"processes": n, "degrees": outcomes, "best_degree": best.map(|b| b.degree)}));
    }
    let mut crossovers_json = serde_json::Value::Null;
    if args.crossovers {
        let p = base(1);
        let limit = 100_000_000;
        let c12 = crossover(&p, 1.0, 2.0, 1.0, limit)?;
        let c13 = crossover(&p, 1.0, 3.0, 1.0, limit)?;
        let half = crossover(&p, 1.0, 2.0, 2.0, limit)?;
        let c23 = crossover(&p, 2.0, 3.0, 1.0, limit)?;
        let show = |c: Option<u64>| c.map_or("none below 1e8".into(), |n| n.to_string());
        text.push_str(&format!(
            "\nCrossovers (processes): 2x beats 1x at {}, 3x beats 1x at {}, 2x twice as fast as 1x at {}, 3x beats 2x at {}\n",
            show(c12),
            show(c13),
            show(half),
            show(c23)
        ));
        crossovers_json = json!({"dual_beats_none": c12, "triple_beats_none": c13, "dual_twice_as_fast": half, "triple_beats_dual": c23});
    }
    let plot = (args.processes.len() > 1).then(|| {
        let mut plot = svg::LinePlot::new(
            "Total time with redundancy + C/R (seed 001 Fig. 13/14)",
            "virtual processes N",
            "T_total (h)",
        )
        .log2_x()
        .log10_y();
        for (i, r) in args.degrees.iter().enumerate() {
            plot.add(svg::Series::new(format!("{r}x"), lines[i].clone()));
        }
        plot
    });
    let json = json!({"eq13": format!("{:?}", args.eq13).to_lowercase(), "rows": json_rows, "crossovers": crossovers_json});
    let _ = YEAR;
    args.output.emit(&text, json, plot)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{HOUR, MINUTE};

    /// Seed 001 sec. 6 (Fig. 13/14): a 128 h job, 5-year node MTBF. The paper does not print
    /// alpha, c and R for these figures; alpha = 0.2 (its CG benchmark) and c = R = 10 min
    /// reproduce its crossovers best, with the printed eq. 13.
    fn fig13(eq13: Eq13) -> Params {
        Params {
            processes: 1,
            work: 128.0 * HOUR,
            node_mtbf: 5.0 * YEAR,
            alpha: 0.2,
            ckpt_time: 10.0 * MINUTE,
            restart_time: 10.0 * MINUTE,
            eq13,
        }
    }

    fn rel(a: f64, b: f64) -> f64 {
        (a / b - 1.0).abs()
    }

    #[test]
    fn seed001_table5_expected_linear_increase_eq1() {
        // Table 5 "Expected linear increase": t = 46 min, alpha = 0.2.
        let published = [46.0, 48.0, 51.0, 53.0, 55.0, 58.0, 60.0, 62.0, 64.0];
        for (i, expected) in published.into_iter().enumerate() {
            let r = 1.0 + 0.25 * i as f64;
            let got = redundant_time(46.0, 0.2, r);
            assert!(rel(got, expected) < 0.01, "r={r}: {got} vs {expected}");
        }
    }

    #[test]
    fn seed001_eq5_8_partition() {
        // 1.5x of 128: every other process has a replica (sec. 6).
        assert_eq!(partition(128, 1.5), (64, 64, 192));
        assert_eq!(partition(128, 2.0), (0, 128, 256));
        assert_eq!(partition(128, 2.25), (96, 32, 288));
    }

    /// The runtime's replica layout starts the processes the model counts.
    #[test]
    fn runtime_layout_matches_the_partition() {
        for n in [1u64, 7, 128] {
            for r in [1.0, 1.25, 1.5, 2.0, 2.25, 2.5, 3.0] {
                let map = reverb_runtime::replicas::ReplicaMap::new(n as u32, r).unwrap();
                assert_eq!(u64::from(map.physical_ranks()), partition(n, r).2, "n {n} r {r}");
            }
        }
    }

    #[test]
    fn seed001_sec6_crossovers_with_printed_eq13() {
        // "cross-over points between no redundancy (1x) and dual redundancy (2x) at 4,351
        // processes and triple redundancy (3x) at 12,551 processes"; "twice that of dual
        // redundancy at 78,536 processes". Parameters are inferred (see fig13), so 1.5 %.
        let p = fig13(Eq13::Printed);
        let c12 = crossover(&p, 1.0, 2.0, 1.0, 10_000_000).unwrap().unwrap();
        let c13 = crossover(&p, 1.0, 3.0, 1.0, 10_000_000).unwrap().unwrap();
        let half = crossover(&p, 1.0, 2.0, 2.0, 10_000_000).unwrap().unwrap();
        assert!(rel(c12 as f64, 4351.0) < 0.015, "{c12}");
        assert!(rel(c13 as f64, 12551.0) < 0.015, "{c13}");
        assert!(rel(half as f64, 78536.0) < 0.015, "{half}");
    }

    #[test]
    fn seed001_triple_beats_dual_not_reproduced() {
        // "Once the count exceeds 771,251, triple redundancy has the lowest overall cost": with
        // the same inferred parameters the model puts that crossover near 914K (18 % higher);
        // no (c, R) on a half-minute grid brings all four crossovers within 1 %.
        let p = fig13(Eq13::Printed);
        let c23 = crossover(&p, 2.0, 3.0, 1.0, 10_000_000).unwrap().unwrap();
        assert!((850_000..1_000_000).contains(&c23), "{c23}");
    }

    #[test]
    fn seed001_corrected_eq13_moves_the_crossovers() {
        // The corrected eq. 13 spends more time per failure, so redundancy pays off earlier.
        let c12 = crossover(&fig13(Eq13::Corrected), 1.0, 2.0, 1.0, 10_000_000).unwrap().unwrap();
        assert!(c12 < 4351, "{c12}");
    }

    #[test]
    fn seed001_eq13_printed_double_counts() {
        // The corrected form is E[min(T, x)] for T ~ Exp(theta): check it by quadrature.
        let (x, theta) = (3.0, 5.0);
        let steps = 200_000;
        let h = x / steps as f64;
        let mut integral = 0.0;
        for i in 0..steps {
            let t = (i as f64 + 0.5) * h;
            integral += t * (-t / theta).exp() / theta * h;
        }
        let expected = integral + (-x / theta).exp() * x;
        assert!(rel(restart_rework(x, theta, Eq13::Corrected), expected) < 1e-6);
        assert!(rel(restart_rework(x, theta, Eq13::Corrected), theta * (1.0 - (-x / theta).exp())) < 1e-12);
        // Printed is smaller: the failure probability (1 - e^{-x/theta}) enters twice.
        assert!(restart_rework(x, theta, Eq13::Printed) < restart_rework(x, theta, Eq13::Corrected));
    }

    #[test]
    fn seed001_eq12_lost_work_is_the_integral() {
        let (delta, c, theta) = (2.0, 0.5, 7.0);
        let dc = delta + c;
        let steps = 200_000;
        let h = dc / steps as f64;
        let norm = theta * (1.0 - (-dc / theta).exp());
        let mut e = 0.0;
        for i in 0..steps {
            let t = (i as f64 + 0.5) * h;
            e += t.min(delta) * (-t / theta).exp() / norm * h;
        }
        assert!(rel(lost_work(delta, c, theta), e) < 1e-6);
    }

    #[test]
    fn seed001_table4_best_degree_at_the_extremes() {
        // Table 4 (measured, CG class D, N = 128, t = 46 min, c = 120 s, R = 500 s,
        // alpha = 0.2): the best degree is 3x at a 6 h node MTBF and 2x at 24 h and 30 h. The
        // model agrees there; at 12 h and 18 h it picks 3x where the measurements picked 2.5x
        // and 2x (differences the paper attributes to higher real redundancy overhead, Table 5).
        let degrees: Vec<f64> = (0..9).map(|i| 1.0 + 0.25 * f64::from(i)).collect();
        for eq13 in [Eq13::Printed, Eq13::Corrected] {
            for (mtbf_h, best) in [(6.0, 3.0), (24.0, 2.0), (30.0, 2.0)] {
                let p = Params {
                    processes: 128,
                    work: 46.0 * MINUTE,
                    node_mtbf: mtbf_h * HOUR,
                    alpha: 0.2,
                    ckpt_time: 120.0,
                    restart_time: 500.0,
                    eq13,
                };
                assert_eq!(best_degree(&p, &degrees).unwrap().unwrap().degree, best, "{mtbf_h} h {eq13:?}");
            }
        }
    }

    #[test]
    fn redundancy_raises_reliability() {
        let p = Params { processes: 10_000, ..fig13(Eq13::Corrected) };
        let r1 = evaluate(&p, 1.0).unwrap().reliability;
        let r2 = evaluate(&p, 2.0).unwrap().reliability;
        let r15 = evaluate(&p, 1.5).unwrap().reliability;
        assert!(r1 < r15 && r15 < r2);
    }

    #[test]
    fn bad_input() {
        let p = fig13(Eq13::Printed);
        assert!(evaluate(&Params { processes: 0, ..p }, 1.0).is_err());
        assert!(evaluate(&Params { node_mtbf: -1.0, ..p }, 1.0).is_err());
        assert!(evaluate(&Params { alpha: 2.0, ..p }, 1.0).is_err());
        assert!(evaluate(&p, 0.5).is_err());
        assert!(evaluate(&Params { node_mtbf: 3600.0, ..p }, 1.0).is_err());
    }
}
