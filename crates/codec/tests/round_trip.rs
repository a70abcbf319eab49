//! Codec tests: method and property round trips, every field-table type, and frame splitting
//! fed one byte at a time (every split point of a multi-frame stream).

use bytes::{BufMut, Bytes, BytesMut};
use proptest::prelude::*;
use warren_codec::*;

fn encode_frame(channel: u16, method: &Method) -> BytesMut {
    let mut out = BytesMut::new();
    write_method(&mut out, channel, method);
    out
}

fn decode_method(payload: Bytes) -> Method {
    let mut r = Reader::new(payload);
    let m = Method::decode(&mut r).expect("decodes");
    assert_eq!(r.remaining(), 0, "method left bytes unread");
    m
}

fn every_field_type() -> FieldTable {
    let mut nested = FieldTable::new();
    nested.insert("inner", FieldValue::string("x"));
    let mut t = FieldTable::new();
    t.insert("bool", FieldValue::Bool(true));
    t.insert("i8", FieldValue::I8(-5));
    t.insert("u8", FieldValue::U8(250));
    t.insert("i16", FieldValue::I16(-30000));
    t.insert("u16", FieldValue::U16(60000));
    t.insert("i32", FieldValue::I32(-2_000_000_000));
    t.insert("u32", FieldValue::U32(4_000_000_000));
    t.insert("i64", FieldValue::I64(-9_000_000_000_000));
    t.insert("f32", FieldValue::F32(1.5));
    t.insert("f64", FieldValue::F64(-2.25));
    t.insert(
        "decimal",
        FieldValue::Decimal {
            scale: 2,
            value: 12345,
        },
    );
    t.insert("longstr", FieldValue::string("hello ünïcode"));
    t.insert(
        "bytes",
        FieldValue::Bytes(Bytes::from_static(&[0, 1, 2, 255])),
    );
    t.insert(
        "array",
        FieldValue::Array(vec![
            FieldValue::I32(1),
            FieldValue::string("two"),
            FieldValue::Void,
        ]),
    );
    t.insert("timestamp", FieldValue::Timestamp(1_700_000_000));
    t.insert("table", FieldValue::Table(nested));
    t.insert("void", FieldValue::Void);
    t
}

#[test]
fn every_field_table_type_round_trips() {
    let table = every_field_type();
    let method = Method::QueueDeclare(QueueDeclare {
        queue: "q".into(),
        durable: true,
        arguments: table.clone(),
        ..Default::default()
    });
    let mut buf = encode_frame(0, &method);
    let frame = parse_frame(&mut buf, 131072).unwrap().unwrap();
    match decode_method(frame.payload) {
        Method::QueueDeclare(d) => {
            assert_eq!(d.arguments, table);
            assert!(d.durable && !d.passive && !d.exclusive);
        }
        other => panic!("got {other:?}"),
    }
}

#[test]
fn methods_round_trip_with_packed_bits() {
    let methods: Vec<Method> = vec![
        BasicPublish {
            exchange: "amq.direct".into(),
            routing_key: "rk".into(),
            mandatory: true,
            immediate: false,
        }
        .into(),
        BasicConsume {
            queue: "q".into(),
            consumer_tag: "".into(),
            no_local: false,
            no_ack: true,
            exclusive: true,
            no_wait: false,
            arguments: FieldTable::new(),
        }
        .into(),
        BasicDeliver {
            consumer_tag: "amq.ctag-1".into(),
            delivery_tag: u64::MAX,
            redelivered: true,
            exchange: "".into(),
            routing_key: "x".into(),
        }
        .into(),
        ExchangeDeclare {
            exchange: "e".into(),
            exchange_type: "topic".into(),
            passive: false,
            durable: true,
            auto_delete: true,
            internal: true,
            no_wait: false,
            arguments: FieldTable::new(),
        }
        .into(),
        ConnectionTuneOk {
            channel_max: 2047,
            frame_max: 131072,
            heartbeat: 60,
        }
        .into(),
        ConnectionCloseOk.into(),
        ConfirmSelect { nowait: false }.into(),
        BasicNack {
            delivery_tag: 7,
            multiple: true,
            requeue: false,
        }
        .into(),
        ExchangeUnbindOk.into(),
    ];
    for m in methods {
        let mut buf = encode_frame(3, &m);
        let frame = parse_frame(&mut buf, 131072).unwrap().unwrap();
        assert_eq!(frame.channel, 3);
        assert_eq!(frame.kind, FrameKind::Method);
        assert_eq!(decode_method(frame.payload), m);
        assert!(buf.is_empty());
    }
}

