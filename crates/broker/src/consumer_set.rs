//! `ConsumerSet`: a queue's consumers in the order deliveries go to them — consumer
//! priorities (`x-priority` on basic.consume) as RabbitMQ has them.
//!
//! The highest-priority consumers get every message while any of them has credit, round-robin
//! among themselves; a lower priority gets one only while every higher consumer is blocked
//! (prefetch or pipeline). Consumers sit in one list sorted by priority, highest first, each
//! priority a contiguous run (a `Group`) with its own round-robin position, so the common case
//! (every consumer at the default priority 0) is one group and costs what plain round-robin does.
//!
//! With `x-single-active-consumer` only the first consumer receives. It keeps its place while
//! consumers of any priority join; when it leaves, the highest-priority consumer that joined
//! first takes over (RabbitMQ 3.13 for classic queues).

use crate::consumer::Consumer;
use std::sync::Arc;

/// One priority's run of consumers: `list[start..end]`, next served at `start + next`.
#[derive(Debug, Clone, Copy)]
struct Group {
    priority: i64,
    start: usize,
    end: usize,
    next: usize,
}

#[derive(Debug)]
pub struct ConsumerSet {
    /// By priority, highest first; equal priorities in the order they joined (with a single
    /// active consumer, the active one first whatever its priority).
    list: Vec<Arc<Consumer>>,
    /// The runs of `list`, in list order; empty with a single active consumer.
    groups: Vec<Group>,
    single_active: bool,
}

