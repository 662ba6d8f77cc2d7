//! Node failure and respawn end to end, on real processes: `reverb run --respawn` through the
//! launcher library, SIGKILLed ranks, the bootstrap's rejoin, and the provider reconnecting
//! survivors to the new incarnation (this test binary re-executes itself as the ranks).
//!
//! Runs on the provider named by `REVERB_PROVIDER` (shm by default).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use reverb::launcher::{launch_report, LaunchOptions, LaunchSpec};
use reverb_transport::bootstrap::TcpBootstrap;
use reverb_transport::recovery::{apply_rejoins, await_rejoin};
use reverb_transport::testkit::pattern;
use reverb_transport::{
    Access, Bootstrap, CompletionKind, JobInfo, PeerState, Provider, RecvBuffer, Region, RemoteRegion, Rma,
    Signal, Source, TagMatch, TransportConfig, TransportError,
};

/// Marks this process as a rank of the test below, and names the directory for its results.
const OUT_VAR: &str = "REVERB_RESPAWN_TEST_OUT";
/// Bound of every wait inside a rank.
const WAIT: Duration = Duration::from_secs(30);
const RANKS: u32 = 4;
const REGION: usize = 64 * 1024;

const TAG_HELLO: u64 = 1;
const TAG_PUT_DONE: u64 = 2;
const TAG_DYING: u64 = 3;
const TAG_DESCRIPTOR: u64 = 10;
const TAG_AFTER: u64 = 20;
const TAG_PUT_AFTER: u64 = 21;
const TAG_BYE: u64 = 30;
const TAG_NEVER: u64 = 99;

fn unix_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos() as u64
}

fn ms_since(ns: u64) -> f64 {
    unix_ns().saturating_sub(ns) as f64 / 1e6
}

fn recv(p: &mut dyn Provider, from: u32, tag: u64, cap: usize) -> Vec<u8> {
    let op =
        p.post_recv(Source::Rank(from), TagMatch::exact(tag), RecvBuffer::Owned { capacity: cap }).unwrap();
    let c = p.wait_op(op, WAIT).unwrap_or_else(|e| panic!("recv tag {tag} from {from}: {e}"));
    match c.into_result().unwrap_or_else(|e| panic!("recv tag {tag} from {from}: {e}")).kind {
        CompletionKind::Recv { data: Some(d), .. } => d,
        other => panic!("unexpected completion {other:?}"),
    }
}

fn send(p: &mut dyn Provider, to: u32, tag: u64, data: &[u8]) {
    let op = p.send(to, tag, data).unwrap_or_else(|e| panic!("send tag {tag} to {to}: {e}"));
    p.wait_op(op, WAIT).unwrap().into_result().unwrap_or_else(|e| panic!("send tag {tag} to {to}: {e}"));
}

fn seed(tag: u64, from: u32, to: u32, incarnation: u32) -> u64 {
    tag * 1_000_000 + u64::from(from) * 10_000 + u64::from(to) * 100 + u64::from(incarnation)
}

/// Every rank sends `tag` to every other and checks what it receives; returns when the first
/// message from each peer arrived (unix ns).
fn all_to_all(p: &mut dyn Provider, me: u32, incarnations: &[u32], tag: u64) -> Vec<u64> {
    let peers: Vec<u32> = (0..RANKS).filter(|&r| r != me).collect();
    let mut ops = Vec::new();
    for &r in &peers {
        let data = pattern(seed(tag, me, r, incarnations[me as usize]), 3000 + r as usize);
        ops.push(p.send(r, tag, &data).unwrap_or_else(|e| panic!("send to {r}: {e}")));
    }
    let mut arrived = vec![0; RANKS as usize];
    for &r in &peers {
        let got = recv(p, r, tag, 1 << 16);
        arrived[r as usize] = unix_ns();
        let want = pattern(seed(tag, r, me, incarnations[r as usize]), 3000 + me as usize);
        assert!(
            got == want,
            "rank {me}: tag {tag} from rank {r} (incarnation {}) corrupted",
            incarnations[r as usize]
        );
    }
    for op in ops {
        p.wait_op(op, WAIT).unwrap().into_result().unwrap();
    }
    arrived
}

fn descriptor(p: &mut dyn Provider, from: u32) -> RemoteRegion {
    RemoteRegion::from_bytes(&recv(p, from, TAG_DESCRIPTOR, 64)).unwrap()
}

/// `me` puts a pattern from `local` into `peer`'s region `remote` (at `me`'s slot), tells it,
/// and checks the one `peer` put into `target` (the region `peer` holds the descriptor of);
/// then reads its own slot back from `peer` with a get.
struct Pair<'a> {
    me: u32,
    peer: u32,
    local: &'a Region,
    target: &'a Region,
    remote: &'a RemoteRegion,
    tag: u64,
}

