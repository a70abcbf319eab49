//! Resource alarms, as RabbitMQ's: while memory use is above the high watermark or free disk
//! space below its limit, connections that publish are blocked (their sockets are no longer
//! read) and connections that only consume, ack or declare carry on, so queues can drain and
//! the alarm can clear.
//!
//! `Alarms` is the broker-wide set of active alarms behind a `watch`: the monitors
//! (`memory.rs`, `disk.rs`) raise and clear their own kind; every connection task subscribes
//! and applies the blocking rules itself (server/src/throttle.rs).

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
    active: watch::Sender<AlarmSet>,
}

impl Default for Alarms {
    fn default() -> Self {
        Alarms {
            active: watch::channel(AlarmSet::default()).0,
        }
    }
}

impl Alarms {
    /// Raises (`on`) or clears one alarm; logs and notifies subscribers only on a change.
    pub fn set(&self, alarm: Alarm, on: bool) {
        let changed = self.active.send_if_modified(|set| {
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
        }
    }

    pub fn active(&self) -> AlarmSet {
        *self.active.borrow()
    }

    pub fn subscribe(&self) -> watch::Receiver<AlarmSet> {
        self.active.subscribe()
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
