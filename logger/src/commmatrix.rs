//! The communication matrix: application messages and bytes per (sender → receiver) pair,
//! counted by the sender, with the library's own traffic (envelopes, piggybacked
//! determinants, log writes, resends) kept apart. Clustering and the checkpoint planner read
//! the byte matrix in the text format `ckpt::cluster::CommMatrix::parse` takes: N lines of N
//! whitespace-separated byte counts, row = sender, `#` lines are comments.

use reverb_transport::codec::Writer;
use reverb_transport::Rank;

use crate::error::{LogError, Result};
use crate::wire::Reader;

/// Bytes of one encoded cell: three `u64`s.
const CELL_LEN: usize = 24;

/// One (this rank → dest) cell.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommCell {
    pub messages: u64,
    pub bytes: u64,
    /// Bytes the logging library added or sent on its own for this destination.
    pub library_bytes: u64,
}

/// This rank's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommRow {
    cells: Vec<CommCell>,
}

impl CommRow {
    pub fn new(size: u32) -> Self {
        CommRow { cells: vec![CommCell::default(); size as usize] }
    }

    pub fn cells(&self) -> &[CommCell] {
        &self.cells
    }

    fn cell(&mut self, dest: Rank) -> Result<&mut CommCell> {
        self.cells
            .get_mut(dest as usize)
            .ok_or_else(|| LogError::InvalidArgument(format!("destination rank {dest} out of range")))
    }

    /// One application message of `payload` bytes, plus `library` bytes of overhead.
    pub fn record_app(&mut self, dest: Rank, payload: u64, library: u64) -> Result<()> {
        let c = self.cell(dest)?;
        c.messages += 1;
        c.bytes += payload;
        c.library_bytes += library;
        Ok(())
    }

    /// Traffic of the library alone (log writes, resends).
    pub fn record_library(&mut self, dest: Rank, bytes: u64) -> Result<()> {
        self.cell(dest)?.library_bytes += bytes;
        Ok(())
    }

    /// `size u32 | size × (messages u64 | bytes u64 | library_bytes u64)`, for the gather.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + CELL_LEN * self.cells.len());
        let mut w = Writer::new(&mut out);
        w.u32(self.cells.len() as u32);
        for c in &self.cells {
            w.u64(c.messages).u64(c.bytes).u64(c.library_bytes);
        }
        out
    }

    /// Decodes [`CommRow::to_bytes`] output from untrusted bytes (another rank's row).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        const WHAT: &str = "communication row";
        let mut r = Reader::new(bytes, WHAT);
        let size = r.u32()? as usize;
        if size.checked_mul(CELL_LEN) != Some(r.remaining()) {
            return Err(LogError::malformed(WHAT, format!("{size} cells in {} bytes", r.remaining())));
        }
        let cells = (0..size)
            .map(|_| Ok(CommCell { messages: r.u64()?, bytes: r.u64()?, library_bytes: r.u64()? }))
            .collect::<Result<Vec<_>>>()?;
        Ok(CommRow { cells })
    }
}

/// The whole job's matrix, row = sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommMatrix {
    pub rows: Vec<CommRow>,
}

impl CommMatrix {
    /// From every rank's row (indexed by rank); rows must all be `rows.len()` wide.
    pub fn from_rows(rows: Vec<CommRow>) -> Result<Self> {
        let n = rows.len();
        if let Some((rank, row)) = rows.iter().enumerate().find(|(_, r)| r.cells.len() != n) {
            return Err(LogError::malformed(
                "communication matrix",
                format!("row of rank {rank} has {} cells in a job of {n}", row.cells.len()),
            ));
        }
        Ok(CommMatrix { rows })
    }

    pub fn size(&self) -> usize {
        self.rows.len()
    }

    /// Application bytes from `src` to `dest`.
    pub fn bytes(&self, src: Rank, dest: Rank) -> Option<u64> {
        self.rows.get(src as usize)?.cells.get(dest as usize).map(|c| c.bytes)
    }

    /// The application byte matrix as `CommMatrix::parse` (ckpt) reads it.
    pub fn to_text(&self) -> String {
        let mut out = String::from("# reverb communication matrix: application bytes, row = sender\n");
        for row in &self.rows {
            let line: Vec<String> = row.cells.iter().map(|c| c.bytes.to_string()).collect();
            out.push_str(&line.join(" "));
            out.push('\n');
        }
        out
    }

    /// Same layout, application message counts.
    pub fn messages_text(&self) -> String {
        let mut out = String::from("# reverb communication matrix: application messages, row = sender\n");
        for row in &self.rows {
            let line: Vec<String> = row.cells.iter().map(|c| c.messages.to_string()).collect();
            out.push_str(&line.join(" "));
            out.push('\n');
        }
        out
    }

    /// Library bytes per rank (summed over destinations), kept apart from the matrix.
    pub fn library_bytes_per_rank(&self) -> Vec<u64> {
        self.rows.iter().map(|r| r.cells.iter().map(|c| c.library_bytes).sum()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn random_rows_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            let _ = CommRow::from_bytes(&bytes);
        }

        #[test]
        fn rows_round_trip(cells in prop::collection::vec(any::<(u64, u64, u64)>(), 0..12)) {
            let cells = cells.into_iter().map(|(messages, bytes, library_bytes)| CommCell { messages, bytes, library_bytes });
            let row = CommRow { cells: cells.collect() };
            prop_assert_eq!(CommRow::from_bytes(&row.to_bytes()).unwrap(), row);
        }
    }

    /// `size u32 | (messages, bytes, library_bytes) u64` per cell: ranks of one job agree.
    #[test]
    fn pinned_encoding() {
        let mut row = CommRow::new(1);
        row.record_app(0, 0x0102, 3).unwrap();
        let want = [1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 1, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(row.to_bytes(), want);
    }

    #[test]
    fn rows_round_trip_and_text_is_n_by_n() {
        let mut a = CommRow::new(2);
        a.record_app(1, 100, 40).unwrap();
        a.record_app(1, 8, 40).unwrap();
        a.record_library(0, 5).unwrap();
        assert!(a.record_app(2, 1, 0).is_err());
        let b = CommRow::new(2);
        let back = CommRow::from_bytes(&a.to_bytes()).unwrap();
        assert_eq!(back, a);
        let bytes = a.to_bytes();
        for cut in 0..bytes.len() {
            assert!(CommRow::from_bytes(&bytes[..cut]).is_err());
        }
        let m = CommMatrix::from_rows(vec![a, b]).unwrap();
        assert_eq!(m.bytes(0, 1), Some(108));
        assert_eq!(m.to_text().lines().filter(|l| !l.starts_with('#')).collect::<Vec<_>>(), ["0 108", "0 0"]);
        assert_eq!(m.messages_text().lines().nth(1), Some("0 2"));
        assert_eq!(m.library_bytes_per_rank(), [85, 0]);
        assert!(CommMatrix::from_rows(vec![CommRow::new(3)]).is_err());
    }
}
