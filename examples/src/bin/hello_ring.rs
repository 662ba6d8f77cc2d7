//! Tagged send/recv around a ring, on the transport layer alone.
//!
//! A token starts at rank 0 and goes round the ring `LAPS` times (first argument, default 3);
//! every rank adds `rank + 1` as it passes. Rank 0 checks the final value against the formula
//! and prints it.
//!
//! ```sh
//! reverb run -n 4 -- target/release/hello_ring 3
//! ```

use std::process::ExitCode;
use std::time::Duration;

use reverb_examples::{arg_or, report, ExampleError, Result};
use reverb_transport::bootstrap::TcpBootstrap;
use reverb_transport::{
    Bootstrap, CompletionKind, Provider, Rank, RecvBuffer, Source, TagMatch, TransportConfig,
};

/// Bound of one send or receive.
const WAIT: Duration = Duration::from_secs(30);

fn main() -> ExitCode {
    report("hello_ring", run())
}

fn run() -> Result<()> {
    let laps = arg_or(1, 3)?;
    // The launcher put this rank's place in the job into the environment.
    let mut boot = TcpBootstrap::connect_from_env()?;
    // REVERB_PROVIDER (shm by default) and the other transport settings.
    let config = TransportConfig::from_env()?;
    let mut provider = reverb_transport::open(&config, &mut boot)?;
    let (me, size) = (provider.rank(), provider.size());
    if size < 2 {
        return Err(ExampleError::Usage("hello_ring needs at least 2 ranks".into()));
    }
    let (next, prev) = ((me + 1) % size, (me + size - 1) % size);
    let mut token = 0u64;
    for lap in 0..laps {
        // The tag names the lap, so a receive can only match this lap's token.
        if me == 0 {
            send(provider.as_mut(), next, lap, token + 1)?;
            token = recv(provider.as_mut(), prev, lap)?;
        } else {
            let got = recv(provider.as_mut(), prev, lap)?;
            send(provider.as_mut(), next, lap, got + u64::from(me) + 1)?;
        }
    }
    if me == 0 {
        let expected = laps * u64::from(size) * (u64::from(size) + 1) / 2;
        if token != expected {
            return Err(ExampleError::Check(format!("token {token}, expected {expected}")));
        }
        println!("hello_ring: {size} ranks, {laps} laps, token {token}");
    }
    // No rank leaves while another may still need it.
    boot.barrier()?;
    Ok(())
}

fn send(provider: &mut dyn Provider, dest: Rank, tag: u64, value: u64) -> Result<()> {
    let op = provider.send(dest, tag, &value.to_le_bytes())?;
    provider.wait_op(op, WAIT)?.into_result()?;
    Ok(())
}

fn recv(provider: &mut dyn Provider, source: Rank, tag: u64) -> Result<u64> {
    let buffer = RecvBuffer::Owned { capacity: 8 };
    let op = provider.post_recv(Source::Rank(source), TagMatch::exact(tag), buffer)?;
    match provider.wait_op(op, WAIT)?.into_result()?.kind {
        CompletionKind::Recv { data: Some(bytes), .. } => bytes
            .try_into()
            .map(u64::from_le_bytes)
            .map_err(|b: Vec<u8>| ExampleError::Check(format!("a token of {} bytes", b.len()))),
        other => Err(ExampleError::Check(format!("unexpected completion {other:?}"))),
    }
}
