//! A logged receive waits as `REVERB_WAIT_MODE` says and stays bounded in every mode: its
//! timeout fires (not before its bound) even while messages for another receive keep
//! arriving, and those messages are all delivered afterwards, in order.

use std::time::{Duration, Instant};

use reverb_logger::error::LogError;
use reverb_logger::{LogConfig, LogMode, LogUnit, LoggedEndpoint};
use reverb_transport::loopback::InProcBootstrap;
use reverb_transport::{
    Bootstrap, ProviderKind, Source, TagMatch, TransportConfig, TransportError, WaitMode,
};

const WAIT: Duration = Duration::from_secs(30);
const BOUND: Duration = Duration::from_millis(50);
const STREAM: u64 = 200;

/// Rank 0 streams `STREAM` messages under tag 5 while rank 1 waits for tag 9, which never comes.
fn bounded_while_other_messages_arrive(mode: WaitMode) {
    let transport =
        TransportConfig { provider: ProviderKind::LOOPBACK, wait_mode: mode, ..TransportConfig::default() };
    let config = LogConfig { mode: LogMode::CAUSAL, unit: LogUnit::Rank, ..LogConfig::default() };
    std::thread::scope(|scope| {
        for mut boot in InProcBootstrap::job(&format!("waits-{mode:?}"), 2) {
            let (transport, config) = (transport.clone(), config.clone());
            scope.spawn(move || {
                let provider = reverb_transport::open(&transport, &mut boot).expect("open loopback");
                let mut endpoint = LoggedEndpoint::new(provider, &mut boot, config).expect("endpoint");
                boot.barrier().expect("ready");
                if boot.job().rank == 0 {
                    for i in 0..STREAM {
                        endpoint.send(1, 5, &i.to_le_bytes()).expect("send");
                        std::thread::sleep(Duration::from_micros(500));
                    }
                } else {
                    let start = Instant::now();
                    let waited = endpoint.recv(Source::Rank(0), TagMatch::exact(9), BOUND);
                    let took = start.elapsed();
                    assert!(
                        matches!(waited, Err(LogError::Transport(TransportError::Timeout(_)))),
                        "{mode:?}: {waited:?}"
                    );
                    assert!(took >= BOUND && took < Duration::from_secs(10), "{mode:?}: took {took:?}");
                    for i in 0..STREAM {
                        let got = endpoint.recv(Source::Rank(0), TagMatch::exact(5), WAIT).expect("recv");
                        assert_eq!(got.payload, i.to_le_bytes(), "{mode:?}");
                    }
                }
                endpoint.finish(&mut boot).expect("finish");
            });
        }
    });
}

#[test]
fn a_logged_receive_is_bounded_when_polling() {
    bounded_while_other_messages_arrive(WaitMode::Poll);
}

#[test]
fn a_logged_receive_is_bounded_when_sleeping_on_events() {
    bounded_while_other_messages_arrive(WaitMode::Event);
}

#[test]
fn a_logged_receive_is_bounded_in_hybrid_mode() {
    bounded_while_other_messages_arrive(WaitMode::Hybrid);
}
