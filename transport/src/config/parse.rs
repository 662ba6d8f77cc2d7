//! The one grammar for configuration values (environment variables and CLI flags).
//!
//! - **sizes**: a whole number with an optional suffix `k`, `m` or `g` in either case, powers
//!   of 1024: `8`, `4k` = 4096, `64K`, `1m` = `1M` = 1 MiB, `2g` = 2 GiB;
//! - **durations**: a number (fractions allowed: `2.5`) with an optional unit `us`, `ms`, `s`,
//!   `min` or `h`; a bare number is in the variable's own unit, named by its suffix (`*_US`,
//!   `*_MS`, `*_S`), so `REVERB_DETECT_MS=50` stays 50 ms while `REVERB_DETECT_MS=2s` is
//!   2000 ms. `m` alone is refused: it reads as minutes (as in `reverb model`), milli- or
//!   mebi- (as in sizes) depending on the reader;
//! - **booleans**: `1`/`0`, `true`/`false`, `yes`/`no`, `on`/`off` (any case); any other
//!   whole number counts as true when nonzero, as the older integer flags did;
//! - **enums**: one of a fixed set of words (exact, lower case);
//! - **lists**: comma-separated items, spaces around items ignored, no empty items.
//!
//! Each function here knows only the value; [`ConfigError`] adds the variable's name.

use std::time::Duration;

/// A value that does not follow the grammar; says what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected {expected}")]
pub struct ValueError {
    /// What a valid value looks like, in words.
    pub expected: String,
}

impl ValueError {
    /// An error saying that `what` was expected.
    pub fn expected(what: impl Into<String>) -> Self {
        ValueError { expected: what.into() }
    }
}

/// A configuration variable that is set to something unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The value does not parse.
    #[error("{name}={value:?}: {source}")]
    Invalid {
        /// The variable (or flag) name.
        name: String,
        /// The value as it was set.
        value: String,
        /// Why it does not parse.
        #[source]
        source: ValueError,
    },
    /// The value parses but is outside what the setting allows.
    #[error("{name}={value:?}: {why}")]
    OutOfRange {
        /// The variable (or flag) name.
        name: String,
        /// The value as it was set.
        value: String,
        /// What the setting allows.
        why: String,
    },
    /// A `REVERB_*` name that the registry does not list (a programming error).
    #[error("{0} is not a registered REVERB_* variable")]
    Unregistered(String),
}

impl ConfigError {
    /// [`ConfigError::Invalid`] for `name=value`.
    pub fn invalid(name: &str, value: &str, source: ValueError) -> Self {
        ConfigError::Invalid { name: name.to_string(), value: value.to_string(), source }
    }

    /// [`ConfigError::OutOfRange`] for `name=value`, saying `why`.
    pub fn out_of_range(name: &str, value: &str, why: impl Into<String>) -> Self {
        ConfigError::OutOfRange { name: name.to_string(), value: value.to_string(), why: why.into() }
    }
}

/// Trimmed, without one leading `+` (Rust's integer parsing, used before, accepted it).
fn unsigned(s: &str) -> &str {
    let s = s.trim();
    s.strip_prefix('+').unwrap_or(s)
}

const SIZE_FORM: &str = "a byte count such as 8, 4k, 64K, 1m or 2g (k, m, g: powers of 1024)";

/// Parses a size: `8`, `4k`, `64K`, `1m`, `1M`, `2g` (powers of 1024, case-insensitive).
pub fn parse_size(s: &str) -> Result<usize, ValueError> {
    let s = unsigned(s);
    let (digits, shift) = match s.as_bytes().last() {
        Some(b'k' | b'K') => (&s[..s.len() - 1], 10),
        Some(b'm' | b'M') => (&s[..s.len() - 1], 20),
        Some(b'g' | b'G') => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ValueError::expected(SIZE_FORM));
    }
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(1usize << shift))
        .ok_or_else(|| ValueError::expected(format!("{SIZE_FORM}, at most {}", usize::MAX)))
}

