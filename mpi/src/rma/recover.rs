//! Windows across checkpoints (message logging, `MPIX_Reverb_checkpoint`): each checkpoint
//! holds every window's memory and protocol state (request ids, locks, posts, completes);
//! a rank restored from it re-creates its windows before `MPIX_Reverb_restore` (answered
//! from the creation journal, as communicators are), and the restore writes them back. The
//! epochs after the checkpoint replay from the logs: a window's messages are deliveries like
//! any other (their order logged), so the restored target applies the same requests in the
//! same calls, and its own requests and replies to survivors are dropped as duplicates.
//! What cannot be recovered stops with an error naming the window: operations outstanding at
//! a checkpoint, shared and dynamic windows, a window not re-created before the restore.

use std::ffi::c_int;

use reverb_transport::codec::{CodecError, Reader, Writer};

use crate::abi::*;
use crate::errors::{MpiError, MpiResult};
use crate::state::State;

use super::mem;
use super::win::{Win, FLAVOR_ALLOCATE, FLAVOR_CREATE, FLAVOR_DYNAMIC, FLAVOR_SHARED};

/// The checkpoint entry holding the windows (below the journal's, far above the program's).
pub const WINDOWS_ENTRY: u32 = u32::MAX - 1;

/// Whether a window of `flavor` survives a recovered failure: its memory is this rank's
/// alone and reached by logged requests only (not shared load/stores, not attached memory
/// at addresses a restarted process does not reproduce).
pub fn recoverable(flavor: c_int) -> bool {
    flavor == FLAVOR_CREATE || flavor == FLAVOR_ALLOCATE
}

pub fn flavor_name(flavor: c_int) -> &'static str {
    match flavor {
        FLAVOR_CREATE => "MPI_Win_create",
        FLAVOR_ALLOCATE => "MPI_Win_allocate",
        FLAVOR_DYNAMIC => "MPI_Win_create_dynamic",
        FLAVOR_SHARED => "MPI_Win_allocate_shared",
        _ => "an unknown creation",
    }
}

/// One window as a checkpoint holds it.
#[derive(Debug, Default, PartialEq)]
struct Saved {
    handle: c_int,
    flavor: c_int,
    label: String,
    next_id: u64,
    posts: Vec<u32>,
    completes: Vec<u32>,
    /// Per target: bit 0 its lock granted, bit 1 under `MPI_MODE_NOCHECK`.
    granted: Vec<u32>,
    access: Vec<u32>,
    exposure: Vec<u32>,
    shared: u32,
    /// The exclusive holder plus one, 0 for none.
    exclusive: u32,
    /// Lock requests waiting: origin, times two, plus one if exclusive.
    waiting: Vec<u32>,
    memory: Vec<u8>,
}

fn save(h: c_int, w: &Win) -> MpiResult<Saved> {
    if !w.origin.pending.is_empty() {
        return Err(MpiError::new(
            MPI_ERR_RMA_SYNC,
            format!(
                "{}: {} operations outstanding at MPIX_Reverb_checkpoint (complete them with a fence, \
                 an unlock, a flush or MPI_Win_complete first: reverb cannot recover them)",
                w.label(h),
                w.origin.pending.len()
            ),
        ));
    }
    let memory = if recoverable(w.flavor) && w.size > 0 {
        mem::gather(w.base, &[(0, w.size as u64)])?
    } else {
        Vec::new()
    };
    let index = |v: &[usize]| v.iter().map(|&r| r as u32).collect();
    let o = &w.origin;
    let t = &w.target;
    Ok(Saved {
        handle: h,
        flavor: w.flavor,
        label: w.label(h),
        next_id: o.next_id,
        posts: o.posts.clone(),
        completes: t.completes.clone(),
        granted: o
            .granted
            .iter()
            .zip(&o.unchecked)
            .map(|(&g, &u)| u32::from(g) | u32::from(u) << 1)
            .collect(),
        access: index(&o.access),
        exposure: index(&t.exposure),
        shared: t.shared,
        exclusive: t.exclusive.map_or(0, |r| r as u32 + 1),
        waiting: t.waiting.iter().map(|&(r, x)| (r as u32) << 1 | u32::from(x)).collect(),
        memory,
    })
}

