//! `reverb model` (the papers' analytical models) and `reverb plan` (a planner fed by
//! measured numbers). Every model is a pure function with unit tests citing the seed table or
//! equation it reproduces; this file only holds the command line and output plumbing.
//! See docs/models.md.

pub mod cluster;
pub mod interval;
pub mod perf;
pub mod plan;
pub mod redundancy;
pub mod survival;
pub mod svg;
pub mod table;

use anyhow::{bail, Context, Result};
use std::path::PathBuf;

pub use plan::PlanArgs;

#[derive(clap::Args, Debug)]
pub struct ModelArgs {
    #[command(subcommand)]
    pub command: ModelCommand,
}

#[derive(clap::Subcommand, Debug)]
pub enum ModelCommand {
    /// Young and Daly optimal checkpoint intervals (optionally swept over socket counts).
    Interval(interval::IntervalArgs),
    /// Execution time T_C, T_M, T_P of seed 000 ch.4 (eq. 4.2-4.6) and the optimal tau.
    Perf(perf::PerfArgs),
    /// Energy E_C, E_M, E_P of seed 000 ch.4 (eq. 4.7-4.12), tau for time and for energy.
    Energy(perf::PerfArgs),
    /// Checkpoint and message-logging survival under multi-node failures (seed 000 ch.7).
    Survival(survival::SurvivalArgs),
    /// Partial redundancy combined with checkpointing (seed 001, eq. 1-15).
    Redundancy(redundancy::RedundancyArgs),
    /// Seed 004 clustering metrics for a topology and a communication matrix.
    Cluster(cluster::ClusterArgs),
}

/// Output flags shared by every subcommand.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct OutputArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Write a plot of the sweep to this path (SVG; the extension must be .svg).
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
}

impl OutputArgs {
    /// Print the table or the JSON, then write the plot if one was asked for.
    pub fn emit(&self, table: &str, json: serde_json::Value, plot: Option<svg::LinePlot>) -> Result<()> {
        if let (Some(path), Some(_)) = (&self.plot, &plot) {
            check_plot_path(path)?;
        }
        if self.json {
            print_out(&format!("{}\n", serde_json::to_string_pretty(&json)?))?;
        } else {
            print_out(table)?;
        }
        if let Some(path) = &self.plot {
            let Some(plot) = plot else {
                bail!("this subcommand has no sweep to plot");
            };
            write_plot(path, &plot)?;
            if !self.json {
                print_out(&format!("plot written to {}\n", path.display()))?;
            }
        }
        Ok(())
    }
}

/// Write to stdout; a closed pipe (`| head`) ends the output quietly instead of panicking.
pub fn print_out(text: &str) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => Ok(other?),
    }
}

pub(crate) fn write_plot(path: &std::path::Path, plot: &svg::LinePlot) -> Result<()> {
    check_plot_path(path)?;
    std::fs::write(path, plot.render()).with_context(|| format!("writing plot {}", path.display()))
}

/// Refuse anything but .svg before any output is printed.
pub(crate) fn check_plot_path(path: &std::path::Path) -> Result<()> {
    match path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
        Some("svg") => {}
        Some("png") => bail!(
            "PNG output is not built in (it needs a rasteriser and font); write {} as .svg and convert it, e.g. `rsvg-convert -o plot.png plot.svg`",
            path.display()
        ),
        _ => bail!("plot path {} must end in .svg", path.display()),
    }
    Ok(())
}

pub fn model(args: ModelArgs) -> Result<()> {
    match args.command {
        ModelCommand::Interval(a) => interval::run(a),
        ModelCommand::Perf(a) => perf::run(a, perf::Quantity::Time),
        ModelCommand::Energy(a) => perf::run(a, perf::Quantity::Energy),
        ModelCommand::Survival(a) => survival::run(a),
        ModelCommand::Redundancy(a) => redundancy::run(a),
        ModelCommand::Cluster(a) => cluster::run(a),
    }
}

pub fn plan(args: PlanArgs) -> Result<()> {
    plan::run(args)
}

pub const MINUTE: f64 = 60.0;
pub const HOUR: f64 = 3600.0;
pub const DAY: f64 = 86_400.0;
/// 365-day year: seed 002 Table II and seed 000 Table 4.2 are reproduced with it.
pub const YEAR: f64 = 365.0 * DAY;

/// Parse a duration in seconds: `180`, `180s`, `59.9ms`, `3m`, `3min`, `24h`, `2d`, `10y`;
/// at most 1000 years either way.
pub fn parse_duration(text: &str) -> std::result::Result<f64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+' || c == 'e' || c == 'E'))
        .unwrap_or(text.len());
    // `e` is both exponent and nothing else here, so a unit never starts with it.
    let (number, unit) = text.split_at(split);
    let value: f64 =
        number.parse().map_err(|_| format!("`{text}` is not a duration (e.g. 180s, 3m, 24h, 10y)"))?;
    let scale = match unit.trim() {
        "" | "s" | "sec" | "secs" => 1.0,
        "ms" => 1e-3,
        "m" | "min" | "mins" => MINUTE,
        "h" | "hr" | "hrs" | "hours" => HOUR,
        "d" | "day" | "days" => DAY,
        "y" | "yr" | "year" | "years" => YEAR,
        other => return Err(format!("unknown time unit `{other}` in `{text}` (use ms, s, m, h, d, y)")),
    };
    let seconds = value * scale;
    if !seconds.is_finite() || seconds.abs() > MAX_SECONDS {
        return Err(format!("`{text}` is outside -1000y..=1000y"));
    }
    Ok(seconds)
}

