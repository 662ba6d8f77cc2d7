//! Start and end: MPI_Init joins the job through reverb's runtime (as `reverb run --mpi` set
//! it up), MPI_Finalize leaves it; the environment queries.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::{c_char, c_double, c_int};
use std::sync::atomic::Ordering;

use reverb_runtime::Runtime;

use crate::abi::*;
use crate::comm::Comm;
use crate::errors::{self, MpiError, MpiResult};
use crate::ffi;
use crate::ffi::Out;
use crate::journal::{Journal, JOURNAL_ENTRY};
use crate::p2p::TAG_UB;
use crate::request::{PostedQueue, Requests};
use crate::state::{self, call, Handles, State, FINALIZED, INITIALIZED};

/// Context ids of the predefined communicators; created ones start after them.
const WORLD_CONTEXT: u32 = 1;
const SELF_CONTEXT: u32 = 2;
const FIRST_CONTEXT: u32 = 3;

/// At a restarted rank, the communicator journal of the checkpoint it restored.
fn restored_journal(rt: &mut Runtime) -> MpiResult<Journal> {
    match rt.restored(JOURNAL_ENTRY) {
        Some(bytes) => Journal::resume(&bytes),
        None => Ok(Journal::default()),
    }
}

fn init() -> c_int {
    if INITIALIZED.load(Ordering::SeqCst) {
        return errors::handle(
            MPI_ERRORS_ARE_FATAL,
            "MPI_Init",
            MpiError::new(MPI_ERR_OTHER, "MPI is already initialized"),
        );
    }
    let mut rt = match Runtime::init() {
        Ok(rt) => rt,
        Err(e) => {
            // A lost job is not a launch mistake: no hint after it.
            let lost = matches!(e, reverb_runtime::RuntimeError::Unrecoverable(_));
            let e = MpiError::from(e);
            let hint =
                if lost { "" } else { "; MPI programs run under `reverb run --mpi -n N -- ./program`" };
            return errors::handle(
                MPI_ERRORS_ARE_FATAL,
                "MPI_Init",
                MpiError::new(e.class, e.into_message() + hint),
            );
        }
    };
    // Receives outstanding together take arrivals in arrival order: logged by default, the
    // runtime's blocking receive with nothing else outstanding excepted (`State::receive`).
    rt.set_order_logged(true);
    let (me, size) = (rt.rank(), rt.size());
    // A rank restored from a checkpoint re-executes its setup answered from the journal, which
    // the checkpoint's rsn counted: its calls tick from `MPIX_Reverb_restore` on.
    let from_checkpoint = rt.restarted() && rt.report().restored_epoch > 0;
    let ticks_on = rt.logging() && !from_checkpoint;
    let journal = match restored_journal(&mut rt) {
        Ok(j) => j,
        Err(e) => return errors::handle(MPI_ERRORS_ARE_FATAL, "MPI_Init", e),
    };
    let mut comms = Handles::new(state::COMM_BASE);
    let comm = |context, ranks: Vec<u32>, me, name: &str| Comm {
        context,
        ranks,
        me,
        errhandler: MPI_ERRORS_ARE_FATAL,
        name: name.into(),
        remote: None,
    };
    comms.insert_at(MPI_COMM_WORLD, comm(WORLD_CONTEXT, (0..size).collect(), me, "MPI_COMM_WORLD"));
    comms.insert_at(MPI_COMM_SELF, comm(SELF_CONTEXT, vec![me], 0, "MPI_COMM_SELF"));
    state::install(State {
        rt,
        comms,
        types: Handles::reusing(state::TYPE_BASE),
        ops: Handles::new(state::OP_BASE),
        requests: Requests::new(state::REQUEST_BASE),
        pending_recvs: PostedQueue::default(),
        lent_sends: 0,
        sync_sends: 0,
        syncs_started: 0,
        ticks_on,
        ticked: false,
        freed_lent: Vec::new(),
        next_context: FIRST_CONTEXT,
        attached: None,
        messages: Handles::new(state::MESSAGE_BASE),
        groups: {
            let mut g = Handles::new(state::GROUP_BASE);
            g.insert_at(MPI_GROUP_EMPTY, Vec::new());
            g
        },
        keyvals: Default::default(),
        protected: BTreeMap::new(),
        carts: BTreeMap::new(),
        graphs: BTreeMap::new(),
        type_contents: BTreeMap::new(),
        type_names: BTreeMap::new(),
        type_attrs: Default::default(),
        f90_types: BTreeMap::new(),
        journal,
        wins: Handles::new(crate::rma::WIN_BASE),
        colls: VecDeque::new(),
        coll_seq: 0,
        coll_seqs: BTreeMap::new(),
        coll_scratch: Vec::new(),
    });
    INITIALIZED.store(true, Ordering::SeqCst);
    MPI_SUCCESS
}

