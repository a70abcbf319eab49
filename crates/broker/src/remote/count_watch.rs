//! Which of the queues a peer bound over a forwarding link the serving side looks at in a
//! count round (`Serving::report_counts`): those marked since the last round
//! (`queue_activity.rs`, the link being one more reader of every vhost's marks), and the few
//! that are hot — bound or acted on lately, counts that moved lately, or consumers (a classic
//! queue hands messages to its consumers without a mark). An idle queue is never looked at:
//! with 10,000 quorum queues, each bound by the two nodes that do not lead it, checking every
//! bound queue even once a second was the largest part of an idle cluster's CPU.

use crate::broker::Broker;
use crate::queue_activity::{Changed, ReaderId};
use std::collections::{HashMap, HashSet};
use warren_codec::ShortStr;

/// Count checks in a row that found a queue's counts as reported after which it is looked at
/// only when marked (unless it has consumers).
pub(super) const QUIET_AFTER_CHECKS: u32 = 10;

/// The bound queues by name, and which are hot.
#[derive(Default)]
pub(super) struct CountWatch {
    /// This link's own (a new one per link: `ReaderId::default`).
    reader: ReaderId,
    /// Link ids by vhost and queue name (a name may be bound more than once).
    by_name: HashMap<String, HashMap<ShortStr, Vec<u64>>>,
    /// Looked at every round until quiet.
    hot: HashSet<u64>,
}

impl CountWatch {
    /// The peer bound `qid` to `name` in `vhost`: it is hot (its first counts are due).
    pub(super) fn bind(&mut self, qid: u64, vhost: &str, name: &ShortStr) {
        self.by_name
            .entry(vhost.to_owned())
            .or_default()
            .entry(name.clone())
            .or_default()
            .push(qid);
        self.hot.insert(qid);
    }

    /// The peer dropped `qid`.
    pub(super) fn unbind(&mut self, qid: u64, vhost: &str, name: &ShortStr) {
        // The vhost's entry stays (empty): it names a vhost this reader took from, whose
        // marks `forget` drops.
        if let Some(names) = self.by_name.get_mut(vhost) {
            if let Some(qids) = names.get_mut(name) {
                qids.retain(|bound| *bound != qid);
                if qids.is_empty() {
                    names.remove(name);
                }
            }
        }
        self.hot.remove(&qid);
    }

    /// Looked at every round again for a while (the peer acted on it, its counts moved).
    pub(super) fn heat(&mut self, qid: u64) {
        self.hot.insert(qid);
    }

    /// Looked at only when marked from now on.
    pub(super) fn cool(&mut self, qid: u64) {
        self.hot.remove(&qid);
    }

    /// This round's queues: the hot ones and those marked since the last round (every bound
    /// one of a vhost this reader had not taken from yet).
    pub(super) fn due(&mut self, broker: &Broker) -> Vec<u64> {
        let mut due: HashSet<u64> = self.hot.clone();
        for (vhost_name, names) in &self.by_name {
            if names.is_empty() {
                continue;
            }
            // A vhost gone: its queues' bindings go with the peer's records of them.
            let Some(vhost) = broker.vhost(vhost_name) else {
                continue;
            };
            match vhost.changed_queues(self.reader) {
                Changed::Everything => due.extend(names.values().flatten()),
                Changed::Queues(marked) => {
                    for name in &marked {
                        if let Some(qids) = names.get(name) {
                            due.extend(qids);
                        }
                    }
                }
            }
        }
        due.into_iter().collect()
    }

    /// The link is gone: every vhost stops keeping marks for this reader.
    pub(super) fn forget(&self, broker: &Broker) {
        for vhost_name in self.by_name.keys() {
            if let Some(vhost) = broker.vhost(vhost_name) {
                vhost.forget_reader(self.reader);
            }
        }
    }
}