fn put_get_pair(p: &mut dyn Provider, pair: Pair<'_>, inc: &[u32]) {
    let Pair { me, peer, local, target, remote, tag } = pair;
    let len = 4096;
    let mine = pattern(seed(tag, me, peer, inc[me as usize]), len);
    local.write(0, &mine).unwrap();
    let at = u64::from(me) * len as u64 + len as u64;
    let rma = Rma { local, local_offset: 0, remote, remote_offset: at, len };
    let op = p.put(rma, Signal::Yes).unwrap_or_else(|e| panic!("rank {me}: put to {peer}: {e}"));
    p.wait_op(op, WAIT).unwrap().into_result().unwrap();
    send(p, peer, tag, b"put done");
    recv(p, peer, tag, 16);
    let theirs = u64::from(peer) as usize * len + len;
    let want = pattern(seed(tag, peer, me, inc[peer as usize]), len);
    assert!(target.to_vec(theirs, len).unwrap() == want, "rank {me}: put from rank {peer} corrupted");
    // Read our slot back from the peer.
    let back = Rma { local, local_offset: 0, remote, remote_offset: at, len };
    local.fill(0, len, 0).unwrap();
    let op = p.get(back, Signal::Yes).unwrap_or_else(|e| panic!("rank {me}: get from {peer}: {e}"));
    p.wait_op(op, WAIT).unwrap().into_result().unwrap();
    assert!(local.to_vec(0, len).unwrap() == mine, "rank {me}: get from rank {peer} corrupted");
}

fn write_result(dir: &Path, job: &JobInfo, lines: &[String]) {
    let path = dir.join(format!("rank{}.inc{}", job.rank, job.incarnation));
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    for l in lines {
        println!("rank {} incarnation {}: {l}", job.rank, job.incarnation);
    }
}

/// One rank of `node_failure_respawn_and_reconnect`; a no-op outside that job.
#[test]
fn respawn_rank_entry() {
    let Some(out) = std::env::var_os(OUT_VAR).map(PathBuf::from) else { return };
    let started = unix_ns();
    let job = JobInfo::from_env().unwrap().expect("launched rank");
    let mut boot = TcpBootstrap::connect_from_env().expect("bootstrap");
    let config = TransportConfig::from_env().unwrap();
    let mut p = reverb_transport::open(&config, &mut boot).expect("open provider");
    let me = job.rank;
    let region = p.alloc_region(REGION, Access::REMOTE_RW).unwrap();
    let failed_node = 1;

    if job.incarnation == 0 {
        // Before the failure: everyone with everyone.
        let all: Vec<RemoteRegion> = boot
            .allgather(&region.remote().to_bytes())
            .unwrap()
            .iter()
            .map(|b| RemoteRegion::from_bytes(b).unwrap())
            .collect();
        all_to_all(p.as_mut(), me, &[0; RANKS as usize], TAG_HELLO);
        let next = (me + 1) % RANKS;
        let prev = (me + RANKS - 1) % RANKS;
        let scratch = p.alloc_region(REGION, Access::LOCAL).unwrap();
        scratch.write(0, &pattern(seed(TAG_PUT_DONE, me, next, 0), 1000)).unwrap();
        let rma = Rma {
            local: &scratch,
            local_offset: 0,
            remote: &all[next as usize],
            remote_offset: 0,
            len: 1000,
        };
        p.put(rma, Signal::No).unwrap();
        send(p.as_mut(), next, TAG_PUT_DONE, b"");
        recv(p.as_mut(), prev, TAG_PUT_DONE, 0);
        assert_eq!(region.to_vec(0, 1000).unwrap(), pattern(seed(TAG_PUT_DONE, prev, me, 0), 1000));
        boot.barrier().unwrap();

        if job.node == failed_node {
            if job.local_rank == 0 {
                let survivors = (0..RANKS).filter(|&r| r / job.ranks_per_node != failed_node);
                // Last words under the tag the next incarnation will use, eager and rendezvous,
                // that nobody receives before the respawn: they must never be delivered as
                // the new incarnation's (all_to_all checks the incarnation-1 pattern).
                for r in survivors.clone() {
                    let stale = pattern(seed(TAG_AFTER, me, r, 0), 3000 + r as usize);
                    p.send(r, TAG_AFTER, &stale).unwrap();
                    p.send(r, TAG_AFTER, &vec![0xEE; 100_000]).unwrap();
                }
                // Tell the survivors when, then die; the launcher kills the node-mate.
                let t = unix_ns().to_le_bytes();
                for r in survivors {
                    send(p.as_mut(), r, TAG_DYING, &t);
                }
                // SIGKILL to ourselves, the failure under test.
                let _ =
                    rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
            }
            std::thread::sleep(WAIT);
            panic!("rank {me}: still alive {WAIT:?} after its node failed");
        }
        survivor(p.as_mut(), &mut boot, &job, &region, &all, &out, started);
    } else {
        reborn(p.as_mut(), &mut boot, &job, &region, &out, started);
    }
}

