//! The verbs provider as a sub-provider of `auto`: memory another provider allocated,
//! registered here too; ranks reached another way (empty addresses). Multi-process jobs on
//! a real device: they run with `REVERB_PROVIDER=verbs` (in the rxe VM, see the report of
//! `ci/verbs-suite.sh`); elsewhere every test returns at once.

use std::net::IpAddr;

use memmap2::MmapMut;

use super::*;
use crate::bootstrap::{PeerAddress, TcpBootstrap};
use crate::testkit::{self, Job, WAIT};

const ALL: (&str, &str) = ("REVERB_VERBS_CONNECT", "all");
const ON_DEMAND: (&str, &str) = ("REVERB_VERBS_CONNECT", "ondemand");

fn on_verbs() -> bool {
    testkit::only_on("verbs", "these tests open the verbs provider")
}

/// A bootstrap that shows this rank only the addresses of `carried` ranks (the others read as
/// empty, as `auto`'s view gives them), and keeps what this rank gave the allgather.
struct Partial<'a> {
    inner: &'a mut TcpBootstrap,
    carried: Vec<Rank>,
    given: Vec<u8>,
}

impl Bootstrap for Partial<'_> {
    fn job(&self) -> &JobInfo {
        self.inner.job()
    }

    fn local_ip(&self) -> Option<IpAddr> {
        self.inner.local_ip()
    }

    fn allgather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.given = data.to_vec();
        let mut all = self.inner.allgather(data)?;
        for (rank, entry) in all.iter_mut().enumerate() {
            if !self.carried.contains(&(rank as Rank)) {
                entry.clear();
            }
        }
        Ok(all)
    }

    fn barrier(&mut self) -> Result<()> {
        self.inner.barrier()
    }

    fn lookup(&mut self) -> Result<Vec<PeerAddress>> {
        Err(TransportError::Unsupported("lookup in a fresh job".into()))
    }
}

/// Runs `test` (a path in this crate) as a job of `ranks` with `env`.
fn run_job(test: &str, ranks: u32, env: (&str, &str)) {
    testkit::run_job_ok(test, &Job::new(ranks).env(&[env]));
}

/// In a rank process: the job's bootstrap; None in the test's parent.
fn child_boot() -> Option<TcpBootstrap> {
    testkit::is_child().then(|| TcpBootstrap::connect_from_env().expect("bootstrap"))
}

/// `len` bytes of anonymous memory in a region no provider registered, as shm's would be.
fn foreign_region(owner: Rank, len: usize) -> Region {
    let mut memory = MmapMut::map_anon(len).expect("map");
    let ptr = memory.as_mut_ptr();
    let remote = RemoteRegion { owner, addr: ptr as u64, len: len as u64, key: 0 };
    // SAFETY: the mapping is ptr..ptr+len and lives in the backing.
    unsafe { Region::new(ptr, len, Access::REMOTE_RW, remote, 0, Box::new(memory)) }
}

/// `region` as `auto` would hand it out: registered here too, its key in the shared layout
/// with `other` in the bits another provider may use.
fn registered(p: &mut VerbsProvider, region: &Region, other: u16) -> Region {
    let (backing, lkey, rkey) = p.register_region(region).expect("register_region");
    let mut remote = region.remote();
    remote.key = mr::key(p.job.incarnation, rkey) | (u64::from(other) << 32);
    let backing: Box<dyn std::any::Any + Send + Sync> = Box::new((region.clone(), backing));
    // SAFETY: the clone of `region` in the backing keeps its memory mapped.
    unsafe { Region::new(region.as_ptr(), region.len(), region.access(), remote, lkey, backing) }
}

fn exchange(boot: &mut dyn Bootstrap, r: &RemoteRegion) -> Vec<RemoteRegion> {
    let all = boot.allgather(&r.to_bytes()).expect("allgather");
    all.iter().map(|b| RemoteRegion::from_bytes(b).expect("descriptor")).collect()
}

fn rma<'a>(local: &'a Region, remote: &'a RemoteRegion, len: usize) -> Rma<'a> {
    Rma { local, local_offset: 0, remote, remote_offset: 0, len }
}

/// Rank 0 puts from and gets into memory it did not allocate with verbs, into and out of rank
/// 1's likewise; a descriptor of another incarnation is refused before posting.
fn register_region_job(test: &str, env: (&str, &str)) {
    let Some(mut boot) = child_boot() else {
        run_job(test, 2, env);
        return;
    };
    let config = TransportConfig::from_env().expect("config");
    let mut p = VerbsProvider::open(config, &mut boot).expect("open verbs");
    const LEN: usize = 8192;
    let rank = p.job.rank;
    let memory = foreign_region(rank, LEN);
    let region = registered(&mut p, &memory, 0x1234);
    region.write(0, &testkit::pattern(rank as u64, LEN)).expect("fill");
    let all = exchange(&mut boot, &region.remote());
    // Rank 1 waits in a receive (its progress answers on-demand connection requests) until
    // rank 0 is done.
    if rank == 1 {
        assert_eq!(recv(&mut p, 0, 9), b"done");
        assert_eq!(memory.to_vec(0, LEN).expect("read"), testkit::pattern(7, LEN), "rank 0's put");
    } else {
        let source = testkit::pattern(7, LEN);
        region.write(0, &source).expect("fill");
        let op = p.put(rma(&region, &all[1], LEN), Signal::Yes).expect("put");
        p.wait_op(op, WAIT).expect("put completion").into_result().expect("put ok");
        let op = p.get(rma(&region, &all[1], LEN), Signal::Yes).expect("get");
        p.wait_op(op, WAIT).expect("get completion").into_result().expect("get ok");
        assert_eq!(memory.to_vec(0, LEN).expect("read"), source, "read back what was put");
        let stale = RemoteRegion { key: all[1].key ^ (1 << 48), ..all[1] };
        match p.put(rma(&region, &stale, 8), Signal::Yes) {
            Err(TransportError::InvalidKey { .. }) => {}
            other => panic!("a descriptor of another incarnation: {other:?}"),
        }
        let op = p.send(1, 9, b"done").expect("send");
        p.wait_op(op, WAIT).expect("send completion").into_result().expect("send ok");
    }
    boot.barrier().expect("barrier");
}

