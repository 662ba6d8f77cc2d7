//! The communicator-creation journal: what each creation's all-gather returned (context
//! agreements, split colors and keys), kept with every checkpoint. A restarted rank
//! re-executes the program's setup before `MPIX_Reverb_restore`, but its channels already
//! stand at the checkpoint, where the survivors are: the creations it repeats there are
//! answered from the journal, in order, without a message, and give the handles, contexts
//! and members they gave the first time. `MPIX_Reverb_restore` ends the setup; creations made
//! after it communicate again. (Intercommunicator creation, over point-to-point messages, is
//! not journaled: create intercommunicators after the restore.)

use std::collections::VecDeque;

use reverb_transport::codec::{Reader, Writer};

use crate::abi::MPI_ERR_OTHER;
use crate::errors::{MpiError, MpiResult};

/// The checkpoint entry that holds the journal (protected regions use ids from 0 up).
pub const JOURNAL_ENTRY: u32 = u32::MAX;

/// Recorded all-gathers, and at a restarted rank the ones still to answer from.
#[derive(Debug, Default)]
pub struct Journal {
    recorded: Vec<Vec<Vec<u8>>>,
    replaying: VecDeque<Vec<Vec<u8>>>,
}

impl Journal {
    /// At a restarted rank: answers the next creations from `bytes` (the restored entry).
    pub fn resume(bytes: &[u8]) -> MpiResult<Journal> {
        let recorded = decode(bytes)?;
        Ok(Journal { replaying: recorded.iter().cloned().collect(), recorded })
    }

    /// The recorded answer of the next creation while the setup is re-executed.
    pub fn replay_next(&mut self) -> Option<Vec<Vec<u8>>> {
        self.replaying.pop_front()
    }

    pub fn record(&mut self, all: &[Vec<u8>]) {
        self.recorded.push(all.to_vec());
    }

    /// A place for a creation's answer, in start order (`MPI_Comm_idup`s may finish in
    /// another), filled by `fill` once known.
    pub fn reserve(&mut self) -> usize {
        self.recorded.push(Vec::new());
        self.recorded.len() - 1
    }

    pub fn fill(&mut self, slot: usize, all: &[Vec<u8>]) {
        if let Some(entry) = self.recorded.get_mut(slot) {
            *entry = all.to_vec();
        }
    }

    /// The setup is over (`MPIX_Reverb_restore`): later creations communicate.
    pub fn end_setup(&mut self) {
        self.replaying.clear();
    }

    /// `count u32 | count × (parts u32 | parts × bytes32)`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        Writer::new(&mut out).u32(self.recorded.len() as u32);
        for all in &self.recorded {
            Writer::new(&mut out).u32(all.len() as u32);
            for part in all {
                Writer::new(&mut out).bytes32(part);
            }
        }
        out
    }
}

fn decode(bytes: &[u8]) -> MpiResult<Vec<Vec<Vec<u8>>>> {
    let bad = |e: reverb_transport::codec::CodecError| {
        MpiError::new(MPI_ERR_OTHER, format!("the checkpoint's communicator journal: {e}"))
    };
    let mut r = Reader::new(bytes, "communicator journal");
    let count = r.u32("count").map_err(bad)?;
    let mut recorded = Vec::new();
    for _ in 0..count {
        let parts = r.u32("parts").map_err(bad)?;
        let mut all = Vec::new();
        for _ in 0..parts {
            all.push(r.bytes32("part").map_err(bad)?.to_vec());
        }
        recorded.push(all);
    }
    r.finish().map_err(bad)?;
    Ok(recorded)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replays_what_was_recorded_until_the_setup_ends() {
        let mut j = Journal::default();
        let first = j.reserve();
        j.record(&[b"bc".to_vec()]);
        j.fill(first, &[b"a".to_vec(), Vec::new()]);
        let bytes = j.encode();
        let mut back = Journal::resume(&bytes).unwrap();
        assert_eq!(back.replay_next(), Some(vec![b"a".to_vec(), Vec::new()]));
        back.end_setup();
        assert_eq!(back.replay_next(), None);
        assert_eq!(back.encode(), bytes, "the record stays for the next checkpoint");
        assert!(Journal::resume(&bytes[..bytes.len() - 1]).is_err());
        assert!(Journal::resume(&[]).is_err());
    }
}
