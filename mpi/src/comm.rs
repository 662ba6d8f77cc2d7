//! Communicators: a group of world ranks, this rank's place in it, a context id that keeps
//! its messages apart, an error handler and a name; MPI's calls on them.

use std::ffi::{c_char, c_int};

use crate::abi::*;
use crate::coll;
use crate::errors::{MpiError, MpiResult};
use crate::ffi;
use crate::ffi::Out;
use crate::state::{call, State};
use crate::tags;

#[derive(Debug, Clone)]
pub struct Comm {
    pub context: u32,
    /// The world rank of each member, in this communicator's rank order.
    pub ranks: Vec<u32>,
    /// This rank's number in it.
    pub me: u32,
    pub errhandler: c_int,
    pub name: String,
    /// An intercommunicator's remote group (world ranks in its rank order); None for an
    /// intracommunicator.
    pub remote: Option<Vec<u32>>,
}

impl Comm {
    pub fn size(&self) -> u32 {
        self.ranks.len() as u32
    }

    /// The ranks point-to-point calls name: the remote group of an intercommunicator, else
    /// the communicator's own.
    pub fn peers(&self) -> &[u32] {
        self.remote.as_deref().unwrap_or(&self.ranks)
    }

    /// The rank among `peers` of world rank `w` (MPI_ANY_SOURCE if it is none of them).
    pub fn rank_of_world(&self, w: u32) -> c_int {
        let peers = self.peers();
        // MPI_COMM_WORLD and its duplicates: the same numbering.
        if peers.get(w as usize) == Some(&w) {
            return w as c_int;
        }
        peers.iter().position(|&p| p == w).map_or(MPI_ANY_SOURCE, |i| i as c_int)
    }

    /// The world rank of peer `r` (see `peers`); MPI_ERR_RANK outside them.
    pub fn world_of(&self, r: c_int) -> MpiResult<u32> {
        usize::try_from(r).ok().and_then(|i| self.peers().get(i).copied()).ok_or_else(|| {
            MpiError::new(MPI_ERR_RANK, format!("rank {r} outside a communicator of {}", self.size()))
        })
    }
}

impl State {
    /// A context id no communicator of `parent`'s members uses yet: the largest next id among
    /// them (a collective on `parent`).
    pub fn new_context(&mut self, parent: c_int) -> MpiResult<u32> {
        // Taken at once: a communicator created while this agreement runs (MPI_Comm_idup's)
        // offers the next id.
        let mine = self.next_context;
        self.next_context += 1;
        let all = coll::allgather_bytes(self, parent, &mine.to_le_bytes())?;
        let agreed = all
            .iter()
            .map(|b| b.get(..4).and_then(|b| b.try_into().ok()).map_or(0, u32::from_le_bytes))
            .max()
            .unwrap_or(mine);
        if agreed >= tags::MAX_CONTEXT - tags::AGREEMENT_CONTEXTS {
            return Err(MpiError::new(MPI_ERR_INTERN, "out of communicator context ids"));
        }
        self.next_context = self.next_context.max(agreed + 1);
        Ok(agreed)
    }

    pub fn derive(&mut self, parent: c_int, ranks: Vec<u32>, context: u32) -> c_int {
        let world_me = self.rt.rank();
        let errhandler = self.comms.get(parent).map_or(MPI_ERRORS_ARE_FATAL, |c| c.errhandler);
        let me = ranks.iter().position(|&w| w == world_me).unwrap_or(0) as u32;
        self.comms.insert(Comm { context, ranks, me, errhandler, name: String::new(), remote: None })
    }
}

pub(crate) unsafe fn mpi_comm_rank(comm: c_int, rank: Out<'_, c_int>) -> c_int {
    call("MPI_Comm_rank", comm, |s| ffi::out(rank, s.comm(comm)?.me as c_int, "rank"))
}

pub(crate) unsafe fn mpi_comm_size(comm: c_int, size: Out<'_, c_int>) -> c_int {
    call("MPI_Comm_size", comm, |s| ffi::out(size, s.comm(comm)?.size() as c_int, "size"))
}