#[test]
fn exchange_unbind_ok_uses_rabbitmq_method_id() {
    // RabbitMQ's extension numbers unbind-ok 51, not 41.
    assert_eq!(ExchangeUnbindOk::METHOD_ID, 51);
    assert_eq!(ReplyCode::NoRoute as u16, 312);
    assert!(ReplyCode::FrameError.is_hard_error());
    assert!(!ReplyCode::NotFound.is_hard_error());
}

#[test]
fn properties_round_trip() {
    let props = BasicProperties {
        content_type: Some("application/json".into()),
        content_encoding: Some("gzip".into()),
        headers: Some(every_field_type()),
        delivery_mode: Some(2),
        priority: Some(9),
        correlation_id: Some("c".into()),
        reply_to: Some("amq.rabbitmq.reply-to".into()),
        expiration: Some("60000".into()),
        message_id: Some("m".into()),
        timestamp: Some(1234),
        message_type: Some("t".into()),
        user_id: Some("guest".into()),
        app_id: Some("app".into()),
        reserved: None,
    };
    let header = ContentHeader::new(BASIC_CLASS_ID, 42, &props);
    let mut out = BytesMut::new();
    write_content_header(&mut out, 1, BASIC_CLASS_ID, 42, &header.properties);
    let frame = parse_frame(&mut out, 0).unwrap().unwrap();
    assert_eq!(frame.kind, FrameKind::Header);
    let decoded = ContentHeader::decode(frame.payload).unwrap();
    assert_eq!(decoded.body_size, 42);
    assert_eq!(decoded.properties().unwrap(), props);
}

/// A stream of several frames, fed in two pieces split at every byte: each split must give
/// the same frames, and no split may produce an error.
#[test]
fn split_reads_at_every_byte() {
    let mut stream = BytesMut::new();
    write_method(
        &mut stream,
        1,
        &BasicPublish {
            exchange: "".into(),
            routing_key: "q".into(),
            mandatory: false,
            immediate: false,
        }
        .into(),
    );
    let header = ContentHeader::new(BASIC_CLASS_ID, 300, &BasicProperties::default());
    write_content_header(&mut stream, 1, BASIC_CLASS_ID, 300, &header.properties);
    write_body_frames(&mut stream, 1, &[7u8; 300], 4096);
    write_heartbeat(&mut stream);
    let whole = stream.freeze();

    let expect = {
        let mut buf = BytesMut::from(&whole[..]);
        let mut frames = vec![];
        while let Some(f) = parse_frame(&mut buf, 4096).unwrap() {
            frames.push(f);
        }
        frames
    };
    assert_eq!(expect.len(), 4);

    for split in 0..=whole.len() {
        let mut buf = BytesMut::new();
        let mut frames = vec![];
        for piece in [&whole[..split], &whole[split..]] {
            buf.extend_from_slice(piece);
            while let Some(f) = parse_frame(&mut buf, 4096).expect("no error at any split") {
                frames.push(f);
            }
        }
        assert_eq!(frames, expect, "split at {split}");
        assert!(buf.is_empty());
    }
}

#[test]
fn bodies_split_at_frame_max() {
    let mut out = BytesMut::new();
    write_body_frames(&mut out, 1, &vec![1u8; 10_000], 4096);
    let mut sizes = vec![];
    while let Some(f) = parse_frame(&mut out, 4096).unwrap() {
        sizes.push(f.payload.len());
    }
    assert_eq!(sizes, vec![4088, 4088, 1824]);
}

