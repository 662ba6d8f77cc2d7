//! The transport's settings ([`TransportConfig`]) and their `REVERB_*` variables.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;
use std::time::Duration;

use super::env::Env;
use super::parse::{parse_enum, ConfigError, ValueError};
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

const WAIT_MODES: &[(&str, WaitMode)] =
    &[("poll", WaitMode::Poll), ("event", WaitMode::Event), ("hybrid", WaitMode::Hybrid)];

/// Whether receives are advertised to their senders (the receiver-advertised rendezvous).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdvertMode {
    /// Where it pays: verbs (one RDMA write instead of the receiver's read) and loopback; not
    /// shm, whose rendezvous is already one copy (measured: the advert's bookkeeping made
    /// 16 KiB messages 1.2x slower), nor tcp (no direct writes).
    Auto,
    /// Every provider that can take direct writes (shm, verbs, loopback).
    On,
    /// Never: rendezvous always by RTS.
    Off,
}

/// What the `auto` provider uses between hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoNet {
    /// Verbs when every rank has a usable RDMA device (and the build has verbs), else tcp.
    Any,
    /// Always tcp.
    Tcp,
    /// Always verbs (an error where it cannot open).
    Verbs,
}

const AUTO_NETS: &[(&str, AutoNet)] =
    &[("any", AutoNet::Any), ("tcp", AutoNet::Tcp), ("verbs", AutoNet::Verbs)];

const ADVERT_MODES: &[(&str, AdvertMode)] =
    &[("auto", AdvertMode::Auto), ("on", AdvertMode::On), ("off", AdvertMode::Off)];

impl FromStr for WaitMode {
    type Err = TransportError;
    fn from_str(s: &str) -> Result<Self> {
        parse_enum(s, WAIT_MODES).map_err(|e| TransportError::Config(format!("wait mode {s:?}: {e}")))
    }
}

/// The transport's settings: defaults, overridden by `REVERB_*` variables and CLI flags.
#[derive(Debug, Clone)]
pub struct TransportConfig {
    /// `REVERB_PROVIDER`: shm (default) or verbs.
    pub provider: ProviderKind,
    /// `REVERB_RNDV_THRESH`: messages of at most this many bytes go eagerly; larger ones by
    /// rendezvous. Also the eager slot payload size.
    pub rndv_thresh: usize,
    /// `REVERB_RING_SLOTS`: verbs eager slots per ordered rank pair (power of two).
    pub ring_slots: usize,
    /// `REVERB_SHM_FIFO_SLOTS`: slots of each rank's shm receive FIFO, shared by all sources
    /// (power of two); receive memory per rank is this times the slot size, whatever the job size.
    pub shm_fifo_slots: usize,
    /// `REVERB_SHM_CMA`: large lent sends on shm are read by the receiver straight from the
    /// sender's memory (cross-memory attach) where the kernel allows it; false stages them.
    pub shm_cma: bool,
    /// `REVERB_SHM_CMA_WRITE`: with `shm_cma`, a progressing sender writes chunks of its
    /// lent send into the receiver (`process_vm_writev`), sharing the copy; false leaves the
    /// receiver to read every chunk.
    pub shm_cma_write: bool,
    /// `REVERB_WAIT_MODE`: poll, event or hybrid (default).
    pub wait_mode: WaitMode,
    /// `REVERB_WAIT_SPIN_US`: spin time before sleeping in hybrid mode.
    pub spin: Duration,
    /// `REVERB_HOST_CPUS` (else Slurm's `SLURM_CPUS_ON_NODE`): the CPUs the job may use on
    /// this host; None: this process's own (its affinity and cgroup quota), which a rank
    /// pinned to one core would read as 1.
    pub host_cpus: Option<u32>,
    /// Not a variable: set when the provider opens, if this host runs more of the job's ranks
    /// than it has CPUs for them (`host_cpus`). Spinning waits then yield the core now and
    /// then (see [`crate::spinwait`]).
    pub oversubscribed: bool,
    /// `REVERB_PEER_TIMEOUT_MS`: a dead peer is reported within this bound.
    pub peer_timeout: Duration,
    /// `REVERB_TCP_ADDR`: the address the tcp provider listens on (unset: `tcp_iface`'s, else
    /// the local address of the bootstrap connection).
    pub tcp_addr: Option<IpAddr>,
    /// `REVERB_TCP_IFACE`: the network interface whose IPv4 address the tcp provider listens on.
    pub tcp_iface: Option<String>,
    /// `REVERB_RNDV_ADVERT`: auto (default), on or off.
    pub rndv_advert: AdvertMode,
    /// `REVERB_AUTO_NET`: what `auto` uses between hosts (any: verbs where usable, else tcp).
    pub auto_net: AutoNet,
    /// `REVERB_HOST_NAME`: this rank's host name for the per-peer choice (unset: the UTS
    /// host name). What a resource manager calls the node, or distinct names to simulate
    /// hosts on one machine.
    pub host_name: Option<String>,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            provider: ProviderKind::AUTO,
            rndv_thresh: 8192,
            ring_slots: 64,
            shm_fifo_slots: 256,
            shm_cma: true,
            shm_cma_write: true,
            wait_mode: WaitMode::Hybrid,
            spin: Duration::from_micros(50),
            host_cpus: None,
            oversubscribed: false,
            peer_timeout: Duration::from_millis(500),
            tcp_addr: None,
            tcp_iface: None,
            rndv_advert: AdvertMode::Auto,
            host_name: None,
            auto_net: AutoNet::Any,
        }
    }
}

