//! `reverb bench lat`: perftest-style latency. put: write ping-pong, each side spinning on the
//! last byte of its own target region; put_imm: ping-pong, arrival is the Imm completion;
//! send: tagged send/recv ping-pong; get: the time of one get (itself a round trip).

use anyhow::Result;

use super::engine::{run_in_job, LatStats, Op, Output, Params, Role, WaitStyle};

pub fn main(params: &Params) -> Result<()> {
    if params.log.is_some() {
        return super::logged::lat_main(params);
    }
    run_in_job(params, |session| {
        let out = Output {
            json: params.json,
            progress: params.progress,
            provider: session.provider_label(),
            op: params.op,
        };
        // A get is a round trip by itself: report its full time, as perftest's ib_read_lat.
        let halved = params.op != Op::Get;
        let (title, what) = match params.op {
            Op::Put => ("put latency", "write ping-pong, arrival = last byte changes"),
            Op::PutImm => ("put_imm latency", "ping-pong, arrival = Imm completion"),
            Op::Send => ("send latency", "tagged send/recv ping-pong, receives pre-posted"),
            Op::Get => ("get latency", "one get per iteration, waited to completion"),
        };
        let waiting = match params.wait {
            WaitStyle::BusyPoll => "busy poll()".to_string(),
            WaitStyle::Provider(mode) => format!("provider wait ({mode:?})"),
        };
        let notes = [
            format!(
                "provider: {}   ranks: {} <-> {}   completions: {waiting}{}",
                out.provider,
                params.pair.0,
                params.pair.1,
                if params.op == Op::Put { " (arrival: memory spin)" } else { "" }
            ),
            format!("{what}; data verified on a first pass per size"),
            if halved {
                "latency = half the round trip, in microseconds".to_string()
            } else {
                "latency = one full get (a round trip, not halved, as ib_read_lat), in microseconds"
                    .to_string()
            },
        ];
        if session.role() == Role::Initiator {
            out.header(
                &format!("reverb {title}"),
                &notes,
                " #bytes     #iters     t_min[us]  t_typical[us]  t_avg[us]  t_99%[us]  t_max[us]",
            );
        }
        for &size in &params.sizes {
            let (iters, warmup) = params.lat_counts(size);
            if session.role() == Role::Initiator {
                out.progress(&format!("lat {} {size} B: {iters} iterations", params.op.as_str()));
            }
            // Ping-pongs move data both ways: verify both directions.
            session.verify(params.op, size, true)?;
            if params.op != Op::Get {
                session.verify(params.op, size, false)?;
            }
            let samples = session.latency(params.op, size, iters, warmup, params.cq_mod)?;
            if session.role() == Role::Initiator {
                out.lat_row(&LatStats::from_samples(size, &samples, halved)?, halved);
            }
        }
        Ok(())
    })
}
