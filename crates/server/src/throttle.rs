//! Publisher throttling under resource alarms, per connection, with RabbitMQ's rules
//! (rabbit_reader's `control_throttle`):
//! - while no alarm is on a connection is *running*;
//! - when an alarm goes on every connection becomes *blocking*: it carries on as before, and
//!   one that only consumes, acks, gets, declares or deletes is never held up or told;
//! - a blocking connection that publishes becomes *blocked* at the publish's content header:
//!   nothing more is read from the socket (the rest of that message included, so it is not
//!   routed until the alarm clears), and a client that
//!   advertised the `connection.blocked` capability is sent `connection.blocked` — once, even
//!   if another alarm goes on while it is blocked;
//! - when every alarm has cleared, blocked connections are read again and those notified get
//!   `connection.unblocked`.
//!
//! Heartbeat timeouts are not enforced while blocked: the client may well be silent because
//! we stopped reading it.

use bytes::BytesMut;
use std::net::SocketAddr;
use tokio::sync::watch;
use warren_broker::AlarmSet;
use warren_codec::{write_method, ConnectionBlocked, ConnectionUnblocked, ShortStr};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThrottleState {
    Running,
    Blocking,
    Blocked,
}

impl ThrottleState {
    /// As `rabbitmqctl list_connections state` shows it.
    pub fn name(self) -> &'static str {
        match self {
            ThrottleState::Running => "running",
            ThrottleState::Blocking => "blocking",
            ThrottleState::Blocked => "blocked",
        }
    }
}

pub struct Throttle {
    alarms: watch::Receiver<AlarmSet>,
    /// The alarm set as last marked seen on `alarms`: while `alarms` has no change unseen,
    /// this is its value, read without the lock `borrow` takes (a publish asks per message).
    seen: AlarmSet,
    /// The socket is not read (a publish arrived during an alarm).
    blocked: bool,
    /// connection.blocked was sent and connection.unblocked is owed.
    notified: bool,
    /// The client advertised the connection.blocked capability.
    can_notify: bool,
    /// The state last logged, so the log shows each change once.
    logged: ThrottleState,
    peer: SocketAddr,
}

impl Throttle {
    pub fn new(alarms: watch::Receiver<AlarmSet>, can_notify: bool, peer: SocketAddr) -> Throttle {
        let seen = *alarms.borrow();
        let mut throttle = Throttle {
            alarms,
            seen,
            blocked: false,
            notified: false,
            can_notify,
            logged: ThrottleState::Running,
            peer,
        };
        throttle.seen = *throttle.alarms.borrow_and_update();
        throttle.log_change();
        throttle
    }

    /// Set once the client's capabilities are known (connection.start-ok).
    pub fn set_can_notify(&mut self, can_notify: bool) {
        self.can_notify = can_notify;
    }

    pub fn state(&self) -> ThrottleState {
        if self.blocked {
            ThrottleState::Blocked
        } else if self.alarms.borrow().is_empty() {
            ThrottleState::Running
        } else {
            ThrottleState::Blocking
        }
    }

    /// True while the socket must not be read.
    pub fn is_blocked(&self) -> bool {
        self.blocked
    }

    /// A publish's content frame was read. Returns true when the connection is now blocked
    /// and the caller must stop taking frames.
    #[inline]
    pub fn publish_received(&mut self, out: &mut BytesMut) -> bool {
        let alarms = self.current_alarms();
        if alarms.is_empty() {
            return false;
        }
        self.block(alarms, out);
        true
    }

    /// `publish_received` with an alarm on: blocks, and says so once.
    #[inline(never)]
    fn block(&mut self, alarms: AlarmSet, out: &mut BytesMut) {
        if !self.blocked {
            self.blocked = true;
            if self.can_notify && !self.notified {
                self.notified = true;
                let reason = ShortStr::from(alarms.blocked_reason());
                write_method(out, 0, &ConnectionBlocked { reason }.into());
            }
            self.log_change();
        }
    }

