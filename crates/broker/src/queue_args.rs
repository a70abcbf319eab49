//! The `x-` arguments of queue.declare and basic.consume: RabbitMQ's checks on a new queue's
//! arguments and on a consumer's (406 "invalid arg …", texts as `rabbit_amqqueue` writes
//! them), and the limits a queue reads from its arguments. Arguments nobody knows are
//! accepted and kept, as RabbitMQ does.

use std::sync::Arc;

use crate::error::{AmqpError, AmqpResult};
use warren_codec::{FieldTable, FieldValue, ShortStr};

/// What `x-overflow` asks for when `x-max-length(-bytes)` is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    DropHead,
    RejectPublish,
    RejectPublishDlx,
}

/// The limits and behaviours a queue's `x-` arguments and policies set, parsed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueLimits {
    pub max_length: Option<u64>,
    pub max_length_bytes: Option<u64>,
    pub overflow: Option<Overflow>,
    pub expires_ms: Option<u64>,
    pub message_ttl_ms: Option<u64>,
    pub max_priority: Option<u8>,
    pub single_active_consumer: bool,
    pub dead_letter_exchange: Option<ShortStr>,
    pub dead_letter_routing_key: Option<ShortStr>,
    /// `x-queue-mode=lazy`: no ready messages kept in memory (when the queue can page).
    pub lazy: bool,
}

impl QueueLimits {
    /// The limits as a queue keeps them: shared, since its record and its type's state both
    /// act on them, and the default ones (most queues') one allocation for every queue
    /// (136 bytes twice per queue otherwise: a million queues are counted in bytes each).
    pub fn shared(self) -> Arc<QueueLimits> {
        static DEFAULT: std::sync::LazyLock<Arc<QueueLimits>> =
            std::sync::LazyLock::new(Arc::default);
        if self == **DEFAULT {
            DEFAULT.clone()
        } else {
            Arc::new(self)
        }
    }
}

/// The arguments a classic queue takes, in RabbitMQ's order: a redeclare must repeat each of
/// them with an equivalent value (`rabbit_classic_queue:capabilities`).
pub const CLASSIC_QUEUE_ARGS: &[&str] = &[
    "x-expires",
    "x-message-ttl",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-priority",
    "x-overflow",
    "x-queue-mode",
    "x-queue-version",
    "x-single-active-consumer",
    "x-queue-type",
    "x-queue-master-locator",
];

/// The arguments a quorum queue takes (`rabbit_quorum_queue:capabilities` in 3.10): a
/// redeclare must repeat each with an equivalent value; other queue types' arguments are
/// refused at declare.
pub const QUORUM_QUEUE_ARGS: &[&str] = &[
    "x-expires",
    "x-dead-letter-exchange",
    "x-dead-letter-routing-key",
    "x-dead-letter-strategy",
    "x-max-length",
    "x-max-length-bytes",
    "x-max-in-memory-length",
    "x-max-in-memory-bytes",
    "x-overflow",
    "x-single-active-consumer",
    "x-queue-type",
    "x-quorum-initial-group-size",
    "x-delivery-limit",
    "x-message-ttl",
];

/// Arguments only quorum queues or streams take: a classic queue refuses them.
const OTHER_QUEUE_TYPES_ARGS: &[&str] = &[
    "x-dead-letter-strategy",
    "x-max-in-memory-length",
    "x-max-in-memory-bytes",
    "x-quorum-initial-group-size",
    "x-delivery-limit",
    "x-queue-leader-locator",
    "x-max-age",
    "x-stream-max-segment-size-bytes",
    "x-initial-cluster-size",
];

/// Consumer arguments only streams take.
const OTHER_QUEUE_TYPES_CONSUME_ARGS: &[&str] = &["x-stream-offset"];

/// The longest TTL or expiry RabbitMQ accepts: ten years in milliseconds.
pub const MAX_EXPIRY_MS: u64 = 315_360_000_000;

