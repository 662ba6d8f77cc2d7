//! Endpoints opened by address (`book`): what the shm host-space tests check, over tcp.

use std::time::Duration;

use super::TcpProvider;
use crate::api::*;
use crate::config::TransportConfig;
use crate::error::TransportError;

const WAIT: Duration = Duration::from_secs(10);

fn open() -> TcpProvider {
    let config =
        TransportConfig { tcp_addr: Some("127.0.0.1".parse().unwrap()), ..TransportConfig::default() };
    TcpProvider::open_by_address(config).unwrap()
}

/// Receives one message of tag `tag` on `p`: (source rank, bytes).
fn recv(p: &mut TcpProvider, tag: Tag, capacity: usize) -> (Rank, Vec<u8>) {
    let op = p.post_recv(Source::Any, TagMatch::exact(tag), RecvBuffer::Owned { capacity }).unwrap();
    let got = p.wait_op(op, WAIT).unwrap().into_result().unwrap();
    match got.kind {
        CompletionKind::Recv { source, data: Some(data), .. } => (source, data),
        other => panic!("tag {tag}: {other:?}"),
    }
}

fn send(p: &mut TcpProvider, dest: Rank, tag: Tag, data: &[u8]) {
    let op = p.send(dest, tag, data).unwrap();
    p.wait_op(op, WAIT).unwrap().into_result().unwrap();
}

/// The receiver of a first message never connected to its sender; connecting to the
/// sender's address afterwards names the rank the message came from, and the reply goes
/// back on the same connection.
#[test]
fn endpoints_connect_by_address() {
    let (mut a, mut b) = (open(), open());
    let (a_addr, b_addr) = (a.peer_address().unwrap(), b.peer_address().unwrap());
    let to_b = a.connect_peer(&b_addr).unwrap();
    assert_eq!(a.connect_peer(&b_addr).unwrap(), to_b, "the same address names the same rank");
    assert_eq!(a.connect_peer(&a_addr).unwrap(), a.rank(), "its own address is itself");
    send(&mut a, to_b, 5, b"ping");
    let (from_a, data) = recv(&mut b, 5, 16);
    assert_eq!(data, b"ping");
    assert_eq!(b.connect_peer(&a_addr).unwrap(), from_a, "the rank the first message came with");
    assert_eq!(b.size(), 2, "no second connection, no second rank");
    send(&mut b, from_a, 6, b"pong");
    assert_eq!(recv(&mut a, 6, 16), (to_b, b"pong".to_vec()));
}

/// Two endpoints that dial each other at once each write on their own connection and read
/// both; eager and rendezvous messages (whose reads and acknowledgements cross over) arrive.
#[test]
fn endpoints_that_dial_each_other_at_once_talk() {
    let (mut a, mut b) = (open(), open());
    let to_b = a.connect_peer(&b.peer_address().unwrap()).unwrap();
    let to_a = b.connect_peer(&a.peer_address().unwrap()).unwrap();
    let big: Vec<u8> = (0..(1usize << 20)).map(|i| (i * 7) as u8).collect();
    for (tag, data) in [(1, b"small".to_vec()), (2, big)] {
        let ab = a.send(to_b, tag, &data).unwrap();
        let ba = b.send(to_a, tag, &data).unwrap();
        assert_eq!(recv(&mut b, tag, data.len()), (to_a, data.clone()), "tag {tag} at b");
        assert_eq!(recv(&mut a, tag, data.len()), (to_b, data.clone()), "tag {tag} at a");
        a.wait_op(ab, WAIT).unwrap().into_result().unwrap();
        b.wait_op(ba, WAIT).unwrap().into_result().unwrap();
    }
    assert_eq!((a.size(), b.size()), (2, 2));
}

/// A server outliving its clients: each new client introduces itself with its address, and
/// the server answers it by connecting to that address (a new rank each: keys differ).
#[test]
fn a_server_answers_each_new_client() {
    let mut server = open();
    for round in 0..3u8 {
        let mut client = open();
        let to_server = client.connect_peer(&server.peer_address().unwrap()).unwrap();
        let own = client.peer_address().unwrap();
        send(&mut client, to_server, 1, &own);
        let (from, address) = recv(&mut server, 1, 64);
        assert_eq!(server.connect_peer(&address).unwrap(), from, "round {round}");
        send(&mut server, from, 2, &[round]);
        assert_eq!(recv(&mut client, 2, 8), (to_server, vec![round]));
        drop(client);
        let start = std::time::Instant::now();
        while server.peer_state(from) == PeerState::Alive {
            assert!(start.elapsed() < WAIT, "round {round}: the closed client still looks alive");
            server.progress().unwrap();
            server.block(Duration::from_millis(10)).unwrap();
        }
    }
}

/// Wrong addresses are clean errors that leave no rank behind: bytes that are no address,
/// an endpoint that is gone (its port refuses), and a job's rank, which has no address.
#[test]
fn wrong_addresses_are_errors_without_leaks() {
    let mut a = open();
    assert!(matches!(a.connect_peer(b"junk"), Err(TransportError::Malformed { .. })));
    let gone = open().peer_address().unwrap();
    assert!(matches!(a.connect_peer(&gone), Err(TransportError::PeerDead(_))));
    assert_eq!(a.size(), 1, "a failed dial keeps no rank");
    let b = open();
    assert_eq!(a.connect_peer(&b.peer_address().unwrap()).unwrap(), 1, "the next rank is still 1");
    let mut boots = crate::loopback::InProcBootstrap::job("tcp-by-address-job", 1);
    let job_rank = TcpProvider::open(TransportConfig::default(), &mut boots[0]).unwrap();
    assert!(matches!(job_rank.peer_address(), Err(TransportError::Unsupported(_))));
}

/// A peer that dies fails what is pending towards it, and a send to it afterwards.
#[test]
fn a_lost_peer_fails_its_receives() {
    let (mut a, b) = (open(), open());
    let to_b = a.connect_peer(&b.peer_address().unwrap()).unwrap();
    let op = a.post_recv(Source::Rank(to_b), TagMatch::exact(3), RecvBuffer::Owned { capacity: 8 }).unwrap();
    drop(b);
    let err = a.wait_op(op, WAIT).unwrap().into_result().unwrap_err();
    assert!(matches!(err, TransportError::PeerDead(r) if r == to_b), "{err}");
    assert!(matches!(a.send(to_b, 3, b"x"), Err(TransportError::PeerDead(_))));
}
