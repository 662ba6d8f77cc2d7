//! `reverb run --hosts a:4,b:4 --spares c`: a job across hosts, one agent per host (and per
//! spare). Each is this same binary run as `reverb agent --host NAME ...` through the remote
//! shell `REVERB_RSH HOST ...` (`ssh` by default, as Open MPI's `plm_rsh_agent`; `ci/hosts.sh
//! exec` for the namespace hosts of the tests); the first host's hosts the rendezvous and the
//! job's controller at a free port it announces (`reverb agent: rendezvous at HOST:PORT`), and
//! the others are started once it has. The job's identity and every `REVERB_*` setting
//! of this process go on the remote command line (`env K=V ...`), since a remote shell does not
//! carry the environment. The controller decides recoveries (see `agent`): this process only
//! starts the agents and waits for the first host's, whose exit code is the job's; the others
//! are then given a moment to end and stopped. The loss of the first host ends the job.
//! SIGINT/SIGTERM to this process cancels the job: the signal goes to every agent, which
//! stops and cleans its host, and this process exits 128+signal once they are gone (those
//! still running after a few seconds are SIGKILLed).
//!
//! The front end: the agents are processes it starts, never a module it calls; what both
//! sides agree on (hosts, placement, the agent's lines) is in `hostspec`.

use std::io::Write;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use reverb_transport::bootstrap::vars;
use reverb_transport::config::env_get;

pub(super) use super::hostspec::check_copies_spread;
use super::hostspec::{front_bound, host_list, FRONT_HELLO, RENDEZVOUS_AT};
pub use super::hostspec::{parse_hostfile, parse_hosts, HostList, HostSlots, JOB_ENDED};
use super::signals::{signal_name, take_signal, SignalGuard};
use super::spawn::random_hex;

/// What every host's agent is told.
pub struct AcrossHosts<'a> {
    pub hosts: &'a [HostSlots],
    /// Idle hosts that take over the ranks of a lost one (`--spares`).
    pub spares: &'a [String],
    pub ranks_per_node: u32,
    /// Options every agent takes as `reverb run` does (`--respawn`, `--timeout`, ...).
    pub run_options: Vec<String>,
    /// The program and its arguments.
    pub command: &'a [String],
    pub verbose: bool,
    /// The job's `--timeout`: the front stops every host if the job outlives it by far
    /// (`hostspec::front_bound`).
    pub timeout: Option<Duration>,
    /// Job settings for every agent and rank beyond this process's `REVERB_*` (the
    /// redundancy's, from `--redundancy`).
    pub env: Vec<(String, String)>,
}

/// One host's agent.
struct HostRun {
    name: String,
    /// It hosts the rendezvous and the controller: the job ends with it.
    serves: bool,
    child: Child,
    /// Its standard input, open while the job runs (closed: a cancel).
    input: Option<ChildStdin>,
    /// The job's code once it printed [`JOB_ENDED`] (its standard error is passed through a
    /// thread that watches for it).
    ended: JobEndSeen,
    /// That thread; it ends with the stream.
    reader: Option<std::thread::JoinHandle<()>>,
}

impl HostRun {
    /// Whether it said the job ended, once its output is read to the end (bounded: a
    /// process it left behind may hold the stream open).
    fn said_done(&mut self) -> bool {
        self.ended.wait_read(&mut self.reader).is_some()
    }
}

/// How to start a host's agent: the remote shell, this binary, the job's identity.
struct Starter<'a> {
    job: &'a AcrossHosts<'a>,
    rsh: Vec<String>,
    exe: std::path::PathBuf,
    identity: [(String, String); 3],
}

