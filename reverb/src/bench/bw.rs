//! `reverb bench bw`: windowed bandwidth and message rate. `--window` operations stay
//! outstanding, RMA signaled every `--cq-mod`-th; send: the responder keeps a window of
//! receives posted. The timed phase ends with a FIN/ACK sync, so the data has landed.

use anyhow::{anyhow, Result};

use super::engine::{run_in_job, Op, Output, Params, Role, WaitStyle};

pub fn main(params: &Params) -> Result<()> {
    if params.log.is_some() {
        return super::logged::bw_main(params);
    }
    if params.runtime {
        return super::runtime::bw_main(params);
    }
    run_in_job(params, |session| {
        let out = Output {
            json: params.json,
            progress: params.progress,
            provider: session.provider_label(),
            op: params.op,
        };
        let waiting = match params.wait {
            WaitStyle::BusyPoll => "busy poll()".to_string(),
            WaitStyle::Provider(mode) => format!("provider wait ({mode:?})"),
        };
        let signaling = if params.op == Op::Send {
            "every send completes".to_string()
        } else {
            format!("signaled every {}", params.cq_mod)
        };
        let notes = [
            format!(
                "provider: {}   ranks: {} -> {}   window: {}   {signaling}   completions: {waiting}",
                out.provider, params.pair.0, params.pair.1, params.window
            ),
            "includes the final FIN/ACK sync; data verified on a first pass per size".to_string(),
            "MiB/s = 2^20 bytes/s (as perftest, ucx_perftest); peak = best 1/20 of the run".to_string(),
        ];
        if session.role() == Role::Initiator {
            out.header(
                &format!("reverb {} bandwidth", params.op.as_str()),
                &notes,
                " #bytes     #iters    window cq_mod  BW avg[MiB/s]  BW peak[MiB/s]  Mmsg/s",
            );
        }
        for &size in &params.sizes {
            let (iters, warmup) = params.bw_counts(size);
            if session.role() == Role::Initiator {
                out.progress(&format!("bw {} {size} B: {iters} operations", params.op.as_str()));
            }
            session.verify(params.op, size, true)?;
            let stats = session.bandwidth(params.op, size, iters, warmup, params.window, params.cq_mod)?;
            if session.role() == Role::Initiator {
                let stats = stats.ok_or_else(|| anyhow!("the initiator measured nothing"))?;
                out.bw_row(&stats);
            }
        }
        Ok(())
    })
}
