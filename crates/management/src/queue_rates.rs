//! The queues' part of the sampler (`routes::sample_round`): each queue's message rates and
//! each vhost's message totals, kept by visiting only the queues that changed since the last
//! round (`warren_broker::queue_activity`), not every queue. With a million idle queues a
//! round that read them all cost a fifth of a core; now it costs what changed.
//!
//! A queue's sample is its `MessageCounts` fields followed by its `message_totals`
//! (`QUEUE_TOTALS_COLUMN`); its rates are the growth since the last round over the time
//! between rounds. A queue not visited in a round did not change, so its rates are 0 and its
//! sample stands; a queue with no sample had all values 0 at the last round (it is new, or
//! was never used), so a first message shows its rate at once. A vhost's totals are kept as
//! a running sum: a visit adds the queue's new totals less its old ones, a queue found gone
//! takes its old ones away; `tests::totals_equal_a_recount_after_random_operations` checks
//! them against a full recount.
//!
//! A queue is visited in a round when it was marked since the last one, and also when it
//! has consumers, is a record of a queue another node serves, or moved in the last round:
//! those are the queues whose counters can move without a mark (a session counts a delivery
//! after the queue handed it over; another node changes what it serves), so they are read
//! until they are quiet. A quorum queue is not among them: it marks itself whenever an entry
//! applies on this node's member or its leader changes (`QueueType::counts_move_unmarked`),
//! so 10,000 idle quorum queues cost a round nothing.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;
use warren_broker::name_map::NameMap;
use warren_broker::queue_activity::{Changed, QueueNames, ReaderId};
use warren_broker::{Queue, VHost};
use warren_codec::ShortStr;

/// Where a queue's sample holds messages, messages_ready and messages_unacknowledged: after
/// the counters of `MessageCounts::fields`.
pub const QUEUE_TOTALS_COLUMN: usize = 14;

/// messages (ready + unacknowledged), messages_ready, messages_unacknowledged.
pub fn message_totals(q: &Arc<Queue>) -> [u64; 3] {
    let ready = u64::from(q.message_count());
    let unacked = u64::from(q.unacked_count());
    [ready + unacked, ready, unacked]
}

/// A queue's sample: its counters in `MessageCounts::fields` order, then its totals.
fn read(q: &Arc<Queue>) -> Vec<u64> {
    let mut values: Vec<u64> = q
        .stats
        .snapshot()
        .fields()
        .iter()
        .map(|(_, v)| *v)
        .collect();
    values.extend(message_totals(q));
    values
}

/// One queue's last sample and the rates it gave.
struct Entry {
    /// Which queue record it is (a queue deleted and declared again under its name is
    /// another); only compared, never dereferenced.
    queue: usize,
    values: Box<[u64]>,
    rates: Box<[f64]>,
}

/// One vhost's queues as the sampler last saw them.
#[derive(Default)]
struct VHostQueues {
    /// The sums of the entries' totals (`QUEUE_TOTALS_COLUMN..`).
    totals: [u64; 3],
    /// Queues whose values were not all 0 at their last visit, or whose rates were not.
    entries: NameMap<Entry>,
    /// Visited in the next round whether marked or not (see the module's comment).
    watched: QueueNames,
}

#[derive(Default)]
struct State {
    /// When the last round was taken; None before the first.
    at: Option<Instant>,
    /// How many queues the last round read (what a round costs).
    visited: usize,
    vhosts: HashMap<String, VHostQueues>,
}

/// The queues' rates and the vhosts' queue totals (see the module's comment).
pub struct QueueRates {
    reader: ReaderId,
    state: Mutex<State>,
}

impl Default for QueueRates {
    fn default() -> Self {
        QueueRates {
            reader: ReaderId::new(),
            state: Mutex::new(State::default()),
        }
    }
}

impl QueueRates {
    /// A queue's rates, in its sample's order; `None` when the sampler keeps nothing for it
    /// (every value and rate 0, or an unknown queue).
    pub fn get(&self, vhost: &str, queue: &str) -> Option<Vec<f64>> {
        let state = self.state.lock();
        let entry = state.vhosts.get(vhost)?.entries.get(queue)?;
        Some(entry.rates.to_vec())
    }

    /// A vhost's messages, ready and unacknowledged at the last round; None for a vhost the
    /// sampler has not seen yet.
    pub fn totals(&self, vhost: &str) -> Option<[u64; 3]> {
        self.state.lock().vhosts.get(vhost).map(|v| v.totals)
    }

