//! `ReadyList`: a queue's messages waiting for a consumer, in delivery order. With
//! `x-max-priority` it keeps one FIFO per priority and serves the highest first; within a
//! priority, order is by message id, which is how requeued messages regain their place.
//!
//! A burst grows a level's ring buffer to the burst's size; once the level is empty its
//! buffer can go back to a small base capacity (`shrink_emptied`), so an idle queue does not
//! keep the memory of its deepest moment (a `VecDeque` never shrinks by itself). Taking
//! messages off the head never shrinks: a queue under load empties and refills many times a
//! second, and regrowing its buffer each time (reallocations, page faults on fresh pages) cost
//! ~10 % of the broker's CPU in a 16 B run; the queue shrinks its list a while after it
//! emptied instead (`classic/shrink.rs`). The rarer ways out (expiry, drop-head, purge) still
//! shrink at once.

use crate::queued_message::QueuedMessage;
use std::collections::VecDeque;

/// Entries an emptied level keeps room for; a level that grew past `SHRINK_ABOVE` entries is
/// brought back to this when it empties. Far enough apart that a queue hovering around empty
/// under steady load never reallocates.
const BASE_CAPACITY: usize = 256;
const SHRINK_ABOVE: usize = 4096;

/// The FIFOs of a ready list, one per priority. A plain queue's one FIFO sits inline: a
/// boxed slice of one would be an allocation (and a pointer to follow on every publish) for
/// each of a broker's queues.
#[derive(Debug)]
enum Levels {
    One([VecDeque<QueuedMessage>; 1]),
    Many(Box<[VecDeque<QueuedMessage>]>),
}

impl Levels {
    fn new(max_priority: u8) -> Levels {
        if max_priority == 0 {
            Levels::One([VecDeque::new()])
        } else {
            Levels::Many((0..=max_priority).map(|_| VecDeque::new()).collect())
        }
    }
}

impl std::ops::Deref for Levels {
    type Target = [VecDeque<QueuedMessage>];

    fn deref(&self) -> &Self::Target {
        match self {
            Levels::One(one) => one,
            Levels::Many(many) => many,
        }
    }
}

impl std::ops::DerefMut for Levels {
    fn deref_mut(&mut self) -> &mut Self::Target {
        match self {
            Levels::One(one) => one,
            Levels::Many(many) => many,
        }
    }
}

#[derive(Debug)]
pub struct ReadyList {
    /// Index = priority; a plain queue has one level.
    levels: Levels,
    len: usize,
    /// Logical bytes (what `x-max-length-bytes` counts), paged bodies included.
    bytes: usize,
    /// Bytes held in memory (paged bodies excluded).
    memory_bytes: usize,
    /// Persistent (delivery-mode 2) messages among them, and their logical bytes.
    persistent: usize,
    persistent_bytes: usize,
}

impl ReadyList {
    /// `max_priority` 0 (or none) makes a plain FIFO.
    pub fn new(max_priority: u8) -> ReadyList {
        ReadyList {
            levels: Levels::new(max_priority),
            len: 0,
            bytes: 0,
            memory_bytes: 0,
            persistent: 0,
            persistent_bytes: 0,
        }
    }

