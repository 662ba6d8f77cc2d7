//! Verbs on-demand connections (issue 14, `REVERB_VERBS_CONNECT=ondemand`, which every job
//! here sets): a rank makes an RC QP for a peer on first traffic to it, through the wireup
//! channel. Runs only with `REVERB_PROVIDER=verbs` (in the rxe VM: `ci/verbs-suite.sh`);
//! elsewhere every test returns at once.
#![cfg(feature = "verbs")]

mod common;

use std::time::{Duration, Instant};

use common::{is_child, run_job, run_job_ok, scaled, Job, WAIT};
use reverb_transport::bootstrap::TcpBootstrap;
use reverb_transport::verbs::VerbsProvider;
use reverb_transport::{
    Access, Bootstrap, CompletionKind, JobInfo, Provider, RecvBuffer, RemoteRegion, Rma, Signal, Source,
    TagMatch, TransportConfig, TransportError,
};

const ON_DEMAND: (&str, &str) = ("REVERB_VERBS_CONNECT", "ondemand");

/// This rank's verbs provider, opened directly (the tests read its QP count).
fn verbs_child() -> Option<(JobInfo, TcpBootstrap, VerbsProvider)> {
    if !is_child() {
        return None;
    }
    let _ = reverb_transport::diag::init_stderr();
    let mut boot = TcpBootstrap::connect_from_env().expect("bootstrap");
    let config = TransportConfig::from_env().expect("config");
    let provider = VerbsProvider::open(config, &mut boot).expect("open verbs");
    Some((boot.job().clone(), boot, provider))
}

fn on_verbs() -> bool {
    common::only_on("verbs", "on-demand connections are the verbs provider's")
}

fn recv(p: &mut VerbsProvider, source: u32, tag: u64) -> Vec<u8> {
    let op =
        p.post_recv(Source::Rank(source), TagMatch::exact(tag), RecvBuffer::Owned { capacity: 64 }).unwrap();
    match p.wait_op(op, WAIT).expect("recv completion").into_result().expect("recv ok").kind {
        CompletionKind::Recv { data: Some(data), .. } => data,
        other => panic!("unexpected completion {other:?}"),
    }
}

fn exchange(boot: &mut dyn Bootstrap, r: &RemoteRegion) -> Vec<RemoteRegion> {
    let all = boot.allgather(&r.to_bytes()).expect("allgather");
    all.iter().map(|b| RemoteRegion::from_bytes(b).expect("descriptor")).collect()
}

/// 5 ranks, rank 0 talks only to rank 1: those two make one QP for each other, the rest none
/// (the loopback QP is made at open). With `REVERB_VERBS_CONNECT=all`, every rank has all.
fn only_needed_qps(test: &str, env: &[(&str, &str)], all: bool) {
    let Some((job, mut boot, mut p)) = verbs_child() else {
        run_job_ok(test, &Job::new(5).env(env));
        return;
    };
    assert_eq!(p.rc_qps(), if all { 5 } else { 1 }, "QPs after open");
    match job.rank {
        0 => {
            let op = p.send(1, 1, b"ping").unwrap();
            p.wait_op(op, WAIT).unwrap().into_result().unwrap();
            assert_eq!(recv(&mut p, 1, 2), b"pong");
        }
        1 => {
            assert_eq!(recv(&mut p, 0, 1), b"ping");
            let op = p.send(0, 2, b"pong").unwrap();
            p.wait_op(op, WAIT).unwrap().into_result().unwrap();
        }
        _ => {}
    }
    let want = if all {
        5
    } else if job.rank < 2 {
        2
    } else {
        1
    };
    assert_eq!(p.rc_qps(), want, "rank {}: QPs after rank 0 and 1 talked", job.rank);
    boot.barrier().unwrap();
}

#[test]
fn a_qp_only_for_peers_with_traffic() {
    if on_verbs() {
        only_needed_qps("a_qp_only_for_peers_with_traffic", &[ON_DEMAND], false);
    }
}

#[test]
fn connect_all_makes_every_qp_at_open() {
    if on_verbs() {
        only_needed_qps("connect_all_makes_every_qp_at_open", &[("REVERB_VERBS_CONNECT", "all")], true);
    }
}

/// Every rank's first op is a send to every other rank, all at once: each pair starts
/// connecting from both sides and must end with one connected QP pair, messages in order.
#[test]
fn simultaneous_first_sends_both_ways() {
    if !on_verbs() {
        return;
    }
    let Some((job, mut boot, mut p)) = verbs_child() else {
        run_job_ok("simultaneous_first_sends_both_ways", &Job::new(4).env(&[ON_DEMAND]));
        return;
    };
    let mut ops = Vec::new();
    for peer in (0..job.size).filter(|&r| r != job.rank) {
        for i in 0..3u8 {
            ops.push(p.send(peer, 10 + i as u64, &[job.rank as u8, i]).unwrap());
        }
    }
    for peer in (0..job.size).filter(|&r| r != job.rank) {
        for i in 0..3u8 {
            assert_eq!(recv(&mut p, peer, 10 + i as u64), [peer as u8, i]);
        }
    }
    for op in ops {
        p.wait_op(op, WAIT).unwrap().into_result().unwrap();
    }
    assert_eq!(p.rc_qps(), job.size as usize, "one QP per peer");
    boot.barrier().unwrap();
}