pub(crate) unsafe fn mpi_comm_dup(comm: c_int, newcomm: Out<'_, c_int>) -> c_int {
    call("MPI_Comm_dup", comm, |s| {
        if s.comm(comm)?.remote.is_some() {
            let h = s.dup_inter(comm)?;
            s.copy_attributes(comm, h)?;
            return ffi::out(newcomm, h, "newcomm");
        }
        let ranks = s.comm(comm)?.ranks.clone();
        let context = s.new_context(comm)?;
        let h = s.derive(comm, ranks, context);
        s.copy_attributes(comm, h)?;
        // A duplicate keeps the topology.
        if let Some(cart) = s.carts.get(&comm).cloned() {
            s.carts.insert(h, cart);
        }
        if let Some(graph) = s.graphs.get(&comm).cloned() {
            s.graphs.insert(h, graph);
        }
        ffi::out(newcomm, h, "newcomm")
    })
}

/// Members with the same color form one communicator, ordered by (key, parent rank);
/// `MPI_UNDEFINED` gets `MPI_COMM_NULL`.
pub(crate) unsafe fn mpi_comm_split(comm: c_int, color: c_int, key: c_int, newcomm: Out<'_, c_int>) -> c_int {
    call("MPI_Comm_split", comm, |s| {
        if s.comm(comm)?.remote.is_some() {
            let h = s.split_inter(comm, color, key)?;
            return ffi::out(newcomm, h, "newcomm");
        }
        let h = split(s, comm, color, key)?;
        ffi::out(newcomm, h, "newcomm")
    })
}

/// `comm`'s members of `color`, ordered by (key, rank): a new communicator (collective over
/// `comm`); MPI_COMM_NULL for `MPI_UNDEFINED`.
pub(crate) fn split(s: &mut State, comm: c_int, color: c_int, key: c_int) -> MpiResult<c_int> {
    let mut mine = color.to_le_bytes().to_vec();
    mine.extend_from_slice(&key.to_le_bytes());
    let all = coll::allgather_bytes(s, comm, &mine)?;
    let context = s.new_context(comm)?;
    if color == MPI_UNDEFINED {
        return Ok(MPI_COMM_NULL);
    }
    let parent = s.comm(comm)?;
    let word = |b: &[u8], at: usize| {
        b.get(at..at + 4).and_then(|w| w.try_into().ok()).map_or(0, c_int::from_le_bytes)
    };
    let mut members: Vec<(c_int, usize)> =
        all.iter().enumerate().filter(|(_, b)| word(b, 0) == color).map(|(r, b)| (word(b, 4), r)).collect();
    members.sort();
    let ranks = members.iter().map(|&(_, r)| parent.ranks[r]).collect();
    Ok(s.derive(comm, ranks, context))
}

/// MPI_COMM_TYPE_SHARED groups the ranks that share a host (its name: real hosts, or the
/// namespaces of simulated ones); the hardware-guided types fall back to it, as MPICH's do
/// when no hint narrows them. `MPI_UNDEFINED` gets MPI_COMM_NULL.
pub(crate) unsafe fn mpi_comm_split_type(
    comm: c_int,
    split_type: c_int,
    key: c_int,
    _info: c_int,
    newcomm: Out<'_, c_int>,
) -> c_int {
    call("MPI_Comm_split_type", comm, |s| {
        if s.comm(comm)?.remote.is_some() {
            return Err(MpiError::new(MPI_ERR_COMM, "MPI_Comm_split_type on an intercommunicator"));
        }
        let host = rustix::system::uname().nodename().to_bytes().to_vec();
        let hosts = coll::allgather_bytes(s, comm, &host)?;
        let color = match split_type {
            MPI_UNDEFINED => MPI_UNDEFINED,
            MPI_COMM_TYPE_SHARED | MPI_COMM_TYPE_HW_GUIDED | MPI_COMM_TYPE_HW_UNGUIDED => {
                hosts.iter().position(|h| *h == host).map_or(0, |i| i as c_int)
            }
            other => return Err(MpiError::new(MPI_ERR_ARG, format!("split type {other}"))),
        };
        let h = split(s, comm, color, key)?;
        ffi::out(newcomm, h, "newcomm")
    })
}

pub(crate) unsafe fn mpi_comm_free(comm: Out<'_, c_int>) -> c_int {
    let h = ffi::read(comm, "comm").unwrap_or(MPI_COMM_NULL);
    call("MPI_Comm_free", h, |s| {
        if h == MPI_COMM_WORLD || h == MPI_COMM_SELF {
            return Err(MpiError::new(MPI_ERR_COMM, "MPI_COMM_WORLD and MPI_COMM_SELF cannot be freed"));
        }
        s.comm(h)?;
        s.delete_attributes(h)?;
        s.comms.remove(h);
        s.carts.remove(&h);
        s.graphs.remove(&h);
        ffi::out(comm, MPI_COMM_NULL, "comm")
    })
}

