//! What a queue or exchange acts on: its own arguments combined with the policies that
//! apply to it, per key as RabbitMQ does. For a classic queue (`rabbit_amqqueue_process:
//! process_args_policy`) the limits take the lower of argument and policy (expires,
//! message-ttl, max-length, max-length-bytes) and the rest take the argument when there is
//! one (dead-letter-exchange, dead-letter-routing-key, overflow, queue-mode). An exchange's
//! `alternate-exchange` argument beats the policy's (`rabbit_policy:get_arg`).

use super::AppliedPolicies;
use crate::queue::{Overflow, QueueLimits};
use crate::queue_args::queue_limits;
use warren_codec::{FieldTable, FieldValue, ShortStr};

fn lower(argument: Option<u64>, policy: Option<u64>) -> Option<u64> {
    match (argument, policy) {
        (Some(a), Some(p)) => Some(a.min(p)),
        (a, p) => a.or(p),
    }
}

/// The limits a queue with `args` acts on under `applied`.
pub fn effective_queue_limits(args: &FieldTable, applied: &AppliedPolicies) -> QueueLimits {
    let mut limits = queue_limits(args);
    if applied.policy.is_none() && applied.operator_policy.is_none() {
        return limits;
    }
    let number = |key: &str| applied.get(key).and_then(|v| v.as_u64());
    let text = |key: &str| {
        applied
            .get(key)
            .and_then(|v| v.as_str().map(ShortStr::from))
    };
    limits.max_length = lower(limits.max_length, number("max-length"));
    limits.max_length_bytes = lower(limits.max_length_bytes, number("max-length-bytes"));
    limits.message_ttl_ms = lower(limits.message_ttl_ms, number("message-ttl"));
    limits.expires_ms = lower(limits.expires_ms, number("expires").filter(|&ms| ms > 0));
    if limits.dead_letter_exchange.is_none() {
        limits.dead_letter_exchange = text("dead-letter-exchange");
    }
    if limits.dead_letter_routing_key.is_none() {
        limits.dead_letter_routing_key = text("dead-letter-routing-key");
    }
    if limits.overflow.is_none() {
        limits.overflow = match applied.get("overflow").as_ref().and_then(|v| v.as_str()) {
            Some("drop-head") => Some(Overflow::DropHead),
            Some("reject-publish") => Some(Overflow::RejectPublish),
            Some("reject-publish-dlx") => Some(Overflow::RejectPublishDlx),
            _ => None,
        };
    }
    if args.get("x-queue-mode").is_none() {
        limits.lazy = applied.get("queue-mode").as_ref().and_then(|v| v.as_str()) == Some("lazy");
    }
    limits
}

/// The alternate exchange an exchange with `args` routes unroutable messages to.
pub fn effective_alternate_exchange(
    args: &FieldTable,
    applied: &AppliedPolicies,
) -> Option<ShortStr> {
    match args.get("alternate-exchange") {
        Some(FieldValue::LongStr(_)) => args
            .get("alternate-exchange")
            .and_then(FieldValue::as_str)
            .map(ShortStr::from),
        _ => applied
            .get("alternate-exchange")
            .and_then(|v| v.as_str().map(ShortStr::from)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{EntityKind, Policies, Policy, PolicyKind};
    use serde_json::{json, Value};

    fn applied(user: Option<Value>, operator: Option<Value>) -> AppliedPolicies {
        let mut set = Policies::default();
        if let Some(d) = user {
            let p = Policy::new(PolicyKind::Policy, "/", "p", ".*", "all", 0, d).unwrap();
            set.set(p);
        }
        if let Some(d) = operator {
            let p = Policy::new(PolicyKind::Operator, "/", "o", ".*", "all", 0, d).unwrap();
            set.set(p);
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
    fn limits_take_the_lower_of_argument_and_policy() {
        let a = args(&[
            ("x-max-length", FieldValue::I32(5)),
            ("x-message-ttl", FieldValue::I32(50_000)),
            ("x-expires", FieldValue::I32(1_000)),
        ]);
        let l = effective_queue_limits(
            &a,
            &applied(
                Some(
                    json!({"max-length": 10, "message-ttl": 100, "expires": 60_000,
                            "max-length-bytes": 4096}),
                ),
                None,
            ),
        );
        assert_eq!(l.max_length, Some(5));
        assert_eq!(l.message_ttl_ms, Some(100));
        assert_eq!(l.expires_ms, Some(1_000));
        assert_eq!(l.max_length_bytes, Some(4096));
    }

    #[test]
    fn other_settings_take_the_argument_when_there_is_one() {
        let s = FieldValue::string;
        let a = args(&[
            ("x-dead-letter-exchange", s("arg-dlx")),
            ("x-overflow", s("reject-publish")),
            ("x-queue-mode", s("default")),
        ]);
        let p = applied(
            Some(
                json!({"dead-letter-exchange": "pol-dlx", "dead-letter-routing-key": "pol-rk",
                        "overflow": "drop-head", "queue-mode": "lazy"}),
            ),
            None,
        );
        let l = effective_queue_limits(&a, &p);
        assert_eq!(l.dead_letter_exchange.as_deref(), Some("arg-dlx"));
        assert_eq!(l.dead_letter_routing_key.as_deref(), Some("pol-rk"));
        assert_eq!(l.overflow, Some(Overflow::RejectPublish));
        assert!(!l.lazy);
        let l = effective_queue_limits(&FieldTable::new(), &p);
        assert_eq!(l.dead_letter_exchange.as_deref(), Some("pol-dlx"));
        assert_eq!(l.overflow, Some(Overflow::DropHead));
        assert!(l.lazy);
    }

    #[test]
    fn operator_policy_caps_the_user_policy() {
        let l = effective_queue_limits(
            &FieldTable::new(),
            &applied(
                Some(json!({"max-length": 100, "overflow": "drop-head"})),
                Some(json!({"max-length": 7, "overflow": "reject-publish"})),
            ),
        );
        assert_eq!(l.max_length, Some(7));
        assert_eq!(l.overflow, Some(Overflow::RejectPublish));
    }

    #[test]
    fn alternate_exchange_argument_beats_policy() {
        let p = applied(Some(json!({"alternate-exchange": "pol-ae"})), None);
        let a = args(&[("alternate-exchange", FieldValue::string("arg-ae"))]);
        assert_eq!(
            effective_alternate_exchange(&a, &p).as_deref(),
            Some("arg-ae")
        );
        assert_eq!(
            effective_alternate_exchange(&FieldTable::new(), &p).as_deref(),
            Some("pol-ae")
        );
        assert_eq!(
            effective_alternate_exchange(&FieldTable::new(), &AppliedPolicies::default()),
            None
        );
    }
}