#[test]
fn invalid_frames_are_errors_not_incomplete() {
    // Unknown frame type.
    let mut buf = BytesMut::from(&[9u8, 0, 0, 0, 0, 0, 0, 0xCE][..]);
    assert_eq!(
        parse_frame(&mut buf, 4096).unwrap_err().reply_code(),
        ReplyCode::FrameError
    );
    // Wrong frame-end octet.
    let mut buf = BytesMut::from(&[8u8, 0, 0, 0, 0, 0, 0, 0x00][..]);
    assert_eq!(
        parse_frame(&mut buf, 4096).unwrap_err().reply_code(),
        ReplyCode::FrameError
    );
    // Oversized: refused from the header alone, before the body arrives.
    let mut buf = BytesMut::new();
    buf.put_u8(3);
    buf.put_u16(1);
    buf.put_u32(1 << 20);
    assert!(matches!(
        parse_frame(&mut buf, 131072),
        Err(CodecError::FrameTooLarge { .. })
    ));
    // Without a frame_max, a header claiming 4 GiB is waited for, not allocated for.
    let mut buf = BytesMut::new();
    buf.put_u8(3);
    buf.put_u16(1);
    buf.put_u32(u32::MAX);
    assert_eq!(parse_frame(&mut buf, 0).unwrap(), None);
    assert!(buf.capacity() <= 2 << 20, "reserved {}", buf.capacity());
    // Incomplete is not an error.
    let mut buf = BytesMut::from(&[1u8, 0, 1][..]);
    assert_eq!(parse_frame(&mut buf, 4096).unwrap(), None);
}

#[test]
fn truncated_and_unknown_methods_are_rejected() {
    let mut r = Reader::new(Bytes::from_static(&[0, 60, 0, 40, 0]));
    assert_eq!(
        Method::decode(&mut r).unwrap_err().reply_code(),
        ReplyCode::SyntaxError
    );
    let mut r = Reader::new(Bytes::from_static(&[0, 99, 0, 1]));
    assert_eq!(
        Method::decode(&mut r).unwrap_err().reply_code(),
        ReplyCode::CommandInvalid
    );
    // A table with an unknown value type 'Z'.
    let mut r = Reader::new(Bytes::from_static(&[0, 0, 0, 3, 1, b'k', b'Z']));
    assert!(matches!(r.table(), Err(CodecError::UnknownFieldType('Z'))));
}

#[test]
fn deeply_nested_tables_are_refused_not_overflowing() {
    // 10_000 nested arrays: 'A' + length each.
    let depth = 10_000usize;
    let mut inner: Vec<u8> = vec![];
    for _ in 0..depth {
        let mut outer = vec![b'A'];
        outer.extend_from_slice(&(inner.len() as u32).to_be_bytes());
        outer.extend_from_slice(&inner);
        inner = outer;
    }
    let mut table = vec![1u8, b'k'];
    table.extend_from_slice(&inner);
    let mut bytes = (table.len() as u32).to_be_bytes().to_vec();
    bytes.extend_from_slice(&table);
    let mut r = Reader::new(Bytes::from(bytes));
    assert!(r.table().is_err());
}