/// The unit of a bare number in a duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeUnit {
    /// Microseconds (`*_US`).
    Micros,
    /// Milliseconds (`*_MS`).
    Millis,
    /// Seconds (`*_S`).
    Seconds,
}

impl TimeUnit {
    /// The unit a variable's name implies (`*_US`, `*_MS`, `*_S`), if any.
    pub fn of_name(name: &str) -> Option<TimeUnit> {
        if name.ends_with("_US") {
            Some(TimeUnit::Micros)
        } else if name.ends_with("_MS") {
            Some(TimeUnit::Millis)
        } else if name.ends_with("_S") {
            Some(TimeUnit::Seconds)
        } else {
            None
        }
    }

    fn seconds(self) -> f64 {
        match self {
            TimeUnit::Micros => 1e-6,
            TimeUnit::Millis => 1e-3,
            TimeUnit::Seconds => 1.0,
        }
    }

    /// The unit's suffix in the grammar: `us`, `ms` or `s`.
    pub fn suffix(self) -> &'static str {
        match self {
            TimeUnit::Micros => "us",
            TimeUnit::Millis => "ms",
            TimeUnit::Seconds => "s",
        }
    }
}

/// Parses a duration: `250ms`, `2s`, `50us`, `1.5s`, `1min`, `1h`, or a bare number in
/// `bare` units.
pub fn parse_duration(s: &str, bare: TimeUnit) -> Result<Duration, ValueError> {
    let s = unsigned(s);
    let expected = || {
        ValueError::expected(format!(
            "a duration such as 250ms, 2s, 50us or 1min (a bare number is in {})",
            bare.suffix()
        ))
    };
    // (suffix, seconds per unit); `us` and `ms` before `s`.
    const UNITS: [(&str, f64); 5] = [("us", 1e-6), ("ms", 1e-3), ("s", 1.0), ("min", 60.0), ("h", 3600.0)];
    let (number, scale) = UNITS
        .iter()
        .find_map(|&(suffix, scale)| s.strip_suffix(suffix).map(|n| (n, scale)))
        .unwrap_or((s, bare.seconds()));
    let number = number.trim_end();
    // Digits and at most one point: no signs, exponents, `inf` or `nan`.
    let plain = !number.is_empty()
        && number.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && number.bytes().filter(|&b| b == b'.').count() <= 1
        && number != ".";
    if !plain {
        return Err(expected());
    }
    let value: f64 = number.parse().map_err(|_| expected())?;
    Duration::try_from_secs_f64(value * scale).map_err(|_| expected())
}

/// Parses a boolean: `1`/`0`, `true`/`false`, `yes`/`no`, `on`/`off`, or a whole number
/// (nonzero is true).
pub fn parse_bool(s: &str) -> Result<bool, ValueError> {
    let s = s.trim();
    match s.to_ascii_lowercase().as_str() {
        "true" | "yes" | "on" => return Ok(true),
        "false" | "no" | "off" => return Ok(false),
        _ => {}
    }
    s.parse::<u64>()
        .map(|n| n != 0)
        .map_err(|_| ValueError::expected("1, 0, true, false, yes, no, on or off"))
}

/// Parses one of `choices` (`(word, value)` pairs); the error lists the words.
pub fn parse_enum<T: Copy>(s: &str, choices: &[(&str, T)]) -> Result<T, ValueError> {
    let s = s.trim();
    choices.iter().find(|(word, _)| *word == s).map(|&(_, v)| v).ok_or_else(|| {
        let words: Vec<&str> = choices.iter().map(|(w, _)| *w).collect();
        ValueError::expected(format!("one of {}", words.join(", ")))
    })
}