impl Starter<'_> {
    /// Starts `host`'s agent (a host of the job or a spare).
    fn start(&self, host: &str, serves: bool) -> Result<HostRun> {
        let job = self.job;
        let mut cmd = Command::new(&self.rsh[0]);
        cmd.args(&self.rsh[1..]).arg(host).arg("env");
        let settings: Vec<(String, String)> = self.identity.iter().chain(&job.env).cloned().collect();
        cmd.args(forwarded_env(&settings).iter().map(|(k, v)| format!("{k}={v}")));
        cmd.arg(&self.exe).args(["agent", "--front-stdin", "--host", host, "--hosts", &host_list(job.hosts)]);
        if !job.spares.is_empty() {
            cmd.args(["--spares", &job.spares.join(",")]);
        }
        cmd.args(["--ranks-per-node", &job.ranks_per_node.to_string()]);
        cmd.args(&job.run_options).arg("--").args(job.command);
        if job.verbose {
            eprintln!("reverb run: host {host}: {cmd:?}");
        }
        cmd.stdin(Stdio::piped()).stdout(Stdio::inherit()).stderr(Stdio::piped());
        let mut child = cmd.spawn().with_context(|| format!("starting the agent of host {host}"))?;
        // Kept open while the job runs: its end is a cancel (a remote shell forwards no signal).
        let input = child.stdin.take().filter(|mut i| writeln!(i, "{FRONT_HELLO}").is_ok());
        let ended = JobEndSeen::default();
        let reader = child.stderr.take().map(|stderr| pass_through(stderr, ended.clone()));
        Ok(HostRun { name: host.to_string(), serves, child, input, ended, reader })
    }
}

/// Starts one agent per host and spare and waits for them; the job's exit code.
pub fn launch_across(job: &AcrossHosts<'_>) -> Result<i32> {
    // Port 0: the first host's agent binds a free one and says which; the others are started
    // with it.
    let mut starter = Starter {
        job,
        rsh: remote_shell()?,
        exe: std::env::current_exe().context("finding the reverb executable")?,
        identity: [
            (vars::ROOT.to_string(), format!("{}:0", job.hosts[0].name)),
            (vars::JOB_ID.to_string(), format!("rv{}", random_hex(6))),
            (vars::JOB_TOKEN.to_string(), random_hex(32)),
        ],
    };
    super::hostspec::check_whole_nodes(job.hosts, job.ranks_per_node)?;
    let names = job.hosts.iter().map(|h| h.name.as_str()).chain(job.spares.iter().map(String::as_str));
    // From here SIGINT/SIGTERM cancel the job: forwarded to every agent (`cancel`).
    let _signals = SignalGuard::install();
    let mut runs: Vec<HostRun> = Vec::with_capacity(job.hosts.len() + job.spares.len());
    for (i, host) in names.enumerate() {
        let root = starter.start(host, i == 0).and_then(|run| {
            runs.push(run);
            match &mut runs[..] {
                [first] if i == 0 => first.ended.wait_root(&mut first.child),
                _ => Ok(signalled().map_or(Root::Later, Root::Cancelled)),
            }
        });
        match root {
            Ok(Root::At(root)) => starter.identity[0].1 = root,
            Ok(Root::Later) => {}
            Ok(Root::Cancelled(sig)) => return Ok(cancel(runs, sig)),
            Err(e) => {
                stop_all(&mut runs);
                return Err(e);
            }
        }
    }
    let deadline = match job.timeout {
        Some(t) => Some(Instant::now() + front_bound(t)?),
        None => None,
    };
    Ok(supervise(runs, deadline))
}

/// What starting an agent told about the job's rendezvous.
enum Root {
    /// The first host's agent listens there.
    At(String),
    /// Another host's agent: the rendezvous is known already.
    Later,
    /// SIGINT/SIGTERM came while starting.
    Cancelled(i32),
}

/// What the controller's lines say: where its rendezvous listens (`reverb agent: rendezvous
/// at HOST:PORT`) and the job's exit code (`... job ended (code N): ...`), once seen.
#[derive(Clone, Default)]
pub(super) struct JobEndSeen(Arc<Mutex<(Option<i32>, Option<String>)>>);

