//! Reading registered variables: every `REVERB_*` read goes through [`Env`], which refuses a
//! name the registry does not list and parses with the one grammar of [`super::parse`].
//!
//! `Env` takes a lookup closure, so parsers are testable without touching the process
//! environment; [`Env::process`] reads the real one.

use std::ffi::OsString;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use super::parse::{self, ConfigError, TimeUnit, ValueError};
use super::registry;

/// Panics in debug builds (an error in release builds) on an unregistered `REVERB_*` name.
fn check_registered(name: &str) -> Result<(), ConfigError> {
    if registry::lookup(name).is_some() {
        return Ok(());
    }
    debug_assert!(false, "{name} is not in transport/src/config/registry.rs");
    Err(ConfigError::Unregistered(name.to_string()))
}

/// Where variables come from: the process environment or a stand-in.
pub struct Env<'a> {
    get: &'a dyn Fn(&str) -> Option<String>,
}

/// The process environment; a value that is not UTF-8 comes back lossily converted, so it
/// fails to parse with the variable named instead of reading as unset.
fn process_lookup(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
}

impl Env<'static> {
    /// Reads the process environment.
    pub fn process() -> Env<'static> {
        Env { get: &process_lookup }
    }
}

impl<'a> Env<'a> {
    /// Variables from `get` instead of the process environment.
    pub fn from_lookup(get: &'a dyn Fn(&str) -> Option<String>) -> Env<'a> {
        Env { get }
    }

    /// The raw text of registered variable `name`; `None` when unset.
    pub fn raw(&self, name: &str) -> Result<Option<String>, ConfigError> {
        check_registered(name)?;
        Ok((self.get)(name))
    }

    /// Like [`Env::raw`] with an empty value read as unset.
    pub fn non_empty(&self, name: &str) -> Result<Option<String>, ConfigError> {
        Ok(self.raw(name)?.filter(|v| !v.trim().is_empty()))
    }

    /// A variable that is not ours (Slurm, Open MPI, PMI): read without the registry.
    pub fn foreign(&self, name: &str) -> Option<String> {
        debug_assert!(!name.starts_with("REVERB_"), "{name}: read REVERB_* variables with raw()");
        (self.get)(name)
    }

    /// Parses `name` with `f`; `None` when unset.
    pub fn with<T>(
        &self,
        name: &str,
        f: impl FnOnce(&str) -> Result<T, ValueError>,
    ) -> Result<Option<T>, ConfigError> {
        match self.raw(name)? {
            None => Ok(None),
            Some(v) => f(&v).map(Some).map_err(|e| ConfigError::invalid(name, &v, e)),
        }
    }

    /// A size (`8`, `4k`, `1m`, `2g`: powers of 1024).
    pub fn size(&self, name: &str) -> Result<Option<usize>, ConfigError> {
        self.with(name, parse::parse_size)
    }

    /// A duration; a bare number is in the unit the name's suffix gives (`_US`, `_MS`, `_S`).
    pub fn duration(&self, name: &str) -> Result<Option<Duration>, ConfigError> {
        let bare = TimeUnit::of_name(name).unwrap_or(TimeUnit::Millis);
        self.with(name, |v| parse::parse_duration(v, bare))
    }

    /// A duration that must not be zero (timeouts, intervals).
    pub fn positive_duration(&self, name: &str) -> Result<Option<Duration>, ConfigError> {
        match self.duration(name)? {
            Some(d) if d.is_zero() => {
                Err(ConfigError::out_of_range(name, &self.raw(name)?.unwrap_or_default(), "must be > 0"))
            }
            other => Ok(other),
        }
    }

    /// A boolean (`1`/`0`, `true`/`false`, `yes`/`no`, `on`/`off`, or any whole number, true
    /// when nonzero); `Ok(None)` when unset.
    pub fn bool(&self, name: &str) -> Result<Option<bool>, ConfigError> {
        self.with(name, parse::parse_bool)
    }

    /// A whole number.
    pub fn int<T: FromStr>(&self, name: &str) -> Result<Option<T>, ConfigError> {
        self.with(name, parse::parse_int::<T>)
    }

    /// One word of `choices`.
    pub fn choice<T: Copy>(&self, name: &str, choices: &[(&str, T)]) -> Result<Option<T>, ConfigError> {
        self.with(name, |v| parse::parse_enum(v, choices))
    }

    /// A comma-separated list, each item parsed by `item`.
    pub fn list<T>(
        &self,
        name: &str,
        item: impl Fn(&str) -> Result<T, ValueError>,
    ) -> Result<Option<Vec<T>>, ConfigError> {
        self.with(name, |v| parse::parse_list(v, item))
    }
}

/// The raw process value of registered `name`, not necessarily UTF-8 (paths).
pub fn env_os(name: &str) -> Result<Option<OsString>, ConfigError> {
    check_registered(name)?;
    Ok(std::env::var_os(name))
}

/// A path from the process environment (`None` when unset).
pub fn env_path(name: &str) -> Result<Option<PathBuf>, ConfigError> {
    Ok(env_os(name)?.map(PathBuf::from))
}

/// The text of registered `name` in the process environment.
pub fn env_get(name: &str) -> Result<Option<String>, ConfigError> {
    Env::process().raw(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn typed_reads_name_the_variable() {
        let get = with_env(&[
            ("REVERB_RNDV_THRESH", "1m"),
            ("REVERB_PEER_TIMEOUT_MS", "2s"),
            ("REVERB_WAIT_SPIN_US", "7"),
            ("REVERB_RING_SLOTS", "x"),
        ]);
        let env = Env::from_lookup(&get);
        assert_eq!(env.size("REVERB_RNDV_THRESH"), Ok(Some(1 << 20)));
        assert_eq!(env.duration("REVERB_PEER_TIMEOUT_MS"), Ok(Some(Duration::from_secs(2))));
        assert_eq!(env.duration("REVERB_WAIT_SPIN_US"), Ok(Some(Duration::from_micros(7))));
        assert_eq!(env.size("REVERB_LOG_RING_BYTES"), Ok(None));
        assert_eq!(env.positive_duration("REVERB_PEER_TIMEOUT_MS"), Ok(Some(Duration::from_secs(2))));
        let zero = |_: &str| Some("0".to_string());
        let err = Env::from_lookup(&zero).positive_duration("REVERB_DETECT_MS").unwrap_err();
        assert_eq!(err.to_string(), "REVERB_DETECT_MS=\"0\": must be > 0");
        let err = env.int::<usize>("REVERB_RING_SLOTS").unwrap_err();
        assert!(err.to_string().starts_with("REVERB_RING_SLOTS=\"x\": expected"), "{err}");
    }

    #[test]
    #[cfg_attr(debug_assertions, should_panic(expected = "not in"))]
    fn unregistered_names_are_refused() {
        let get = with_env(&[]);
        assert!(Env::from_lookup(&get).raw(concat!("REVERB", "_NOT_A_VARIABLE")).is_err());
    }
}
