//! Writes the seed inputs of the fuzz targets (fuzz/seeds/TARGET/NAME): valid encodings of
//! what clients send, so that a short fuzz run starts from inputs that get deep into each
//! decoder. Run after a codec change with
//! `cargo run -p warren-codec --example fuzz_seeds -- fuzz/seeds`.

use bytes::{Bytes, BytesMut};
use std::path::Path;
use warren_codec::*;

fn every_field_type() -> FieldTable {
    let nested: FieldTable = [("inner".into(), FieldValue::string("x"))]
        .into_iter()
        .collect();
    [
        ("bool", FieldValue::Bool(true)),
        ("i8", FieldValue::I8(-5)),
        ("u8", FieldValue::U8(250)),
        ("i16", FieldValue::I16(-300)),
        ("u16", FieldValue::U16(60000)),
        ("i32", FieldValue::I32(-2)),
        ("u32", FieldValue::U32(4_000_000_000)),
        ("i64", FieldValue::I64(-9)),
        ("f32", FieldValue::F32(1.5)),
        ("f64", FieldValue::F64(-2.25)),
        (
            "decimal",
            FieldValue::Decimal {
                scale: 2,
                value: 12345,
            },
        ),
        ("longstr", FieldValue::string("hello")),
        ("bytes", FieldValue::Bytes(Bytes::from_static(&[0, 1, 255]))),
        (
            "array",
            FieldValue::Array(vec![
                FieldValue::I32(1),
                FieldValue::string("two"),
                FieldValue::Void,
            ]),
        ),
        ("timestamp", FieldValue::Timestamp(1_700_000_000)),
        ("table", FieldValue::Table(nested)),
        ("void", FieldValue::Void),
    ]
    .into_iter()
    .map(|(k, v)| (ShortStr::from(k), v))
    .collect()
}

fn properties() -> BasicProperties {
    BasicProperties {
        content_type: Some("application/json".into()),
        content_encoding: Some("gzip".into()),
        headers: Some(every_field_type()),
        delivery_mode: Some(2),
        priority: Some(5),
        correlation_id: Some("c-1".into()),
        reply_to: Some("replies".into()),
        expiration: Some("60000".into()),
        message_id: Some("m-1".into()),
        timestamp: Some(1_700_000_000),
        message_type: Some("t".into()),
        user_id: Some("guest".into()),
        app_id: Some("app".into()),
        reserved: None,
    }
}

/// What a client sends to open a connection, on channel 0.
fn handshake() -> Vec<(&'static str, Method)> {
    let mut caps = FieldTable::new();
    caps.insert("publisher_confirms", FieldValue::Bool(true));
    let mut client_properties = FieldTable::new();
    client_properties.insert("product", FieldValue::string("seed"));
    client_properties.insert("capabilities", FieldValue::Table(caps));
    vec![
        (
            "start_ok",
            ConnectionStartOk {
                client_properties,
                mechanism: "PLAIN".into(),
                response: Bytes::from_static(b"\0guest\0guest"),
                locale: "en_US".into(),
            }
            .into(),
        ),
        (
            "tune_ok",
            ConnectionTuneOk {
                channel_max: 2047,
                frame_max: 131072,
                heartbeat: 0,
            }
            .into(),
        ),
        (
            "open",
            ConnectionOpen {
                virtual_host: "/".into(),
            }
            .into(),
        ),
    ]
}

