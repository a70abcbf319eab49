//! AMQP field tables ⇄ JSON, as RabbitMQ's management plugin converts them
//! (`rabbit_misc:amqp_table/1` one way, `rabbit_misc:to_amqp_table/1` the other).
//!
//! To JSON: every integer type and timestamps become numbers, floats and decimals numbers,
//! strings strings (bytes that are not UTF-8 become "Not UTF-8, base64 is: …" as RabbitMQ
//! writes them), arrays lists, tables objects (a repeated key: the last one wins, as in an
//! Erlang map), void null. From JSON: integers become a signed 32-bit `long` when they fit
//! (RabbitMQ's type) and a 64-bit one otherwise, other numbers doubles, strings longstr,
//! booleans bool, lists arrays, objects tables; null is refused as RabbitMQ refuses it.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine;
use bytes::Bytes;
use serde_json::{Map, Number, Value};
use warren_codec::{FieldTable, FieldValue, ShortStr};

/// A field table as the JSON object RabbitMQ shows for `arguments`.
pub fn table_to_json(table: &FieldTable) -> Value {
    let mut object = Map::new();
    for (key, value) in table.iter() {
        object.insert(key.as_str().to_owned(), value_to_json(value));
    }
    Value::Object(object)
}

fn bytes_to_json(bytes: &Bytes) -> Value {
    match std::str::from_utf8(bytes) {
        Ok(text) => Value::String(text.to_owned()),
        Err(_) => Value::String(format!("Not UTF-8, base64 is: {}", BASE64.encode(bytes))),
    }
}

fn value_to_json(value: &FieldValue) -> Value {
    match value {
        FieldValue::Bool(b) => Value::Bool(*b),
        FieldValue::I8(v) => Value::from(*v),
        FieldValue::U8(v) => Value::from(*v),
        FieldValue::I16(v) => Value::from(*v),
        FieldValue::U16(v) => Value::from(*v),
        FieldValue::I32(v) => Value::from(*v),
        FieldValue::U32(v) => Value::from(*v),
        FieldValue::I64(v) => Value::from(*v),
        FieldValue::Timestamp(v) => Value::from(*v),
        FieldValue::F32(v) => float(f64::from(*v)),
        FieldValue::F64(v) => float(*v),
        FieldValue::Decimal { scale, value } => {
            float(f64::from(*value) / 10f64.powi(i32::from(*scale)))
        }
        FieldValue::LongStr(b) | FieldValue::Bytes(b) => bytes_to_json(b),
        FieldValue::Array(items) => Value::Array(items.iter().map(value_to_json).collect()),
        FieldValue::Table(t) => table_to_json(t),
        FieldValue::Void => Value::Null,
    }
}

/// NaN and infinities have no JSON form; RabbitMQ cannot produce them from JSON either.
fn float(v: f64) -> Value {
    Number::from_f64(v).map_or(Value::Null, Value::Number)
}

/// A JSON object (`arguments` of a queue, exchange or binding) as a field table. `what`
/// names the object in errors. A missing or null `arguments`, or `[]` (old exports), is the
/// empty table.
pub fn json_to_table(value: Option<&Value>, what: &str) -> Result<FieldTable, String> {
    match value {
        None | Some(Value::Null) => Ok(FieldTable::new()),
        Some(Value::Array(items)) if items.is_empty() => Ok(FieldTable::new()),
        Some(Value::Object(object)) => object_to_table(object, what),
        Some(other) => Err(format!("{what}: arguments must be an object, not {other}")),
    }
}

fn object_to_table(object: &Map<String, Value>, what: &str) -> Result<FieldTable, String> {
    let mut table = FieldTable::new();
    for (key, value) in object {
        if key.len() > ShortStr::MAX_LEN {
            return Err(format!("{what}: argument name '{key}' is too long"));
        }
        let field = json_to_value(value).map_err(|e| format!("{what}: argument '{key}': {e}"))?;
        table.push(ShortStr::from(key.as_str()), field);
    }
    Ok(table)
}