impl TransportConfig {
    /// Defaults overridden by any `REVERB_*` variables that are set. Bad values are errors.
    pub fn from_env() -> Result<Self> {
        Self::from_vars(&Env::process())
    }

    /// Like [`TransportConfig::from_env`], reading `env`.
    pub fn from_vars(env: &Env<'_>) -> Result<Self> {
        let mut cfg = TransportConfig::default();
        let provider = env.with("REVERB_PROVIDER", |v| {
            v.trim()
                .parse::<ProviderKind>()
                .map_err(|_| ValueError::expected(crate::providers::names_for_humans()))
        })?;
        if let Some(p) = provider {
            cfg.provider = p;
        }
        if let Some(n) = env.size("REVERB_RNDV_THRESH")? {
            cfg.rndv_thresh = n;
        }
        if let Some(n) = env.int::<usize>("REVERB_RING_SLOTS")? {
            cfg.ring_slots = n;
        }
        if let Some(n) = env.int::<usize>("REVERB_SHM_FIFO_SLOTS")? {
            cfg.shm_fifo_slots = n;
        }
        if let Some(b) = env.bool("REVERB_SHM_CMA")? {
            cfg.shm_cma = b;
        }
        if let Some(b) = env.bool("REVERB_SHM_CMA_WRITE")? {
            cfg.shm_cma_write = b;
        }
        if let Some(m) = env.choice("REVERB_WAIT_MODE", WAIT_MODES)? {
            cfg.wait_mode = m;
        }
        if let Some(spin) = env.duration("REVERB_WAIT_SPIN_US")? {
            cfg.spin = spin;
        }
        cfg.host_cpus = match env.int::<u32>("REVERB_HOST_CPUS")? {
            Some(0) => return Err(ConfigError::out_of_range("REVERB_HOST_CPUS", "0", "must be > 0").into()),
            Some(n) => Some(n),
            // Slurm's count for the node: a task bound to its own cores would see only those.
            None => env
                .foreign("SLURM_CPUS_ON_NODE")
                .and_then(|v| v.trim().parse::<u32>().ok())
                .filter(|&n| n > 0),
        };
        if let Some(t) = env.duration("REVERB_PEER_TIMEOUT_MS")? {
            cfg.peer_timeout = t;
        }
        if let Some(n) = env.choice("REVERB_AUTO_NET", AUTO_NETS)? {
            cfg.auto_net = n;
        }
        if let Some(m) = env.choice("REVERB_RNDV_ADVERT", ADVERT_MODES)? {
            cfg.rndv_advert = m;
        }
        cfg.host_name = env.with("REVERB_HOST_NAME", |v| Ok(v.trim().to_string()))?.filter(|v| !v.is_empty());
        cfg.tcp_addr = env.with("REVERB_TCP_ADDR", |v| {
            v.trim().parse::<IpAddr>().map_err(|_| ValueError::expected("an IPv4 or IPv6 address"))
        })?;
        cfg.tcp_iface = env.with("REVERB_TCP_IFACE", |v| Ok(v.trim().to_string()))?.filter(|v| !v.is_empty());
        cfg.validate()?;
        Ok(cfg)
    }

    /// The size above which a receive is advertised, for a provider that takes direct writes
    /// (`pays`: whether `auto` turns adverts on for it); `usize::MAX` when adverts are off.
    pub fn advert_thresh(&self, pays: bool) -> usize {
        match (self.rndv_advert, pays) {
            (AdvertMode::On, _) | (AdvertMode::Auto, true) => self.rndv_thresh,
            _ => usize::MAX,
        }
    }

