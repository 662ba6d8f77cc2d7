//! Collectives over the runtime's logged point-to-point messages, on each communicator's
//! collective context (apart from its point-to-point traffic). Which algorithm runs is a pure
//! function of the operation, its size and the communicator's size (`tuning`), and each
//! algorithm combines a reduction's operands in one fixed order, so every rank, every run and
//! a recovered rank's replay compute the same bits.
//!
//! Files: `tuning` (the choice), `group` (a communicator's members, their messages, the
//! barrier), `frame` (framing and chunking), the algorithms (`bcast`, `reduce`, `allgather`,
//! `alltoall`), and the C entry points (`api`, `api_gather`, `alltoall`; `large`: the `_c`
//! forms).

use std::ffi::c_int;

use crate::abi::*;
use crate::errors::{MpiError, MpiResult};
use crate::ffi::UserBuf;

mod allgather;
pub(crate) mod alltoall;
pub(crate) mod api;
pub(crate) mod api_gather;
mod bcast;
mod frame;
mod group;
pub(crate) mod large;
mod reduce;
mod tuning;

pub use self::allgather::allgather_bytes;
pub(crate) use self::allgather::{allgather, allgather_blocks, allgather_in_place, gather};
pub(crate) use self::api_gather::*;
pub(crate) use self::bcast::{bcast, bcast_in_place, bcast_sized};
pub(crate) use self::frame::{frame, unframe};
pub(crate) use self::group::{barrier, coll_recv, Group};
pub(crate) use self::reduce::{
    allreduce, allreduce_in_place, allreduce_runs_in_place, reduce, reduce_in_place, reduce_runs_in_place,
    ReduceAt, Reduction,
};

pub(crate) fn count_of(count: c_int) -> MpiResult<usize> {
    usize::try_from(count).map_err(|_| MpiError::new(MPI_ERR_COUNT, format!("count {count}")))
}

pub(crate) fn in_place(p: UserBuf) -> bool {
    p.is_in_place()
}