    /// One round over `vhosts` (every vhost of the broker: the others are forgotten);
    /// returns each one's totals, in their order.
    pub fn round(&self, vhosts: &[Arc<VHost>]) -> Vec<[u64; 3]> {
        let at = Instant::now();
        let since_s = self
            .state
            .lock()
            .at
            .map(|last| at.duration_since(last).as_secs_f64().max(1e-3));
        let mut visited = 0;
        let totals = vhosts
            .iter()
            .map(|vhost| self.visit_vhost(vhost, since_s, &mut visited))
            .collect();
        let mut state = self.state.lock();
        state.visited = visited;
        state
            .vhosts
            .retain(|name, _| vhosts.iter().any(|v| &v.name == name));
        state.at = Some(at);
        totals
    }

    /// Visits the queues of one vhost that changed or are watched; returns its totals.
    fn visit_vhost(&self, vhost: &VHost, since_s: Option<f64>, visited: &mut usize) -> [u64; 3] {
        let changed = vhost.changed_queues(self.reader);
        let names: Vec<ShortStr> = {
            let mut state = self.state.lock();
            let ledger = state.vhosts.entry(vhost.name.clone()).or_default();
            match changed {
                Changed::Everything => {
                    // The first look at this vhost (new, or made again under its name):
                    // no baseline, so every queue is read.
                    *ledger = VHostQueues::default();
                    vhost.queues().iter().map(|q| q.name.clone()).collect()
                }
                Changed::Queues(mut names) => {
                    names.extend(std::mem::take(&mut ledger.watched));
                    names.into_iter().collect()
                }
            }
        };
        *visited += names.len();
        for name in names {
            let queue = vhost.queue(&name);
            // Cleared before the read: a change from here on marks the queue again.
            let read = queue.map(|q| {
                q.begin_reading();
                let watch = q.consumer_count() > 0 || q.counts_move_unmarked();
                (Arc::as_ptr(&q) as usize, read(&q), watch)
            });
            // Locked per queue, so a request reading rates never waits for a whole round.
            let mut state = self.state.lock();
            let Some(ledger) = state.vhosts.get_mut(&vhost.name) else {
                break;
            };
            ledger.update(name, read, since_s);
        }
        let state = self.state.lock();
        state.vhosts.get(&vhost.name).map_or([0; 3], |v| v.totals)
    }
}

impl VHostQueues {
    /// Takes one queue's new reading (`None`: the queue is gone) into the entries, the
    /// totals and the watch list.
    fn update(
        &mut self,
        name: ShortStr,
        read: Option<(usize, Vec<u64>, bool)>,
        since_s: Option<f64>,
    ) {
        let old = self.entries.remove(&name);
        let previous = match (&old, &read) {
            (Some(old), Some((queue, ..))) if old.queue == *queue => Some(&*old.values),
            _ => None,
        };
        if let Some(old) = &old {
            self.add_totals(&old.values, false);
        }
        let Some((queue, values, watch)) = read else {
            return;
        };
        self.add_totals(&values, true);
        let value = |i: usize| previous.map_or(0, |p| p.get(i).copied().unwrap_or(0));
        let moved = values.iter().enumerate().any(|(i, v)| *v != value(i));
        if watch || moved {
            self.watched.insert(name.clone());
        }
        if !moved && values.iter().all(|v| *v == 0) {
            return;
        }
        let rates = match since_s {
            Some(secs) => values
                .iter()
                .enumerate()
                .map(|(i, v)| (*v as f64 - value(i) as f64) / secs)
                .collect(),
            None => vec![0.0; values.len()].into_boxed_slice(),
        };
        self.entries.insert(
            name,
            Entry {
                queue,
                values: values.into(),
                rates,
            },
        );
    }

