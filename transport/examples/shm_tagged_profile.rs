//! One process, one shm rank sending tagged messages to itself: the provider's whole per-message
//! work (post a region receive, send, progress, reap both completions) with no peer to wait for,
//! so an instruction counter sees only that work. For profiling the eager path:
//!
//! ```text
//! cargo build --release -p reverb-transport --example shm_tagged_profile
//! valgrind --tool=callgrind target/release/examples/shm_tagged_profile 8 1000
//! valgrind --tool=callgrind target/release/examples/shm_tagged_profile 8 11000
//! ```
//!
//! (instructions of the second - the first) / 10000 = instructions per message. Sizes above the
//! rendezvous threshold profile the advertised path (the receiver's buffer written by the
//! sender), or with a third argument `late` the RTS path (the send goes before the advert is
//! taken in).

use std::time::{Duration, Instant};

use reverb_transport::bootstrap::{Bootstrap, JobInfo};
use reverb_transport::shm::ShmProvider;
use reverb_transport::{
    Access, CompletionKind, Provider, RecvBuffer, Result, Source, TagMatch, TransportConfig, TransportError,
};

/// The bootstrap of a one-rank job: every collective is this rank alone.
struct Alone(JobInfo);

impl Bootstrap for Alone {
    fn job(&self) -> &JobInfo {
        &self.0
    }
    fn allgather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        Ok(vec![data.to_vec()])
    }
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let size: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(8);
    let iters: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    // `late`: send before the receive's advert is taken in (the rendezvous path proper).
    let advertised = args.next().as_deref() != Some("late");
    let job = JobInfo::single(format!("prof{}", std::process::id()));
    let mut p = ShmProvider::open(TransportConfig::default(), &mut Alone(job))?;
    // Above the rendezvous threshold the receiver's buffer may be written and the sender's
    // read: the rendezvous (or advertised) path is what gets profiled.
    let large = size > TransportConfig::default().rndv_thresh;
    let (src_access, dst_access) =
        if large { (Access::REMOTE_READ, Access::REMOTE_WRITE) } else { (Access::LOCAL, Access::LOCAL) };
    let src = p.alloc_region(size.max(1), src_access)?;
    let dst = p.alloc_region(size.max(1), dst_access)?;
    let start = Instant::now();
    for _ in 0..iters {
        let buffer = RecvBuffer::Region { region: dst.clone(), offset: 0, capacity: size };
        p.post_recv(Source::Rank(0), TagMatch::exact(1), buffer)?;
        if large && advertised {
            // Take in the receive's advert before sending, as a ping-pong peer has.
            p.progress()?;
        }
        p.send_region(0, 1, &src, 0, size)?;
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut done = 0;
        while done < 2 {
            p.progress()?;
            while let Some(c) = p.completions().pop_front() {
                c.status?;
                done +=
                    usize::from(matches!(c.kind, CompletionKind::Send { .. } | CompletionKind::Recv { .. }));
            }
            if done < 2 && Instant::now() > deadline {
                return Err(TransportError::Timeout(Duration::from_secs(10)));
            }
        }
    }
    let per = start.elapsed().as_secs_f64() * 1e9 / iters as f64;
    println!("{size} B: {iters} self send/recv pairs, {per:.1} ns each; {:?}", p.rndv_stats());
    Ok(())
}