impl JobEndSeen {
    fn note(&self, line: &str) {
        let code = line.strip_prefix(JOB_ENDED).and_then(|rest| {
            let n = rest.trim_start().strip_prefix("(code ")?.split(')').next()?;
            n.parse::<i32>().ok()
        });
        let root = line.strip_prefix(RENDEZVOUS_AT).map(|r| r.trim().to_string());
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if code.is_some() {
            g.0 = code;
        }
        if root.is_some() {
            g.1 = root;
        }
    }

    /// Waits (bounded) for the controller to say where its rendezvous listens, or a cancel.
    fn wait_root(&self, child: &mut Child) -> Result<Root> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(root) = self.0.lock().unwrap_or_else(|p| p.into_inner()).1.clone() {
                return Ok(Root::At(root));
            }
            if let Some(sig) = signalled() {
                return Ok(Root::Cancelled(sig));
            }
            if let Ok(Some(status)) = child.try_wait() {
                bail!("the first host's agent ended ({status}) before its rendezvous listened");
            }
            if Instant::now() > deadline {
                bail!("the first host's agent did not open its rendezvous within 60 s");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The code, once `reader` (the thread copying the stream) has read it to the end (bounded:
    /// a process left behind may hold the stream open).
    pub(super) fn wait_read(&self, reader: &mut Option<std::thread::JoinHandle<()>>) -> Option<i32> {
        let deadline = Instant::now() + Duration::from_secs(2);
        while reader.as_ref().is_some_and(|r| !r.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.0.lock().unwrap_or_else(|p| p.into_inner()).0
    }
}

/// Copies an agent's standard error to ours, line by line, noting the job's end when the
/// controller's last line says it. Ends with the stream.
pub(super) fn pass_through(
    stderr: std::process::ChildStderr,
    ended: JobEndSeen,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            ended.note(&line);
            let _ = writeln!(std::io::stderr(), "{line}");
        }
    })
}

/// Whether the first host's agent ending means its host is lost, not that the job ended: it
/// did not say the job ended, and it was killed (with everything on its host), its remote
/// shell's connection was cut (ssh exits 255), or the shell claims success without it (srun
/// exits 0 when its node fails).
fn host_lost(status: ExitStatus, done: bool) -> bool {
    use std::os::unix::process::ExitStatusExt;
    !done && (status.signal().is_some() || matches!(status.code(), Some(255) | Some(0)))
}

/// `REVERB_RSH` split into words (`ssh` when unset).
fn remote_shell() -> Result<Vec<String>> {
    let rsh = env_get("REVERB_RSH")?.filter(|s| !s.trim().is_empty()).unwrap_or_else(|| "ssh".into());
    Ok(rsh.split_whitespace().map(String::from).collect())
}

/// The job's identity, then every other `REVERB_*` variable of this process (the job's
/// settings), for the remote command line.
fn forwarded_env(identity: &[(String, String)]) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = identity.to_vec();
    for (k, v) in std::env::vars() {
        let ours = identity.iter().any(|(i, _)| *i == k);
        // The remote shell itself, and anything a shell would mangle, stay here.
        let plain = v.chars().all(|c| c.is_ascii_graphic() && !"'\"\\$`;&|<>(){}*?!#~".contains(c));
        if !k.starts_with("REVERB_") || ours || k == "REVERB_RSH" {
            continue;
        }
        if plain {
            env.push((k, v));
        } else {
            eprintln!(
                "reverb run: {k} is not passed to the hosts (its value has spaces or shell characters)"
            );
        }
    }
    env
}

/// How long the other agents have to end once the first host's has ended the job well (they
/// were told; a failed job's are stopped at once).
const OTHERS_LINGER: Duration = Duration::from_secs(15);