fn json_to_value(value: &Value) -> Result<FieldValue, String> {
    Ok(match value {
        Value::Null => return Err("null is not allowed".into()),
        Value::Bool(b) => FieldValue::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => match i32::try_from(i) {
                Ok(small) => FieldValue::I32(small),
                Err(_) => FieldValue::I64(i),
            },
            (None, _) if n.is_u64() => {
                return Err(format!("{n} does not fit a signed 64-bit integer"))
            }
            (None, Some(f)) => FieldValue::F64(f),
            (None, None) => return Err(format!("{n} is not a number AMQP can carry")),
        },
        Value::String(s) => FieldValue::string(s.as_str()),
        Value::Array(items) => {
            FieldValue::Array(items.iter().map(json_to_value).collect::<Result<_, _>>()?)
        }
        Value::Object(object) => FieldValue::Table(object_to_table(object, "nested table")?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_field_type_as_the_management_plugin_shows_it() {
        let mut nested = FieldTable::new();
        nested.insert("k", FieldValue::string("v"));
        let mut t = FieldTable::new();
        t.insert("x-max-length", FieldValue::I64(10));
        t.insert("x-message-ttl", FieldValue::U32(60_000));
        t.insert("x-priority", FieldValue::I8(-3));
        t.insert("short", FieldValue::I16(7));
        t.insert("flag", FieldValue::Bool(true));
        t.insert("ratio", FieldValue::F64(0.5));
        t.insert(
            "price",
            FieldValue::Decimal {
                scale: 2,
                value: 1234,
            },
        );
        t.insert("when", FieldValue::Timestamp(1_700_000_000));
        t.insert("name", FieldValue::string("dlx"));
        t.insert(
            "raw",
            FieldValue::Bytes(Bytes::from_static(&[0xff, 0x00, 0x41])),
        );
        t.insert(
            "list",
            FieldValue::Array(vec![FieldValue::string("a"), FieldValue::I32(1)]),
        );
        t.insert("nested", FieldValue::Table(nested));
        t.insert("nothing", FieldValue::Void);
        assert_eq!(
            table_to_json(&t),
            json!({
                "x-max-length": 10, "x-message-ttl": 60000, "x-priority": -3, "short": 7,
                "flag": true, "ratio": 0.5, "price": 12.34, "when": 1_700_000_000u64,
                "name": "dlx", "raw": "Not UTF-8, base64 is: /wBB",
                "list": ["a", 1], "nested": {"k": "v"}, "nothing": null
            })
        );
    }

    #[test]
    fn json_arguments_take_rabbitmqs_amqp_types() {
        let t = json_to_table(
            Some(&json!({
                "x-max-priority": 10, "big": 5_000_000_000i64, "ratio": 1.5, "mode": "lazy",
                "on": false, "tags": ["a", 2], "nested": {"k": "v"}
            })),
            "queue 'q'",
        )
        .unwrap();
        assert_eq!(t.get("x-max-priority"), Some(&FieldValue::I32(10)));
        assert_eq!(t.get("big"), Some(&FieldValue::I64(5_000_000_000)));
        assert_eq!(t.get("ratio"), Some(&FieldValue::F64(1.5)));
        assert_eq!(t.get("mode"), Some(&FieldValue::string("lazy")));
        assert_eq!(t.get("on"), Some(&FieldValue::Bool(false)));
        assert_eq!(
            t.get("tags"),
            Some(&FieldValue::Array(vec![
                FieldValue::string("a"),
                FieldValue::I32(2)
            ]))
        );
        let mut nested = FieldTable::new();
        nested.insert("k", FieldValue::string("v"));
        assert_eq!(t.get("nested"), Some(&FieldValue::Table(nested)));
        // And back: the same JSON.
        assert_eq!(table_to_json(&t)["big"], json!(5_000_000_000i64));
    }

    #[test]
    fn missing_empty_and_bad_arguments() {
        assert!(json_to_table(None, "q").unwrap().is_empty());
        assert!(json_to_table(Some(&json!([])), "q").unwrap().is_empty());
        assert!(json_to_table(Some(&json!({})), "q").unwrap().is_empty());
        let err = json_to_table(Some(&json!({"x-expires": null})), "queue 'q'").unwrap_err();
        assert_eq!(err, "queue 'q': argument 'x-expires': null is not allowed");
        assert!(json_to_table(Some(&json!("x")), "queue 'q'").is_err());
        assert!(json_to_table(Some(&json!({"n": u64::MAX})), "q").is_err());
    }
}
