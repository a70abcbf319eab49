//! AMQP 1.0 values read by our own code where serde_amqp 0.18 (the newest release; the
//! registry has nothing later) goes wrong, and a structural check of everything handed to
//! it.
//!
//! serde_amqp keeps an array's element constructor while it decodes each element, so the
//! keys and values inside an array of maps (or lists, or arrays) are read with the map's
//! constructor: RabbitMQ 4's `x-opt-deaths` annotation, an array of maps, fails to decode
//! (a client republishing a dead-lettered message had it refused), and crafted variants
//! reach its unchecked arithmetic: `size - 1` on a map8 of size 0, `count -= 2` on an odd
//! map count, `len - 2` on an array8 of size 1 — panics in a debug build (overflow), wrong
//! lengths in a release one (the tests below run the exact bytes through it).
//!
//! So: [`decode_map_section`] decodes message-annotations (any value, arrays of maps
//! included) here, into the type crate's `Value`, and [`encode`] writes the maps we send
//! back (its serializer has a bug of its own there); and [`check`]
//! walks any other value (performatives, SASL frames, the header and properties sections)
//! before serde_amqp sees it, refusing what it would misread — arrays of compound or
//! described elements (no performative or section field holds one), size fields smaller
//! than their own header, odd map counts, values past their container's end, nesting
//! deeper than [`MAX_DEPTH`]. Whether to replace serde_amqp wholesale is issue 12's codec
//! question; until then, this is the narrow part we own.

use fe2o3_amqp_types::messaging::annotations::OwnedKey;
use fe2o3_amqp_types::primitives::{
    Array, Dec128, Dec32, Dec64, OrderedMap, Symbol, Timestamp, Uuid, Value,
};
use ordered_float::OrderedFloat;
use serde_amqp::described::Described;
use serde_amqp::descriptor::Descriptor;

/// Deepest nesting of compound and described values accepted (each level is a stack frame
/// of the decoder; real messages nest two or three deep).
pub const MAX_DEPTH: usize = 32;
/// Most elements of one array (its elements may be zero bytes wide: null, true, uint0).
const MAX_ARRAY_COUNT: usize = 65_536;

type Result<T> = std::result::Result<T, String>;

/// Bytes a fixed-width format code's value takes after the code; None for variable-width
/// and compound codes (and unknown ones).
fn fixed_width(code: u8) -> Option<usize> {
    Some(match code {
        0x40..=0x45 => 0,
        0x50..=0x56 => 1,
        0x60 | 0x61 => 2,
        0x70..=0x74 => 4,
        0x80..=0x84 => 8,
        0x98 | 0x94 => 16,
        _ => return None,
    })
}

fn is_compound(code: u8) -> bool {
    matches!(code, 0x45 | 0xc0 | 0xd0 | 0xc1 | 0xd1 | 0xe0 | 0xf0)
}

fn take(b: &[u8], n: usize) -> Result<&[u8]> {
    b.get(..n).ok_or_else(|| "value truncated".to_owned())
}

/// A compound's (list, map, array) size and count fields: the count, and the body after
/// the count (the array's element constructor first) with the total bytes taken after the
/// format code.
fn compound(code: u8, b: &[u8]) -> Result<(usize, &[u8], usize)> {
    let (size, count, width) = match code {
        0xc0 | 0xc1 | 0xe0 => {
            let h = take(b, 2)?;
            (usize::from(h[0]), usize::from(h[1]), 1)
        }
        _ => {
            let h = take(b, 8)?;
            let size = u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as usize;
            let count = u32::from_be_bytes([h[4], h[5], h[6], h[7]]) as usize;
            (size, count, 4)
        }
    };
    if size < width {
        return Err("compound size smaller than its count".into());
    }
    let body = b
        .get(2 * width..width + size)
        .ok_or("compound value truncated")?;
    if matches!(code, 0xc1 | 0xd1) && count % 2 != 0 {
        return Err("map with an odd number of elements".into());
    }
    let is_array = matches!(code, 0xe0 | 0xf0);
    if is_array && count > MAX_ARRAY_COUNT {
        return Err("array too long".into());
    }
    if !is_array && count > body.len() {
        return Err("more elements than bytes".into());
    }
    Ok((count, body, width + size))
}

