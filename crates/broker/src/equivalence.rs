//! Redeclare equivalence: declaring a queue or exchange that exists must match it flag by
//! flag and argument by argument, or RabbitMQ refuses with 406 and a text naming the first
//! difference (`rabbit_misc:assert_args_equivalence` and `assert_field_equivalence`).

use crate::error::{AmqpError, AmqpResult};
use warren_codec::{FieldTable, FieldValue};

/// A value as RabbitMQ prints it in these texts: strings as they are, other values as
/// Erlang terms.
pub(crate) fn term(v: &FieldValue) -> String {
    match v {
        FieldValue::Bool(b) => b.to_string(),
        FieldValue::F32(f) => format!("{:?}", f64::from(*f)),
        FieldValue::F64(f) => format!("{f:?}"),
        FieldValue::Decimal { scale, value } => format!("{{{scale},{value}}}"),
        FieldValue::LongStr(b) | FieldValue::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
        FieldValue::Array(items) => {
            let items: Vec<String> = items
                .iter()
                .map(|i| format!("{{{},{}}}", i.type_name(), term(i)))
                .collect();
            format!("[{}]", items.join(","))
        }
        FieldValue::Table(t) => {
            let items: Vec<String> = t
                .iter()
                .map(|(k, i)| format!("{{<<\"{k}\">>,{},{}}}", i.type_name(), term(i)))
                .collect();
            format!("[{}]", items.join(","))
        }
        FieldValue::Void => "undefined".to_owned(),
        FieldValue::Timestamp(t) => t.to_string(),
        v => v.as_i64().map_or_else(String::new, |i| i.to_string()),
    }
}

/// RabbitMQ's type classes: integer widths compare equal to each other, as do float widths.
fn type_class(v: &FieldValue) -> &'static str {
    match v {
        FieldValue::I8(_)
        | FieldValue::U8(_)
        | FieldValue::I16(_)
        | FieldValue::U16(_)
        | FieldValue::I32(_)
        | FieldValue::U32(_)
        | FieldValue::I64(_)
        | FieldValue::Decimal { .. } => "int",
        FieldValue::F32(_) | FieldValue::F64(_) => "float",
        other => other.type_name(),
    }
}

/// Same type class and same value.
fn equivalent(a: &FieldValue, b: &FieldValue) -> bool {
    if type_class(a) != type_class(b) {
        return false;
    }
    match (a, b) {
        (FieldValue::F32(_) | FieldValue::F64(_), FieldValue::F32(_) | FieldValue::F64(_)) => {
            as_f64(a) == as_f64(b)
        }
        (FieldValue::Decimal { .. }, _) | (_, FieldValue::Decimal { .. }) => a == b,
        _ => match (a.as_integer(), b.as_integer()) {
            (Some(x), Some(y)) => x == y,
            _ => a == b,
        },
    }
}

fn as_f64(v: &FieldValue) -> f64 {
    match v {
        FieldValue::F32(f) => f64::from(*f),
        FieldValue::F64(f) => *f,
        _ => f64::NAN,
    }
}

/// One side of an argument difference: "none" when absent, "the value 'V' of type 'T'"
/// when only this side has it.
fn one_sided(v: Option<&FieldValue>) -> String {
    match v {
        None => "none".to_owned(),
        Some(v) => format!("the value '{}' of type '{}'", term(v), v.type_name()),
    }
}

/// The resource a check is about: its kind ("queue", "exchange"), name and vhost.
pub(crate) type Res<'a> = (&'a str, &'a str, &'a str);

fn refuse((kind, name, vhost): Res, key: &str, received: &str, current: &str) -> AmqpError {
    AmqpError::precondition(format!(
        "inequivalent arg '{key}' for {kind} '{name}' in vhost '{vhost}': received {received} but current is {current}"
    ))
}

/// A difference in a declared property that is not an argument (a flag, the exchange type).
pub(crate) fn inequivalent(
    res: Res,
    key: &str,
    received: impl std::fmt::Display,
    current: impl std::fmt::Display,
) -> AmqpError {
    refuse(res, key, &format!("'{received}'"), &format!("'{current}'"))
}

