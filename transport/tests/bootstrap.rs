//! Bootstrap: env parsing, wire format, and the TCP rendezvous against a real server on
//! 127.0.0.1 (ranks are threads here).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use reverb_transport::bootstrap::wire::{self, Frame};
use reverb_transport::bootstrap::{BootParams, BootServer, PeerAddress, Rejoin, ServerOptions, TcpBootstrap};
use reverb_transport::{Bootstrap, JobInfo, TransportError};

const TOKEN: &str = "s3cret-token";
const T: Duration = Duration::from_secs(10);

fn job(rank: u32, size: u32) -> JobInfo {
    JobInfo {
        rank,
        size,
        node: 0,
        local_rank: rank,
        ranks_per_node: size,
        job_id: "test".into(),
        incarnation: 0,
    }
}

/// `e` is the server's refusal, and its reason names what was wrong (`why`, a key word).
fn assert_refused(e: &TransportError, why: &str) {
    assert!(matches!(e, TransportError::Bootstrap(m) if m.contains("refused") && m.contains(why)), "{e}");
}

fn quick_server(size: u32) -> BootServer {
    let opts = ServerOptions {
        hello_timeout: Duration::from_millis(500),
        io_timeout: Duration::from_secs(2),
        ..ServerOptions::default()
    };
    BootServer::start_with("127.0.0.1:0", size, TOKEN, opts).unwrap()
}

