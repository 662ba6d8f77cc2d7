//! Window objects: creation (`MPI_Win_create`, `_allocate`, `_create_dynamic`), `_free`,
//! the group, the predefined attributes, names, error handlers and info.

use std::collections::{HashMap, VecDeque};
use std::ffi::{c_char, c_int, c_long, c_void};

use crate::abi::*;
use crate::coll::{self, Group};
use crate::errors::{MpiError, MpiResult};
use crate::ffi::{self, Out, UserBuf};
use crate::state::{call, call_resolved, State};

use super::direct::Own;

/// MPI's window flavors and memory model (an enum in mpi.h, not a `#define`).
pub const FLAVOR_CREATE: c_int = 1;
pub const FLAVOR_ALLOCATE: c_int = 2;
pub const FLAVOR_DYNAMIC: c_int = 3;
pub const FLAVOR_SHARED: c_int = 4;
const MODEL_UNIFIED: c_int = 2;

/// What `MPI_Win_get_attr` hands out pointers to: boxed, so they stay put.
pub struct AttrValues {
    size: isize,
    disp_unit: c_int,
    flavor: c_int,
    model: c_int,
}

/// Where a reply's bytes go: a buffer of `count` elements of a datatype.
pub type Landing = (UserBuf, crate::datatype::Datatype, usize);

/// This rank as an origin: its requests waiting for replies and its epochs' state.
#[derive(Default)]
pub struct Origin {
    pub next_id: u64,
    /// Request id -> (target, where its reply's bytes go).
    pub pending: HashMap<u64, (usize, Option<Landing>)>,
    /// Replies still due, per target.
    pub due: Vec<u64>,
    /// Targets whose lock this rank holds (granted).
    pub granted: Vec<bool>,
    /// Of those, the ones locked under `MPI_MODE_NOCHECK`: the target was not asked.
    pub unchecked: Vec<bool>,
    /// And the ones whose lock word this rank took itself (`direct`): exclusive or not.
    pub taken: Vec<Option<bool>>,
    /// Per target: unlocks sent minus releases (`Msg::Unlocked`) taken; an unlock waits for
    /// 0. A replay may take a release before the unlock's (duplicate) send in the same call.
    pub releasing: Vec<i64>,
    /// Posts received and not yet consumed by a start, per target.
    pub posts: Vec<u32>,
    /// The targets of the access epoch MPI_Win_start opened.
    pub access: Vec<usize>,
    /// A request a target refused (out of range, ...): reported at the next call.
    pub refused: Option<MpiError>,
}

/// This rank as a target: its lock and its exposure epoch.
#[derive(Default)]
pub struct Target {
    pub shared: u32,
    pub exclusive: Option<usize>,
    /// Lock requests waiting: (origin, exclusive), in arrival order (`serve::grant_waiting`).
    pub waiting: VecDeque<(usize, bool)>,
    /// Completes received and not consumed by a wait, per origin.
    pub completes: Vec<u32>,
    /// The origins of the exposure epoch MPI_Win_post opened.
    pub exposure: Vec<usize>,
}

pub struct Win {
    /// A private duplicate of the creating communicator: the window's context, members and
    /// error handler.
    pub comm: c_int,
    pub context: u32,
    pub ranks: Vec<u32>,
    pub me: usize,
    pub base: usize,
    pub size: usize,
    /// Every rank's displacement unit: a target displacement counts in the target's.
    pub disp_units: Vec<c_int>,
    pub flavor: c_int,
    /// A dynamic window's attached memory: (address, bytes).
    pub attached: Vec<(usize, usize)>,
    pub name: String,
    pub attrs: Box<AttrValues>,
    pub origin: Origin,
    pub target: Target,
    /// Failures the runtime had recovered from when the window was made (see `check_alive`).
    pub failures_seen: usize,
    /// A shared window's parts in this rank's mapping: (address, bytes) per rank.
    pub shared: Vec<(usize, usize)>,
    /// The provider's one-sided path (`rdma`): before `memory`, so its registration of the
    /// memory goes first.
    pub rdma: Option<super::rdma::Rdma>,
    /// Per rank, its `MPI_Win_create` memory where this rank reaches it by cross-memory attach
    /// (`cross`); empty where none is.
    pub cross: Vec<Option<super::cross::Peer>>,
    /// Memory the window owns (`MPI_Win_allocate`'s, a shared mapping), freed with it.
    memory: Option<Box<dyn std::any::Any>>,
    /// The ranks whose memory this rank maps (`direct`): operations on them apply here.
    pub reach: Vec<Option<super::direct::Reach>>,
}

impl Win {
    pub fn size_of_group(&self) -> usize {
        self.ranks.len()
    }