/// Checks the value at the start of `b` as described above; its length.
pub fn check(b: &[u8]) -> Result<usize> {
    check_at(b, 0)
}

fn check_at(b: &[u8], depth: usize) -> Result<usize> {
    if depth > MAX_DEPTH {
        return Err("values nested too deeply".into());
    }
    let code = *b.first().ok_or("value truncated")?;
    if code == 0x00 {
        let descriptor = check_at(&b[1..], depth + 1)?;
        let value = check_at(&b[1 + descriptor..], depth + 1)?;
        return Ok(1 + descriptor + value);
    }
    Ok(1 + check_body(code, &b[1..], depth)?)
}

/// Checks a value's bytes after its format code `code`; their length.
fn check_body(code: u8, b: &[u8], depth: usize) -> Result<usize> {
    match code {
        0xc0 | 0xd0 | 0xc1 | 0xd1 => {
            let (count, body, taken) = compound(code, b)?;
            let mut at = 0;
            for _ in 0..count {
                at += check_at(body.get(at..).ok_or("list element truncated")?, depth + 1)?;
            }
            Ok(taken)
        }
        0xe0 | 0xf0 => {
            let (count, body, taken) = compound(code, b)?;
            if count == 0 {
                return Ok(taken);
            }
            let element = *body.first().ok_or("array without a constructor")?;
            if element == 0x00 || is_compound(element) {
                return Err("array of compound or described values".into());
            }
            let mut at = 1;
            for _ in 0..count {
                at += check_body(element, body.get(at..).unwrap_or_default(), depth + 1)?;
            }
            Ok(taken)
        }
        _ => check_body_shallow(code, b),
    }
}

/// Decodes the value at the start of `b`; the value and its length.
pub fn decode(b: &[u8]) -> Result<(Value, usize)> {
    decode_at(b, 0)
}

fn decode_at(b: &[u8], depth: usize) -> Result<(Value, usize)> {
    if depth > MAX_DEPTH {
        return Err("values nested too deeply".into());
    }
    let code = *b.first().ok_or("value truncated")?;
    if code == 0x00 {
        let (descriptor, d_len) = decode_at(&b[1..], depth + 1)?;
        let (value, v_len) = decode_at(&b[1 + d_len..], depth + 1)?;
        return Ok((described(descriptor, value)?, 1 + d_len + v_len));
    }
    let (value, len) = decode_body(code, &b[1..], depth)?;
    Ok((value, 1 + len))
}

fn described(descriptor: Value, value: Value) -> Result<Value> {
    let descriptor = match descriptor {
        Value::Ulong(code) => Descriptor::Code(code),
        Value::Symbol(name) => Descriptor::Name(name),
        _ => return Err("descriptor is neither a ulong nor a symbol".into()),
    };
    Ok(Value::Described(Box::new(Described { descriptor, value })))
}

fn array<const N: usize>(b: &[u8]) -> Result<[u8; N]> {
    take(b, N)?
        .try_into()
        .map_err(|_| "value truncated".to_owned())
}

fn text(b: &[u8]) -> Result<String> {
    String::from_utf8(b.to_vec()).map_err(|_| "string is not UTF-8".to_owned())
}

