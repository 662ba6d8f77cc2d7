//! `reverb bench bw --op send --runtime`: the send stream measured through the runtime
//! ([`Runtime`]: failure detection, the logging layer, recovery; the path MPI's sends and
//! receives take) instead of the raw provider. osu_bw's shape: the initiator sends windows of
//! `--window` messages, the responder takes each into its buffer and acknowledges every window
//! with an empty message. `REVERB_LOG` and the other runtime variables apply as in any job.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use reverb_runtime::{Received, Runtime};
use reverb_transport::{JobInfo, Source, Tag, TagMatch};

use super::engine::{pin_self, BwStats, Op, Output, Params};

const DATA: Tag = 0x20;
const ACK: Tag = 0x21;
const SYNC: Tag = 0x22;

struct RuntimeSession {
    rt: Runtime,
    peer: u32,
    initiator: bool,
}

impl RuntimeSession {
    /// Both ranks here before either goes on (the runtime has no barrier of its own).
    fn sync(&mut self) -> Result<()> {
        self.rt.send(self.peer, SYNC, &[]).context("sending a sync")?;
        self.rt.recv_from(self.peer, SYNC).context("receiving a sync")?;
        Ok(())
    }

    /// `windows` windows of `window` messages of `size` bytes; the initiator's elapsed time.
    fn stream(&mut self, size: usize, windows: u64, window: usize) -> Result<Option<Duration>> {
        let mut buf = vec![0u8; size.max(1)];
        let payload: Vec<u8> = (0..size).map(|i| (i as u8).wrapping_mul(31).wrapping_add(7)).collect();
        let accept = |_: Tag, _: usize| true;
        self.sync()?;
        let t0 = Instant::now();
        for _ in 0..windows {
            if self.initiator {
                for _ in 0..window {
                    self.rt.send(self.peer, DATA, &payload).context("sending data")?;
                }
                self.rt.recv_matching(Source::Rank(self.peer), TagMatch::exact(ACK)).context("ack")?;
            } else {
                for _ in 0..window {
                    let got = self
                        .rt
                        .recv_matching_into(Source::Rank(self.peer), TagMatch::exact(DATA), &mut buf, &accept)
                        .context("receiving data")?;
                    let len = match got {
                        Received::Landed { len, .. } => len,
                        Received::Message(m) => m.payload.len(),
                    };
                    if len != size {
                        bail!("received {len} bytes, expected {size}");
                    }
                }
                self.rt.send(self.peer, ACK, &[]).context("sending the ack")?;
            }
        }
        let elapsed = t0.elapsed();
        self.sync()?;
        Ok(self.initiator.then_some(elapsed))
    }
}

pub fn bw_main(params: &Params) -> Result<()> {
    let Some(job) = JobInfo::from_env().context("reading the launcher's job environment")? else {
        return super::engine::launch_self(params);
    };
    if job.size != 2 {
        bail!("reverb bench --runtime runs on exactly 2 ranks; this job has {}", job.size);
    }
    if let Some(&core) = params.cores.get(job.rank as usize) {
        pin_self(core)?;
    }
    let rt = Runtime::init().context("joining the job through the runtime")?;
    let mut s = RuntimeSession { rt, peer: 1 - job.rank, initiator: job.rank == 0 };
    let out =
        Output { json: params.json, progress: params.progress, provider: "runtime".into(), op: Op::Send };
    if s.initiator {
        let notes = [
            format!("through the runtime (the MPI path); window {}, one ack per window", params.window),
            "MiB/s = 2^20 bytes/s; peak = average (timed over the whole stream)".to_string(),
        ];
        out.header(
            "reverb runtime send bandwidth",
            &notes,
            " #bytes     #iters    window cq_mod  BW avg[MiB/s]  BW peak[MiB/s]  Mmsg/s",
        );
    }
    for &size in &params.sizes {
        let (iters, warmup) = params.bw_counts(size);
        let window = params.window;
        let windows = iters.div_ceil(window as u64);
        s.stream(size, warmup.div_ceil(window as u64), window)?;
        if let Some(elapsed) = s.stream(size, windows, window)? {
            let messages = windows * window as u64;
            let secs = elapsed.as_secs_f64().max(1e-9);
            let avg = (messages as f64 * size as f64) / secs / f64::from(1u32 << 20);
            out.bw_row(&BwStats {
                size,
                iters: messages,
                window,
                cq_mod: 1,
                avg_mib_s: avg,
                peak_mib_s: avg,
                msg_rate_mps: messages as f64 / secs / 1e6,
                elapsed,
            });
        }
    }
    s.rt.finalize().map_err(|e| anyhow!("finalizing the runtime: {e}"))?;
    Ok(())
}