    /// The window rank of world rank `w`.
    pub fn rank_of_world(&self, w: u32) -> Option<usize> {
        self.ranks.iter().position(|&r| r == w)
    }

    pub fn group(&self) -> Group {
        Group { context: self.context, ranks: self.ranks.clone(), me: self.me, seq: 0 }
    }

    /// Whether no operation of this rank on target `t` is outstanding: no reply due, no
    /// provider operation in flight.
    pub fn idle(&self, t: usize) -> bool {
        self.origin.due[t] == 0 && self.rdma.as_ref().is_none_or(|r| r.due[t] == 0)
    }

    /// [`Win::idle`] for every target.
    pub fn all_idle(&self) -> bool {
        self.origin.due.iter().all(|&d| d == 0) && self.rdma.as_ref().is_none_or(|r| r.idle())
    }

    /// Keeps `memory` until the window is freed.
    pub fn keep(&mut self, memory: Box<dyn std::any::Any>) {
        self.memory = Some(memory);
    }

    pub fn label(&self, h: c_int) -> String {
        if self.name.is_empty() {
            format!("window {h:#x}")
        } else {
            format!("window {h:#x} ('{}')", self.name)
        }
    }
}

impl State {
    #[inline]
    pub fn win(&self, h: c_int) -> MpiResult<&Win> {
        self.wins.get(h).ok_or_else(|| MpiError::new(MPI_ERR_WIN, format!("invalid window {h:#x}")))
    }

    pub fn win_mut(&mut self, h: c_int) -> MpiResult<&mut Win> {
        self.wins.get_mut(h).ok_or_else(|| MpiError::new(MPI_ERR_WIN, format!("invalid window {h:#x}")))
    }
}

/// Runs `body` as `call` does, errors going to the window's error handler.
/// A program's handler is called with the window's handle.
pub fn win_call(function: &str, win: c_int, body: impl FnOnce(&mut State) -> MpiResult<()>) -> c_int {
    let resolve = |s: &State| match s.wins.get(win) {
        Some(w) => (w.comm, Some(win)),
        None => (MPI_COMM_WORLD, None),
    };
    call_resolved(function, MPI_COMM_WORLD, resolve, body)
}

/// The collective part of every creation: a private communicator, then the window.
pub fn create(
    s: &mut State,
    comm: c_int,
    base: usize,
    size: usize,
    disp_unit: c_int,
    flavor: c_int,
) -> MpiResult<c_int> {
    let c = s.comm(comm)?;
    if c.remote.is_some() {
        return Err(MpiError::new(
            MPI_ERR_COMM,
            "windows over an intercommunicator are not supported by reverb",
        ));
    }
    if disp_unit <= 0 {
        return Err(MpiError::new(MPI_ERR_DISP, format!("displacement unit {disp_unit}")));
    }
    refuse_restarted(s, comm, flavor)?;
    let ranks = c.ranks.clone();
    let context = s.new_context(comm)?;
    let wcomm = s.derive(comm, ranks.clone(), context);
    let me = s.comm(wcomm)?.me as usize;
    let units = coll::allgather_bytes(s, wcomm, &disp_unit.to_le_bytes())?;
    let disp_units = units
        .iter()
        .map(|b| b.get(..4).and_then(|b| b.try_into().ok()).map(c_int::from_le_bytes))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| MpiError::new(MPI_ERR_INTERN, "a displacement unit of the wrong size"))?;
    let n = ranks.len();
    let attrs = Box::new(AttrValues { size: size as isize, disp_unit, flavor, model: MODEL_UNIFIED });
    let win = Win {
        comm: wcomm,
        context,
        ranks,
        me,
        base,
        size,
        disp_units,
        flavor,
        attached: Vec::new(),
        name: String::new(),
        attrs,
        origin: Origin {
            due: vec![0; n],
            granted: vec![false; n],
            unchecked: vec![false; n],
            taken: vec![None; n],
            releasing: vec![0; n],
            posts: vec![0; n],
            ..Origin::default()
        },
        target: Target { completes: vec![0; n], ..Target::default() },
        failures_seen: s.rt.report().detected_ns.len(),
        shared: Vec::new(),
        rdma: None,
        cross: Vec::new(),
        memory: None,
        reach: vec![None; n],
    };
    Ok(s.wins.insert(win))
}

