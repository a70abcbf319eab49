//! Messages across the protocols, as RabbitMQ 4 converts them (docs "Inter-Protocol
//! Property Conversions"). A message published over AMQP 1.0 keeps its sections as
//! published (`Message::amqp10`: message-annotations, bare message and footer; the header
//! is rebuilt on delivery and delivery-annotations, hop-by-hop, are dropped), so an AMQP 1.0
//! consumer gets it back unchanged — properties no 0-9-1 field holds (to, subject,
//! absolute-expiry-time, group-sequence, reply-to-group-id), footers, every annotation and
//! the exact encoding of the bare message — with the x-exchange and x-routing-key
//! annotations added, as RabbitMQ 4's `mc_amqp` does. Its 0-9-1 view (routing, the headers
//! exchange, TTL, dead-lettering, 0-9-1 consumers) is built once at publish, the body a
//! slice of the same bytes:
//!
//! - header: durable ⇄ delivery-mode 2/1, priority ⇄ priority, ttl ⇄ expiration;
//! - properties: message-id / correlation-id (string ≤ 255 bytes, ulong and uuid as text;
//!   longer strings and binaries as the x-message-id / x-correlation-id headers), user-id,
//!   reply-to, content-type, content-encoding, creation-time ⇄ timestamp (ms ⇄ s),
//!   group-id ⇄ app-id;
//! - application-properties ⇄ headers (not x-), message-annotations x-* ⇄ headers x-*,
//!   the 0-9-1 `type` ⇄ annotation x-basic-type;
//! - body: one data section ⇄ the body bytes. Any other body (amqp-value, amqp-sequence,
//!   several data sections) becomes its AMQP encoding with type "amqp-1.0" for 0-9-1, which
//!   is turned back into the same sections for an AMQP 1.0 consumer of a converted message.
//!
//! A message published over 0-9-1 has no AMQP 1.0 form and is converted for an AMQP 1.0
//! consumer by the table above. A dead-lettered copy keeps the 1.0 form it had; its death
//! history (x-death and the x-first/last-death-* headers of its 0-9-1 view) reaches an AMQP
//! 1.0 consumer as RabbitMQ 4's `x-opt-deaths`, `x-first-death-*` and `x-last-death-*`
//! message annotations. The header's first-acquirer is false on a redelivery, after a
//! failed delivery and for a dead-lettered copy; its delivery-count is the failed
//! deliveries of the queue's copy (`QueuedMessage::delivery_count`).

use crate::codec::value_len;
use bytes::{BufMut, Bytes, BytesMut};
use fe2o3_amqp_types::messaging::{
    annotations::OwnedKey, ApplicationProperties, Data, Header, MessageId, Priority, Properties,
};
use fe2o3_amqp_types::primitives::{
    Binary, OrderedMap, SimpleValue, Symbol, Timestamp, Uuid, Value,
};
use ordered_float::OrderedFloat;
use warren_broker::Message;
use warren_codec::{BasicProperties, FieldTable, FieldValue, Reader, ShortStr};

/// The 0-9-1 `type` of a message whose body is AMQP 1.0 encoded sections.
pub const AMQP10_BODY_TYPE: &str = "amqp-1.0";

const HEADER: u64 = 0x70;
const DELIVERY_ANNOTATIONS: u64 = 0x71;
const MESSAGE_ANNOTATIONS: u64 = 0x72;
pub(crate) const PROPERTIES: u64 = 0x73;
pub(crate) const APPLICATION_PROPERTIES: u64 = 0x74;
const DATA: u64 = 0x75;
const AMQP_SEQUENCE: u64 = 0x76;
pub(crate) const AMQP_VALUE: u64 = 0x77;
const FOOTER: u64 = 0x78;

/// An AMQP 1.0 message in the broker's shape, and what routing needs of it.
#[derive(Debug)]
pub struct Incoming {
    pub properties: BasicProperties,
    pub body: Bytes,
    /// properties.to: the destination for the null target.
    pub to: Option<String>,
    /// The sections kept for AMQP 1.0 consumers: everything but the header and the
    /// delivery-annotations, as published (a slice of the payload when those two lead it,
    /// as the specification orders them).
    pub sections: Bytes,
}

/// One section of a message: its descriptor code and its bytes (descriptor included).
pub(crate) fn sections(payload: &Bytes) -> Result<Vec<(u64, Bytes)>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < payload.len() {
        let rest = &payload[at..];
        let len = value_len(rest).ok_or("truncated message section")?;
        if rest[0] != 0x00 {
            return Err("message section without a descriptor".into());
        }
        out.push((descriptor_code(&rest[1..])?, payload.slice(at..at + len)));
        at += len;
    }
    Ok(out)
}

fn descriptor_code(b: &[u8]) -> Result<u64, String> {
    let named = |name: &[u8]| {
        Ok(match name {
            b"amqp:header:list" => HEADER,
            b"amqp:delivery-annotations:map" => DELIVERY_ANNOTATIONS,
            b"amqp:message-annotations:map" => MESSAGE_ANNOTATIONS,
            b"amqp:properties:list" => PROPERTIES,
            b"amqp:application-properties:map" => APPLICATION_PROPERTIES,
            b"amqp:data:binary" => DATA,
            b"amqp:amqp-sequence:list" => AMQP_SEQUENCE,
            b"amqp:amqp-value:*" => AMQP_VALUE,
            b"amqp:footer:map" => FOOTER,
            _ => return Err("unknown message section".to_owned()),
        })
    };
    match b {
        [0x53, code, ..] => Ok(u64::from(*code)),
        [0x44, ..] => Ok(0),
        [0x80, rest @ ..] if rest.len() >= 8 => {
            Ok(u64::from_be_bytes(rest[..8].try_into().unwrap_or_default()))
        }
        [0xa3, n, rest @ ..] if rest.len() >= usize::from(*n) => named(&rest[..usize::from(*n)]),
        _ => Err("unsupported section descriptor".into()),
    }
}

/// A section through serde_amqp, once `value::check` found nothing it would misread.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    section: &[u8],
    what: &str,
) -> Result<T, String> {
    crate::value::check(section).map_err(|e| format!("bad {what} section: {e}"))?;
    serde_amqp::from_slice(section).map_err(|e| format!("bad {what} section: {e}"))
}

/// The bytes of a data section's binary (after its descriptor, in whichever form).
fn data_contents(section: &Bytes) -> Result<Bytes, String> {
    let not_binary = || "data section is not binary".to_owned();
    let start = 1 + value_len(&section[1..]).ok_or_else(not_binary)?;
    let header = match section.get(start) {
        Some(0xa0) => 2,
        Some(0xb0) => 5,
        _ => return Err(not_binary()),
    };
    section
        .get(start + header..)
        .map(|_| section.slice(start + header..))
        .ok_or_else(not_binary)
}

/// A string that fits a 0-9-1 shortstr (RabbitMQ's `shortstr` condition).
fn short(s: &str) -> Option<ShortStr> {
    (s.len() < 256 && !s.contains('\0')).then(|| ShortStr::from(s))
}

