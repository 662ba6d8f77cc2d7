//! The loopback provider's own cases: dropping a rank's provider fails what was pending on it,
//! and a job whose ranks are separate processes is refused with a clear error.

mod common;

use std::time::{Duration, Instant};

use common::{child, run_job, Job, WAIT};
use reverb_transport::loopback::InProcBootstrap;
use reverb_transport::{
    Access, Bootstrap, PeerState, Provider, ProviderKind, RecvBuffer, Source, TagMatch, TransportConfig,
    TransportError,
};

fn open_ranks(job: &str, size: u32) -> Vec<(InProcBootstrap, Box<dyn Provider>)> {
    let config = TransportConfig { provider: ProviderKind::LOOPBACK, ..TransportConfig::default() };
    let handles: Vec<_> = InProcBootstrap::job(job, size)
        .into_iter()
        .map(|mut boot| {
            let config = config.clone();
            std::thread::spawn(move || {
                let p = reverb_transport::open(&config, &mut boot).expect("open loopback");
                (boot, p)
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().expect("rank thread")).collect()
}

fn wait_dead(p: &mut dyn Provider, peer: u32) {
    let start = Instant::now();
    while p.peer_state(peer) != PeerState::Dead {
        p.block(Duration::from_millis(5)).unwrap();
        assert!(start.elapsed() < WAIT, "rank {peer}'s drop not seen");
    }
}

#[test]
fn a_dropped_rank_fails_what_was_pending_on_it() {
    let mut ranks = open_ranks("lbdrop", 2);
    let (_, mut gone) = ranks.pop().expect("rank 1");
    let (_, mut p) = ranks.pop().expect("rank 0");
    // A receive only rank 1 can satisfy, and a rendezvous send rank 1 never reads.
    let recv = p.post_recv(Source::Rank(1), TagMatch::exact(1), RecvBuffer::Owned { capacity: 8 }).unwrap();
    let region = p.alloc_region(1 << 20, Access::REMOTE_READ).unwrap();
    let send = p.send_region(1, 2, &region, 0, 1 << 20).unwrap();
    // Its last message arrives even though it is gone by the time rank 0 looks.
    gone.send(0, 3, b"bye").unwrap();
    drop(gone);
    wait_dead(p.as_mut(), 1);
    for op in [recv, send] {
        let err = p.wait_op(op, WAIT).unwrap().into_result().expect_err("pending on a dead rank");
        assert!(matches!(err, TransportError::PeerDead(1)), "{err}");
    }
    let last = p.post_recv(Source::Rank(1), TagMatch::exact(3), RecvBuffer::Owned { capacity: 8 }).unwrap();
    assert!(p.wait_op(last, WAIT).unwrap().status.is_ok(), "the last words were lost");
    assert!(matches!(p.send(1, 4, b"x"), Err(TransportError::PeerDead(1))));
    assert!(matches!(
        p.post_recv(Source::Rank(1), TagMatch::exact(5), RecvBuffer::Owned { capacity: 8 }),
        Err(TransportError::PeerDead(1))
    ));
}

#[test]
fn a_collective_missing_a_rank_times_out() {
    let mut boots = InProcBootstrap::with_timeout("lbtimeout", 2, Duration::from_millis(50));
    let err = boots[0].allgather(b"x").expect_err("rank 1 never arrives");
    assert!(matches!(err, TransportError::Timeout(_)), "{err}");
    // The round is left clean: once both arrive it completes.
    let mut b1 = boots.pop().expect("rank 1");
    let t = std::thread::spawn(move || b1.allgather(b"b").expect("rank 1"));
    assert_eq!(boots[0].allgather(b"a").expect("rank 0"), vec![b"a".to_vec(), b"b".to_vec()]);
    assert_eq!(t.join().expect("rank 1 thread"), vec![b"a".to_vec(), b"b".to_vec()]);
}

/// `REVERB_PROVIDER=loopback` across processes: every rank refuses to open, saying why.
#[test]
fn ranks_in_separate_processes_are_refused() {
    if child().is_some() {
        unreachable!("a loopback job across processes opened");
    }
    let exits = run_job(
        "ranks_in_separate_processes_are_refused",
        &Job::new(2).env(&[("REVERB_PROVIDER", "loopback")]),
    );
    for exit in exits {
        assert_ne!(exit.code, Some(0), "rank {} opened", exit.rank);
        assert!(exit.output().contains("loopback runs ranks as threads"), "{}", exit.output());
    }
}