/// Decodes a value's bytes after its format code `code`; the value and their length.
fn decode_body(code: u8, b: &[u8], depth: usize) -> Result<(Value, usize)> {
    let len = check_body_shallow(code, b)?;
    let v = &b[..len];
    let value = match code {
        0x40 => Value::Null,
        0x41 => Value::Bool(true),
        0x42 => Value::Bool(false),
        0x56 => Value::Bool(v[0] != 0),
        0x50 => Value::Ubyte(v[0]),
        0x51 => Value::Byte(v[0] as i8),
        0x60 => Value::Ushort(u16::from_be_bytes(array(v)?)),
        0x61 => Value::Short(i16::from_be_bytes(array(v)?)),
        0x43 => Value::Uint(0),
        0x52 => Value::Uint(u32::from(v[0])),
        0x70 => Value::Uint(u32::from_be_bytes(array(v)?)),
        0x54 => Value::Int(i32::from(v[0] as i8)),
        0x71 => Value::Int(i32::from_be_bytes(array(v)?)),
        0x44 => Value::Ulong(0),
        0x53 => Value::Ulong(u64::from(v[0])),
        0x80 => Value::Ulong(u64::from_be_bytes(array(v)?)),
        0x55 => Value::Long(i64::from(v[0] as i8)),
        0x81 => Value::Long(i64::from_be_bytes(array(v)?)),
        0x72 => Value::Float(OrderedFloat(f32::from_be_bytes(array(v)?))),
        0x82 => Value::Double(OrderedFloat(f64::from_be_bytes(array(v)?))),
        0x74 => Value::Decimal32(Dec32::from(array::<4>(v)?)),
        0x84 => Value::Decimal64(Dec64::from(array::<8>(v)?)),
        0x94 => Value::Decimal128(Dec128::from(array::<16>(v)?)),
        0x73 => Value::Char(
            char::from_u32(u32::from_be_bytes(array(v)?)).ok_or("char is not a code point")?,
        ),
        0x83 => Value::Timestamp(Timestamp::from_milliseconds(i64::from_be_bytes(array(v)?))),
        0x98 => Value::Uuid(Uuid::from(array::<16>(v)?)),
        0xa0 => Value::Binary(serde_bytes::ByteBuf::from(v[1..].to_vec())),
        0xb0 => Value::Binary(serde_bytes::ByteBuf::from(v[4..].to_vec())),
        0xa1 => Value::String(text(&v[1..])?),
        0xb1 => Value::String(text(&v[4..])?),
        0xa3 => Value::Symbol(Symbol::from(text(&v[1..])?)),
        0xb3 => Value::Symbol(Symbol::from(text(&v[4..])?)),
        0x45 => Value::List(Vec::new()),
        0xc0 | 0xd0 | 0xc1 | 0xd1 => {
            let (count, body, _) = compound(code, b)?;
            let mut items = Vec::with_capacity(count.min(64));
            let mut at = 0;
            for _ in 0..count {
                let (item, n) = decode_at(body.get(at..).ok_or("element truncated")?, depth + 1)?;
                items.push(item);
                at += n;
            }
            if matches!(code, 0xc0 | 0xd0) {
                Value::List(items)
            } else {
                let mut map = OrderedMap::new();
                let mut items = items.into_iter();
                while let (Some(k), Some(v)) = (items.next(), items.next()) {
                    map.as_inner_mut().insert(k, v);
                }
                Value::Map(map)
            }
        }
        0xe0 | 0xf0 => {
            let (count, body, _) = compound(code, b)?;
            let mut items = Vec::with_capacity(count.min(64));
            if count > 0 {
                let (descriptor, mut at) = match body.first() {
                    Some(0x00) => {
                        let (d, n) = decode_at(&body[1..], depth + 1)?;
                        (Some(d), 1 + n)
                    }
                    Some(_) => (None, 0),
                    None => return Err("array without a constructor".into()),
                };
                let element = *body.get(at).ok_or("array without a constructor")?;
                at += 1;
                for _ in 0..count {
                    let (item, n) =
                        decode_body(element, body.get(at..).unwrap_or_default(), depth + 1)?;
                    at += n;
                    items.push(match &descriptor {
                        Some(d) => described(d.clone(), item)?,
                        None => item,
                    });
                }
            }
            Value::Array(Array::from(items))
        }
        _ => return Err(format!("unknown format code {code:#04x}")),
    };
    Ok((value, len))
}

/// The length of a value's bytes after its format code, its own header checked but not
/// its elements (`decode_body` decodes those).
fn check_body_shallow(code: u8, b: &[u8]) -> Result<usize> {
    if let Some(width) = fixed_width(code) {
        take(b, width)?;
        return Ok(width);
    }
    match code {
        0xa0 | 0xa1 | 0xa3 => {
            let n = 1 + usize::from(*b.first().ok_or("value truncated")?);
            take(b, n).map(|_| n)
        }
        0xb0 | 0xb1 | 0xb3 => {
            let n = 4 + u32::from_be_bytes(array(b)?) as usize;
            take(b, n).map(|_| n)
        }
        0xc0 | 0xd0 | 0xc1 | 0xd1 | 0xe0 | 0xf0 => compound(code, b).map(|(_, _, n)| n),
        _ => Err(format!("unknown format code {code:#04x}")),
    }
}

