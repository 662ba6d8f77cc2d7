//! Names for endpoints: libfabric consumers find a server by `node` and `service` (fabtests'
//! default, a port number). A server's `fi_getinfo(FI_SOURCE, service)` marks its info; the
//! endpoint opened from it publishes its address under that service in
//! `/dev/shm/reverb-svc.<space><scope>.<service>`, and a client's `fi_getinfo(node, service)` reads it
//! as `dest_addr`. Only this host's endpoints are found (the node is not looked at).

use std::io::Write;
use std::path::{Path, PathBuf};

use std::time::{Duration, Instant};

use reverb_transport::sys::{liveness, shmfile};

use crate::av::ADDRESS_LEN;

/// How a server's info carries its service to the endpoint: `src_addr` holds these bytes
/// then the service's name.
pub const MARK: &[u8] = b"reverb-service:";

/// The host space every endpoint of this user joins: endpoints of one user on one host
/// reach each other by address.
pub fn host_space() -> String {
    // SAFETY: getuid cannot fail and touches no memory.
    format!("fi{}", unsafe { libc::getuid() })
}

/// Keeps the services of one set of processes apart from others' on this host (a test
/// suite run beside another on the same ports): `REVERB_OFI_SERVICE_SCOPE`, empty by default.
const SCOPE: &str = "REVERB_OFI_SERVICE_SCOPE";

fn service_path(service: &str) -> PathBuf {
    let scope = std::env::var(SCOPE).ok().filter(|s| !s.is_empty());
    let scope = scope.map(|s| shmfile::sanitize_job_id(&s)).unwrap_or_default();
    let name = shmfile::sanitize_job_id(service);
    shmfile::shm_dir().join(format!("reverb-svc.{}{scope}.{name}", host_space()))
}

/// How long a client's `fi_getinfo` waits for a server to publish its service: a server
/// started just before its client may not have opened its endpoint yet.
const LOOKUP_WAIT: Duration = Duration::from_secs(10);

/// The address a live endpoint publishes under `service`, waiting up to `LOOKUP_WAIT` for
/// one to; None when none did. A file its dead publisher left is not an answer.
pub fn lookup(service: &str) -> Option<Vec<u8>> {
    let path = service_path(service);
    let deadline = Instant::now() + LOOKUP_WAIT;
    loop {
        let found = std::fs::read(&path).ok().and_then(|b| b.get(4..).map(<[u8]>::to_vec));
        let found = found.filter(|a| a.len() == ADDRESS_LEN);
        if found.is_some() && publisher(&path).is_some_and(liveness::pid_exists) {
            return found;
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The service a server's `src_addr` names, if it is one of [`MARK`]'s with a service.
pub fn named_in(src_addr: &[u8]) -> Option<String> {
    src_addr.strip_prefix(MARK).filter(|s| !s.is_empty()).map(|s| String::from_utf8_lossy(s).into_owned())
}

/// A service this endpoint holds; the file goes with it.
pub struct Claim {
    path: PathBuf,
}

impl Drop for Claim {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The pid that leads a service file (its publisher's), for the stale-file check.
fn publisher(path: &Path) -> Option<u32> {
    let bytes = std::fs::read(path).ok()?;
    let pid = bytes.get(..4)?;
    Some(u32::from_le_bytes([pid[0], pid[1], pid[2], pid[3]]))
}

/// Publishes `address` under `service`; `AlreadyExists` while a live endpoint holds it.
pub fn publish(service: &str, address: &[u8]) -> std::io::Result<Claim> {
    let path = service_path(service);
    let mut file = shmfile::create_private(&path, publisher)?;
    let claim = Claim { path };
    file.write_all(&std::process::id().to_le_bytes())?;
    file.write_all(address)?;
    Ok(claim)
}
