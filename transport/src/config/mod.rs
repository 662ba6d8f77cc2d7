//! Configuration: `REVERB_*` environment variables (like `UCX_*`), overridable by CLI flags in
//! the binaries.
//!
//! - [`parse`]: the one grammar for sizes, durations, booleans, enums and lists;
//! - [`registry`]: the catalogue of every variable (default, owner, meaning);
//! - [`bounds`]: the allowed range of every numeric variable;
//! - [`env`](mod@env): typed reads of registered variables ([`Env`]);
//! - the transport's own settings, [`TransportConfig`].

pub mod bounds;
pub mod env;
pub mod parse;
pub mod registry;
mod transport;

pub use env::{env_get, env_os, env_path, Env};
pub use parse::{or_list, parse_size, ConfigError, ValueError};
pub use transport::{AdvertMode, AutoNet, TransportConfig, WaitMode};