/// Appends `value`'s AMQP encoding to `out`: the encoder beside [`decode`], for the maps we
/// write back (message-annotations, application-properties). serde_amqp 0.18's serializer
/// hits an `unreachable!` (a panic) on some maps inside arrays — found by the amqp10_frames
/// fuzz target with a republished annotation — so what a client sent is never re-encoded
/// through it. Always the wide forms (uint32 lengths), which every decoder reads.
pub fn encode(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Described(d) => {
            out.push(0x00);
            match &d.descriptor {
                Descriptor::Code(code) => encode(out, &Value::Ulong(*code)),
                Descriptor::Name(name) => encode(out, &Value::Symbol(name.clone())),
            }
            encode(out, &d.value);
        }
        Value::Null => out.push(0x40),
        Value::Bool(true) => out.push(0x41),
        Value::Bool(false) => out.push(0x42),
        Value::Ubyte(n) => out.extend([0x50, *n]),
        Value::Byte(n) => out.extend([0x51, *n as u8]),
        Value::Ushort(n) => fixed(out, 0x60, &n.to_be_bytes()),
        Value::Short(n) => fixed(out, 0x61, &n.to_be_bytes()),
        Value::Uint(n) => fixed(out, 0x70, &n.to_be_bytes()),
        Value::Int(n) => fixed(out, 0x71, &n.to_be_bytes()),
        Value::Ulong(n) => fixed(out, 0x80, &n.to_be_bytes()),
        Value::Long(n) => fixed(out, 0x81, &n.to_be_bytes()),
        Value::Float(f) => fixed(out, 0x72, &f.0.to_be_bytes()),
        Value::Double(f) => fixed(out, 0x82, &f.0.to_be_bytes()),
        Value::Decimal32(d) => fixed(out, 0x74, d.as_inner()),
        Value::Decimal64(d) => fixed(out, 0x84, d.as_inner()),
        Value::Decimal128(d) => fixed(out, 0x94, d.as_inner()),
        Value::Char(c) => fixed(out, 0x73, &u32::from(*c).to_be_bytes()),
        Value::Timestamp(t) => fixed(out, 0x83, &t.milliseconds().to_be_bytes()),
        Value::Uuid(u) => fixed(out, 0x98, u.as_inner()),
        Value::Binary(b) => variable(out, 0xb0, b),
        Value::String(s) => variable(out, 0xb1, s.as_bytes()),
        Value::Symbol(s) => variable(out, 0xb3, s.as_str().as_bytes()),
        Value::List(items) => write_compound(out, 0xd0, items.len(), |out| {
            items.iter().for_each(|v| encode(out, v))
        }),
        Value::Map(map) => write_compound(out, 0xd1, 2 * map.len(), |out| {
            for (k, v) in map.iter() {
                encode(out, k);
                encode(out, v);
            }
        }),
        Value::Array(items) => encode_array(out, &items.0),
    }
}

fn fixed(out: &mut Vec<u8>, code: u8, bytes: &[u8]) {
    out.push(code);
    out.extend_from_slice(bytes);
}

fn variable(out: &mut Vec<u8>, code: u8, bytes: &[u8]) {
    out.push(code);
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    out.extend_from_slice(bytes);
}

/// A list32, map32 or array32: size (counted from the count field) and count, then what
/// `body` writes.
fn write_compound(out: &mut Vec<u8>, code: u8, count: usize, body: impl FnOnce(&mut Vec<u8>)) {
    out.push(code);
    let size_at = out.len();
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&(count as u32).to_be_bytes());
    body(out);
    let size = (out.len() - size_at - 4) as u32;
    out[size_at..size_at + 4].copy_from_slice(&size.to_be_bytes());
}

/// An array: one constructor (the first element's), then each element without it. Elements
/// whose constructors differ cannot form an array; they are written as a list instead.
fn encode_array(out: &mut Vec<u8>, items: &[Value]) {
    let encoded: Vec<Vec<u8>> = items
        .iter()
        .map(|v| {
            let mut one = Vec::new();
            encode(&mut one, v);
            one
        })
        .collect();
    let constructor_len = |e: &[u8]| match e.first() {
        Some(0x00) => check(&e[1..]).map_or(e.len(), |d| 2 + d),
        _ => 1,
    };
    let constructor = encoded.first().map(|e| &e[..constructor_len(e)]);
    let uniform = encoded
        .iter()
        .all(|e| Some(&e[..constructor_len(e)]) == constructor);
    if !uniform {
        return encode(out, &Value::List(items.to_vec()));
    }
    write_compound(out, 0xf0, items.len(), |out| {
        if let Some(constructor) = constructor {
            out.extend_from_slice(constructor);
        }
        for e in &encoded {
            out.extend_from_slice(&e[constructor_len(e)..]);
        }
    });
}