pub(crate) unsafe fn mpi_comm_compare(a: c_int, b: c_int, result: Out<'_, c_int>) -> c_int {
    call("MPI_Comm_compare", a, |s| {
        let (x, y) = (s.comm(a)?, s.comm(b)?);
        let r = if a == b {
            MPI_IDENT
        } else if x.ranks == y.ranks {
            MPI_CONGRUENT
        } else {
            let (mut p, mut q) = (x.ranks.clone(), y.ranks.clone());
            p.sort_unstable();
            q.sort_unstable();
            if p == q {
                MPI_SIMILAR
            } else {
                MPI_UNEQUAL
            }
        };
        ffi::out(result, r, "result")
    })
}

pub(crate) fn mpi_comm_set_errhandler(comm: c_int, errhandler: c_int) -> c_int {
    call("MPI_Comm_set_errhandler", comm, |s| {
        if !crate::errhandler::is_handler(errhandler) {
            return Err(MpiError::new(MPI_ERR_ARG, format!("invalid error handler {errhandler:#x}")));
        }
        s.comm_mut(comm)?.errhandler = errhandler;
        Ok(())
    })
}

pub(crate) fn mpi_errhandler_set(comm: c_int, errhandler: c_int) -> c_int {
    mpi_comm_set_errhandler(comm, errhandler)
}

pub(crate) unsafe fn mpi_comm_get_errhandler(comm: c_int, errhandler: Out<'_, c_int>) -> c_int {
    call("MPI_Comm_get_errhandler", comm, |s| ffi::out(errhandler, s.comm(comm)?.errhandler, "errhandler"))
}

pub(crate) unsafe fn mpi_errhandler_free(errhandler: Out<'_, c_int>) -> c_int {
    call("MPI_Errhandler_free", MPI_COMM_WORLD, |_| ffi::out(errhandler, MPI_ERRHANDLER_NULL, "errhandler"))
}

pub(crate) unsafe fn mpi_comm_set_name(comm: c_int, name: *const c_char) -> c_int {
    call("MPI_Comm_set_name", comm, |s| {
        // SAFETY: a string argument of this call: NUL-terminated (the FFI contract).
        let name = unsafe { ffi::string_in(name) }?;
        s.comm_mut(comm)?.name = name;
        Ok(())
    })
}

pub(crate) unsafe fn mpi_comm_get_name(comm: c_int, name: *mut c_char, len: Out<'_, c_int>) -> c_int {
    call("MPI_Comm_get_name", comm, |s| {
        // SAFETY: the program's string buffer has room for the `MPI_MAX_*` bytes given (the contract).
        let n = unsafe { ffi::string_out(name, MPI_MAX_OBJECT_NAME as usize, &s.comm(comm)?.name) }?;
        ffi::out(len, n, "resultlen")
    })
}

pub(crate) unsafe fn mpi_comm_test_inter(comm: c_int, flag: Out<'_, c_int>) -> c_int {
    call("MPI_Comm_test_inter", comm, |s| {
        let inter = s.comm(comm)?.remote.is_some();
        ffi::out(flag, c_int::from(inter), "flag")
    })
}

pub(crate) unsafe fn mpi_comm_dup_with_info(comm: c_int, _info: c_int, newcomm: Out<'_, c_int>) -> c_int {
    // SAFETY: this call's pointer arguments, passed on under the same contract.
    unsafe { mpi_comm_dup(comm, newcomm) }
}

/// MPI_Comm_dup started as a nonblocking collective (`icoll`): `*newcomm` is written when
/// the request completes.
pub(crate) unsafe fn mpi_comm_idup(comm: c_int, newcomm: Out<'_, c_int>, request: Out<'_, c_int>) -> c_int {
    let newcomm = newcomm.as_ptr();
    crate::icoll::start("MPI_Comm_idup", comm, request, move || {
        // SAFETY: MPI keeps a nonblocking call's out-arguments valid until its request
        // completes (MPI 4.0, 3.7.2), and this runs before then.
        unsafe { mpi_comm_dup(comm, Out::from_raw(newcomm)) }
    })
}

pub(crate) unsafe fn mpi_comm_idup_with_info(
    comm: c_int,
    _info: c_int,
    newcomm: Out<'_, c_int>,
    request: Out<'_, c_int>,
) -> c_int {
    // SAFETY: this call's pointer arguments, passed on under the same contract.
    unsafe { mpi_comm_idup(comm, newcomm, request) }
}
