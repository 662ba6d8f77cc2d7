//! `reverb run --hosts a:4,b:4`: a job across hosts, one launcher per host. Each host's
//! launcher is this same binary run as `reverb run --local-ranks A-B` through the remote shell
//! `REVERB_RSH HOST ...` (`ssh` by default, as Open MPI's `plm_rsh_agent`; `ci/hosts.sh exec`
//! for the namespace hosts of the tests), the first host's hosting the rendezvous at
//! `FIRST_HOST:PORT`. The job's identity and every `REVERB_*` setting of this process go on the
//! remote command line (`env K=V ...`), since a remote shell does not carry the environment.
//! Each host's launcher respawns its own nodes; this one waits for all of them and stops the
//! others when one fails.

use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use reverb_transport::bootstrap::vars;
use reverb_transport::config::env_get;

use super::spawn::random_hex;

/// A host and how many ranks it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSlots {
    pub name: String,
    pub ranks: u32,
}

/// The hosts of a job, in rank order (`--hosts`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostList(pub Vec<HostSlots>);

/// `a:4,b:4` (a host without `:N` runs one rank).
pub fn parse_hosts(s: &str) -> std::result::Result<HostList, String> {
    let mut hosts = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (name, ranks) = match item.rsplit_once(':') {
            Some((n, r)) => (n, r.parse::<u32>().map_err(|e| format!("'{item}': rank count: {e}"))?),
            None => (item, 1),
        };
        let plain = |c: char| c.is_ascii_alphanumeric() || "-._".contains(c);
        if name.is_empty() || !name.chars().all(plain) || name.starts_with('-') {
            return Err(format!("'{item}': a host name is [A-Za-z0-9._-], not starting with '-'"));
        }
        if ranks == 0 {
            return Err(format!("'{item}': a host runs at least one rank"));
        }
        if hosts.iter().any(|h: &HostSlots| h.name == name) {
            return Err(format!("host '{name}' named twice"));
        }
        hosts.push(HostSlots { name: name.to_string(), ranks });
    }
    if hosts.is_empty() {
        return Err("no host named".into());
    }
    Ok(HostList(hosts))
}

/// A host file, as Open MPI's `--hostfile`: one host per line, `NAME slots=N` (or `NAME:N`,
/// or `NAME` for one rank), `#` starting a comment; the hosts in rank order.
pub fn parse_hostfile(path: &str) -> std::result::Result<HostList, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let mut items = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut words = line.split_whitespace();
        let name = words.next().unwrap_or("");
        let item = match (words.next(), words.next()) {
            (None, _) => name.to_string(),
            (Some(slots), None) => match slots.strip_prefix("slots=") {
                Some(n) => format!("{name}:{n}"),
                None => return Err(format!("{path}:{}: expected 'NAME slots=N', got '{line}'", n + 1)),
            },
            _ => return Err(format!("{path}:{}: expected 'NAME slots=N', got '{line}'", n + 1)),
        };
        items.push(item);
    }
    parse_hosts(&items.join(",")).map_err(|e| format!("{path}: {e}"))
}

/// What every host's launcher is told besides its ranks.
pub struct AcrossHosts<'a> {
    pub hosts: &'a [HostSlots],
    pub ranks_per_node: u32,
    /// `reverb run` options passed on unchanged (`--respawn`, `--timeout`, ...).
    pub run_options: Vec<String>,
    /// The program and its arguments.
    pub command: &'a [String],
    pub verbose: bool,
}