/// The longest duration a model takes (1000 years), so every sweep and search stays finite.
pub const MAX_SECONDS: f64 = 1000.0 * YEAR;
/// The shortest positive duration a model takes (1 us).
pub const MIN_POSITIVE_SECONDS: f64 = 1e-6;
/// The largest count (`--sockets`, `--processes`, `--nodes`): 1024M = 2^30.
pub const MAX_COUNT: u64 = 1 << 30;

/// A strictly positive duration (MTBF, checkpoint time, work).
pub fn parse_positive_duration(text: &str) -> std::result::Result<f64, String> {
    let seconds = parse_duration(text)?;
    if seconds < MIN_POSITIVE_SECONDS {
        return Err(format!("`{text}` must be a positive duration in 1e-6s..=1000y"));
    }
    Ok(seconds)
}

/// A non-negative duration (restart time may be zero).
pub fn parse_nonnegative_duration(text: &str) -> std::result::Result<f64, String> {
    let seconds = parse_duration(text)?;
    if seconds < 0.0 {
        return Err(format!("`{text}` must not be negative"));
    }
    Ok(seconds)
}

/// Counts such as `64K`, `1M`, `65536`: K and M are binary (1024) as socket counts are.
pub fn parse_count(text: &str) -> std::result::Result<u64, String> {
    let text = text.trim();
    let (number, scale) = match text.chars().last() {
        Some('K' | 'k') => (&text[..text.len() - 1], 1u64 << 10),
        Some('M') => (&text[..text.len() - 1], 1u64 << 20),
        _ => (text, 1),
    };
    let value: u64 =
        number.parse().map_err(|_| format!("`{text}` is not a positive count (e.g. 1024, 64K, 1M)"))?;
    let count = value.checked_mul(scale).ok_or_else(|| format!("`{text}` is too large"))?;
    if count == 0 || count > MAX_COUNT {
        return Err(format!("`{text}`: the count must be in 1..=1024M ({MAX_COUNT})"));
    }
    Ok(count)
}

/// Seconds shown in the most readable unit.
pub fn human_duration(seconds: f64) -> String {
    let abs = seconds.abs();
    if !seconds.is_finite() {
        "inf".into()
    } else if abs < 1.0 {
        format!("{}ms", table::sig(seconds * 1e3, 3))
    } else if abs < 120.0 {
        format!("{}s", table::sig(seconds, 3))
    } else if abs < 2.0 * HOUR {
        format!("{}m", table::sig(seconds / MINUTE, 3))
    } else if abs < 2.0 * DAY {
        format!("{}h", table::sig(seconds / HOUR, 3))
    } else if abs < YEAR {
        format!("{}d", table::sig(seconds / DAY, 3))
    } else {
        format!("{}y", table::sig(seconds / YEAR, 3))
    }
}

/// Default socket sweep of seed 000 Fig. 4.3-4.5: 16K to 1M, doubling.
pub fn default_socket_sweep() -> Vec<u64> {
    (0..7).map(|i| 16_384u64 << i).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("180").unwrap(), 180.0);
        assert_eq!(parse_duration("3m").unwrap(), 180.0);
        assert_eq!(parse_duration("24h").unwrap(), 86_400.0);
        assert!((parse_duration("59.9ms").unwrap() - 0.0599).abs() < 1e-12);
        assert_eq!(parse_duration("10y").unwrap(), 315_360_000.0);
        assert_eq!(parse_duration("1e3s").unwrap(), 1000.0);
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_positive_duration("-5y").is_err());
        assert!(parse_positive_duration("0").is_err());
        assert!(parse_nonnegative_duration("0").is_ok());
    }

    #[test]
    fn counts() {
        assert_eq!(parse_count("64K").unwrap(), 65_536);
        assert_eq!(parse_count("1M").unwrap(), 1_048_576);
        assert_eq!(parse_count("1024").unwrap(), 1024);
        assert!(parse_count("0").is_err());
        assert!(parse_count("-3").is_err());
        assert!(parse_count("lots").is_err());
    }

    #[test]
    fn png_and_unknown_extensions_are_clear_errors() {
        let plot = svg::LinePlot::new("t", "x", "y");
        let err = write_plot(std::path::Path::new("/tmp/x.png"), &plot).unwrap_err();
        assert!(err.to_string().contains("PNG"));
        assert!(write_plot(std::path::Path::new("/tmp/x.txt"), &plot).is_err());
    }
}