/// The first flag whose requested value differs from the existing one, as a 406.
pub(crate) fn check_flags(res: Res, flags: &[(&str, bool, bool)]) -> AmqpResult<()> {
    match flags
        .iter()
        .find(|(_, received, current)| received != current)
    {
        Some(&(flag, received, current)) => Err(inequivalent(res, flag, received, current)),
        None => Ok(()),
    }
}

/// Compares the arguments in `keys`, in that order, between a redeclaration and what exists.
/// Other arguments may differ freely. A queue declared without `x-queue-type` is a classic
/// queue, so that argument absent and "classic" are the same.
pub(crate) fn check_args(
    res: Res,
    keys: &[&str],
    received: &FieldTable,
    current: &FieldTable,
) -> AmqpResult<()> {
    for &key in keys {
        let (new, old) = (received.get(key), current.get(key));
        match (new, old) {
            (None, None) => {}
            (Some(a), Some(b)) if equivalent(a, b) => {}
            (Some(a), Some(b)) => {
                let quoted = |v: &FieldValue| format!("'{}'", term(v));
                return Err(refuse(res, key, &quoted(a), &quoted(b)));
            }
            (Some(v), None) | (None, Some(v))
                if key == "x-queue-type" && v.as_str() == Some("classic") => {}
            _ => return Err(refuse(res, key, &one_sided(new), &one_sided(old))),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(entries: &[(&str, FieldValue)]) -> FieldTable {
        entries
            .iter()
            .map(|(k, v)| ((*k).into(), v.clone()))
            .collect()
    }

    fn text(r: AmqpResult<()>) -> String {
        r.unwrap_err().reply_text()
    }

    #[test]
    fn integer_widths_are_equivalent_strings_are_not() {
        let old = table(&[("x-message-ttl", FieldValue::I32(1000))]);
        let same = table(&[("x-message-ttl", FieldValue::I64(1000))]);
        assert!(check_args(("queue", "q", "/"), &["x-message-ttl"], &same, &old).is_ok());
        let as_text = table(&[("x-message-ttl", FieldValue::string("1000"))]);
        assert_eq!(
            text(check_args(("queue", "q", "/"), &["x-message-ttl"], &as_text, &old)),
            "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/': received '1000' but current is '1000'"
        );
    }

    #[test]
    fn one_sided_differences_name_the_type() {
        let old = table(&[("x-message-ttl", FieldValue::I32(1000))]);
        assert_eq!(
            text(check_args(("queue", "q", "/"), &["x-message-ttl"], &FieldTable::new(), &old)),
            "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue 'q' in vhost '/': received none but current is the value '1000' of type 'signedint'"
        );
        let new = table(&[("x-max-length", FieldValue::I32(3))]);
        assert_eq!(
            text(check_args(("queue", "q", "/"), &["x-max-length"], &new, &FieldTable::new())),
            "PRECONDITION_FAILED - inequivalent arg 'x-max-length' for queue 'q' in vhost '/': received the value '3' of type 'signedint' but current is none"
        );
    }

    #[test]
    fn absent_queue_type_is_classic() {
        let classic = table(&[("x-queue-type", FieldValue::string("classic"))]);
        let keys = ["x-queue-type"];
        assert!(check_args(("queue", "q", "/"), &keys, &classic, &FieldTable::new()).is_ok());
        assert!(check_args(("queue", "q", "/"), &keys, &FieldTable::new(), &classic).is_ok());
        let other = table(&[("x-queue-type", FieldValue::string("quorum"))]);
        assert!(check_args(("queue", "q", "/"), &keys, &other, &FieldTable::new()).is_err());
    }

    #[test]
    fn flags_report_the_first_difference() {
        assert_eq!(
            text(check_flags(("queue", "q", "/"), &[("durable", true, false), ("auto_delete", true, false)])),
            "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'q' in vhost '/': received 'true' but current is 'false'"
        );
        assert!(check_flags(("exchange", "x", "/"), &[("internal", false, false)]).is_ok());
    }
}
