//! What a provider opened as a sub-provider of `auto` shares with the others: one tagged
//! state (one matcher for every wire) and one operation numbering (each sub-provider takes a
//! disjoint range, so an [`crate::OpId`] names one operation job-wide and completions move to
//! `auto`'s queues untranslated). A provider opened alone gets [`SubCore::default`].

use crate::completion::CompletionQueues;
use crate::tagged::TaggedHome;

/// A sub-provider's share of the `auto` provider's core.
pub(crate) struct SubCore {
    pub tagged: TaggedHome,
    /// The first operation number this provider hands out.
    pub first_op: u64,
}

impl Default for SubCore {
    fn default() -> Self {
        SubCore { tagged: TaggedHome::default(), first_op: 1 }
    }
}

impl SubCore {
    /// Completion queues numbering from this share's range.
    pub fn queues(&self) -> CompletionQueues {
        CompletionQueues::numbered_from(self.first_op)
    }
}
