//! `LoggedEndpoint::try_new` over the loopback provider (ranks as threads): a setup that fails
//! hands the provider back with the error, still connected and usable, which is what a
//! recovery inside `Runtime::init` needs; a setup that succeeds keeps it. With logging off the
//! endpoint goes pass-through: the provider's own matching, per-tag order, no receive left
//! behind by a wait that timed out, and reverb's own tags refused.

use std::time::Duration;

use reverb_logger::error::LogError;
use reverb_logger::protocol::LOGGED_MESSAGE_TAG;
use reverb_logger::{LogConfig, LogMode, LogUnit, LoggedEndpoint, SetupFailed};
use reverb_transport::loopback::InProcBootstrap;
use reverb_transport::{
    Bootstrap, CompletionKind, Provider, ProviderKind, RecvBuffer, Source, TagMatch, TransportConfig,
    TransportError,
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

/// Probes until a message from `from` with `tag` shows or `WAIT` passes: a count of tries
/// would not bound a sender thread the loaded machine has not scheduled yet.
fn probe_within(endpoint: &mut LoggedEndpoint, from: Source, tag: u64) -> Option<(u32, u64, usize)> {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let seen = endpoint.probe(from, TagMatch::exact(tag)).expect("probe");
        if seen.is_some() || std::time::Instant::now() > deadline {
            return seen;
        }
        std::thread::yield_now();
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
            // Only a protocol that keeps no channel state leaves messages to the provider.
            assert_eq!(endpoint.is_pass_through(), mode == LogMode::NONE, "{mode}");
            boot.barrier().expect("barrier");
        });
        assert_eq!(ranks.len(), 2, "{mode}");
    }
}

#[test]
fn pass_through_keeps_order_per_tag_and_leaves_nothing_posted() {
    let config = LogConfig { mode: LogMode::NONE, ..LogConfig::default() };
    on_ranks("passthrough-order", 2, |mut boot, provider| {
        let me = boot.job().rank;
        let mut endpoint = LoggedEndpoint::new(provider, &mut boot, config.clone()).expect("endpoint");
        if me == 0 {
            for (tag, payload) in [(1, &b"one"[..]), (2, b"two"), (1, b"three")] {
                endpoint.send(1, tag, payload).expect("send");
            }
            boot.barrier().expect("sent");
            boot.barrier().expect("timed out");
            endpoint.send(1, 3, b"late").expect("send late");
        } else {
            boot.barrier().expect("sent");
            let from0 = Source::Rank(0);
            assert_eq!(probe_within(&mut endpoint, from0, 1), Some((0, 1, 3)));
            // A later tag first, then tag 1's two messages in their order.
            let take = |e: &mut LoggedEndpoint, tag| e.recv(from0, TagMatch::exact(tag), WAIT).expect("recv");
            assert_eq!(take(&mut endpoint, 2).payload, b"two");
            let first = take(&mut endpoint, 1);
            assert_eq!((first.payload.as_slice(), first.ssn, first.determinant), (&b"one"[..], 0, None));
            assert_eq!(take(&mut endpoint, 1).payload, b"three");
            assert!(endpoint.recv_collected(from0, TagMatch::exact(1)).expect("collected").is_none());
            let waited = endpoint.recv(from0, TagMatch::exact(3), Duration::from_millis(20));
            assert!(matches!(waited, Err(LogError::Transport(TransportError::Timeout(_)))), "{waited:?}");
            boot.barrier().expect("timed out");
            // The receive that timed out left nothing posted to swallow this one.
            assert_eq!(probe_within(&mut endpoint, Source::Any, 3), Some((0, 3, 4)));
            assert_eq!(take(&mut endpoint, 3).payload, b"late");
        }
        boot.barrier().expect("done");
    });
}

#[test]
fn pass_through_refuses_reverb_tags() {
    let config = LogConfig { mode: LogMode::NONE, ..LogConfig::default() };
    on_ranks("passthrough-tags", 2, |mut boot, provider| {
        let mut endpoint = LoggedEndpoint::new(provider, &mut boot, config.clone()).expect("endpoint");
        let refused = |r: Result<(), LogError>| match r {
            Err(LogError::InvalidArgument(why)) => assert!(why.contains("reverb's own tags"), "{why}"),
            other => panic!("not refused: {other:?}"),
        };
        refused(endpoint.send(1 - boot.job().rank, LOGGED_MESSAGE_TAG, b"x"));
        refused(endpoint.recv(Source::Any, TagMatch::any(), WAIT).map(drop));
        refused(endpoint.probe(Source::Any, TagMatch { tag: LOGGED_MESSAGE_TAG, mask: !0xffff }).map(drop));
        // A match that pins tag bits outside reverb's ranges is fine.
        let mpi_like = TagMatch { tag: 5 << 32, mask: 0xffff_ffff_0000_0000 };
        assert!(endpoint.recv_collected(Source::Any, mpi_like).expect("allowed").is_none());
        boot.barrier().expect("done");
    });
}

#[test]
fn pass_through_can_be_turned_off() {
    let config = LogConfig { mode: LogMode::NONE, pass_through: false, ..LogConfig::default() };
    on_ranks("passthrough-off", 2, |mut boot, provider| {
        let me = boot.job().rank;
        let mut endpoint = LoggedEndpoint::new(provider, &mut boot, config.clone()).expect("endpoint");
        assert!(!endpoint.is_pass_through());
        // Enveloped traffic takes any tag, reverb's own ranges included.
        if me == 0 {
            endpoint.send(1, LOGGED_MESSAGE_TAG, b"framed").expect("send");
        } else {
            let d = endpoint.recv(Source::Rank(0), TagMatch::exact(LOGGED_MESSAGE_TAG), WAIT).expect("recv");
            assert_eq!((d.payload.as_slice(), d.ssn), (&b"framed"[..], 1));
        }
        boot.barrier().expect("done");
    });
}
