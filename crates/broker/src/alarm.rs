//! Resource alarms, as RabbitMQ's: while memory use is above the high watermark or free disk
//! space below its limit, connections that publish are blocked (their sockets are no longer
//! read) and connections that only consume, ack or declare carry on, so queues can drain and
//! the alarm can clear.
//!
//! `Alarms` is the broker-wide set of active alarms behind a `watch`: the monitors
//! (`memory.rs`, `disk.rs`) raise and clear their own kind; every connection task subscribes
//! and applies the blocking rules itself (server/src/throttle.rs).
//!
//! In a cluster an alarm is cluster-wide, as in RabbitMQ: a node's own alarms (`local`) are
//! sent to every peer over the forwarding link (`Frame::Alarms`), and what blocks publishers
//! on a node (`active`) is its own alarms and those of every peer it is linked to. A peer's
//! alarms go when its link does (RabbitMQ drops a node's alarms when the node goes down).

use parking_lot::Mutex;
use std::collections::HashMap;
use tokio::sync::watch;

/// One kind of resource alarm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alarm {
    Memory,
    Disk,
}

impl Alarm {
    fn bit(self) -> u8 {
        match self {
            Alarm::Memory => 1,
            Alarm::Disk => 2,
        }
    }

    /// The name RabbitMQ uses for the resource (`/api/health/checks/alarms`, logs).
    pub fn resource(self) -> &'static str {
        match self {
            Alarm::Memory => "memory",
            Alarm::Disk => "disk",
        }
    }
}

/// The alarms in effect; empty when publishers may publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AlarmSet(u8);

impl AlarmSet {
    /// The set as one byte (the forwarding link's `Frame::Alarms`); unknown bits are dropped.
    pub fn bits(self) -> u8 {
        self.0
    }

    pub fn from_bits(bits: u8) -> AlarmSet {
        AlarmSet(bits & (Alarm::Memory.bit() | Alarm::Disk.bit()))
    }

    fn union(self, other: AlarmSet) -> AlarmSet {
        AlarmSet(self.0 | other.0)
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn contains(self, alarm: Alarm) -> bool {
        self.0 & alarm.bit() != 0
    }

    pub fn iter(self) -> impl Iterator<Item = Alarm> {
        [Alarm::Memory, Alarm::Disk]
            .into_iter()
            .filter(move |a| self.contains(*a))
    }

    /// The `connection.blocked` reason, worded as RabbitMQ words it: "low on memory",
    /// "low on disk", "low on memory & disk".
    pub fn blocked_reason(self) -> String {
        let resources: Vec<&str> = self.iter().map(Alarm::resource).collect();
        format!("low on {}", resources.join(" & "))
    }
}

#[derive(Debug)]
pub struct Alarms {
    /// This node's own alarms: what its monitors raised, what its peers are told.
    local: watch::Sender<AlarmSet>,
    /// What each linked peer reported (its node name and alarms), by link (the link's
    /// connection id).
    remote: Mutex<HashMap<u64, (String, AlarmSet)>>,
    /// Local and remote together: what blocks this node's publishers.
    active: watch::Sender<AlarmSet>,
}

impl Default for Alarms {
    fn default() -> Self {
        Alarms {
            local: watch::channel(AlarmSet::default()).0,
            remote: Mutex::default(),
            active: watch::channel(AlarmSet::default()).0,
        }
    }
}

impl Alarms {
    /// Raises (`on`) or clears one of this node's alarms; logs and notifies subscribers only
    /// on a change.
    pub fn set(&self, alarm: Alarm, on: bool) {
        let changed = self.local.send_if_modified(|set| {
            let before = *set;
            if on {
                set.0 |= alarm.bit();
            } else {
                set.0 &= !alarm.bit();
            }
            *set != before
        });
        if changed {
            if on {
                tracing::warn!(
                    resource = alarm.resource(),
                    "resource alarm set: publishers will be blocked"
                );
            } else {
                tracing::info!(resource = alarm.resource(), "resource alarm cleared");
            }
            self.recompute();
        }
    }

