//! The `x-` queue arguments Warren acts on: parsing and RabbitMQ's checks (406 with
//! "invalid arg ..." for a bad value). Unknown arguments are accepted and kept, as RabbitMQ does.

use crate::error::{AmqpError, AmqpResult};
use crate::queue::{Overflow, QueueLimits};
use crate::vhost::describe;
use warren_codec::{FieldTable, ShortStr};

/// Reads and checks the `x-` arguments this broker acts on. Unknown arguments are accepted
/// and kept, as RabbitMQ does.
pub fn queue_limits(name: &str, args: &FieldTable) -> AmqpResult<QueueLimits> {
    let invalid = |arg: &str, why: &str| {
        AmqpError::precondition(format!(
            "invalid arg '{arg}' for queue '{name}' in vhost '/': {why}"
        ))
    };
    let non_negative = |arg: &str| -> AmqpResult<Option<u64>> {
        match args.get(arg) {
            None => Ok(None),
            Some(v) => match v.as_i64() {
                Some(n) if n >= 0 => Ok(Some(n as u64)),
                Some(n) => Err(invalid(arg, &format!("{{value_negative,{n}}}"))),
                None => Err(invalid(arg, "{unacceptable_type,not an integer}")),
            },
        }
    };
    let mut limits = QueueLimits {
        max_length: non_negative("x-max-length")?,
        max_length_bytes: non_negative("x-max-length-bytes")?,
        message_ttl_ms: non_negative("x-message-ttl")?,
        expires_ms: non_negative("x-expires")?,
        overflow: None,
        max_priority: None,
        single_active_consumer: false,
        dead_letter_exchange: args
            .get("x-dead-letter-exchange")
            .and_then(|v| v.as_str())
            .map(ShortStr::from),
        dead_letter_routing_key: args
            .get("x-dead-letter-routing-key")
            .and_then(|v| v.as_str())
            .map(ShortStr::from),
    };
    if limits.expires_ms == Some(0) {
        return Err(invalid("x-expires", "{value_zero,0}"));
    }
    if let Some(v) = args.get("x-overflow") {
        limits.overflow = Some(match v.as_str() {
            Some("drop-head") => Overflow::DropHead,
            Some("reject-publish") => Overflow::RejectPublish,
            Some("reject-publish-dlx") => Overflow::RejectPublishDlx,
            _ => {
                return Err(invalid(
                    "x-overflow",
                    &format!("{{unacceptable_value,{}}}", describe(Some(v))),
                ))
            }
        });
    }
    if let Some(v) = args.get("x-queue-type") {
        match v.as_str() {
            Some("classic") => {}
            Some(t @ ("quorum" | "stream")) => {
                return Err(invalid(
                    "x-queue-type",
                    &format!("queue type '{t}' is not supported by this Warren version yet"),
                ))
            }
            _ => return Err(invalid("x-queue-type", "{unacceptable_value}")),
        }
    }
    if let Some(v) = args.get("x-queue-mode") {
        if !matches!(v.as_str(), Some("default" | "lazy")) {
            return Err(invalid("x-queue-mode", "{unacceptable_value}"));
        }
    }
    if let Some(v) = args.get("x-single-active-consumer") {
        match v.as_bool() {
            Some(b) => limits.single_active_consumer = b,
            None => return Err(invalid("x-single-active-consumer", "{unacceptable_type}")),
        }
    }
    if let Some(v) = args.get("x-max-priority") {
        match v.as_i64() {
            Some(p @ 0..=255) => limits.max_priority = Some(p as u8),
            _ => return Err(invalid("x-max-priority", "{value_out_of_range}")),
        }
    }
    Ok(limits)
}