    /// Checks the limits: `ring_slots` and `shm_fifo_slots` powers of two in 2..=65536, `rndv_thresh` in 64..=1 MiB,
    /// a nonzero `peer_timeout`. [`TransportError::Config`] naming the variable otherwise.
    pub fn validate(&self) -> Result<()> {
        if !self.ring_slots.is_power_of_two() || self.ring_slots < 2 || self.ring_slots > 1 << 16 {
            return Err(TransportError::Config(format!(
                "REVERB_RING_SLOTS={} must be a power of two in 2..=65536",
                self.ring_slots
            )));
        }
        if !self.shm_fifo_slots.is_power_of_two() || self.shm_fifo_slots < 2 || self.shm_fifo_slots > 1 << 16
        {
            return Err(TransportError::Config(format!(
                "REVERB_SHM_FIFO_SLOTS={} must be a power of two in 2..=65536",
                self.shm_fifo_slots
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
        writeln!(f, "REVERB_SHM_FIFO_SLOTS={}", self.shm_fifo_slots)?;
        writeln!(f, "REVERB_SHM_CMA={}", u8::from(self.shm_cma))?;
        writeln!(f, "REVERB_SHM_CMA_WRITE={}", u8::from(self.shm_cma_write))?;
        writeln!(f, "REVERB_WAIT_MODE={:?}", self.wait_mode)?;
        writeln!(f, "REVERB_WAIT_SPIN_US={}", self.spin.as_micros())?;
        writeln!(f, "REVERB_RNDV_ADVERT={:?}", self.rndv_advert)?;
        writeln!(f, "REVERB_AUTO_NET={:?}", self.auto_net)?;
        write!(f, "REVERB_PEER_TIMEOUT_MS={}", self.peer_timeout.as_millis())?;
        if let Some(a) = self.tcp_addr {
            write!(f, "\nREVERB_TCP_ADDR={a}")?;
        }
        if let Some(i) = &self.tcp_iface {
            write!(f, "\nREVERB_TCP_IFACE={i}")?;
        }
        if let Some(h) = &self.host_name {
            write!(f, "\nREVERB_HOST_NAME={h}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(pairs: &'static [(&'static str, &'static str)]) -> Result<TransportConfig> {
        let get = move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string());
        TransportConfig::from_vars(&Env::from_lookup(&get))
    }

    #[test]
    fn variables_override_defaults_in_the_shared_grammar() {
        let cfg = read(&[
            ("REVERB_RNDV_THRESH", "1m"),
            ("REVERB_WAIT_MODE", "event"),
            ("REVERB_WAIT_SPIN_US", "20"),
            ("REVERB_PEER_TIMEOUT_MS", "2s"),
            ("REVERB_SHM_CMA_WRITE", "0"),
        ])
        .unwrap();
        assert_eq!(cfg.rndv_thresh, 1 << 20);
        assert!(cfg.shm_cma && !cfg.shm_cma_write, "the reads stay, the sender's writes go");
        assert!(read(&[]).unwrap().shm_cma_write);
        assert_eq!(cfg.wait_mode, WaitMode::Event);
        assert_eq!(cfg.spin, Duration::from_micros(20));
        assert_eq!(cfg.peer_timeout, Duration::from_secs(2));
        assert_eq!(read(&[]).unwrap().rndv_thresh, 8192);
    }

    #[test]
    fn bad_values_name_the_variable() {
        let err = read(&[("REVERB_WAIT_MODE", "sleepy")]).unwrap_err().to_string();
        assert_eq!(err, "REVERB_WAIT_MODE=\"sleepy\": expected one of poll, event, hybrid");
        assert!(read(&[("REVERB_RNDV_THRESH", "2m")]).is_err(), "above 1M");
        assert!(read(&[("REVERB_RING_SLOTS", "3")]).is_err(), "not a power of two");
        assert!(read(&[("REVERB_SHM_FIFO_SLOTS", "96")]).is_err(), "not a power of two");
        assert_eq!(read(&[("REVERB_SHM_FIFO_SLOTS", "1024")]).unwrap().shm_fifo_slots, 1024);
        assert!(read(&[("REVERB_PEER_TIMEOUT_MS", "0")]).is_err());
        assert!(read(&[("REVERB_HOST_CPUS", "0")]).is_err());
        assert_eq!(read(&[("REVERB_HOST_CPUS", "16")]).unwrap().host_cpus, Some(16));
        assert_eq!(read(&[("SLURM_CPUS_ON_NODE", "8")]).unwrap().host_cpus, Some(8));
        let both = read(&[("REVERB_HOST_CPUS", "4"), ("SLURM_CPUS_ON_NODE", "8")]);
        assert_eq!(both.unwrap().host_cpus, Some(4), "ours wins");
        assert_eq!(read(&[]).unwrap().host_cpus, None);
        assert!(read(&[("REVERB_PROVIDER", "tcpx")]).is_err());
        assert!(read(&[("REVERB_TCP_ADDR", "10.0.0")]).is_err());
        let tcp = read(&[("REVERB_TCP_ADDR", "127.0.0.2"), ("REVERB_TCP_IFACE", "lo")]).unwrap();
        assert_eq!(tcp.tcp_addr, Some(IpAddr::from([127, 0, 0, 2])));
        assert_eq!(tcp.tcp_iface.as_deref(), Some("lo"));
        assert!(read(&[("REVERB_RNDV_ADVERT", "sometimes")]).is_err());
    }

    #[test]
    fn adverts_where_they_pay_unless_forced() {
        let auto = read(&[]).unwrap();
        assert_eq!((auto.advert_thresh(true), auto.advert_thresh(false)), (8192, usize::MAX));
        let on = read(&[("REVERB_RNDV_ADVERT", "on")]).unwrap();
        assert_eq!((on.advert_thresh(true), on.advert_thresh(false)), (8192, 8192));
        let off = read(&[("REVERB_RNDV_ADVERT", "off")]).unwrap();
        assert_eq!((off.advert_thresh(true), off.advert_thresh(false)), (usize::MAX, usize::MAX));
    }
}
