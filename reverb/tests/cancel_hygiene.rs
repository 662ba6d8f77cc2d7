//! Cancel and crash hygiene, with real processes, real signals and the real /dev/shm: a
//! 4-rank causal stencil with logger cores (`reverb run -n 4 --ranks-per-node 2 --logger
//! shared-unpinned`) cancelled by SIGTERM or SIGINT leaves no process and no segment of its
//! job behind within 2 s and exits 128+signal; a SIGKILLed launcher's ranks die by themselves
//! and the next launcher sweeps what they left; a live job's files survive another launcher's
//! sweep; an agent SIGTERMed mid-job cleans its host's share; SIGTERM to `reverb run --hosts`
//! reaches every agent, and every host is clean within the same bound.
//!
//! Other jobs may run on this machine at the same time: only files naming the job under test
//! (its id, taken from its ranks' environment) are counted.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use reverb_transport::sys::liveness::{pid_exists, pid_running};
use reverb_transport::testkit::time_scale;
use rustix::process::{kill_process, Pid, Signal};

const BIN: &str = env!("CARGO_BIN_EXE_reverb");
/// Long enough never to finish before it is cancelled (the launcher's --timeout bounds it).
const APP: [&str; 8] = ["app", "stencil", "--iters", "10000000", "--size", "64", "--ckpt-every", "1000"];

/// One job at a time: each is 4 ranks and 2 logger cores, and the bounds are for a job that
/// has the machine's cpus to itself (as far as the other users of the machine allow).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// The bound the launcher has to stop and clean the job after a cancel.
fn cancel_bound() -> Duration {
    Duration::from_secs(2) * time_scale()
}

/// The bound on a job coming up (ranks and loggers started, segments made).
fn start_bound() -> Duration {
    Duration::from_secs(60) * time_scale()
}

fn work_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("reverb-cancel-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("work dir");
    dir
}

/// `reverb run <shape> -- reverb APP` as a causal job with logger cores on shm; its standard
/// error goes to a thread that keeps it (returned on `finish`).
struct Job {
    child: Child,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Job {
    fn start(dir: &Path, shape: &[&str]) -> Job {
        Job::start_rsh(dir, shape, &local_rsh(dir))
    }

    /// As `start`, with `rsh` as the remote shell of `--hosts`.
    fn start_rsh(dir: &Path, shape: &[&str], rsh: &Path) -> Job {
        let mut cmd = Command::new(BIN);
        cmd.args(["run", "--ranks-per-node", "2", "--logger", "shared-unpinned", "--timeout", "300"]);
        cmd.args(shape).arg("--").arg(BIN).args(APP);
        cmd.env("REVERB_RUNTIME_REPORT", dir)
            .env("REVERB_RSH", rsh)
            .env("REVERB_PROVIDER", "shm")
            .env("REVERB_LOG", "causal")
            .env("REVERB_LOG_UNIT", "node")
            .env("REVERB_CKPT", "buddy")
            .env_remove("REVERB_FAULT")
            .env_remove("REVERB_FAULT_AGENT")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("reverb run");
        let err = child.stderr.take().expect("stderr");
        let stderr = std::thread::spawn(move || {
            let mut text = String::new();
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                text.push_str(&line);
                text.push('\n');
            }
            text
        });
        Job { child, stderr: Some(stderr) }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `sig` to the launcher (our unreaped child: its pid cannot have been reused).
    fn signal(&self, sig: Signal) {
        signal(self.pid(), sig);
    }

    /// Waits (bounded) for the launcher to exit; its exit code (None: killed by a signal)
    /// and its standard error.
    fn finish(mut self, bound: Duration) -> (Option<i32>, String) {
        let deadline = Instant::now() + bound;
        let status = loop {
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                break st;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("reverb run did not exit within {bound:?}");
            }
            sleep(Duration::from_millis(10));
        };
        let err = self.stderr.take().map(|h| h.join().unwrap_or_default()).unwrap_or_default();
        (status.code(), err)
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A remote shell for the agents test: drops the host name and runs the command here.
fn local_rsh(dir: &Path) -> PathBuf {
    rsh_script(dir, "rsh", "#!/bin/sh\nshift\nexec \"$@\"\n")
}

/// A remote shell that, as ssh, forwards no signal to the command: it runs the command as its
/// child, and a signal ends the shell alone.
fn sealed_rsh(dir: &Path) -> PathBuf {
    rsh_script(dir, "sealed-rsh", "#!/bin/sh\nshift\n\"$@\"\n")
}

fn rsh_script(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("rsh script");
    let mut perms = std::fs::metadata(&path).expect("rsh").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&path, perms).expect("chmod rsh");
    path
}

fn signal(pid: u32, sig: Signal) {
    let target = i32::try_from(pid).ok().and_then(Pid::from_raw).expect("a process id");
    kill_process(target, sig).unwrap_or_else(|e| panic!("kill({pid}, {sig:?}): {e}"));
}

/// The children of process `parent` (from /proc).
fn children(parent: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
            // After the parenthesized name: state, ppid.
            let Some((_, rest)) = stat.rsplit_once(')') else { return false };
            rest.split_whitespace().nth(1).and_then(|p| p.parse::<u32>().ok()) == Some(parent)
        })
        .collect()
}