    /// What node `node`, on link `link`, reported of its own alarms.
    pub fn set_remote(&self, link: u64, node: &str, alarms: AlarmSet) {
        let before = self
            .remote
            .lock()
            .insert(link, (node.to_owned(), alarms))
            .map(|(_, a)| a)
            .unwrap_or_default();
        if before != alarms {
            match alarms.is_empty() {
                true => tracing::info!(peer = node, "a peer node's resource alarms cleared"),
                false => {
                    tracing::warn!(peer = node, alarms = %alarms.blocked_reason(), "a peer node's resource alarm: publishers will be blocked")
                }
            }
            self.recompute();
        }
    }

    /// Link `link` went: its peer's alarms no longer count here.
    pub fn forget_remote(&self, link: u64) {
        let removed = self.remote.lock().remove(&link);
        if removed.is_some_and(|(_, a)| !a.is_empty()) {
            self.recompute();
        }
    }

    fn recompute(&self) {
        let remote = self.remote.lock();
        let all = remote
            .values()
            .fold(*self.local.borrow(), |all, (_, peer)| all.union(*peer));
        self.active
            .send_if_modified(|set| std::mem::replace(set, all) != all);
    }

    /// Every peer's alarms in effect here: (node, alarms), one per node.
    pub fn remote(&self) -> Vec<(String, AlarmSet)> {
        let mut by_node: HashMap<String, AlarmSet> = HashMap::new();
        for (node, alarms) in self.remote.lock().values() {
            let entry = by_node.entry(node.clone()).or_default();
            *entry = entry.union(*alarms);
        }
        let mut all: Vec<_> = by_node.into_iter().filter(|(_, a)| !a.is_empty()).collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// Every alarm in effect here, this node's and its linked peers': what blocks publishers
    /// (and what `/api/health/checks/alarms` reports, as RabbitMQ's does for the cluster).
    pub fn active(&self) -> AlarmSet {
        *self.active.borrow()
    }

    /// This node's own alarms (its `/api/nodes` entry, its metrics, its peers).
    pub fn local(&self) -> AlarmSet {
        *self.local.borrow()
    }

    /// Changes to `active`: what a connection blocks on.
    pub fn subscribe(&self) -> watch::Receiver<AlarmSet> {
        self.active.subscribe()
    }

    /// Changes to `local`: what a forwarding link tells its peer.
    pub fn subscribe_local(&self) -> watch::Receiver<AlarmSet> {
        self.local.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_as_rabbitmq_words_them() {
        let alarms = Alarms::default();
        assert!(alarms.active().is_empty());
        alarms.set(Alarm::Disk, true);
        assert_eq!(alarms.active().blocked_reason(), "low on disk");
        alarms.set(Alarm::Memory, true);
        assert_eq!(alarms.active().blocked_reason(), "low on memory & disk");
        alarms.set(Alarm::Disk, false);
        assert_eq!(alarms.active().blocked_reason(), "low on memory");
        alarms.set(Alarm::Memory, false);
        assert!(alarms.active().is_empty());
    }

    #[test]
    fn a_peer_s_alarm_blocks_here_until_it_clears_or_its_link_goes() {
        let alarms = Alarms::default();
        let mut rx = alarms.subscribe();
        alarms.set_remote(7, "n2", AlarmSet::from_bits(Alarm::Disk.bit()));
        assert!(rx.has_changed().unwrap());
        assert!(rx.borrow_and_update().contains(Alarm::Disk));
        assert!(alarms.local().is_empty(), "not this node's own");
        assert_eq!(alarms.remote(), vec![("n2".to_owned(), alarms.active())]);
        alarms.set(Alarm::Memory, true);
        assert_eq!(alarms.active().blocked_reason(), "low on memory & disk");
        alarms.forget_remote(7);
        assert_eq!(alarms.active().blocked_reason(), "low on memory");
        alarms.set(Alarm::Memory, false);
        alarms.set_remote(8, "n3", AlarmSet::from_bits(0xff));
        assert_eq!(alarms.active().bits(), 3, "unknown bits dropped");
        alarms.set_remote(8, "n3", AlarmSet::default());
        assert!(alarms.active().is_empty());
    }

    #[test]
    fn subscribers_see_only_changes() {
        let alarms = Alarms::default();
        let mut rx = alarms.subscribe();
        alarms.set(Alarm::Memory, false);
        assert!(!rx.has_changed().unwrap());
        alarms.set(Alarm::Memory, true);
        assert!(rx.has_changed().unwrap());
        assert!(rx.borrow_and_update().contains(Alarm::Memory));
        alarms.set(Alarm::Memory, true);
        assert!(!rx.has_changed().unwrap());
    }
}
