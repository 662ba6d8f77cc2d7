//! `LoggedEndpoint::try_new` over the loopback provider (ranks as threads): a setup that fails
//! hands the provider back with the error, still connected and usable, which is what a
//! recovery inside `Runtime::init` needs; a setup that succeeds keeps it.

use std::time::Duration;

use reverb_logger::error::LogError;
use reverb_logger::{LogConfig, LogMode, LogUnit, LoggedEndpoint, SetupFailed};
use reverb_transport::loopback::InProcBootstrap;
use reverb_transport::{
    Bootstrap, CompletionKind, Provider, ProviderKind, RecvBuffer, Source, TagMatch, TransportConfig,
};

const WAIT: Duration = Duration::from_secs(30);

/// Runs `body` on each rank of a `size`-rank loopback job, one thread each, with its own
/// bootstrap and provider; returns what each rank returned, in rank order.
fn on_ranks<T: Send>(
    job: &str,
    size: u32,
    body: impl Fn(InProcBootstrap, Box<dyn Provider>) -> T + Sync,
) -> Vec<T> {
    let config = TransportConfig { provider: ProviderKind::LOOPBACK, ..TransportConfig::default() };
    let body = &body;
    std::thread::scope(|scope| {
        let handles: Vec<_> = InProcBootstrap::job(job, size)
            .into_iter()
            .map(|mut boot| {
                let config = config.clone();
                scope.spawn(move || {
                    let provider = reverb_transport::open(&config, &mut boot).expect("open loopback");
                    body(boot, provider)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("rank thread panicked")).collect()
    })
}

/// Rank 0 sends `payload` to rank 1 over the raw provider; rank 1 returns what it received.
fn ping(me: u32, provider: &mut dyn Provider, payload: &[u8]) -> Option<Vec<u8>> {
    if me == 0 {
        let op = provider.send(1, 7, payload).expect("send");
        provider.wait_op(op, WAIT).expect("send completes").into_result().expect("send ok");
        return None;
    }
    let buffer = RecvBuffer::Owned { capacity: payload.len() };
    let op = provider.post_recv(Source::Rank(0), TagMatch::exact(7), buffer).expect("post");
    let done = provider.wait_op(op, WAIT).expect("recv completes").into_result().expect("recv ok");
    match done.kind {
        CompletionKind::Recv { data, .. } => data.map(|d| d.as_slice().to_vec()),
        other => panic!("not a receive: {other:?}"),
    }
}

#[test]
fn a_failed_setup_hands_back_a_provider_that_still_works() {
    // Team as the unit without teams: refused by every rank before any collective.
    let config =
        LogConfig { mode: LogMode::CAUSAL, unit: LogUnit::Team, teams: None, ..LogConfig::default() };
    let received = on_ranks("setupfail", 2, |mut boot, provider| {
        let me = boot.job().rank;
        let SetupFailed { error, mut provider } =
            LoggedEndpoint::try_new(provider, &mut boot, config.clone()).expect_err("teams are missing");
        assert!(matches!(error, LogError::InvalidArgument(_)), "rank {me}: {error}");
        assert_eq!(provider.rank(), me, "the same provider came back");
        ping(me, provider.as_mut(), b"still connected")
    });
    assert_eq!(received[1].as_deref(), Some(&b"still connected"[..]));
}

#[test]
fn a_successful_setup_keeps_the_provider_for_every_protocol() {
    for mode in [LogMode::NONE, LogMode::PESSIMISTIC_RB, LogMode::PESSIMISTIC_SB, LogMode::CAUSAL] {
        let config = LogConfig { mode, unit: LogUnit::Rank, ..LogConfig::default() };
        let ranks = on_ranks(&format!("setupok-{mode}"), 2, |mut boot, provider| {
            let me = boot.job().rank;
            let mut endpoint = LoggedEndpoint::try_new(provider, &mut boot, config.clone())
                .unwrap_or_else(|failed| panic!("{mode}: rank {me}: {}", failed.error));
            assert_eq!(endpoint.provider().rank(), me);
            boot.barrier().expect("barrier");
        });
        assert_eq!(ranks.len(), 2, "{mode}");
    }
}