/// Why an argument value is refused, as the Erlang term RabbitMQ prints after the colon.
type Refusal = String;

fn unacceptable_type(v: &FieldValue) -> Refusal {
    format!("{{unacceptable_type,{}}}", v.type_name())
}

fn integer(v: &FieldValue) -> Result<i64, Refusal> {
    v.as_integer()
        .ok_or_else(|| format!("\"expected integer, got {}\"", v.type_name()))
}

fn non_negative(v: &FieldValue) -> Result<i64, Refusal> {
    match integer(v)? {
        n if n < 0 => Err(format!("{{value_negative,{n}}}")),
        n => Ok(n),
    }
}

fn expiry(n: i64) -> Result<(), Refusal> {
    if n < 0 {
        Err(format!("{{value_negative,{n}}}"))
    } else if n as u64 > MAX_EXPIRY_MS {
        Err(format!("{{value_too_large,{n}}}"))
    } else {
        Ok(())
    }
}

/// A string argument that must be one of `known`; `unknown` words the refusal of another.
fn one_of(
    v: &FieldValue,
    known: &[&str],
    unknown: impl Fn(&str) -> Refusal,
) -> Result<(), Refusal> {
    match v {
        FieldValue::LongStr(b) => {
            let s = String::from_utf8_lossy(b);
            if known.contains(&s.as_ref()) {
                Ok(())
            } else {
                Err(unknown(&s))
            }
        }
        other => Err(unacceptable_type(other)),
    }
}

fn boolean(v: &FieldValue) -> Result<(), Refusal> {
    match v {
        FieldValue::Bool(_) => Ok(()),
        other => Err(unacceptable_type(other)),
    }
}

/// RabbitMQ's check of one declare argument (`rabbit_amqqueue:declare_args/0`).
fn check_declare_arg(key: &str, v: &FieldValue, args: &FieldTable) -> Result<(), Refusal> {
    match key {
        "x-expires" => match integer(v)? {
            0 => Err("{value_zero,0}".to_owned()),
            n => expiry(n),
        },
        "x-message-ttl" => expiry(integer(v)?),
        "x-max-length" | "x-max-length-bytes" => non_negative(v).map(|_| ()),
        "x-max-priority" => match non_negative(v)? {
            n if n > 255 => Err(format!("{{max_value_exceeded,{n}}}")),
            _ => Ok(()),
        },
        "x-dead-letter-routing-key" => match v {
            FieldValue::LongStr(_) if args.get("x-dead-letter-exchange").is_none() => {
                Err("routing_key_but_no_dlx_defined".to_owned())
            }
            FieldValue::LongStr(_) => Ok(()),
            other => Err(unacceptable_type(other)),
        },
        "x-overflow" => one_of(
            v,
            &["drop-head", "reject-publish", "reject-publish-dlx"],
            |_| "invalid_overflow".to_owned(),
        ),
        "x-queue-mode" => one_of(v, &["default", "lazy"], |s| {
            format!("\"unsupported queue mode '{s}'\"")
        }),
        "x-queue-version" => match non_negative(v)? {
            1 | 2 => Ok(()),
            n => Err(format!("\"unsupported queue version '{n}'\"")),
        },
        "x-single-active-consumer" => boolean(v),
        // `check_initial_cluster_size_arg`: a non-negative integer, and not zero.
        "x-quorum-initial-group-size" => match non_negative(v)? {
            0 => Err("{value_zero,0}".to_owned()),
            _ => Ok(()),
        },
        "x-queue-type" => one_of(v, &["classic", "quorum", "stream"], |s| {
            format!("\"unsupported queue type '{s}'\"")
        }),
        _ => Ok(()),
    }
}

fn invalid_arg(key: &str, (queue, vhost): (&str, &str), why: &str) -> AmqpError {
    AmqpError::precondition(format!(
        "invalid arg '{key}' for queue '{queue}' in vhost '{vhost}': {why}"
    ))
}