/// A variable of process `pid`'s environment.
fn env_of(pid: u32, name: &str) -> Option<String> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    environ.split(|b| *b == 0).find_map(|kv| {
        let kv = std::str::from_utf8(kv).ok()?;
        kv.strip_prefix(name)?.strip_prefix('=').map(str::to_string)
    })
}

/// The command line of process `pid`, words joined by spaces.
fn cmdline(pid: u32) -> String {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    raw.split(|b| *b == 0).map(|w| String::from_utf8_lossy(w).into_owned()).collect::<Vec<_>>().join(" ")
}

/// The files of job `job` in /dev/shm: its ranks' and loggers' segments, its loggers' node
/// files, its launchers' markers.
fn job_files(job: &str) -> Vec<String> {
    let tag: String = job.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
    let prefixes = [format!("reverb.{tag}."), format!("reverb.{tag}lg."), format!("reverb-{job}-node")];
    let mut names: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|n| prefixes.iter().any(|p| n.starts_with(p.as_str())))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// A job's processes under `parent` (its launcher or agent) once they are all up: every rank
/// with its control segment and every logger core with its node file. Returns (job id, pids).
fn wait_up(parent: u32, ranks: u32, loggers: u32) -> (String, Vec<u32>) {
    let deadline = Instant::now() + start_bound();
    loop {
        let kids = children(parent);
        // A rank's (a logger core's is its loggers' job, `<job>-lg`).
        let job = kids.iter().find_map(|&p| env_of(p, "REVERB_JOB_ID").filter(|j| !j.ends_with("-lg")));
        if let Some(job) = job {
            let files = job_files(&job);
            let ctl = files.iter().filter(|n| n.starts_with("reverb.") && n.ends_with(".ctl")).count();
            let nodes = files.iter().filter(|n| n.starts_with("reverb-") && n.ends_with("-log.ctl")).count();
            // The ranks' and the loggers' transport control segments, and the node segments.
            if kids.len() as u32 == ranks + loggers
                && ctl as u32 >= ranks + loggers
                && nodes as u32 >= loggers
            {
                return (job, kids);
            }
        }
        assert!(
            Instant::now() < deadline,
            "the job under pid {parent} did not come up within {:?}",
            start_bound()
        );
        sleep(Duration::from_millis(50));
    }
}

/// Waits up to `bound` for `done`; whether it came.
fn within(bound: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + bound;
    loop {
        if done() {
            return true;
        }
        if Instant::now() > deadline {
            return done();
        }
        sleep(Duration::from_millis(10));
    }
}

fn all_gone(pids: &[u32]) -> bool {
    pids.iter().all(|&p| !pid_running(p))
}