fn uuid_text(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "urn:uuid:{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

fn parse_uuid_text(s: &str) -> Option<[u8; 16]> {
    let hex: String = s.strip_prefix("urn:uuid:")?.split('-').collect();
    if hex.len() != 32 || s.len() != 45 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(hex.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// message-id / correlation-id: the property when it fits, else the x- header.
fn id_to_091(id: MessageId, header: &str, headers: &mut FieldTable) -> Option<ShortStr> {
    match id {
        MessageId::String(s) => match short(&s) {
            Some(v) => return Some(v),
            None => headers.insert(header, FieldValue::LongStr(Bytes::from(s))),
        },
        MessageId::Ulong(n) => return Some(ShortStr::from(n.to_string())),
        MessageId::Uuid(u) => return Some(ShortStr::from(uuid_text(u.as_inner()))),
        MessageId::Binary(b) => {
            headers.insert(header, FieldValue::Bytes(Bytes::from(b.into_vec())))
        }
    }
    None
}

fn simple_to_field(v: SimpleValue) -> Option<FieldValue> {
    Some(match v {
        SimpleValue::Null => FieldValue::Void,
        SimpleValue::Bool(b) => FieldValue::Bool(b),
        SimpleValue::Ubyte(n) => FieldValue::U8(n),
        SimpleValue::Ushort(n) => FieldValue::U16(n),
        SimpleValue::Uint(n) => FieldValue::U32(n),
        SimpleValue::Ulong(n) => FieldValue::I64(n as i64),
        SimpleValue::Byte(n) => FieldValue::I8(n),
        SimpleValue::Short(n) => FieldValue::I16(n),
        SimpleValue::Int(n) => FieldValue::I32(n),
        SimpleValue::Long(n) => FieldValue::I64(n),
        SimpleValue::Float(f) => FieldValue::F32(f.0),
        SimpleValue::Double(f) => FieldValue::F64(f.0),
        SimpleValue::Timestamp(t) => FieldValue::Timestamp((t.milliseconds() / 1000) as u64),
        SimpleValue::Binary(b) => FieldValue::Bytes(Bytes::from(b.into_vec())),
        SimpleValue::String(s) => FieldValue::LongStr(Bytes::from(s)),
        SimpleValue::Symbol(s) => FieldValue::LongStr(Bytes::from(s.0)),
        _ => return None,
    })
}

pub(crate) fn value_to_field(v: Value) -> Option<FieldValue> {
    Some(match v {
        Value::Null => FieldValue::Void,
        Value::Bool(b) => FieldValue::Bool(b),
        Value::Ubyte(n) => FieldValue::U8(n),
        Value::Ushort(n) => FieldValue::U16(n),
        Value::Uint(n) => FieldValue::U32(n),
        Value::Ulong(n) => FieldValue::I64(n as i64),
        Value::Byte(n) => FieldValue::I8(n),
        Value::Short(n) => FieldValue::I16(n),
        Value::Int(n) => FieldValue::I32(n),
        Value::Long(n) => FieldValue::I64(n),
        Value::Float(f) => FieldValue::F32(f.0),
        Value::Double(f) => FieldValue::F64(f.0),
        Value::Timestamp(t) => FieldValue::Timestamp((t.milliseconds() / 1000) as u64),
        Value::Binary(b) => FieldValue::Bytes(Bytes::from(b.into_vec())),
        Value::String(s) => FieldValue::LongStr(Bytes::from(s)),
        Value::Symbol(s) => FieldValue::LongStr(Bytes::from(s.0)),
        Value::List(items) => {
            FieldValue::Array(items.into_iter().filter_map(value_to_field).collect())
        }
        Value::Array(items) => {
            FieldValue::Array(items.0.into_iter().filter_map(value_to_field).collect())
        }
        Value::Map(map) => {
            let mut t = FieldTable::new();
            for (k, v) in map.into_inner() {
                let key = match k {
                    Value::String(s) => s,
                    Value::Symbol(s) => s.0,
                    _ => continue,
                };
                if let (Some(key), Some(v)) = (short(&key), value_to_field(v)) {
                    t.push(key, v);
                }
            }
            FieldValue::Table(t)
        }
        _ => return None,
    })
}

/// Converts a published AMQP 1.0 message (the transfer payload) to the broker's shape.
pub fn from_amqp10(payload: &Bytes) -> Result<Incoming, String> {
    let mut props = BasicProperties::default();
    let mut headers = FieldTable::new();
    let mut to = None;
    let mut body_sections: Vec<(u64, Bytes)> = Vec::new();
    let all = sections(payload)?;
    let kept_sections = kept(payload, &all);
    for (code, section) in all {
        match code {
            HEADER => {
                let h: Header = decode(&section, "header")?;
                props.delivery_mode = Some(if h.durable { 2 } else { 1 });
                props.priority = Some(h.priority.0);
                props.expiration = h.ttl.map(|ttl| ShortStr::from(ttl.to_string()));
            }
            MESSAGE_ANNOTATIONS => {
                // Our own decoder: annotations may hold arrays of maps (x-opt-deaths).
                let entries = crate::value::decode_map_section(&section)
                    .map_err(|e| format!("bad message-annotations section: {e}"))?;
                for (k, v) in entries {
                    let OwnedKey::Symbol(k) = k else { continue };
                    if k.as_str() == "x-cc" {
                        if let Some(FieldValue::Array(keys)) = value_to_field(v) {
                            headers.insert("CC", FieldValue::Array(keys));
                        }
                        continue;
                    }
                    if !k.as_str().starts_with("x-") {
                        continue;
                    }
                    if let (Some(key), Some(v)) = (short(k.as_str()), value_to_field(v)) {
                        headers.push(key, v);
                    }
                }
            }
            PROPERTIES => {
                let p: Properties = decode(&section, "properties")?;
                if let Some(id) = p.message_id {
                    props.message_id = id_to_091(id, "x-message-id", &mut headers);
                }
                if let Some(id) = p.correlation_id {
                    props.correlation_id = id_to_091(id, "x-correlation-id", &mut headers);
                }
                props.user_id = p
                    .user_id
                    .and_then(|u| String::from_utf8(u.into_vec()).ok())
                    .and_then(|u| short(&u));
                // RabbitMQ 4's mapping: a v2 queue address reads as the queue's name (one
                // that does not decode is dropped); any other address stays as it is.
                props.reply_to =
                    p.reply_to
                        .as_deref()
                        .and_then(|r| match r.strip_prefix("/queues/") {
                            Some(_) => crate::address::parse_source(Some(r))
                                .ok()
                                .and_then(|q| short(&q)),
                            None => short(r),
                        });
                props.content_type = p.content_type.as_ref().and_then(|s| short(s.as_str()));
                props.content_encoding =
                    p.content_encoding.as_ref().and_then(|s| short(s.as_str()));
                props.timestamp = p
                    .creation_time
                    .map(|t| (t.milliseconds().max(0) / 1000) as u64);
                props.app_id = p.group_id.as_deref().and_then(short);
                to = p.to;
            }
            APPLICATION_PROPERTIES => {
                let a: ApplicationProperties = decode(&section, "application-properties")?;
                for (k, v) in a.0.into_inner() {
                    if let (Some(key), Some(v)) = (short(&k), simple_to_field(v)) {
                        headers.push(key, v);
                    }
                }
            }
            DATA | AMQP_SEQUENCE | AMQP_VALUE => body_sections.push((code, section)),
            DELIVERY_ANNOTATIONS | FOOTER => {}
            _ => return Err("unknown message section".into()),
        }
    }
    let body = match body_sections.as_slice() {
        [] => Bytes::new(),
        [(DATA, section)] => data_contents(section)?,
        [(_, first), .., (_, last)] | [(_, first @ last)] => {
            // Every body section, contiguous in the payload: one slice from the first to
            // the end of the last.
            let start = first.as_ptr() as usize - payload.as_ptr() as usize;
            let end = last.as_ptr() as usize - payload.as_ptr() as usize + last.len();
            props.message_type = Some(ShortStr::from_static(AMQP10_BODY_TYPE));
            payload.slice(start..end)
        }
    };
    if props.delivery_mode.is_none()
        && matches!(
            headers.get("x-basic-delivery-mode"),
            Some(FieldValue::U8(2))
        )
    {
        // No header: durable is false, the AMQP 1.0 default, as in RabbitMQ 4.2 and later
        // (`mc_amqp:get_property(durable, _)`, commit f8f1396 "Follow AMQP spec for
        // durable field"; 4.0 and 4.1 took a missing header as durable). Their fallback
        // for a message that came from 0-9-1 is kept too: the annotation
        // x-basic-delivery-mode = ubyte 2 makes it durable.
        props.delivery_mode = Some(2);
    }
    if !headers.is_empty() {
        props.headers = Some(headers);
    }
    Ok(Incoming {
        properties: props,
        body,
        to,
        sections: kept_sections,
    })
}

/// The sections an AMQP 1.0 consumer gets back: all but the header and the
/// delivery-annotations. Zero-copy when the kept ones are the payload's tail.
fn kept(payload: &Bytes, all: &[(u64, Bytes)]) -> Bytes {
    let dropped = |code: u64| code == HEADER || code == DELIVERY_ANNOTATIONS;
    let Some(first_kept) = all.iter().position(|(code, _)| !dropped(*code)) else {
        return Bytes::new();
    };
    if all[first_kept..].iter().all(|(code, _)| !dropped(*code)) {
        let start = all[first_kept].1.as_ptr() as usize - payload.as_ptr() as usize;
        return payload.slice(start..);
    }
    let mut out = BytesMut::with_capacity(payload.len());
    for (_, section) in all.iter().filter(|(code, _)| !dropped(*code)) {
        out.extend_from_slice(section);
    }
    out.freeze()
}

fn id_to_amqp10(s: &ShortStr) -> MessageId {
    match parse_uuid_text(s.as_str()) {
        Some(u) => MessageId::Uuid(Uuid::from(u)),
        None => MessageId::String(s.as_str().to_owned()),
    }
}

/// A 0-9-1 header value as an application property, as RabbitMQ 4 maps it (arrays and
/// tables are not converted).
fn field_to_simple(v: &FieldValue) -> Option<SimpleValue> {
    Some(match v {
        FieldValue::Bool(b) => SimpleValue::Bool(*b),
        FieldValue::I8(n) => SimpleValue::Byte(*n),
        FieldValue::U8(n) => SimpleValue::Ubyte(*n),
        FieldValue::I16(n) => SimpleValue::Short(*n),
        FieldValue::U16(n) => SimpleValue::Ushort(*n),
        FieldValue::I32(n) => SimpleValue::Int(*n),
        FieldValue::U32(n) => SimpleValue::Uint(*n),
        FieldValue::I64(n) => SimpleValue::Long(*n),
        FieldValue::F32(f) => SimpleValue::Float(OrderedFloat(*f)),
        FieldValue::F64(f) => SimpleValue::Double(OrderedFloat(*f)),
        FieldValue::LongStr(b) => match std::str::from_utf8(b).ok().and_then(short) {
            Some(s) => SimpleValue::String(s.as_str().to_owned()),
            None => SimpleValue::Binary(Binary::from(b.to_vec())),
        },
        FieldValue::Bytes(b) => SimpleValue::Binary(Binary::from(b.to_vec())),
        FieldValue::Timestamp(s) => SimpleValue::Timestamp(Timestamp::from_milliseconds(
            (*s as i64).saturating_mul(1000),
        )),
        FieldValue::Void => SimpleValue::Null,
        FieldValue::Decimal { .. } | FieldValue::Array(_) | FieldValue::Table(_) => return None,
    })
}

pub(crate) fn field_to_value(v: &FieldValue) -> Option<Value> {
    Some(match v {
        FieldValue::Array(items) => Value::List(items.iter().filter_map(field_to_value).collect()),
        FieldValue::Table(t) => {
            let mut map = OrderedMap::new();
            for (k, v) in t.iter() {
                if let Some(v) = field_to_value(v) {
                    map.as_inner_mut()
                        .insert(Value::String(k.as_str().to_owned()), v);
                }
            }
            Value::Map(map)
        }
        other => match field_to_simple(other)? {
            SimpleValue::Null => Value::Null,
            SimpleValue::Bool(b) => Value::Bool(b),
            SimpleValue::Byte(n) => Value::Byte(n),
            SimpleValue::Ubyte(n) => Value::Ubyte(n),
            SimpleValue::Short(n) => Value::Short(n),
            SimpleValue::Ushort(n) => Value::Ushort(n),
            SimpleValue::Int(n) => Value::Int(n),
            SimpleValue::Uint(n) => Value::Uint(n),
            SimpleValue::Long(n) => Value::Long(n),
            SimpleValue::Float(f) => Value::Float(f),
            SimpleValue::Double(f) => Value::Double(f),
            SimpleValue::String(s) => Value::String(s),
            SimpleValue::Binary(b) => Value::Binary(b),
            SimpleValue::Timestamp(t) => Value::Timestamp(t),
            _ => return None,
        },
    })
}

pub(crate) fn encode<T: serde::Serialize>(out: &mut BytesMut, section: &T) {
    if let Ok(bytes) = serde_amqp::to_vec(section) {
        out.extend_from_slice(&bytes);
    }
}

/// Writes a message-annotations section with our own encoder (`value::encode`: serde_amqp's
/// serializer panics on some values a client can send inside an array).
fn encode_annotations(out: &mut BytesMut, annotations: OrderedMap<OwnedKey, Value>) {
    let entries = annotations
        .into_inner()
        .into_iter()
        .map(|(k, v)| {
            let key = match k {
                OwnedKey::Symbol(s) => Value::Symbol(s),
                OwnedKey::Ulong(n) => Value::Ulong(n),
            };
            (key, v)
        })
        .collect();
    let mut section = Vec::new();
    crate::value::encode_map_section(&mut section, MESSAGE_ANNOTATIONS as u8, entries);
    out.extend_from_slice(&section);
}

/// An application property as a value (the same variants).
fn simple_value(v: SimpleValue) -> Value {
    match v {
        SimpleValue::Null => Value::Null,
        SimpleValue::Bool(b) => Value::Bool(b),
        SimpleValue::Ubyte(n) => Value::Ubyte(n),
        SimpleValue::Ushort(n) => Value::Ushort(n),
        SimpleValue::Uint(n) => Value::Uint(n),
        SimpleValue::Ulong(n) => Value::Ulong(n),
        SimpleValue::Byte(n) => Value::Byte(n),
        SimpleValue::Short(n) => Value::Short(n),
        SimpleValue::Int(n) => Value::Int(n),
        SimpleValue::Long(n) => Value::Long(n),
        SimpleValue::Float(f) => Value::Float(f),
        SimpleValue::Double(f) => Value::Double(f),
        SimpleValue::Decimal32(d) => Value::Decimal32(d),
        SimpleValue::Decimal64(d) => Value::Decimal64(d),
        SimpleValue::Decimal128(d) => Value::Decimal128(d),
        SimpleValue::Char(c) => Value::Char(c),
        SimpleValue::Timestamp(t) => Value::Timestamp(t),
        SimpleValue::Uuid(u) => Value::Uuid(u),
        SimpleValue::Binary(b) => Value::Binary(b),
        SimpleValue::String(s) => Value::String(s),
        SimpleValue::Symbol(s) => Value::Symbol(s),
        SimpleValue::Described(d) => Value::Described(d),
    }
}

/// The header an AMQP 1.0 consumer receives: durable, priority and ttl from the message,
/// first-acquirer and delivery-count from the queue's copy (`delivery_count`: its failed
/// deliveries). As RabbitMQ 4's `mc_amqp:update_header_from_anns`, first-acquirer is false
/// once the message was delivered, failed or dead-lettered.
fn header(m: &Message, priority: u8, redelivered: bool, delivery_count: u32) -> Header {
    Header {
        durable: m.persistent,
        priority: Priority(priority),
        ttl: m.expiration_ms.map(|ms| ms.min(u64::from(u32::MAX)) as u32),
        first_acquirer: !redelivered && delivery_count == 0 && !m.dead_lettered,
        delivery_count,
    }
}

/// RabbitMQ 4's death annotations for an AMQP 1.0 consumer (`mc_amqp:encode_deaths` and
/// `mc:record_death`), from the 0-9-1 death history the broker keeps in the headers:
/// `x-opt-deaths`, an array of maps, most recent first (queue, reason as a symbol, count
/// as ulong, first-time and last-time as timestamps, exchange, routing-keys, and ttl when
/// the message had one), and the x-first-death-* / x-last-death-* strings. The 0-9-1
/// history keeps one time per entry, in seconds (RabbitMQ's x-death `time`), so
/// first-time and last-time are both that time in milliseconds.
fn death_annotations(headers: &FieldTable, annotate: &mut impl FnMut(&str, Value)) {
    let Some(FieldValue::Array(deaths)) = headers.get("x-death") else {
        return;
    };
    let text = |v: Option<&FieldValue>| v.and_then(|v| v.as_str()).map(str::to_owned);
    let mut maps = Vec::new();
    for death in deaths {
        let FieldValue::Table(t) = death else {
            continue;
        };
        let mut map = OrderedMap::new();
        let mut put = |k: &str, v: Value| {
            map.as_inner_mut().insert(Value::Symbol(Symbol::from(k)), v);
        };
        if let Some(ttl) = text(t.get("original-expiration")).and_then(|e| e.parse::<u32>().ok()) {
            put("ttl", Value::Uint(ttl));
        }
        put(
            "queue",
            Value::String(text(t.get("queue")).unwrap_or_default()),
        );
        put(
            "reason",
            Value::Symbol(Symbol::from(text(t.get("reason")).unwrap_or_default())),
        );
        let count = t.get("count").and_then(|c| c.as_i64()).unwrap_or(1);
        put("count", Value::Ulong(count.max(0) as u64));
        let time_ms = match t.get("time") {
            Some(FieldValue::Timestamp(s)) => (*s as i64).saturating_mul(1000),
            _ => 0,
        };
        put(
            "first-time",
            Value::Timestamp(Timestamp::from_milliseconds(time_ms)),
        );
        put(
            "last-time",
            Value::Timestamp(Timestamp::from_milliseconds(time_ms)),
        );
        put(
            "exchange",
            Value::String(text(t.get("exchange")).unwrap_or_default()),
        );
        let keys = match t.get("routing-keys") {
            Some(FieldValue::Array(keys)) => keys
                .iter()
                .filter_map(|k| k.as_str())
                .map(|k| Value::String(k.to_owned()))
                .collect(),
            _ => Vec::new(),
        };
        put("routing-keys", Value::Array(keys.into()));
        maps.push(Value::Map(map));
    }
    annotate(X_OPT_DEATHS, Value::Array(maps.into()));
    for key in [
        "x-first-death-reason",
        "x-first-death-queue",
        "x-first-death-exchange",
        "x-last-death-reason",
        "x-last-death-queue",
        "x-last-death-exchange",
    ] {
        if let Some(v) = text(headers.get(key)) {
            annotate(key, Value::String(v));
        }
    }
}

const X_OPT_DEATHS: &str = "x-opt-deaths";

/// The priority for the header: the message's, or 4 (the default) when it has none. Read
/// from the 0-9-1 property flags, without decoding the properties.
fn header_priority(m: &Message) -> u8 {
    const PRIORITY_FLAG: u16 = 1 << 11;
    let flags = match m.properties_raw().get(..2) {
        Some(b) => u16::from_be_bytes([b[0], b[1]]),
        None => 0,
    };
    if flags & PRIORITY_FLAG != 0 {
        m.priority
    } else {
        4
    }
}

/// The AMQP 1.0 message an AMQP 1.0 consumer receives for `m`. `redelivered`: the queue
/// delivered it before (first-acquirer false); `delivery_count`: the failed deliveries of
/// the queue's copy.
pub fn to_amqp10(m: &Message, redelivered: bool, delivery_count: u32) -> Bytes {
    if let Some(sections) = m.amqp10.as_deref() {
        return as_published(m, sections, redelivered, delivery_count);
    }
    let props = BasicProperties::decode(&mut Reader::new(m.properties_bytes())).unwrap_or_default();
    let mut out = BytesMut::with_capacity(m.body().len() + 128);
    encode(
        &mut out,
        &header(m, props.priority.unwrap_or(4), redelivered, delivery_count),
    );
    let amqp10_body = props
        .message_type
        .as_ref()
        .is_some_and(|t| t.as_str() == AMQP10_BODY_TYPE);
    let mut annotations = OrderedMap::new();
    let mut annotate = |k: &str, v: Value| {
        annotations
            .as_inner_mut()
            .insert(OwnedKey::Symbol(Symbol::from(k)), v);
    };
    annotate("x-exchange", Value::String(m.exchange().to_owned()));
    annotate("x-routing-key", Value::String(m.routing_key().to_owned()));
    if let Some(t) = props.message_type.as_ref().filter(|_| !amqp10_body) {
        annotate("x-basic-type", Value::String(t.as_str().to_owned()));
    }
    let mut application = OrderedMap::new();
    if let Some(headers) = &props.headers {
        if m.dead_lettered {
            death_annotations(headers, &mut annotate);
        }
        for (k, v) in headers.iter() {
            if m.dead_lettered && is_death_header(k.as_str()) {
                // Written above in RabbitMQ 4's AMQP 1.0 form.
                continue;
            }
            if k.as_str().starts_with("x-") {
                if let Some(v) = field_to_value(v) {
                    annotate(k.as_str(), v);
                }
            } else if let Some(v) = field_to_simple(v) {
                application.as_inner_mut().insert(k.as_str().to_owned(), v);
            }
        }
    }
    encode_annotations(&mut out, annotations);
    let properties = Properties {
        message_id: props.message_id.as_ref().map(id_to_amqp10),
        user_id: props
            .user_id
            .as_ref()
            .map(|u| Binary::from(u.as_bytes().to_vec())),
        to: None,
        subject: None,
        // A 0-9-1 reply_to names a queue; AMQP 1.0 repliers send to an address (RabbitMQ 4
        // writes `/queues/NAME`).
        reply_to: props
            .reply_to
            .as_ref()
            .map(|r| crate::address::queue_address(r.as_str())),
        correlation_id: props.correlation_id.as_ref().map(id_to_amqp10),
        content_type: props
            .content_type
            .as_ref()
            .map(|c| Symbol::from(c.as_str())),
        content_encoding: props
            .content_encoding
            .as_ref()
            .map(|c| Symbol::from(c.as_str())),
        absolute_expiry_time: None,
        creation_time: props
            .timestamp
            .map(|s| Timestamp::from_milliseconds((s as i64).saturating_mul(1000))),
        group_id: props.app_id.as_ref().map(|a| a.as_str().to_owned()),
        group_sequence: None,
        reply_to_group_id: None,
    };
    encode(&mut out, &properties);
    if !application.is_empty() {
        let entries = application
            .into_inner()
            .into_iter()
            .map(|(k, v)| (Value::String(k), simple_value(v)))
            .collect();
        let mut section = Vec::new();
        crate::value::encode_map_section(&mut section, APPLICATION_PROPERTIES as u8, entries);
        out.extend_from_slice(&section);
    }
    if amqp10_body && sections(&m.body_bytes()).is_ok() {
        out.extend_from_slice(m.body());
    } else {
        encode(&mut out, &Data(Binary::from(m.body().to_vec())));
    }
    out.freeze()
}

/// A message published over AMQP 1.0, as it was published: a new header, its
/// message-annotations with x-exchange and x-routing-key set, then its bare message and
/// footer byte for byte. The annotations are spliced at the byte level (the published ones
/// are not decoded) unless they already hold one of the two keys, or the message was
/// dead-lettered (its death annotations are added, as RabbitMQ 4 does).
fn as_published(m: &Message, kept: &Bytes, redelivered: bool, delivery_count: u32) -> Bytes {
    let mut out = BytesMut::with_capacity(kept.len() + 96);
    encode(
        &mut out,
        &header(m, header_priority(m), redelivered, delivery_count),
    );
    let (published, rest) = split_annotations(kept);
    if m.dead_lettered || !annotate_routing(&mut out, published, m) {
        let mut annotations = OrderedMap::new();
        if let Some(Ok(entries)) = published.map(crate::value::decode_map_section) {
            annotations.as_inner_mut().extend(entries);
        }
        let inner = annotations.as_inner_mut();
        let mut annotate = |k: &str, v: Value| {
            inner.insert(OwnedKey::Symbol(Symbol::from(k)), v);
        };
        annotate(X_EXCHANGE, Value::String(m.exchange().to_owned()));
        annotate(X_ROUTING_KEY, Value::String(m.routing_key().to_owned()));
        if m.dead_lettered {
            let props =
                BasicProperties::decode(&mut Reader::new(m.properties_bytes())).unwrap_or_default();
            if let Some(headers) = &props.headers {
                death_annotations(headers, &mut annotate);
            }
        }
        encode_annotations(&mut out, annotations);
    }
    out.extend_from_slice(rest);
    out.freeze()
}

/// The 0-9-1 headers dead-lettering writes, which an AMQP 1.0 consumer gets as RabbitMQ 4's
/// death annotations instead.
fn is_death_header(key: &str) -> bool {
    key == "x-death" || key.starts_with("x-first-death-") || key.starts_with("x-last-death-")
}

const X_EXCHANGE: &str = "x-exchange";
const X_ROUTING_KEY: &str = "x-routing-key";

/// The message-annotations section at the start of the kept sections (whole, descriptor
/// included), if there is one, and what follows it.
fn split_annotations(kept: &[u8]) -> (Option<&[u8]>, &[u8]) {
    match value_len(kept) {
        Some(len)
            if kept[0] == 0x00
                && matches!(descriptor_code(&kept[1..]), Ok(MESSAGE_ANNOTATIONS)) =>
        {
            (Some(&kept[..len]), &kept[len..])
        }
        _ => (None, kept),
    }
}

/// Writes the message-annotations section: the published entries as they are, then
/// x-exchange and x-routing-key. False (nothing written) when the published map is not one
/// this can splice — it already has either key, or does not parse as a map.
fn annotate_routing(out: &mut BytesMut, published: Option<&[u8]>, m: &Message) -> bool {
    let mut entries: &[u8] = &[];
    let mut count: u32 = 0;
    if let Some(section) = published {
        let Some(descriptor) = value_len(&section[1..]) else {
            return false;
        };
        let map = &section[1 + descriptor..];
        (entries, count) = match map.first() {
            Some(0xc1) if map.len() >= 3 => (&map[3..], u32::from(map[2])),
            Some(0xd1) if map.len() >= 9 => (
                &map[9..],
                u32::from_be_bytes([map[5], map[6], map[7], map[8]]),
            ),
            _ => return false,
        };
        // Walk the keys: either routing key present → the general path upserts it.
        let mut at = 0;
        for i in 0..count {
            let Some(len) = value_len(&entries[at..]) else {
                return false;
            };
            if i % 2 == 0 {
                let key = &entries[at..at + len];
                if symbol_is(key, X_EXCHANGE) || symbol_is(key, X_ROUTING_KEY) {
                    return false;
                }
            }
            at += len;
        }
        if at != entries.len() {
            return false;
        }
    }
    out.extend_from_slice(&[0x00, 0x53, 0x72, 0xd1]);
    let size_at = out.len();
    out.extend_from_slice(&[0; 4]);
    out.put_u32(count + 4);
    out.extend_from_slice(entries);
    put_symbol(out, X_EXCHANGE);
    put_string(out, m.exchange());
    put_symbol(out, X_ROUTING_KEY);
    put_string(out, m.routing_key());
    // map32's size counts the bytes after the size field: the count and the entries.
    let size = (out.len() - size_at - 4) as u32;
    out[size_at..size_at + 4].copy_from_slice(&size.to_be_bytes());
    true
}

fn symbol_is(encoded: &[u8], name: &str) -> bool {
    match encoded {
        [0xa3, n, rest @ ..] => usize::from(*n) == rest.len() && rest == name.as_bytes(),
        [0xb3, a, b, c, d, rest @ ..] => {
            u32::from_be_bytes([*a, *b, *c, *d]) as usize == rest.len() && rest == name.as_bytes()
        }
        _ => false,
    }
}

/// A symbol of at most 255 bytes (the annotation keys above).
fn put_symbol(out: &mut BytesMut, s: &str) {
    out.put_u8(0xa3);
    out.put_u8(s.len() as u8);
    out.extend_from_slice(s.as_bytes());
}

/// A string (str8 up to 255 bytes, else str32).
fn put_string(out: &mut BytesMut, s: &str) {
    if s.len() <= 255 {
        out.put_u8(0xa1);
        out.put_u8(s.len() as u8);
    } else {
        out.put_u8(0xb1);
        out.put_u32(s.len() as u32);
    }
    out.extend_from_slice(s.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use fe2o3_amqp_types::messaging::AmqpValue;
    use fe2o3_amqp_types::messaging::MessageAnnotations;
    use warren_codec::{ContentHeader, BASIC_CLASS_ID};

    fn message(props: &BasicProperties, body: &'static [u8]) -> Message {
        let raw = ContentHeader::new(BASIC_CLASS_ID, 0, props).properties;
        Message::new(
            ShortStr::from("amq.direct"),
            ShortStr::from("k"),
            props,
            raw,
            Bytes::from_static(body),
        )
    }

    #[test]
    fn amqp091_properties_reach_amqp10_and_back() {
        let mut headers = FieldTable::new();
        headers.insert("color", FieldValue::LongStr(Bytes::from_static(b"red")));
        headers.insert("n", FieldValue::I32(7));
        headers.insert("x-custom", FieldValue::LongStr(Bytes::from_static(b"a")));
        headers.insert("nested", FieldValue::Table(FieldTable::new()));
        let props = BasicProperties {
            content_type: Some("text/plain".into()),
            delivery_mode: Some(2),
            priority: Some(3),
            message_id: Some("urn:uuid:550e8400-e29b-41d4-a716-446655440000".into()),
            correlation_id: Some("corr".into()),
            reply_to: Some("replies".into()),
            expiration: Some("60000".into()),
            timestamp: Some(1_700_000_000),
            message_type: Some("order".into()),
            app_id: Some("shop".into()),
            headers: Some(headers),
            ..Default::default()
        };
        let payload = to_amqp10(&message(&props, b"hello"), true, 0);
        // The reply-to an AMQP 1.0 replier can send to (RabbitMQ 4's mapping).
        assert!(payload.windows(15).any(|w| w == b"/queues/replies"));
        // Back through the publish conversion: the same 0-9-1 shape.
        let back = from_amqp10(&payload).unwrap();
        assert_eq!(&back.body[..], b"hello");
        let p = back.properties;
        assert_eq!(p.content_type.as_deref(), Some("text/plain"));
        assert_eq!(p.delivery_mode, Some(2));
        assert_eq!(p.priority, Some(3));
        assert_eq!(
            p.message_id.as_deref(),
            Some("urn:uuid:550e8400-e29b-41d4-a716-446655440000")
        );
        assert_eq!(p.correlation_id.as_deref(), Some("corr"));
        assert_eq!(p.reply_to.as_deref(), Some("replies"));
        assert_eq!(p.expiration.as_deref(), Some("60000"));
        assert_eq!(p.timestamp, Some(1_700_000_000));
        assert_eq!(p.app_id.as_deref(), Some("shop"));
        let h = p.headers.unwrap();
        assert_eq!(
            h.get("color"),
            Some(&FieldValue::LongStr(Bytes::from_static(b"red")))
        );
        assert_eq!(h.get("n"), Some(&FieldValue::I32(7)));
        assert_eq!(
            h.get("x-custom"),
            Some(&FieldValue::LongStr(Bytes::from_static(b"a")))
        );
        assert_eq!(
            h.get("x-basic-type"),
            Some(&FieldValue::LongStr(Bytes::from_static(b"order")))
        );
        assert_eq!(
            h.get("nested"),
            None,
            "tables are not application properties"
        );
    }

    #[test]
    fn a_non_data_body_survives_amqp10_to_amqp10() {
        let mut payload = serde_amqp::to_vec(&AmqpValue(Value::String("hi".into()))).unwrap();
        payload.splice(0..0, serde_amqp::to_vec(&Header::default()).unwrap());
        let payload = Bytes::from(payload);
        let incoming = from_amqp10(&payload).unwrap();
        assert_eq!(
            incoming.properties.message_type.as_deref(),
            Some(AMQP10_BODY_TYPE)
        );
        let out = to_amqp10(&message(&incoming.properties, b""), false, 0);
        let _ = out; // the body of the rebuilt message:
        let m = Message::new(
            ShortStr::from(""),
            ShortStr::from("q"),
            &incoming.properties,
            ContentHeader::new(BASIC_CLASS_ID, 0, &incoming.properties).properties,
            incoming.body.clone(),
        );
        let out = to_amqp10(&m, false, 0);
        let value_section = sections(&out)
            .unwrap()
            .into_iter()
            .find(|(c, _)| *c == AMQP_VALUE);
        let value: AmqpValue<Value> = decode(&value_section.unwrap().1, "value").unwrap();
        assert_eq!(value.0, Value::String("hi".into()));
    }

    /// Publishes `payload` as the AMQP 1.0 publish path does and returns what an AMQP 1.0
    /// consumer receives.
    fn through_the_broker(payload: &Bytes, redelivered: bool) -> (Message, Bytes) {
        let incoming = from_amqp10(payload).unwrap();
        let m = Message::new(
            ShortStr::from("amq.topic"),
            ShortStr::from("a.b"),
            &incoming.properties,
            ContentHeader::new(BASIC_CLASS_ID, 0, &incoming.properties).properties,
            incoming.body.clone(),
        )
        .with_amqp10(incoming.sections);
        let out = to_amqp10(&m, redelivered, 0);
        (m, out)
    }

    #[test]
    fn an_amqp10_message_keeps_its_sections_amqp10_to_amqp10() {
        use fe2o3_amqp_types::messaging::{DeliveryAnnotations, Footer};
        let mut header = Vec::new();
        header.extend(
            serde_amqp::to_vec(&Header {
                durable: true,
                priority: Priority(7),
                ttl: Some(60_000),
                first_acquirer: true,
                delivery_count: 0,
            })
            .unwrap(),
        );
        let mut delivery = OrderedMap::new();
        delivery
            .as_inner_mut()
            .insert(OwnedKey::Symbol(Symbol::from("hop")), Value::Int(1));
        header.extend(serde_amqp::to_vec(&DeliveryAnnotations(delivery)).unwrap());
        let mut annotations = OrderedMap::new();
        annotations
            .as_inner_mut()
            .insert(OwnedKey::Symbol(Symbol::from("custom")), Value::Int(5));
        let mut bare = Vec::new();
        bare.extend(serde_amqp::to_vec(&MessageAnnotations(annotations)).unwrap());
        let bare_start = bare.len();
        bare.extend(
            serde_amqp::to_vec(&Properties {
                to: Some("/queues/q".into()),
                subject: Some("topic".into()),
                group_sequence: Some(3),
                reply_to_group_id: Some("rg".into()),
                absolute_expiry_time: Some(Timestamp::from_milliseconds(1_900_000_000_000)),
                ..Default::default()
            })
            .unwrap(),
        );
        bare.extend(serde_amqp::to_vec(&AmqpValue(Value::String("hi".into()))).unwrap());
        let mut footer = OrderedMap::new();
        footer
            .as_inner_mut()
            .insert(OwnedKey::Symbol(Symbol::from("sig")), Value::Int(9));
        bare.extend(serde_amqp::to_vec(&Footer(footer)).unwrap());
        let payload = Bytes::from([header, bare.clone()].concat());
        let (m, out) = through_the_broker(&payload, false);
        let got = sections(&out).unwrap();
        let codes: Vec<u64> = got.iter().map(|(c, _)| *c).collect();
        assert_eq!(
            codes,
            [HEADER, MESSAGE_ANNOTATIONS, PROPERTIES, AMQP_VALUE, FOOTER],
            "no delivery-annotations"
        );
        let h: Header = decode(&got[0].1, "header").unwrap();
        assert!(h.durable && h.first_acquirer);
        assert_eq!(
            (h.priority.0, h.ttl, h.delivery_count),
            (7, Some(60_000), 0)
        );
        let a: MessageAnnotations = decode(&got[1].1, "annotations").unwrap();
        let get = |k: &str| a.0.get(&OwnedKey::Symbol(Symbol::from(k))).cloned();
        assert_eq!(get("custom"), Some(Value::Int(5)));
        assert_eq!(get("x-exchange"), Some(Value::String("amq.topic".into())));
        assert_eq!(get("x-routing-key"), Some(Value::String("a.b".into())));
        // The bare message and the footer, byte for byte.
        assert!(out.ends_with(&bare[bare_start..]));
        // A redelivery after a failed one: first-acquirer false, delivery-count 1.
        let again = to_amqp10(&m, true, 1);
        let h: Header = decode(&sections(&again).unwrap()[0].1, "header").unwrap();
        assert!(!h.first_acquirer);
        assert_eq!(h.delivery_count, 1);
    }

    #[test]
    fn routing_annotations_are_added_to_any_published_annotations() {
        let annotated = |entries: &[(&str, Value)]| {
            let mut map = OrderedMap::new();
            for (k, v) in entries {
                map.as_inner_mut()
                    .insert(OwnedKey::Symbol(Symbol::from(*k)), v.clone());
            }
            let mut payload = serde_amqp::to_vec(&MessageAnnotations(map)).unwrap();
            payload.extend(serde_amqp::to_vec(&Data(Binary::from(b"x".to_vec()))).unwrap());
            Bytes::from(payload)
        };
        let cases = [
            // No annotations published; a small map (map8); one with the routing key
            // already (the general path replaces it); a large one (map32).
            Bytes::from(serde_amqp::to_vec(&Data(Binary::from(b"x".to_vec()))).unwrap()),
            annotated(&[("a", Value::Int(1))]),
            annotated(&[("x-routing-key", Value::String("old".into()))]),
            annotated(&[("big", Value::String("v".repeat(300)))]),
        ];
        for (payload, expected_len) in cases.into_iter().zip([2, 3, 2, 3]) {
            let (_, out) = through_the_broker(&payload, false);
            let got = sections(&out).unwrap();
            let a: MessageAnnotations = decode(&got[1].1, "annotations").unwrap();
            let get = |k: &str| a.0.get(&OwnedKey::Symbol(Symbol::from(k))).cloned();
            assert_eq!(get("x-exchange"), Some(Value::String("amq.topic".into())));
            assert_eq!(get("x-routing-key"), Some(Value::String("a.b".into())));
            assert_eq!(a.0.len(), expected_len);
            let h: Header = decode(&got[0].1, "header").unwrap();
            assert_eq!(h.priority.0, 4, "no priority published: the default");
            assert!(out.ends_with(&sections(&payload).unwrap().last().unwrap().1));
        }
    }

    #[test]
    fn a_plain_data_message_is_stored_without_copies() {
        let payload = Bytes::from(
            [
                serde_amqp::to_vec(&Header::default()).unwrap(),
                serde_amqp::to_vec(&Data(Binary::from(b"hello".to_vec()))).unwrap(),
            ]
            .concat(),
        );
        let incoming = from_amqp10(&payload).unwrap();
        let inside = |b: &Bytes| {
            let start = b.as_ptr() as usize;
            let outer = payload.as_ptr() as usize;
            start >= outer && start + b.len() <= outer + payload.len()
        };
        assert!(inside(&incoming.body) && inside(&incoming.sections));
        assert_eq!(&incoming.body[..], b"hello");
    }

    #[test]
    fn a_data_section_with_a_symbolic_descriptor() {
        let mut section = vec![0x00, 0xa3, 16];
        section.extend_from_slice(b"amqp:data:binary");
        section.extend_from_slice(&[0xa0, 2, b'h', b'i']);
        let got = from_amqp10(&Bytes::from(section)).unwrap();
        assert_eq!(&got.body[..], b"hi");
        assert!(from_amqp10(&Bytes::from_static(&[0x00, 0x53, 0x75, 0x40])).is_err());
    }

    #[test]
    fn long_and_binary_ids_go_to_headers() {
        let p = Properties {
            message_id: Some(MessageId::String("x".repeat(300))),
            correlation_id: Some(MessageId::Ulong(42)),
            ..Default::default()
        };
        let payload = Bytes::from(serde_amqp::to_vec(&p).unwrap());
        let got = from_amqp10(&payload).unwrap().properties;
        assert_eq!(got.message_id, None);
        assert_eq!(got.correlation_id.as_deref(), Some("42"));
        assert!(got.headers.unwrap().get("x-message-id").is_some());
    }

    /// The message-annotations of `out` by key. Walked by hand: serde_amqp 0.18 cannot
    /// decode an array of maps (it overflows), so an array's elements are decoded one by
    /// one (a list of them is returned); proton and RabbitMQ 4's clients read it as sent.
    fn annotations_of(out: &Bytes) -> std::collections::HashMap<String, Value> {
        let got = sections(out).unwrap();
        let (_, section) = got.iter().find(|(c, _)| *c == MESSAGE_ANNOTATIONS).unwrap();
        let descriptor = value_len(&section[1..]).unwrap();
        let map = &section[1 + descriptor..];
        let (mut at, count) = match map[0] {
            0xc1 => (3, usize::from(map[2])),
            0xd1 => (
                9,
                u32::from_be_bytes(map[5..9].try_into().unwrap()) as usize,
            ),
            other => panic!("not a map: {other:#x}"),
        };
        let mut out = std::collections::HashMap::new();
        for _ in 0..count / 2 {
            let key_len = value_len(&map[at..]).unwrap();
            let key: Value = serde_amqp::from_slice(&map[at..at + key_len]).unwrap();
            at += key_len;
            let value_len = value_len(&map[at..]).unwrap();
            let raw = &map[at..at + value_len];
            let value = match raw[0] {
                0xe0 | 0xf0 => Value::List(array_elements(raw)),
                _ => serde_amqp::from_slice(raw).unwrap(),
            };
            at += value_len;
            let Value::Symbol(key) = key else {
                panic!("key {key:?}")
            };
            out.insert(key.0, value);
        }
        out
    }

    /// The elements of an encoded array, each decoded on its own.
    fn array_elements(raw: &[u8]) -> Vec<Value> {
        let (count, constructor_at) = if raw[0] == 0xe0 {
            (usize::from(raw[2]), 3)
        } else {
            (
                u32::from_be_bytes(raw[5..9].try_into().unwrap()) as usize,
                9,
            )
        };
        let constructor = raw[constructor_at];
        let mut at = constructor_at + 1;
        let mut elements = Vec::new();
        for _ in 0..count {
            let mut one = vec![constructor];
            one.extend_from_slice(&raw[at..]);
            let len = value_len(&one).unwrap();
            elements.push(serde_amqp::from_slice(&one[..len]).unwrap());
            at += len - 1;
        }
        elements
    }

    fn annotation(a: &std::collections::HashMap<String, Value>, key: &str) -> Option<Value> {
        a.get(key).cloned()
    }

    fn map_get(map: &Value, key: &str) -> Option<Value> {
        let Value::Map(m) = map else { return None };
        m.get(&Value::Symbol(Symbol::from(key))).cloned()
    }

    #[test]
    fn a_dead_lettered_amqp10_message_keeps_its_sections_with_death_annotations() {
        use fe2o3_amqp_types::messaging::Footer;
        use warren_broker::dead_letter::{dead_lettered, DeathReason};
        let mut annotations = OrderedMap::new();
        annotations
            .as_inner_mut()
            .insert(OwnedKey::Symbol(Symbol::from("custom")), Value::Int(5));
        let mut payload = serde_amqp::to_vec(&Header {
            durable: true,
            ..Default::default()
        })
        .unwrap();
        payload.extend(serde_amqp::to_vec(&MessageAnnotations(annotations)).unwrap());
        let bare_start = payload.len();
        payload.extend(
            serde_amqp::to_vec(&Properties {
                subject: Some("topic".into()),
                ..Default::default()
            })
            .unwrap(),
        );
        payload.extend(serde_amqp::to_vec(&AmqpValue(Value::String("hi".into()))).unwrap());
        let mut footer = OrderedMap::new();
        footer
            .as_inner_mut()
            .insert(OwnedKey::Symbol(Symbol::from("sig")), Value::Int(9));
        payload.extend(serde_amqp::to_vec(&Footer(footer)).unwrap());
        let payload = Bytes::from(payload);
        let (m, _) = through_the_broker(&payload, false);
        let dlx = ShortStr::from("dlx");
        let (copy, _) = dead_lettered(&m, "q1", DeathReason::Rejected, &dlx, None);
        // Dead-lettered twice from the same queue: one entry, count 2; then expired
        // elsewhere: a second entry, most recent first.
        let (copy, _) = dead_lettered(&copy, "q1", DeathReason::Rejected, &dlx, None);
        let (copy, headers) = dead_lettered(&copy, "q2", DeathReason::Expired, &dlx, None);
        assert!(
            headers.get("x-death").is_some(),
            "the 0-9-1 view keeps x-death"
        );

        let out = to_amqp10(&copy, false, 2);
        // The bare message and the footer, byte for byte.
        assert!(out.ends_with(&payload[bare_start..]));
        let h: Header = decode(&sections(&out).unwrap()[0].1, "header").unwrap();
        assert!(h.durable);
        assert!(
            !h.first_acquirer,
            "a dead-lettered message was acquired before"
        );
        assert_eq!(h.delivery_count, 2);
        let a = annotations_of(&out);
        assert_eq!(annotation(&a, "custom"), Some(Value::Int(5)));
        assert_eq!(
            annotation(&a, "x-exchange"),
            Some(Value::String("dlx".into()))
        );
        assert_eq!(
            annotation(&a, "x-routing-key"),
            Some(Value::String("a.b".into()))
        );
        assert_eq!(
            annotation(&a, "x-death"),
            None,
            "RabbitMQ 4 says x-opt-deaths"
        );
        let text = |s: &str| Some(Value::String(s.into()));
        assert_eq!(annotation(&a, "x-first-death-queue"), text("q1"));
        assert_eq!(annotation(&a, "x-first-death-reason"), text("rejected"));
        assert_eq!(annotation(&a, "x-first-death-exchange"), text("amq.topic"));
        assert_eq!(annotation(&a, "x-last-death-queue"), text("q2"));
        assert_eq!(annotation(&a, "x-last-death-reason"), text("expired"));
        assert_eq!(annotation(&a, "x-last-death-exchange"), text("dlx"));
        let Some(Value::List(deaths)) = annotation(&a, "x-opt-deaths") else {
            panic!("no x-opt-deaths in {a:?}")
        };
        assert_eq!(deaths.len(), 2);
        let (last, first) = (&deaths[0], &deaths[1]);
        assert_eq!(map_get(last, "queue"), text("q2"));
        assert_eq!(
            map_get(last, "reason"),
            Some(Value::Symbol(Symbol::from("expired")))
        );
        assert_eq!(map_get(last, "count"), Some(Value::Ulong(1)));
        assert_eq!(map_get(last, "exchange"), text("dlx"));
        assert_eq!(map_get(first, "queue"), text("q1"));
        assert_eq!(map_get(first, "count"), Some(Value::Ulong(2)));
        assert_eq!(map_get(first, "exchange"), text("amq.topic"));
        assert_eq!(
            map_get(first, "routing-keys"),
            Some(Value::Array(vec![Value::String("a.b".into())].into()))
        );
        assert!(map_get(first, "ttl").is_none(), "it had no ttl");
        let Some(Value::Timestamp(t)) = map_get(first, "first-time") else {
            panic!("no first-time")
        };
        assert!(t.milliseconds() > 1_600_000_000_000);
        assert!(map_get(first, "last-time").is_some());
    }

    #[test]
    fn annotations_serde_amqp_cannot_serialize_are_written_by_our_encoder() {
        use warren_broker::dead_letter::{dead_lettered, DeathReason};
        // Found by the amqp10_frames fuzz target: message-annotations whose array holds a
        // map with a timestamp key (then a binary); dead-lettered, the annotations are
        // written again, and serde_amqp 0.18's serializer hit `unreachable!` on them.
        let payload = Bytes::from_static(
            b"\x00\x53\x70\x45\x00\x53\x72\xc1\x34\x02\xa3\x0cx-op\x0b\x00\x00\x08\x00\x00\x00\x00\
\xf0\x00\x00\x00\x20\x00\x00\x00\x01\xd1\x00\x00\x00\x17\x00\x00\x00\x04\x83\x05qSEusR\x00\
\xa0\x02\x02AP\x02Pue\x00",
        );
        let (m, _) = through_the_broker(&payload, false);
        let (copy, _) = dead_lettered(&m, "q", DeathReason::Rejected, &ShortStr::from(""), None);
        let out = to_amqp10(&copy, true, 1);
        let again = from_amqp10(&out).expect("what we send converts back");
        assert!(again.properties.headers.is_some());
        let a = annotations_of(&out);
        assert!(annotation(&a, "x-opt-deaths").is_some());
    }

    #[test]
    fn a_client_republishing_a_dead_lettered_message_with_its_deaths() {
        use warren_broker::dead_letter::{dead_lettered, DeathReason};
        let payload = Bytes::from(serde_amqp::to_vec(&Data(Binary::from(b"x".to_vec()))).unwrap());
        let (m, _) = through_the_broker(&payload, false);
        let (copy, _) = dead_lettered(&m, "q1", DeathReason::Rejected, &ShortStr::from(""), None);
        // What the consumer of the dead-letter queue got: x-opt-deaths, an array of maps.
        let received = to_amqp10(&copy, false, 1);
        // Sent back as it is (serde_amqp 0.18 misread it here, a panic in a debug build).
        let incoming = from_amqp10(&received).unwrap();
        let headers = incoming.properties.headers.as_ref().unwrap();
        let Some(FieldValue::Array(deaths)) = headers.get("x-opt-deaths") else {
            panic!("no x-opt-deaths in {headers:?}")
        };
        let [FieldValue::Table(death)] = deaths.as_slice() else {
            panic!("{deaths:?}")
        };
        assert_eq!(death.get("queue").and_then(|q| q.as_str()), Some("q1"));
        assert_eq!(death.get("count").and_then(|c| c.as_i64()), Some(1));
        // Through the broker and dead-lettered again: the published annotations, deaths
        // and all, are decoded to add the new ones.
        let (again, _) = through_the_broker(&received, false);
        let (copy, _) = dead_lettered(
            &again,
            "q2",
            DeathReason::Expired,
            &ShortStr::from(""),
            None,
        );
        let a = annotations_of(&to_amqp10(&copy, false, 0));
        let Some(Value::List(deaths)) = annotation(&a, "x-opt-deaths") else {
            panic!("no x-opt-deaths in {a:?}")
        };
        assert_eq!(
            map_get(&deaths[0], "queue"),
            Some(Value::String("q2".into()))
        );
        assert_eq!(&incoming.body[..], b"x");
    }

    #[test]
    fn a_dead_lettered_091_message_reaches_amqp10_with_death_annotations() {
        use warren_broker::dead_letter::{dead_lettered, DeathReason};
        let m = message(&BasicProperties::default(), b"x");
        let (copy, _) = dead_lettered(&m, "q", DeathReason::MaxLen, &ShortStr::from(""), None);
        let a = annotations_of(&to_amqp10(&copy, false, 0));
        assert!(matches!(annotation(&a, "x-opt-deaths"), Some(Value::List(d)) if d.len() == 1));
        assert_eq!(annotation(&a, "x-death"), None);
        assert_eq!(
            annotation(&a, "x-first-death-reason"),
            Some(Value::String("maxlen".into()))
        );
    }

    #[test]
    fn a_message_without_a_header_is_not_durable_unless_its_annotation_says_so() {
        let body = serde_amqp::to_vec(&Data(Binary::from(b"x".to_vec()))).unwrap();
        let plain = from_amqp10(&Bytes::from(body.clone())).unwrap();
        assert_eq!(plain.properties.delivery_mode, None);
        let mut annotations = OrderedMap::new();
        annotations.as_inner_mut().insert(
            OwnedKey::Symbol(Symbol::from("x-basic-delivery-mode")),
            Value::Ubyte(2),
        );
        let mut payload = serde_amqp::to_vec(&MessageAnnotations(annotations)).unwrap();
        payload.extend(body);
        let annotated = from_amqp10(&Bytes::from(payload)).unwrap();
        assert_eq!(annotated.properties.delivery_mode, Some(2));
        // A header's durable wins over the annotation.
        let mut with_header = serde_amqp::to_vec(&Header::default()).unwrap();
        let mut annotations = OrderedMap::new();
        annotations.as_inner_mut().insert(
            OwnedKey::Symbol(Symbol::from("x-basic-delivery-mode")),
            Value::Ubyte(2),
        );
        with_header.extend(serde_amqp::to_vec(&MessageAnnotations(annotations)).unwrap());
        with_header.extend(serde_amqp::to_vec(&Data(Binary::from(b"x".to_vec()))).unwrap());
        let explicit = from_amqp10(&Bytes::from(with_header)).unwrap();
        assert_eq!(explicit.properties.delivery_mode, Some(1));
    }
}
