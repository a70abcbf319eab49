//! `LiveRefs`: which queues are registered, and each one's live references (the ids of the
//! messages it holds in the log).
//!
//! A map from every registered queue to its id set kept an empty `RoaringTreemap` (24 bytes,
//! a 32-byte slot, ~66 bytes a queue with a million queues once the map's doubling is
//! counted) for each queue that held no persistent message, which is nearly all of them when
//! a node holds a million queues. Registration is kept apart, as a bitmap of queue ids (ids
//! are handed out in order and never reused, so a million of them take a few bits each), and
//! only queues holding references have an id set: one is made by the first reference and
//! dropped with the last.

use std::collections::HashMap;

use roaring::{RoaringBitmap, RoaringTreemap};

use crate::types::QueueId;

/// Registered queues and the live references of those holding any.
#[derive(Debug, Default)]
pub struct LiveRefs {
    registered: RoaringBitmap,
    /// Never holds an empty set.
    holding: HashMap<QueueId, RoaringTreemap>,
}

impl LiveRefs {
    /// `queues` registered, none holding references.
    pub fn registered(queues: impl IntoIterator<Item = QueueId>) -> LiveRefs {
        LiveRefs {
            registered: queues.into_iter().map(|q| q.0).collect(),
            holding: HashMap::new(),
        }
    }

    pub fn register(&mut self, queue: QueueId) {
        self.registered.insert(queue.0);
    }

    /// Forgets `queue`, handing back its references (empty if it held none); `None` if it
    /// was not registered.
    pub fn unregister(&mut self, queue: QueueId) -> Option<RoaringTreemap> {
        if !self.registered.remove(queue.0) {
            return None;
        }
        Some(self.holding.remove(&queue).unwrap_or_default())
    }

    pub fn is_registered(&self, queue: QueueId) -> bool {
        self.registered.contains(queue.0)
    }

    /// Adds a reference of `queue` to message `id`; nothing if the queue is not registered.
    pub fn insert(&mut self, queue: QueueId, id: u64) {
        if self.is_registered(queue) {
            self.holding.entry(queue).or_default().insert(id);
        }
    }

    /// Removes a reference; whether it was live.
    pub fn remove(&mut self, queue: QueueId, id: u64) -> bool {
        let Some(ids) = self.holding.get_mut(&queue) else {
            return false;
        };
        let removed = ids.remove(id);
        if ids.is_empty() {
            self.holding.remove(&queue);
        }
        removed
    }

    /// Whether `queue` holds a live reference to `id`.
    pub fn contains(&self, queue: QueueId, id: u64) -> bool {
        self.holding.get(&queue).is_some_and(|ids| ids.contains(id))
    }

    /// A registered queue's reference to `id` is gone (acked, or never there): an ACK for
    /// it still says something, where one for a deleted queue does not.
    pub fn is_dead(&self, queue: QueueId, id: u64) -> bool {
        self.is_registered(queue) && !self.contains(queue, id)
    }

    /// The queues holding references, with them (each set non-empty).
    pub fn holding(&self) -> impl Iterator<Item = (QueueId, &RoaringTreemap)> + '_ {
        self.holding.iter().map(|(q, ids)| (*q, ids))
    }

    /// How many references all the queues hold.
    pub fn count(&self) -> u64 {
        self.holding.values().map(RoaringTreemap::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_kept_only_for_registered_queues_and_only_while_held() {
        let mut refs = LiveRefs::registered([QueueId(1), QueueId(3)]);
        refs.insert(QueueId(1), 10);
        refs.insert(QueueId(2), 10);
        assert!(refs.contains(QueueId(1), 10));
        assert!(!refs.contains(QueueId(2), 10), "queue 2 is not registered");
        assert!(refs.is_dead(QueueId(3), 10));
        assert!(
            !refs.is_dead(QueueId(2), 10),
            "an unregistered queue's refs are not dead"
        );
        assert_eq!(refs.holding().count(), 1);

        assert!(refs.remove(QueueId(1), 10));
        assert!(!refs.remove(QueueId(1), 10), "removed once");
        assert_eq!(refs.holding().count(), 0, "an emptied set is dropped");
        assert!(refs.is_registered(QueueId(1)));

        refs.insert(QueueId(3), 7);
        refs.register(QueueId(4));
        assert_eq!(refs.count(), 1);
        assert_eq!(refs.unregister(QueueId(3)).map(|ids| ids.len()), Some(1));
        assert_eq!(refs.unregister(QueueId(4)).map(|ids| ids.len()), Some(0));
        assert_eq!(refs.unregister(QueueId(4)), None);
        assert!(!refs.is_registered(QueueId(3)));
        refs.insert(QueueId(3), 8);
        assert_eq!(refs.count(), 0);
    }
}