/// SIGTERM or SIGINT to `reverb run` mid-run: every process of the job and every file of it
/// gone within the bound, and the launcher exits 128+signal saying it was cancelled.
fn cancel(sig: Signal, name: &str) {
    let _serial = serial();
    let dir = work_dir(name);
    let job = Job::start(&dir, &["-n", "4"]);
    let (id, pids) = wait_up(job.pid(), 4, 2);
    assert!(!job_files(&id).is_empty());
    job.signal(sig);
    let t0 = Instant::now();
    let clean = within(cancel_bound(), || all_gone(&pids) && job_files(&id).is_empty());
    let took = t0.elapsed();
    let left = job_files(&id);
    let running: Vec<u32> = pids.iter().copied().filter(|&p| pid_running(p)).collect();
    let (code, err) = job.finish(Duration::from_secs(30) * time_scale());
    assert!(clean, "after {took:?}: processes {running:?} still run, files left: {left:?}\n{err}");
    assert_eq!(code, Some(128 + sig.as_raw()), "{err}");
    let name = if sig == Signal::TERM { "SIGTERM" } else { "SIGINT" };
    assert!(err.contains(&format!("received {name}")), "{err}");
    assert!(job_files(&id).is_empty(), "{:?}", job_files(&id));
}

#[test]
fn sigterm_to_reverb_run_stops_the_job_and_removes_its_segments() {
    cancel(Signal::TERM, "term");
}

#[test]
fn sigint_to_reverb_run_stops_the_job_and_removes_its_segments() {
    cancel(Signal::INT, "int");
}

/// `reverb run -n 1 -- true`: a launch, whose start sweeps dead jobs.
fn next_launch() -> String {
    let out = Command::new(BIN)
        .args(["run", "-n", "1", "--timeout", "60", "--", "true"])
        .env_remove("REVERB_FAULT")
        .stdin(Stdio::null())
        .output()
        .expect("reverb run true");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{err}");
    err
}

/// SIGKILL to `reverb run` mid-run: its ranks and logger cores end by themselves (their
/// parent-death signal), and the next launch sweeps what they left. With `ranks_swept_first`
/// a rank's own per-file sweep (transport `sweep_stale`, at every shm start) has already taken
/// the segments naming dead pids, the launcher's marker among them: the loggers' node files
/// are still known to be the dead job's, by the logger core their node segment records.
fn sigkill(name: &str, ranks_swept_first: bool) {
    let _serial = serial();
    let dir = work_dir(name);
    let job = Job::start(&dir, &["-n", "4"]);
    let (id, pids) = wait_up(job.pid(), 4, 2);
    job.signal(Signal::KILL);
    let (code, _) = job.finish(Duration::from_secs(10));
    assert_eq!(code, None, "killed by a signal");
    let bound = Duration::from_secs(10) * time_scale();
    assert!(within(bound, || all_gone(&pids)), "ranks/loggers still run after {bound:?}: {pids:?}");
    let left = job_files(&id);
    assert!(
        left.iter().any(|n| n.contains(".launcher.")) && left.iter().any(|n| n.ends_with("-log.ctl")),
        "a SIGKILLed launcher leaves its marker, its ranks' segments and its loggers' files: {left:?}"
    );
    if ranks_swept_first {
        // That sweep takes only reaped processes' files (a zombie's pid is still taken).
        let reaped = within(bound, || pids.iter().all(|&p| !pid_exists(p)));
        assert!(reaped, "not reaped within {bound:?}: {pids:?}");
        reverb_transport::sys::shmfile::sweep_stale();
        let left = job_files(&id);
        assert!(left.iter().all(|n| n.starts_with("reverb-")), "{left:?}");
    }
    next_launch();
    assert!(job_files(&id).is_empty(), "the next launch left {:?}", job_files(&id));
}

#[test]
fn a_sigkilled_launchers_ranks_exit_and_the_next_launch_sweeps_their_segments() {
    sigkill("kill", false);
}

