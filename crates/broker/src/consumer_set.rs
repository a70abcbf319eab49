//! `ConsumerSet`: a queue's consumers in the order deliveries go to them — consumer
//! priorities (`x-priority` on basic.consume) as RabbitMQ has them.
//!
//! The highest-priority consumers get every message while any of them has credit, round-robin
//! among themselves in the order they joined; a lower priority gets one only while every
//! higher consumer is blocked (prefetch or pipeline). Each priority is a `Group`, so the
//! common case (every consumer at the default priority 0) is one group.
//!
//! A delivery costs the same however many consumers are blocked: a consumer found without
//! credit is parked (it is then marked starved, see `Consumer::has_credit`) and not looked at
//! again until whoever frees its credit notes it in `WokenConsumers`, which the next pick
//! drains back into the round-robin. Joining and leaving cost O(log n), so a connection with
//! many consumers releases them in linear time.
//!
//! With `x-single-active-consumer` only the first consumer receives. It keeps its place while
//! consumers of any priority join; when it leaves, the highest-priority consumer that joined
//! first takes over (RabbitMQ 3.13 for classic queues).

use crate::consumer::{ConnectionId, Consumer};
use crate::woken_consumers::{ConsumerKey, WokenConsumers};
use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use warren_codec::ShortStr;

/// One priority's consumers, each either ready (may have credit) or parked (found without
/// credit and not woken since), by the order they joined.
#[derive(Debug)]
struct Group {
    priority: i64,
    ready: BTreeMap<u64, Arc<Consumer>>,
    parked: BTreeMap<u64, Arc<Consumer>>,
    /// The round-robin's position: the next delivery goes to the first ready consumer that
    /// joined at or after it, else to the first ready one.
    next: u64,
    /// The last of the group to join, ready or parked: once it is served the round-robin
    /// starts again from the first, before any consumer that joins later.
    last: u64,
}

impl Group {
    fn is_empty(&self) -> bool {
        self.ready.is_empty() && self.parked.is_empty()
    }

    /// The next ready consumer with credit, by the round-robin; those without are parked.
    fn pick(&mut self) -> Option<&Arc<Consumer>> {
        loop {
            // From the first when the round went round (always so with one consumer): a
            // range search costs more than the rest of a pick.
            let (&joined, consumer) = match self.next {
                0 => self.ready.first_key_value(),
                next => self
                    .ready
                    .range(next..)
                    .next()
                    .or_else(|| self.ready.first_key_value()),
            }?;
            if consumer.has_credit() {
                self.next = if joined == self.last { 0 } else { joined + 1 };
                // Looked up again: the borrow cannot outlive the parking below.
                return self.ready.get(&joined);
            }
            if let Some(c) = self.ready.remove(&joined) {
                self.parked.insert(joined, c);
            }
        }
    }

    fn remove(&mut self, joined: u64) -> Option<Arc<Consumer>> {
        let consumer = self
            .ready
            .remove(&joined)
            .or_else(|| self.parked.remove(&joined))?;
        if joined == self.last {
            let ready = self.ready.last_key_value().map_or(0, |(k, _)| *k);
            let parked = self.parked.last_key_value().map_or(0, |(k, _)| *k);
            self.last = ready.max(parked);
        }
        Some(consumer)
    }
}

/// What names a consumer on its queue: the channel that consumes and its tag there.
type ChannelTag = (ConnectionId, u16, ShortStr);

/// A queue's consumers. Absent while there are none: most queues of a broker with many have
/// no consumer most of the time, and this is then all that each one costs (a pointer and a
/// flag; the set's maps and its wake inbox come with the first consumer and go with the last).
#[derive(Debug)]
pub struct ConsumerSet {
    consumers: Option<Box<Consumers>>,
    single_active: bool,
}

/// A `ConsumerSet` holding at least one consumer (none for a moment while one is removed).
#[derive(Debug)]
struct Consumers {
    /// By priority, highest first; empty with a single active consumer.
    groups: Vec<Group>,
    /// With a single active consumer: the one that receives.
    active: Option<(ConsumerKey, Arc<Consumer>)>,
    /// With a single active consumer: the others, in the order they take over.
    waiting: BTreeMap<(Reverse<i64>, u64), Arc<Consumer>>,
    /// Where each consumer is.
    keys: HashMap<ChannelTag, ConsumerKey>,
    /// Consumers with `exclusive` (at most one, then alone).
    exclusive: usize,
    /// The join order the next consumer gets.
    next_joined: u64,
    woken: Arc<WokenConsumers>,
    single_active: bool,
}

fn channel_tag(c: &Consumer) -> ChannelTag {
    (c.connection, c.channel, c.tag.clone())
}

impl ConsumerSet {
    pub fn new(single_active: bool) -> ConsumerSet {
        ConsumerSet {
            consumers: None,
            single_active,
        }
    }

