use super::*;

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
    JobInfo {
        rank: 0,
        size: 1,
        node: 0,
        local_rank: 0,
        ranks_per_node: 1,
        job_id: job_id.to_string(),
        incarnation: 0,
    }
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
    let job = JobInfo {
        rank: 0,
        size: 1,
        node: 0,
        local_rank: 0,
        ranks_per_node: 1,
        job_id: job_id.clone(),
        incarnation: 0,
    };
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