/// Waits for the first host's agent (the controller), then for the others (bounded; the rest
/// are stopped). Returns the job's exit code: the controller's, 1 if its host was lost, 124 if
/// the job outlived `deadline`.
fn supervise(mut runs: Vec<HostRun>, deadline: Option<Instant>) -> i32 {
    let mut code = None;
    let mut stopping_since: Option<Instant> = None;
    while !runs.is_empty() {
        if let Some(sig) = signalled() {
            return cancel(runs, sig);
        }
        if code.is_none() && deadline.is_some_and(|d| Instant::now() > d) {
            eprintln!(
                "reverb run: the job outlived its --timeout and the controller's grace; stopping every host"
            );
            terminate(&mut runs);
            code = Some(124);
            stopping_since = Some(Instant::now());
        }
        let mut i = 0;
        while i < runs.len() {
            let status = match runs[i].child.try_wait() {
                Ok(Some(status)) => status,
                Ok(None) => {
                    i += 1;
                    continue;
                }
                Err(e) => {
                    eprintln!("reverb run: waiting for host {}'s agent: {e}", runs[i].name);
                    i += 1;
                    continue;
                }
            };
            let mut run = runs.remove(i);
            if !run.serves || code.is_some() {
                continue;
            }
            let done = run.said_done();
            let c = if host_lost(status, done) {
                eprintln!(
                    "reverb run: host {} lost ({status}), and it served the rendezvous; stopping the others",
                    run.name
                );
                1
            } else {
                exit_code(status)
            };
            if c != 0 {
                terminate(&mut runs);
            }
            code = Some(c);
            stopping_since = Some(Instant::now());
        }
        match stopping_since.map(|t| t.elapsed()) {
            Some(t) if t > OTHERS_LINGER * 2 => stop_all(&mut runs),
            Some(t) if t > OTHERS_LINGER => terminate(&mut runs),
            _ => {}
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    code.unwrap_or(1)
}

fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// SIGTERM to every launcher still running (each then stops its ranks).
fn terminate(runs: &mut [HostRun]) {
    send(runs, rustix::process::Signal::TERM);
}

/// `sig` to every agent (its remote shell's process) still running.
fn send(runs: &[HostRun], sig: rustix::process::Signal) {
    for child in runs.iter().map(|r| &r.child) {
        // Our unreaped child: its pid cannot have been reused.
        if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
            let _ = rustix::process::kill_process(pid, sig);
        }
    }
}

/// SIGINT/SIGTERM received since the last look, if any.
fn signalled() -> Option<i32> {
    Some(take_signal()).filter(|&s| s != 0)
}

/// How long the agents have to stop their hosts after a cancel before they are SIGKILLed.
const CANCEL_WITHIN: Duration = Duration::from_secs(5);

/// A cancel (SIGINT/SIGTERM to this process): the same signal to every agent, each of which
/// stops and cleans its host; those not gone within [`CANCEL_WITHIN`] are SIGKILLed.
/// Returns the job's exit code, 128+signal.
fn cancel(mut runs: Vec<HostRun>, sig: i32) -> i32 {
    eprintln!("reverb run: received {}; stopping every host", signal_name(sig));
    let forward = rustix::process::Signal::from_named_raw(sig).unwrap_or(rustix::process::Signal::TERM);
    send(&runs, forward);
    // A remote agent hears it as the end of its input.
    runs.iter_mut().for_each(|r| drop(r.input.take()));
    let deadline = Instant::now() + CANCEL_WITHIN;
    let mut readers = Vec::new();
    while !runs.is_empty() && Instant::now() < deadline {
        for i in (0..runs.len()).rev() {
            if matches!(runs[i].child.try_wait(), Ok(Some(_))) {
                readers.extend(runs.swap_remove(i).reader);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    for run in &runs {
        eprintln!("reverb run: host {}'s agent did not stop within {CANCEL_WITHIN:?}; killing it", run.name);
    }
    stop_all(&mut runs);
    // Their last lines (how each host stopped), bounded: a process left behind may hold a
    // stream open.
    let deadline = Instant::now() + Duration::from_secs(1);
    while readers.iter().any(|r| !r.is_finished()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    128 + sig
}

/// SIGKILL and reap every launcher still running.
fn stop_all(runs: &mut Vec<HostRun>) {
    for run in runs.iter_mut() {
        let _ = run.child.kill();
        let _ = run.child.wait();
    }
    runs.clear();
}
