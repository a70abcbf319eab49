//! Criterion benchmark: append 1 KiB persistent messages with group commit
//! (`SyncPolicy::Always`) on the real filesystem, 100 confirms in flight per
//! producer, and report records per fsync. Run with
//! `cargo bench -p warren-store --bench append`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use warren_store::{Store, StoreOptions, StoredMessage, SyncPolicy};

const BODY_BYTES: usize = 1024;
const IN_FLIGHT: usize = 100;
const PRODUCERS: usize = 4;

/// Each producer keeps `IN_FLIGHT` unconfirmed appends and acks confirmed
/// messages, like a broker with confirms + manual acks. Returns elapsed time.
fn run(store: &Store, queue: warren_store::QueueId, messages_per_producer: u64) -> Duration {
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..PRODUCERS {
            s.spawn(|| {
                let msg =
                    StoredMessage::new("amq.direct", "bench", vec![0u8; 20], vec![7u8; BODY_BYTES]);
                let mut window = std::collections::VecDeque::with_capacity(IN_FLIGHT);
                for _ in 0..messages_per_producer {
                    if window.len() == IN_FLIGHT {
                        let (seq, id) = window.pop_front().expect("full window");
                        store.wait_durable_blocking(seq).expect("durable");
                        store.ack(queue, id).expect("ack");
                    }
                    let appended = store.append(&[queue], &msg).expect("append");
                    window.push_back((appended.seq, appended.id));
                }
                for (seq, id) in window {
                    store.wait_durable_blocking(seq).expect("durable");
                    store.ack(queue, id).expect("ack");
                }
            });
        }
    });
    start.elapsed()
}

fn bench_append(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = StoreOptions {
        sync: SyncPolicy::Always,
        ..StoreOptions::default()
    };
    let (store, _) = Store::open(dir.path(), opts).expect("open");
    let store = Arc::new(store);
    let queue = store.register_queue("bench").expect("queue");

    let mut group = c.benchmark_group("append_1k_group_commit");
    let batch: u64 = 10_000;
    group.throughput(Throughput::Elements(batch));
    group.sample_size(10);
    group.bench_function("4_producers_100_in_flight", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                total += run(&store, queue, batch / PRODUCERS as u64);
            }
            total
        })
    });
    group.finish();

    let stats = store.stats();
    println!(
        "records_written={} fsyncs={} records_per_fsync={:.1} batches={} segments_created={} segments_removed={}",
        stats.records_written,
        stats.fsyncs,
        stats.records_written as f64 / stats.fsyncs.max(1) as f64,
        stats.batches,
        stats.segments_created,
        stats.segments_removed,
    );
}

criterion_group!(benches, bench_append);
criterion_main!(benches);
