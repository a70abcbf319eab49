//! Channels the broker closed (a channel error) whose number the client has not opened again.
//!
//! A client may put frames on the wire for a channel after its channel.close-ok: RabbitMQ's
//! Java client on its Netty I/O layer writes close-ok from the event loop straight away,
//! ahead of a method the application thread issued just before the close arrived and that
//! still waits in the loop's task queue (`basicPublish` to a refused exchange, then
//! `basicQos`). Those frames were sent before the client knew of the close. RabbitMQ answers
//! them with a connection error (504 "expected 'channel.open'"), which one lost race turns
//! into a lost connection; RabbitMQ rarely loses it because its close comes later. Warren
//! drops such frames instead, as it drops every frame on a channel between its channel.close
//! and the close-ok: the channel's error has been reported already, and a frame on a channel
//! that was never opened still closes the connection.
//!
//! Invariant: a number is held here only while no channel with it is open; at most
//! `LIMIT` numbers are held (the oldest forgotten first), so a client that churns channels
//! through errors costs a bounded few bytes.

/// How many closed channel numbers a connection remembers.
const LIMIT: usize = 16;

#[derive(Debug, Default)]
pub(crate) struct ClosedChannels {
    /// Oldest first.
    numbers: Vec<u16>,
}

impl ClosedChannels {
    /// The broker closed channel `ch` and the client answered close-ok.
    pub(crate) fn closed(&mut self, ch: u16) {
        if self.numbers.contains(&ch) {
            return;
        }
        if self.numbers.len() == LIMIT {
            self.numbers.remove(0);
        }
        self.numbers.push(ch);
    }

    /// The client opens channel `ch` again: its frames are the new channel's from here on.
    pub(crate) fn reopened(&mut self, ch: u16) {
        self.numbers.retain(|&n| n != ch);
    }

    /// Whether a frame on channel `ch` (not open) is a late one for a channel the broker
    /// closed, to be dropped rather than answered with a connection error.
    #[inline]
    pub(crate) fn is_late(&self, ch: u16) -> bool {
        !self.numbers.is_empty() && self.numbers.contains(&ch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_number_is_late_until_it_is_reopened() {
        let mut closed = ClosedChannels::default();
        assert!(!closed.is_late(1));
        closed.closed(1);
        assert!(closed.is_late(1));
        assert!(!closed.is_late(2));
        closed.reopened(1);
        assert!(!closed.is_late(1));
    }

    #[test]
    fn only_the_newest_numbers_are_remembered() {
        let mut closed = ClosedChannels::default();
        for ch in 1..=(LIMIT as u16 + 1) {
            closed.closed(ch);
        }
        assert!(!closed.is_late(1), "the oldest is forgotten");
        assert!((2..=LIMIT as u16 + 1).all(|ch| closed.is_late(ch)));
        closed.closed(5);
        assert_eq!(closed.numbers.len(), LIMIT, "a number is held once");
    }
}