pub(crate) unsafe fn mpi_init(_argc: Out<'_, c_int>, _argv: Out<'_, *mut *mut c_char>) -> c_int {
    init()
}

/// reverb provides MPI_THREAD_FUNNELED: only the thread that initialized MPI calls it.
pub(crate) unsafe fn mpi_init_thread(
    _argc: Out<'_, c_int>,
    _argv: Out<'_, *mut *mut c_char>,
    required: c_int,
    provided: Out<'_, c_int>,
) -> c_int {
    let rc = init();
    if rc != MPI_SUCCESS {
        return rc;
    }
    let level = required.min(MPI_THREAD_FUNNELED);
    call("MPI_Init_thread", MPI_COMM_WORLD, |_| ffi::out(provided, level, "provided"))
}

pub(crate) unsafe fn mpi_query_thread(provided: Out<'_, c_int>) -> c_int {
    call("MPI_Query_thread", MPI_COMM_WORLD, |_| ffi::out(provided, MPI_THREAD_FUNNELED, "provided"))
}

pub(crate) unsafe fn mpi_is_thread_main(flag: Out<'_, c_int>) -> c_int {
    // The state lives with the thread that initialized MPI: any other finds none.
    let rc = call("MPI_Is_thread_main", MPI_COMM_WORLD, |_| ffi::out(flag, 1, "flag"));
    if rc != MPI_SUCCESS {
        return match ffi::out(flag, 0, "flag") {
            Ok(()) => MPI_SUCCESS,
            Err(e) => e.class,
        };
    }
    rc
}

pub(crate) fn mpi_finalize() -> c_int {
    let rc = call("MPI_Finalize", MPI_COMM_WORLD, |s| {
        // MPI_COMM_SELF's attributes are deleted first (their callbacks run): programs hook
        // their own cleanup there. Then the runtime's collective shutdown.
        s.delete_attributes(MPI_COMM_SELF)?;
        // Collectives started and freed unfinished still owe their peers messages.
        s.finish_colls("MPI_Finalize")?;
        s.progress()?;
        Ok(())
    });
    if rc != MPI_SUCCESS {
        return rc;
    }
    let Some(state) = state::take() else { return MPI_SUCCESS };
    FINALIZED.store(true, Ordering::SeqCst);
    match state.rt.finalize() {
        Ok(_) => MPI_SUCCESS,
        Err(e) => errors::handle(MPI_ERRORS_ARE_FATAL, "MPI_Finalize", e.into()),
    }
}

pub(crate) unsafe fn mpi_initialized(flag: Out<'_, c_int>) -> c_int {
    match ffi::out(flag, c_int::from(INITIALIZED.load(Ordering::SeqCst)), "flag") {
        Ok(()) => MPI_SUCCESS,
        Err(e) => e.class,
    }
}

pub(crate) unsafe fn mpi_finalized(flag: Out<'_, c_int>) -> c_int {
    match ffi::out(flag, c_int::from(FINALIZED.load(Ordering::SeqCst)), "flag") {
        Ok(()) => MPI_SUCCESS,
        Err(e) => e.class,
    }
}

/// Stops the whole job: this rank exits with `errorcode`, and the launcher stops the others.
pub(crate) fn mpi_abort(_comm: c_int, errorcode: c_int) -> c_int {
    eprintln!("reverb MPI: mpi_abort called with error code {errorcode}; stopping the job");
    std::process::exit(if errorcode == 0 { 1 } else { errorcode })
}

