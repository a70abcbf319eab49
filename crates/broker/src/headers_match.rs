//! The headers exchange's matching rule: `x-match` = all | any | all-with-x | any-with-x over
//! the binding's arguments, compared with a message's headers as RabbitMQ does (a void binding
//! value means "present with any value"; numbers compare by value whatever their width).
//!
//! Matching is linear in the message's headers plus the bindings' arguments, however wide a
//! peer makes either: a wide header table is indexed once per message (`RoutingHeaders`).

use std::collections::HashMap;
use warren_codec::{FieldTable, FieldValue, ShortStr};

/// Above this many headers a message's headers are hashed once instead of scanned per
/// binding argument: below it a scan is cheaper than building the map.
const INDEX_ABOVE_HEADERS: usize = 16;

/// A message's headers as the headers exchange looks them up. RabbitMQ (3.13 and later) folds
/// them into a map, so of a key repeated in the table the *last* entry counts.
pub struct RoutingHeaders<'a> {
    table: Option<&'a FieldTable>,
    index: Option<HashMap<&'a str, &'a FieldValue>>,
}

impl<'a> RoutingHeaders<'a> {
    pub fn new(table: Option<&'a FieldTable>) -> RoutingHeaders<'a> {
        let index = table
            .filter(|t| t.len() > INDEX_ABOVE_HEADERS)
            .map(|t| t.iter().map(|(k, v)| (k.as_str(), v)).collect());
        RoutingHeaders { table, index }
    }

    fn get(&self, key: &str) -> Option<&'a FieldValue> {
        match &self.index {
            Some(index) => index.get(key).copied(),
            None => self
                .table?
                .iter()
                .rev()
                .find(|(k, _)| k.as_str() == key)
                .map(|(_, v)| v),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XMatch {
    All,
    Any,
    AllWithX,
    AnyWithX,
}

impl XMatch {
    /// Reads `x-match` from binding arguments; `Err` with the offending value if unknown.
    pub fn from_arguments(args: &FieldTable) -> Result<XMatch, String> {
        match args.get("x-match") {
            None => Ok(XMatch::All),
            Some(v) => match v.as_str() {
                Some("all") => Ok(XMatch::All),
                Some("any") => Ok(XMatch::Any),
                Some("all-with-x") => Ok(XMatch::AllWithX),
                Some("any-with-x") => Ok(XMatch::AnyWithX),
                _ => Err(format!("{v:?}")),
            },
        }
    }
}

fn values_equal(a: &FieldValue, b: &FieldValue) -> bool {
    match (a.as_i64(), b.as_i64()) {
        (Some(x), Some(y)) => x == y,
        _ => match (a.as_str(), b.as_str()) {
            (Some(x), Some(y)) => x == y,
            _ => a == b,
        },
    }
}

/// Does a message with `headers` match a binding with `args`?
pub fn headers_match(rule: XMatch, args: &FieldTable, headers: &RoutingHeaders) -> bool {
    let with_x = matches!(rule, XMatch::AllWithX | XMatch::AnyWithX);
    let mut considered = args
        .iter()
        .filter(|(k, _)| k.as_str() != "x-match" && (with_x || !k.starts_with("x-")));
    let matches_one = |(k, v): (&ShortStr, &FieldValue)| {
        let Some(h) = headers.get(k) else {
            return false;
        };
        matches!(v, FieldValue::Void) || values_equal(v, h)
    };
    match rule {
        XMatch::All | XMatch::AllWithX => considered.all(matches_one),
        XMatch::Any | XMatch::AnyWithX => considered.any(matches_one),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(kv: &[(&str, FieldValue)]) -> FieldTable {
        let mut t = FieldTable::new();
        for (k, v) in kv {
            t.insert(*k, v.clone());
        }
        t
    }

    fn matches(rule: XMatch, args: &FieldTable, headers: Option<&FieldTable>) -> bool {
        headers_match(rule, args, &RoutingHeaders::new(headers))
    }

    #[test]
    fn all_and_any() {
        let args = table(&[("a", FieldValue::I32(1)), ("b", FieldValue::string("x"))]);
        let both = table(&[("a", FieldValue::I64(1)), ("b", FieldValue::string("x"))]);
        let one = table(&[("a", FieldValue::U8(1))]);
        assert!(matches(XMatch::All, &args, Some(&both)));
        assert!(!matches(XMatch::All, &args, Some(&one)));
        assert!(matches(XMatch::Any, &args, Some(&one)));
        assert!(!matches(XMatch::Any, &args, None));
    }

    #[test]
    fn x_keys_only_count_with_x() {
        let args = table(&[
            ("x-k", FieldValue::string("v")),
            ("x-match", FieldValue::string("any-with-x")),
        ]);
        let h = table(&[("x-k", FieldValue::string("v"))]);
        assert!(matches(XMatch::AnyWithX, &args, Some(&h)));
        assert!(!matches(XMatch::Any, &args, Some(&h)));
    }

    /// A header key sent twice counts with its last value (RabbitMQ 3.13+ builds a map from
    /// the headers), both when the headers are scanned and when they are indexed.
    #[test]
    fn repeated_header_key_counts_its_last_entry() {
        for filler in [0, INDEX_ABOVE_HEADERS + 1] {
            let mut headers = FieldTable::new();
            for i in 0..filler {
                headers.push(format!("filler-{i}").into(), FieldValue::Void);
            }
            headers.push("k".into(), FieldValue::string("first"));
            headers.push("k".into(), FieldValue::string("last"));
            let last = table(&[("k", FieldValue::string("last"))]);
            let first = table(&[("k", FieldValue::string("first"))]);
            assert!(matches(XMatch::All, &last, Some(&headers)), "{filler}");
            assert!(!matches(XMatch::All, &first, Some(&headers)), "{filler}");
        }
    }
}