    pub fn len(&self) -> usize {
        self.consumers.as_ref().map_or(0, |c| c.len())
    }

    pub fn is_empty(&self) -> bool {
        self.consumers.is_none()
    }

    /// Some consumer consumes exclusively.
    pub fn has_exclusive(&self) -> bool {
        self.consumers.as_ref().is_some_and(|c| c.has_exclusive())
    }

    /// Every consumer, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Consumer>> {
        self.consumers.iter().flat_map(|c| c.iter())
    }

    /// Adds a consumer behind those of its priority (and higher).
    pub fn push(&mut self, consumer: Arc<Consumer>) {
        let single_active = self.single_active;
        self.consumers
            .get_or_insert_with(|| Box::new(Consumers::new(single_active)))
            .push(consumer);
    }

    /// Removes the consumer of `connection`'s `channel` with `tag`.
    pub fn remove(
        &mut self,
        connection: ConnectionId,
        channel: u16,
        tag: &ShortStr,
    ) -> Option<Arc<Consumer>> {
        let removed = self.consumers.as_mut()?.remove(connection, channel, tag);
        self.forget_if_empty();
        removed
    }

    /// Removes `consumer` itself (not another with its tag).
    pub fn remove_consumer(&mut self, consumer: &Consumer) -> Option<Arc<Consumer>> {
        let removed = self.consumers.as_mut()?.remove_consumer(consumer);
        self.forget_if_empty();
        removed
    }

    pub fn take_all(&mut self) -> Vec<Arc<Consumer>> {
        self.consumers
            .take()
            .map_or_else(Vec::new, |c| c.iter().cloned().collect())
    }

    /// The consumer the next message goes to: the first with credit, by priority, then
    /// round-robin. Every consumer looked at and found without credit is marked starved (see
    /// `Consumer::has_credit`) and parked until whoever frees its credit wakes it.
    pub fn pick(&mut self) -> Option<&Arc<Consumer>> {
        self.consumers.as_mut()?.pick()
    }

    /// The last consumer left: the set's maps and inbox go with it (a consumer that left
    /// and is still woken notes into the old inbox, which nobody reads).
    fn forget_if_empty(&mut self) {
        if self.consumers.as_ref().is_some_and(|c| c.is_empty()) {
            self.consumers = None;
        }
    }
}

impl Consumers {
    fn new(single_active: bool) -> Consumers {
        Consumers {
            groups: Vec::new(),
            active: None,
            waiting: BTreeMap::new(),
            keys: HashMap::new(),
            exclusive: 0,
            next_joined: 0,
            woken: Arc::new(WokenConsumers::default()),
            single_active,
        }
    }

    fn len(&self) -> usize {
        self.keys.len()
    }

    fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    fn has_exclusive(&self) -> bool {
        self.exclusive > 0
    }

    fn iter(&self) -> impl Iterator<Item = &Arc<Consumer>> {
        let groups = self
            .groups
            .iter()
            .flat_map(|g| g.ready.values().chain(g.parked.values()));
        let active = self.active.iter().map(|(_, c)| c);
        active.chain(self.waiting.values()).chain(groups)
    }

    fn push(&mut self, consumer: Arc<Consumer>) {
        let key = ConsumerKey {
            priority: consumer.priority,
            joined: self.next_joined,
        };
        self.next_joined += 1;
        if let Some(old) = self.keys.insert(channel_tag(&consumer), key) {
            // A channel's tags are unique; should one come twice, the older one goes.
            self.take(old);
        }
        self.exclusive += usize::from(consumer.exclusive);
        if self.single_active {
            if self.active.is_none() {
                self.active = Some((key, consumer));
            } else {
                self.waiting
                    .insert((Reverse(key.priority), key.joined), consumer);
            }
            return;
        }
        consumer.joined(self.woken.clone(), key);
        let at = self.groups.partition_point(|g| g.priority > key.priority);
        if self
            .groups
            .get(at)
            .is_none_or(|g| g.priority != key.priority)
        {
            self.groups.insert(
                at,
                Group {
                    priority: key.priority,
                    ready: BTreeMap::new(),
                    parked: BTreeMap::new(),
                    next: 0,
                    last: 0,
                },
            );
        }
        let group = &mut self.groups[at];
        group.ready.insert(key.joined, consumer);
        group.last = key.joined;
    }

    fn remove(
        &mut self,
        connection: ConnectionId,
        channel: u16,
        tag: &ShortStr,
    ) -> Option<Arc<Consumer>> {
        let key = self.keys.remove(&(connection, channel, tag.clone()))?;
        self.take(key)
    }

    fn remove_consumer(&mut self, consumer: &Consumer) -> Option<Arc<Consumer>> {
        let id = channel_tag(consumer);
        let key = *self.keys.get(&id)?;
        let found = self.find(key)?;
        if !std::ptr::eq(&**found, consumer) {
            return None;
        }
        self.keys.remove(&id);
        self.take(key)
    }

