//! Criterion benchmarks for routing: the topic exchange's trie with 10,000 bindings (or
//! `ROUTING_BENCH_BINDINGS`: issue 30's target is at 1,000,000), on its own and through
//! `VHost::route` (the path a publish takes, destinations deduplicated; the bindings spread
//! over at most 10,000 queues), and the default exchange's direct lookup for comparison. Run
//! with `cargo bench -p warren-broker --bench routing`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use std::sync::Arc;
use warren_broker::topic::TopicTrie;
use warren_broker::{Broker, QueueDeclaration, VHost};
use warren_codec::{FieldTable, ShortStr};

/// How many topic bindings (a multiple of 10): `ROUTING_BENCH_BINDINGS`, 10,000 by default.
fn bindings() -> usize {
    std::env::var("ROUTING_BENCH_BINDINGS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .map_or(10_000, |n| n.max(10) / 10 * 10)
}

/// The queues the bindings go to, binding `i` to queue `i % queues`.
fn queues() -> usize {
    bindings().min(10_000)
}

/// The routing key a publisher for instance `i` uses: `region.service.instance.id`, blocks of
/// ten ids sharing region, service and instance.
fn key(i: usize) -> String {
    let block = i / 10;
    format!("r{}.s{}.i{}.{i}", block % 20, (block / 20) % 50, i / 1000)
}

/// Distinct patterns of the shapes topic users write, in blocks of ten: seven literal keys, two
/// with `*` for a word that each select the block's first key, and one
/// `region.service.instance.#` that selects the whole block.
fn pattern(i: usize) -> String {
    let block = i / 10;
    let (region, service, instance) = (block % 20, (block / 20) % 50, i / 1000);
    let first = block * 10;
    match i % 10 {
        0..=6 => key(i),
        7 => format!("r{region}.*.i{instance}.{first}"),
        8 => format!("*.s{service}.i{instance}.{first}"),
        _ => format!("r{region}.s{service}.i{instance}.#"),
    }
}

/// 64 blocks' first keys, spread over all the blocks: each matches four bindings (its
/// literal, two `*`, one `#`).
fn keys() -> Vec<String> {
    let blocks = bindings() / 10;
    (0..64).map(|k| key(k * 1511 % blocks * 10)).collect()
}

const BINDINGS_PER_KEY: usize = 4;

fn trie(c: &mut Criterion) {
    let mut trie = TopicTrie::default();
    let bindings = bindings();
    for i in 0..bindings {
        trie.insert(&pattern(i), i as u32);
    }
    let keys = keys();
    let mut group = c.benchmark_group(format!("topic trie, {bindings} bindings"));
    group.throughput(Throughput::Elements(keys.len() as u64));
    group.bench_function("match 64 keys", |b| {
        b.iter(|| {
            let mut hits = 0u32;
            for k in &keys {
                trie.matches(black_box(k), |_| hits += 1);
            }
            assert_eq!(hits as usize, keys.len() * BINDINGS_PER_KEY);
            hits
        })
    });
    group.finish();
}

fn vhost_with_bound_queues(broker: &Arc<Broker>) -> Arc<VHost> {
    let vhost = broker.vhost("/").expect("the default vhost");
    for i in 0..queues() {
        let name = format!("q{i}");
        vhost
            .declare_queue(
                QueueDeclaration {
                    name: ShortStr::from(name.as_str()),
                    passive: false,
                    durable: false,
                    exclusive: false,
                    auto_delete: false,
                    arguments: FieldTable::new(),
                },
                1,
            )
            .expect("declare");
    }
    let queues = queues();
    for i in 0..bindings() {
        vhost
            .bind_queue(
                &format!("q{}", i % queues),
                "amq.topic",
                ShortStr::from(pattern(i).as_str()),
                FieldTable::new(),
                1,
            )
            .expect("bind");
    }
    vhost
}

fn vhost_route(c: &mut Criterion) {
    let broker = Broker::new(usize::MAX, None);
    let vhost = vhost_with_bound_queues(&broker);
    let topic = vhost.exchange("amq.topic").expect("amq.topic");
    let default = vhost.exchange("").expect("the default exchange");
    let keys = keys();
    let mut out = Vec::new();
    let mut group = c.benchmark_group(format!(
        "VHost::route, {} bindings to {} queues",
        bindings(),
        queues()
    ));
    group.throughput(Throughput::Elements(keys.len() as u64));
    group.bench_function("amq.topic, 64 keys", |b| {
        b.iter(|| {
            let mut routed = 0;
            for k in &keys {
                out.clear();
                vhost.route(&topic, black_box(k), None, &mut out);
                routed += out.len();
            }
            assert_eq!(routed, keys.len() * BINDINGS_PER_KEY);
            routed
        })
    });
    let names: Vec<String> = (0..keys.len()).map(|i| format!("q{}", i * 151)).collect();
    group.bench_function("default exchange, 64 queue names", |b| {
        b.iter(|| {
            let mut routed = 0;
            for n in &names {
                out.clear();
                vhost.route(&default, black_box(n), None, &mut out);
                routed += out.len();
            }
            assert_eq!(routed, names.len());
            routed
        })
    });
    group.finish();
}

criterion_group!(benches, trie, vhost_route);
criterion_main!(benches);