/// At a restarted rank, a window that cannot be recovered is refused before its creation
/// communicates (its peers are past it, or it is new and would answer wrongly).
pub fn refuse_restarted(s: &State, comm: c_int, flavor: c_int) -> MpiResult<()> {
    if !s.rt.restarted() || (s.rt.logging() && super::recover::recoverable(flavor)) {
        return Ok(());
    }
    let h = s.wins.next_handle();
    Err(MpiError::new(
        MPI_ERR_UNSUPPORTED_OPERATION,
        format!(
            "window {h:#x} of this rank (on communicator {comm:#x}): windows of {} are not recovered \
             (reverb recovers those of MPI_Win_create and MPI_Win_allocate under a logging protocol), \
             and this rank was restarted after a failure",
            super::recover::flavor_name(flavor)
        ),
    ))
}

fn size_of(size: c_long) -> MpiResult<usize> {
    usize::try_from(size).map_err(|_| MpiError::new(MPI_ERR_SIZE, format!("window size {size}")))
}

pub(crate) unsafe fn mpi_win_create(
    base: UserBuf,
    size: c_long,
    disp_unit: c_int,
    _info: c_int,
    comm: c_int,
    win: Out<'_, c_int>,
) -> c_int {
    call("MPI_Win_create", comm, |s| {
        let size = size_of(size)?;
        let h = create(s, comm, base.addr(), size, disp_unit, FLAVOR_CREATE)?;
        super::cross::connect(s, h)?;
        super::rdma::connect(s, h)?;
        ffi::out(win, h, "win")
    })
}

pub(crate) unsafe fn mpi_win_allocate(
    size: c_long,
    disp_unit: c_int,
    _info: c_int,
    comm: c_int,
    baseptr: Out<'_, *mut c_void>,
    win: Out<'_, c_int>,
) -> c_int {
    call("MPI_Win_allocate", comm, |s| {
        // Under a logging protocol every operation goes by (logged) request: an origin writing
        // into a same-host target's memory itself would leave nothing a replay could repeat.
        let private = s.rt.logging() || !shared_memory()?;
        let memory = match private {
            true => Own::private(size_of(size)?)?,
            false => Own::new(size_of(size)?, s.rt.rank())?,
        };
        let base = memory.base();
        let h = create(s, comm, base, size_of(size)?, disp_unit, FLAVOR_ALLOCATE)?;
        match private {
            true => s.win_mut(h)?.keep(Box::new(memory)),
            false => super::direct::connect(s, h, memory)?,
        }
        super::rdma::connect(s, h)?;
        ffi::out(baseptr, base as *mut c_void, "baseptr")?;
        ffi::out(win, h, "win")
    })
}

/// Whether `MPI_Win_allocate` puts windows in /dev/shm for the ranks on their host to map
/// (`REVERB_MPI_WIN_SHM`, default on).
fn shared_memory() -> MpiResult<bool> {
    let env = reverb_transport::config::Env::process();
    let on = env.bool("REVERB_MPI_WIN_SHM").map_err(|e| MpiError::new(MPI_ERR_ARG, e.to_string()))?;
    Ok(on.unwrap_or(true))
}

pub(crate) unsafe fn mpi_win_create_dynamic(_info: c_int, comm: c_int, win: Out<'_, c_int>) -> c_int {
    call("MPI_Win_create_dynamic", comm, |s| {
        let h = create(s, comm, 0, 0, 1, FLAVOR_DYNAMIC)?;
        ffi::out(win, h, "win")
    })
}

pub(crate) unsafe fn mpi_win_attach(win: c_int, base: UserBuf, size: c_long) -> c_int {
    win_call("MPI_Win_attach", win, |s| {
        let size = size_of(size)?;
        let w = s.win_mut(win)?;
        if w.flavor != FLAVOR_DYNAMIC {
            return Err(MpiError::new(MPI_ERR_RMA_FLAVOR, "MPI_Win_attach on a window that is not dynamic"));
        }
        w.attached.push((base.addr(), size));
        Ok(())
    })
}

pub(crate) unsafe fn mpi_win_detach(win: c_int, base: UserBuf) -> c_int {
    win_call("MPI_Win_detach", win, |s| {
        let w = s.win_mut(win)?;
        let at = w.attached.iter().position(|a| a.0 == base.addr());
        let at =
            at.ok_or_else(|| MpiError::new(MPI_ERR_RMA_ATTACH, "MPI_Win_detach of memory never attached"))?;
        w.attached.remove(at);
        Ok(())
    })
}

/// Collective: every rank's operations complete, then the window goes.
pub(crate) unsafe fn mpi_win_free(win: Out<'_, c_int>) -> c_int {
    let h = ffi::read(win.as_in(), "win").unwrap_or(MPI_WIN_NULL);
    win_call("MPI_Win_free", h, |s| {
        super::sync::settle_all(s, h, "MPI_Win_free")?;
        let g = s.win(h)?.group();
        coll::barrier(s, &g)?;
        let comm = s.win(h)?.comm;
        s.delete_attributes(comm)?;
        let w = s.wins.remove(h).ok_or_else(|| MpiError::new(MPI_ERR_WIN, "window vanished"))?;
        s.comms.remove(w.comm);
        ffi::out(win, MPI_WIN_NULL, "win")
    })
}

