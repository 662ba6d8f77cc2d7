//! The library's state (one per process, held by the thread that initialized MPI: reverb
//! provides `MPI_THREAD_FUNNELED`), the handle tables, and `call`, the frame of every MPI
//! function: state in, errors through the communicator's error handler out.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, Ordering};

use reverb_runtime::Runtime;

use crate::abi::*;
use crate::comm::Comm;
use crate::datatype::Datatype;
use crate::errors::{self, MpiError, MpiResult};
use crate::op::UserOp;
use crate::request::{PostedQueue, Requests};

/// Set by MPI_Init, never cleared (MPI_Initialized stays true after MPI_Finalize).
pub static INITIALIZED: AtomicBool = AtomicBool::new(false);
pub static FINALIZED: AtomicBool = AtomicBool::new(false);

/// Objects named by integer handles, numbered from a kind's base.
pub struct Handles<T> {
    base: i32,
    next: i32,
    pub items: BTreeMap<c_int, T>,
    /// Freed handles to give out again, last freed first; `None` where a kind never reuses.
    free: Option<Vec<c_int>>,
}

impl<T> Handles<T> {
    pub fn new(base: u32) -> Handles<T> {
        Handles { base: base as i32, next: 0, items: BTreeMap::new(), free: None }
    }

    /// A table that gives freed handles out again, as MPICH does for datatypes (programs,
    /// MPICH's own tests among them, keep a freed datatype's handle in an array and find the
    /// next one made under it).
    pub fn reusing(base: u32) -> Handles<T> {
        Handles { free: Some(Vec::new()), ..Handles::new(base) }
    }

    pub fn insert(&mut self, item: T) -> c_int {
        let reused = self
            .free
            .as_mut()
            .and_then(|free| std::iter::from_fn(|| free.pop()).find(|h| !self.items.contains_key(h)));
        let h = reused.unwrap_or_else(|| {
            self.next += 1;
            self.base.wrapping_add(self.next - 1)
        });
        self.items.insert(h, item);
        h
    }

    /// The handle `insert` gives next when none is reused.
    pub fn next_handle(&self) -> c_int {
        self.base.wrapping_add(self.next)
    }

    /// Gives out no new handle below `h` (a restored rank's windows keep their first-run
    /// numbers).
    pub fn skip_to(&mut self, h: c_int) {
        self.next = self.next.max(h.wrapping_sub(self.base));
    }

    pub fn insert_at(&mut self, handle: c_int, item: T) {
        self.items.insert(handle, item);
    }

    pub fn get(&self, h: c_int) -> Option<&T> {
        self.items.get(&h)
    }

    pub fn get_mut(&mut self, h: c_int) -> Option<&mut T> {
        self.items.get_mut(&h)
    }

    pub fn remove(&mut self, h: c_int) -> Option<T> {
        let item = self.items.remove(&h)?;
        if let Some(free) = self.free.as_mut() {
            free.push(h);
        }
        Some(item)
    }
}

/// Handle bases of objects the program creates (kinds beyond mpi.h's predefined ones).
pub const COMM_BASE: u32 = 0xc400_0000;
pub const TYPE_BASE: u32 = 0xcc00_0000;
pub const OP_BASE: u32 = 0xd800_0000;
pub const REQUEST_BASE: u32 = 0xec00_0000;
pub const MESSAGE_BASE: u32 = 0xf000_0000;
pub const GROUP_BASE: u32 = 0xc800_0000;

