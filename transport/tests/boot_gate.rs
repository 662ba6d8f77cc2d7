//! The rendezvous's gate against real sockets on 127.0.0.1: idle connections (another local
//! user's flood) never keep a rank out, and every handshake has a deadline.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use reverb_transport::bootstrap::wire::{self, Frame};
use reverb_transport::bootstrap::{BootServer, ServerOptions, TcpBootstrap};
use reverb_transport::{Bootstrap, JobInfo};

const TOKEN: &str = "gate-token";
const T: Duration = Duration::from_secs(20);

fn job(rank: u32, size: u32, incarnation: u32) -> JobInfo {
    JobInfo { rank, size, node: rank, local_rank: 0, ranks_per_node: 1, job_id: "gate".into(), incarnation }
}

fn server(max_pending: usize, hello_timeout: Duration) -> BootServer {
    let opts = ServerOptions {
        hello_timeout,
        max_pending,
        io_timeout: Duration::from_secs(5),
        ..Default::default()
    };
    BootServer::start_with("127.0.0.1:0", 2, TOKEN, opts).unwrap()
}

/// Connections that connect and send nothing.
fn flood(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    (0..n).map(|_| TcpStream::connect(addr).unwrap()).collect()
}

/// The server's Refused reason on `s`, read until EOF (bounded by `within`).
fn refusal(s: &mut TcpStream, within: Duration) -> Option<String> {
    s.set_read_timeout(Some(within)).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    match wire::decode(&buf) {
        Ok((Frame::Refused { reason }, _)) => Some(reason),
        _ => None,
    }
}

/// Whether the server still holds `s` open (nothing to read and no EOF within a moment).
fn still_open(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut b = [0u8; 1];
    matches!(s.read(&mut b), Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut))
}

/// 300 idle connections against a gate of 16: the oldest idle ones make room, and a
/// respawned rank is admitted, announced and takes part in collectives again.
#[test]
fn a_rejoin_gets_in_through_a_flood_of_idle_connections() {
    let server = server(16, Duration::from_secs(120));
    let (addr, root) = (server.local_addr(), server.local_addr().to_string());
    let mut r0 = TcpBootstrap::connect(job(0, 2, 0), &root, TOKEN, T).unwrap();
    let old = TcpBootstrap::connect(job(1, 2, 0), &root, TOKEN, T).unwrap();
    let mut idle = flood(addr, 300);
    drop(old); // without Bye: lost
    server.mark_failed(1, 0, "killed by the test").unwrap();

    let mut r1 = TcpBootstrap::connect(job(1, 2, 1), &root, TOKEN, T).unwrap();
    r1.publish(b"addr-1").unwrap();
    let rejoin = r0.wait_rejoin(1, T).unwrap();
    assert_eq!((rejoin.rank, rejoin.incarnation), (1, 1));
    let h = thread::spawn(move || r1.allgather(b"b").unwrap());
    assert_eq!(r0.allgather(b"a").unwrap(), vec![b"a".to_vec(), b"b".to_vec()]);
    assert_eq!(h.join().unwrap(), vec![b"a".to_vec(), b"b".to_vec()]);

    // The oldest were dropped for newer ones, with the reason; the newest still wait.
    let reason = refusal(&mut idle[0], Duration::from_secs(5)).expect("the oldest idle one was refused");
    assert!(reason.contains("dropped for a newer connection"), "{reason}");
    assert!(still_open(idle.last_mut().unwrap()), "the newest idle connection is still pending");
}

/// A rank whose Hello is half there when a flood outruns the gate: its connection has sent
/// bytes, so the idle ones around it are evicted first.
#[test]
fn a_hello_in_a_flood_is_not_evicted_for_idle_connections() {
    let server = server(8, Duration::from_secs(120));
    let (addr, root) = (server.local_addr(), server.local_addr().to_string());
    let _before = flood(addr, 8);
    let mut raw = TcpStream::connect(addr).unwrap();
    let hello = Frame::Hello { token: TOKEN.as_bytes().to_vec(), rank: 0, size: 2, incarnation: 0 };
    let bytes = wire::encode(&hello).unwrap();
    raw.write_all(&bytes[..bytes.len() / 2]).unwrap();
    // Gives the gate a pass to read the first half before the flood comes.
    thread::sleep(Duration::from_millis(200));
    let _after = flood(addr, 40);
    raw.write_all(&bytes[bytes.len() / 2..]).unwrap();
    raw.set_read_timeout(Some(T)).unwrap();
    let mut h = [0u8; wire::HEADER_LEN + 12];
    raw.read_exact(&mut h).unwrap();
    assert!(matches!(wire::decode(&h), Ok((Frame::Welcome { size: 2, .. }, _))), "{h:?}");
    let mut r1 = TcpBootstrap::connect(job(1, 2, 0), &root, TOKEN, T).unwrap();
    r1.publish(b"x").unwrap();
}

/// The deadline covers the whole Hello from accept: a silent peer and one trickling a
/// valid Hello a byte at a time are both dropped once it passes.
#[test]
fn idle_and_trickling_connections_are_dropped_at_the_handshake_deadline() {
    let server = server(256, Duration::from_millis(400));
    let addr = server.local_addr();
    let mut silent = TcpStream::connect(addr).unwrap();
    let mut slow = TcpStream::connect(addr).unwrap();
    let hello = Frame::Hello { token: TOKEN.as_bytes().to_vec(), rank: 0, size: 2, incarnation: 0 };
    let bytes = wire::encode(&hello).unwrap();
    let t0 = Instant::now();
    let mut sent = 0;
    // A byte per 100 ms, each well within any per-read bound; it stops before the deadline,
    // so that no byte reaches a closed socket (which would reset it, losing the reason).
    while t0.elapsed() < Duration::from_millis(300) {
        slow.write_all(&bytes[sent..sent + 1]).unwrap();
        sent += 1;
        thread::sleep(Duration::from_millis(100));
    }
    assert!(sent < bytes.len());
    let reason = refusal(&mut slow, Duration::from_secs(5)).expect("the trickler was refused");
    assert!(reason.contains("incomplete frame"), "{reason}");
    let reason = refusal(&mut silent, Duration::from_secs(5)).expect("the silent one was refused");
    assert!(reason.contains("no Hello"), "{reason}");
}