fn survivor(
    p: &mut dyn Provider,
    boot: &mut TcpBootstrap,
    job: &JobInfo,
    region: &Region,
    before: &[RemoteRegion],
    out: &Path,
    _started: u64,
) {
    let me = job.rank;
    let dead: Vec<u32> = (2..4).collect();
    // Pending on the dead node: a receive and a rendezvous send nobody will take.
    let never_recv =
        p.post_recv(Source::Rank(3), TagMatch::exact(TAG_NEVER), RecvBuffer::Owned { capacity: 8 }).unwrap();
    let never_send = p.send(3, TAG_NEVER, &vec![7u8; 1 << 16]).unwrap();
    let dying = recv(p, 2, TAG_DYING, 8);
    let killed_at = u64::from_le_bytes(dying.try_into().unwrap());

    let t0 = Instant::now();
    while dead.iter().any(|&r| p.peer_state(r) != PeerState::Dead) {
        p.progress().unwrap();
        p.block(Duration::from_millis(5)).unwrap();
        assert!(t0.elapsed() < WAIT, "rank {me}: the dead node was not detected within {WAIT:?}");
    }
    let detect_ms = ms_since(killed_at);
    for op in [never_recv, never_send] {
        let c = p.wait_op(op, WAIT).unwrap();
        assert!(matches!(c.error(), Some(TransportError::PeerDead(3))), "{:?}", c.status);
    }
    assert!(matches!(p.send(2, 5, b"x"), Err(TransportError::PeerDead(2))));
    let old = before[2];
    let rma = Rma { local: region, local_offset: 0, remote: &old, remote_offset: 0, len: 8 };
    assert!(matches!(p.put(rma, Signal::Yes), Err(TransportError::PeerDead(2))));

    // The node comes back: reconnect to each rank's new incarnation, waiting for each (rank 0)
    // or polling without blocking (rank 1).
    if me == 0 {
        for &r in &dead {
            let inc =
                await_rejoin(p, boot, r, Some(0), WAIT).unwrap_or_else(|e| panic!("rank {r} rejoin: {e}"));
            assert_eq!(inc, 1);
        }
    } else {
        let t0 = Instant::now();
        let mut seen = Vec::new();
        while seen.len() < dead.len() {
            seen.extend(apply_rejoins(p, boot).unwrap().into_iter().map(|r| (r.rank, r.incarnation)));
            p.block(Duration::from_millis(5)).unwrap();
            assert!(t0.elapsed() < WAIT, "rank {me}: rejoins seen {seen:?} after {WAIT:?}");
        }
        seen.sort_unstable();
        assert_eq!(seen, vec![(2, 1), (3, 1)]);
    }
    let reconnected_ms = ms_since(killed_at);
    for &r in &dead {
        assert_eq!(p.peer_state(r), PeerState::Alive);
        assert_eq!(p.peer_incarnation(r), Some(1));
    }
    // Reconnecting again to the same incarnation is stale; a bad address changes nothing.
    let current = boot.lookup().unwrap()[2].clone();
    assert_eq!(current.incarnation, 1);
    let address = current.address.expect("rank 2 published");
    let e = p.reconnect(2, 1, &address).unwrap_err();
    assert!(matches!(e, TransportError::StaleIncarnation { rank: 2, incarnation: 1, current: 1 }), "{e}");
    let e = p.reconnect(2, 2, b"junk").unwrap_err();
    assert!(matches!(e, TransportError::Malformed { .. }), "{e}");
    assert!(p.reconnect(me, 5, &address).is_err(), "reconnect to itself");
    assert_eq!((p.peer_state(2), p.peer_incarnation(2)), (PeerState::Alive, Some(1)));
    // A descriptor of the dead incarnation never reaches the new one's memory.
    let rma = Rma { local: region, local_offset: 0, remote: &old, remote_offset: 0, len: 8 };
    assert!(p.put(rma, Signal::Yes).is_err(), "put through a dead incarnation's key succeeded");

    let inc = [0, 0, 1, 1];
    for &r in &dead {
        send(p, r, TAG_DESCRIPTOR, &region.remote().to_bytes());
    }
    let arrived = all_to_all(p, me, &inc, TAG_AFTER);
    let first_new = dead.iter().map(|&r| arrived[r as usize]).min().unwrap_or(0);
    let first_ms = first_new.saturating_sub(killed_at) as f64 / 1e6;
    let scratch = p.alloc_region(REGION, Access::REMOTE_RW).unwrap();
    for &r in &dead {
        let remote = descriptor(p, r);
        let tag = TAG_PUT_AFTER + u64::from(r);
        put_get_pair(p, Pair { me, peer: r, local: &scratch, target: region, remote: &remote, tag }, &inc);
    }
    // The other survivor still works as before.
    let other = 1 - me;
    let remote = &before[other as usize];
    let tag = TAG_PUT_AFTER + 100;
    put_get_pair(p, Pair { me, peer: other, local: &scratch, target: region, remote, tag }, &inc);
    all_to_all(p, me, &inc, TAG_BYE);
    // Bootstrap collectives work again once the lost ranks have rejoined.
    boot.barrier().unwrap_or_else(|e| panic!("rank {me}: barrier after recovery: {e}"));
    write_result(
        out,
        job,
        &[
            format!("sigkill_to_peer_dead_ms {detect_ms:.1}"),
            format!("sigkill_to_reconnected_ms {reconnected_ms:.1}"),
            format!("sigkill_to_first_message_from_new_incarnation_ms {first_ms:.1}"),
        ],
    );
}

