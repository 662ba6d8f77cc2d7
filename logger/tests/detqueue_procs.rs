//! The node determinant queue across real processes: 3 producer processes and 1 consumer
//! process (this test binary re-executed) exchange 100k determinants through /dev/shm.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reverb_logger::detqueue::DetQueue;
use reverb_logger::{Determinant, LogError};

const ROLE_VAR: &str = "REVERB_DETQ_ROLE";
const PATH_VAR: &str = "REVERB_DETQ_PATH";
const PRODUCERS: u32 = 3;
const TOTAL: u64 = 100_000;
const CAPACITY: u64 = 1024;

fn share(producer: u32) -> u64 {
    TOTAL / u64::from(PRODUCERS) + u64::from(u64::from(producer) < TOTAL % u64::from(PRODUCERS))
}

fn det(producer: u32, ssn: u64) -> Determinant {
    Determinant { sender: producer, receiver: 1000 + producer, ssn, rsn: ssn ^ 0x5a5a }
}

fn produce(queue: &DetQueue, producer: u32) {
    let deadline = Instant::now() + Duration::from_secs(120);
    for ssn in 1..=share(producer) {
        loop {
            match queue.push(&det(producer, ssn)) {
                Ok(_) => break,
                // Back-pressure: the logger core has not caught up.
                Err(LogError::QueueFull { .. }) if Instant::now() < deadline => std::thread::yield_now(),
                Err(e) => panic!("producer {producer}: {e}"),
            }
        }
    }
}

fn consume(queue: &DetQueue) {
    let mut consumer = queue.consumer().expect("consumer role");
    let mut next = vec![1u64; PRODUCERS as usize];
    let mut seen = 0u64;
    let mut batch = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen < TOTAL {
        assert!(Instant::now() < deadline, "consumer saw only {seen} of {TOTAL}");
        batch.clear();
        let range = consumer.take_batch(256, &mut batch);
        if range.is_empty() {
            std::thread::yield_now();
            continue;
        }
        for d in &batch {
            let p = d.sender as usize;
            assert!(p < PRODUCERS as usize, "bad sender in {d:?}");
            // Each producer's entries arrive exactly once and in its order.
            assert_eq!(d.ssn, next[p], "lost or duplicated determinant {d:?}");
            assert_eq!(*d, det(d.sender, d.ssn));
            next[p] += 1;
        }
        seen += batch.len() as u64;
        consumer.mark_durable(range.end).expect("mark durable");
    }
    for p in 0..PRODUCERS {
        assert_eq!(next[p as usize], share(p) + 1, "producer {p} incomplete");
    }
    assert_eq!(queue.occupancy(), 0);
    println!("consumed {seen} determinants");
}

#[test]
fn three_producer_processes_one_consumer_process() {
    if let Ok(role) = std::env::var(ROLE_VAR) {
        let path = std::env::var(PATH_VAR).expect("queue path");
        let queue = DetQueue::open(&path).expect("open queue");
        match role.strip_prefix("producer:") {
            Some(p) => produce(&queue, p.parse().expect("producer index")),
            None => consume(&queue),
        }
        return;
    }
    let dir = if std::path::Path::new("/dev/shm").is_dir() {
        PathBuf::from("/dev/shm")
    } else {
        std::env::temp_dir()
    };
    let path = dir.join(format!("reverb-test-{}-detq-procs", std::process::id()));
    let _queue = DetQueue::create(&path, CAPACITY).expect("create queue");
    let exe = std::env::current_exe().expect("current exe");
    let roles: Vec<String> = std::iter::once("consumer".to_string())
        .chain((0..PRODUCERS).map(|p| format!("producer:{p}")))
        .collect();
    let children: Vec<_> = roles
        .iter()
        .map(|role| {
            Command::new(&exe)
                .args([
                    "three_producer_processes_one_consumer_process",
                    "--exact",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(ROLE_VAR, role)
                .env(PATH_VAR, &path)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn")
        })
        .collect();
    let mut failures = Vec::new();
    for (role, child) in roles.iter().zip(children) {
        let out = child.wait_with_output().expect("wait");
        let stdout = String::from_utf8_lossy(&out.stdout);
        // Guards against a child that matched no test and exited 0 having done nothing.
        let ran = stdout.contains("1 passed")
            && (role != "consumer" || stdout.contains(&format!("consumed {TOTAL} determinants")));
        if !out.status.success() || !ran {
            failures.push(format!(
                "{role}: {}\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    std::fs::remove_file(&path).ok();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
