//! Persistent collectives (MPI 4's `MPI_*_init`): each start runs the blocking collective as
//! a nonblocking one (icoll.rs), under the tag sequence number its `_init` drew. The
//! arguments are kept as given: MPI requires the buffers and count arrays to stay valid and
//! unchanged until the request is freed.

use std::ffi::c_int;
use std::rc::Rc;

use crate::ffi::Out;
use crate::persistent::persistent;
use crate::request::{CollRun, PersistentOp};

/// A persistent request over `comm` whose start runs `run`.
pub(crate) fn coll_init(
    function: &str,
    comm: c_int,
    request: Out<'_, c_int>,
    run: impl Fn() -> c_int + 'static,
) -> c_int {
    persistent(
        function,
        comm,
        |s| Ok(PersistentOp::Coll(CollRun { run: Rc::new(run), seq: s.next_coll_seq(comm, true)? })),
        request,
    )
}