pub struct State {
    pub rt: Runtime,
    pub comms: Handles<Comm>,
    pub types: Handles<Datatype>,
    pub ops: Handles<UserOp>,
    pub requests: Requests,
    /// Receive requests not yet matched, in the order posted (MPI's matching order).
    pub pending_recvs: PostedQueue,
    /// Lent sends not known to have left: LentSend requests, and those the program freed
    /// (`freed_lent`), whose bytes must still leave before the runtime stops.
    pub lent_sends: usize,
    /// Synchronous sends started and not seen acknowledged: while 0, progress skips looking
    /// for their acknowledgements (an upper bound: a freed one is dropped at the next look).
    pub sync_sends: usize,
    /// Synchronous sends started so far (`PendingSync::started`).
    pub syncs_started: u64,
    /// Whether calls tick (`tick_once`): under a logging protocol, and at a rank restored
    /// from a checkpoint only once its setup is over (the checkpoint counted the setup's).
    pub ticks_on: bool,
    /// Whether the call under way ticked already.
    pub ticked: bool,
    pub freed_lent: Vec<reverb_transport::OpId>,
    /// The next context id this rank may give a new communicator (agreed collectively).
    pub next_context: u32,
    /// MPI_Buffer_attach's buffer (sends are buffered by the runtime; kept for detach).
    pub attached: Option<(usize, c_int)>,
    /// Groups: world ranks in group order (MPI_GROUP_EMPTY is predefined).
    pub groups: Handles<Vec<u32>>,
    /// Attribute keys (MPI_Comm_create_keyval) and the values set on communicators.
    pub keyvals: crate::attr::Keyvals,
    /// Messages taken by matched probes, until MPI_Mrecv.
    pub messages: Handles<crate::mprobe::Taken>,
    /// MPIX_Reverb_protect's regions by id: (address, bytes), copied at each checkpoint.
    pub protected: BTreeMap<u32, (usize, usize)>,
    /// The Cartesian grids of communicators that have one (MPI_Cart_create, MPI_Cart_sub).
    pub carts: BTreeMap<c_int, crate::topo::Cart>,
    /// What made each derived datatype, and the names programs gave datatypes.
    pub type_contents: BTreeMap<c_int, crate::type_contents::Contents>,
    pub type_names: BTreeMap<c_int, String>,
    /// Datatype keyvals and the attributes set on datatypes.
    pub type_attrs: crate::attr::Keyvals,
    /// `MPI_Type_create_f90_*`'s types by (combiner, arguments).
    pub f90_types: BTreeMap<(c_int, Vec<c_int>), c_int>,
    /// The graph and distributed-graph topologies of communicators that have one.
    pub graphs: BTreeMap<c_int, crate::graph::Graph>,
    /// Communicator creations' all-gathers, kept with every checkpoint.
    pub journal: crate::journal::Journal,
    /// One-sided windows (`rma`); while any exists, every wait serves them.
    pub wins: Handles<crate::rma::Win>,
    /// Nonblocking collectives started and not finished, in start order (`icoll`).
    pub colls: VecDeque<crate::icoll::Started>,
    /// The tag sequence number of the nonblocking collective running now (0: a blocking one).
    pub coll_seq: u32,
    /// The next nonblocking (true: persistent) collective's sequence number on each context.
    pub coll_seqs: BTreeMap<(u32, bool), u32>,
    /// A collective's scratch bytes, kept between calls: a buffer of a MiB allocated per
    /// call would come back as fresh pages, each faulted in.
    pub coll_scratch: Vec<u8>,
}

thread_local! {
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
}

pub fn install(state: State) {
    STATE.with(|s| *s.borrow_mut() = Some(state));
}

pub fn take() -> Option<State> {
    STATE.with(|s| s.borrow_mut().take())
}

fn not_ready() -> MpiError {
    let why = if FINALIZED.load(Ordering::SeqCst) {
        "MPI was finalized"
    } else if INITIALIZED.load(Ordering::SeqCst) {
        "called from a thread other than the one that initialized MPI (reverb provides MPI_THREAD_FUNNELED)"
    } else {
        "MPI is not initialized (mpi_init first)"
    };
    MpiError::new(MPI_ERR_OTHER, why)
}

/// Runs `body` on the state; its error goes to the error handler of `comm` (or of
/// MPI_COMM_WORLD if `comm` is not one), outside the state's borrow.
pub fn call(function: &str, comm: c_int, body: impl FnOnce(&mut State) -> MpiResult<()>) -> c_int {
    call_on(function, comm, None, body)
}

/// As [`call`]; a program's error handler is called with `object` (a window's handle, whose
/// handler its private communicator holds) instead of `comm`.
pub fn call_on(
    function: &str,
    comm: c_int,
    object: Option<c_int>,
    body: impl FnOnce(&mut State) -> MpiResult<()>,
) -> c_int {
    call_resolved(function, comm, |_| (comm, object), body)
}

/// As [`call_on`], the communicator and object found on the state by `resolve` (a window's,
/// from its handle), only once `body` failed: one borrow of the state per call and no lookup
/// on success. `fallback` is the communicator for an error with no state to look in.
pub fn call_resolved(
    function: &str,
    fallback: c_int,
    resolve: impl Fn(&State) -> (c_int, Option<c_int>),
    body: impl FnOnce(&mut State) -> MpiResult<()>,
) -> c_int {
    let mut body = Some(body);
    let mut run = |state: &mut State, outermost: bool| {
        if outermost {
            state.ticked = false;
        }
        let mut result = body.take().map_or(Ok(()), |b| b(state));
        if outermost && result.is_ok() {
            result = state.settle_call();
        }
        if result.is_ok() {
            return (result, (MPI_ERRORS_ARE_FATAL, fallback), None);
        }
        let (comm, object) = resolve(state);
        let errhandler = errhandler_of(state, &result, comm);
        (result, errhandler, object)
    };
    // The state borrowed already: this call runs inside another, in a nonblocking
    // collective's coroutine (the state is lent to it, coro.rs) or in a program's callback
    // (None).
    let outcome = STATE.with(|s| {
        let mut s = s.try_borrow_mut().ok()?;
        Some(match s.as_mut() {
            Some(state) => run(state, true),
            None => (Err(not_ready()), (MPI_ERRORS_ARE_FATAL, fallback), None),
        })
    });
    let outcome = match outcome {
        Some(done) => Some(done),
        None => crate::coro::with_lent(|state| run(state, false)).and_then(Result::ok),
    };
    let (result, errhandler, object) = outcome.unwrap_or_else(|| {
        let why =
            "called from a callback inside another MPI call (reverb supports only the status setters there)";
        (Err(MpiError::new(MPI_ERR_OTHER, why)), (MPI_ERRORS_ARE_FATAL, fallback), None)
    });
    match result {
        Ok(()) => MPI_SUCCESS,
        Err(e) => errors::handle_on(errhandler.0, object.unwrap_or(errhandler.1), function, e),
    }
}

