//! What the example rank programs share: one error type and the checksum they print.
//!
//! The programs themselves are in `src/bin/`; run them under the launcher, e.g.
//! `reverb run -n 2 -- target/release/hello_ring`.

use reverb_runtime::RuntimeError;
use reverb_transport::TransportError;

/// Why an example failed.
#[derive(Debug, thiserror::Error)]
pub enum ExampleError {
    #[error("transport")]
    Transport(#[from] TransportError),
    #[error("runtime")]
    Runtime(#[from] RuntimeError),
    /// A result differed from what the program computed it must be.
    #[error("check failed: {0}")]
    Check(String),
    #[error("bad argument: {0}")]
    Usage(String),
}

pub type Result<T> = std::result::Result<T, ExampleError>;

/// FNV-1a over `bytes`, continuing from `seed` (start with [`FNV_SEED`]).
pub fn fnv1a(seed: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(seed, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

pub const FNV_SEED: u64 = 0xcbf2_9ce4_8422_2325;

/// The `index`-th command-line argument as a number, or `default` when absent.
pub fn arg_or(index: usize, default: u64) -> Result<u64> {
    match std::env::args().nth(index) {
        None => Ok(default),
        Some(s) => {
            s.parse().map_err(|_| ExampleError::Usage(format!("argument {index}: {s:?} is not a number")))
        }
    }
}

/// Prints the error with its chain of sources and returns the process's exit code.
pub fn report(program: &str, result: Result<()>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            let mut line = format!("{program}: {e}");
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                line.push_str(&format!(": {s}"));
                source = s.source();
            }
            eprintln!("{line}");
            std::process::ExitCode::FAILURE
        }
    }
}