#[test]
fn register_region_takes_peer_rma() {
    if on_verbs() {
        register_region_job("verbs::tests::register_region_takes_peer_rma", ALL);
    }
}

#[test]
fn register_region_takes_peer_rma_on_demand() {
    if on_verbs() {
        register_region_job("verbs::tests::register_region_takes_peer_rma_on_demand", ON_DEMAND);
    }
}

/// 3 ranks; ranks 0 and 1 see each other's address, rank 2 is "reached another way" by both
/// and sees none: it stays Dead, unconnected, and posts to it fail. Then every rank
/// reconnects with the real addresses (a rank that moved hosts) and 0 and 2 exchange messages.
fn empty_addresses_job(test: &str, env: (&str, &str)) {
    let Some(mut tcp) = child_boot() else {
        run_job(test, 3, env);
        return;
    };
    let rank = tcp.job().rank;
    let carried = if rank == 2 { vec![2] } else { vec![0, 1] };
    let mut boot = Partial { inner: &mut tcp, carried: carried.clone(), given: Vec::new() };
    let config = TransportConfig::from_env().expect("config");
    let mut p = VerbsProvider::open_sub(config, &mut boot, SubCore::default()).expect("open verbs");
    let mine = std::mem::take(&mut boot.given);
    for peer in (0..3).filter(|r| !carried.contains(r)) {
        assert_eq!(p.peer_state(peer), PeerState::Dead, "rank {rank}: rank {peer}");
        assert_eq!(p.peers[peer as usize].link, Link::Idle, "rank {rank}: no connection to {peer}");
        match p.send(peer, 1, b"x") {
            Err(TransportError::PeerDead(r)) if r == peer => {}
            other => panic!("rank {rank}: send to rank {peer}: {other:?}"),
        }
    }
    if rank < 2 {
        let op = p.send(1 - rank, 2, b"hello").expect("send");
        assert_eq!(recv(&mut p, 1 - rank, 2), b"hello");
        p.wait_op(op, WAIT).expect("send completion").into_result().expect("send ok");
    }
    // The real addresses: every rank reconnects to those it had none for.
    let addresses = tcp.allgather(&mine).expect("allgather");
    for peer in (0..3).filter(|r| !carried.contains(r)) {
        p.reconnect(peer, 0, &addresses[peer as usize]).expect("reconnect");
    }
    tcp.barrier().expect("barrier");
    match rank {
        0 => {
            let op = p.send(2, 3, b"moved").expect("send");
            p.wait_op(op, WAIT).expect("send completion").into_result().expect("send ok");
            assert_eq!(recv(&mut p, 2, 4), b"back");
        }
        2 => {
            assert_eq!(recv(&mut p, 0, 3), b"moved");
            let op = p.send(0, 4, b"back").expect("send");
            p.wait_op(op, WAIT).expect("send completion").into_result().expect("send ok");
        }
        _ => {}
    }
    for peer in (0..3).filter(|&r| r != rank) {
        assert_eq!(p.peer_state(peer), PeerState::Alive, "rank {rank}: rank {peer} after reconnect");
    }
    tcp.barrier().expect("barrier");
}

fn recv(p: &mut VerbsProvider, source: Rank, tag: u64) -> Vec<u8> {
    let buffer = RecvBuffer::Owned { capacity: 64 };
    let op = p.post_recv(Source::Rank(source), TagMatch::exact(tag), buffer).expect("post_recv");
    match p.wait_op(op, WAIT).expect("recv completion").into_result().expect("recv ok").kind {
        CompletionKind::Recv { data: Some(data), .. } => data,
        other => panic!("unexpected completion {other:?}"),
    }
}

#[test]
fn empty_addresses_stay_dead_until_reconnect() {
    if on_verbs() {
        empty_addresses_job("verbs::tests::empty_addresses_stay_dead_until_reconnect", ALL);
    }
}

#[test]
fn empty_addresses_stay_dead_until_reconnect_on_demand() {
    if on_verbs() {
        empty_addresses_job("verbs::tests::empty_addresses_stay_dead_until_reconnect_on_demand", ON_DEMAND);
    }
}

#[test]
fn usable_when_the_device_opens() {
    if !on_verbs() {
        return;
    }
    let opts = VerbsOptions::from_env().expect("options");
    assert!(device::usable_with(&opts), "the suite's device {:?}", opts.devices);
    assert!(super::usable());
    let missing = VerbsOptions { devices: vec!["no_such_device".into()], ..opts.clone() };
    assert!(!device::usable_with(&missing));
    let no_port = VerbsOptions { port: 9, ..opts };
    assert!(!device::usable_with(&no_port));
}
