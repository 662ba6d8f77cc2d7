//! A [`Bootstrap`] that stamps when each collective was entered and left, so the driver can
//! split a rank's wait into waiting for the slowest rank and the rendezvous's own time.

use std::net::IpAddr;
use std::time::Duration;

use reverb_transport::bootstrap::{PeerAddress, Rejoin};
use reverb_transport::{Bootstrap, JobInfo, Result};

use super::rank::now_ns;

/// Forwards to `inner`; `rounds` gets (entered, left) in Unix nanoseconds per collective.
pub struct Timed<'a> {
    pub inner: &'a mut dyn Bootstrap,
    pub rounds: Vec<(u64, u64)>,
}

impl Bootstrap for Timed<'_> {
    fn job(&self) -> &JobInfo {
        self.inner.job()
    }
    fn local_ip(&self) -> Option<IpAddr> {
        self.inner.local_ip()
    }
    fn allgather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>> {
        let entered = now_ns();
        let r = self.inner.allgather(data);
        self.rounds.push((entered, now_ns()));
        r
    }
    fn barrier(&mut self) -> Result<()> {
        let entered = now_ns();
        let r = self.inner.barrier();
        self.rounds.push((entered, now_ns()));
        r
    }
    fn publish(&mut self, address: &[u8]) -> Result<()> {
        self.inner.publish(address)
    }
    fn lookup(&mut self) -> Result<Vec<PeerAddress>> {
        self.inner.lookup()
    }
    fn poll_rejoins(&mut self) -> Result<Vec<Rejoin>> {
        self.inner.poll_rejoins()
    }
    fn wait_rejoin(&mut self, rank: u32, timeout: Duration) -> Result<Rejoin> {
        self.inner.wait_rejoin(rank, timeout)
    }
}