    fn find(&self, key: ConsumerKey) -> Option<&Arc<Consumer>> {
        if self.single_active {
            return match &self.active {
                Some((k, c)) if *k == key => Some(c),
                _ => self.waiting.get(&(Reverse(key.priority), key.joined)),
            };
        }
        let g = self.groups.iter().find(|g| g.priority == key.priority)?;
        g.ready
            .get(&key.joined)
            .or_else(|| g.parked.get(&key.joined))
    }

    /// Takes the consumer at `key` out of where it sits (its entry in `keys` already gone).
    fn take(&mut self, key: ConsumerKey) -> Option<Arc<Consumer>> {
        let consumer = if self.single_active {
            if self.active.as_ref().is_some_and(|(k, _)| *k == key) {
                // The highest priority that joined first takes over.
                let gone = self.active.take().map(|(_, c)| c);
                self.active = self
                    .waiting
                    .pop_first()
                    .map(|((Reverse(priority), joined), c)| (ConsumerKey { priority, joined }, c));
                gone
            } else {
                self.waiting.remove(&(Reverse(key.priority), key.joined))
            }
        } else {
            let at = self
                .groups
                .iter()
                .position(|g| g.priority == key.priority)?;
            let consumer = self.groups[at].remove(key.joined);
            if self.groups[at].is_empty() {
                self.groups.remove(at);
            }
            consumer
        }?;
        self.exclusive -= usize::from(consumer.exclusive);
        Some(consumer)
    }

    fn pick(&mut self) -> Option<&Arc<Consumer>> {
        if self.single_active {
            let (_, active) = self.active.as_ref()?;
            return active.has_credit().then_some(active);
        }
        if let Some(woken) = self.woken.take() {
            self.unpark(woken);
        }
        self.groups.iter_mut().find_map(Group::pick)
    }

