//! The `auto` provider across hosts, on one machine: each rank names its host
//! (`REVERB_HOST_NAME`, here set by the rank itself: ranks 0,1 on host h0, ranks 2,3 on h1), so
//! `auto` uses shm inside a name and tcp between names (verbs with `REVERB_AUTO_NET=verbs`, as
//! the soft-RoCE VM runs it). What only `auto` has to get right:
//! which provider carries each peer, one region written by a host-mate through shared memory and
//! by a remote rank through tcp, rendezvous fetched by the wire that carried it, and wildcard
//! receives that see both wires in one per-source order. On one host, `auto` is shm itself.

mod common;

use common::{child, is_child, pattern, run_ok, WAIT};
use reverb_transport::bootstrap::TcpBootstrap;
use reverb_transport::codec::{Reader, Writer};
use reverb_transport::config::AutoNet;
use reverb_transport::*;

const RANKS: u32 = 4;
/// Bytes each rank owns in every region.
const SLOT: usize = 4096;
/// A message above the rendezvous threshold.
const LARGE: usize = 100_000;

/// Opens `auto` with this rank on host `h{rank / 2}`.
fn open_on_named_host() -> (JobInfo, TcpBootstrap, Box<dyn Provider>) {
    let mut boot = TcpBootstrap::connect_from_env().expect("bootstrap");
    let job = boot.job().clone();
    let mut config = TransportConfig::from_env().expect("config");
    config.provider = ProviderKind::AUTO;
    config.host_name = Some(format!("h{}", job.rank / 2));
    let provider = reverb_transport::open(&config, &mut boot).expect("open auto");
    (job, boot, provider)
}

fn same_host(a: Rank, b: Rank) -> bool {
    a / 2 == b / 2
}

#[test]
fn auto_picks_a_provider_per_peer_and_moves_everything_through_one_queue() {
    if !is_child() {
        return run_ok("auto_picks_a_provider_per_peer_and_moves_everything_through_one_queue", RANKS, &[]);
    }
    let (job, mut boot, mut p) = open_on_named_host();
    let me = job.rank;
    assert_eq!(p.kind(), ProviderKind::AUTO);
    // Between hosts: tcp, unless the job asked for verbs (the soft-RoCE VM runs it so).
    let net = match p.config().auto_net {
        AutoNet::Verbs => ProviderKind::VERBS,
        _ => ProviderKind::TCP,
    };
    for peer in 0..RANKS {
        let want = if same_host(me, peer) { ProviderKind::SHM } else { net };
        assert_eq!(p.provider_for(peer), want, "rank {me} -> {peer}");
    }

    // One region per rank; every rank writes its slot of every region, host-mates through the
    // mapping, the others through tcp, then reads every slot of every region back.
    let region = p.alloc_region(SLOT * RANKS as usize, Access::REMOTE_RW).expect("alloc");
    let mut mine = Vec::new();
    region.remote().write(&mut Writer::new(&mut mine));
    let all = boot.allgather(&mine).expect("allgather");
    let remotes: Vec<RemoteRegion> = all
        .iter()
        .map(|b| RemoteRegion::read(&mut Reader::new(b, "descriptor")).expect("descriptor"))
        .collect();
    let local = p.alloc_region(SLOT, Access::LOCAL).expect("local");
    // The slot `writer` owns in `remote`, to or from the local buffer.
    let slot = |remote, writer: Rank| Rma {
        local: &local,
        local_offset: 0,
        remote,
        remote_offset: (writer as usize * SLOT) as u64,
        len: SLOT,
    };
    for (owner, remote) in remotes.iter().enumerate() {
        local.write(0, &pattern(u64::from(me) * 10 + owner as u64, SLOT)).expect("fill");
        let op = p.put(slot(remote, me), Signal::Yes).expect("put");
        p.wait_op(op, WAIT).expect("put completion").into_result().expect("put ok");
    }
    boot.barrier().expect("barrier");
    for (owner, remote) in remotes.iter().enumerate() {
        for writer in 0..RANKS {
            let op = p.get(slot(remote, writer), Signal::Yes).expect("get");
            p.wait_op(op, WAIT).expect("get completion").into_result().expect("get ok");
            let want = pattern(u64::from(writer) * 10 + owner as u64, SLOT);
            assert!(
                local.to_vec(0, SLOT).unwrap() == want,
                "rank {me}: slot {writer} of rank {owner}'s region"
            );
        }
    }

    // Every rank sends an eager and a rendezvous message to every other; each receives them
    // all with wildcard receives: per source, eager before rendezvous, whatever the wire.
    let recvs: Vec<OpId> = (0..2 * (RANKS - 1))
        .map(|_| {
            p.post_recv(Source::Any, TagMatch::any(), RecvBuffer::Owned { capacity: LARGE }).expect("post")
        })
        .collect();
    let mut sends = Vec::new();
    for dest in (0..RANKS).filter(|&d| d != me) {
        sends.push(p.send(dest, 1, &pattern(u64::from(me), 64)).expect("eager send"));
        sends.push(p.send(dest, 2, &pattern(u64::from(me) + 100, LARGE)).expect("rendezvous send"));
    }
    let mut seen = vec![Vec::new(); RANKS as usize];
    for op in recvs {
        let c = p.wait_op(op, WAIT).expect("recv completion").into_result().expect("recv ok");
        let CompletionKind::Recv { source, tag, data: Some(data), .. } = c.kind else {
            panic!("{:?}", c.kind)
        };
        let seed = if tag == 1 { u64::from(source) } else { u64::from(source) + 100 };
        assert_eq!(data, pattern(seed, data.len()), "rank {me}: payload from {source} tag {tag}");
        seen[source as usize].push(tag);
    }
    for source in (0..RANKS).filter(|&s| s != me) {
        assert_eq!(seen[source as usize], [1, 2], "rank {me}: order of rank {source}'s messages");
    }
    for op in sends {
        p.wait_op(op, WAIT).expect("send completion").into_result().expect("send ok");
    }
    boot.barrier().expect("final barrier");
}

/// Every rank on one host: `auto` is the shm provider itself (nothing in between).
#[test]
fn auto_on_one_host_is_shm() {
    if common::on_different_hosts(0, 1, 2) {
        return eprintln!("skipped: the job's ranks are placed on different hosts (REVERB_TEST_HOST_NAMES)");
    }
    if !is_child() {
        return run_ok("auto_on_one_host_is_shm", 2, &[("REVERB_PROVIDER", "auto")]);
    }
    let Some((_, _, p)) = child() else { return };
    assert_eq!(p.kind(), ProviderKind::SHM);
}