fn not_for_classic(key: &str, (queue, vhost): (&str, &str)) -> AmqpError {
    AmqpError::precondition(format!(
        "invalid arg '{key}' for queue '{queue}' in vhost '{vhost}' of queue type rabbit_classic_queue"
    ))
}

/// RabbitMQ's checks on the arguments of a queue about to be created, in its order: the
/// dead-letter exchange's type, then `x-queue-type`, then each classic-queue argument, then
/// arguments of other queue types.
pub fn check_declare_arguments(queue: &str, vhost: &str, args: &FieldTable) -> AmqpResult<()> {
    let named = (queue, vhost);
    match args.get("x-dead-letter-exchange") {
        None | Some(FieldValue::LongStr(_)) => {}
        Some(other) => {
            return Err(AmqpError::precondition(format!(
            "invalid type '{}' for arg 'x-dead-letter-exchange' in queue '{queue}' in vhost '{vhost}'",
            other.type_name()
        )))
        }
    }
    if let Some(v) = args.get("x-queue-type") {
        check_declare_arg("x-queue-type", v, args)
            .map_err(|why| invalid_arg("x-queue-type", named, &why))?;
        if v.as_str() == Some("quorum") {
            return check_quorum_arguments(named, args);
        }
        if let Some(t @ "stream") = v.as_str() {
            return Err(invalid_arg(
                "x-queue-type",
                named,
                &format!("queue type '{t}' is not supported by this Warren version yet"),
            ));
        }
    }
    for &key in CLASSIC_QUEUE_ARGS {
        if let Some(v) = args.get(key) {
            check_declare_arg(key, v, args).map_err(|why| invalid_arg(key, named, &why))?;
        }
    }
    match args
        .iter()
        .find(|(k, _)| OTHER_QUEUE_TYPES_ARGS.contains(&k.as_str()))
    {
        Some((key, _)) => Err(not_for_classic(key, named)),
        None => Ok(()),
    }
}

/// The rest of the checks for a quorum queue: the values of the arguments classic queues
/// share with it, then any argument of another queue type refused with RabbitMQ's text.
fn check_quorum_arguments(named: (&str, &str), args: &FieldTable) -> AmqpResult<()> {
    for &key in QUORUM_QUEUE_ARGS {
        if let Some(v) = args.get(key) {
            check_declare_arg(key, v, args).map_err(|why| invalid_arg(key, named, &why))?;
        }
    }
    let foreign = args.iter().find(|(k, _)| {
        let k = k.as_str();
        !QUORUM_QUEUE_ARGS.contains(&k)
            && (CLASSIC_QUEUE_ARGS.contains(&k) || OTHER_QUEUE_TYPES_ARGS.contains(&k))
    });
    match foreign {
        Some((key, _)) => {
            let (queue, vhost) = named;
            Err(AmqpError::precondition(format!(
                "invalid arg '{key}' for queue '{queue}' in vhost '{vhost}' of queue type rabbit_quorum_queue"
            )))
        }
        None => Ok(()),
    }
}

/// Whether declare arguments ask for a quorum queue.
pub fn is_quorum(args: &FieldTable) -> bool {
    args.get("x-queue-type").and_then(FieldValue::as_str) == Some("quorum")
}

/// RabbitMQ's checks on basic.consume arguments for a classic queue: `x-priority` an
/// integer, `x-cancel-on-ha-failover` a boolean, no stream-only argument.
pub fn check_consume_arguments(queue: &str, vhost: &str, args: &FieldTable) -> AmqpResult<()> {
    let named = (queue, vhost);
    if let Some(v) = args.get("x-priority") {
        integer(v).map_err(|why| invalid_arg("x-priority", named, &why))?;
    }
    if let Some(v) = args.get("x-cancel-on-ha-failover") {
        boolean(v).map_err(|why| invalid_arg("x-cancel-on-ha-failover", named, &why))?;
    }
    match args
        .iter()
        .find(|(k, _)| OTHER_QUEUE_TYPES_CONSUME_ARGS.contains(&k.as_str()))
    {
        Some((key, _)) => Err(not_for_classic(key, named)),
        None => Ok(()),
    }
}

