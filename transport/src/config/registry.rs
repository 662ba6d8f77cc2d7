//! The catalogue of every `REVERB_*` environment variable: name, default, owner, meaning.
//!
//! A variable that any source file or script reads or sets is listed here, test-only and
//! fault-injection ones too (marked by [`Audience`]); `transport/tests/config_registry.rs`
//! fails when the sources and this table disagree. `reverb info --config` prints it.

use std::fmt;

use super::bounds::{bound_of, Bound};
use super::parse::{parse_bool, parse_duration, parse_enum, parse_int, parse_size, TimeUnit, ValueError};

/// The layer (crate or tool) that reads a variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    /// The transport core (`reverb-transport`).
    Transport,
    /// The verbs provider.
    Verbs,
    /// Job discovery and the TCP rendezvous.
    Bootstrap,
    /// The message-logging protocols (`reverb-logger`).
    Logger,
    /// The logger cores (the processes that hold logs).
    LoggerCore,
    /// The runtime library (`reverb`).
    Runtime,
    /// `reverb run`, the launcher.
    Launcher,
    /// The benchmarks.
    Bench,
    /// Build scripts.
    Build,
    /// The test suites.
    Test,
    /// CI and comparison scripts.
    Ci,
}

impl Layer {
    /// The layer's name as `reverb info --config` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::Transport => "transport",
            Layer::Verbs => "verbs",
            Layer::Bootstrap => "bootstrap",
            Layer::Logger => "logger",
            Layer::LoggerCore => "logger-core",
            Layer::Runtime => "runtime",
            Layer::Launcher => "launcher",
            Layer::Bench => "bench",
            Layer::Build => "build",
            Layer::Test => "test",
            Layer::Ci => "ci",
        }
    }
}

/// Who sets a variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// A user tunes it.
    User,
    /// `reverb run` (or a resource manager) sets it for ranks and logger cores.
    Launcher,
    /// Fault injection for tests and campaigns (honoured only by `fault-injection` builds).
    Fault,
    /// Only the test suites set or read it.
    Test,
    /// Read by a build script or a CI/comparison shell script, not by the runtime.
    Tooling,
}

impl Audience {
    /// The audience's name as `reverb info --config` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            Audience::User => "user",
            Audience::Launcher => "launcher",
            Audience::Fault => "fault",
            Audience::Test => "test",
            Audience::Tooling => "tooling",
        }
    }
}

/// One registered variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Var {
    /// The full name, `REVERB_...`.
    pub name: &'static str,
    /// The default as text; `""` when unset means "off" or "none".
    pub default: &'static str,
    /// The layer that reads it.
    pub layer: Layer,
    /// Who sets it.
    pub audience: Audience,
    /// The value's form: `size`, `ms`, `s`, `us`, `bool`, `int`, `a|b|c`, `list`, `path`, `text`.
    pub form: &'static str,
    /// One line: what it does.
    pub meaning: &'static str,
}

impl fmt::Display for Var {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({}, {})", self.name, self.layer.as_str(), self.audience.as_str())
    }
}

impl Var {
    /// Checks `value` against the variable's form (sizes, durations, booleans, whole numbers
    /// and word choices; free text always passes) and a numeric one against its [`Bound`].
    pub fn check(&self, value: &str) -> Result<(), ValueError> {
        let bound = self.bound();
        let outside = |b: Bound| ValueError::expected(format!("a value in {}", b.describe(self.form)));
        let unit = match self.form {
            "us" => Some(TimeUnit::Micros),
            "ms" => Some(TimeUnit::Millis),
            "s" => Some(TimeUnit::Seconds),
            _ => None,
        };
        if let Some(unit) = unit {
            let d = parse_duration(value, unit)?;
            return match bound {
                Some(b) if !b.contains_duration(d) => Err(outside(b)),
                _ => Ok(()),
            };
        }
        let number = match self.form {
            "size" => parse_size(value)? as u64,
            "int" => parse_int::<u64>(value)?,
            "bool" => return parse_bool(value).map(drop),
            words if words.contains('|') => {
                let choices: Vec<(&str, ())> = words.split('|').map(|w| (w, ())).collect();
                return parse_enum(value, &choices);
            }
            _ => return Ok(()),
        };
        match bound {
            Some(b) if !b.contains(number) => Err(outside(b)),
            _ => Ok(()),
        }
    }