/// Runs a full job of `size` thread-ranks doing `rounds` allgathers and a barrier.
fn run_job(addr: SocketAddr, size: u32, rounds: u32) {
    let root = addr.to_string();
    let hs: Vec<_> = (0..size)
        .map(|r| {
            let root = root.clone();
            thread::spawn(move || {
                let mut b = TcpBootstrap::connect(job(r, size), &root, TOKEN, T).unwrap();
                for round in 0..rounds {
                    let mine = format!("r{r}-k{round}").into_bytes();
                    let all = b.allgather(&mine).unwrap();
                    assert_eq!(all.len(), size as usize);
                    for (i, d) in all.iter().enumerate() {
                        assert_eq!(d, format!("r{i}-k{round}").as_bytes());
                    }
                }
                b.barrier().unwrap();
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}

fn raw(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

/// Reads until EOF (bounded) and returns the Refused reason if the server sent one.
fn refusal(mut s: TcpStream) -> Option<String> {
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    match wire::decode(&buf) {
        Ok((Frame::Refused { reason }, _)) => Some(reason),
        _ => None,
    }
}

fn header(kind: u8, version: u16, len: u32) -> Vec<u8> {
    let mut h = b"RVBT".to_vec();
    h.extend_from_slice(&version.to_le_bytes());
    h.push(kind);
    h.push(0);
    h.extend_from_slice(&len.to_le_bytes());
    h
}

fn hello(token: &str, rank: u32, size: u32) -> Vec<u8> {
    wire::encode(&Frame::Hello { token: token.as_bytes().to_vec(), rank, size, incarnation: 0 }).unwrap()
}

#[test]
fn allgather_among_four_ranks() {
    let server = BootServer::start("127.0.0.1:0", 4, TOKEN).unwrap();
    run_job(server.local_addr(), 4, 5);
}

#[test]
fn allgather_carries_large_and_empty_contributions() {
    let server = quick_server(2);
    let root = server.local_addr().to_string();
    let hs: Vec<_> = (0..2u32)
        .map(|r| {
            let root = root.clone();
            thread::spawn(move || {
                let mut b = TcpBootstrap::connect(job(r, 2), &root, TOKEN, T).unwrap();
                let mine = if r == 0 { vec![7u8; 3 << 20] } else { Vec::new() };
                let all = b.allgather(&mine).unwrap();
                assert_eq!(all[0].len(), 3 << 20);
                assert!(all[1].is_empty());
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}

#[test]
fn client_retries_until_the_server_starts() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let root = format!("127.0.0.1:{port}");
    let r2 = root.clone();
    let client = thread::spawn(move || {
        let mut b = TcpBootstrap::connect(job(0, 1), &r2, TOKEN, T).unwrap();
        b.allgather(b"x").unwrap()
    });
    // The delay is the case under test: the server starts after the client began connecting.
    thread::sleep(Duration::from_millis(300));
    let _server = BootServer::start(&root, 1, TOKEN).unwrap();
    assert_eq!(client.join().unwrap(), vec![b"x".to_vec()]);
}

#[test]
fn connect_times_out_without_server() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let t0 = Instant::now();
    let r = TcpBootstrap::connect(job(0, 1), &format!("127.0.0.1:{port}"), TOKEN, Duration::from_millis(400));
    assert!(matches!(r, Err(TransportError::Bootstrap(_))));
    assert!(t0.elapsed() < Duration::from_secs(3));
}

#[test]
fn rank_zero_hosts_the_server_without_a_launcher() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let p = BootParams {
        root: format!("127.0.0.1:{port}"),
        token: TOKEN.into(),
        timeout: T,
        external_server: false,
    };
    let hs: Vec<_> = (0..3u32)
        .map(|r| {
            let p = p.clone();
            thread::spawn(move || {
                let mut b = TcpBootstrap::connect_with(job(r, 3), &p).unwrap();
                let all = b.allgather(&[r as u8]).unwrap();
                assert_eq!(all, vec![vec![0], vec![1], vec![2]]);
                b.barrier().unwrap();
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}

#[test]
fn wrong_token_is_refused_and_the_job_completes() {
    let server = quick_server(4);
    let addr = server.local_addr();
    // An impostor claiming rank 0 first: it must not take rank 0's slot.
    let e = TcpBootstrap::connect(job(0, 4), &addr.to_string(), "not-the-token", T)
        .err()
        .expect("wrong token must be refused");
    assert_refused(&e, "token");
    run_job(addr, 4, 2);
}

#[test]
fn bad_hellos_are_refused_without_disturbing_the_job() {
    let server = quick_server(3);
    let addr = server.local_addr();

    // Wrong size, rank out of range, empty token.
    for (tok, rank, size, why) in
        [(TOKEN, 0, 4, "wrong job size"), (TOKEN, 7, 3, "out of range"), ("", 0, 3, "wrong job token")]
    {
        let mut s = raw(addr);
        s.write_all(&hello(tok, rank, size)).unwrap();
        let reason = refusal(s).expect("a Refused frame");
        assert!(reason.contains(why), "{reason}");
    }
    run_job(addr, 3, 2);
}

#[test]
fn duplicate_rank_is_refused() {
    let server = quick_server(2);
    let root = server.local_addr().to_string();
    let mut b0 = TcpBootstrap::connect(job(0, 2), &root, TOKEN, T).unwrap();
    let e = TcpBootstrap::connect(job(0, 2), &root, TOKEN, T).err().expect("duplicate refused");
    assert_refused(&e, "duplicate");
    let r1 = root.clone();
    let h = thread::spawn(move || {
        let mut b1 = TcpBootstrap::connect(job(1, 2), &r1, TOKEN, T).unwrap();
        b1.allgather(b"one").unwrap()
    });
    let all = b0.allgather(b"zero").unwrap();
    assert_eq!(all, vec![b"zero".to_vec(), b"one".to_vec()]);
    assert_eq!(h.join().unwrap(), all);
}

#[test]
fn malformed_connections_are_refused_without_disturbing_the_job() {
    let server = quick_server(2);
    let addr = server.local_addr();

    let silent = raw(addr); // never sends a Hello
    let mut garbage = raw(addr);
    garbage.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut truncated = raw(addr); // header promises 40 bytes, 5 arrive, then silence
    truncated.write_all(&header(1, wire::VERSION, 40)).unwrap();
    truncated.write_all(&[1, 2, 3, 4, 5]).unwrap();
    let mut oversized = raw(addr);
    oversized.write_all(&header(1, wire::VERSION, u32::MAX)).unwrap();
    let mut version = raw(addr);
    let mut v2 = hello(TOKEN, 0, 2);
    v2[4] = wire::VERSION as u8 + 1;
    version.write_all(&v2).unwrap();
    let mut not_hello = raw(addr);
    not_hello.write_all(&wire::encode(&Frame::Contribute { round: 0, data: vec![1] }).unwrap()).unwrap();
    let mut cut = raw(addr); // closes inside the header
    cut.write_all(&header(1, wire::VERSION, 10)[..6]).unwrap();
    cut.shutdown(std::net::Shutdown::Write).unwrap();

    // The real job runs while all of those are pending.
    run_job(addr, 2, 3);

    let t0 = Instant::now();
    for (name, s, why) in [
        ("garbage", garbage, "bad magic"),
        ("truncated", truncated, "incomplete frame"),
        ("oversized", oversized, "exceeds the limit"),
        ("version", version, "unsupported version"),
        ("not hello", not_hello, "expected Hello"),
        ("cut", cut, "closed inside a header"),
        ("silent", silent, "no Hello"),
    ] {
        let reason = refusal(s).unwrap_or_else(|| panic!("{name}: no Refused frame"));
        assert!(reason.contains(why), "{name}: {reason}");
    }
    assert!(t0.elapsed() < Duration::from_secs(5));
    // And the server still serves a fresh job of the right size? No: ranks already left.
    // A late valid rank is refused because its slot is done.
    let e = TcpBootstrap::connect(job(1, 2), &addr.to_string(), TOKEN, T).err().unwrap();
    assert_refused(&e, "already left");
}

/// Joins as `rank` with a raw socket so the test can drop it without a Bye.
fn raw_rank(addr: SocketAddr, rank: u32, size: u32) -> TcpStream {
    let mut s = raw(addr);
    s.write_all(&hello(TOKEN, rank, size)).unwrap();
    let mut h = [0u8; wire::HEADER_LEN + 12];
    s.read_exact(&mut h).unwrap();
    assert!(matches!(wire::decode(&h), Ok((Frame::Welcome { size: 3, .. }, _))));
    s
}

#[test]
fn lost_rank_fails_pending_and_later_allgathers() {
    let server = quick_server(3);
    let root = server.local_addr().to_string();
    let dying = raw_rank(server.local_addr(), 2, 3);
    let hs: Vec<_> = (0..2u32)
        .map(|r| {
            let root = root.clone();
            thread::spawn(move || {
                let mut b = TcpBootstrap::connect(job(r, 3), &root, TOKEN, T).unwrap();
                let t0 = Instant::now();
                let e = b.allgather(b"x").unwrap_err();
                let took = t0.elapsed();
                let again = b.allgather(b"y").unwrap_err();
                (e, again, took)
            })
        })
        .collect();
    // Lets ranks 0 and 1 enter the round first (the server shows no state to poll). Not a
    // correctness wait: a loss before the round fails it the same way (next test).
    thread::sleep(Duration::from_millis(300));
    drop(dying); // no Bye: a crash
    for h in hs {
        let (e, again, took) = h.join().unwrap();
        assert!(matches!(e, TransportError::PeerDead(2)), "{e}");
        assert!(matches!(again, TransportError::PeerDead(2)), "{again}");
        assert!(took < T, "took {took:?}");
    }
}

#[test]
fn lost_rank_fails_allgathers_started_after_the_loss() {
    let server = quick_server(3);
    let root = server.local_addr().to_string();
    drop(raw_rank(server.local_addr(), 1, 3));
    // Lets the server see the loss before the others connect (no state to poll). Not a
    // correctness wait: a loss seen during the round fails it the same way (previous test).
    thread::sleep(Duration::from_millis(200));
    let hs: Vec<_> = [0u32, 2]
        .into_iter()
        .map(|r| {
            let root = root.clone();
            thread::spawn(move || {
                let mut b = TcpBootstrap::connect(job(r, 3), &root, TOKEN, T).unwrap();
                b.allgather(b"x").unwrap_err()
            })
        })
        .collect();
    for h in hs {
        let e = h.join().unwrap();
        assert!(matches!(e, TransportError::PeerDead(1)), "{e}");
    }
}

#[test]
fn allgather_times_out_when_a_rank_never_comes() {
    let server = quick_server(2);
    let mut b =
        TcpBootstrap::connect(job(0, 2), &server.local_addr().to_string(), TOKEN, Duration::from_millis(500))
            .unwrap();
    let t0 = Instant::now();
    let e = b.allgather(b"x").unwrap_err();
    // The TCP bootstrap reports its timeouts as `Bootstrap` errors (not `Timeout`): the
    // variant and the key words, then.
    assert!(matches!(&e, TransportError::Bootstrap(m) if m.contains("timed out")), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(3));
}

#[test]
fn connect_from_env_needs_a_job() {
    if JobInfo::from_env().ok().flatten().is_some() {
        return; // running inside a launcher; nothing to check
    }
    let e = TcpBootstrap::connect_from_env().err().expect("no job env");
    // The error names the variables to set.
    assert!(matches!(&e, TransportError::Config(m) if m.contains("REVERB_RANK")), "{e}");
}

// ---- env parser ----

fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let v: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |k| v.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
}

fn parse(pairs: &[(&str, &str)]) -> Result<Option<JobInfo>, TransportError> {
    JobInfo::from_lookup(lookup(pairs))
}

#[test]
fn env_nothing_is_none() {
    assert_eq!(parse(&[("HOME", "/root")]).unwrap(), None);
}

#[test]
fn env_reverb_launcher() {
    let j = parse(&[
        ("REVERB_RANK", "5"),
        ("REVERB_SIZE", "8"),
        ("REVERB_NODE", "2"),
        ("REVERB_LOCAL_RANK", "1"),
        ("REVERB_RANKS_PER_NODE", "2"),
        ("REVERB_JOB_ID", "rv-abc"),
        ("REVERB_INCARNATION", "3"),
        // Lower-priority sources are ignored.
        ("SLURM_PROCID", "0"),
        ("SLURM_NTASKS", "1"),
    ])
    .unwrap()
    .unwrap();
    assert_eq!(
        j,
        JobInfo {
            rank: 5,
            size: 8,
            node: 2,
            local_rank: 1,
            ranks_per_node: 2,
            job_id: "rv-abc".into(),
            incarnation: 3
        }
    );
}

#[test]
fn env_reverb_defaults_to_one_node() {
    let j = parse(&[("REVERB_RANK", "3"), ("REVERB_SIZE", "4")]).unwrap().unwrap();
    assert_eq!((j.node, j.local_rank, j.ranks_per_node, j.incarnation), (0, 3, 4, 0));
}

#[test]
fn env_slurm() {
    let j = parse(&[
        ("SLURM_PROCID", "3"),
        ("SLURM_NTASKS", "4"),
        ("SLURM_NODEID", "1"),
        ("SLURM_LOCALID", "1"),
        ("SLURM_TASKS_PER_NODE", "2(x2)"),
        ("SLURM_JOB_ID", "4242"),
    ])
    .unwrap()
    .unwrap();
    assert_eq!((j.rank, j.size, j.node, j.local_rank, j.ranks_per_node), (3, 4, 1, 1, 2));
    assert_eq!(j.job_id, "slurm-4242");
}

#[test]
fn env_open_mpi() {
    let j = parse(&[
        ("OMPI_COMM_WORLD_RANK", "5"),
        ("OMPI_COMM_WORLD_SIZE", "6"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "2"),
        ("OMPI_COMM_WORLD_LOCAL_SIZE", "3"),
    ])
    .unwrap()
    .unwrap();
    assert_eq!((j.rank, j.size, j.node, j.local_rank, j.ranks_per_node), (5, 6, 1, 2, 3));
}

#[test]
fn env_pmi_and_hashed_job_id() {
    let env = [("PMI_RANK", "1"), ("PMI_SIZE", "2"), ("REVERB_ROOT", "n0:5000"), ("REVERB_JOB_TOKEN", "t")];
    let j = parse(&env).unwrap().unwrap();
    assert_eq!((j.rank, j.size), (1, 2));
    let other =
        parse(&[("REVERB_JOB_TOKEN", "u"), ("PMI_RANK", "1"), ("PMI_SIZE", "2"), ("REVERB_ROOT", "n0:5000")])
            .unwrap()
            .unwrap();
    assert_ne!(j.job_id, other.job_id, "token is part of the hash");
}

#[test]
fn env_malformed_values_are_errors() {
    let cases: &[&[(&str, &str)]] = &[
        &[("REVERB_RANK", "x"), ("REVERB_SIZE", "2")],
        &[("REVERB_RANK", "-1"), ("REVERB_SIZE", "2")],
        &[("REVERB_RANK", "2"), ("REVERB_SIZE", "2")],
        &[("REVERB_RANK", "0"), ("REVERB_SIZE", "0")],
        &[("REVERB_RANK", "0")],
        &[("REVERB_SIZE", "2")],
        &[("REVERB_RANK", "0"), ("REVERB_SIZE", "2"), ("REVERB_RANKS_PER_NODE", "0")],
        &[
            ("REVERB_RANK", "0"),
            ("REVERB_SIZE", "4"),
            ("REVERB_RANKS_PER_NODE", "2"),
            ("REVERB_LOCAL_RANK", "2"),
        ],
        &[("REVERB_RANK", "0"), ("REVERB_SIZE", "4"), ("REVERB_RANKS_PER_NODE", "2"), ("REVERB_NODE", "2")],
        &[("REVERB_RANK", "0"), ("REVERB_SIZE", "2"), ("REVERB_INCARNATION", "one")],
        &[("REVERB_RANK", "0"), ("REVERB_SIZE", "2"), ("REVERB_JOB_ID", "../etc")],
        &[("SLURM_PROCID", "4"), ("SLURM_NTASKS", "4")],
        &[("OMPI_COMM_WORLD_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "")],
        &[("PMI_RANK", "1 2"), ("PMI_SIZE", "4")],
    ];
    for c in cases {
        assert!(parse(c).is_err(), "{c:?} should be rejected, got {:?}", parse(c));
    }
}

#[test]
fn boot_params_from_env() {
    let p = BootParams::from_lookup(lookup(&[("REVERB_ROOT", "h:1"), ("REVERB_JOB_TOKEN", "t")])).unwrap();
    assert_eq!(p.timeout, Duration::from_secs(60));
    assert!(!p.external_server);
    let p = BootParams::from_lookup(lookup(&[
        ("REVERB_ROOT", "h:1"),
        ("REVERB_JOB_TOKEN", "t"),
        ("REVERB_BOOT_TIMEOUT_S", "2.5"),
        ("REVERB_BOOT_SERVER", "external"),
    ]))
    .unwrap();
    assert_eq!(p.timeout, Duration::from_millis(2500));
    assert!(p.external_server);
    assert!(BootParams::from_lookup(lookup(&[("REVERB_JOB_TOKEN", "t")])).is_err());
    assert!(BootParams::from_lookup(lookup(&[("REVERB_ROOT", "h:1")])).is_err());
    assert!(BootParams::from_lookup(lookup(&[("REVERB_ROOT", "h:1"), ("REVERB_JOB_TOKEN", "")])).is_err());
    assert!(BootParams::from_lookup(lookup(&[
        ("REVERB_ROOT", "h:1"),
        ("REVERB_JOB_TOKEN", "t"),
        ("REVERB_BOOT_TIMEOUT_S", "0")
    ]))
    .is_err());
}

// ---- rejoin ----

fn job_at(rank: u32, size: u32, incarnation: u32) -> JobInfo {
    JobInfo { incarnation, ..job(rank, size) }
}

#[test]
fn failed_rank_rejoins_at_a_higher_incarnation_and_is_announced() {
    let server = quick_server(3);
    let root = server.local_addr().to_string();
    let mut r0 = TcpBootstrap::connect(job(0, 3), &root, TOKEN, T).unwrap();
    let mut r1 = TcpBootstrap::connect(job(1, 3), &root, TOKEN, T).unwrap();
    let mut dying = raw_rank(server.local_addr(), 2, 3);
    dying.write_all(&wire::encode(&Frame::Publish { address: b"old-2".to_vec() }).unwrap()).unwrap();
    r0.publish(b"addr-0").unwrap();
    r1.publish(b"addr-1").unwrap();
    // Publishes on other connections are not ordered with r0's lookup: poll (bounded).
    let t0 = Instant::now();
    let mut before = r0.lookup().unwrap();
    while before.iter().any(|e| e.address.is_none()) && t0.elapsed() < T {
        thread::sleep(Duration::from_millis(10));
        before = r0.lookup().unwrap();
    }
    assert_eq!(
        before[2],
        PeerAddress {
            rank: 2,
            incarnation: 0,
            address: Some(b"old-2".to_vec()),
            lost: false,
            retired: false
        }
    );
    // The first incarnation is no rejoin: nothing is announced.
    assert!(r0.poll_rejoins().unwrap().is_empty());

    drop(dying); // a crash: no Bye
    server.mark_failed(2, 0, "killed by the test").unwrap();
    let after = r1.lookup().unwrap();
    assert_eq!(after[2].address, None, "a failed rank's address is forgotten");
    assert!(after[2].lost, "a failed rank shows lost, not merely unpublished");
    assert!(!after[0].lost && !after[1].lost);

    // Stale (equal) incarnation and wrong token are refused with a clear reason.
    let e = TcpBootstrap::connect(job_at(2, 3, 0), &root, TOKEN, T).err().unwrap();
    assert_refused(&e, "stale incarnation");
    let e = TcpBootstrap::connect(job_at(2, 3, 1), &root, "wrong", T).err().unwrap();
    assert_refused(&e, "token");

    let mut r2 = TcpBootstrap::connect(job_at(2, 3, 1), &root, TOKEN, T).unwrap();
    let seen = r2.lookup().unwrap();
    assert_eq!(
        seen[0],
        PeerAddress {
            rank: 0,
            incarnation: 0,
            address: Some(b"addr-0".to_vec()),
            lost: false,
            retired: false
        }
    );
    assert_eq!(
        seen[1],
        PeerAddress {
            rank: 1,
            incarnation: 0,
            address: Some(b"addr-1".to_vec()),
            lost: false,
            retired: false
        }
    );
    assert_eq!(seen[2], PeerAddress { rank: 2, incarnation: 1, address: None, lost: false, retired: false });
    r2.publish(b"addr-2-new").unwrap();

    let want = Rejoin { rank: 2, incarnation: 1, address: b"addr-2-new".to_vec() };
    assert_eq!(r0.wait_rejoin(2, T).unwrap(), want);
    let t0 = Instant::now();
    let mut got = Vec::new();
    while got.is_empty() && t0.elapsed() < T {
        got = r1.poll_rejoins().unwrap();
        thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(got, vec![want]);
    // Nothing more: a wait for a rank that does not rejoin is bounded.
    let t0 = Instant::now();
    assert!(matches!(r0.wait_rejoin(1, Duration::from_millis(300)), Err(TransportError::Timeout(_))));
    assert!(t0.elapsed() < Duration::from_secs(3));
    // The new incarnation is live: the same incarnation again is a duplicate.
    let e = TcpBootstrap::connect(job_at(2, 3, 1), &root, TOKEN, T).err().unwrap();
    assert_refused(&e, "duplicate");
    assert_eq!(r0.lookup().unwrap()[2].address.as_deref(), Some(&b"addr-2-new"[..]));
}

/// A job of 3 in which rank 0 is in a round when rank 2 dies and `report` tells the server
/// so; rank 1 has called no collective yet. Returns ranks 0 (its round failed with
/// `PeerDead(2)`) and 1.
fn rank_2_lost_in_a_round(
    server: &BootServer,
    report: impl FnOnce(&BootServer),
) -> (TcpBootstrap, TcpBootstrap) {
    let root = server.local_addr().to_string();
    let root0 = root.clone();
    let r0 = thread::spawn(move || {
        let mut b = TcpBootstrap::connect(job(0, 3), &root0, TOKEN, T).unwrap();
        let e = b.allgather(b"lost round").unwrap_err();
        assert!(matches!(e, TransportError::PeerDead(2)), "{e}");
        b
    });
    let r1 = TcpBootstrap::connect(job(1, 3), &root, TOKEN, T).unwrap();
    let dying = raw_rank(server.local_addr(), 2, 3);
    // Lets rank 0 enter its round first (no server state to poll); rank 0 gets PeerDead
    // either way, so the delay picks the path, not the outcome.
    thread::sleep(Duration::from_millis(200));
    drop(dying);
    report(server);
    (r0.join().unwrap(), r1)
}

#[test]
fn collectives_resume_once_the_lost_rank_rejoined() {
    let server = quick_server(3);
    let root = server.local_addr().to_string();
    let (mut r0, mut r1) =
        rank_2_lost_in_a_round(&server, |s| s.mark_failed(2, 0, "killed by the test").unwrap());
    let e = r1.allgather(b"while lost").unwrap_err();
    assert!(matches!(e, TransportError::PeerDead(2)), "{e}");

    // Once admitted (connect returned), the job is whole again.
    let mut b2 = TcpBootstrap::connect(job_at(2, 3, 1), &root, TOKEN, T).unwrap();
    let r2 = thread::spawn(move || {
        let all = b2.allgather(b"c").unwrap();
        b2.barrier().unwrap();
        all
    });
    let h1 = thread::spawn(move || {
        let all = r1.allgather(b"b").unwrap();
        r1.barrier().unwrap();
        all
    });
    let all = r0.allgather(b"a").unwrap();
    r0.barrier().unwrap();
    let want: Vec<Vec<u8>> = vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()];
    assert_eq!(all, want);
    assert_eq!(h1.join().unwrap(), want);
    assert_eq!(r2.join().unwrap(), want);
}

/// A retired rank (a masked copy under partial redundancy): the round its death aborted is
/// repeated without it, later rounds never wait for it, and it cannot come back.
#[test]
fn collectives_go_on_without_a_retired_rank() {
    let server = quick_server(3);
    let root = server.local_addr().to_string();
    let (mut r0, mut r1) =
        rank_2_lost_in_a_round(&server, |s| s.retire(2, 0, "a copy killed by the test").unwrap());
    let h1 = thread::spawn(move || {
        let all = r1.allgather(b"b").unwrap();
        r1.barrier().unwrap();
        (all, r1)
    });
    let all = r0.allgather(b"a").unwrap();
    r0.barrier().unwrap();
    assert_eq!(all, vec![b"a".to_vec(), b"b".to_vec(), vec![]], "its part is empty");
    let (all1, mut r1) = h1.join().unwrap();
    assert_eq!(all1, all);
    // A uniform round counts it as the others (the final barrier's mark).
    let h1 = thread::spawn(move || r1.allgather(b"mark").unwrap());
    assert_eq!(r0.allgather(b"mark").unwrap(), vec![b"mark".to_vec(); 3]);
    assert_eq!(h1.join().unwrap(), vec![b"mark".to_vec(); 3]);
    let table = r0.lookup().unwrap();
    assert!(table[2].lost && table[2].retired && table[2].address.is_none());
    let e = TcpBootstrap::connect(job_at(2, 3, 1), &root, TOKEN, T).err().unwrap();
    assert_refused(&e, "retired");
}

#[test]
fn a_higher_incarnation_supersedes_a_connection_not_yet_seen_dead() {
    let server = quick_server(2);
    let root = server.local_addr().to_string();
    let mut r0 = TcpBootstrap::connect(job(0, 2), &root, TOKEN, T).unwrap();
    let _old = raw_rank_of(server.local_addr(), 1, 2);
    let mut r1 = TcpBootstrap::connect(job_at(1, 2, 1), &root, TOKEN, T).unwrap();
    r1.publish(b"new").unwrap();
    let r = r0.wait_rejoin(1, T).unwrap();
    assert_eq!((r.rank, r.incarnation, r.address), (1, 1, b"new".to_vec()));
    // The old incarnation cannot come back.
    let e = TcpBootstrap::connect(job(1, 2), &root, TOKEN, T).err().unwrap();
    assert_refused(&e, "duplicate");
}

/// Joins as `rank` of `size` over a raw socket (no Bye on drop).
fn raw_rank_of(addr: SocketAddr, rank: u32, size: u32) -> TcpStream {
    let mut s = raw(addr);
    s.write_all(&hello(TOKEN, rank, size)).unwrap();
    let mut h = [0u8; wire::HEADER_LEN + 12];
    s.read_exact(&mut h).unwrap();
    assert!(matches!(wire::decode(&h), Ok((Frame::Welcome { .. }, _))));
    s
}

#[test]
fn mark_failed_ignores_older_incarnations_and_bad_ranks() {
    let server = quick_server(2);
    assert!(server.mark_failed(5, 0, "x").is_err());
    let root = server.local_addr().to_string();
    let _r0 = TcpBootstrap::connect(job(0, 2), &root, TOKEN, T).unwrap();
    let mut r1 = TcpBootstrap::connect(job_at(1, 2, 2), &root, TOKEN, T).unwrap();
    server.mark_failed(1, 1, "an older incarnation").unwrap();
    // Still live: a lookup answers.
    assert_eq!(r1.lookup().unwrap()[1].incarnation, 2);
}

// ---- wire format ----

fn arb_frame() -> impl Strategy<Value = Frame> {
    let bytes = || prop::collection::vec(any::<u8>(), 0..64);
    prop_oneof![
        (prop::collection::vec(any::<u8>(), 0..64), any::<u32>(), any::<u32>(), any::<u32>())
            .prop_map(|(token, rank, size, incarnation)| Frame::Hello { token, rank, size, incarnation }),
        (any::<u32>(), any::<u64>()).prop_map(|(size, round)| Frame::Welcome { size, round }),
        ".{0,40}".prop_map(|reason| Frame::Refused { reason }),
        (any::<u64>(), bytes()).prop_map(|(round, data)| Frame::Contribute { round, data }),
        (any::<u64>(), prop::collection::vec(bytes(), 0..8))
            .prop_map(|(round, parts)| Frame::Gathered { round, parts }),
        (prop::option::of(any::<u32>()), ".{0,40}").prop_map(|(rank, reason)| Frame::Abort { rank, reason }),
        Just(Frame::Bye),
        bytes().prop_map(|address| Frame::Publish { address }),
        Just(Frame::Lookup),
        prop::collection::vec((any::<u32>(), any::<u32>(), prop::option::of(bytes())), 0..6).prop_map(|v| {
            Frame::Addresses {
                entries: v
                    .into_iter()
                    .map(|(rank, incarnation, address)| {
                        let lost = address.is_none() && rank % 2 == 1;
                        PeerAddress { rank, incarnation, address, lost, retired: false }
                    })
                    .collect(),
            }
        }),
        (any::<u32>(), any::<u32>(), bytes()).prop_map(|(rank, incarnation, address)| Frame::Rejoined {
            rank,
            incarnation,
            address
        }),
    ]
}

proptest! {
    #[test]
    fn decode_random_bytes_never_panics(b in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = wire::decode(&b);
    }

    #[test]
    fn decode_random_payloads_never_panic(kind in 0u8..13, p in prop::collection::vec(any::<u8>(), 0..128)) {
        let mut b = header(kind, wire::VERSION, p.len() as u32);
        b.extend_from_slice(&p);
        let _ = wire::decode(&b);
        let never = || false;
        let w = wire::Wait { idle_deadline: None, frame_timeout: Duration::from_secs(1), cancel: &never };
        let _ = wire::read_frame(&mut std::io::Cursor::new(b), wire::MAX_FRAME, &w);
    }

    /// The recovery frames' decoders: any payload under their kinds is a frame or an error.
    #[test]
    fn recovery_frames_decode_random_payloads(kind in 8u8..12, p in prop::collection::vec(any::<u8>(), 0..96)) {
        let mut b = header(kind, wire::VERSION, p.len() as u32);
        b.extend_from_slice(&p);
        if let Ok((f, n)) = wire::decode(&b) {
            prop_assert_eq!(n, b.len());
            // What decodes re-encodes to the same bytes.
            prop_assert_eq!(wire::encode(&f).unwrap(), b);
        }
    }

    #[test]
    fn valid_frames_round_trip(f in arb_frame()) {
        let b = wire::encode(&f).unwrap();
        let (g, n) = wire::decode(&b).unwrap();
        prop_assert_eq!(&g, &f);
        prop_assert_eq!(n, b.len());
        // Every strict prefix is an error, never a panic.
        for cut in 0..b.len() {
            prop_assert!(wire::decode(&b[..cut]).is_err());
        }
    }
}

/// Ranks 0-1 finished and sit in their final barrier while ranks 2-3 start a recovery's first
/// collective in the same round: the finishing ranks learn of it (`final_barrier` is false),
/// join the recovery, and everyone meets in the repeated round with the recovery's data.
#[test]
fn a_final_barrier_meeting_a_recovery_collective_joins_the_recovery() {
    use reverb_transport::bootstrap::{allgather_past_final_barrier, final_barrier};
    let server = quick_server(4);
    let root = server.local_addr().to_string();
    let hs: Vec<_> = (0..4u32)
        .map(|r| {
            let root = root.clone();
            thread::spawn(move || {
                let mut b = TcpBootstrap::connect(job(r, 4), &root, TOKEN, T).unwrap();
                let mine = format!("node-of-{r}").into_bytes();
                if r < 2 {
                    assert!(!final_barrier(&mut b).unwrap(), "rank {r} must see the recovery");
                }
                let all = allgather_past_final_barrier(&mut b, &mine).unwrap();
                for (i, d) in all.iter().enumerate() {
                    assert_eq!(d, format!("node-of-{i}").as_bytes());
                }
                // After the recovery every rank finishes together.
                assert!(final_barrier(&mut b).unwrap());
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}

fn agent_hello(token: &str, size: u32, first: u32, count: u32) -> Vec<u8> {
    let hello = Frame::AgentHello {
        token: token.as_bytes().to_vec(),
        size,
        host: "hb".into(),
        first,
        count,
        first_incarnation: 0,
        respawn: 1,
    };
    wire::encode(&hello).unwrap()
}

#[test]
fn agents_reach_the_controller_only_with_the_job_token_and_once_one_listens() {
    let server = quick_server(4);
    let addr = server.local_addr();
    // No controller has asked for agents yet.
    let mut s = raw(addr);
    s.write_all(&agent_hello(TOKEN, 4, 2, 2)).unwrap();
    let why = refusal(s).expect("refused");
    assert!(why.contains("no job controller"), "{why}");
    let agents = server.agent_connections();
    for (hello, want) in [
        (agent_hello("wrong", 4, 2, 2), "wrong job token"),
        (agent_hello(TOKEN, 5, 2, 2), "wrong job size"),
        (agent_hello(TOKEN, 4, 3, 2), "outside the job"),
    ] {
        let mut s = raw(addr);
        s.write_all(&hello).unwrap();
        let why = refusal(s).expect("refused");
        assert!(why.contains(want), "{why}");
    }
    assert!(agents.try_recv().is_err(), "a refused agent was handed over");
    let mut s = raw(addr);
    s.write_all(&agent_hello(TOKEN, 4, 2, 2)).unwrap();
    let conn = agents.recv_timeout(Duration::from_secs(5)).expect("the agent handed over");
    assert_eq!(conn.intro.host, "hb");
    assert_eq!(conn.intro.ranks, 2..4);
    assert_eq!(conn.intro.respawn, 1);
    // The controller owns the connection: what it writes reaches the agent.
    let mut to_agent = conn.stream;
    to_agent.write_all(&wire::encode(&Frame::Heartbeat).unwrap()).unwrap();
    let mut buf = [0u8; wire::HEADER_LEN];
    s.read_exact(&mut buf).unwrap();
    assert_eq!(wire::decode(&buf).unwrap().0, Frame::Heartbeat);
    // Ranks still join and gather as before.
    run_job(addr, 4, 2);
}

#[test]
fn a_server_for_a_controller_queues_agents_that_come_before_it_asks() {
    let opts = ServerOptions { agents: true, ..ServerOptions::default() };
    let server = BootServer::start_with("127.0.0.1:0", 4, TOKEN, opts).unwrap();
    let mut s = raw(server.local_addr());
    s.write_all(&agent_hello(TOKEN, 4, 0, 2)).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let conn = server.agent_connections().recv_timeout(Duration::from_secs(5)).expect("queued");
    assert_eq!(conn.intro.ranks, 0..2);
}

#[test]
fn a_rank_that_stops_reading_stalls_no_one_else() {
    // The I/O bound is long: the old server, writing to the stalled rank itself, would have
    // stopped every round and every mark_failed for that long.
    let opts = ServerOptions { io_timeout: Duration::from_secs(60), ..ServerOptions::default() };
    let server = BootServer::start_with("127.0.0.1:0", 2, TOKEN, opts).unwrap();
    let root = server.local_addr().to_string();
    let mut r0 = TcpBootstrap::connect(job(0, 2), &root, TOKEN, T).unwrap();
    // Rank 1 contributes to every round but never reads: its results pile up unread, far
    // beyond what the sockets' buffers hold.
    let mut stalled = raw(server.local_addr());
    stalled.write_all(&hello(TOKEN, 1, 2)).unwrap();
    let part = vec![7u8; 4 << 20];
    let t0 = Instant::now();
    for round in 0..8u64 {
        let c = wire::encode(&Frame::Contribute { round, data: part.clone() }).unwrap();
        stalled.write_all(&c).unwrap();
        let all = r0.allgather(&part).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[1], part);
    }
    let t1 = Instant::now();
    server.mark_failed(1, 0, "stopped reading").unwrap();
    assert!(t1.elapsed() < Duration::from_secs(5), "mark_failed took {:?}", t1.elapsed());
    assert!(t0.elapsed() < Duration::from_secs(30), "8 rounds took {:?}", t0.elapsed());
    // Its loss is the job's failure now.
    assert!(matches!(r0.allgather(b"x").unwrap_err(), TransportError::PeerDead(1)));
}