#[test]
fn a_crashed_jobs_node_files_are_swept_after_a_ranks_sweep_took_its_marker() {
    sigkill("kill-swept", true);
}

/// A pid that no process has (one just reaped).
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().expect("true");
    let pid = child.id();
    child.wait().expect("reap true");
    pid
}

#[test]
fn a_live_jobs_segments_survive_another_launchers_sweep() {
    let _serial = serial();
    // A real job mid-run.
    let dir = work_dir("live");
    let job = Job::start(&dir, &["-n", "4"]);
    let (id, _) = wait_up(job.pid(), 4, 2);
    let before = job_files(&id);
    // A job whose every segment names a dead process but whose launcher lives (between a
    // node's death and its respawn): only its marker, naming this test, says so.
    let tag = format!("rvcanceltest{}", std::process::id());
    let dead = dead_pid();
    let fake: Vec<PathBuf> = [
        format!("reverb.{tag}.0.{dead}.ctl"),
        format!("reverb.{tag}lg.0.{dead}.ctl"),
        format!("reverb-{tag}-node0-log.ctl"),
        format!("reverb.{tag}.launcher.{}.job", std::process::id()),
    ]
    .iter()
    .map(|n| Path::new("/dev/shm").join(n))
    .collect();
    for f in &fake {
        std::fs::write(f, b"").expect("fake segment");
    }
    next_launch();
    let missing: Vec<&PathBuf> = fake.iter().filter(|f| !f.exists()).collect();
    let now = job_files(&id);
    let lost: Vec<&String> = before.iter().filter(|n| n.ends_with(".ctl") && !now.contains(n)).collect();
    // Once the marker is gone the job is dead: the next sweep takes the rest.
    let _ = std::fs::remove_file(&fake[3]);
    next_launch();
    let kept: Vec<&PathBuf> = fake.iter().filter(|f| f.exists()).collect();
    for f in &fake {
        let _ = std::fs::remove_file(f);
    }
    assert!(missing.is_empty(), "a live launcher's job was swept: {missing:?}");
    assert!(lost.is_empty(), "the running job lost {lost:?}");
    assert!(kept.is_empty(), "a dead job was not swept: {kept:?}");
    job.signal(Signal::TERM);
    let (code, err) = job.finish(Duration::from_secs(30) * time_scale());
    assert_eq!(code, Some(128 + Signal::TERM.as_raw()), "{err}");
}

#[test]
fn an_agent_sigtermed_mid_job_cleans_its_hosts_segments() {
    let _serial = serial();
    let dir = work_dir("agent");
    let job = Job::start(&dir, &["-n", "4", "--hosts", "localhost:2,127.0.0.2:2"]);
    // The second host's agent (started by the remote shell, which execs it).
    let deadline = Instant::now() + start_bound();
    let agent = loop {
        let found = children(job.pid())
            .into_iter()
            .find(|&p| cmdline(p).contains(" agent ") && cmdline(p).contains("127.0.0.2"));
        if let Some(pid) = found {
            break pid;
        }
        assert!(Instant::now() < deadline, "no agent for 127.0.0.2 within {:?}", start_bound());
        sleep(Duration::from_millis(50));
    };
    // Its host runs ranks 2-3 (node 1) and node 1's logger core.
    let (id, pids) = wait_up(agent, 2, 1);
    let tag: String = id.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
    let its_files = || -> Vec<String> {
        job_files(&id)
            .into_iter()
            .filter(|n| {
                let pid = n.rsplit('.').nth(1).and_then(|p| p.parse::<u32>().ok());
                n.starts_with(&format!("reverb-{id}-node1-"))
                    || pid.is_some_and(|p| pids.contains(&p) || p == agent)
            })
            .collect()
    };
    assert!(!its_files().is_empty(), "{:?}", job_files(&id));
    // A process of this test's job, seen running just now.
    signal(agent, Signal::TERM);
    let clean = within(cancel_bound(), || all_gone(&pids) && !pid_running(agent) && its_files().is_empty());
    let (left, running) = (its_files(), pids.iter().copied().filter(|&p| pid_running(p)).collect::<Vec<_>>());
    let (code, err) = job.finish(Duration::from_secs(60) * time_scale());
    assert!(
        clean,
        "processes {running:?} still run, files of host 127.0.0.2 left: {left:?} (job {tag})\n{err}"
    );
    assert_ne!(code, Some(0), "{err}");
    assert!(err.contains("received SIGTERM"), "{err}");
    assert!(job_files(&id).is_empty(), "the job left {:?}\n{err}", job_files(&id));
}