/// A map section (message-annotations 0x72, application-properties 0x74) from its entries.
pub fn encode_map_section(out: &mut Vec<u8>, descriptor: u8, entries: Vec<(Value, Value)>) {
    out.extend_from_slice(&[0x00, 0x53, descriptor]);
    write_compound(out, 0xd1, 2 * entries.len(), |out| {
        for (k, v) in &entries {
            encode(out, k);
            encode(out, v);
        }
    });
}

/// The map of a message-annotations, application-properties or footer section (its
/// descriptor skipped): its entries, keys as the annotations' key type (symbol or ulong;
/// a string key reads as a symbol, as application-properties' keys are strings).
pub fn decode_map_section(section: &[u8]) -> Result<Vec<(OwnedKey, Value)>> {
    if section.first() != Some(&0x00) {
        return Err("section without a descriptor".into());
    }
    let descriptor = check(&section[1..])?;
    let (map, _) = decode(&section[1 + descriptor..])?;
    let Value::Map(map) = map else {
        return Err("section is not a map".into());
    };
    map.into_inner()
        .into_iter()
        .map(|(k, v)| {
            let key = match k {
                Value::Symbol(s) => OwnedKey::Symbol(s),
                Value::String(s) => OwnedKey::Symbol(Symbol::from(s)),
                Value::Ulong(n) => OwnedKey::Ulong(n),
                _ => return Err("map key is not a symbol, string or ulong".to_owned()),
            };
            Ok((key, v))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `x-opt-deaths` as RabbitMQ 4 (and `convert.rs`) writes it: message-annotations
    /// holding an array32 of map32 elements, one death (queue "q", count ulong 1).
    const DEATHS: &[u8] = b"\x00\x53\x72\xc1\x34\x02\xa3\x0cx-opt-deaths\
\xf0\x00\x00\x00\x20\x00\x00\x00\x01\xd1\x00\x00\x00\x17\x00\x00\x00\x04\
\xa3\x05queue\xa1\x01q\xa3\x05count\x53\x01";
    /// The same death with map8 elements (as a client encoding small maps compactly,
    /// proton-c among them, sends it back).
    const DEATHS_MAP8: &[u8] = b"\x00\x53\x72\xc1\x2e\x02\xa3\x0cx-opt-deaths\
\xf0\x00\x00\x00\x1a\x00\x00\x00\x01\xc1\x14\x04\
\xa3\x05queue\xa1\x01q\xa3\x05count\x53\x01";

    #[test]
    fn serde_amqp_misreads_an_array_of_maps_and_we_do_not() {
        let expected_death = {
            let mut death = OrderedMap::new();
            death.as_inner_mut().insert(
                Value::Symbol(Symbol::from("queue")),
                Value::String("q".into()),
            );
            death
                .as_inner_mut()
                .insert(Value::Symbol(Symbol::from("count")), Value::Ulong(1));
            Value::Array(Array::from(vec![Value::Map(death)]))
        };
        for bytes in [DEATHS, DEATHS_MAP8] {
            // serde_amqp 0.18 reads the inner keys with the element constructor: an error
            // for map32 elements, an overflow (`count -= 2` past 0) for map8 ones, a panic
            // in a debug build and garbage in a release one. On a thread: either outcome.
            let through_serde = std::thread::spawn(move || {
                serde_amqp::from_slice::<fe2o3_amqp_types::messaging::MessageAnnotations>(bytes)
                    .ok()
                    .and_then(|a| {
                        a.0.get(&OwnedKey::Symbol(Symbol::from("x-opt-deaths")))
                            .cloned()
                    })
            })
            .join();
            let expected = expected_death.clone();
            assert!(
                !matches!(&through_serde, Ok(Some(v)) if *v == expected),
                "serde_amqp decodes it now: value.rs's decoder can go"
            );
            let entries = decode_map_section(bytes).unwrap();
            assert_eq!(
                entries,
                vec![(
                    OwnedKey::Symbol(Symbol::from("x-opt-deaths")),
                    expected_death.clone()
                )]
            );
            // What serde_amqp is never given.
            assert!(check(&bytes[3..]).is_err());
        }
    }

    #[test]
    fn what_serde_amqp_would_subtract_past_zero_is_refused() {
        // serde_amqp 0.18 panics on these in a debug build (de.rs: `size - OFFSET_MAP8`,
        // `self.count -= 2`, `len - OFFSET_ARRAY8`): checked on a thread.
        for overflowing in [
            &b"\xc1\x00\x00"[..], // map8 of size 0
            b"\xc1\x02\x01\x40",  // map8 with one element
            b"\xe0\x01\x01\x40",  // array8 of size 1 with an element
        ] {
            let owned = overflowing.to_vec();
            let serde =
                std::thread::spawn(move || serde_amqp::from_slice::<Value>(&owned).is_ok()).join();
            if cfg!(debug_assertions) {
                assert!(
                    serde.is_err(),
                    "serde_amqp no longer panics on {overflowing:x?}"
                );
            }
            assert!(check(overflowing).is_err(), "{overflowing:x?}");
            assert!(decode(overflowing).is_err(), "{overflowing:x?}");
        }
        for bad in [
            &b"\xd0\x00\x00\x00\x02\x00"[..],            // list32 of size 2
            b"\xc0\x05\x03\x40\x40",                     // list8 running past its end
            b"\xc0\x01\x05",                             // five elements in no bytes
            b"\xf0\x00\x00\x00\x05\xff\xff\xff\xff\x40", // four billion nulls
        ] {
            assert!(check(bad).is_err(), "{bad:x?}");
            assert!(decode(bad).is_err(), "{bad:x?}");
        }
        // Nesting beyond the limit (lists in lists).
        let mut deep = Vec::new();
        for _ in 0..100 {
            deep.extend_from_slice(b"\x00\x53\x01");
        }
        deep.push(0x40);
        assert!(check(&deep).is_err() && decode(&deep).is_err());
    }

    #[test]
    fn what_we_encode_decodes_to_the_same_value() {
        for bytes in [DEATHS, DEATHS_MAP8] {
            let (section, _) = decode(bytes).unwrap();
            let mut out = Vec::new();
            encode(&mut out, &section);
            assert_eq!(decode(&out), Ok((section, out.len())));
            assert!(check(&out[3..]).is_err(), "an array of maps");
        }
        let mut mixed = Vec::new();
        let values = vec![Value::Int(1), Value::String("two".into())];
        encode(&mut mixed, &Value::Array(Array::from(values.clone())));
        assert_eq!(
            decode(&mixed).unwrap().0,
            Value::List(values),
            "not an array: a list"
        );
    }

    #[test]
    fn every_primitive_decodes() {
        let described_list = b"\x00\x53\x70\xc0\x04\x02\x41\x52\x07";
        let (v, n) = decode(described_list).unwrap();
        assert_eq!(n, described_list.len());
        assert_eq!(check(described_list), Ok(n));
        let Value::Described(d) = v else { panic!() };
        assert_eq!(d.descriptor, Descriptor::Code(0x70));
        assert_eq!(
            d.value,
            Value::List(vec![Value::Bool(true), Value::Uint(7)])
        );
        for (bytes, value) in [
            (&b"\x54\xff"[..], Value::Int(-1)),
            (b"\x55\xfe", Value::Long(-2)),
            (
                b"\x83\x00\x00\x00\x00\x00\x00\x03\xe8",
                Value::Timestamp(Timestamp::from_milliseconds(1000)),
            ),
            (b"\xa1\x02hi", Value::String("hi".into())),
            (b"\xb3\x00\x00\x00\x01s", Value::Symbol(Symbol::from("s"))),
            (
                b"\xe0\x04\x02\x54\x01\x02",
                Value::Array(Array::from(vec![Value::Int(1), Value::Int(2)])),
            ),
            (b"\x45", Value::List(vec![])),
        ] {
            assert_eq!(decode(bytes), Ok((value, bytes.len())), "{bytes:x?}");
            assert_eq!(check(bytes), Ok(bytes.len()), "{bytes:x?}");
        }
    }
}