    /// Puts woken consumers back into their round-robin (those that left since are gone).
    fn unpark(&mut self, woken: Vec<ConsumerKey>) {
        for key in woken {
            let Some(g) = self.groups.iter_mut().find(|g| g.priority == key.priority) else {
                continue;
            };
            if let Some(c) = g.parked.remove(&key.joined) {
                g.ready.insert(key.joined, c);
            }
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

    fn remove(set: &mut ConsumerSet, tag: &str) -> Option<Arc<Consumer>> {
        set.remove(1, 1, &ShortStr::from(tag))
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
        assert!(remove(&mut set, "a").is_some());
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
        remove(&mut set, "first");
        assert_eq!(picks(&mut set, 2), ["top", "top"]);
        remove(&mut set, "top");
        assert_eq!(picks(&mut set, 1), ["top2"]);
    }

    /// A consumer at its prefetch is parked: deliveries after that do not look at it (its
    /// starved mark, cleared here by hand, stays clear) until its credit comes back.
    #[test]
    fn a_delivery_does_not_look_at_consumers_without_credit() {
        let mut set = ConsumerSet::new(false);
        let cs: Vec<_> = (0..1000)
            .map(|i| consumer(&format!("c{i}"), 0, 1))
            .collect();
        for (c, _) in &cs {
            set.push(c.clone());
        }
        assert_eq!(
            picks(&mut set, 1001).len(),
            1000,
            "each takes one, then none"
        );
        for (c, _) in &cs {
            assert!(c.starved_credit.swap(false, SeqCst));
        }
        let (free, _rf) = consumer("free", 0, 0);
        set.push(free);
        assert_eq!(picks(&mut set, 50), vec!["free"; 50]);
        let looked_at = cs
            .iter()
            .filter(|(c, _)| c.starved_credit.load(SeqCst))
            .count();
        assert_eq!(looked_at, 0, "blocked consumers were looked at again");
        // One acks (marked starved again, as its parking left it): it is served in its turn.
        cs[500].0.starved_credit.store(true, SeqCst);
        cs[500].0.settled(1);
        assert_eq!(picks(&mut set, 2), ["c500", "free"]);
    }

    /// A queue without consumers pays for its set a pointer and a flag; the last consumer
    /// to leave takes the maps with it, and the next one is served as the first was.
    #[test]
    fn an_emptied_set_holds_nothing_and_serves_the_next_consumer() {
        assert!(std::mem::size_of::<ConsumerSet>() <= 16);
        let mut set = ConsumerSet::new(false);
        let (a, _ra) = consumer("a", 0, 1);
        set.push(a.clone());
        assert_eq!(picks(&mut set, 2), ["a"], "a is at its prefetch");
        assert!(remove(&mut set, "a").is_some());
        assert!(set.is_empty() && set.consumers.is_none());
        // a, gone, is woken later: nothing reaches the new set.
        a.settled(1);
        a.wake_if_starved();
        let (b, _rb) = consumer("b", 0, 0);
        set.push(b);
        assert_eq!(picks(&mut set, 2), ["b", "b"]);
        assert_eq!(set.take_all().len(), 1);
        assert!(set.consumers.is_none());
    }

    #[test]
    fn removing_each_consumer_of_many_leaves_the_others_in_turn() {
        let mut set = ConsumerSet::new(false);
        let cs: Vec<_> = (0..20_000)
            .map(|i| consumer(&format!("c{i}"), i64::from(i % 3 == 0), 0))
            .collect();
        for (c, _) in &cs {
            set.push(c.clone());
        }
        for i in (0..20_000).filter(|i| i % 10 != 7) {
            assert!(remove(&mut set, &format!("c{i}")).is_some());
        }
        assert_eq!(set.len(), 2000);
        // Left: c7, c17, ...; priority 1 where i % 3 == 0 (c27, c57, ...) first.
        assert_eq!(picks(&mut set, 3), ["c27", "c57", "c87"]);
        assert_eq!(set.take_all().len(), 2000);
        assert!(set.is_empty());
    }

    /// The pick before parking (`ConsumerSet` until parked consumers were kept apart), as
    /// the reference: one list by priority, each group scanned round-robin from its position.
    struct ScanningSet {
        list: Vec<Arc<Consumer>>,
        /// (priority, next offset in its run)
        next: Vec<(i64, usize)>,
    }

    impl ScanningSet {
        fn push(&mut self, c: Arc<Consumer>) {
            let at = self.list.partition_point(|x| x.priority >= c.priority);
            self.list.insert(at, c);
        }

        fn pick(&mut self) -> Option<&Arc<Consumer>> {
            let mut start = 0;
            while start < self.list.len() {
                let priority = self.list[start].priority;
                let end = start + self.list[start..].partition_point(|c| c.priority == priority);
                let n = end - start;
                let slot = match self.next.iter().position(|(p, _)| *p == priority) {
                    Some(i) => i,
                    None => {
                        self.next.push((priority, 0));
                        self.next.len() - 1
                    }
                };
                let from = self.next[slot].1 % n;
                for i in 0..n {
                    let offset = (from + i) % n;
                    if self.list[start + offset].has_credit() {
                        self.next[slot].1 = (offset + 1) % n;
                        return Some(&self.list[start + offset]);
                    }
                }
                start = end;
            }
            None
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Join { priority: i64, prefetch: u32 },
        Pick,
        Ack(usize),
    }

    fn op() -> impl proptest::strategy::Strategy<Value = Op> {
        use proptest::prelude::*;
        prop_oneof![
            1 => (-1i64..=1, 0u32..=3).prop_map(|(priority, prefetch)| Op::Join { priority, prefetch }),
            6 => Just(Op::Pick),
            3 => (0usize..64).prop_map(Op::Ack),
        ]
    }

    proptest::proptest! {
        /// Parking changes which consumers a delivery looks at, never which one it picks:
        /// the same joins, deliveries and acks (each acking consumer woken as its channel
        /// does) pick the same consumers as the scanning set.
        #[test]
        fn picks_as_the_scanning_set_did(ops in proptest::collection::vec(op(), 1..200)) {
            let mut set = ConsumerSet::new(false);
            let mut reference = ScanningSet { list: Vec::new(), next: Vec::new() };
            // Twins: each side charges and frees its own consumers' credit.
            let mut twins: Vec<(Arc<Consumer>, Arc<Consumer>)> = Vec::new();
            let mut receivers = Vec::new();
            for op in ops {
                match op {
                    Op::Join { priority, prefetch } => {
                        let tag = format!("c{}", twins.len());
                        let (a, ra) = consumer(&tag, priority, prefetch);
                        let (b, rb) = consumer(&tag, priority, prefetch);
                        receivers.extend([ra, rb]);
                        set.push(a.clone());
                        reference.push(b.clone());
                        twins.push((a, b));
                    }
                    Op::Pick => {
                        let got = set.pick().cloned();
                        let want = reference.pick().cloned();
                        proptest::prop_assert_eq!(
                            got.as_ref().map(|c| c.tag.to_string()),
                            want.as_ref().map(|c| c.tag.to_string())
                        );
                        if let (Some(a), Some(b)) = (got, want) {
                            a.take_credit(1);
                            b.take_credit(1);
                        }
                    }
                    Op::Ack(i) => {
                        if twins.is_empty() {
                            continue;
                        }
                        let (a, b) = &twins[i % twins.len()];
                        if a.unacked.load(SeqCst) > 0 {
                            a.settled(1);
                            a.wake_if_starved();
                            b.settled(1);
                        }
                    }
                }
            }
        }
    }
}