/// The agent of `host` started by `reverb run --hosts` under pid `front` (the remote shell's
/// process, or its child), once it runs.
fn agent_of(front: u32, host: &str) -> u32 {
    let deadline = Instant::now() + start_bound();
    let is_agent = |p: u32| {
        let line = cmdline(p);
        let exe = line.split(' ').next().unwrap_or("");
        exe.ends_with("reverb") && line.contains(" agent ") && line.contains(&format!("--host {host} "))
    };
    loop {
        let kids = children(front);
        let grandchildren = kids.iter().flat_map(|&k| children(k));
        let found = kids.iter().copied().chain(grandchildren).find(|&p| is_agent(p));
        if let Some(pid) = found {
            return pid;
        }
        assert!(Instant::now() < deadline, "no agent for {host} within {:?}", start_bound());
        sleep(Duration::from_millis(50));
    }
}

/// SIGTERM to `reverb run --hosts` mid-run, its agents started through `rsh`: every agent,
/// rank and logger core gone and every file of the job removed within the bound, and the front
/// end exits 128+15.
fn cancel_across_hosts(name: &str, rsh: fn(&Path) -> PathBuf) {
    let _serial = serial();
    let dir = work_dir(name);
    let shape = ["-n", "4", "--hosts", "localhost:2,127.0.0.2:2", "--spares", "127.0.0.3"];
    let job = Job::start_rsh(&dir, &shape, &rsh(&dir));
    // Each host runs one node (2 ranks) and its logger core; the spare idles.
    let (first, second) = (agent_of(job.pid(), "localhost"), agent_of(job.pid(), "127.0.0.2"));
    let spare = agent_of(job.pid(), "127.0.0.3");
    let (id, mut pids) = wait_up(first, 2, 1);
    let (id2, others) = wait_up(second, 2, 1);
    assert_eq!(id, id2, "one job across the hosts");
    pids.extend(others);
    pids.extend([first, second, spare]);
    assert!(!job_files(&id).is_empty());
    job.signal(Signal::TERM);
    let t0 = Instant::now();
    let clean = within(cancel_bound(), || all_gone(&pids) && job_files(&id).is_empty());
    let took = t0.elapsed();
    let (left, running) =
        (job_files(&id), pids.iter().copied().filter(|&p| pid_running(p)).collect::<Vec<_>>());
    let (code, err) = job.finish(Duration::from_secs(30) * time_scale());
    assert!(clean, "after {took:?}: processes {running:?} still run, files left: {left:?}\n{err}");
    assert_eq!(code, Some(128 + Signal::TERM.as_raw()), "{err}");
    assert!(err.contains("reverb run: received SIGTERM; stopping every host"), "{err}");
    assert!(job_files(&id).is_empty(), "{:?}", job_files(&id));
}

#[test]
fn sigterm_to_reverb_run_across_hosts_stops_every_agent_and_cleans_every_host() {
    cancel_across_hosts("front", local_rsh);
}

/// As ssh without a terminal: the signal ends the remote shell alone, and the agent learns of
/// the cancel from the end of its standard input.
#[test]
fn a_cancel_reaches_agents_through_a_remote_shell_that_forwards_no_signal() {
    cancel_across_hosts("front-sealed", sealed_rsh);
}
