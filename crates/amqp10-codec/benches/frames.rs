//! Criterion benchmark of the AMQP 1.0 frame path at 10,000 links (issue 12): whether the
//! fe2o3-amqp-types codec is the bottleneck of the many-pairs workload. Per iteration, one
//! frame for each of 10,000 link handles: decode a transfer (frame split, performative
//! decoded, payload sliced), encode a transfer with a 100-byte message, a disposition and a
//! flow — what the broker does per message of the report's workload. The decode is also
//! split in its two parts: the structural check (`value::check`, which refuses what
//! serde_amqp would misread) and serde_amqp's decode of the checked performative, to price
//! the check per transfer (issue 12). Run with
//! `cargo bench -p warren-amqp10-codec --bench frames`; the conclusion is in `src/lib.rs` and
//! docs/benchmarks.md.

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::hint::black_box;
use warren_amqp10_codec::{
    decode_performative, parse_frame, write_performative, Accepted, DeliveryState, Disposition,
    Flow, Performative, Role, Transfer,
};

const LINKS: u32 = 10_000;
/// The report's message: 100 bytes (as a data section, 105 bytes of AMQP encoding).
const PAYLOAD_BYTES: usize = 105;

fn transfer(handle: u32) -> Transfer {
    Transfer {
        handle: handle.into(),
        delivery_id: Some(handle.wrapping_mul(7)),
        delivery_tag: Some(serde_bytes::ByteBuf::from(
            u64::from(handle).to_be_bytes().to_vec(),
        )),
        message_format: Some(0),
        settled: Some(false),
        more: false,
        rcv_settle_mode: None,
        state: None,
        resume: false,
        aborted: false,
        batchable: false,
    }
}

/// One transfer frame per link, as a client sends them.
fn transfer_frames(payload: &[u8]) -> BytesMut {
    let mut out = BytesMut::new();
    for handle in 0..LINKS {
        write_performative(
            &mut out,
            0,
            &Performative::Transfer(transfer(handle)),
            payload,
        );
    }
    out
}

fn frames(c: &mut Criterion) {
    let payload = vec![0x5a; PAYLOAD_BYTES];
    let mut group = c.benchmark_group("amqp10_frames_10k_links");
    group.throughput(Throughput::Elements(u64::from(LINKS)));
    let incoming = transfer_frames(&payload);
    group.bench_function("decode_transfer", |b| {
        b.iter_batched(
            || incoming.clone(),
            |mut buf| {
                while let Some(frame) = parse_frame(&mut buf, 1 << 20).expect("valid frame") {
                    black_box(decode_performative(&frame.body).expect("a performative"));
                }
            },
            BatchSize::LargeInput,
        )
    });
    // The transfer performatives alone (no frame header, no payload), for the two halves.
    let performatives: Vec<bytes::Bytes> = {
        let mut buf = incoming.clone();
        let mut out = Vec::new();
        while let Some(frame) = parse_frame(&mut buf, 1 << 20).expect("valid frame") {
            let len = warren_amqp10_codec::value::check(&frame.body).expect("a valid performative");
            out.push(frame.body.slice(..len));
        }
        out
    };
    group.bench_function("check_transfer", |b| {
        b.iter(|| {
            for performative in &performatives {
                black_box(warren_amqp10_codec::value::check(performative).expect("valid"));
            }
        })
    });
    group.bench_function("serde_decode_transfer", |b| {
        b.iter(|| {
            for performative in &performatives {
                let decoded: Performative =
                    serde_amqp::from_slice(performative).expect("a performative");
                black_box(decoded);
            }
        })
    });
    group.bench_function("encode_transfer", |b| {
        let mut out = BytesMut::with_capacity(incoming.len());
        b.iter(|| {
            out.clear();
            for handle in 0..LINKS {
                write_performative(
                    &mut out,
                    0,
                    &Performative::Transfer(transfer(handle)),
                    &payload,
                );
            }
            black_box(out.len())
        })
    });
    group.bench_function("encode_disposition", |b| {
        let mut out = BytesMut::new();
        b.iter(|| {
            out.clear();
            for id in 0..LINKS {
                let disposition = Disposition {
                    role: Role::Receiver,
                    first: id,
                    last: None,
                    settled: true,
                    state: Some(DeliveryState::Accepted(Accepted {})),
                    batchable: false,
                };
                write_performative(&mut out, 0, &Performative::Disposition(disposition), &[]);
            }
            black_box(out.len())
        })
    });
    group.bench_function("encode_flow", |b| {
        let mut out = BytesMut::new();
        b.iter(|| {
            out.clear();
            for handle in 0..LINKS {
                let flow = Flow {
                    next_incoming_id: Some(handle),
                    incoming_window: 4096,
                    next_outgoing_id: handle,
                    outgoing_window: u32::MAX,
                    handle: Some(handle.into()),
                    delivery_count: Some(handle),
                    link_credit: Some(256),
                    available: None,
                    drain: false,
                    echo: false,
                    properties: None,
                };
                write_performative(&mut out, 0, &Performative::Flow(flow), &[]);
            }
            black_box(out.len())
        })
    });
    group.finish();
}

criterion_group!(benches, frames);
criterion_main!(benches);
