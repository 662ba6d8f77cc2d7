//! The out-of-band collective the logging protocols run over, as UCC takes its oob callbacks:
//! an all-gather among every rank of the job, a barrier, and the all-gather that opens a
//! recovery, which must look past ranks still in their final barrier. The transport's
//! bootstraps provide it (the impl below, over any `dyn Bootstrap`); the rest of the logger names nothing else of
//! the bootstrap module.

use reverb_transport::{Bootstrap, TransportError};

/// Collectives among every rank of the job, outside the provider.
pub trait OobCollective {
    /// Every rank contributes `data`; all receive every contribution, indexed by rank.
    fn oob_allgather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>, TransportError>;

    /// Returns once every rank has entered it.
    fn oob_barrier(&mut self) -> Result<(), TransportError>;

    /// [`OobCollective::oob_allgather`] for the first collective of a recovery (survivors and
    /// restarted ranks): a round that met ranks in their final barrier is repeated, as those
    /// ranks learn of the recovery from it and join the next one.
    fn allgather_past_final_barrier(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>, TransportError>;
}

impl OobCollective for dyn Bootstrap + '_ {
    fn oob_allgather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>, TransportError> {
        self.allgather(data)
    }

    fn oob_barrier(&mut self) -> Result<(), TransportError> {
        self.barrier()
    }

    fn allgather_past_final_barrier(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>, TransportError> {
        reverb_transport::bootstrap::allgather_past_final_barrier(self, data)
    }
}