    /// Whether the form is a number (a count, a size or a duration): those have a [`Bound`].
    pub fn is_numeric(&self) -> bool {
        matches!(self.form, "int" | "size" | "us" | "ms" | "s")
    }

    /// The allowed range of a numeric variable.
    pub fn bound(&self) -> Option<Bound> {
        bound_of(self.name)
    }

    /// The allowed range as text (`2..=64k`, `1ms..=1h`), `""` for a non-numeric variable.
    pub fn bound_text(&self) -> String {
        self.bound().map(|b| b.describe(self.form)).unwrap_or_default()
    }
}

/// The registered variable called `name`.
pub fn lookup(name: &str) -> Option<&'static Var> {
    VARS.iter().find(|v| v.name == name)
}

const fn var(
    name: &'static str,
    default: &'static str,
    layer: Layer,
    audience: Audience,
    form: &'static str,
    meaning: &'static str,
) -> Var {
    Var { name, default, layer, audience, form, meaning }
}

use Audience::{Fault, Launcher as Set, Test as T, Tooling, User};
use Layer::*;

/// Every `REVERB_*` variable, grouped by layer.
#[rustfmt::skip]
pub static VARS: &[Var] = &[
    // transport
    var("REVERB_PROVIDER", "auto", Transport, User, "auto|shm|verbs|tcp|loopback", "provider to open (also --provider): auto = shm for peers on this host, tcp for the others; loopback runs ranks as threads of one process"),
    var("REVERB_RNDV_THRESH", "8k", Transport, User, "size", "largest eager message (also the eager slot payload), 64..=1M; must match across the job"),
    var("REVERB_RNDV_ADVERT", "auto", Transport, User, "auto|on|off", "advertise posted receives to their senders (one direct write instead of RTS + read + FIN); auto: verbs and loopback, not shm (its rendezvous is one copy already) nor tcp"),
    var("REVERB_RING_SLOTS", "64", Transport, User, "int", "verbs: the most eager credits (shared-receive-queue slots) one peer may hold, a power of two in 2..=65536; must match across the job"),
    var("REVERB_SHM_CMA", "1", Transport, User, "bool", "shm: the receiver of a large lent send (MPI's) reads it straight from the sender's memory with process_vm_readv where the kernel allows it (a probe per peer says so); 0 stages it in shared memory (two copies)"),
    var("REVERB_SHM_CMA_WRITE", "1", Transport, User, "bool", "shm, with REVERB_SHM_CMA: a sender that is progressing writes chunks of its large lent send into the receiver's buffer with process_vm_writev, sharing the copy; 0 leaves every chunk to the receiver's reads (as Valgrind's memcheck needs: it does not see another process write a rank's memory)"),
    var("REVERB_SHM_FIFO_SLOTS", "256", Transport, User, "int", "shm: slots of each rank's receive FIFO (shared by all sources), a power of two in 2..=65536; must match across the job"),
    var("REVERB_WAIT_MODE", "hybrid", Transport, User, "poll|event|hybrid", "how wait idles: spin, sleep on the OS event, or spin then sleep"),
    var("REVERB_WAIT_SPIN_US", "50", Transport, User, "us", "hybrid wait: spin this long before sleeping"),
    var("REVERB_HOST_CPUS", "SLURM_CPUS_ON_NODE, else this process's CPUs", Transport, Set, "int", "CPUs the job may use on this host (reverb run sets its own, before it pins any rank): more of the job's ranks on the host than these, and waits yield instead of spinning; a rank pinned to one core still counts them all"),
    var("REVERB_PEER_TIMEOUT_MS", "500", Transport, User, "ms", "a dead peer is reported within this bound (> 0)"),
    var("REVERB_LOG_LEVEL", "info", Transport, User, "filter", "diagnostics on stderr: error|warn|info|debug|trace, or per module (reverb_logger=debug,info)"),
    var("REVERB_TCP_ADDR", "the bootstrap connection's local address", Transport, User, "text", "tcp provider: the IP address it listens on (overrides REVERB_TCP_IFACE)"),
    var("REVERB_AUTO_NET", "any", Transport, User, "any|tcp|verbs", "what the auto provider uses between hosts: any = verbs where every rank has a usable RDMA device, else tcp"),
    var("REVERB_HOST_NAME", "the UTS host name", Transport, User, "text", "this rank's host name for the auto provider's per-peer choice (a resource manager's node name; distinct names simulate hosts)"),
    var("REVERB_TCP_IFACE", "", Transport, User, "text", "tcp provider: listen on this network interface's IPv4 address (e.g. eth0)"),
    var("REVERB_OFI_PROVIDER", "shm", Transport, User, "shm|tcp", "libfabric provider reverb: what carries its endpoints (shm: this host's; tcp: any host's; every endpoint of a job alike); unset: FI_REVERB_PROVIDER, else shm"),
    var("REVERB_OFI_SERVICE_SCOPE", "", Transport, User, "text", "libfabric provider reverb: a word added to the names its servers publish their addresses under (/dev/shm/reverb-svc.*), so two test runs on the same service ports on one host stay apart; empty: none"),
    // verbs provider
    var("REVERB_VERBS_DEVICE", "", Verbs, User, "list", "RDMA device, or a comma list where node n uses entry n % len (unset: the first device)"),
    var("REVERB_VERBS_PORT", "1", Verbs, User, "int", "HCA port number"),
    var("REVERB_VERBS_GID_INDEX", "", Verbs, User, "int", "GID table index (unset: RoCE v2 with an IPv4 address, or 0 on InfiniBand)"),
    var("REVERB_VERBS_TIMEOUT", "14", Verbs, User, "int", "RC local ACK timeout exponent (4.096 us * 2^n), at most 31"),
    var("REVERB_VERBS_RETRY", "6", Verbs, User, "int", "RC retry count, at most 6 so a dead peer is always reported"),
    var("REVERB_VERBS_SRQ_DEPTH", "512", Verbs, User, "int", "eager receive slots in the shared receive queue, split evenly between peers (at most REVERB_RING_SLOTS, at least 1 each); must match across the job"),
    var("REVERB_VERBS_PID_WATCH", "1", Verbs, User, "bool", "0: no pidfd shortcut for same-kernel peers; death found by RC retries only"),
    var("REVERB_VERBS_CONNECT", "all", Verbs, User, "all|ondemand", "all: every peer connected at open; ondemand: a peer's RC QP is made on first traffic to it (wireup over UD), so the target of a first put/get must call progress; must match across the job"),
    var("REVERB_VERBS_CONNECT_TIMEOUT_MS", "10000", Verbs, User, "ms", "a peer that answers no connection request this long is dead (it answers from its progress; at least REVERB_PEER_TIMEOUT_MS)"),
    // bootstrap (job discovery and rendezvous)
    var("REVERB_RANK", "", Bootstrap, Set, "int", "this process's rank (with REVERB_SIZE; else Slurm, Open MPI or PMI variables)"),
    var("REVERB_SIZE", "", Bootstrap, Set, "int", "number of ranks in the job"),
    var("REVERB_NODE", "rank / ranks per node", Bootstrap, Set, "int", "this rank's node index"),
    var("REVERB_LOCAL_RANK", "rank % ranks per node", Bootstrap, Set, "int", "this rank's index on its node (also its logger lane)"),
    var("REVERB_RANKS_PER_NODE", "the job size", Bootstrap, Set, "int", "ranks on each node (unset: the whole job is one node)"),
    var("REVERB_JOB_ID", "hash of root and token", Bootstrap, Set, "text", "job name for shared-memory segments, 1-64 of [A-Za-z0-9._-]"),
    var("REVERB_INCARNATION", "0", Bootstrap, Set, "int", "how many times this rank was respawned; > 0 rejoins a running job"),
    var("REVERB_ROOT", "", Bootstrap, Set, "text", "host:port of the bootstrap rendezvous server"),
    var("REVERB_JOB_TOKEN", "", Bootstrap, Set, "text", "job secret presented on every bootstrap connection"),
    var("REVERB_BOOT_SERVER", "", Bootstrap, Set, "external", "external: the launcher hosts the rendezvous; unset: rank 0 starts it at REVERB_ROOT"),
    var("REVERB_BOOT_TIMEOUT_S", "60", Bootstrap, User, "s", "bound on the rendezvous connect and each bootstrap collective (> 0, fractions allowed)"),
    // logger: message-logging protocols
    var("REVERB_LOG", "none", Logger, User, "none|pessimistic-rb|pessimistic-sb|causal", "message-logging protocol"),
    var("REVERB_LOG_UNIT", "node", Logger, User, "node|rank|team", "failure unit: what fails and rolls back together"),
    var("REVERB_LOG_CAML", "0", Logger, User, "bool", "collective-aware logging: a broadcast's payload is logged once, at its root; an all-reduce contribution not sent to the root is logged until the sum is known"),
    var("REVERB_LOG_TEAMS", "", Logger, User, "text", "team-based logging: teams such as 0-3,4-7 (or @file); sets the unit to team"),
    var("REVERB_LOG_RING_BYTES", "8m", Logger, User, "size", "data bytes of each log ring a rank hosts (a multiple of 8)"),
    var("REVERB_LOG_REORDER_WINDOW", "4096", Logger, User, "int", "early (out-of-order) messages buffered per peer"),
    var("REVERB_LOG_MAX_MESSAGE", "4m", Logger, User, "size", "largest application payload in bytes"),
    var("REVERB_LOG_SEND_LOG_BYTES", "256m", Logger, User, "size", "bytes of sender-based payload log kept before a checkpoint empties it"),
    var("REVERB_LOG_DET_LOG_ENTRIES", "1048576", Logger, User, "int", "determinants kept in the determinant log; a checkpoint empties it"),
    var("REVERB_LOG_MAX_UNSTABLE", "65536", Logger, User, "int", "unstable determinants before the protocol pushes back"),
    var("REVERB_LOG_PASS_THROUGH", "1", Logger, User, "bool", "with REVERB_LOG=none, messages go as the provider's own (no envelope) where it can peek; 0 keeps the envelopes"),
    var("REVERB_LOG_DURABLE_TIMEOUT_MS", "10000", Logger, User, "ms", "bound on waiting for a log write to become durable (> 0)"),
    // logger cores (one per node, started by reverb run --logger)
    var("REVERB_LOGGER", "off", LoggerCore, User, "off|none|dedicated|shared-pinned|shared-unpinned", "logger core placement (reverb run --logger); logger cores idle by it"),
    var("REVERB_LOGGER_SEGMENT", "", LoggerCore, Set, "path", "base path of the node's logger segment (<base>.ctl, <base>.detq); set: ranks attach"),
    var("REVERB_LOGGER_LANES", "ranks per node", LoggerCore, Set, "int", "payload lanes in the node segment (the node's rank count)"),
    var("REVERB_LOGGER_LANE_BYTES", "1m", LoggerCore, User, "size", "bytes per payload lane"),
    var("REVERB_LOGGER_DETQ_ENTRIES", "65536", LoggerCore, User, "int", "entries of the node determinant queue"),
    var("REVERB_LOGGER_RING_BYTES", "16m", LoggerCore, User, "size", "data bytes of each log ring a logger core hosts"),
    var("REVERB_HEARTBEAT_MS", "400", LoggerCore, User, "ms", "a buddy logger whose heartbeat stops this long is dead (>= 20)"),
    var("REVERB_LOGGER_CPU", "", LoggerCore, Set, "int", "OS cpu the logger core pins itself to (unset: not pinned)"),
    var("REVERB_LOGGER_STOP_ON_EOF", "0", LoggerCore, Set, "bool", "1: drain, flush and exit when stdin (the launcher's pipe) ends"),
    var("REVERB_LOGGER_DUMP_DIR", "", LoggerCore, T, "path", "directory for each hosted ring's image at exit (tests, forensics)"),
    var("REVERB_LOGGER_STALL_MS", "5000", LoggerCore, User, "ms", "a logger loop standing still this long is called gone by its ranks"),
    var("REVERB_LOGGER_ATTACH_TIMEOUT_S", "30", LoggerCore, User, "s", "how long a rank waits for its node's logger segment to appear"),
    var("REVERB_LOGGER_RESPAWN", "0", LoggerCore, Set, "int", "nonzero: failed nodes are respawned, so a dead related logger is awaited back"),
    var("REVERB_LOGGER_REJOIN_TIMEOUT_S", "30", LoggerCore, User, "s", "how long a dead related logger is awaited back (and a respawned one awaits hellos)"),
    var("REVERB_RSH", "ssh", Launcher, User, "command", "reverb run --hosts: how a host's launcher is started (`REVERB_RSH HOST reverb run ...`), as Open MPI's plm_rsh_agent"),
    var("REVERB_AGENT_HEARTBEAT_MS", "500", Launcher, User, "ms", "how often a host's agent and the job's controller tell each other they are alive"),
    var("REVERB_AGENT_TIMEOUT_S", "10", Launcher, User, "s", "an agent (or the controller) silent this long is lost: its host's ranks move to a spare (more than twice the heartbeat)"),
    var("REVERB_MPI_WIN_SHM", "1", Runtime, User, "bool", "reverb's MPI: MPI_Win_allocate puts each rank's window in /dev/shm, where the ranks on its host map it and apply their operations themselves; 0 keeps it private, reached as a rank on another host reaches it (the provider's puts and gets without logging: to measure or test that path on one host); must match across the job"),
    var("REVERB_MPI_LIB", "", Launcher, User, "path", "reverb run --mpi: reverb's MPI library (default: libmpich.so beside the reverb executable)"),
    var("REVERB_FAULT_AGENT", "", Launcher, Fault, "list", "HOST@MS,..: the agent of HOST SIGKILLs itself alone MS ms after it starts"),
    var("REVERB_LOGGER_EXE", "this reverb binary", Launcher, T, "path", "binary the launcher runs as logger-core"),
    var("REVERB_LOGGER_FAULT_STARTUP", "", LoggerCore, Fault, "int", "the logger core of this node SIGKILLs itself in the start-up exchange (first incarnation)"),
    // runtime and checkpoints
    var("REVERB_REDUNDANCY", "", Runtime, User, "degree", "partial redundancy: the job's processes are 1..=3 copies of REVERB_VIRTUAL_RANKS ranks (1.5: every other rank has a replica); a send goes to every copy, the first copy of a message to arrive is delivered (failure-free so far)"),
    var("REVERB_VIRTUAL_RANKS", "", Runtime, User, "int", "with REVERB_REDUNDANCY: the application's ranks (the job's processes are their copies)"),
    var("REVERB_OBJECT_RANKS", "", Runtime, Set, "list", "over-decomposition (reverb run --objects): the ranks this process hosts, one thread each (the apps run each as its own rank)"),
    var("REVERB_OBJECT_CPU", "", Runtime, Set, "int", "with REVERB_OBJECT_RANKS: the core the objects' threads are pinned to (their processing element)"),
    var("REVERB_OBJECT_HOME_CPU", "", Runtime, Set, "int", "a parallel recovery's helper process: the objects' home core, where each object moves after its first checkpoint"),
    var("REVERB_CKPT", "what the node count allows", Runtime, User, "off|local|buddy|parity|rs", "checkpoint levels (unset: rs from 4 nodes, buddy from 2, none on one node)"),
    var("REVERB_CKPT_SLOT_BYTES", "4m", Runtime, User, "size", "bytes of each in-memory checkpoint slot"),
    var("REVERB_DETECT_MS", "50", Runtime, User, "ms", "how long a receive waits before it checks for dead peers (> 0)"),
    var("REVERB_DETECT_GRACE_MS", "2000", Runtime, User, "ms", "grace for the launcher to fail a dead rank's node before the error is final (> 0)"),
    var("REVERB_REJOIN_TIMEOUT_MS", "30000", Runtime, User, "ms", "bound on waiting for a dead rank to rejoin (> 0)"),
    var("REVERB_RECV_TIMEOUT_MS", "120000", Runtime, User, "ms", "bound on one receive with every peer alive (> 0)"),
    var("REVERB_RUNTIME_REPORT", "", Runtime, User, "path", "directory for per-rank JSON reports and the apps' checksum"),
    var("REVERB_FAULT", "", Runtime, Fault, "list", "RANK:SENDS[@INCARNATION],..: that rank SIGKILLs itself after SENDS sends"),
    var("REVERB_FAULT_CKPT", "", Runtime, Fault, "text", "RANK:EPOCH:STAGE: SIGKILL inside checkpoint EPOCH at STAGE"),
    var("REVERB_FAULT_INIT", "", Runtime, Fault, "list", "RANK:STEP[:logger|:late][@retry],..: SIGKILL inside Runtime::init before STEP"),
    var("REVERB_FAULT_GC", "", Runtime, Fault, "list", "RANK:EPOCH[:late],..: SIGKILL at the log GC after checkpoint EPOCH"),
    var("REVERB_FAULT_FINALIZE", "", Runtime, Fault, "list", "RANK[:MS],..: hold that rank's finalize MS ms before the final barrier"),
    var("REVERB_FAULT_FINALIZED", "", Runtime, Fault, "list", "RANK[:MS],..: SIGKILL MS ms after that rank's finalize completed"),
    // benchmarks and build
    var("REVERB_BENCH_CORES", "", Bench, User, "list", "criterion shm bench: cpus to pin its two ranks to, e.g. 2,3"),
    var("REVERB_BENCH_BOOT_DIR", "", Bench, Set, "path", "set by reverb bench boot for its ranks: the directory each writes its bootstrap timestamps to"),
    var("REVERB_BENCH_MEM_DIR", "", Bench, Set, "path", "set by reverb bench mem for its ranks: the directory each writes its memory report to"),
    var("REVERB_BENCH_MEM_MUTE", "", Bench, Fault, "int", "reverb bench mem (fault-injection builds): this rank posts its receives but never sends"),
    var("REVERB_NO_ISAL", "", Build, Tooling, "bool", "1: the rs bench's build script skips ISA-L as if it were missing"),
    var("REVERB_MPICH_INCLUDE", "/usr/include/x86_64-linux-gnu/mpich", Build, Tooling, "path", "reverb-mpi's build: the directory of MPICH's mpi.h and mpi_proto.h, whose ABI the library takes"),
    var("REVERB_ISAL_SKIP_REASON", "", Build, Tooling, "text", "set by benches/build.rs at compile time: why ISA-L is not used"),
    // tests
    var("REVERB_TEST_TIME_SCALE", "1", Test, T, "int", "multiplies the multi-process tests' time bounds (slow VMs)"),
    var("REVERB_TEST_CHILD", "", Test, T, "text", "marks a re-executed testkit child process"),
    var("REVERB_TEST_ROLE", "", Test, T, "text", "role of a re-executed test binary (rank, logger, ...)"),
    var("REVERB_TEST_HOSTS", "", Test, T, "list", "simulated hosts (ci/hosts.sh) to run a test job's ranks on, in blocks; the test runs in the first"),
    var("REVERB_TEST_HOST_NAMES", "", Test, T, "list", "host names (REVERB_HOST_NAME) to give a test job's ranks, in blocks: hosts for the auto provider on one machine"),
    var("REVERB_TEST_SEED", "1592590340", Test, T, "int", "seed of the logger protocol tests' random schedules (default 0x5eed0004)"),
    var("REVERB_DETQ_ROLE", "", Test, T, "text", "role of a determinant-queue test process"),
    var("REVERB_DETQ_PATH", "", Test, T, "path", "shared queue path of the determinant-queue test"),
    var("REVERB_BLESS", "", Test, T, "flag", "capi's header test rewrites include/reverb.h from the source instead of comparing"),
    var("REVERB_RESPAWN_TEST_OUT", "", Test, T, "path", "marks a respawn test rank and names its result directory"),
    var("REVERB_STALE_TEST", "", Test, T, "bool", "runs the stale-incarnation rejoin test's rank body"),
    var("REVERB_FI_TEST_ROLE", "", Test, T, "text", "role of a re-executed libfabric provider test process (server, client)"),
    var("REVERB_FI_TEST_DIR", "", Test, T, "path", "scratch directory the libfabric provider test's processes share"),
    // CI and comparison scripts
    var("REVERB_BIN", "", Ci, Tooling, "path", "scripts/compare-*.sh, ci/vm/two-vm-job.sh, the examples' run_examples test: use this reverb binary instead of building one"),
    var("REVERB_CI_FULL", "0", Ci, Tooling, "bool", "ci/verbs-suite.sh: 1 runs every verbs suite across the two rxe hosts too (the test command runs those about a peer's death or connection there)"),
    var("REVERB_MPICH_TESTS", "", Ci, Tooling, "path", "ci/mpich-suite.sh, ci/mpich-hosts.sh: MPICH's own test suite (with its run.sh); default ../shared/external/mpich-tests beside the clone (skipped when neither)"),
    var("REVERB_MPICH_SHARDS", "2", Ci, Tooling, "int", "ci/mpich-suite.sh: lists of MPICH's tests run at once (the mem= and long ones run alone after)"),
    var("REVERB_CHAOS_TRIALS", "8", Ci, Tooling, "int", "ci/chaos-hosts.sh: trials of the campaign across hosts (ci/chaos-phases.sh: 36)"),
    var("REVERB_CHAOS_SEED", "", Ci, Tooling, "int", "ci/chaos-hosts.sh: the campaign's seed (unset: random; printed either way; ci/chaos-phases.sh: 2)"),
    var("REVERB_CHAOS_JOBS", "2", Ci, Tooling, "int", "ci/chaos-phases.sh: trials run at once"),
    var("REVERB_CHAOS_TIMEOUT", "90", Ci, Tooling, "int", "ci/chaos-phases.sh: bound on each trial's job, in seconds"),
    var("REVERB_CHAOS_KINDS", "host,net-cut,agent,host-in-recovery", Ci, Tooling, "list", "ci/chaos-hosts.sh: the host fault kinds to cycle through"),
    var("REVERB_HOSTS_DIR", "/run/reverb-hosts", Ci, Tooling, "path", "ci/hosts.sh: where the simulated hosts' state (namespace holders, addresses) lives"),
    var("REVERB_HOSTS_NET", "10.77.0", Ci, Tooling, "text", "ci/hosts.sh: the first three octets of the simulated hosts' addresses"),
    var("REVERB_SLURM_DIR", "/run/reverb-slurm", Ci, Tooling, "path", "ci/slurm.sh: the throwaway Slurm cluster's config, state, logs and pids"),
    var("REVERB_SLURM_CTL", "sctl", Ci, Tooling, "text", "ci/slurm.sh: the simulated host slurmctld runs in"),
    var("REVERB_SLURM_CPUS", "4", Ci, Tooling, "int", "ci/slurm.sh: CPUs each Slurm node offers, whatever the machine has"),
    var("REVERB_SLURM_TIMEOUT", "30", Ci, Tooling, "int", "ci/slurm.sh: seconds up and restart wait for the nodes to be idle"),
    var("REVERB_VM_KERNEL", "6.1", Ci, Tooling, "6.1|6.12|auto", "ci/rxe-vm.sh: guest kernel series"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_well_formed() {
        let mut names: Vec<&str> = VARS.iter().map(|v| v.name).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len(), "a variable is listed twice");
        for v in VARS {
            assert!(v.name.starts_with("REVERB_") && !v.name.ends_with('_'), "{}", v.name);
            assert!(v.name.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'));
            assert!(!v.meaning.is_empty() && !v.meaning.contains('\n'), "{}", v.name);
        }
        assert_eq!(lookup("REVERB_PROVIDER").map(|v| v.default), Some("auto"));
        for v in VARS.iter().filter(|v| !v.default.is_empty() && !v.default.contains(' ')) {
            assert_eq!(v.check(v.default), Ok(()), "{}: the default does not fit the form", v.name);
        }
        assert!(lookup("REVERB_NOPE").is_none());
    }

    #[test]
    fn every_numeric_variable_has_a_bound_that_holds_its_default() {
        for v in VARS {
            assert_eq!(v.is_numeric(), v.bound().is_some(), "{}: a bound iff numeric", v.name);
        }
        for (name, bound) in super::super::bounds::BOUNDS {
            assert!(lookup(name).is_some(), "{name} is bounded but not registered");
            assert!(bound.min <= bound.max, "{name}");
        }
        let slots = lookup("REVERB_RING_SLOTS").map(|v| (v.check("1"), v.check("65536"), v.check("65537")));
        assert!(matches!(slots, Some((Err(_), Ok(()), Err(_)))), "{slots:?}");
        let peer = lookup("REVERB_PEER_TIMEOUT_MS").map(|v| (v.check("0"), v.check("2s"), v.check("2h")));
        assert!(matches!(peer, Some((Err(_), Ok(()), Err(_)))), "{peer:?}");
        let err = lookup("REVERB_RNDV_THRESH").map(|v| v.check("2m"));
        assert_eq!(err, Some(Err(ValueError::expected("a value in 64..=1m"))));
    }
}