pub(crate) fn mpi_wtime() -> c_double {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

pub(crate) fn mpi_wtick() -> c_double {
    1e-9
}

pub(crate) unsafe fn mpi_get_processor_name(name: *mut c_char, len: Out<'_, c_int>) -> c_int {
    let host = rustix::system::uname().nodename().to_string_lossy().into_owned();
    // SAFETY: the program's string buffer has room for the `MPI_MAX_*` bytes given (the contract).
    let r = unsafe { ffi::string_out(name, MPI_MAX_PROCESSOR_NAME as usize, &host) }
        .and_then(|n| ffi::out(len, n, "resultlen"));
    r.map_or_else(|e| e.class, |()| MPI_SUCCESS)
}

pub(crate) unsafe fn mpi_get_version(version: Out<'_, c_int>, subversion: Out<'_, c_int>) -> c_int {
    let r = ffi::out(version, MPI_VERSION, "version")
        .and_then(|()| ffi::out(subversion, MPI_SUBVERSION, "subversion"));
    r.map_or_else(|e| e.class, |()| MPI_SUCCESS)
}

pub(crate) unsafe fn mpi_get_library_version(version: *mut c_char, len: Out<'_, c_int>) -> c_int {
    let text = format!(
        "reverb MPI {} (MPICH 4.0 ABI) on reverb's fault-tolerant runtime",
        env!("CARGO_PKG_VERSION")
    );
    // SAFETY: the program's string buffer has room for the `MPI_MAX_*` bytes given (the contract).
    let r = unsafe { ffi::string_out(version, MPI_MAX_LIBRARY_VERSION_STRING as usize, &text) }
        .and_then(|n| ffi::out(len, n, "resultlen"));
    r.map_or_else(|e| e.class, |()| MPI_SUCCESS)
}

/// Values of the predefined attributes; `MPI_Comm_get_attr` hands out pointers to them.
static TAG_UB_VALUE: c_int = TAG_UB;
static NO_HOST: c_int = MPI_PROC_NULL;
static ANY_IO: c_int = MPI_ANY_SOURCE;
static NOT_GLOBAL: c_int = 0;
static APPNUM: c_int = 0;
/// `MPI_LASTUSEDCODE`: rewritten at each query (the program may add codes).
static LAST_CODE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
static UNIVERSE: std::sync::OnceLock<c_int> = std::sync::OnceLock::new();

/// A predefined attribute (`MPI_TAG_UB`, ...): where C reads it (`MPI_Comm_get_attr` hands
/// out the pointer) and its value now (what Fortran gets); `None` for another keyval.
pub fn predefined_attribute(s: &State, keyval: c_int) -> MpiResult<Option<(*const c_int, c_int)>> {
    let size = s.comm(MPI_COMM_WORLD)?.size() as c_int;
    // Fortran's predefined keyvals (mpif.h) are C's (odd) plus one, as in MPICH.
    let is_fortran = keyval & !0xf == MPI_TAG_UB & !0xf && keyval & 0xf != 0 && keyval & 1 == 0;
    let keyval = if is_fortran { keyval - 1 } else { keyval };
    let fixed = |v: &'static c_int| Some((std::ptr::from_ref(v), *v));
    Ok(match keyval {
        MPI_TAG_UB => fixed(&TAG_UB_VALUE),
        MPI_HOST => fixed(&NO_HOST),
        MPI_IO => fixed(&ANY_IO),
        MPI_WTIME_IS_GLOBAL => fixed(&NOT_GLOBAL),
        MPI_UNIVERSE_SIZE => fixed(UNIVERSE.get_or_init(|| size)),
        MPI_APPNUM => fixed(&APPNUM),
        MPI_LASTUSEDCODE => {
            let code = crate::errhandler::last_used_code();
            LAST_CODE.store(code, Ordering::Relaxed);
            Some((LAST_CODE.as_ptr().cast_const(), code))
        }
        _ => None,
    })
}

pub(crate) unsafe fn mpi_comm_get_attr(
    comm: c_int,
    keyval: c_int,
    value: Out<'_, usize>,
    flag: Out<'_, c_int>,
) -> c_int {
    call("MPI_Comm_get_attr", comm, |s| {
        let found = predefined_attribute(s, keyval)?.map(|(at, _)| at);
        s.comm(comm)?;
        if found.is_none() {
            // A user attribute: `value` receives the pointer stored.
            return match crate::attr::user_attribute(s, comm, keyval, crate::attr::AttrKind::Ptr) {
                Some(v) => {
                    ffi::out(value, v, "attribute_val")?;
                    ffi::out(flag, 1, "flag")
                }
                None => ffi::out(flag, 0, "flag"),
            };
        }
        match found {
            // `value` is a `void **` in C: it receives the pointer.
            Some(p) => {
                ffi::out(value, p as usize, "attribute_val")?;
                ffi::out(flag, 1, "flag")
            }
            None => ffi::out(flag, 0, "flag"),
        }
    })
}

pub(crate) unsafe fn mpi_attr_get(
    comm: c_int,
    keyval: c_int,
    value: Out<'_, usize>,
    flag: Out<'_, c_int>,
) -> c_int {
    // SAFETY: this call's pointer arguments, passed on under the same contract.
    unsafe { mpi_comm_get_attr(comm, keyval, value, flag) }
}
