//! `reverb run --mpi`: programs linked against MPICH's `libmpich.so.12` (Debian's
//! `mpicc.mpich`) load reverb's MPI library instead, found through the ranks'
//! LD_LIBRARY_PATH: a directory holding `libmpich.so.12` linked to reverb's build.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use reverb_transport::config::env_get;

/// The soname programs linked by mpicc.mpich ask the loader for.
const SONAME: &str = "libmpich.so.12";

/// reverb's MPI library: REVERB_MPI_LIB, else `libmpich.so` beside the reverb executable (a
/// cargo build of the workspace puts both in one directory), else an installed
/// `../lib/reverb/libmpich.so.12`.
fn library() -> Result<PathBuf> {
    if let Some(path) = env_get("REVERB_MPI_LIB")? {
        let path = PathBuf::from(path);
        if !path.is_file() {
            bail!("REVERB_MPI_LIB={}: no such file", path.display());
        }
        return Ok(path);
    }
    let exe = std::env::current_exe().context("finding the reverb executable")?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let candidates = [dir.join("libmpich.so"), dir.join("../lib/reverb").join(SONAME)];
    match candidates.iter().find(|p| p.is_file()) {
        Some(p) => Ok(p.canonicalize().unwrap_or_else(|_| p.clone())),
        None => bail!(
            "reverb's MPI library is not built: `cargo build -p reverb-mpi` puts libmpich.so beside \
             reverb ({}), or set REVERB_MPI_LIB",
            dir.display()
        ),
    }
}

/// A directory whose `libmpich.so.12` is reverb's library: one per library path and user,
/// made once (a symbolic link, replaced atomically if it points elsewhere).
fn library_dir(lib: &Path) -> Result<PathBuf> {
    let tag = lib
        .to_string_lossy()
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    let dir =
        std::env::temp_dir().join(format!("reverb-mpi-{}-{tag:016x}", rustix::process::getuid().as_raw()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let link = dir.join(SONAME);
    if std::fs::read_link(&link).ok().as_deref() != Some(lib) {
        let fresh = dir.join(format!("{SONAME}.{}", std::process::id()));
        let _ = std::fs::remove_file(&fresh);
        std::os::unix::fs::symlink(lib, &fresh).with_context(|| format!("linking {}", fresh.display()))?;
        std::fs::rename(&fresh, &link).with_context(|| format!("placing {}", link.display()))?;
    }
    Ok(dir)
}

/// The ranks' LD_LIBRARY_PATH: reverb's MPI library first.
pub fn environment() -> Result<Vec<(String, String)>> {
    let dir = library_dir(&library()?)?;
    let mut path = dir.to_string_lossy().into_owned();
    // The loader's own variable, passed on after reverb's directory.
    if let Some(rest) = std::env::var_os("LD_LIBRARY_PATH").filter(|p| !p.is_empty()) {
        path = format!("{path}:{}", rest.to_string_lossy());
    }
    Ok(vec![("LD_LIBRARY_PATH".to_string(), path)])
}