/// Every window of this rank, for the checkpoint's entry; an error names a window whose
/// operations are still outstanding.
pub fn encode(s: &State) -> MpiResult<Vec<u8>> {
    let saved = s.wins.items.iter().map(|(&h, w)| save(h, w)).collect::<MpiResult<Vec<_>>>()?;
    let mut out = Vec::new();
    Writer::new(&mut out).u32(s.wins.next_handle() as u32).u32(saved.len() as u32);
    for w in &saved {
        write(&mut out, w)?;
    }
    Ok(out)
}

/// `handle | flavor | label32 | next_id u64 | 6 × (count | count × u32) | shared | exclusive |
/// memory32`.
fn write(out: &mut Vec<u8>, w: &Saved) -> MpiResult<()> {
    let len = u32::try_from(w.memory.len()).map_err(|_| {
        MpiError::new(MPI_ERR_NO_MEM, format!("{}: over 4 GiB, too large to checkpoint", w.label))
    })?;
    let mut wr = Writer::new(out);
    wr.u32(w.handle as u32).u32(w.flavor as u32).bytes32(w.label.as_bytes()).u64(w.next_id);
    for list in [&w.posts, &w.completes, &w.granted, &w.access, &w.exposure, &w.waiting] {
        wr.u32(list.len() as u32);
        for &v in list.iter() {
            wr.u32(v);
        }
    }
    wr.u32(w.shared).u32(w.exclusive).u32(len).raw(&w.memory);
    Ok(())
}

fn decode(bytes: &[u8]) -> Result<(c_int, Vec<Saved>), CodecError> {
    let mut r = Reader::new(bytes, "the checkpoint's windows");
    let next = r.u32("next handle")? as c_int;
    let count = r.u32("windows")?;
    let mut saved = Vec::new();
    for _ in 0..count {
        let mut w = Saved {
            handle: r.u32("handle")? as c_int,
            flavor: r.u32("flavor")? as c_int,
            label: String::from_utf8_lossy(r.bytes32("label")?).into_owned(),
            next_id: r.u64("request id")?,
            ..Saved::default()
        };
        for list in
            [&mut w.posts, &mut w.completes, &mut w.granted, &mut w.access, &mut w.exposure, &mut w.waiting]
        {
            let n = r.u32("list")?;
            for _ in 0..n {
                list.push(r.u32("entry")?);
            }
        }
        w.shared = r.u32("shared holders")?;
        w.exclusive = r.u32("exclusive holder")?;
        w.memory = r.bytes32("memory")?.to_vec();
        saved.push(w);
    }
    r.finish()?;
    Ok((next, saved))
}

/// At a rank restored from a checkpoint (`MPIX_Reverb_restore`): the windows it re-created
/// get their checkpointed memory and state back. Each window alive at the checkpoint must
/// have been re-created before, in the same order (so under the same handle).
pub fn restore(s: &mut State) -> MpiResult<()> {
    let Some(bytes) = s.rt.restored(WINDOWS_ENTRY) else { return Ok(()) };
    let (next, saved) =
        decode(&bytes).map_err(|e| MpiError::new(MPI_ERR_OTHER, format!("the checkpoint's windows: {e}")))?;
    if let Some((&h, w)) = s.wins.items.iter().find(|(h, _)| !saved.iter().any(|v| v.handle == **h)) {
        return Err(MpiError::new(
            MPI_ERR_OTHER,
            format!(
                "{}: re-created before MPIX_Reverb_restore but not alive at the checkpoint (reverb)",
                w.label(h)
            ),
        ));
    }
    for v in saved {
        let w = s.wins.get_mut(v.handle).ok_or_else(|| {
            MpiError::new(
                MPI_ERR_UNSUPPORTED_OPERATION,
                format!(
                    "{}: alive at the checkpoint and not re-created before MPIX_Reverb_restore; reverb \
                     recovers windows created before it, in the same order (reverb)",
                    v.label
                ),
            )
        })?;
        put_back(w, v)?;
    }
    s.wins.skip_to(next);
    Ok(())
}

