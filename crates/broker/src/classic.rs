//! Classic queues: the queue type whose messages live in this process — ready list, paged
//! tail and message store — and that this node alone serves (`queue.rs` in this folder;
//! paging to the store in `paging.rs`, giving an emptied ready list's buffer back in
//! `shrink.rs`).

mod paging;
mod queue;
mod shrink;

pub use queue::{ClassicQueue, DEFAULT_MEMORY_BUDGET_BYTES};

/// A classic queue with default limits, no vhost and no store: for unit tests of the
/// queue's own behaviour.
#[cfg(test)]
pub(crate) fn standalone(name: &str) -> std::sync::Arc<crate::queue::Queue> {
    use crate::memory::MemoryMonitor;
    use crate::queue::{Queue, QueueLimits};
    use std::sync::{Arc, Weak};
    Arc::new(Queue::new(
        warren_codec::ShortStr::from(name),
        false,
        None,
        false,
        warren_codec::FieldTable::new(),
        QueueLimits::default().shared(),
        Weak::<crate::vhost::VHost>::new(),
        None,
        Box::new(ClassicQueue::new(
            QueueLimits::default().shared(),
            Arc::new(MemoryMonitor::new(usize::MAX, Arc::default())),
            false,
            None,
        )),
    ))
}
