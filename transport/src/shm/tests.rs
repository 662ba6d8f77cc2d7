use super::*;
use crate::borrowed::Borrowed;

fn shm_files(job_tag: &str) -> Vec<String> {
    let prefix = format!("reverb.{job_tag}.");
    let mut names: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|name| name.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| (i * 31 + seed * 7 + 1) as u8).collect()
}

fn self_job(job_id: &str) -> JobInfo {
    JobInfo::single(job_id)
}

/// Sends that find the FIFO full wait in the backlog, complete only once published, and
/// arrive in order with the in-place ones; region sends of every eager size arrive whole.
#[test]
fn a_full_fifo_backlogs_in_order_and_drains() {
    let config = TransportConfig { shm_fifo_slots: 4, ..TransportConfig::default() };
    let (mut p, _) =
        ShmProvider::create(config, self_job(&format!("h14bl{}", std::process::id())), SubCore::default())
            .unwrap();
    let max = p.layout.max_payload();
    let src = p.alloc_region(max, Access::LOCAL).unwrap();
    let sends: Vec<OpId> = (0..10usize)
        .map(|i| {
            let len = (i * 13) % (max + 1);
            src.write(0, &pattern(i as u64, len)).unwrap();
            p.send_region(0, i as u64, &src, 0, len).unwrap()
        })
        .collect();
    assert_eq!(p.backlogged, 6, "4 slots in the FIFO, the rest wait");
    let done: Vec<OpId> = p.completions().drain(..).map(|c| c.op).collect();
    assert_eq!(done, sends[..4], "only published sends complete");
    for i in 0..10u64 {
        let recv =
            p.post_recv(Source::Rank(0), TagMatch::any(), RecvBuffer::Owned { capacity: max }).unwrap();
        let got = p.wait_op(recv, Duration::from_secs(10)).unwrap().into_result().unwrap();
        let len = (i as usize * 13) % (max + 1);
        match got.kind {
            CompletionKind::Recv { tag, data: Some(d), .. } => {
                assert_eq!(tag, i, "per-source order");
                assert!(d == pattern(i, len), "message {i} differs");
            }
            other => panic!("unexpected completion {other:?}"),
        }
    }
    assert_eq!(p.backlogged, 0);
    for op in &sends[4..] {
        assert!(p.wait_op(*op, Duration::from_secs(10)).unwrap().status.is_ok());
    }
}

/// Large slice sends and owned receives (a rank sending to itself) register no region
/// per message: the /dev/shm files stay the same two (control segment, one pooled staging
/// region) round after round, and every message arrives intact.
#[test]
fn large_messages_reuse_staging_and_need_no_scratch_region() {
    let job_id = format!("h11pool{}", std::process::id());
    let job = JobInfo::single(job_id.clone());
    let (mut p, _) = ShmProvider::create(TransportConfig::default(), job, SubCore::default()).unwrap();
    let tag_of = shmfile::sanitize_job_id(&job_id);
    let timeout = Duration::from_secs(30);
    let mut files_after_first = None;
    for round in 0..40u32 {
        let len = (1 << 20) - round as usize;
        let data: Vec<u8> = (0..len).map(|i| (i as u32 ^ round) as u8).collect();
        let recv = p
            .post_recv(Source::Rank(0), TagMatch::exact(7), RecvBuffer::Owned { capacity: 1 << 20 })
            .unwrap();
        let send = p.send(0, 7, &data).unwrap();
        let got = p.wait_op(recv, timeout).unwrap();
        assert!(got.status.is_ok(), "{:?}", got.status);
        match got.kind {
            CompletionKind::Recv { data: Some(bytes), len: n, .. } => {
                assert_eq!(n, len);
                assert!(bytes == data, "round {round}: payload differs");
            }
            other => panic!("unexpected completion {other:?}"),
        }
        assert!(p.wait_op(send, timeout).unwrap().status.is_ok());
        let files = shm_files(&tag_of);
        assert_eq!(files.len(), 2, "round {round}: control segment + one staging region: {files:?}");
        assert_eq!(files_after_first.get_or_insert_with(|| files.clone()), &files, "round {round}");
    }
    drop(p);
    assert_eq!(shm_files(&tag_of), Vec::<String>::new());
}