fn put_back(w: &mut Win, v: Saved) -> MpiResult<()> {
    let refuse = |why: String| {
        Err(MpiError::new(MPI_ERR_UNSUPPORTED_OPERATION, format!("{}: {why} (reverb)", v.label)))
    };
    if !recoverable(v.flavor) {
        return refuse(format!(
            "alive at the checkpoint, and windows of {} are not recovered",
            flavor_name(v.flavor)
        ));
    }
    let n = w.ranks.len();
    let lists_fit = [&v.posts, &v.completes, &v.granted].iter().all(|l| l.len() == n);
    if w.flavor != v.flavor || w.size != v.memory.len() || !lists_fit {
        return refuse(format!(
            "re-created as {} of {} bytes over {n} ranks, checkpointed as {} of {} bytes",
            flavor_name(w.flavor),
            w.size,
            flavor_name(v.flavor),
            v.memory.len()
        ));
    }
    if w.size > 0 {
        mem::scatter(w.base, &[(0, w.size as u64)], &v.memory)?;
    }
    let rank = |r: u32| (r as usize).min(n - 1);
    let o = &mut w.origin;
    o.next_id = v.next_id;
    o.posts = v.posts;
    o.granted = v.granted.iter().map(|g| g & 1 != 0).collect();
    o.unchecked = v.granted.iter().map(|g| g & 2 != 0).collect();
    o.access = v.access.into_iter().map(rank).collect();
    let t = &mut w.target;
    t.completes = v.completes;
    t.exposure = v.exposure.into_iter().map(rank).collect();
    t.shared = v.shared;
    t.exclusive = v.exclusive.checked_sub(1).map(rank);
    t.waiting = v.waiting.into_iter().map(|x| (rank(x >> 1), x & 1 != 0)).collect();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpointed_window_decodes_as_it_was_saved() {
        let w = Saved {
            handle: super::super::WIN_BASE as c_int + 2,
            flavor: FLAVOR_ALLOCATE,
            label: "window 0xe0000002 ('halo')".into(),
            next_id: 77,
            posts: vec![0, 1, 0],
            completes: vec![2, 0, 0],
            granted: vec![1, 3, 0],
            access: vec![1, 2],
            exposure: vec![0],
            shared: 1,
            exclusive: 0,
            waiting: vec![2 << 1 | 1],
            memory: (0..40).collect(),
        };
        let mut out = Vec::new();
        Writer::new(&mut out).u32(9).u32(1);
        write(&mut out, &w).unwrap();
        let (next, back) = decode(&out).unwrap();
        assert_eq!((next, back), (9, vec![w]));
        assert!(decode(&out[..out.len() - 1]).is_err(), "a short entry is refused");
        // Damaged entries give an error, never a panic or a huge allocation: every prefix,
        // and every byte set to 0xff (counts and lengths among them).
        for n in 0..out.len() {
            assert!(decode(&out[..n]).is_err(), "a {n}-byte prefix is refused");
            let mut bad = out.clone();
            bad[n] = 0xff;
            let _ = decode(&bad);
        }
    }

    #[test]
    fn only_private_memory_flavors_recover() {
        assert!(recoverable(FLAVOR_CREATE) && recoverable(FLAVOR_ALLOCATE));
        assert!(!recoverable(FLAVOR_SHARED) && !recoverable(FLAVOR_DYNAMIC));
    }
}
