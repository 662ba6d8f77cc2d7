//! A provider lent to a constructor that takes it by value and may fail.
//!
//! `LoggedEndpoint::new` owns the provider it is given and drops it when one of its
//! collectives fails. A peer dying inside `Runtime::init` is recoverable, and the survivors
//! need their provider for it (it is connected to everyone; a fresh one could not be). So
//! the runtime hands the constructor a [`Lent`] wrapper: if the constructor drops it, the
//! provider goes back to the [`Home`] it came from. On success the endpoint keeps the
//! wrapper, which forwards every call (one extra indirect call per operation).

use std::collections::VecDeque;
use std::mem::ManuallyDrop;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use reverb_transport::{
    Access, Capabilities, Completion, OpId, PeerState, Provider, ProviderKind, Rank, RecvBuffer, Region,
    Result, Rma, Signal, Source, Tag, TagMatch, TransportConfig,
};

/// Where a [`Lent`] provider returns when the wrapper is dropped.
pub(crate) struct Home(Arc<Mutex<Option<Box<dyn Provider>>>>);

impl Home {
    /// The provider, if the wrapper it was lent in has been dropped.
    pub(crate) fn take_back(&self) -> Option<Box<dyn Provider>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }
}

pub(crate) struct Lent {
    /// Always set until `drop`, which moves it home.
    inner: ManuallyDrop<Box<dyn Provider>>,
    home: Arc<Mutex<Option<Box<dyn Provider>>>>,
}

/// Lends `provider`: the wrapper to pass on, and the home it returns to when dropped.
pub(crate) fn lend(provider: Box<dyn Provider>) -> (Lent, Home) {
    let home = Arc::new(Mutex::new(None));
    (Lent { inner: ManuallyDrop::new(provider), home: home.clone() }, Home(home))
}

impl Drop for Lent {
    fn drop(&mut self) {
        // SAFETY: `inner` is taken exactly once, here, and `self` is not used afterwards.
        let inner = unsafe { ManuallyDrop::take(&mut self.inner) };
        *self.home.lock().unwrap_or_else(PoisonError::into_inner) = Some(inner);
    }
}

impl Provider for Lent {
    fn kind(&self) -> ProviderKind {
        self.inner.kind()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn rank(&self) -> Rank {
        self.inner.rank()
    }
    fn size(&self) -> u32 {
        self.inner.size()
    }
    fn config(&self) -> &TransportConfig {
        self.inner.config()
    }
    fn alloc_region(&mut self, len: usize, access: Access) -> Result<Region> {
        self.inner.alloc_region(len, access)
    }
    fn put(&mut self, rma: Rma<'_>, signal: Signal) -> Result<OpId> {
        self.inner.put(rma, signal)
    }
    fn put_imm(&mut self, rma: Rma<'_>, imm: u32, signal: Signal) -> Result<OpId> {
        self.inner.put_imm(rma, imm, signal)
    }
    fn get(&mut self, rma: Rma<'_>, signal: Signal) -> Result<OpId> {
        self.inner.get(rma, signal)
    }
    fn send(&mut self, dest: Rank, tag: Tag, data: &[u8]) -> Result<OpId> {
        self.inner.send(dest, tag, data)
    }
    fn send_region(
        &mut self,
        dest: Rank,
        tag: Tag,
        region: &Region,
        offset: usize,
        len: usize,
    ) -> Result<OpId> {
        self.inner.send_region(dest, tag, region, offset, len)
    }
    fn post_recv(&mut self, source: Source, tag: TagMatch, buffer: RecvBuffer) -> Result<OpId> {
        self.inner.post_recv(source, tag, buffer)
    }
    fn peer_state(&self, peer: Rank) -> PeerState {
        self.inner.peer_state(peer)
    }
    fn peer_incarnation(&self, peer: Rank) -> Option<u32> {
        self.inner.peer_incarnation(peer)
    }
    fn reconnect(&mut self, peer: Rank, incarnation: u32, address: &[u8]) -> Result<()> {
        self.inner.reconnect(peer, incarnation, address)
    }
    fn progress(&mut self) -> Result<()> {
        self.inner.progress()
    }
    fn block(&mut self, timeout: Duration) -> Result<()> {
        self.inner.block(timeout)
    }
    fn completions(&mut self) -> &mut VecDeque<Completion> {
        self.inner.completions()
    }
    fn poll(&mut self, out: &mut Vec<Completion>) -> Result<usize> {
        self.inner.poll(out)
    }
    fn wait(&mut self, out: &mut Vec<Completion>, timeout: Duration) -> Result<usize> {
        self.inner.wait(out, timeout)
    }
    fn wait_op(&mut self, op: OpId, timeout: Duration) -> Result<Completion> {
        self.inner.wait_op(op, timeout)
    }
    fn wait_until(
        &mut self,
        timeout: Duration,
        ready: &mut dyn FnMut(&VecDeque<Completion>) -> bool,
    ) -> Result<()> {
        self.inner.wait_until(timeout, ready)
    }
}