/// Endpoints of a host space reach each other by address alone: the receiver of a first
/// message never connected to its sender, and answers once it connects by address.
#[test]
fn host_space_endpoints_connect_by_address() {
    let space = format!("h37addr{}", std::process::id());
    let config = TransportConfig::default();
    let mut a = ShmProvider::open_by_address(config.clone(), &space).unwrap();
    let mut b = ShmProvider::open_by_address(config, &space).unwrap();
    let (a_addr, b_addr) = (a.peer_address().unwrap(), b.peer_address().unwrap());
    assert_ne!(a.rank(), b.rank());
    let to_b = a.connect_peer(&b_addr).unwrap();
    assert_eq!(to_b, b.rank());
    assert_eq!(a.connect_peer(&b_addr).unwrap(), to_b, "the same address names the same rank");
    let timeout = Duration::from_secs(10);
    let recv = b.post_recv(Source::Any, TagMatch::exact(5), RecvBuffer::Owned { capacity: 16 }).unwrap();
    let send = a.send(to_b, 5, b"ping").unwrap();
    a.wait_op(send, timeout).unwrap().into_result().unwrap();
    let got = b.wait_op(recv, timeout).unwrap().into_result().unwrap();
    assert!(
        matches!(got.kind, CompletionKind::Recv { source, tag: 5, len: 4, .. } if source == a.rank()),
        "{:?}",
        got.kind
    );
    assert_eq!(b.connect_peer(&a_addr).unwrap(), a.rank());
    let back = b.send(a.rank(), 6, b"pong").unwrap();
    b.wait_op(back, timeout).unwrap().into_result().unwrap();
    let recv =
        a.post_recv(Source::Rank(to_b), TagMatch::exact(6), RecvBuffer::Owned { capacity: 16 }).unwrap();
    a.wait_op(recv, timeout).unwrap().into_result().unwrap();
    // Bytes that are no address, and a job's rank, are refused with errors.
    assert!(matches!(a.connect_peer(b"junk"), Err(TransportError::Malformed { .. })));
    let (job_rank, _) =
        ShmProvider::create(TransportConfig::default(), self_job(&format!("{space}job")), SubCore::default())
            .unwrap();
    assert!(matches!(job_rank.peer_address(), Err(TransportError::Unsupported(_))));
    drop((a, b));
    let slots = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&format!("reverb-slot.{space}.")))
        .count();
    assert_eq!(slots, 0, "slot files go with their endpoints");
}

/// A slot whose endpoint dropped is taken by the next endpoint that opens; a peer that knew
/// the old one connects to the new one by its address and reaches it.
#[test]
fn a_reused_host_slot_connects_to_its_new_endpoint() {
    let space = format!("h37reuse{}", std::process::id());
    let config = TransportConfig::default();
    let mut a = ShmProvider::open_by_address(config.clone(), &space).unwrap();
    let b = ShmProvider::open_by_address(config.clone(), &space).unwrap();
    let old = a.connect_peer(&b.peer_address().unwrap()).unwrap();
    drop(b);
    let mut c = ShmProvider::open_by_address(config, &space).unwrap();
    assert_eq!(c.rank(), old, "the freed slot is taken again");
    assert_eq!(a.connect_peer(&c.peer_address().unwrap()).unwrap(), old);
    let timeout = Duration::from_secs(10);
    let recv = c.post_recv(Source::Any, TagMatch::exact(9), RecvBuffer::Owned { capacity: 8 }).unwrap();
    let send = a.send(old, 9, b"new").unwrap();
    a.wait_op(send, timeout).unwrap().into_result().unwrap();
    c.wait_op(recv, timeout).unwrap().into_result().unwrap();
}