/// "a, b or c": `words` as a list for an error message ("" when empty).
pub fn or_list(words: &[&str]) -> String {
    match words.split_last() {
        Some((last, [])) => (*last).to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// Parses a comma-separated list, each item with `item`.
pub fn parse_list<T>(s: &str, item: impl Fn(&str) -> Result<T, ValueError>) -> Result<Vec<T>, ValueError> {
    s.split(',')
        .map(|one| {
            let one = one.trim();
            if one.is_empty() {
                return Err(ValueError::expected("a comma-separated list without empty items"));
            }
            item(one).map_err(|e| ValueError::expected(format!("a comma-separated list of {}", e.expected)))
        })
        .collect()
}

/// Parses a whole number of type `T` (decimal; a leading `+` is allowed, `-` is not).
pub fn parse_int<T: std::str::FromStr>(s: &str) -> Result<T, ValueError> {
    let s = unsigned(s);
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ValueError::expected("a non-negative integer"));
    }
    s.parse::<T>().map_err(|_| ValueError::expected("a non-negative integer in range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn or_lists_read_as_a_sentence() {
        assert_eq!(or_list(&[]), "");
        assert_eq!(or_list(&["shm"]), "shm");
        assert_eq!(or_list(&["a", "b", "c"]), "a, b or c");
    }

    #[test]
    fn sizes_are_powers_of_1024_in_any_case() {
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert_eq!(parse_size(" 8M "), Ok(8 << 20));
        assert_eq!(parse_size("+8"), Ok(8));
        for bad in ["", "k", "8x", "-1", "++8", "+", "1.5k", "8kb", "99999999999999999999g"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn durations_take_units_or_the_names_unit() {
        let ms = TimeUnit::Millis;
        assert_eq!(parse_duration("250", ms), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("250ms", ms), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("2s", ms), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("50us", ms), Ok(Duration::from_micros(50)));
        assert_eq!(parse_duration("2.5", TimeUnit::Seconds), Ok(Duration::from_millis(2500)));
        assert_eq!(parse_duration("0", ms), Ok(Duration::ZERO));
        assert_eq!(parse_duration("1min", ms), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("1h", ms), Ok(Duration::from_secs(3600)));
        for bad in ["", "1m", "ten", "-1", "1e3", "inf", "nan", ".", "1.2.3", "5d", "1mins"] {
            assert!(parse_duration(bad, ms).is_err(), "{bad:?}");
        }
        assert_eq!(TimeUnit::of_name("REVERB_WAIT_SPIN_US"), Some(TimeUnit::Micros));
        assert_eq!(TimeUnit::of_name("REVERB_BOOT_TIMEOUT_S"), Some(TimeUnit::Seconds));
        assert_eq!(TimeUnit::of_name("REVERB_LOG"), None);
    }

    #[test]
    fn booleans_enums_lists() {
        assert_eq!(parse_bool("1"), Ok(true));
        assert_eq!(parse_bool("0"), Ok(false));
        assert_eq!(parse_bool("On"), Ok(true));
        assert_eq!(parse_bool("no"), Ok(false));
        assert_eq!(parse_bool("2"), Ok(true));
        assert!(parse_bool("maybe").is_err());
        assert_eq!(parse_enum("b", &[("a", 1), ("b", 2)]), Ok(2));
        let err = parse_enum("c", &[("a", 1), ("b", 2)]).unwrap_err();
        assert_eq!(err.to_string(), "expected one of a, b");
        assert_eq!(parse_list("1, 2,3", parse_int::<u32>), Ok(vec![1, 2, 3]));
        assert!(parse_list("1,,3", parse_int::<u32>).is_err());
        assert!(parse_list("1,x", parse_int::<u32>).is_err());
    }

    #[test]
    fn errors_name_the_variable_and_the_value() {
        // (No literal variable name here: the registry test scans the sources for them.)
        let e = ConfigError::invalid("SOME_SIZE", "8x", parse_size("8x").unwrap_err());
        let text = e.to_string();
        assert!(text.starts_with("SOME_SIZE=\"8x\": expected a byte count"), "{text}");
        assert!(std::error::Error::source(&e).is_some());
    }
}