/// The first op towards a peer is a put (rank 0) or a get (rank 2): it waits for the
/// connection, then completes; the target only progresses.
#[test]
fn first_op_put_or_get() {
    if !on_verbs() {
        return;
    }
    let Some((job, mut boot, mut p)) = verbs_child() else {
        run_job_ok("first_op_put_or_get", &Job::new(3).env(&[ON_DEMAND]));
        return;
    };
    let region = p.alloc_region(4096, Access::REMOTE_RW).unwrap();
    region.fill(0, 4096, job.rank as u8 + 0x10).unwrap();
    let all = exchange(&mut boot, &region.remote());
    // Rank 0 writes the first half of rank 1's region, rank 2 reads the second.
    let half = |off: usize| Rma {
        local: &region,
        local_offset: off,
        remote: &all[1],
        remote_offset: off as u64,
        len: 2048,
    };
    match job.rank {
        0 => {
            let op = p.put(half(0), Signal::Yes).unwrap();
            p.wait_op(op, WAIT).unwrap().into_result().unwrap();
            let op = p.send(1, 1, b"put").unwrap();
            p.wait_op(op, WAIT).unwrap().into_result().unwrap();
        }
        2 => {
            let op = p.get(half(2048), Signal::Yes).unwrap();
            p.wait_op(op, WAIT).unwrap().into_result().unwrap();
            assert_eq!(region.to_vec(2048, 2048).unwrap(), vec![0x11; 2048]);
            let op = p.send(1, 2, b"got").unwrap();
            p.wait_op(op, WAIT).unwrap().into_result().unwrap();
        }
        _ => {
            assert_eq!(recv(&mut p, 0, 1), b"put");
            assert_eq!(region.to_vec(0, 2048).unwrap(), vec![0x10; 2048]);
            assert_eq!(recv(&mut p, 2, 2), b"got");
            assert_eq!(p.rc_qps(), 3);
        }
    }
    boot.barrier().unwrap();
}

/// A peer killed before anything connected to it: a send and a put towards it fail with
/// `PeerDead` within the bound (pidfd on one kernel; unanswered requests across hosts).
#[test]
fn a_peer_killed_before_connecting_is_dead_in_bounded_time() {
    if !on_verbs() {
        return;
    }
    let test = "a_peer_killed_before_connecting_is_dead_in_bounded_time";
    let Some((job, mut boot, mut p)) = verbs_child() else {
        let env = [ON_DEMAND, ("REVERB_PEER_TIMEOUT_MS", "400"), ("REVERB_VERBS_CONNECT_TIMEOUT_MS", "2000")];
        let exits = run_job(test, &Job::new(2).env(&env));
        assert_eq!(exits[1].signal, Some(libc::SIGKILL), "rank 1:\n{}", exits[1].output());
        assert_eq!(exits[0].code, Some(0), "rank 0:\n{}", exits[0].output());
        return;
    };
    let region = p.alloc_region(64, Access::REMOTE_RW).unwrap();
    let all = exchange(&mut boot, &region.remote());
    if job.rank == 1 {
        let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
        std::thread::sleep(Duration::from_secs(60));
        return;
    }
    // Let it die first: nothing was ever connected to it.
    std::thread::sleep(Duration::from_millis(200));
    let start = Instant::now();
    let rma = Rma { local: &region, local_offset: 0, remote: &all[1], remote_offset: 0, len: 8 };
    // Refused at once (pidfd found it dead already), or queued for the connection and failed.
    let mut ops = Vec::new();
    for first in [p.send(1, 1, b"hello?"), p.put(rma, Signal::Yes)] {
        match first {
            Ok(op) => ops.push(op),
            Err(e) => assert!(matches!(e, TransportError::PeerDead(1)), "{e}"),
        }
    }
    for op in ops {
        let done = p.wait_op(op, scaled(Duration::from_secs(5))).expect("a completion, not a timeout");
        let err = done.into_result().expect_err("an op towards a dead peer must fail");
        assert!(matches!(err, TransportError::PeerDead(1)), "{err}");
    }
    assert!(start.elapsed() < scaled(Duration::from_secs(5)), "took {:?}", start.elapsed());
    eprintln!("dead peer found after {:?}", start.elapsed());
    assert!(matches!(p.send(1, 2, b"x"), Err(TransportError::PeerDead(1))));
}
