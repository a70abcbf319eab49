//! A quorum queue's settings: what its arguments and policies make of its group's
//! configuration (`QueueConfig`, acted on by the state machine in `warren-quorum`) and of
//! its dead-letter strategy.

use crate::policy::AppliedPolicies;
use warren_codec::FieldTable;
use warren_codec::FieldValue;
use warren_quorum::machine::{Overflow, QueueConfig, DEFAULT_DELIVERY_LIMIT};

/// What the group's machine acts on: the queue's arguments combined with its policy and
/// operator policy as RabbitMQ 3.10 combines them for quorum queues
/// (`rabbit_quorum_queue:ra_machine_config`, checked against 3.10.8): `max-length`,
/// `max-length-bytes`, `delivery-limit` and `message-ttl` take the lower of argument and
/// policy; `overflow` takes the policy's over the argument (unlike a classic queue's). The
/// dead-letter target is read from the queue's limits when a message dies, not from here.
pub fn queue_config(args: &FieldTable, applied: &AppliedPolicies) -> QueueConfig {
    let argument = |key: &str| {
        args.get(key)
            .and_then(FieldValue::as_integer)
            .and_then(|n| u64::try_from(n).ok())
    };
    let policy = |key: &str| applied.get(key).and_then(|v| v.as_u64());
    let lower = |arg: &str, key: &str| match (argument(arg), policy(key)) {
        (Some(a), Some(p)) => Some(a.min(p)),
        (a, p) => a.or(p),
    };
    let overflow = applied
        .get("overflow")
        .and_then(|v| v.as_str().map(str::to_owned))
        .or_else(|| {
            args.get("x-overflow")
                .and_then(FieldValue::as_str)
                .map(str::to_owned)
        });
    QueueConfig {
        delivery_limit: Some(
            lower("x-delivery-limit", "delivery-limit").map_or(DEFAULT_DELIVERY_LIMIT, |n| {
                n.min(u64::from(u32::MAX)) as u32
            }),
        ),
        max_length: lower("x-max-length", "max-length"),
        max_length_bytes: lower("x-max-length-bytes", "max-length-bytes"),
        overflow: match overflow.as_deref() {
            Some("reject-publish") | Some("reject-publish-dlx") => Overflow::RejectPublish,
            _ => Overflow::DropHead,
        },
        message_ttl_ms: lower("x-message-ttl", "message-ttl"),
        single_active_consumer: args
            .get("x-single-active-consumer")
            .and_then(FieldValue::as_bool)
            .unwrap_or(false),
    }
}

/// Whether the queue dead-letters at least once, as RabbitMQ decides it for quorum queues:
/// `dead-letter-strategy` `at-least-once` (the argument over the policy), with `reject-publish`
/// overflow and a dead-letter exchange; otherwise at most once (RabbitMQ falls back the same
/// way: under drop-head a full queue would hold its dead messages without bound).
pub fn dead_letter_at_least_once(
    args: &FieldTable,
    applied: &AppliedPolicies,
    config: &QueueConfig,
    has_dead_letter_exchange: bool,
) -> bool {
    let strategy = args
        .get("x-dead-letter-strategy")
        .and_then(FieldValue::as_str)
        .map(str::to_owned)
        .or_else(|| {
            applied
                .get("dead-letter-strategy")
                .and_then(|v| v.as_str().map(str::to_owned))
        });
    strategy.as_deref() == Some("at-least-once")
        && config.overflow == Overflow::RejectPublish
        && has_dead_letter_exchange
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{EntityKind, Policies, Policy, PolicyKind};
    use serde_json::json;

    fn applied(user: serde_json::Value, operator: serde_json::Value) -> AppliedPolicies {
        let mut set = Policies::default();
        for (kind, definition) in [(PolicyKind::Policy, user), (PolicyKind::Operator, operator)] {
            if definition.as_object().is_some_and(|d| !d.is_empty()) {
                let p = Policy::new(kind, "/", "p", ".*", "queues", 0, definition).unwrap();
                set.set(p);
            }
        }
        set.applied(EntityKind::Queue, "q")
    }

    fn args(entries: &[(&str, FieldValue)]) -> FieldTable {
        entries
            .iter()
            .map(|(k, v)| ((*k).into(), v.clone()))
            .collect()
    }

    #[test]
    fn limits_take_the_lower_and_the_policys_overflow_wins() {
        let declared = args(&[
            ("x-max-length", FieldValue::I32(5)),
            ("x-delivery-limit", FieldValue::I32(1)),
            ("x-overflow", FieldValue::string("drop-head")),
            ("x-single-active-consumer", FieldValue::Bool(true)),
        ]);
        let config = queue_config(
            &declared,
            &applied(
                json!({"max-length": 9, "delivery-limit": 3, "overflow": "reject-publish",
                       "message-ttl": 100}),
                json!({"max-length-bytes": 1000, "message-ttl": 50}),
            ),
        );
        assert_eq!(config.max_length, Some(5));
        assert_eq!(config.delivery_limit, Some(1));
        assert_eq!(config.overflow, Overflow::RejectPublish);
        assert_eq!(config.max_length_bytes, Some(1000));
        assert_eq!(config.message_ttl_ms, Some(50));
        assert!(config.single_active_consumer);
    }

    #[test]
    fn without_arguments_or_policies_the_defaults_hold() {
        let config = queue_config(&FieldTable::new(), &AppliedPolicies::default());
        assert_eq!(config, QueueConfig::default());
        let capped = queue_config(
            &FieldTable::new(),
            &applied(json!({}), json!({"delivery-limit": 0})),
        );
        assert_eq!(capped.delivery_limit, Some(0));
    }
}
