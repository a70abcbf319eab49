//! Login attempts on this node by protocol, succeeded and failed: RabbitMQ's
//! `auth_attempt_metrics` (`rabbitmq_auth_attempts_total`, `_succeeded_total`,
//! `_failed_total`, labelled `protocol`). Each protocol's handshake records its outcome once,
//! whatever the mechanism; refusals before a mechanism is tried (an unsupported one) count as
//! failed, as RabbitMQ's.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthProtocol {
    Amqp091,
    Amqp10,
}

impl AuthProtocol {
    pub const ALL: [AuthProtocol; 2] = [AuthProtocol::Amqp091, AuthProtocol::Amqp10];

    /// RabbitMQ's `protocol` label.
    pub fn label(self) -> &'static str {
        match self {
            AuthProtocol::Amqp091 => "amqp091",
            AuthProtocol::Amqp10 => "amqp10",
        }
    }
}

#[derive(Debug, Default)]
pub struct AuthAttempts {
    /// [protocol][0: succeeded, 1: failed]
    counts: [[AtomicU64; 2]; 2],
}

impl AuthAttempts {
    pub fn record(&self, protocol: AuthProtocol, succeeded: bool) {
        self.counts[protocol as usize][usize::from(!succeeded)].fetch_add(1, Relaxed);
    }

    pub fn succeeded(&self, protocol: AuthProtocol) -> u64 {
        self.counts[protocol as usize][0].load(Relaxed)
    }

    pub fn failed(&self, protocol: AuthProtocol) -> u64 {
        self.counts[protocol as usize][1].load(Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_counted_per_protocol() {
        let attempts = AuthAttempts::default();
        attempts.record(AuthProtocol::Amqp091, true);
        attempts.record(AuthProtocol::Amqp091, false);
        attempts.record(AuthProtocol::Amqp091, false);
        attempts.record(AuthProtocol::Amqp10, true);
        assert_eq!(attempts.succeeded(AuthProtocol::Amqp091), 1);
        assert_eq!(attempts.failed(AuthProtocol::Amqp091), 2);
        assert_eq!(attempts.succeeded(AuthProtocol::Amqp10), 1);
        assert_eq!(attempts.failed(AuthProtocol::Amqp10), 0);
    }
}