    /// Whether no alarm is on now, so a publish read now is taken (`publish_received` would
    /// return false).
    pub fn alarms_clear(&self) -> bool {
        self.current_alarms().is_empty()
    }

    /// The alarm set now: the one last seen unless a change is waiting (one atomic load).
    #[inline]
    fn current_alarms(&self) -> AlarmSet {
        match self.alarms.has_changed() {
            Ok(false) => self.seen,
            _ => *self.alarms.borrow(),
        }
    }

    /// Completes when the alarm set changes.
    pub async fn alarms_changed(&mut self) {
        if self.alarms.changed().await.is_err() {
            // The broker is gone; nothing will change any more.
            std::future::pending::<()>().await;
        }
    }

    /// Applies the current alarm set after a change. Returns true when a blocked connection
    /// was just unblocked: the caller handles the input it left buffered, then reads again.
    pub fn on_alarms_changed(&mut self, out: &mut BytesMut) -> bool {
        self.seen = *self.alarms.borrow_and_update();
        let clear = self.seen.is_empty();
        let unblocked = clear && self.blocked;
        if unblocked {
            self.blocked = false;
            if self.notified {
                self.notified = false;
                write_method(out, 0, &ConnectionUnblocked.into());
            }
        }
        self.log_change();
        unblocked
    }

    fn log_change(&mut self) {
        let state = self.state();
        if state != self.logged {
            tracing::info!(peer = %self.peer, from = self.logged.name(), to = state.name(), "connection state");
            self.logged = state;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warren_broker::{Alarm, Alarms};
    use warren_codec::{parse_frame, Method, Reader};

    fn methods(out: &mut BytesMut) -> Vec<Method> {
        let mut got = Vec::new();
        while let Some(frame) = parse_frame(out, 0).unwrap() {
            got.push(Method::decode(&mut Reader::new(frame.payload)).unwrap());
        }
        got
    }

    fn throttle(alarms: &Alarms, can_notify: bool) -> Throttle {
        Throttle::new(
            alarms.subscribe(),
            can_notify,
            "127.0.0.1:1".parse().unwrap(),
        )
    }

    #[test]
    fn only_a_publish_during_an_alarm_blocks_and_notifies_once() {
        let alarms = Alarms::default();
        let mut t = throttle(&alarms, true);
        let mut out = BytesMut::new();
        assert!(!t.publish_received(&mut out), "no alarm, no block");
        alarms.set(Alarm::Memory, true);
        assert!(!t.on_alarms_changed(&mut out));
        assert_eq!(t.state(), ThrottleState::Blocking);
        assert!(out.is_empty(), "a blocking connection is not told anything");
        assert!(t.publish_received(&mut out));
        assert_eq!(t.state(), ThrottleState::Blocked);
        alarms.set(Alarm::Disk, true);
        assert!(!t.on_alarms_changed(&mut out));
        assert!(t.publish_received(&mut out));
        let sent = methods(&mut out);
        assert_eq!(sent.len(), 1, "blocked is sent once: {sent:?}");
        assert!(
            matches!(&sent[0], Method::ConnectionBlocked(b) if b.reason.as_str() == "low on memory")
        );
        alarms.set(Alarm::Memory, false);
        assert!(!t.on_alarms_changed(&mut out), "disk alarm still on");
        alarms.set(Alarm::Disk, false);
        assert!(t.on_alarms_changed(&mut out));
        assert_eq!(t.state(), ThrottleState::Running);
        assert!(matches!(
            methods(&mut out).as_slice(),
            [Method::ConnectionUnblocked(_)]
        ));
    }

    #[test]
    fn clients_without_the_capability_are_blocked_silently() {
        let alarms = Alarms::default();
        let mut t = throttle(&alarms, false);
        let mut out = BytesMut::new();
        alarms.set(Alarm::Disk, true);
        t.on_alarms_changed(&mut out);
        assert!(t.publish_received(&mut out));
        alarms.set(Alarm::Disk, false);
        assert!(t.on_alarms_changed(&mut out));
        assert!(out.is_empty());
    }
}
