//! Causal logging's seam and bounds on real processes (shm, two simulated nodes):
//! - determinants routed through the node's shared `DetQueue` (what the node logger core
//!   drains) instead of the rank's own ring writes: a consumer thread stands in for the
//!   logger core, and the determinants become stable only once it acknowledges them;
//! - a full detLog pushes back (`DetLogFull`) without losing the message, and a checkpoint
//!   (`checkpoint_taken`) frees it;
//! - determinants a full ring cannot take pile up to `max_unstable`, then delivery pushes back
//!   (`QueueFull`) with nothing lost; checkpoints free the ring and the job goes on.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use reverb_logger::detqueue::DetQueue;
use reverb_logger::{Determinant, DeterminantSink, LogConfig, LogError, LogMode, LogUnit, LoggedEndpoint};
use reverb_transport::{Bootstrap, Source, TagMatch};

const WAIT: Duration = Duration::from_secs(30);
const TAG: u64 = 11;

fn causal_config() -> LogConfig {
    LogConfig { mode: LogMode::CAUSAL, unit: LogUnit::Rank, ring_capacity: 1 << 20, ..LogConfig::default() }
}

/// Stand-in for the node logger core: drains the queue, keeps what it took, acknowledges.
fn logger_core(path: std::path::PathBuf, stop: Arc<AtomicBool>) -> Vec<Determinant> {
    let queue = DetQueue::open(&path).expect("open queue");
    let mut consumer = queue.consumer().expect("consumer");
    let mut taken = Vec::new();
    loop {
        let range = consumer.take_batch(64, &mut taken);
        if range.is_empty() {
            if stop.load(Ordering::Acquire) {
                return taken;
            }
            // Idle back-off of a polling consumer (it ends on `stop`), not a synchronisation.
            std::thread::sleep(Duration::from_micros(50));
            continue;
        }
        consumer.mark_durable(range.end).expect("ack");
    }
}

