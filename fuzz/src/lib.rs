//! What each fuzz target checks, shared by the targets in `fuzz_targets/`. Every decoder must
//! return an error rather than panic on any input, and whatever decodes must survive an
//! encode → decode → encode round trip with the same bytes both times (the first encoding may
//! differ from the input: a decoder accepts `L` for `l`, any non-zero octet for `true`).

mod amqp10;
mod connection;

pub use amqp10::amqp10_frames;
pub use connection::{connection, handshake};

use bytes::{Bytes, BytesMut};
use warren_codec::{
    parse_frame, write_method, BasicProperties, ContentHeader, FieldTable, FrameKind, Method,
    Reader, Writer,
};

/// Splits `data` into frames as a connection's read loop does, under a frame_max picked by
/// the first octet (the pre-tune 4096, the default 131072, or none), and decodes each payload
/// by its kind.
pub fn frames(data: &[u8]) {
    let Some((&pick, stream)) = data.split_first() else {
        return;
    };
    let frame_max = [4096, 131_072, 0][usize::from(pick % 3)];
    let mut buf = BytesMut::from(stream);
    loop {
        let before = buf.len();
        match parse_frame(&mut buf, frame_max) {
            Ok(Some(frame)) => {
                assert!(
                    buf.len() < before,
                    "a frame was parsed but nothing consumed"
                );
                assert!(frame_max == 0 || frame.payload.len() + 8 <= frame_max as usize);
                match frame.kind {
                    FrameKind::Method => method(frame.payload),
                    FrameKind::Header => content_header(frame.payload),
                    FrameKind::Body | FrameKind::Heartbeat => {}
                }
            }
            Ok(None) => {
                assert_eq!(buf.len(), before, "an incomplete frame consumed bytes");
                // What a frame header claims is reserved only up to frame_max (1 MiB without).
                let ahead = if frame_max == 0 {
                    1 << 20
                } else {
                    frame_max as usize
                };
                assert!(
                    buf.capacity() <= 2 * stream.len() + ahead,
                    "{}",
                    buf.capacity()
                );
                return;
            }
            Err(_) => return,
        }
    }
}

fn encode_method(m: &Method) -> Bytes {
    let mut out = BytesMut::new();
    m.encode(&mut Writer::new(&mut out));
    out.freeze()
}

/// A method frame payload.
pub fn method(payload: Bytes) {
    let Ok(m) = Method::decode(&mut Reader::new(payload)) else {
        return;
    };
    let once = encode_method(&m);
    let again = Method::decode(&mut Reader::new(once.clone())).expect("our encoding decodes");
    assert_eq!(encode_method(&again), once, "{m:?}");
    // And as a whole frame, through the frame parser.
    let mut framed = BytesMut::new();
    write_method(&mut framed, 1, &m);
    let frame = parse_frame(&mut framed, 0).unwrap().expect("a whole frame");
    assert_eq!(frame.payload, once);
}

fn encode_table(t: &FieldTable) -> Bytes {
    let mut out = BytesMut::new();
    Writer::new(&mut out).table(t);
    out.freeze()
}

/// A field table (its 4-byte length first).
pub fn field_table(data: Bytes) {
    let mut r = Reader::new(data);
    let Ok(table) = r.table() else {
        return;
    };
    // `get` answers the first entry of a repeated key.
    let mut seen = std::collections::HashSet::new();
    for (key, value) in table.iter() {
        if seen.insert(key) {
            assert!(std::ptr::eq(table.get(key).unwrap(), value), "{key:?}");
        }
    }
    let once = encode_table(&table);
    let again = Reader::new(once.clone())
        .table()
        .expect("our encoding decodes");
    assert_eq!(again.len(), table.len());
    assert_eq!(encode_table(&again), once);
}

fn encode_properties(p: &BasicProperties) -> Bytes {
    let mut out = BytesMut::new();
    p.encode(&mut Writer::new(&mut out));
    out.freeze()
}

/// A content header frame payload: class, weight, body size, property flags and properties.
pub fn content_header(payload: Bytes) {
    let Ok(header) = ContentHeader::decode(payload) else {
        return;
    };
    let Ok(props) = header.properties() else {
        return;
    };
    let rebuilt = ContentHeader::new(header.class_id, header.body_size, &props);
    let once = rebuilt.properties.clone();
    assert_eq!(encode_properties(&props), once);
    let again = rebuilt.properties().expect("our encoding decodes");
    assert_eq!(encode_properties(&again), once);
}