fn reborn(
    p: &mut dyn Provider,
    boot: &mut TcpBootstrap,
    job: &JobInfo,
    region: &Region,
    out: &Path,
    started: u64,
) {
    let me = job.rank;
    let opened_ms = ms_since(started);
    let mate = if me == 2 { 3 } else { 2 };
    // Survivors were connected by open (lookup); the node-mate may still be starting.
    for r in [0, 1] {
        assert_eq!(p.peer_state(r), PeerState::Alive, "rank {me}: survivor {r} not connected by open");
        assert_eq!(p.peer_incarnation(r), Some(0));
    }
    await_rejoin(p, boot, mate, Some(0), WAIT).unwrap_or_else(|e| panic!("rank {me}: node-mate {mate}: {e}"));
    let inc = [0, 0, 1, 1];
    for r in [0, 1] {
        send(p, r, TAG_DESCRIPTOR, &region.remote().to_bytes());
    }
    let arrived = all_to_all(p, me, &inc, TAG_AFTER);
    let first_ms = (arrived[0].min(arrived[1]).saturating_sub(started)) as f64 / 1e6;
    let scratch = p.alloc_region(REGION, Access::REMOTE_RW).unwrap();
    for r in [0, 1] {
        let remote = descriptor(p, r);
        let tag = TAG_PUT_AFTER + u64::from(me);
        put_get_pair(p, Pair { me, peer: r, local: &scratch, target: region, remote: &remote, tag }, &inc);
    }
    all_to_all(p, me, &inc, TAG_BYE);
    // Bootstrap collectives work again once the lost ranks have rejoined.
    boot.barrier().unwrap_or_else(|e| panic!("rank {me}: barrier after recovery: {e}"));
    write_result(
        out,
        job,
        &[
            format!("start_to_provider_open_ms {opened_ms:.1}"),
            format!("start_to_first_message_from_survivor_ms {first_ms:.1}"),
        ],
    );
}

/// 4 ranks on 2 nodes exchange messages and puts; node 1 is SIGKILLed (rank 2 kills itself,
/// the launcher kills rank 3); the launcher respawns both at incarnation 1; survivors see
/// PeerDead, reconnect, and everyone exchanges tagged messages and puts/gets with the new
/// incarnation, data verified; the job exits 0. Timings are printed (`--nocapture`).
#[test]
fn node_failure_respawn_and_reconnect() {
    if std::env::var_os(OUT_VAR).is_some() {
        return; // inside a rank: only respawn_rank_entry runs there
    }
    let out = std::env::temp_dir().join(format!("reverb-respawn-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    let spec = LaunchSpec {
        ranks: RANKS,
        ranks_per_node: 2,
        program: std::env::current_exe().unwrap(),
        args: ["respawn_rank_entry", "--exact", "--nocapture", "--test-threads=1"].map(String::from).to_vec(),
        env: vec![(OUT_VAR.into(), out.display().to_string()), ("REVERB_BOOT_TIMEOUT_S".into(), "30".into())],
        timeout: Some(Duration::from_secs(120)),
        prefix_output: true,
    };
    let report = launch_report(&spec, &LaunchOptions { respawn: 1, ..LaunchOptions::default() }).unwrap();
    assert_eq!(report.code, 0, "the job failed after the respawn");
    assert_eq!(report.respawns.len(), 1);
    let r = &report.respawns[0];
    assert_eq!((r.node, r.rank, r.signal, r.incarnation), (1, 2, libc::SIGKILL, 1));
    assert_eq!(r.ranks, vec![2, 3]);
    // Every rank that must have finished its part did (a rank that ran no test exits 0 too).
    for (rank, inc) in [(0, 0), (1, 0), (2, 1), (3, 1)] {
        let f = out.join(format!("rank{rank}.inc{inc}"));
        let text = std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        for l in text.lines() {
            println!("measured: rank {rank} incarnation {inc}: {l}");
        }
    }
    let _ = std::fs::remove_dir_all(&out);
}