/// Starts one launcher per host and waits for them all; the job's exit code.
pub fn launch_across(job: &AcrossHosts<'_>) -> Result<i32> {
    let total: u32 = job.hosts.iter().map(|h| h.ranks).sum();
    let rsh = remote_shell()?;
    let exe = std::env::current_exe().context("finding the reverb executable")?;
    // A port in the dynamic range, the same on every launcher: the first host binds it.
    let port = 20_000 + u16::from_le_bytes([rand::random(), rand::random()]) % 40_000;
    let identity = [
        (vars::ROOT.to_string(), format!("{}:{port}", job.hosts[0].name)),
        (vars::JOB_ID.to_string(), format!("rv{}", random_hex(6))),
        (vars::JOB_TOKEN.to_string(), random_hex(32)),
    ];
    let mut first = 0;
    let mut children = Vec::with_capacity(job.hosts.len());
    for (i, host) in job.hosts.iter().enumerate() {
        if host.ranks % job.ranks_per_node != 0 {
            bail!(
                "host {} runs {} rank(s), not whole nodes of {} (--ranks-per-node)",
                host.name,
                host.ranks,
                job.ranks_per_node
            );
        }
        let mut cmd = Command::new(&rsh[0]);
        cmd.args(&rsh[1..]).arg(&host.name).arg("env");
        cmd.args(forwarded_env(&identity).iter().map(|(k, v)| format!("{k}={v}")));
        cmd.arg(&exe).args(["run", "-n", &total.to_string()]);
        cmd.args(["--ranks-per-node", &job.ranks_per_node.to_string()]);
        cmd.args(["--local-ranks", &format!("{first}-{}", first + host.ranks - 1)]);
        if i == 0 {
            cmd.arg("--serve-root");
        }
        cmd.args(&job.run_options).arg("--").args(job.command);
        if job.verbose {
            eprintln!("reverb run: host {} (ranks {first}-{}): {cmd:?}", host.name, first + host.ranks - 1);
        }
        cmd.stdin(Stdio::null()).stdout(Stdio::inherit()).stderr(Stdio::inherit());
        let child = cmd.spawn().with_context(|| format!("starting the launcher of host {}", host.name));
        match child {
            Ok(c) => children.push((host.name.clone(), c)),
            Err(e) => {
                stop_all(&mut children);
                return Err(e);
            }
        }
        first += host.ranks;
    }
    Ok(wait_all(children))
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

/// Waits for every host's launcher; the first failure stops the others. Returns the job's
/// exit code: 0, or the first failing launcher's.
fn wait_all(mut children: Vec<(String, Child)>) -> i32 {
    let mut code = 0;
    let mut stopping_since: Option<Instant> = None;
    while !children.is_empty() {
        let mut i = 0;
        while i < children.len() {
            match children[i].1.try_wait() {
                Ok(Some(status)) => {
                    let (name, _) = children.remove(i);
                    let c = exit_code(status);
                    if c != 0 && code == 0 {
                        eprintln!(
                            "reverb run: host {name}'s launcher failed ({status}); stopping the others"
                        );
                        code = c;
                        stopping_since = Some(Instant::now());
                        terminate(&mut children);
                    }
                }
                Ok(None) => i += 1,
                Err(e) => {
                    eprintln!("reverb run: waiting for host {}'s launcher: {e}", children[i].0);
                    i += 1;
                }
            }
        }
        // Launchers stop their ranks on SIGTERM; one that does not is killed.
        if stopping_since.is_some_and(|t| t.elapsed() > Duration::from_secs(15)) {
            stop_all(&mut children);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    code
}

fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// SIGTERM to every launcher still running (each then stops its ranks).
fn terminate(children: &mut [(String, Child)]) {
    for (_, child) in children.iter() {
        if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
    }
}

/// SIGKILL and reap every launcher still running.
fn stop_all(children: &mut Vec<(String, Child)>) {
    for (_, child) in children.iter_mut() {
        let _ = child.kill();
        let _ = child.wait();
    }
    children.clear();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_lists_parse_and_refuse_what_a_shell_would_misread() {
        let h = parse_hosts("a:4, b.example:2,c").expect("valid list").0;
        assert_eq!(
            h.iter().map(|h| (h.name.as_str(), h.ranks)).collect::<Vec<_>>(),
            [("a", 4), ("b.example", 2), ("c", 1)]
        );
        for bad in ["", "a:0", "a:x", "a;rm:2", "-o:1", "a:1,a:2", "$(x):1"] {
            assert!(parse_hosts(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn host_files_take_open_mpi_slots_and_comments() {
        let dir = std::env::temp_dir().join(format!("reverb-hostfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("hosts");
        std::fs::write(&file, "# the job\na slots=4\n\nb:2   # two\nc\n").unwrap();
        let h = parse_hostfile(file.to_str().unwrap()).expect("valid file").0;
        assert_eq!(
            h.iter().map(|h| (h.name.as_str(), h.ranks)).collect::<Vec<_>>(),
            [("a", 4), ("b", 2), ("c", 1)]
        );
        for bad in ["a slots=x\n", "a cpus=2\n", "a slots=2 extra\n", "# nothing\n"] {
            std::fs::write(&file, bad).unwrap();
            assert!(parse_hostfile(file.to_str().unwrap()).is_err(), "{bad:?} accepted");
        }
        assert!(parse_hostfile(dir.join("missing").to_str().unwrap()).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
