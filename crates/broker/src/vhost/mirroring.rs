//! Classic mirroring policies, which RabbitMQ 4 removed, as Warren honours them: a policy with
//! `ha-mode` (the reports' mqperf and oslo.messaging setups use `ha-mode: all`) makes a new
//! queue it matches a quorum queue — replicated, which is what the policy asked for — with a
//! warning in the log, so those setups run unchanged.
//!
//! Only a queue a quorum queue can be is turned into one: durable, not exclusive, not
//! auto-delete, no classic-only argument (`x-max-priority`, `x-queue-mode`, …), on a broker with
//! a data directory. Others stay classic and the log says why. The queue's stored arguments
//! gain `x-queue-type: quorum`, so a restart recovers it as what it is. While the policy applies
//! the queue takes what a RabbitMQ 3.x application does with the mirrored classic queue it asked
//! for: a redeclaration without `x-queue-type` or with `x-queue-type: classic` (clients
//! reconnecting) is equivalent to it, and a consumer on a channel with a global prefetch limit
//! is accepted (a quorum queue declared as one refuses it, as RabbitMQ's does).

use super::VHost;
use crate::policy::EntityKind;
use crate::queue_args::check_declare_arguments;
use warren_codec::{FieldTable, FieldValue};

impl VHost {
    /// Whether the policy in effect for queue `name` has a classic mirroring `ha-mode`.
    pub(super) fn mirroring_applies(&self, name: &str) -> bool {
        self.policies
            .read()
            .applied(EntityKind::Queue, name)
            .policy
            .is_some_and(|p| p.definition.contains_key("ha-mode"))
    }

    /// Whether queue `name` is a quorum queue because a mirroring policy made it one (the
    /// policy still applies): it takes classic queues' global prefetch.
    pub fn mirrored_as_quorum(&self, name: &str) -> bool {
        self.mirroring_applies(name)
    }

    /// A queue a mirroring policy matches, declared by a cluster node that had not applied
    /// the policy yet (the declaration and the policy raced through the metadata log): it
    /// stays a classic queue, and the log says so.
    pub(super) fn warn_mirroring_not_applied(&self, name: &str, arguments: &FieldTable) {
        if arguments.get("x-queue-type").is_none() && self.mirroring_applies(name) {
            tracing::warn!(
                vhost = %self.name,
                queue = %name,
                "a classic mirroring policy (ha-mode) matches this new queue, but the node that declared it had not applied the policy yet: it stays a classic queue"
            );
        }
    }

    /// For a new queue without `x-queue-type` matched by a mirroring policy: adds
    /// `x-queue-type: quorum` to `arguments` when the queue can be a quorum queue (and says
    /// so in the log), or leaves it classic with a warning saying why not.
    pub(crate) fn mirror_as_quorum(
        &self,
        name: &str,
        durable: bool,
        exclusive: bool,
        auto_delete: bool,
        arguments: &mut FieldTable,
    ) {
        if arguments.get("x-queue-type").is_some() || !self.mirroring_applies(name) {
            return;
        }
        let mut quorum = arguments.clone();
        quorum.insert("x-queue-type", FieldValue::string("quorum"));
        let refused = if !durable {
            Some("it is not durable".to_owned())
        } else if exclusive {
            Some("it is exclusive".to_owned())
        } else if auto_delete {
            Some("it is auto-delete".to_owned())
        } else if self.quorum.get().is_none() {
            Some("the broker has no data directory".to_owned())
        } else {
            check_declare_arguments(name, &self.name, &quorum)
                .err()
                .map(|e| e.reply_text())
        };
        match refused {
            None => {
                tracing::warn!(
                    vhost = %self.name,
                    queue = %name,
                    "a classic mirroring policy (ha-mode) matches this new queue: declared as a quorum queue (RabbitMQ 4 removed classic mirroring)"
                );
                *arguments = quorum;
            }
            Some(why) => tracing::warn!(
                vhost = %self.name,
                queue = %name,
                %why,
                "a classic mirroring policy (ha-mode) matches this new queue, which stays a classic queue without replication"
            ),
        }
    }

    /// A redeclaration's arguments as compared with an existing queue: without
    /// `x-queue-type` or with `classic`, a queue a mirroring policy made quorum is declared as
    /// what it is.
    pub(super) fn as_redeclared(
        &self,
        name: &str,
        existing_is_quorum: bool,
        arguments: &FieldTable,
    ) -> Option<FieldTable> {
        // Without the argument, or with `classic`: what a RabbitMQ 3.x application declares
        // for the mirrored classic queue its policy made.
        let classic = arguments
            .get("x-queue-type")
            .is_none_or(|t| t.as_str() == Some("classic"));
        if !existing_is_quorum || !classic || !self.mirroring_applies(name) {
            return None;
        }
        let mut quorum = arguments.clone();
        quorum.insert("x-queue-type", FieldValue::string("quorum"));
        Some(quorum)
    }
}