/// A received table may repeat a key (RabbitMQ keeps a table as a list): decoding keeps every
/// entry in order, `get`, `insert` and `remove` address the first, as RabbitMQ's
/// `table_lookup` and `keystore` do, and re-encoding gives back the same bytes.
#[test]
fn repeated_keys_are_kept_in_order() {
    let mut entries = vec![];
    for (key, value) in [(&b"k"[..], 1u8), (b"other", 2), (b"k", 3)] {
        entries.push(key.len() as u8);
        entries.extend_from_slice(key);
        entries.extend_from_slice(&[b'B', value]);
    }
    let mut wire = (entries.len() as u32).to_be_bytes().to_vec();
    wire.extend_from_slice(&entries);

    let mut table = Reader::new(Bytes::from(wire.clone())).table().unwrap();
    let keys: Vec<&str> = table.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["k", "other", "k"]);
    assert_eq!(table.get("k"), Some(&FieldValue::U8(1)));
    let mut out = BytesMut::new();
    Writer::new(&mut out).table(&table);
    assert_eq!(&out[..], &wire[..]);

    table.insert("k", FieldValue::U8(9));
    assert_eq!(table.remove("k"), Some(FieldValue::U8(9)));
    assert_eq!(table.get("k"), Some(&FieldValue::U8(3)));
    assert_eq!(table.len(), 2);
}

/// RabbitMQ's parser reads `L` as a signed 64-bit integer too (rabbit_binary_parser).
#[test]
fn capital_l_is_a_signed_64_bit_integer() {
    let mut wire = vec![0, 0, 0, 11, 1, b'n', b'L'];
    wire.extend_from_slice(&(-5i64).to_be_bytes());
    let table = Reader::new(Bytes::from(wire)).table().unwrap();
    assert_eq!(table.get("n"), Some(&FieldValue::I64(-5)));
}

fn field_value() -> impl Strategy<Value = FieldValue> {
    let leaf = prop_oneof![
        any::<bool>().prop_map(FieldValue::Bool),
        any::<i8>().prop_map(FieldValue::I8),
        any::<u8>().prop_map(FieldValue::U8),
        any::<i16>().prop_map(FieldValue::I16),
        any::<u16>().prop_map(FieldValue::U16),
        any::<i32>().prop_map(FieldValue::I32),
        any::<u32>().prop_map(FieldValue::U32),
        any::<i64>().prop_map(FieldValue::I64),
        any::<u64>().prop_map(FieldValue::Timestamp),
        (any::<u8>(), any::<u32>()).prop_map(|(scale, value)| FieldValue::Decimal { scale, value }),
        ".{0,20}".prop_map(FieldValue::string),
        proptest::collection::vec(any::<u8>(), 0..20)
            .prop_map(|v| FieldValue::Bytes(Bytes::from(v))),
        Just(FieldValue::Void),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..5).prop_map(FieldValue::Array),
            proptest::collection::vec(("[a-z]{1,8}", inner), 0..5).prop_map(|kv| {
                FieldValue::Table(
                    kv.into_iter()
                        .map(|(k, v)| (ShortStr::from(k), v))
                        .collect(),
                )
            }),
        ]
    })
}

fn short_str() -> impl Strategy<Value = ShortStr> {
    ".{0,20}".prop_map(ShortStr::from)
}

fn table() -> impl Strategy<Value = FieldTable> {
    proptest::collection::vec((short_str(), field_value()), 0..6)
        .prop_map(|kv| kv.into_iter().collect())
}