/// A server outliving its clients: each new client takes the freed slot, introduces itself
/// with a first message, and the server answers it once it connects by the new address.
#[test]
fn a_server_answers_each_client_that_reuses_a_slot() {
    let space = format!("h37clients{}", std::process::id());
    let config = TransportConfig::default();
    let mut server = ShmProvider::open_by_address(config.clone(), &space).unwrap();
    let timeout = Duration::from_secs(10);
    for round in 0..3u8 {
        let mut client = ShmProvider::open_by_address(config.clone(), &space).unwrap();
        let to_server = client.connect_peer(&server.peer_address().unwrap()).unwrap();
        let hello = client.send(to_server, 1, &client.peer_address().unwrap()).unwrap();
        client.wait_op(hello, timeout).unwrap().into_result().unwrap();
        let recv =
            server.post_recv(Source::Any, TagMatch::exact(1), RecvBuffer::Owned { capacity: 64 }).unwrap();
        let got = server.wait_op(recv, timeout).unwrap().into_result().unwrap();
        let CompletionKind::Recv { data: Some(address), .. } = got.kind else { panic!("{:?}", got.kind) };
        let to_client = server.connect_peer(&address).unwrap();
        assert_eq!(to_client, client.rank(), "round {round}");
        let ack = server.send(to_client, 2, &[round]).unwrap();
        server.wait_op(ack, timeout).unwrap().into_result().unwrap();
        let recv =
            client.post_recv(Source::Any, TagMatch::exact(2), RecvBuffer::Owned { capacity: 8 }).unwrap();
        let got = client.wait_op(recv, timeout).unwrap().into_result().unwrap();
        assert!(matches!(got.kind, CompletionKind::Recv { len: 1, .. }), "round {round}: {:?}", got.kind);
    }
}

/// Memory lent to a posted receive (`Borrowed::posted`) waits for its message: eager and
/// rendezvous ones land in it (no data in the completion); a longer one comes back owned,
/// leaving the memory as it was; and lent memory for a claim still may not wait.
#[test]
fn memory_lent_to_a_posted_receive_takes_what_fits() {
    let job = self_job(&format!("h14lent{}", std::process::id()));
    let (mut p, _) = ShmProvider::create(TransportConfig::default(), job, SubCore::default()).unwrap();
    let timeout = Duration::from_secs(10);
    for (i, (len, room)) in
        [(100, 256), (200_000, 200_000), (300, 256), (300_000, 200_000)].into_iter().enumerate()
    {
        let mut buf = vec![0u8; room];
        // SAFETY: `buf` outlives the receive, which completes before this iteration ends.
        let lent = unsafe { Borrowed::posted(&mut buf) };
        let recv = p.post_recv(Source::Rank(0), TagMatch::exact(5), RecvBuffer::Borrowed(lent)).unwrap();
        let data = pattern(i as u64, len);
        let send = p.send(0, 5, &data).unwrap();
        let got = p.wait_op(recv, timeout).unwrap().into_result().unwrap();
        p.wait_op(send, timeout).unwrap().into_result().unwrap();
        match got.kind {
            CompletionKind::Recv { len: n, data: None, .. } if len <= room => {
                assert_eq!(n, len);
                assert!(buf[..len] == data[..], "case {i}: landed bytes differ");
            }
            CompletionKind::Recv { len: n, data: Some(owned), .. } if len > room => {
                assert_eq!(n, len);
                assert!(owned == data, "case {i}: owned bytes differ");
                assert!(buf.iter().all(|&b| b == 0), "case {i}: the lent memory was written");
            }
            other => panic!("case {i}: unexpected completion {other:?}"),
        }
    }
    let mut buf = [0u8; 8];
    // SAFETY: refused before anything is kept.
    let claimed = RecvBuffer::Borrowed(unsafe { Borrowed::new(&mut buf) });
    assert!(p.post_recv(Source::Rank(0), TagMatch::exact(6), claimed).is_err());
}
