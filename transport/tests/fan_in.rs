//! Many senders into one receiver with a small eager pool: on verbs every QP takes its eager
//! receives from one shared receive queue, here with two slots per peer
//! (`REVERB_VERBS_SRQ_DEPTH`), so the senders keep running out of credits and the SRQ is
//! refilled and shared all the time. Nothing may be lost or reordered per source, and a peer
//! that dies meanwhile must fail what waits on it with a clear error, not stall the others.
//!
//! Runs on the provider named by `REVERB_PROVIDER` (the soft-RoCE VM runs it with `verbs`);
//! on shm `REVERB_RING_SLOTS=2` gives the same pressure.

mod common;

use std::time::{Duration, Instant};

use common::{child, run_job, run_ok, Job, WAIT};
use reverb_transport::{Bootstrap, CompletionKind, Provider, RecvBuffer, Source, TagMatch, TransportError};

const SENDERS: u32 = 5;
const PER_SENDER: u32 = 200;

/// Message `seq` of a sender: the sequence number first, then the sender's rank byte. Mostly
/// eager sizes up to 4 KiB, an empty payload now and then, every 50th by rendezvous.
fn message(rank: u32, seq: u32) -> Vec<u8> {
    let len = match seq % 50 {
        0 => 20_000,
        7 => 0,
        n => 4 + (n as usize * 83) % 4093,
    };
    let mut msg = vec![rank as u8; len];
    if len >= 4 {
        msg[..4].copy_from_slice(&seq.to_le_bytes());
    }
    msg
}

fn recv_any(p: &mut dyn Provider, source: Source) -> (u32, u64, Vec<u8>) {
    let op =
        p.post_recv(source, TagMatch::any(), RecvBuffer::Owned { capacity: 1 << 16 }).expect("post_recv");
    let c = p.wait_op(op, WAIT).expect("recv completion").into_result().expect("recv ok");
    match c.kind {
        CompletionKind::Recv { source, tag, data: Some(data), .. } => (source, tag, data),
        other => panic!("unexpected completion {other:?}"),
    }
}

/// Receives `count` messages from any source and checks each against `message`, per-source order.
fn receive_checked(p: &mut dyn Provider, next: &mut [u32], count: u32, source: Source) {
    for _ in 0..count {
        let (src, tag, data) = recv_any(p, source);
        let seq = next[src as usize];
        assert_eq!(tag, seq as u64, "message from {src} out of order");
        assert_eq!(data, message(src, seq), "message {seq} from {src} corrupted");
        next[src as usize] += 1;
    }
}

fn send_all(p: &mut dyn Provider, rank: u32, count: u32) {
    let ops: Vec<_> =
        (0..count).map(|seq| p.send(0, seq as u64, &message(rank, seq)).expect("send")).collect();
    for op in ops {
        p.wait_op(op, WAIT).expect("send completion").into_result().expect("send ok");
    }
}

#[test]
fn many_senders_into_one_receiver_lose_nothing() {
    let Some((job, mut boot, mut p)) = child() else {
        let env = [("REVERB_VERBS_SRQ_DEPTH", "12"), ("REVERB_RING_SLOTS", "2")];
        return run_ok("many_senders_into_one_receiver_lose_nothing", SENDERS + 1, &env);
    };
    if job.rank == 0 {
        let mut next = vec![0u32; job.size as usize];
        receive_checked(p.as_mut(), &mut next, SENDERS * PER_SENDER, Source::Any);
        assert!(next[1..].iter().all(|&n| n == PER_SENDER), "{next:?}");
    } else {
        send_all(p.as_mut(), job.rank, PER_SENDER);
    }
    boot.barrier().unwrap();
}

#[test]
fn a_sender_dying_in_a_full_fan_in_is_reported() {
    if !common::is_child() {
        let env =
            [("REVERB_VERBS_SRQ_DEPTH", "6"), ("REVERB_RING_SLOTS", "2"), ("REVERB_PEER_TIMEOUT_MS", "400")];
        let exits = run_job("a_sender_dying_in_a_full_fan_in_is_reported", &Job::new(3).env(&env));
        assert_eq!(exits[2].signal, Some(libc::SIGKILL), "rank 2 should die:\n{}", exits[2].output());
        for exit in &exits[..2] {
            assert_eq!(exit.code, Some(0), "rank {}:\n{}", exit.rank, exit.output());
        }
        return;
    }
    let Some((job, _boot, mut p)) = child() else { return };
    match job.rank {
        0 => {
            let mut next = vec![0u32; 3];
            // All of rank 2's messages, then its cue to die; rank 1 streams meanwhile.
            receive_checked(p.as_mut(), &mut next, PER_SENDER / 4, Source::Rank(2));
            let cue = p.send(2, 0, b"die").unwrap();
            p.wait_op(cue, WAIT).unwrap().into_result().unwrap();
            let start = Instant::now();
            let err = match p.post_recv(Source::Rank(2), TagMatch::any(), RecvBuffer::Owned { capacity: 64 })
            {
                // Its death already seen: the post itself says so (as post_recv documents).
                Err(e) => e,
                Ok(never) => p
                    .wait_op(never, WAIT)
                    .expect("completion, not timeout")
                    .into_result()
                    .expect_err("must fail"),
            };
            assert!(matches!(err, TransportError::PeerDead(2)), "{err}");
            let took = start.elapsed();
            assert!(took < Duration::from_secs(15), "detection took {took:?}");
            eprintln!("dead sender detected after {took:?}");
            assert!(matches!(p.send(2, 1, b"x"), Err(TransportError::PeerDead(2))));
            // The live sender's stream is whole and in order.
            receive_checked(p.as_mut(), &mut next, PER_SENDER, Source::Rank(1));
            assert_eq!(next, [0, PER_SENDER, PER_SENDER / 4]);
        }
        1 => send_all(p.as_mut(), 1, PER_SENDER),
        _ => {
            send_all(p.as_mut(), 2, PER_SENDER / 4);
            let _ = recv_any(p.as_mut(), Source::Rank(0));
            let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
            std::thread::sleep(Duration::from_secs(60));
        }
    }
}