/// What a client then says on channel 1: the methods with the most arguments, tables
/// included, in an order that gets each one past the broker's checks. `None` stands for a
/// message published to the exchange `e` with every property set.
fn channel_session() -> Vec<(&'static str, Option<Method>)> {
    let text = |s: &str| FieldValue::string(s);
    let mut binding = FieldTable::new();
    binding.insert("x-match", text("any"));
    binding.insert("bool", FieldValue::Bool(true));
    let mut queue_args = FieldTable::new();
    queue_args.insert("x-max-length", FieldValue::I32(10));
    queue_args.insert("x-message-ttl", FieldValue::I32(60000));
    queue_args.insert("x-dead-letter-exchange", text("e"));
    let publish: Method = BasicPublish {
        exchange: "e".into(),
        routing_key: "k".into(),
        mandatory: true,
        immediate: false,
    }
    .into();
    let methods: Vec<(&'static str, Method)> = vec![
        ("channel_open", ChannelOpen.into()),
        (
            "exchange_declare",
            ExchangeDeclare {
                exchange: "e".into(),
                exchange_type: "headers".into(),
                passive: false,
                durable: true,
                auto_delete: false,
                internal: false,
                no_wait: false,
                arguments: FieldTable::new(),
            }
            .into(),
        ),
        (
            "queue_declare",
            QueueDeclare {
                queue: "q".into(),
                durable: true,
                arguments: queue_args,
                ..Default::default()
            }
            .into(),
        ),
        (
            "queue_bind",
            QueueBind {
                queue: "q".into(),
                exchange: "e".into(),
                routing_key: "k".into(),
                no_wait: false,
                arguments: binding,
            }
            .into(),
        ),
        ("confirm_select", ConfirmSelect { nowait: false }.into()),
        ("basic_publish", publish.clone()),
        (
            "basic_qos",
            BasicQos {
                prefetch_size: 0,
                prefetch_count: 10,
                global: false,
            }
            .into(),
        ),
        (
            "basic_get",
            BasicGet {
                queue: "q".into(),
                no_ack: false,
            }
            .into(),
        ),
        (
            "basic_ack",
            BasicAck {
                delivery_tag: 1,
                multiple: true,
            }
            .into(),
        ),
        ("basic_publish_again", publish.clone()),
        (
            "basic_consume",
            BasicConsume {
                queue: "q".into(),
                consumer_tag: "".into(),
                no_local: false,
                no_ack: false,
                exclusive: false,
                no_wait: false,
                arguments: every_field_type(),
            }
            .into(),
        ),
        (
            "queue_purge",
            QueuePurge {
                queue: "q".into(),
                no_wait: false,
            }
            .into(),
        ),
        (
            "queue_delete",
            QueueDelete {
                queue: "q".into(),
                if_unused: false,
                if_empty: false,
                no_wait: false,
            }
            .into(),
        ),
        (
            "channel_close",
            ChannelClose {
                reply_code: 200,
                reply_text: "bye".into(),
                class_id: 0,
                method_id: 0,
            }
            .into(),
        ),
    ];
    let mut session = Vec::new();
    for (name, m) in methods {
        let publish = name.starts_with("basic_publish");
        session.push((name, Some(m)));
        if publish {
            session.push(("content", None));
        }
    }
    session
}

fn write(dir: &Path, target: &str, name: &str, bytes: &[u8]) {
    let dir = dir.join(target);
    std::fs::create_dir_all(&dir).expect("seed directory");
    std::fs::write(dir.join(name), bytes).expect("seed file");
}

/// Writes `session` as frames: methods on `channel`, each `None` as a content header with
/// every property and a body in two frames.
fn session_frames(out: &mut BytesMut, channel: u16, session: &[(&str, Option<Method>)]) {
    for (_, m) in session {
        match m {
            Some(m) => write_method(out, channel, m),
            None => {
                let header = ContentHeader::new(BASIC_CLASS_ID, 5000, &properties());
                write_content_header(out, channel, BASIC_CLASS_ID, 5000, &header.properties);
                write_body_frames(out, channel, &[7u8; 5000], 4096);
            }
        }
    }
}

fn main() {
    let dir = std::env::args().nth(1).expect("usage: fuzz_seeds DIR");
    let dir = Path::new(&dir);

    let handshake: Vec<(&str, Option<Method>)> =
        handshake().into_iter().map(|(n, m)| (n, Some(m))).collect();
    let channel = channel_session();
    for (name, m) in handshake.iter().chain(&channel) {
        if let Some(m) = m {
            let mut payload = BytesMut::new();
            m.encode(&mut Writer::new(&mut payload));
            write(dir, "method", name, &payload);
        }
    }

    // The frames target reads its first octet as the frame_max choice: 0 picks 4096.
    let mut frames = BytesMut::from(&[0u8][..]);
    session_frames(&mut frames, 1, &channel);
    write_heartbeat(&mut frames);
    write(dir, "frames", "session", &frames);

    // The connection target reads its first octet as the handshake choice: 0 has the fuzz
    // harness open the connection first, 1 leaves it to the input.
    let mut after_handshake = BytesMut::from(&[0u8][..]);
    session_frames(&mut after_handshake, 1, &channel);
    write(dir, "connection", "after_handshake", &after_handshake);
    let mut whole = BytesMut::from(&[1u8][..]);
    whole.extend_from_slice(PROTOCOL_HEADER);
    session_frames(&mut whole, 0, &handshake);
    session_frames(&mut whole, 1, &channel);
    write(dir, "connection", "whole_session", &whole);

    let header = ContentHeader::new(BASIC_CLASS_ID, 5000, &properties());
    let mut payload = BytesMut::new();
    Writer::new(&mut payload).short(BASIC_CLASS_ID);
    Writer::new(&mut payload).short(0);
    Writer::new(&mut payload).longlong(5000);
    payload.extend_from_slice(&header.properties);
    write(dir, "content_header", "all_properties", &payload);
    let minimal = ContentHeader::new(BASIC_CLASS_ID, 0, &BasicProperties::default());
    let mut payload = BytesMut::new();
    Writer::new(&mut payload).short(BASIC_CLASS_ID);
    Writer::new(&mut payload).short(0);
    Writer::new(&mut payload).longlong(0);
    payload.extend_from_slice(&minimal.properties);
    write(dir, "content_header", "no_properties", &payload);

    let mut table = BytesMut::new();
    Writer::new(&mut table).table(&every_field_type());
    write(dir, "field_table", "every_type", &table);
}