impl ConsumerSet {
    pub fn new(single_active: bool) -> ConsumerSet {
        ConsumerSet {
            list: Vec::new(),
            groups: Vec::new(),
            single_active,
        }
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Consumer>> {
        self.list.iter()
    }

    /// Adds a consumer behind those of its priority (and higher).
    pub fn push(&mut self, consumer: Arc<Consumer>) {
        // The single active consumer keeps its place whatever joins.
        let from = usize::from(self.single_active && !self.list.is_empty());
        let at = from + self.list[from..].partition_point(|c| c.priority >= consumer.priority);
        self.list.insert(at, consumer);
        self.regroup();
    }

    /// Removes the consumer `is` picks out (the first match).
    pub fn remove_where(&mut self, is: impl Fn(&Consumer) -> bool) -> Option<Arc<Consumer>> {
        let at = self.list.iter().position(|c| is(c))?;
        let consumer = self.list.remove(at);
        self.regroup();
        Some(consumer)
    }

    pub fn take_all(&mut self) -> Vec<Arc<Consumer>> {
        self.groups.clear();
        std::mem::take(&mut self.list)
    }

    /// The consumer the next message goes to: the first with credit, by priority, then
    /// round-robin. Every consumer looked at and found without credit is marked starved (see
    /// `Consumer::has_credit`), so whoever frees its credit wakes the queue.
    pub fn pick(&mut self) -> Option<&Arc<Consumer>> {
        if self.single_active {
            return self.list.first().filter(|c| c.has_credit());
        }
        for g in self.groups.iter_mut() {
            let n = g.end - g.start;
            for i in 0..n {
                let offset = (g.next + i) % n;
                let at = g.start + offset;
                if self.list[at].has_credit() {
                    g.next = (offset + 1) % n;
                    return Some(&self.list[at]);
                }
            }
        }
        None
    }

    /// Rebuilds the runs after a consumer joined or left; each priority keeps its place in
    /// its round-robin (clamped to its new size).
    fn regroup(&mut self) {
        if self.single_active {
            return;
        }
        let old = std::mem::take(&mut self.groups);
        let mut start = 0;
        while start < self.list.len() {
            let priority = self.list[start].priority;
            let end = start + self.list[start..].partition_point(|c| c.priority == priority);
            let next = old
                .iter()
                .find(|g| g.priority == priority)
                .map_or(0, |g| g.next % (end - start));
            self.groups.push(Group {
                priority,
                start,
                end,
                next,
            });
            start = end;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consumer::{ChannelFlow, ConnectionEvent};
    use crate::event_channel::{event_channel, EventReceiver};
    use std::sync::atomic::Ordering::SeqCst;
    use warren_codec::ShortStr;

    fn consumer(
        tag: &str,
        priority: i64,
        prefetch: u32,
    ) -> (Arc<Consumer>, EventReceiver<ConnectionEvent>) {
        let (tx, rx) = event_channel();
        let c = Consumer::new(
            ShortStr::from(tag),
            1,
            1,
            false,
            false,
            prefetch,
            Arc::new(ChannelFlow::default()),
            std::sync::Weak::new(),
            tx,
        )
        .with_priority(priority);
        (Arc::new(c), rx)
    }

    /// Picks `n` times, charging credit like a delivery does; returns the tags picked.
    fn picks(set: &mut ConsumerSet, n: usize) -> Vec<String> {
        (0..n)
            .map_while(|_| {
                let c = set.pick()?;
                c.take_credit(1);
                Some(c.tag.to_string())
            })
            .collect()
    }

    #[test]
    fn equal_priorities_round_robin() {
        let mut set = ConsumerSet::new(false);
        let cs: Vec<_> = ["a", "b", "c"].iter().map(|t| consumer(t, 0, 0)).collect();
        for (c, _) in &cs {
            set.push(c.clone());
        }
        assert_eq!(picks(&mut set, 6), ["a", "b", "c", "a", "b", "c"]);
    }

    #[test]
    fn highest_priority_takes_all_while_it_has_credit() {
        let mut set = ConsumerSet::new(false);
        let (low, _r1) = consumer("low", 0, 0);
        let (neg, _r2) = consumer("neg", -3, 0);
        let (high, _r3) = consumer("high", 5, 2);
        set.push(low.clone());
        set.push(neg.clone());
        set.push(high.clone());
        // high has room for two, then the default priority gets everything.
        assert_eq!(picks(&mut set, 4), ["high", "high", "low", "low"]);
        assert!(
            high.starved_credit.load(SeqCst),
            "a skipped consumer must be woken later"
        );
        // high acks one: it is first again.
        high.settled(1);
        assert_eq!(picks(&mut set, 2), ["high", "low"]);
    }

    #[test]
    fn lower_priority_only_when_every_higher_one_is_blocked() {
        let mut set = ConsumerSet::new(false);
        let (a, _ra) = consumer("a", 2, 1);
        let (b, _rb) = consumer("b", 2, 1);
        let (low, _rl) = consumer("low", 1, 0);
        for c in [&low, &a, &b] {
            set.push(c.clone());
        }
        assert_eq!(picks(&mut set, 3), ["a", "b", "low"]);
        b.settled(1);
        assert_eq!(picks(&mut set, 2), ["b", "low"]);
    }

    #[test]
    fn round_robin_position_survives_a_join_and_a_leave() {
        let mut set = ConsumerSet::new(false);
        let cs: Vec<_> = ["a", "b", "c"].iter().map(|t| consumer(t, 0, 0)).collect();
        for (c, _) in &cs {
            set.push(c.clone());
        }
        assert_eq!(picks(&mut set, 2), ["a", "b"]);
        let (d, _rd) = consumer("d", 0, 0);
        set.push(d);
        assert_eq!(picks(&mut set, 2), ["c", "d"]);
        assert!(set.remove_where(|c| c.tag.as_str() == "a").is_some());
        assert_eq!(picks(&mut set, 3), ["b", "c", "d"]);
    }

    #[test]
    fn single_active_consumer_keeps_its_place_then_highest_priority_takes_over() {
        let mut set = ConsumerSet::new(true);
        let (first, _r1) = consumer("first", 0, 0);
        let (mid, _r2) = consumer("mid", 3, 0);
        let (top, _r3) = consumer("top", 9, 0);
        let (top2, _r4) = consumer("top2", 9, 0);
        for c in [&first, &mid, &top, &top2] {
            set.push(c.clone());
        }
        assert_eq!(picks(&mut set, 2), ["first", "first"]);
        set.remove_where(|c| c.tag.as_str() == "first");
        assert_eq!(picks(&mut set, 2), ["top", "top"]);
        set.remove_where(|c| c.tag.as_str() == "top");
        assert_eq!(picks(&mut set, 1), ["top2"]);
    }
}