/// The limits a queue acts on, read from arguments that passed `check_declare_arguments`
/// (or were stored by an older version: a value that does not parse is ignored, so a
/// recovered queue always comes back).
pub fn queue_limits(args: &FieldTable) -> QueueLimits {
    let non_negative = |key: &str| {
        args.get(key)
            .and_then(FieldValue::as_integer)
            .and_then(|n| u64::try_from(n).ok())
    };
    let text = |key: &str| {
        args.get(key)
            .and_then(FieldValue::as_str)
            .map(ShortStr::from)
    };
    QueueLimits {
        max_length: non_negative("x-max-length"),
        max_length_bytes: non_negative("x-max-length-bytes"),
        message_ttl_ms: non_negative("x-message-ttl"),
        expires_ms: non_negative("x-expires").filter(|&ms| ms > 0),
        overflow: match args.get("x-overflow").and_then(FieldValue::as_str) {
            Some("drop-head") => Some(Overflow::DropHead),
            Some("reject-publish") => Some(Overflow::RejectPublish),
            Some("reject-publish-dlx") => Some(Overflow::RejectPublishDlx),
            _ => None,
        },
        max_priority: non_negative("x-max-priority").and_then(|p| u8::try_from(p).ok()),
        single_active_consumer: args
            .get("x-single-active-consumer")
            .and_then(FieldValue::as_bool)
            .unwrap_or(false),
        dead_letter_exchange: text("x-dead-letter-exchange"),
        dead_letter_routing_key: text("x-dead-letter-routing-key"),
        lazy: args.get("x-queue-mode").and_then(FieldValue::as_str) == Some("lazy"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(entries: &[(&str, FieldValue)]) -> FieldTable {
        entries
            .iter()
            .map(|(k, v)| ((*k).into(), v.clone()))
            .collect()
    }

    fn refusal(entries: &[(&str, FieldValue)]) -> String {
        check_declare_arguments("q", "/", &args(entries))
            .unwrap_err()
            .reply_text()
    }

    const PREFIX: &str = "PRECONDITION_FAILED - invalid arg";

    #[test]
    fn texts_match_rabbitmq() {
        use FieldValue::*;
        let s = FieldValue::string;
        let cases: Vec<(Vec<(&str, FieldValue)>, &str)> = vec![
            (vec![("x-message-ttl", I32(-1))], "'x-message-ttl' for queue 'q' in vhost '/': {value_negative,-1}"),
            (vec![("x-message-ttl", s("abc"))], "'x-message-ttl' for queue 'q' in vhost '/': \"expected integer, got longstr\""),
            (vec![("x-message-ttl", I64(400_000_000_000))], "'x-message-ttl' for queue 'q' in vhost '/': {value_too_large,400000000000}"),
            (vec![("x-expires", I32(0))], "'x-expires' for queue 'q' in vhost '/': {value_zero,0}"),
            (vec![("x-max-length", Timestamp(3))], "'x-max-length' for queue 'q' in vhost '/': \"expected integer, got timestamp\""),
            (vec![("x-max-priority", I32(256))], "'x-max-priority' for queue 'q' in vhost '/': {max_value_exceeded,256}"),
            (vec![("x-overflow", s("foo"))], "'x-overflow' for queue 'q' in vhost '/': invalid_overflow"),
            (vec![("x-overflow", I32(5))], "'x-overflow' for queue 'q' in vhost '/': {unacceptable_type,signedint}"),
            (vec![("x-queue-mode", s("foo"))], "'x-queue-mode' for queue 'q' in vhost '/': \"unsupported queue mode 'foo'\""),
            (vec![("x-queue-type", s("foo"))], "'x-queue-type' for queue 'q' in vhost '/': \"unsupported queue type 'foo'\""),
            (vec![("x-queue-version", I32(3))], "'x-queue-version' for queue 'q' in vhost '/': \"unsupported queue version '3'\""),
            (vec![("x-single-active-consumer", I32(1))], "'x-single-active-consumer' for queue 'q' in vhost '/': {unacceptable_type,signedint}"),
            (vec![("x-dead-letter-routing-key", s("rk"))], "'x-dead-letter-routing-key' for queue 'q' in vhost '/': routing_key_but_no_dlx_defined"),
            (vec![("x-dead-letter-exchange", s("d")), ("x-dead-letter-routing-key", I32(5))], "'x-dead-letter-routing-key' for queue 'q' in vhost '/': {unacceptable_type,signedint}"),
            (vec![("x-delivery-limit", I32(5))], "'x-delivery-limit' for queue 'q' in vhost '/' of queue type rabbit_classic_queue"),
        ];
        for (entries, want) in cases {
            assert_eq!(refusal(&entries), format!("{PREFIX} {want}"));
        }
    }

    #[test]
    fn checked_in_rabbitmq_order() {
        use FieldValue::*;
        let s = FieldValue::string;
        // x-expires comes before x-message-ttl whatever the table order.
        assert!(
            refusal(&[("x-message-ttl", s("b")), ("x-expires", s("a"))]).contains("'x-expires'")
        );
        // the dead-letter exchange's type first of all
        assert_eq!(
            refusal(&[("x-expires", I32(-1)), ("x-dead-letter-exchange", I32(5))]),
            "PRECONDITION_FAILED - invalid type 'signedint' for arg 'x-dead-letter-exchange' in queue 'q' in vhost '/'"
        );
    }

    #[test]
    fn valid_and_unknown_arguments_pass() {
        use FieldValue::*;
        let s = FieldValue::string;
        let ok = args(&[
            ("x-expires", I64(1)),
            ("x-message-ttl", U8(0)),
            ("x-max-priority", I16(10)),
            ("x-queue-mode", s("lazy")),
            ("x-queue-version", I32(2)),
            ("x-queue-type", s("classic")),
            ("x-dead-letter-exchange", s("")),
            ("x-dead-letter-routing-key", s("k")),
            ("x-single-active-consumer", Bool(true)),
            ("x-something-else", Void),
        ]);
        assert!(check_declare_arguments("q", "/", &ok).is_ok());
    }

    #[test]
    fn consume_arguments() {
        use FieldValue::*;
        let check = |e: &[(&str, FieldValue)]| check_consume_arguments("q", "/", &args(e));
        assert!(check(&[("x-priority", I32(-5))]).is_ok());
        assert!(check(&[("x-credit", Table(FieldTable::new()))]).is_ok());
        assert_eq!(
            check(&[("x-priority", FieldValue::string("high"))]).unwrap_err().reply_text(),
            "PRECONDITION_FAILED - invalid arg 'x-priority' for queue 'q' in vhost '/': \"expected integer, got longstr\""
        );
        assert_eq!(
            check(&[("x-stream-offset", I32(1))]).unwrap_err().reply_text(),
            "PRECONDITION_FAILED - invalid arg 'x-stream-offset' for queue 'q' in vhost '/' of queue type rabbit_classic_queue"
        );
    }

    #[test]
    fn limits_ignore_what_does_not_parse() {
        use FieldValue::*;
        let l = queue_limits(&args(&[
            ("x-max-length", I32(-1)),
            ("x-expires", I32(0)),
            ("x-max-priority", I32(300)),
            ("x-message-ttl", U16(50)),
        ]));
        assert_eq!(l.max_length, None);
        assert_eq!(l.expires_ms, None);
        assert_eq!(l.max_priority, None);
        assert_eq!(l.message_ttl_ms, Some(50));
    }
}
