//! Transport configuration: `REVERB_*` environment variables (like `UCX_*`), overridable by
//! CLI flags in the binaries.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::api::ProviderKind;
use crate::error::{Result, TransportError};

/// How `wait` behaves while nothing has completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitMode {
    /// Spin until the deadline (lowest latency, burns a core).
    Poll,
    /// Sleep on the OS event at once (futex / completion channel).
    Event,
    /// Spin for `spin`, then sleep.
    Hybrid,
}

impl FromStr for WaitMode {
    type Err = TransportError;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "poll" => Ok(WaitMode::Poll),
            "event" => Ok(WaitMode::Event),
            "hybrid" => Ok(WaitMode::Hybrid),
            other => Err(TransportError::Config(format!(
                "unknown wait mode {other:?} (expected poll, event or hybrid)"
            ))),
        }
    }
}

#[derive(Debug, Clone)]
pub struct TransportConfig {
    /// `REVERB_PROVIDER`: shm (default) or verbs.
    pub provider: ProviderKind,
    /// `REVERB_RNDV_THRESH`: messages of at most this many bytes go eagerly; larger ones by
    /// rendezvous. Also the eager slot payload size.
    pub rndv_thresh: usize,
    /// `REVERB_RING_SLOTS`: eager slots per ordered rank pair (power of two).
    pub ring_slots: usize,
    /// `REVERB_WAIT_MODE`: poll, event or hybrid (default).
    pub wait_mode: WaitMode,
    /// `REVERB_WAIT_SPIN_US`: spin time before sleeping in hybrid mode.
    pub spin: Duration,
    /// `REVERB_PEER_TIMEOUT_MS`: a dead peer is reported within this bound.
    pub peer_timeout: Duration,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            provider: ProviderKind::Shm,
            rndv_thresh: 8192,
            ring_slots: 64,
            wait_mode: WaitMode::Hybrid,
            spin: Duration::from_micros(50),
            peer_timeout: Duration::from_millis(500),
        }
    }
}

fn env_parse<T: FromStr>(name: &str) -> Result<Option<T>>
where
    T::Err: fmt::Display,
{
    match std::env::var(name) {
        Ok(v) => {
            v.trim().parse::<T>().map(Some).map_err(|e| TransportError::Config(format!("{name}={v:?}: {e}")))
        }
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(e) => Err(TransportError::Config(format!("{name}: {e}"))),
    }
}

/// Parses sizes like `8192`, `8k`, `64K`, `1m`, `8M`, `1g`.
pub fn parse_size(s: &str) -> Result<usize> {
    let s = s.trim();
    let (digits, mult) = match s.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let mult = match c.to_ascii_lowercase() {
                'k' => 1usize << 10,
                'm' => 1 << 20,
                'g' => 1 << 30,
                _ => return Err(TransportError::Config(format!("bad size suffix in {s:?}"))),
            };
            (&s[..i], mult)
        }
        _ => (s, 1),
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| TransportError::Config(format!("bad size {s:?}")))
}

impl TransportConfig {
    /// Defaults overridden by any `REVERB_*` variables that are set. Bad values are errors.
    pub fn from_env() -> Result<Self> {
        let mut cfg = TransportConfig::default();
        if let Some(p) = env_parse::<ProviderKind>("REVERB_PROVIDER")? {
            cfg.provider = p;
        }
        if let Ok(v) = std::env::var("REVERB_RNDV_THRESH") {
            cfg.rndv_thresh = parse_size(&v)?;
        }
        if let Some(n) = env_parse::<usize>("REVERB_RING_SLOTS")? {
            cfg.ring_slots = n;
        }
        if let Some(m) = env_parse::<WaitMode>("REVERB_WAIT_MODE")? {
            cfg.wait_mode = m;
        }
        if let Some(us) = env_parse::<u64>("REVERB_WAIT_SPIN_US")? {
            cfg.spin = Duration::from_micros(us);
        }
        if let Some(ms) = env_parse::<u64>("REVERB_PEER_TIMEOUT_MS")? {
            cfg.peer_timeout = Duration::from_millis(ms);
        }
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn validate(&self) -> Result<()> {
        if !self.ring_slots.is_power_of_two() || self.ring_slots < 2 || self.ring_slots > 1 << 16 {
            return Err(TransportError::Config(format!(
                "REVERB_RING_SLOTS={} must be a power of two in 2..=65536",
                self.ring_slots
            )));
        }
        if self.rndv_thresh < 64 || self.rndv_thresh > 1 << 20 {
            return Err(TransportError::Config(format!(
                "REVERB_RNDV_THRESH={} must be in 64..=1M",
                self.rndv_thresh
            )));
        }
        if self.peer_timeout.is_zero() {
            return Err(TransportError::Config("REVERB_PEER_TIMEOUT_MS must be > 0".into()));
        }
        Ok(())
    }
}

impl fmt::Display for TransportConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "REVERB_PROVIDER={}", self.provider)?;
        writeln!(f, "REVERB_RNDV_THRESH={}", self.rndv_thresh)?;
        writeln!(f, "REVERB_RING_SLOTS={}", self.ring_slots)?;
        writeln!(f, "REVERB_WAIT_MODE={:?}", self.wait_mode)?;
        writeln!(f, "REVERB_WAIT_SPIN_US={}", self.spin.as_micros())?;
        write!(f, "REVERB_PEER_TIMEOUT_MS={}", self.peer_timeout.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("2").unwrap(), 2);
        assert_eq!(parse_size("8k").unwrap(), 8192);
        assert_eq!(parse_size("8M").unwrap(), 8 << 20);
        assert!(parse_size("8x").is_err());
        assert!(parse_size("").is_err());
        assert!(parse_size("99999999999999999999g").is_err());
    }
}
