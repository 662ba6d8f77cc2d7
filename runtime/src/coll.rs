//! The runtime's collectives over its logged point-to-point messages: a binomial broadcast,
//! whose payload is logged once at its root under collective-aware logging
//! (`REVERB_LOG_CAML`), and an all-reduce (a binomial sum to rank 0, then that broadcast),
//! whose contributions to other parents are logged only until the sum is known.
//! The trees are fixed and the sums add in one order, so a recovered run's answer is
//! bit-identical.

use reverb_transport::{Rank, Tag};

use super::error::{Result, RuntimeError};
use super::{McastKey, Runtime};

impl Runtime {
    /// Broadcasts `data` from `root` to every rank under application tag `tag` (every rank
    /// calls it with the same root and tag); each returns the root's bytes.
    pub fn broadcast(&mut self, root: Rank, tag: Tag, data: &[u8]) -> Result<Vec<u8>> {
        let (n, me) = (self.size(), self.rank());
        if root >= n {
            return Err(RuntimeError::InvalidArgument(format!("broadcast root {root} in a job of {n}")));
        }
        // Under CAML the bytes travel behind their multicast key, which forwarders pass on.
        let keyed = self.caml();
        let mut msg = Vec::new();
        if me == root {
            if let Some(key) = self.multicast_key(1)?.filter(|_| keyed) {
                msg.extend_from_slice(&key.to_bytes());
            }
            msg.extend_from_slice(data);
        }
        let vr = (me + n - root) % n;
        let mut mask = 1;
        while mask < n {
            if vr & mask != 0 {
                msg = self.recv_from((vr - mask + root) % n, tag)?.payload.into_vec();
                break;
            }
            mask <<= 1;
        }
        let key = match keyed {
            true => Some(McastKey::from_bytes(&msg).map_err(|e| {
                RuntimeError::InvalidArgument(format!("a broadcast without its multicast key: {e}"))
            })?),
            false => None,
        };
        mask >>= 1;
        while mask > 0 {
            if vr + mask < n {
                let to = (vr + mask + root) % n;
                match key {
                    Some(key) => self.send_multicast(to, tag, &msg, key)?,
                    None => self.send(to, tag, &msg)?,
                }
            }
            mask >>= 1;
        }
        if keyed {
            msg.drain(..McastKey::WIRE_LEN);
        }
        Ok(msg)
    }

    /// Sums `mine` element-wise over every rank (each calls it with as many values) and
    /// returns the sum at every rank: a binomial reduction to rank 0 under `tag`, lower ranks'
    /// partial sums on the left, then `broadcast` from rank 0. Under collective-aware logging
    /// a contribution to a parent other than rank 0 leaves the send log once the sum is here
    /// ([`crate::Contributions`]).
    pub fn allreduce_sum(&mut self, tag: Tag, mine: &[f64]) -> Result<Vec<f64>> {
        let (n, me) = (self.size(), self.rank());
        let mut c = self.begin_reduction(0);
        let mut acc = mine.to_vec();
        let mut mask = 1;
        while mask < n {
            if me & mask != 0 {
                let payload = c.payload(&f64_bytes(&acc));
                self.send_contribution(&mut c, me & !mask, |rt| rt.send(me & !mask, tag, &payload))?;
                break;
            }
            if me | mask < n {
                let got = self.recv_from(me | mask, tag)?;
                if let Some(bytes) = c.take(me | mask, &got.payload)? {
                    let theirs = f64s(bytes, acc.len(), me | mask)?;
                    acc.iter_mut().zip(theirs).for_each(|(a, t)| *a += t);
                }
            }
            mask <<= 1;
        }
        let sum = self.broadcast(0, tag, &f64_bytes(&acc))?;
        self.end_reduction(c)?;
        f64s(&sum, mine.len(), 0)
    }
}

fn f64_bytes(values: &[f64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// `count` f64s from `bytes` that rank `from` sent: a length that does not match is an error.
fn f64s(bytes: &[u8], count: usize, from: Rank) -> Result<Vec<f64>> {
    if bytes.len() != count * 8 {
        return Err(RuntimeError::InvalidArgument(format!(
            "all-reduce: {} bytes from rank {from}, expected {count} values",
            bytes.len()
        )));
    }
    Ok(bytes.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap_or_default())).collect())
}