/// The methods clients send with the most arguments: strings, packed bits, integers, tables.
fn method() -> impl Strategy<Value = Method> {
    let b = any::<bool>;
    prop_oneof![
        (short_str(), b(), b(), b(), b(), b(), table()).prop_map(
            |(queue, passive, durable, exclusive, auto_delete, no_wait, arguments)| {
                QueueDeclare {
                    queue,
                    passive,
                    durable,
                    exclusive,
                    auto_delete,
                    no_wait,
                    arguments,
                }
                .into()
            }
        ),
        (short_str(), short_str(), b(), b(), b(), b(), b(), table()).prop_map(
            |(
                exchange,
                exchange_type,
                passive,
                durable,
                auto_delete,
                internal,
                no_wait,
                arguments,
            )| {
                ExchangeDeclare {
                    exchange,
                    exchange_type,
                    passive,
                    durable,
                    auto_delete,
                    internal,
                    no_wait,
                    arguments,
                }
                .into()
            }
        ),
        (short_str(), short_str(), short_str(), b(), table()).prop_map(
            |(queue, exchange, routing_key, no_wait, arguments)| {
                QueueBind {
                    queue,
                    exchange,
                    routing_key,
                    no_wait,
                    arguments,
                }
                .into()
            }
        ),
        (short_str(), short_str(), b(), b(), b(), b(), table()).prop_map(
            |(queue, consumer_tag, no_local, no_ack, exclusive, no_wait, arguments)| {
                BasicConsume {
                    queue,
                    consumer_tag,
                    no_local,
                    no_ack,
                    exclusive,
                    no_wait,
                    arguments,
                }
                .into()
            }
        ),
        (short_str(), any::<u64>(), b(), short_str(), short_str()).prop_map(
            |(consumer_tag, delivery_tag, redelivered, exchange, routing_key)| {
                BasicDeliver {
                    consumer_tag,
                    delivery_tag,
                    redelivered,
                    exchange,
                    routing_key,
                }
                .into()
            }
        ),
        (
            table(),
            short_str(),
            proptest::collection::vec(any::<u8>(), 0..40),
            short_str()
        )
            .prop_map(|(client_properties, mechanism, response, locale)| {
                ConnectionStartOk {
                    client_properties,
                    mechanism,
                    response: Bytes::from(response),
                    locale,
                }
                .into()
            }),
        (any::<u32>(), any::<u16>(), b()).prop_map(|(prefetch_size, prefetch_count, global)| {
            BasicQos {
                prefetch_size,
                prefetch_count,
                global,
            }
            .into()
        }),
        (any::<u64>(), b(), b()).prop_map(|(delivery_tag, multiple, requeue)| {
            BasicNack {
                delivery_tag,
                multiple,
                requeue,
            }
            .into()
        }),
    ]
}

fn properties() -> impl Strategy<Value = BasicProperties> {
    let s = || proptest::option::of(short_str());
    (
        (s(), s(), proptest::option::of(table()), any::<Option<u8>>()),
        (any::<Option<u8>>(), s(), s(), s(), s()),
        (any::<Option<u64>>(), s(), s(), s(), s()),
    )
        .prop_map(
            |(
                (content_type, content_encoding, headers, delivery_mode),
                (priority, correlation_id, reply_to, expiration, message_id),
                (timestamp, message_type, user_id, app_id, reserved),
            )| BasicProperties {
                content_type,
                content_encoding,
                headers,
                delivery_mode,
                priority,
                correlation_id,
                reply_to,
                expiration,
                message_id,
                timestamp,
                message_type,
                user_id,
                app_id,
                reserved,
            },
        )
}

proptest! {
    #[test]
    fn arbitrary_methods_round_trip(m in method(), channel in any::<u16>()) {
        let mut buf = encode_frame(channel, &m);
        let frame = parse_frame(&mut buf, 0).unwrap().unwrap();
        prop_assert_eq!(frame.channel, channel);
        prop_assert_eq!(decode_method(frame.payload), m);
        prop_assert!(buf.is_empty());
    }

    #[test]
    fn arbitrary_properties_round_trip(props in properties(), body_size in any::<u64>()) {
        let header = ContentHeader::new(BASIC_CLASS_ID, body_size, &props);
        let mut out = BytesMut::new();
        write_content_header(&mut out, 1, BASIC_CLASS_ID, body_size, &header.properties);
        let frame = parse_frame(&mut out, 0).unwrap().unwrap();
        let decoded = ContentHeader::decode(frame.payload).unwrap();
        prop_assert_eq!(decoded.body_size, body_size);
        prop_assert_eq!(decoded.properties().unwrap(), props);
    }

    #[test]
    fn arbitrary_tables_round_trip(kv in proptest::collection::vec(("[a-zA-Z0-9-]{1,12}", field_value()), 0..8)) {
        let table: FieldTable = kv.into_iter().map(|(k, v)| (ShortStr::from(k), v)).collect();
        let mut out = BytesMut::new();
        Writer::new(&mut out).table(&table);
        let mut r = Reader::new(out.freeze());
        prop_assert_eq!(r.table().unwrap(), table);
        prop_assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let mut buf = BytesMut::from(&bytes[..]);
        while let Ok(Some(frame)) = parse_frame(&mut buf, 4096) {
            let _ = Method::decode(&mut Reader::new(frame.payload.clone()));
            let _ = ContentHeader::decode(frame.payload).map(|h| h.properties());
        }
        let _ = Method::decode(&mut Reader::new(Bytes::from(bytes)));
    }
}

