//! Sender-selected distribution: a message is routed with its publish routing key and with
//! every routing key its `CC` and `BCC` headers list, and the `BCC` header is removed before
//! anyone sees the message (RabbitMQ's `rabbit_basic:header_routes` and its BCC strip).

use crate::error::{AmqpError, AmqpResult};
use bytes::Bytes;
use warren_codec::{BasicProperties, FieldTable, FieldValue};

/// The headers whose routing keys a message is also routed with, in RabbitMQ's order.
const ROUTING_HEADERS: [&str; 2] = ["CC", "BCC"];

/// The extra routing keys a message's `CC` and `BCC` headers name. Entries that are not
/// strings are skipped, as RabbitMQ does; a `CC` or `BCC` that is not an array makes the
/// message invalid (406). Allocates nothing when neither header is present.
pub fn header_routes(headers: Option<&FieldTable>) -> AmqpResult<Vec<Bytes>> {
    let mut routes = Vec::new();
    header_routes_into(headers, &mut routes)?;
    Ok(routes)
}

/// `header_routes` into `routes` (emptied first): a publisher that reuses one vector
/// neither allocates nor drops one per message.
#[inline]
pub fn header_routes_into(headers: Option<&FieldTable>, routes: &mut Vec<Bytes>) -> AmqpResult<()> {
    if !routes.is_empty() {
        routes.clear();
    }
    match headers {
        None => Ok(()),
        Some(headers) => routes_in(headers, routes),
    }
}

/// `header_routes_into` for a message with headers.
fn routes_in(headers: &FieldTable, routes: &mut Vec<Bytes>) -> AmqpResult<()> {
    for key in ROUTING_HEADERS {
        match headers.get(key) {
            None => {}
            Some(FieldValue::Array(entries)) => {
                routes.extend(entries.iter().filter_map(|entry| match entry {
                    FieldValue::LongStr(route) => Some(route.clone()),
                    _ => None,
                }))
            }
            Some(other) => {
                return Err(AmqpError::precondition(format!(
                    "invalid message: {{unacceptable_type_in_header,\"{key}\",{}}}",
                    other.type_name()
                )))
            }
        }
    }
    Ok(())
}

/// Removes the `BCC` header (the other headers keep their order); true when there was one,
/// so the caller knows the encoded properties must be rebuilt.
pub fn strip_bcc(properties: &mut BasicProperties) -> bool {
    properties
        .headers
        .as_mut()
        .is_some_and(|h| h.remove("BCC").is_some())
}

/// A publish's routing keys: its own, then those of its `CC` and `BCC` headers
/// ([`header_routes`]); borrowed, and without an allocation when there are no others.
pub enum PublishKeys<'a> {
    One([&'a str; 1]),
    Many(Vec<&'a str>),
}

impl<'a> PublishKeys<'a> {
    /// `routes` that are not UTF-8 are skipped: no binding key could match them.
    #[inline]
    pub fn new(routing_key: &'a str, routes: &'a [Bytes]) -> PublishKeys<'a> {
        if routes.is_empty() {
            return PublishKeys::One([routing_key]);
        }
        PublishKeys::Many(
            std::iter::once(routing_key)
                .chain(routes.iter().filter_map(|r| std::str::from_utf8(r).ok()))
                .collect(),
        )
    }

    /// Every key, the publish's own first.
    #[inline]
    pub fn all(&self) -> &[&'a str] {
        match self {
            PublishKeys::One(key) => key,
            PublishKeys::Many(keys) => keys,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(values: &[&str]) -> FieldValue {
        FieldValue::Array(values.iter().map(|s| FieldValue::string(*s)).collect())
    }

    #[test]
    fn cc_then_bcc_strings_only() {
        let mut h = FieldTable::new();
        h.insert("BCC", strings(&["b1"]));
        h.insert(
            "CC",
            FieldValue::Array(vec![
                FieldValue::string("c1"),
                FieldValue::I32(7),
                FieldValue::string("c2"),
            ]),
        );
        let routes = header_routes(Some(&h)).unwrap();
        assert_eq!(routes, vec!["c1", "c2", "b1"]);
    }

    #[test]
    fn no_headers_no_routes() {
        assert!(header_routes(None).unwrap().is_empty());
        let mut h = FieldTable::new();
        h.insert("cc", strings(&["lower-case is not CC"]));
        assert!(header_routes(Some(&h)).unwrap().is_empty());
    }

    #[test]
    fn non_array_is_refused_with_rabbitmq_text() {
        let mut h = FieldTable::new();
        h.insert("CC", FieldValue::string("a"));
        let e = header_routes(Some(&h)).unwrap_err();
        assert_eq!(
            e.reply_text(),
            "PRECONDITION_FAILED - invalid message: {unacceptable_type_in_header,\"CC\",longstr}"
        );
    }

    #[test]
    fn strip_bcc_keeps_other_headers_in_order() {
        let mut h = FieldTable::new();
        h.insert("a", FieldValue::I32(1));
        h.insert("BCC", strings(&["x"]));
        h.insert("CC", strings(&["y"]));
        let mut p = BasicProperties {
            headers: Some(h),
            ..Default::default()
        };
        assert!(strip_bcc(&mut p));
        let keys: Vec<&str> = p
            .headers
            .as_ref()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(keys, ["a", "CC"]);
        assert!(!strip_bcc(&mut p));
        assert!(!strip_bcc(&mut BasicProperties::default()));
    }
}
