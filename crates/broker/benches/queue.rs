//! Criterion benchmarks for one queue, no sockets: a publish routed through the default
//! exchange into a queue with one consumer, and the delivery taken from the consumer's
//! connection channel the way the server's connection task takes it — with no-ack, and with
//! a manual ack per message. Run with `cargo bench -p warren-broker --bench queue`.

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::sync::Arc;
use warren_broker::consumer::{pipeline_cost, ChannelFlow};
use warren_broker::event_channel::{event_channel, EventReceiver};
use warren_broker::{
    Broker, ConnectionEvent, Consumer, Delivery, Message, Queue, QueueDeclaration,
};
use warren_codec::{BasicProperties, FieldTable, ShortStr};

const QUEUE: &str = "bench";
const BATCH: usize = 1000;

struct Setup {
    broker: Arc<Broker>,
    queue: Arc<Queue>,
    consumer: Arc<Consumer>,
    events: EventReceiver<ConnectionEvent>,
}

fn setup(no_ack: bool) -> Setup {
    let broker = Broker::new(usize::MAX, None);
    let vhost = broker.vhost("/").expect("the default vhost");
    vhost
        .declare_queue(
            QueueDeclaration {
                name: ShortStr::from(QUEUE),
                passive: false,
                durable: false,
                exclusive: false,
                auto_delete: false,
                arguments: FieldTable::new(),
            },
            1,
        )
        .expect("declare");
    let queue = vhost.queue(QUEUE).expect("declared");
    let (tx, events) = event_channel();
    let consumer = Arc::new(Consumer::new(
        ShortStr::from("bench-consumer"),
        1,
        1,
        no_ack,
        false,
        0,
        Arc::new(ChannelFlow::default()),
        Arc::downgrade(&queue),
        tx,
    ));
    queue.add_consumer(consumer.clone()).expect("consume");
    Setup {
        broker,
        queue,
        consumer,
        events,
    }
}

/// A message as the publish path builds one per publish (the body a slice of the read
/// buffer, here a shared `Bytes`).
fn message(body: &Bytes) -> Arc<Message> {
    Arc::new(Message::new(
        ShortStr::from(""),
        ShortStr::from(QUEUE),
        &BasicProperties::default(),
        Bytes::new(),
        body.clone(),
    ))
}

/// Publishes `BATCH` messages the way the server's publish path does (route, then
/// `Queue::publish`) and takes every delivery, acking each when `no_ack` is false.
fn publish_and_deliver(s: &mut Setup, body: &Bytes, no_ack: bool) {
    let vhost = s.broker.vhost("/").expect("the default vhost");
    let default = vhost.exchange("").expect("the default exchange");
    let mut routed = Vec::with_capacity(1);
    for _ in 0..BATCH {
        routed.clear();
        vhost.route(&default, QUEUE, None, &mut routed);
        for q in &routed {
            q.publish(message(body), None);
        }
        let Ok(ConnectionEvent::Deliver(Delivery {
            consumer, message, ..
        })) = s.events.try_recv()
        else {
            panic!("no delivery");
        };
        consumer.delivered(pipeline_cost(&message.message));
        if !no_ack {
            consumer.settled(1);
            s.queue.settle(vec![message], Vec::new(), Vec::new());
        }
    }
    assert_eq!(
        s.consumer
            .unacked
            .load(std::sync::atomic::Ordering::Relaxed),
        0
    );
}

fn queue(c: &mut Criterion) {
    let mut group = c.benchmark_group("one queue, publish then deliver");
    group.throughput(Throughput::Elements(BATCH as u64));
    for (name, no_ack, body_bytes) in [
        ("no-ack, 16 B", true, 16),
        ("no-ack, 1000 B", true, 1000),
        ("manual ack, 1000 B", false, 1000),
    ] {
        let body = Bytes::from(vec![b'x'; body_bytes]);
        let mut s = setup(no_ack);
        group.bench_function(name, |b| {
            b.iter_batched(
                || (),
                |()| publish_and_deliver(&mut s, &body, no_ack),
                BatchSize::SmallInput,
            )
        });
        assert_eq!(s.queue.message_count(), 0);
    }
    group.finish();
}

criterion_group!(benches, queue);
criterion_main!(benches);