/// The error handler (and the communicator it is called on) for a call's `result`: looked up
/// only for an error, the success path being every call's.
fn errhandler_of(state: &State, result: &MpiResult<()>, comm: c_int) -> (c_int, c_int) {
    match result {
        Ok(()) => (MPI_ERRORS_ARE_FATAL, comm),
        Err(_) => match state.comms.get(comm) {
            Some(c) => (c.errhandler, comm),
            None => (
                state.comms.get(MPI_COMM_WORLD).map_or(MPI_ERRORS_ARE_FATAL, |c| c.errhandler),
                MPI_COMM_WORLD,
            ),
        },
    }
}

thread_local! {
    /// The datatype a program's reduction function is running on (handle, type): what a
    /// query from inside the function can see while the state is borrowed.
    static CALLBACK_TYPE: RefCell<Option<(c_int, Datatype)>> = const { RefCell::new(None) };
}

/// Runs `f` (a program's callback on datatype `h`) with `h` visible to `datatype_anywhere`.
pub fn with_callback_type<R>(h: c_int, t: &Datatype, f: impl FnOnce() -> R) -> R {
    let before = CALLBACK_TYPE.with(|c| c.replace(Some((h, t.clone()))));
    let result = f();
    CALLBACK_TYPE.with(|c| *c.borrow_mut() = before);
    result
}

/// A datatype from anywhere, a callback inside an MPI call included: the state's when it is
/// free, else the predefined ones and the type the running callback works on.
pub fn datatype_anywhere(h: c_int) -> MpiResult<Datatype> {
    let derived = STATE.with(|s| match s.try_borrow() {
        Ok(state) => state.as_ref().and_then(|st| st.types.get(h).cloned()),
        Err(_) => {
            CALLBACK_TYPE.with(|c| c.borrow().as_ref().filter(|(ch, _)| *ch == h).map(|(_, t)| t.clone()))
        }
    });
    derived
        .or_else(|| Datatype::builtin(h))
        .ok_or_else(|| MpiError::new(MPI_ERR_TYPE, format!("invalid datatype {h:#x}")))
}

/// MPI_COMM_WORLD's error handler, where the state can be read (fatal otherwise: before
/// `MPI_Init`, after `MPI_Finalize`, inside a callback).
pub fn world_errhandler() -> c_int {
    let h = STATE.with(|s| match s.try_borrow() {
        Ok(state) => state.as_ref().and_then(|st| st.comms.get(MPI_COMM_WORLD)).map(|c| c.errhandler),
        Err(_) => None,
    });
    h.unwrap_or(MPI_ERRORS_ARE_FATAL)
}

/// A query on datatype `h` that works inside a program's callback too (MPI_Type_size,
/// MPI_Type_get_extent, ... from a reduction function): MPI_COMM_WORLD's error handler.
pub fn query_type(function: &str, h: c_int, body: impl FnOnce(&Datatype) -> MpiResult<()>) -> c_int {
    match datatype_anywhere(h).and_then(|t| body(&t)) {
        Ok(()) => MPI_SUCCESS,
        Err(e) => errors::handle(world_errhandler(), function, e),
    }
}

impl State {
    pub fn group(&self, h: c_int) -> MpiResult<&Vec<u32>> {
        self.groups.get(h).ok_or_else(|| MpiError::new(MPI_ERR_GROUP, format!("invalid group {h:#x}")))
    }

    pub fn comm(&self, h: c_int) -> MpiResult<&Comm> {
        self.comms.get(h).ok_or_else(|| MpiError::new(MPI_ERR_COMM, format!("invalid communicator {h:#x}")))
    }

    pub fn comm_mut(&mut self, h: c_int) -> MpiResult<&mut Comm> {
        self.comms
            .get_mut(h)
            .ok_or_else(|| MpiError::new(MPI_ERR_COMM, format!("invalid communicator {h:#x}")))
    }

    pub fn datatype(&self, h: c_int) -> MpiResult<Datatype> {
        // Predefined first: built from the handle, no map lookup (the per-message case).
        if let Some(t) = Datatype::builtin(h) {
            return Ok(t);
        }
        let t = self.types.get(h).cloned();
        t.ok_or_else(|| MpiError::new(MPI_ERR_TYPE, format!("invalid datatype {h:#x}")))
    }
}
