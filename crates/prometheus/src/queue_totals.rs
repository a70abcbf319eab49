//! `/metrics`' queue sums kept between scrapes: a scrape reads only the queues that changed
//! since the last one (`warren_broker::queue_activity`), adds each one's new part
//! (`queues::Part`) and takes its old one away, instead of reading every queue (117 ms a
//! scrape at 100,000 queues). `/metrics/per-object` and `/metrics/detailed` still read every
//! queue: they list them all anyway.
//!
//! A queue's part is kept only when it is not all 0 or the queue is not served here (a
//! declared, never used queue costs nothing); the queue count is the vhost's count less the
//! queues served elsewhere. As in the management sampler (`queue_rates.rs` there), queues
//! whose readings can move without a mark are read at every scrape until they are quiet:
//! those with consumers (their consumer capacity moves with time, a session counts
//! deliveries after the queue handed them over), those not of the classic type (a quorum
//! queue's commits, its group's indexes), those served elsewhere, and those that moved at the
//! last scrape. Consumer capacity is summed over the queues read (every queue with consumers
//! is), not kept.

use crate::queues::{Part, Sums};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use warren_broker::name_map::NameMap;
use warren_broker::queue_activity::{Changed, QueueNames, ReaderId};
use warren_broker::{Broker, Queue, VHost};
use warren_codec::ShortStr;

/// One queue's last reading.
struct Entry {
    /// Which queue record it is (compared, never dereferenced).
    queue: usize,
    served: bool,
    part: Part,
}

#[derive(Default)]
struct VHostTotals {
    sum: Part,
    /// Entries whose queue is not served here.
    not_served: u64,
    entries: NameMap<Entry>,
    watched: QueueNames,
    /// Queues with a Raft group here (`raft.rs` reads them at each scrape).
    replicated: QueueNames,
}

/// The sums of every vhost's queues, per vhost, kept from the queues that changed.
pub struct QueueTotals {
    reader: ReaderId,
    vhosts: Mutex<HashMap<String, VHostTotals>>,
}

impl Default for QueueTotals {
    fn default() -> Self {
        QueueTotals {
            reader: ReaderId::new(),
            vhosts: Mutex::new(HashMap::new()),
        }
    }
}

/// What one scrape needs of the queues.
pub struct Taken {
    pub sums: Sums,
    /// The queues with a Raft group on this node.
    pub replicated: Vec<(Arc<VHost>, Arc<Queue>)>,
}

impl QueueTotals {
    /// Brings the sums up to date and returns them.
    pub fn take(&self, broker: &Broker) -> Taken {
        // One scrape at a time: two would each take half of the changes.
        let mut ledgers = self.vhosts.lock();
        let vhosts = broker.vhosts();
        ledgers.retain(|name, _| vhosts.iter().any(|v| &v.name == name));
        let mut sums = Sums::default();
        let mut replicated = Vec::new();
        for vhost in &vhosts {
            let ledger = ledgers.entry(vhost.name.clone()).or_default();
            let names: Vec<ShortStr> = match vhost.changed_queues(self.reader) {
                Changed::Everything => {
                    *ledger = VHostTotals::default();
                    vhost.queues().iter().map(|q| q.name.clone()).collect()
                }
                Changed::Queues(mut names) => {
                    names.extend(std::mem::take(&mut ledger.watched));
                    names.extend(ledger.replicated.iter().cloned());
                    names.into_iter().collect()
                }
            };
            for name in names {
                let queue = vhost.queue(&name);
                if let Some(q) = &queue {
                    q.begin_reading();
                    let depth = q.depth();
                    if q.served_here() {
                        sums.capacity += depth.consumer_capacity.unwrap_or(0.0);
                    }
                    let part = Part::of(&depth, &q.stats.snapshot());
                    ledger.update(&name, Some((q, part)));
                } else {
                    ledger.update(&name, None);
                }
            }
            for name in &ledger.replicated {
                if let Some(q) = vhost.queue(name) {
                    replicated.push((vhost.clone(), q));
                }
            }
            sums.part.add(&ledger.sum, true);
            sums.queues += (vhost.queue_count() as u64).saturating_sub(ledger.not_served);
        }
        Taken { sums, replicated }
    }
}

impl VHostTotals {
    /// Takes one queue's new reading (`None`: gone) into the sum, the entries and the
    /// watch lists.
    fn update(&mut self, name: &ShortStr, read: Option<(&Arc<Queue>, Part)>) {
        let old = self.entries.remove(name);
        if let Some(old) = &old {
            self.account(old, false);
        }
        let Some((queue, part)) = read else {
            self.replicated.remove(name);
            return;
        };
        let served = queue.served_here();
        let part = match served {
            true => part,
            false => Part::default(),
        };
        let id = Arc::as_ptr(queue) as usize;
        // A queue without an entry was served here with every reading 0.
        let moved = match old.as_ref().filter(|old| old.queue == id) {
            Some(old) => old.part != part || old.served != served,
            None => !(served && part.is_zero()),
        };
        if moved || part.consumers() > 0 || queue.counts_move_unmarked() {
            self.watched.insert(name.clone());
        }
        match queue.replicas().is_some_and(|r| r.group.is_some()) {
            true => self.replicated.insert(name.clone()),
            false => self.replicated.remove(name),
        };
        if served && part.is_zero() {
            return;
        }
        let entry = Entry {
            queue: id,
            served,
            part,
        };
        self.account(&entry, true);
        self.entries.insert(name.clone(), entry);
    }