#[test]
fn causal_determinants_through_node_queue() {
    const ROUNDS: u64 = 200;
    let test = "causal_determinants_through_node_queue";
    let Some((job, mut boot, provider)) = common::child() else {
        common::run_job_ok(test, &common::Job::new(2));
        return;
    };
    let path = std::env::temp_dir().join(format!("reverb-detq-{}-{}", std::process::id(), job.rank));
    let queue = DetQueue::create(&path, 64).expect("create queue");
    let stop = Arc::new(AtomicBool::new(false));
    let core = {
        let (path, stop) = (path.clone(), stop.clone());
        std::thread::spawn(move || logger_core(path, stop))
    };
    let mut endpoint = LoggedEndpoint::new(provider, &mut boot, causal_config()).expect("endpoint");
    endpoint.attach_det_queue(queue).expect("attach");
    assert!(matches!(endpoint.determinant_sink(), DeterminantSink::NodeQueue(_)));
    let peer = 1 - job.rank;
    let mut mine = Vec::new();
    // Ping-pong with wildcard receives on both sides: every delivery makes a determinant.
    for i in 0..ROUNDS {
        if job.rank == 0 {
            endpoint.send(peer, TAG, &i.to_le_bytes()).expect("ping");
        }
        let d = endpoint.recv(Source::Any, TagMatch::exact(TAG), WAIT).expect("recv");
        assert_eq!(d.payload, i.to_le_bytes());
        mine.push(d.determinant.expect("wildcard receive"));
        if job.rank == 1 {
            endpoint.send(peer, TAG, &i.to_le_bytes()).expect("pong");
        }
    }
    endpoint.flush_log().expect("flush through the logger core");
    let s = endpoint.stats();
    assert_eq!(s.determinants_generated, ROUNDS);
    assert_eq!((s.determinants_logged, s.determinants_acknowledged), (ROUNDS, ROUNDS));
    assert_eq!(endpoint.unstable_determinants(), 0);
    assert!(s.determinants_piggybacked > 0, "unstable determinants ride on the replies");
    assert_eq!(s.determinant_bytes_logged, 0, "nothing written to the ring by the rank itself");
    stop.store(true, Ordering::Release);
    let taken = core.join().expect("logger core thread");
    assert_eq!(taken, mine, "the logger core got every determinant, in order");
    endpoint.finish(&mut boot).expect("finish");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn full_det_log_pushes_back_until_checkpoint() {
    const BURST: u64 = 10;
    let test = "full_det_log_pushes_back_until_checkpoint";
    let Some((job, mut boot, provider)) = common::child() else {
        common::run_job_ok(test, &common::Job::new(2));
        return;
    };
    let config = LogConfig { det_log_limit: 4, ..causal_config() };
    let mut endpoint = LoggedEndpoint::new(provider, &mut boot, config).expect("endpoint");
    if job.rank == 0 {
        for i in 0..BURST {
            endpoint.send(1, TAG, &i.to_le_bytes()).expect("send");
        }
        // Rank 1's reply carries its BURST determinants: more than the limit, all kept.
        endpoint.recv(Source::Rank(1), TagMatch::exact(TAG), WAIT).expect("first reply");
        assert_eq!(endpoint.stats().determinants_stored, BURST);
        match endpoint.recv(Source::Rank(1), TagMatch::exact(TAG), Duration::from_millis(100)) {
            Err(LogError::DetLogFull { entries, limit }) => assert_eq!((entries, limit), (BURST, 4)),
            other => panic!("expected DetLogFull, got {other:?}"),
        }
        assert_eq!(endpoint.stats().back_pressure_events, 1);
    } else {
        for i in 0..BURST {
            let d = endpoint.recv(Source::Any, TagMatch::exact(TAG), WAIT).expect("recv");
            assert_eq!(d.payload, i.to_le_bytes());
        }
        endpoint.send(0, TAG, b"first").expect("reply");
    }
    let report = endpoint.checkpoint_taken(&mut boot).expect("checkpoint");
    if job.rank == 0 {
        assert_eq!(report.det_log_entries_freed, BURST);
        assert_eq!(endpoint.stats().det_log_bytes, 0);
        let d = endpoint.recv(Source::Rank(1), TagMatch::exact(TAG), WAIT).expect("after the checkpoint");
        assert_eq!(d.payload, b"second");
    } else {
        assert_eq!(report.send_log_bytes_freed, reverb_logger::sendlog::LoggedSend::charged_bytes(5));
        endpoint.send(0, TAG, b"second").expect("second reply");
    }
    endpoint.finish(&mut boot).expect("finish");
}

/// A ring too small for the determinants leaves them unwritten (still piggybacked); once
/// `max_unstable` of them wait, a wildcard delivery pushes back (`QueueFull`) with the message
/// kept; the checkpoint makes them unnecessary and frees the ring, and receiving goes on.
#[test]
fn unstable_bound_pushes_back_until_checkpoint() {
    const MESSAGES: u64 = 60;
    const MAX_UNSTABLE: usize = 20;
    let test = "unstable_bound_pushes_back_until_checkpoint";
    let Some((job, mut boot, provider)) = common::child() else {
        common::run_job_ok(test, &common::Job::new(2));
        return;
    };
    let config = LogConfig { ring_capacity: 512, max_unstable: MAX_UNSTABLE, ..causal_config() };
    let mut endpoint = LoggedEndpoint::new(provider, &mut boot, config).expect("endpoint");
    let mut received = Vec::new();
    if job.rank == 0 {
        for i in 0..MESSAGES {
            endpoint.send(1, TAG, &i.to_le_bytes()).expect("send");
        }
    } else {
        loop {
            match endpoint.recv(Source::Any, TagMatch::exact(TAG), WAIT) {
                Ok(d) => received.push(d.payload),
                Err(LogError::QueueFull { capacity }) => {
                    assert_eq!(capacity, MAX_UNSTABLE as u64);
                    break;
                }
                Err(e) => panic!("recv: {e}"),
            }
        }
        assert!(received.len() < MESSAGES as usize, "the ring cannot hold every determinant");
        assert_eq!(endpoint.unstable_determinants(), MAX_UNSTABLE);
        assert!(endpoint.stats().back_pressure_events > 0);
        assert!(matches!(endpoint.flush_log(), Err(LogError::RingFull { .. })), "no room to flush");
    }
    let report = endpoint.checkpoint_taken(&mut boot).expect("checkpoint");
    if job.rank == 1 {
        // Some of the bound's determinants may have been written already, their puts not yet
        // acknowledged (tcp acknowledges a put when the target applied it): those become
        // stable before the checkpoint instead of being dropped by it.
        let dropped = report.unstable_dropped;
        assert!(dropped > 0 && dropped <= MAX_UNSTABLE as u64, "{dropped} unstable dropped");
        assert!(report.ring_bytes_freed > 0);
        assert_eq!(endpoint.unstable_determinants(), 0);
        while received.len() < MESSAGES as usize {
            match endpoint.recv(Source::Any, TagMatch::exact(TAG), WAIT) {
                Ok(d) => received.push(d.payload),
                // The ring fills again: each checkpoint lets a few more through.
                Err(LogError::QueueFull { .. }) => {
                    boot.allgather(&[1]).expect("ask for a checkpoint");
                    endpoint.checkpoint_taken(&mut boot).expect("checkpoint");
                }
                Err(e) => panic!("recv: {e}"),
            }
        }
        // A last checkpoint, so the shutdown flush finds nothing the full ring refused.
        boot.allgather(&[1]).expect("ask for a checkpoint");
        endpoint.checkpoint_taken(&mut boot).expect("checkpoint");
        boot.allgather(&[0]).expect("done");
        let expected: Vec<Vec<u8>> = (0..MESSAGES).map(|i| i.to_le_bytes().to_vec()).collect();
        assert_eq!(received, expected, "nothing lost or reordered by the push-back");
    } else {
        // Checkpoint whenever rank 1 asks.
        while boot.allgather(&[0]).expect("request")[1] == [1] {
            endpoint.checkpoint_taken(&mut boot).expect("checkpoint");
        }
    }
    endpoint.finish(&mut boot).expect("finish");
}
