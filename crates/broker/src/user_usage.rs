//! Each user's open connections and channels on this node, counted against the user's
//! limits (`UserLimits`). A connection or channel takes a `UsageSlot` when it opens — refused
//! when the user's limit is reached — and the slot gives its count back when dropped, with
//! the connection or channel that holds it, however that ends: a count cannot leak.
//!
//! Counting is per node, as Warren's vhost connection limit is; RabbitMQ counts a user's
//! connections across its cluster.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub connections: u32,
    pub channels: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Connection,
    Channel,
}

/// The counts, by user name. Users with nothing open have no entry.
#[derive(Debug, Default)]
pub struct UserUsage {
    counts: Mutex<HashMap<Arc<str>, Usage>>,
}

/// One open connection or channel of a user; dropping it gives the count back.
#[derive(Debug)]
pub struct UsageSlot {
    usage: Arc<UserUsage>,
    user: Arc<str>,
    kind: Kind,
}

impl UserUsage {
    /// What `user` has open now.
    pub fn of(&self, user: &str) -> Usage {
        self.counts.lock().get(user).copied().unwrap_or_default()
    }

    /// Takes a connection slot unless the user already has `limit` connections open; the
    /// refusal carries the limit.
    pub fn take_connection(
        self: &Arc<Self>,
        user: &str,
        limit: Option<u32>,
    ) -> Result<UsageSlot, u32> {
        self.take(user, limit, Kind::Connection)
    }

    /// Takes a channel slot unless the user already has `limit` channels open.
    pub fn take_channel(
        self: &Arc<Self>,
        user: &str,
        limit: Option<u32>,
    ) -> Result<UsageSlot, u32> {
        self.take(user, limit, Kind::Channel)
    }

    fn take(
        self: &Arc<Self>,
        user: &str,
        limit: Option<u32>,
        kind: Kind,
    ) -> Result<UsageSlot, u32> {
        let mut counts = self.counts.lock();
        // The key is shared by every slot of the user: one allocation per user, not per slot.
        let key = match counts.get_key_value(user) {
            Some((key, _)) => key.clone(),
            None => Arc::from(user),
        };
        let usage = counts.entry(key.clone()).or_default();
        let count = match kind {
            Kind::Connection => &mut usage.connections,
            Kind::Channel => &mut usage.channels,
        };
        if let Some(limit) = limit {
            if *count >= limit {
                if *usage == Usage::default() {
                    counts.remove(user);
                }
                return Err(limit);
            }
        }
        *count += 1;
        Ok(UsageSlot {
            usage: self.clone(),
            user: key,
            kind,
        })
    }
}

impl Drop for UsageSlot {
    fn drop(&mut self) {
        let mut counts = self.usage.counts.lock();
        let Some(usage) = counts.get_mut(&self.user) else {
            debug_assert!(false, "a slot outlived its user's entry");
            return;
        };
        let count = match self.kind {
            Kind::Connection => &mut usage.connections,
            Kind::Channel => &mut usage.channels,
        };
        debug_assert!(*count > 0, "more slots given back than taken");
        *count = count.saturating_sub(1);
        if *usage == Usage::default() {
            counts.remove(&self.user);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_count_up_to_the_limit_and_give_back_when_dropped() {
        let usage = Arc::new(UserUsage::default());
        let a = usage.take_connection("u", Some(2)).unwrap();
        let b = usage.take_connection("u", Some(2)).unwrap();
        assert_eq!(usage.take_connection("u", Some(2)).unwrap_err(), 2);
        let other = usage.take_connection("v", Some(2)).unwrap();
        let channel = usage.take_channel("u", None).unwrap();
        assert_eq!(
            usage.of("u"),
            Usage {
                connections: 2,
                channels: 1
            }
        );
        drop(a);
        let c = usage.take_connection("u", Some(2)).unwrap();
        drop((b, c, channel, other));
        assert_eq!(usage.of("u"), Usage::default());
        assert!(
            usage.counts.lock().is_empty(),
            "no entry for users with nothing open"
        );
    }

    #[test]
    fn a_zero_limit_refuses_the_first() {
        let usage = Arc::new(UserUsage::default());
        assert_eq!(usage.take_channel("u", Some(0)).unwrap_err(), 0);
        assert!(usage.counts.lock().is_empty());
    }
}
