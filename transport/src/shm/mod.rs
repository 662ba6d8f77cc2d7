//! Shared-memory provider (being written).
use std::collections::VecDeque;
use std::time::Duration;

use crate::api::*;
use crate::bootstrap::Bootstrap;
use crate::config::TransportConfig;
use crate::error::{Result, TransportError};
use crate::region::Region;

pub struct ShmProvider {
    config: TransportConfig,
    cq: VecDeque<Completion>,
}

impl ShmProvider {
    pub fn open(_config: TransportConfig, _boot: &mut dyn Bootstrap) -> Result<Self> {
        Err(TransportError::Unavailable("shm", "not built yet".into()))
    }
}

impl Provider for ShmProvider {
    fn kind(&self) -> ProviderKind { ProviderKind::Shm }
    fn capabilities(&self) -> Capabilities { Capabilities::default() }
    fn rank(&self) -> Rank { 0 }
    fn size(&self) -> u32 { 0 }
    fn config(&self) -> &TransportConfig { &self.config }
    fn alloc_region(&mut self, _len: usize, _access: Access) -> Result<Region> { Err(TransportError::Unavailable("shm", "wip".into())) }
    fn put(&mut self, _rma: Rma<'_>, _signal: Signal) -> Result<OpId> { Err(TransportError::Unavailable("shm", "wip".into())) }
    fn put_imm(&mut self, _rma: Rma<'_>, _imm: u32, _signal: Signal) -> Result<OpId> { Err(TransportError::Unavailable("shm", "wip".into())) }
    fn get(&mut self, _rma: Rma<'_>, _signal: Signal) -> Result<OpId> { Err(TransportError::Unavailable("shm", "wip".into())) }
    fn send(&mut self, _d: Rank, _t: Tag, _data: &[u8]) -> Result<OpId> { Err(TransportError::Unavailable("shm", "wip".into())) }
    fn send_region(&mut self, _d: Rank, _t: Tag, _r: &Region, _o: usize, _l: usize) -> Result<OpId> { Err(TransportError::Unavailable("shm", "wip".into())) }
    fn post_recv(&mut self, _s: Source, _t: TagMatch, _b: RecvBuffer) -> Result<OpId> { Err(TransportError::Unavailable("shm", "wip".into())) }
    fn peer_state(&self, _peer: Rank) -> PeerState { PeerState::Dead }
    fn progress(&mut self) -> Result<()> { Ok(()) }
    fn block(&mut self, timeout: Duration) -> Result<()> { std::thread::sleep(timeout); Ok(()) }
    fn completions(&mut self) -> &mut VecDeque<Completion> { &mut self.cq }
}