/// A message as published on channel 7 in one frame each, taken whole by `split_publish`.
fn published_whole(exchange: &str, key: &str, properties: &Bytes, body: &[u8]) -> MessageBytes {
    let mut buf = BytesMut::new();
    let publish = BasicPublish {
        exchange: exchange.into(),
        routing_key: key.into(),
        mandatory: false,
        immediate: false,
    };
    write_method(&mut buf, 7, &publish.into());
    let header_at = buf.len();
    write_content_header(&mut buf, 7, BASIC_CLASS_ID, body.len() as u64, properties);
    buf[header_at + 9..header_at + 11].copy_from_slice(&[0x12, 0x34]); // weight
    write_body_frames(&mut buf, 7, body, 0);
    let taken = split_publish(&mut buf, 0).expect("whole");
    assert!(buf.is_empty());
    taken.publish.expect("decodes").message
}

/// `write_deliver` (the consume path's encoder) writes exactly what the generic encoders
/// write for the same delivery: names of every length up to 255, empty and multi-frame
/// bodies, both redelivered values, for a message built from its parts and for one that
/// holds its publish's frames (published on another channel, with a non-zero weight).
#[test]
fn write_deliver_matches_the_generic_encoders() {
    let long = "k".repeat(255);
    let properties = {
        let props = BasicProperties {
            content_type: Some("text/plain".into()),
            delivery_mode: Some(2),
            ..Default::default()
        };
        ContentHeader::new(BASIC_CLASS_ID, 0, &props).properties
    };
    for (tag, exchange, key) in [
        ("amq.ctag-1", "", "q"),
        ("", "amq.topic", long.as_str()),
        (long.as_str(), long.as_str(), ""),
    ] {
        for (body_len, frame_max) in [
            (0, 4096),
            (16, 0),
            (16, 4096),
            (4088, 4096),
            (4089, 4096),
            (10_000, 4096),
        ] {
            for redelivered in [false, true] {
                let body = vec![0xabu8; body_len];
                // Both after a frame already in the buffer, as on a busy connection.
                let mut generic = BytesMut::from(&b"earlier frame"[..]);
                write_method(
                    &mut generic,
                    3,
                    &BasicDeliver {
                        consumer_tag: tag.into(),
                        delivery_tag: 1 << 40,
                        redelivered,
                        exchange: exchange.into(),
                        routing_key: key.into(),
                    }
                    .into(),
                );
                write_content_header(
                    &mut generic,
                    3,
                    BASIC_CLASS_ID,
                    body_len as u64,
                    &properties,
                );
                write_body_frames(&mut generic, 3, &body, frame_max);
                let direct = BytesMut::from(&b"earlier frame"[..]);
                let fields = DeliverFields {
                    consumer_tag: tag,
                    delivery_tag: 1 << 40,
                    redelivered,
                    exchange,
                    routing_key: key,
                };
                let joined = MessageBytes::joined(
                    &exchange.into(),
                    &key.into(),
                    &properties,
                    Bytes::from(body.clone()),
                );
                let whole = published_whole(exchange, key, &properties, &body);
                for message in [joined, whole] {
                    let mut direct = direct.clone();
                    write_deliver(&mut direct, 3, &fields, &message, frame_max);
                    assert_eq!(
                        direct, generic,
                        "{tag:?} {exchange:?} body {body_len} frame_max {frame_max}"
                    );
                }
            }
        }
    }
}