    fn level_of(&self, m: &QueuedMessage) -> usize {
        // Priorities above the queue's maximum count as the maximum, as in RabbitMQ.
        (m.message.priority as usize).min(self.levels.len() - 1)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn memory_bytes(&self) -> usize {
        self.memory_bytes
    }

    /// Persistent messages, and their logical bytes.
    pub fn persistent(&self) -> (usize, usize) {
        (self.persistent, self.persistent_bytes)
    }

    fn count_in(&mut self, m: &QueuedMessage) {
        self.len += 1;
        self.bytes += m.message.size_bytes();
        self.memory_bytes += m.message.memory_bytes();
        if m.message.persistent {
            self.persistent += 1;
            self.persistent_bytes += m.message.size_bytes();
        }
    }

    fn count_out(&mut self, m: &QueuedMessage) {
        self.len -= 1;
        self.bytes -= m.message.size_bytes();
        self.memory_bytes -= m.message.memory_bytes();
        if m.message.persistent {
            self.persistent -= 1;
            self.persistent_bytes -= m.message.size_bytes();
        }
    }

    /// Gives back a level's buffer once it is empty after having grown large.
    fn shrink_if_emptied(&mut self, level: usize) {
        let list = &mut self.levels[level];
        if list.is_empty() && list.capacity() > SHRINK_ABOVE {
            list.shrink_to(BASE_CAPACITY);
        }
    }

    /// Room held by the ring buffers, in entries (what an idle queue keeps allocated).
    pub fn capacity(&self) -> usize {
        self.levels.iter().map(VecDeque::capacity).sum()
    }

    /// Empty, with a buffer a burst grew that `shrink_emptied` would give back.
    pub fn holds_emptied_room(&self) -> bool {
        self.len == 0 && self.levels.iter().any(|l| l.capacity() > SHRINK_ABOVE)
    }

    /// Gives back the buffers of the levels that are empty now and grew large.
    pub fn shrink_emptied(&mut self) {
        for level in 0..self.levels.len() {
            self.shrink_if_emptied(level);
        }
    }

    pub fn push_back(&mut self, m: QueuedMessage) {
        let level = self.level_of(&m);
        self.count_in(&m);
        self.levels[level].push_back(m);
    }

    /// Puts a message back where its id places it. That is almost always the head of its
    /// level (a dispatch that found no consumer with credit puts back what it just took, a
    /// requeue returns the oldest deliveries), so the head is tried before a binary search:
    /// on a deep queue the search's cache misses cost more than the rest of a publish.
    pub fn insert_by_id(&mut self, m: QueuedMessage) {
        let level = self.level_of(&m);
        self.count_in(&m);
        let list = &mut self.levels[level];
        if list.front().is_none_or(|head| m.id < head.id) {
            list.push_front(m);
            return;
        }
        let at = list.partition_point(|x| x.id < m.id);
        list.insert(at, m);
    }

    fn front_level(&self) -> Option<usize> {
        (0..self.levels.len())
            .rev()
            .find(|&l| !self.levels[l].is_empty())
    }

    pub fn front(&self) -> Option<&QueuedMessage> {
        self.front_level().and_then(|l| self.levels[l].front())
    }

    /// The next message to deliver. Keeps the buffer even when this empties the list (see
    /// the module comment).
    pub fn pop_front(&mut self) -> Option<QueuedMessage> {
        let level = self.front_level()?;
        let m = self.levels[level].pop_front()?;
        self.count_out(&m);
        Some(m)
    }

    /// Removes the oldest message of the lowest priority (what `x-max-length` drops first).
    pub fn pop_oldest_lowest(&mut self) -> Option<QueuedMessage> {
        let level = (0..self.levels.len()).find(|&l| !self.levels[l].is_empty())?;
        let m = self.levels[level].pop_front()?;
        self.count_out(&m);
        self.shrink_if_emptied(level);
        Some(m)
    }

    /// Removes expired messages from the head of each level (expiry, like RabbitMQ's, is
    /// only checked at the head).
    pub fn take_expired(&mut self, now: std::time::Instant, out: &mut Vec<QueuedMessage>) {
        let expired = |m: &QueuedMessage| m.expires_at.is_some_and(|t| t <= now);
        for level in 0..self.levels.len() {
            while self.levels[level].front().is_some_and(expired) {
                let m = self.levels[level].pop_front().expect("front exists");
                self.count_out(&m);
                out.push(m);
            }
            self.shrink_if_emptied(level);
        }
    }

    /// Every message, highest priority level first, each level in queue order.
    pub fn iter(&self) -> impl Iterator<Item = &QueuedMessage> {
        self.levels.iter().flat_map(|level| level.iter())
    }

    /// The earliest expiry among the level heads (none in an empty list: a publish to a
    /// queue that its consumers keep empty asks on every message).
    #[inline]
    pub fn next_expiry(&self) -> Option<std::time::Instant> {
        if self.len == 0 {
            return None;
        }
        self.levels
            .iter()
            .filter_map(|l| l.front().and_then(|m| m.expires_at))
            .min()
    }

    pub fn drain_all(&mut self) -> Vec<QueuedMessage> {
        self.len = 0;
        self.bytes = 0;
        self.memory_bytes = 0;
        self.persistent = 0;
        self.persistent_bytes = 0;
        let all = self.levels.iter_mut().flat_map(|l| l.drain(..)).collect();
        self.shrink_emptied();
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;
    use bytes::Bytes;
    use std::sync::Arc;
    use warren_codec::{BasicProperties, ShortStr};

    fn queued(id: u64) -> QueuedMessage {
        QueuedMessage {
            id,
            message: Arc::new(Message::new(
                ShortStr::from(""),
                ShortStr::from("k"),
                &BasicProperties::default(),
                Bytes::new(),
                Bytes::from_static(b"m"),
            )),
            redelivered: false,
            delivery_count: 0,
            expires_at: None,
            via: 0,
            store_ref: None,
        }
    }

    #[test]
    fn messages_put_back_regain_their_places_by_id() {
        let mut ready = ReadyList::new(0);
        for id in [3, 5, 8] {
            ready.push_back(queued(id));
        }
        // At the head (what dispatch puts back), in the middle, and before everything.
        for id in [2, 6, 1, 4, 7] {
            ready.insert_by_id(queued(id));
        }
        let ids: Vec<u64> = std::iter::from_fn(|| ready.pop_front().map(|m| m.id)).collect();
        assert_eq!(ids, [1, 2, 3, 4, 5, 6, 7, 8]);
        ready.insert_by_id(queued(9));
        assert_eq!(ready.pop_front().map(|m| m.id), Some(9));
        assert_eq!(ready.bytes(), 0);
    }

    #[test]
    fn an_emptied_list_gives_back_what_a_burst_grew() {
        let mut ready = ReadyList::new(0);
        for id in 0..100_000 {
            ready.push_back(queued(id));
        }
        assert!(ready.capacity() >= 100_000);
        while ready.len() > 1 {
            ready.pop_front();
        }
        // Not empty yet: the buffer stays (no reallocation while messages flow).
        assert!(ready.capacity() >= 100_000);
        assert!(!ready.holds_emptied_room());
        ready.shrink_emptied();
        assert!(ready.capacity() >= 100_000);
        // Emptied: still kept (it may refill at once) until the queue asks for a shrink.
        ready.pop_front();
        assert!(ready.is_empty());
        assert!(ready.capacity() >= 100_000);
        assert!(ready.holds_emptied_room());
        ready.shrink_emptied();
        assert!(ready.capacity() <= SHRINK_ABOVE, "{}", ready.capacity());
        assert!(!ready.holds_emptied_room());
    }

    #[test]
    fn a_list_hovering_around_empty_keeps_its_buffer() {
        let mut ready = ReadyList::new(0);
        for id in 0..1000 {
            ready.push_back(queued(id));
        }
        let grown = ready.capacity();
        while ready.pop_front().is_some() {}
        assert_eq!(ready.capacity(), grown);
    }

    #[test]
    fn draining_every_level_shrinks_them() {
        let mut ready = ReadyList::new(2);
        for id in 0..30_000 {
            let mut m = queued(id);
            Arc::get_mut(&mut m.message).expect("unshared").priority = (id % 3) as u8;
            ready.push_back(m);
        }
        assert_eq!(ready.drain_all().len(), 30_000);
        assert!(ready.capacity() <= 3 * SHRINK_ABOVE, "{}", ready.capacity());
    }
}
