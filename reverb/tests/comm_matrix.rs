//! The communication matrix's text format, written by the logger (`CommMatrix::to_text`) and
//! read by the checkpoint planner (`reverb_ckpt::cluster::CommMatrix::parse`): arbitrary text
//! never panics the reader, and what the writer wrote reads back cell for cell.

use proptest::prelude::*;
use reverb_ckpt::cluster::CommMatrix as PlannerMatrix;
use reverb_logger::commmatrix::{CommMatrix, CommRow};

/// A job of `n` ranks whose rank `r` sent `cells[r * n + d]` bytes (in one message) to `d`.
fn matrix(n: usize, cells: &[u64]) -> CommMatrix {
    let rows = (0..n)
        .map(|r| {
            let mut row = CommRow::new(n as u32);
            for d in 0..n {
                row.record_app(d as u32, cells[r * n + d], 0).expect("destination in range");
            }
            row
        })
        .collect();
    CommMatrix::from_rows(rows).expect("square")
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in ".{0,200}", numbers in prop::collection::vec(any::<u64>(), 0..12)) {
        let _ = PlannerMatrix::parse(&text);
        let rows: Vec<String> = numbers.chunks(3).map(|c| c.iter().map(u64::to_string).collect::<Vec<_>>().join(" ")).collect();
        let _ = PlannerMatrix::parse(&rows.join("\n"));
    }

    #[test]
    fn what_the_logger_writes_the_planner_reads(n in 1usize..6, seed in prop::collection::vec(any::<u64>(), 36)) {
        let m = matrix(n, &seed);
        let parsed = PlannerMatrix::parse(&m.to_text()).expect("the logger's text parses");
        prop_assert_eq!(parsed.ranks(), n);
        for (r, d) in (0..n).flat_map(|r| (0..n).map(move |d| (r, d))) {
            prop_assert_eq!(parsed.bytes(r, d), seed[r * n + d]);
            prop_assert_eq!(m.bytes(r as u32, d as u32), Some(seed[r * n + d]));
        }
    }
}