    /// Adds (or takes away) a sample's totals to the vhost's.
    fn add_totals(&mut self, values: &[u64], add: bool) {
        let columns = values.get(QUEUE_TOTALS_COLUMN..).unwrap_or_default();
        for (total, v) in self.totals.iter_mut().zip(columns) {
            *total = match add {
                true => total.saturating_add(*v),
                false => total.saturating_sub(*v),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use proptest::prelude::*;
    use std::time::Duration;
    use warren_broker::{Broker, Message, QueueDeclaration, QueuedMessage};
    use warren_codec::BasicProperties;

    fn declare(vhost: &Arc<VHost>, name: &str) {
        vhost
            .declare_queue(QueueDeclaration::plain(name), 1)
            .unwrap();
    }

    fn publish(queue: &Arc<Queue>) {
        let message = Message::new(
            ShortStr::from(""),
            queue.name.clone(),
            &BasicProperties::default(),
            Bytes::new(),
            Bytes::from_static(b"m"),
        );
        queue.publish(Arc::new(message), None);
    }

    fn visited(rates: &QueueRates) -> usize {
        rates.state.lock().visited
    }

    #[test]
    fn an_idle_round_reads_nothing_and_a_queue_used_after_idle_rounds_shows_its_rate() {
        let broker = Broker::new(1 << 30, None);
        let vhost = broker.vhost("/").unwrap();
        for i in 0..1000 {
            declare(&vhost, &format!("q{i}"));
        }
        let vhosts = [vhost.clone()];
        let rates = QueueRates::default();
        rates.round(&vhosts);
        assert_eq!(visited(&rates), 1000, "the first round makes the baseline");
        for _ in 0..3 {
            assert_eq!(rates.round(&vhosts), [[0, 0, 0]]);
            assert_eq!(visited(&rates), 0, "nothing changed, nothing read");
        }
        assert!(rates.get("/", "q7").is_none());

        let q7 = vhost.queue("q7").unwrap();
        publish(&q7);
        publish(&q7);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(rates.round(&vhosts), [[2, 2, 0]]);
        assert_eq!(visited(&rates), 1);
        let shown = rates.get("/", "q7").expect("a used queue has rates");
        let (publish_rate, messages_rate) = (shown[0], shown[QUEUE_TOTALS_COLUMN]);
        assert!(publish_rate > 0.0, "{shown:?}");
        assert_eq!(publish_rate, messages_rate, "two publishes, two messages");

        // Quiet again: read once more (it moved), its rates fall to 0, then it is left alone.
        rates.round(&vhosts);
        assert_eq!(visited(&rates), 1);
        let shown = rates.get("/", "q7").unwrap();
        assert!(shown.iter().all(|r| *r == 0.0), "{shown:?}");
        rates.round(&vhosts);
        assert_eq!(visited(&rates), 0);
        assert_eq!(rates.totals("/"), Some([2, 2, 0]));

        // Deleted: its messages leave the totals.
        vhost.delete_queue("q7", false, false, 1).unwrap();
        assert_eq!(rates.round(&vhosts), [[0, 0, 0]]);
        assert!(rates.get("/", "q7").is_none());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Declare(usize),
        Publish(usize),
        /// basic.get, with or without a later ack.
        Get(usize, bool),
        /// Settles what gets hold: acked, or requeued.
        Settle(bool),
        Purge(usize),
        Delete(usize),
        Round,
    }

    fn op() -> impl Strategy<Value = Op> {
        let queue = 0..6usize;
        prop_oneof![
            1 => queue.clone().prop_map(Op::Declare),
            3 => queue.clone().prop_map(Op::Publish),
            2 => (queue.clone(), any::<bool>()).prop_map(|(q, ack)| Op::Get(q, ack)),
            1 => any::<bool>().prop_map(Op::Settle),
            1 => queue.clone().prop_map(Op::Purge),
            1 => queue.prop_map(Op::Delete),
            1 => Just(Op::Round),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// After any mix of operations, a round's totals are a recount's, and every queue's
        /// kept sample is what it reads now (a queue without one reads all 0).
        #[test]
        fn totals_equal_a_recount_after_random_operations(ops in prop::collection::vec(op(), 1..80)) {
            let broker = Broker::new(1 << 30, None);
            let vhost = broker.vhost("/").unwrap();
            let vhosts = [vhost.clone()];
            let rates = QueueRates::default();
            let mut held: Vec<(Arc<Queue>, QueuedMessage)> = Vec::new();
            for op in ops {
                let queue = |i: usize| vhost.queue(&format!("q{i}"));
                match op {
                    Op::Declare(i) => declare(&vhost, &format!("q{i}")),
                    Op::Publish(i) => queue(i).iter().for_each(publish),
                    Op::Get(i, ack) => {
                        if let Some(q) = queue(i) {
                            if let Some((m, _)) = q.get(!ack) {
                                if ack {
                                    held.push((q, m));
                                }
                            }
                        }
                    }
                    Op::Settle(ack) => {
                        for (q, m) in held.drain(..) {
                            match ack {
                                true => q.settle(vec![m], Vec::new(), Vec::new()),
                                false => q.settle(Vec::new(), vec![m], Vec::new()),
                            }
                        }
                    }
                    Op::Purge(i) => {
                        queue(i).map(|q| q.purge());
                    }
                    Op::Delete(i) => {
                        let _ = vhost.delete_queue(&format!("q{i}"), false, false, 1);
                    }
                    Op::Round => {
                        rates.round(&vhosts);
                    }
                }
            }
            let totals = rates.round(&vhosts);
            let mut recount = [0u64; 3];
            for q in vhost.queues() {
                for (sum, n) in recount.iter_mut().zip(message_totals(&q)) {
                    *sum += n;
                }
                let state = rates.state.lock();
                let kept = state.vhosts["/"].entries.get(q.name.as_str()).map(|e| e.values.to_vec());
                let now = read(&q);
                match kept {
                    Some(kept) => prop_assert_eq!(kept, now),
                    None => prop_assert!(now.iter().all(|v| *v == 0), "{:?}", now),
                }
            }
            prop_assert_eq!(totals, vec![recount]);
        }
    }
}
