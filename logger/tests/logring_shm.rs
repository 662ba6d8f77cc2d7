//! The remote log ring between two real processes over the shm provider: rank 0 writes
//! wrapping records into rank 1's registered ring with puts; rank 1 reads them back from its
//! own memory, then detects a torn write and a corrupted record.

mod common;

use std::time::Duration;

use reverb_logger::logring::{
    self, create_ring, encode_record, LogRingWriter, RecordKind, ScanEnd, DATA_OFFSET,
};
use reverb_logger::{Determinant, LogError};
use reverb_transport::{Access, Bootstrap, RemoteRegion, Rma, Signal};

const CAPACITY: usize = 4096;
const PHASES: u64 = 12;
const WAIT: Duration = Duration::from_secs(30);

/// Record `seq`: every fifth is a determinant batch, the rest payloads of varied length.
fn record(seq: u64) -> (RecordKind, Vec<u8>) {
    if seq.is_multiple_of(5) {
        let dets: Vec<u8> = (0..seq % 7 + 1)
            .flat_map(|i| Determinant { sender: 1, receiver: 0, ssn: seq, rsn: seq * 10 + i }.to_bytes())
            .collect();
        (RecordKind::Determinants, dets)
    } else {
        let mut data = seq.to_le_bytes().to_vec();
        data.extend(common::pattern(seq, (seq * 37 % 300) as usize));
        (RecordKind::Payload, data)
    }
}

#[test]
fn ring_over_shm_wraps_and_reads_back() {
    let Some((job, mut boot, mut provider)) = common::child() else {
        common::run_ok("ring_over_shm_wraps_and_reads_back", 2, &[]);
        return;
    };
    let provider = &mut *provider;
    let ring = if job.rank == 1 { Some(create_ring(provider, CAPACITY).expect("create ring")) } else { None };
    let mine = ring.as_ref().map(|r| r.remote().to_bytes().to_vec()).unwrap_or_default();
    let all = boot.allgather(&mine).expect("allgather");
    let remote = RemoteRegion::from_bytes(&all[1]).expect("ring descriptor");

    let mut writer =
        if job.rank == 0 { Some(LogRingWriter::new(provider, remote).expect("writer")) } else { None };
    let mut next_write = 0u64;
    let mut next_read = 0u64;
    for phase in 0..PHASES {
        if let Some(w) = writer.as_mut() {
            // Fill until back-pressure (varying per phase), then make it durable.
            loop {
                let (kind, data) = record(next_write);
                match w.append(provider, kind, &data) {
                    Ok(_) => next_write += 1,
                    Err(LogError::RingFull { .. }) => break,
                    Err(e) => panic!("append: {e}"),
                }
                if phase % 3 == 0 && next_write.is_multiple_of(9) {
                    break;
                }
            }
            w.flush(provider, WAIT).expect("flush");
            assert_eq!(w.durable_watermark(), w.head());
        }
        boot.barrier().expect("barrier");
        if let Some(ring) = ring.as_ref() {
            let image = ring.to_vec(0, ring.len()).expect("read ring");
            let scan = logring::scan(&image).expect("scan");
            assert_eq!(scan.end, ScanEnd::Clean);
            assert!(!scan.records.is_empty(), "phase {phase} wrote nothing");
            for r in &scan.records {
                assert!(!r.beyond_watermark);
                let (kind, data) = record(next_read);
                assert_eq!((r.kind, &r.data), (kind, &data), "record {next_read} in phase {phase}");
                if kind == RecordKind::Determinants {
                    assert_eq!(r.determinants().expect("dets").len() as u64, next_read % 7 + 1);
                }
                next_read += 1;
            }
            assert_eq!(scan.next_pos, scan.header.watermark);
        }
        boot.barrier().expect("barrier");
        if let Some(w) = writer.as_mut() {
            // The reader has everything: garbage-collect it.
            let head = w.head();
            w.trim(provider, head).expect("trim");
            w.flush(provider, WAIT).expect("flush trim");
            assert_eq!(w.recorded_header().tail, head);
        }
    }

    // A torn write: three durable records, then only part of a fourth reaches the buddy.
    if let Some(w) = writer.as_mut() {
        assert!(w.head() > 3 * w.capacity(), "the test must wrap the ring several times");
        for i in 0..3 {
            w.append(provider, RecordKind::Payload, &common::pattern(1000 + i, 40)).expect("append");
        }
        w.flush(provider, WAIT).expect("flush");
        let pos = w.head();
        let contiguous = (w.capacity() - pos % w.capacity()) as usize;
        let bytes = encode_record(pos, RecordKind::Payload, &common::pattern(7, 200)).expect("encode");
        let torn_len = (bytes.len() / 2).min(contiguous);
        let local = provider.alloc_region(bytes.len(), Access::LOCAL).expect("staging");
        local.write(0, &bytes).expect("stage");
        let remote_offset = (DATA_OFFSET as u64) + pos % w.capacity();
        let rma = Rma { local: &local, local_offset: 0, remote: &remote, remote_offset, len: torn_len };
        let op = provider.put(rma, Signal::Yes).expect("torn put");
        provider.wait_op(op, WAIT).expect("torn put completion");
    }
    boot.barrier().expect("barrier");
    if let Some(ring) = ring.as_ref() {
        let image = ring.to_vec(0, ring.len()).expect("read ring");
        let scan = logring::scan(&image).expect("scan");
        assert_eq!(scan.records.len(), 3);
        assert_eq!(scan.end, ScanEnd::Torn { pos: scan.header.watermark });
        // Damage a durable record: that is corruption, not a tear.
        let second = &scan.records[1];
        let offset = DATA_OFFSET + (second.pos % scan.header.capacity) as usize + 30;
        let mut byte = [0u8];
        ring.read(offset, &mut byte).expect("read");
        ring.write(offset, &[byte[0] ^ 0xff]).expect("write");
        let image = ring.to_vec(0, ring.len()).expect("read ring");
        assert!(matches!(logring::scan(&image), Err(LogError::Corrupt { pos, .. }) if pos == second.pos));
    }
    boot.barrier().expect("final barrier");
}
