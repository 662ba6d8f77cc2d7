//! Where a test job's ranks run: on this host (the default), or on simulated hosts
//! (`REVERB_TEST_HOSTS=ha,hb`, made by `ci/hosts.sh up ha hb`), in contiguous blocks: rank r
//! on host `r * hosts / ranks`, so 3 ranks on 2 hosts are ha, ha, hb. The test process itself
//! must run inside the first host (`bash ci/hosts.sh exec ha -- <test binary>`): the boot
//! server listens there and the ranks on every host reach it at that host's address.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const HOSTS_VAR: &str = "REVERB_TEST_HOSTS";
const NAMES_VAR: &str = "REVERB_TEST_HOST_NAMES";

/// Where the ranks of a job start.
#[derive(Debug)]
pub(super) enum Placement {
    /// Every rank on this host; the boot server on loopback.
    Local,
    /// Ranks in blocks over simulated hosts, started through `ci/hosts.sh exec`.
    Hosts { names: Vec<String>, script: PathBuf },
    /// Ranks in blocks over host names only (`REVERB_TEST_HOST_NAMES`, given to each rank as
    /// `REVERB_HOST_NAME`): one machine, one `/dev/shm`, but the `auto` provider takes the
    /// names as hosts (tcp between them). No root needed.
    Named { names: Vec<String> },
}

impl Placement {
    /// `REVERB_TEST_HOSTS`, checked: the hosts script exists and this process runs inside the
    /// first host. Test code: a misuse panics with what to do.
    pub(super) fn from_env() -> Placement {
        let names = names_from_env();
        if names.is_empty() {
            let names = list_from(NAMES_VAR);
            return if names.is_empty() { Placement::Local } else { Placement::Named { names } };
        }
        let list = names.join(",");
        // The repository's script, found from where this crate was built (the test's cwd is
        // the crate's directory under cargo, anything when the binary is run by hand).
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ci/hosts.sh");
        assert!(script.is_file(), "{HOSTS_VAR}: no {} to start ranks on hosts with", script.display());
        let here = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        assert_eq!(
            here.trim(),
            names[0],
            "{HOSTS_VAR}={list}: the test must run inside the first host \
             (bash ci/hosts.sh exec {} -- <test binary>)",
            names[0]
        );
        Placement::Hosts { names, script }
    }

    /// The address the boot server binds: one the other hosts can reach where there are any.
    pub(super) fn boot_bind(&self) -> &'static str {
        match self {
            Placement::Local | Placement::Named { .. } => "127.0.0.1:0",
            Placement::Hosts { .. } => "0.0.0.0:0",
        }
    }

    /// The root address the ranks connect to, given where the boot server listens.
    pub(super) fn root(&self, server: std::net::SocketAddr) -> String {
        match self {
            Placement::Local | Placement::Named { .. } => server.to_string(),
            Placement::Hosts { names, script } => {
                let out = Command::new("bash")
                    .arg(script)
                    .args(["addr", &names[0]])
                    .output()
                    .expect("hosts.sh addr");
                let addr = String::from_utf8_lossy(&out.stdout).trim().to_owned();
                assert!(out.status.success() && !addr.is_empty(), "no address for host {}", names[0]);
                format!("{addr}:{}", server.port())
            }
        }
    }

    /// The host rank `rank` of `ranks` runs on; None on this host.
    pub(super) fn host_of(&self, rank: u32, ranks: u32) -> Option<&str> {
        match self {
            Placement::Local => None,
            Placement::Hosts { names, .. } | Placement::Named { names } => {
                Some(names[block(rank, ranks, names.len())].as_str())
            }
        }
    }

    /// A command that runs `exe` as rank `rank`: directly, or inside its host. Through the
    /// hosts script the process becomes the rank (`exec nsenter`, which enters network, mount
    /// and UTS namespaces without forking), so the caller's pid, kill and exit status are the
    /// rank's; [`Placement::spawned`] checks it.
    pub(super) fn command(&self, exe: &Path, rank: u32, ranks: u32) -> Command {
        match (self, self.host_of(rank, ranks)) {
            (Placement::Hosts { script, .. }, Some(host)) => {
                let mut cmd = Command::new("bash");
                cmd.arg(script).args(["exec", host, "--"]).arg(exe);
                cmd
            }
            (Placement::Named { .. }, Some(host)) => {
                let mut cmd = Command::new(exe);
                cmd.env("REVERB_HOST_NAME", host);
                cmd
            }
            _ => Command::new(exe),
        }
    }

    /// After a spawn: on hosts, waits (bounded) until the started process is `exe` itself, so
    /// that killing it kills the rank, not a launcher in front of it.
    pub(super) fn spawned(&self, child: &Child, exe: &Path) {
        if !matches!(self, Placement::Hosts { .. }) {
            return;
        }
        let want = std::fs::metadata(exe).map(|m| (m.dev(), m.ino())).expect("test binary");
        let proc_exe = format!("/proc/{}/exe", child.id());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match std::fs::metadata(&proc_exe) {
                Ok(m) if (m.dev(), m.ino()) == want => return,
                Ok(_) => {}
                Err(_) => return, // already exited (a zombie has no exe): its status says how
            }
            assert!(
                Instant::now() < deadline,
                "pid {} never became the rank: a kill would miss it",
                child.id()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// The simulated hosts named by `REVERB_TEST_HOSTS`; none where it is unset or empty.
pub(super) fn names_from_env() -> Vec<String> {
    list_from(HOSTS_VAR)
}

/// How many hosts a test job's ranks are spread over: simulated hosts or host names.
pub(super) fn count_from_env() -> usize {
    names_from_env().len().max(list_from(NAMES_VAR).len())
}

fn list_from(var: &str) -> Vec<String> {
    let list = std::env::var(var).unwrap_or_default();
    list.split(',').map(str::trim).filter(|n| !n.is_empty()).map(str::to_owned).collect()
}

/// The index of the host that rank `rank` of `ranks` runs on, of `hosts` hosts: contiguous blocks.
pub(super) fn block(rank: u32, ranks: u32, hosts: usize) -> usize {
    rank as usize * hosts / ranks.max(1) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_go_to_hosts_in_blocks() {
        let hosts = Placement::Hosts { names: vec!["ha".into(), "hb".into()], script: PathBuf::new() };
        let on = |ranks: u32| (0..ranks).map(|r| hosts.host_of(r, ranks).unwrap()).collect::<Vec<_>>();
        assert_eq!(on(2), ["ha", "hb"]);
        assert_eq!(on(3), ["ha", "ha", "hb"]);
        assert_eq!(on(4), ["ha", "ha", "hb", "hb"]);
        assert_eq!(on(9), ["ha", "ha", "ha", "ha", "ha", "hb", "hb", "hb", "hb"]);
        assert_eq!(on(1), ["ha"]);
        assert_eq!(Placement::Local.host_of(0, 2), None);
    }
}