    fn account(&mut self, entry: &Entry, add: bool) {
        self.sum.add(&entry.part, add);
        if !entry.served {
            self.not_served = match add {
                true => self.not_served + 1,
                false => self.not_served.saturating_sub(1),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queues::QueueReadings;
    use proptest::prelude::*;
    use warren_broker::{Message, QueueDeclaration, QueuedMessage};
    use warren_codec::BasicProperties;

    #[derive(Debug, Clone)]
    enum Op {
        /// Declares queue `.1` in vhost `.0` (0: `/`, 1: `other`).
        Declare(usize, usize),
        Publish(usize, usize),
        /// basic.get, held unacked when `.2`.
        Get(usize, usize, bool),
        /// Acks (or requeues) what gets hold.
        Settle(bool),
        Purge(usize, usize),
        Delete(usize, usize),
        /// Deletes the vhost `other` and makes it again, empty.
        RemakeOther,
        Scrape,
    }

    fn op() -> impl Strategy<Value = Op> {
        let at = || (0..2usize, 0..5usize);
        prop_oneof![
            1 => at().prop_map(|(v, q)| Op::Declare(v, q)),
            3 => at().prop_map(|(v, q)| Op::Publish(v, q)),
            2 => (at(), any::<bool>()).prop_map(|((v, q), ack)| Op::Get(v, q, ack)),
            1 => any::<bool>().prop_map(Op::Settle),
            1 => at().prop_map(|(v, q)| Op::Purge(v, q)),
            1 => at().prop_map(|(v, q)| Op::Delete(v, q)),
            1 => Just(Op::RemakeOther),
            1 => Just(Op::Scrape),
        ]
    }

    fn run(broker: &Broker, held: &mut Vec<(Arc<Queue>, QueuedMessage)>, op: Op) {
        let vhost = |v: usize| broker.vhost(["/", "other"][v]);
        let queue = |v: usize, q: usize| vhost(v).and_then(|vhost| vhost.queue(&format!("q{q}")));
        match op {
            Op::Declare(v, q) => {
                if let Some(vhost) = vhost(v) {
                    let declaration = QueueDeclaration::plain(&format!("q{q}"));
                    vhost.declare_queue(declaration, 1).unwrap();
                }
            }
            Op::Publish(v, q) => {
                if let Some(queue) = queue(v, q) {
                    let body = bytes::Bytes::from_static(b"body");
                    let props = BasicProperties::default();
                    let message = Message::new(
                        ShortStr::from(""),
                        queue.name.clone(),
                        &props,
                        body.clone(),
                        body,
                    );
                    queue.publish(Arc::new(message), None);
                }
            }
            Op::Get(v, q, ack) => {
                if let Some(queue) = queue(v, q) {
                    if let Some((m, _)) = queue.get(!ack) {
                        MessageStats::add(&queue.stats.get, 1);
                        if ack {
                            held.push((queue, m));
                        }
                    }
                }
            }
            Op::Settle(ack) => {
                for (queue, m) in held.drain(..) {
                    match ack {
                        true => queue.settle(vec![m], Vec::new(), Vec::new()),
                        false => queue.settle(Vec::new(), vec![m], Vec::new()),
                    }
                }
            }
            Op::Purge(v, q) => {
                if let Some(queue) = queue(v, q) {
                    queue.purge();
                }
            }
            Op::Delete(v, q) => {
                if let Some(vhost) = vhost(v) {
                    let _ = vhost.delete_queue(&format!("q{q}"), false, false, 1);
                }
            }
            Op::RemakeOther => {
                broker.delete_vhost("other");
                broker.add_vhost("other").unwrap();
            }
            Op::Scrape => {}
        }
    }

    use warren_broker::MessageStats;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// After any mix of operations, the kept sums are a full recount's, and a scrape
        /// with nothing changed reads no queue twice.
        #[test]
        fn sums_equal_a_recount_after_random_operations(ops in prop::collection::vec(op(), 1..80)) {
            let broker = Broker::new(1 << 30, None);
            broker.add_vhost("other").unwrap();
            let totals = QueueTotals::default();
            let mut held = Vec::new();
            for op in ops {
                let scrape = matches!(op, Op::Scrape);
                run(&broker, &mut held, op);
                if scrape {
                    totals.take(&broker);
                }
            }
            let kept = totals.take(&broker).sums;
            let recount = QueueReadings::take(&broker, false).sums;
            prop_assert_eq!(kept.queues, recount.queues);
            prop_assert_eq!(kept.part, recount.part);
        }
    }

    #[test]
    fn a_scrape_with_nothing_changed_reads_no_queue() {
        let broker = Broker::new(1 << 30, None);
        let vhost = broker.vhost("/").unwrap();
        let mut held = Vec::new();
        for q in 0..5 {
            run(&broker, &mut held, Op::Declare(0, q));
        }
        run(&broker, &mut held, Op::Publish(0, 3));
        let totals = QueueTotals::default();
        totals.take(&broker);
        // q3 moved at the first read (from nothing): read once more, then left alone.
        totals.take(&broker);
        assert!(matches!(vhost.changed_queues(totals.reader), Changed::Queues(n) if n.is_empty()));
        let ledgers = totals.vhosts.lock();
        assert!(ledgers["/"].watched.is_empty(), "nothing to read again");
        assert_eq!(ledgers["/"].entries.len(), 1, "only the used queue is kept");
    }
}
