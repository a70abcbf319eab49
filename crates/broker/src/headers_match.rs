//! The headers exchange's matching rule: `x-match` = all | any | all-with-x | any-with-x over
//! the binding's arguments, compared with a message's headers as RabbitMQ does (a void binding
//! value means "present with any value"; numbers compare by value whatever their width).

use warren_codec::{FieldTable, FieldValue};

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
pub fn headers_match(rule: XMatch, args: &FieldTable, headers: Option<&FieldTable>) -> bool {
    let with_x = matches!(rule, XMatch::AllWithX | XMatch::AnyWithX);
    let mut considered = args
        .iter()
        .filter(|(k, _)| k.as_str() != "x-match" && (with_x || !k.starts_with("x-")));
    let matches_one = |(k, v): (&warren_codec::ShortStr, &FieldValue)| {
        let Some(h) = headers.and_then(|h| h.get(k)) else {
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

    #[test]
    fn all_and_any() {
        let args = table(&[("a", FieldValue::I32(1)), ("b", FieldValue::string("x"))]);
        let both = table(&[("a", FieldValue::I64(1)), ("b", FieldValue::string("x"))]);
        let one = table(&[("a", FieldValue::U8(1))]);
        assert!(headers_match(XMatch::All, &args, Some(&both)));
        assert!(!headers_match(XMatch::All, &args, Some(&one)));
        assert!(headers_match(XMatch::Any, &args, Some(&one)));
        assert!(!headers_match(XMatch::Any, &args, None));
    }

    #[test]
    fn x_keys_only_count_with_x() {
        let args = table(&[
            ("x-k", FieldValue::string("v")),
            ("x-match", FieldValue::string("any-with-x")),
        ]);
        let h = table(&[("x-k", FieldValue::string("v"))]);
        assert!(headers_match(XMatch::AnyWithX, &args, Some(&h)));
        assert!(!headers_match(XMatch::Any, &args, Some(&h)));
    }
}
