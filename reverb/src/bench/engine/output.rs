//! Output of a run: a perftest-like table or JSON lines on stdout, progress on stderr.

use super::{BwStats, LatStats, Op};

const RULE: &str = "---------------------------------------------------------------------------------------";

/// Table (perftest-like) or JSON lines (one object per size) on stdout; progress on stderr.
pub struct Output {
    pub json: bool,
    pub progress: bool,
    pub provider: String,
    pub op: Op,
}

impl Output {
    pub fn header(&self, title: &str, notes: &[String], columns: &str) {
        if self.json {
            return;
        }
        println!("{RULE}");
        println!(" {title}");
        for note in notes {
            println!(" {note}");
        }
        println!("{RULE}");
        println!("{columns}");
    }

    pub fn progress(&self, what: &str) {
        if self.progress {
            eprintln!("[reverb bench] {what}");
        }
    }

    pub fn lat_row(&self, s: &LatStats, halved: bool) {
        if self.json {
            let row = serde_json::json!({
                "test": "lat", "op": self.op.as_str(), "provider": self.provider,
                "bytes": s.size, "iters": s.iters, "half_round_trip": halved,
                "t_min_us": s.min_us, "t_typical_us": s.typical_us, "t_avg_us": s.avg_us,
                "t_99_us": s.p99_us, "t_max_us": s.max_us,
            });
            println!("{row}");
        } else {
            println!(
                " {:<10} {:<9} {:>10.3} {:>14.3} {:>10.3} {:>10.3} {:>10.3}",
                s.size, s.iters, s.min_us, s.typical_us, s.avg_us, s.p99_us, s.max_us
            );
        }
    }

    pub fn bw_row(&self, s: &BwStats) {
        if self.json {
            let row = serde_json::json!({
                "test": "bw", "op": self.op.as_str(), "provider": self.provider,
                "bytes": s.size, "iters": s.iters, "window": s.window, "cq_mod": s.cq_mod,
                "bw_avg_mib_s": s.avg_mib_s, "bw_peak_mib_s": s.peak_mib_s,
                "msg_rate_mps": s.msg_rate_mps, "seconds": s.elapsed.as_secs_f64(),
            });
            println!("{row}");
        } else {
            println!(
                " {:<10} {:<9} {:>6} {:>6} {:>14.1} {:>15.1} {:>12.3}",
                s.size, s.iters, s.window, s.cq_mod, s.avg_mib_s, s.peak_mib_s, s.msg_rate_mps
            );
        }
    }
}

impl Output {
    pub fn memcpy_row(&self, size: usize, iters: u64, hot_mib_s: f64, cold_mib_s: f64) {
        if self.json {
            let row = serde_json::json!({
                "test": "memcpy", "bytes": size, "iters": iters,
                "hot_mib_s": hot_mib_s, "cold_mib_s": cold_mib_s,
            });
            println!("{row}");
        } else {
            println!(" {size:<10} {iters:<9} {hot_mib_s:>14.1} {cold_mib_s:>14.1}");
        }
    }
}
