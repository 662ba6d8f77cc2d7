//! Where a provider keeps its tagged-message state: its own, or one shared by the
//! sub-providers of the `auto` provider (one matcher for every wire, so a wildcard receive sees
//! shm and network arrivals in one order). Shared state sits behind a mutex because the tcp
//! provider's helper thread delivers arrivals too; a provider opened alone pays one
//! predictable branch per access, no lock.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, MutexGuard};

use super::TaggedState;

/// A provider's tagged state: owned, or shared with the other sub-providers of a job.
// Owned state stays inline: a box would add a pointer chase to every tagged operation of a
// provider opened alone (the hot path); one per provider, so the size does not matter.
#[allow(clippy::large_enum_variant)]
pub enum TaggedHome {
    /// A provider opened alone.
    Own(TaggedState),
    /// One of the `auto` provider's sub-providers.
    Shared(Arc<Mutex<TaggedState>>),
}

impl Default for TaggedHome {
    fn default() -> Self {
        TaggedHome::Own(TaggedState::default())
    }
}

/// Access to the state for one operation; holds the lock while shared. Drop it before calling
/// anything that may take another provider's lock (lock order: provider, then tagged state).
pub enum TaggedRef<'a> {
    /// Owned state, borrowed.
    Own(&'a mut TaggedState),
    /// Shared state, locked until this drops.
    Locked(MutexGuard<'a, TaggedState>),
}

impl TaggedHome {
    /// A state to share between sub-providers.
    pub fn shared() -> Arc<Mutex<TaggedState>> {
        Arc::new(Mutex::new(TaggedState::default()))
    }

    /// The state, locked if shared.
    #[inline(always)]
    pub fn get(&mut self) -> TaggedRef<'_> {
        match self {
            TaggedHome::Own(state) => TaggedRef::Own(state),
            TaggedHome::Shared(state) => TaggedRef::Locked(lock(state)),
        }
    }

    /// Read-only view, for counters.
    pub fn with<T>(&self, f: impl FnOnce(&TaggedState) -> T) -> T {
        match self {
            TaggedHome::Own(state) => f(state),
            TaggedHome::Shared(state) => f(&lock(state)),
        }
    }
}

/// Locks shared state; a panic under the lock (a bug) leaves the matcher whole enough to keep
/// reporting.
pub fn lock(state: &Mutex<TaggedState>) -> MutexGuard<'_, TaggedState> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

impl Deref for TaggedRef<'_> {
    type Target = TaggedState;
    #[inline(always)]
    fn deref(&self) -> &TaggedState {
        match self {
            TaggedRef::Own(state) => state,
            TaggedRef::Locked(guard) => guard,
        }
    }
}

impl DerefMut for TaggedRef<'_> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut TaggedState {
        match self {
            TaggedRef::Own(state) => state,
            TaggedRef::Locked(guard) => guard,
        }
    }
}
