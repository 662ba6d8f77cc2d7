//! Usage errors and the bounds of numeric options.
//!
//! Every numeric option takes one of the value parsers here (or clap's
//! `value_parser!(u64).range(..)`), with its bounds written beside the option. A bad value is
//! then clap's usage error (exit status 2, the option named); an inconsistency found after
//! parsing is a [`UsageError`], which `main` also turns into exit status 2.

use std::fmt::Display;
use std::io::Read;
use std::path::Path;

/// A command line that parses but asks for something impossible or contradictory.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// A [`UsageError`] as an `anyhow::Error`.
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    UsageError(message.into()).into()
}

/// Any error of argument checking, with its context, as a [`UsageError`].
pub fn as_usage<T>(result: anyhow::Result<T>) -> anyhow::Result<T> {
    result.map_err(|e| if is_usage(&e) { e } else { usage(format!("{e:#}")) })
}

/// Whether `e` is a usage error: a [`UsageError`] or a bad `REVERB_*` variable.
pub fn is_usage(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| cause.is::<UsageError>() || cause.is::<reverb_transport::config::ConfigError>())
}

/// A value parser: a whole number in `lo..=hi`.
pub fn int<T>(lo: u64, hi: u64) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static
where
    T: TryFrom<u64>,
{
    move |text| {
        let t = text.trim();
        let digits = t.strip_prefix('+').unwrap_or(t);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("expected a whole number in {lo}..={hi}"));
        }
        let n: u64 = digits.parse().map_err(|_| format!("{t} is not in {lo}..={hi}"))?;
        if !(lo..=hi).contains(&n) {
            return Err(format!("{n} is not in {lo}..={hi}"));
        }
        T::try_from(n).map_err(|_| format!("{n} is not in {lo}..={hi}"))
    }
}

/// A value parser: a finite number in `lo..=hi`.
pub fn float(lo: f64, hi: f64) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    move |text| {
        let v: f64 = text.trim().parse().map_err(|_| format!("expected a number in {lo}..={hi}"))?;
        if !(v.is_finite() && (lo..=hi).contains(&v)) {
            return Err(format!("{text} is not in {lo}..={hi}"));
        }
        Ok(v)
    }
}

/// Checks `value` against `lo..=hi` after parsing (values given through another form).
pub fn in_range<T: PartialOrd + Display>(option: &str, value: T, lo: T, hi: T) -> anyhow::Result<T> {
    if value < lo || value > hi {
        return Err(usage(format!("{option} {value} is not in {lo}..={hi}")));
    }
    Ok(value)
}

/// The largest input file the CLI reads (`--matrix`): 64 MiB.
pub const MAX_INPUT_BYTES: u64 = 64 << 20;

/// Reads a regular file of at most [`MAX_INPUT_BYTES`] as text; anything else (a device, a
/// FIFO, a directory, a larger file) is a usage error naming `option`.
pub fn read_input(option: &str, path: &Path) -> anyhow::Result<String> {
    let file = std::fs::File::open(path).map_err(|e| usage(format!("{option} {}: {e}", path.display())))?;
    let meta = file.metadata().map_err(|e| usage(format!("{option} {}: {e}", path.display())))?;
    if !meta.is_file() {
        return Err(usage(format!("{option} {}: not a regular file", path.display())));
    }
    let limit = MAX_INPUT_BYTES;
    let mut bytes = Vec::new();
    // `take` bounds the read even if the file grows after the size check.
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| usage(format!("{option} {}: {e}", path.display())))?;
    if meta.len() > limit || bytes.len() as u64 > limit {
        return Err(usage(format!("{option} {}: larger than the {} MiB limit", path.display(), limit >> 20)));
    }
    String::from_utf8(bytes).map_err(|_| usage(format!("{option} {}: not UTF-8 text", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ints_and_floats_keep_their_bounds() {
        let p = int::<u32>(1, 10);
        assert_eq!(p("10"), Ok(10));
        assert!(p("0").is_err() && p("11").is_err() && p("-1").is_err() && p("x").is_err());
        assert!(p("99999999999999999999999").is_err());
        assert!(int::<u8>(0, 1000)("300").is_err());
        let f = float(0.0, 1.0);
        assert_eq!(f("0.5"), Ok(0.5));
        assert!(f("nan").is_err() && f("inf").is_err() && f("1.5").is_err() && f("-0.1").is_err());
    }

    #[test]
    fn inputs_must_be_small_regular_files() {
        assert!(read_input("--matrix", Path::new("/dev/zero")).is_err());
        assert!(read_input("--matrix", Path::new("/")).is_err());
        assert!(read_input("--matrix", Path::new("/nonexistent/x")).is_err());
    }
}