pub(crate) unsafe fn mpi_win_get_group(win: c_int, group: Out<'_, c_int>) -> c_int {
    win_call("MPI_Win_get_group", win, |s| {
        let ranks = s.win(win)?.ranks.clone();
        let h = s.groups.insert(ranks);
        ffi::out(group, h, "group")
    })
}

/// The predefined attributes: `MPI_WIN_BASE` is the base itself, the others point to their
/// value.
pub(crate) unsafe fn mpi_win_get_attr(
    win: c_int,
    keyval: c_int,
    value: Out<'_, usize>,
    flag: Out<'_, c_int>,
) -> c_int {
    win_call("MPI_Win_get_attr", win, |s| {
        let w = s.win(win)?;
        let a = &*w.attrs;
        let found = match keyval {
            MPI_WIN_BASE => Some(w.base),
            MPI_WIN_SIZE => Some(std::ptr::from_ref(&a.size) as usize),
            MPI_WIN_DISP_UNIT => Some(std::ptr::from_ref(&a.disp_unit) as usize),
            MPI_WIN_CREATE_FLAVOR => Some(std::ptr::from_ref(&a.flavor) as usize),
            MPI_WIN_MODEL => Some(std::ptr::from_ref(&a.model) as usize),
            _ => crate::attr::user_attribute(s, w.comm, keyval, crate::attr::AttrKind::Ptr),
        };
        match found {
            Some(v) => {
                ffi::out(value, v, "attribute_val")?;
                ffi::out(flag, 1, "flag")
            }
            None => ffi::out(flag, 0, "flag"),
        }
    })
}

pub(crate) unsafe fn mpi_win_set_name(win: c_int, name: *const c_char) -> c_int {
    win_call("MPI_Win_set_name", win, |s| {
        // SAFETY: the contract above.
        let text = unsafe { ffi::string_in(name) }?;
        s.win_mut(win)?.name = text.chars().take(MPI_MAX_OBJECT_NAME as usize - 1).collect();
        Ok(())
    })
}

pub(crate) unsafe fn mpi_win_get_name(win: c_int, name: *mut c_char, len: Out<'_, c_int>) -> c_int {
    win_call("MPI_Win_get_name", win, |s| {
        let text = s.win(win)?.name.clone();
        // SAFETY: the contract above.
        let n = unsafe { ffi::string_out(name, MPI_MAX_OBJECT_NAME as usize, &text) }?;
        ffi::out(len, n, "resultlen")
    })
}

pub(crate) fn mpi_win_set_errhandler(win: c_int, errhandler: c_int) -> c_int {
    win_call("MPI_Win_set_errhandler", win, |s| {
        let comm = s.win(win)?.comm;
        s.comm_mut(comm)?.errhandler = errhandler;
        Ok(())
    })
}

pub(crate) unsafe fn mpi_win_get_errhandler(win: c_int, errhandler: Out<'_, c_int>) -> c_int {
    win_call("MPI_Win_get_errhandler", win, |s| {
        let comm = s.win(win)?.comm;
        ffi::out(errhandler, s.comm(comm)?.errhandler, "errhandler")
    })
}

/// Invokes the window's error handler on `code` as an error in a call on it would; the call
/// itself succeeds (MPI 4.0, 9.3.5) unless the handler stops the job.
pub(crate) fn mpi_win_call_errhandler(win: c_int, code: c_int) -> c_int {
    let mut handler = MPI_ERRORS_ARE_FATAL;
    let rc = win_call("MPI_Win_call_errhandler", win, |s| {
        let comm = s.win(win)?.comm;
        handler = s.comm(comm)?.errhandler;
        Ok(())
    });
    if rc != MPI_SUCCESS {
        return rc;
    }
    crate::errhandler::invoke_handler(handler, win, code, "MPI_Win_call_errhandler")
}

pub(crate) fn mpi_win_set_info(win: c_int, _info: c_int) -> c_int {
    win_call("MPI_Win_set_info", win, |s| s.win(win).map(|_| ()))
}

/// An empty info: reverb's windows take no hints.
pub(crate) unsafe fn mpi_win_get_info(win: c_int, info: Out<'_, c_int>) -> c_int {
    win_call("MPI_Win_get_info", win, |s| {
        s.win(win)?;
        let h = crate::info::new_empty();
        ffi::out(info, h, "info")
    })
}
