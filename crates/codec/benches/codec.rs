//! Criterion benchmarks for the codec hot path: splitting publish frames off a read buffer,
//! encoding deliveries, and decoding field tables (a client's few arguments, and the widest
//! table a 128 KiB frame holds, which must decode in linear time). Run with
//! `cargo bench -p warren-codec`.

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use warren_codec::*;

fn publish_frames(count: usize, body_size: usize) -> BytesMut {
    let mut out = BytesMut::new();
    let publish = Method::BasicPublish(BasicPublish {
        exchange: ShortStr::from_static(""),
        routing_key: ShortStr::from_static("perf-test"),
        mandatory: false,
        immediate: false,
    });
    let props = BasicProperties {
        delivery_mode: Some(1),
        ..Default::default()
    };
    let header = ContentHeader::new(BASIC_CLASS_ID, body_size as u64, &props);
    let body = vec![0u8; body_size];
    for _ in 0..count {
        write_method(&mut out, 1, &publish);
        write_content_header(
            &mut out,
            1,
            BASIC_CLASS_ID,
            body_size as u64,
            &header.properties,
        );
        write_body_frames(&mut out, 1, &body, 131072);
    }
    out
}

fn parse_publishes(c: &mut Criterion) {
    let input = publish_frames(1000, 1000).freeze();
    let mut group = c.benchmark_group("parse");
    group.throughput(Throughput::Elements(1000));
    group.bench_function("1000 publishes of 1000 B", |b| {
        b.iter(|| {
            let mut buf = BytesMut::from(&input[..]);
            let mut n = 0;
            while let Some(frame) = parse_frame(&mut buf, 131072).unwrap() {
                if frame.kind == FrameKind::Method {
                    let m = Method::decode(&mut Reader::new(frame.payload)).unwrap();
                    assert!(matches!(m, Method::BasicPublish(_)));
                    n += 1;
                }
            }
            assert_eq!(n, 1000);
        })
    });
    group.finish();
}

fn encode_deliveries(c: &mut Criterion) {
    let body = Bytes::from(vec![0u8; 1000]);
    let props = ContentHeader::new(BASIC_CLASS_ID, 1000, &BasicProperties::default()).properties;
    let mut out = BytesMut::with_capacity(2 << 20);
    let mut group = c.benchmark_group("encode");
    group.throughput(Throughput::Elements(1000));
    group.bench_function("1000 deliveries of 1000 B", |b| {
        b.iter(|| {
            out.clear();
            for tag in 0..1000u64 {
                let deliver = Method::BasicDeliver(BasicDeliver {
                    consumer_tag: ShortStr::from_static("amq.ctag-bench"),
                    delivery_tag: tag,
                    redelivered: false,
                    exchange: ShortStr::from_static(""),
                    routing_key: ShortStr::from_static("perf-test"),
                });
                write_method(&mut out, 1, &deliver);
                write_content_header(&mut out, 1, BASIC_CLASS_ID, 1000, &props);
                write_body_frames(&mut out, 1, &body, 131072);
            }
        })
    });
    group.finish();
}

/// An encoded table of `keys` four-letter keys with void values (6 bytes an entry).
fn encoded_table(keys: usize) -> Bytes {
    let table: FieldTable = (0..keys)
        .map(|i| {
            let key: String = (0..4)
                .map(|d| (b'a' + (i / 26usize.pow(d) % 26) as u8) as char)
                .collect();
            (ShortStr::from(key), FieldValue::Void)
        })
        .collect();
    let mut out = BytesMut::new();
    Writer::new(&mut out).table(&table);
    out.freeze()
}

fn decode_tables(c: &mut Criterion) {
    let mut group = c.benchmark_group("decode table");
    for keys in [5, 1_000, 20_000] {
        let encoded = encoded_table(keys);
        group.throughput(Throughput::Elements(keys as u64));
        group.bench_function(format!("{keys} keys"), |b| {
            b.iter(|| {
                let table = Reader::new(encoded.clone()).table().unwrap();
                assert_eq!(table.len(), keys);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, parse_publishes, encode_deliveries, decode_tables);
criterion_main!(benches);
