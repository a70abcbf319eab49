//! A quorum queue through the broker's queue-type interface, on one node: a publish is
//! confirmed only once its group committed it, deliveries go to consumers with the
//! redelivered flag and `x-delivery-count` after a requeue, the queue with its messages
//! comes back when the host is reopened on the same directory (a broker restart), and a
//! policy change reaches the group's config.

use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;
use warren_broker::confirm::QueueAnswers;
use warren_broker::consumer::{ChannelFlow, ConnectionEvent, Consumer, Delivery};
use warren_broker::event_channel::{event_channel, EventReceiver, EventSender};
use warren_broker::memory::MemoryMonitor;
use warren_broker::quorum::{QuorumHost, QuorumQueue};
use warren_broker::{ExchangeDeclaration, Message, Queue, QueueDeclaration, VHost};
use warren_codec::{
    BasicProperties, ContentHeader, FieldTable, FieldValue, ShortStr, BASIC_CLASS_ID,
};

const WAIT: Duration = Duration::from_secs(20);

fn new_vhost(host: &Arc<QuorumHost>) -> Arc<VHost> {
    let vhost = VHost::new(
        "/",
        Arc::new(MemoryMonitor::new(usize::MAX, Arc::default())),
        None,
        Arc::default(),
    );
    vhost.set_quorum_host(host.clone());
    vhost
}

fn declare(vhost: &Arc<VHost>, name: &str) {
    declare_with(vhost, name, FieldTable::new());
}

fn declare_with(vhost: &Arc<VHost>, name: &str, mut arguments: FieldTable) {
    arguments.insert("x-queue-type", FieldValue::string("quorum"));
    vhost
        .declare_queue(
            QueueDeclaration {
                name: ShortStr::from(name),
                passive: false,
                durable: true,
                exclusive: false,
                auto_delete: false,
                arguments,
            },
            1,
        )
        .expect("declared");
}

fn message(body: &'static [u8]) -> Arc<Message> {
    let properties = BasicProperties::default();
    Arc::new(Message::new(
        ShortStr::from(""),
        ShortStr::from("q"),
        &properties,
        ContentHeader::new(BASIC_CLASS_ID, 0, &properties).properties,
        Bytes::from_static(body),
    ))
}

/// A consumer on channel 1 of `connection` (manual ack, no priority), its deliveries to `events`.
fn new_consumer(
    queue: &Arc<Queue>,
    tag: &str,
    connection: u64,
    prefetch: u32,
    events: EventSender<ConnectionEvent>,
) -> Arc<Consumer> {
    Arc::new(Consumer::new(
        ShortStr::from(tag),
        1,
        connection,
        false,
        false,
        prefetch,
        Arc::new(ChannelFlow::default()),
        Arc::downgrade(queue),
        events,
    ))
}

async fn next_event(rx: &mut EventReceiver<ConnectionEvent>) -> ConnectionEvent {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("an event in time")
        .expect("channel open")
}

async fn next_delivery(rx: &mut EventReceiver<ConnectionEvent>) -> Delivery {
    loop {
        if let ConnectionEvent::Deliver(d) = next_event(rx).await {
            return d;
        }
    }
}

async fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check() {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn delivery_count(d: &Delivery) -> Option<i64> {
    let header = ContentHeader {
        class_id: BASIC_CLASS_ID,
        body_size: d.message.message.body().len() as u64,
        properties: d.message.message.properties_bytes(),
    };
    header
        .properties()
        .ok()?
        .headers?
        .get("x-delivery-count")
        .and_then(FieldValue::as_i64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirm_after_commit_deliver_requeue_and_recover() {
    let dir = tempfile::tempdir().unwrap();
    let host = QuorumHost::open(dir.path()).unwrap();
    let vhost = new_vhost(&host);
    declare(&vhost, "q");
    let queue = vhost.queue("q").unwrap();
    assert_eq!(queue.type_name(), "quorum");

    // Confirms: none is settled before the group answered; both are acks after.
    let (events_tx, mut events) = event_channel();
    let confirm = QueueAnswers::new(events_tx.clone());
    queue.publish_confirmed(message(b"one"), None, Some(&confirm));
    queue.publish_confirmed(message(b"two"), None, Some(&confirm));
    assert_eq!(
        confirm.outcome(),
        None,
        "not settled before routing is done"
    );
    confirm.routed();
    assert!(matches!(
        next_event(&mut events).await,
        ConnectionEvent::ConfirmsSettled
    ));
    assert_eq!(confirm.outcome(), Some(true));
    assert_eq!(queue.message_count(), 2);

    // A consumer with prefetch 1 gets "one"; requeued, it comes back redelivered and counted.
    let consumer = new_consumer(&queue, "c", 1, 1, events_tx.clone());
    queue.add_consumer(consumer.clone()).unwrap();
    let first = next_delivery(&mut events).await;
    assert_eq!(first.message.message.body(), b"one");
    assert!(!first.message.redelivered);
    assert_eq!(delivery_count(&first), None);
    queue.settle(Vec::new(), vec![first.message], Vec::new());
    // A client's requeue goes behind "two" (RabbitMQ 3.10), which comes next.
    let second = next_delivery(&mut events).await;
    assert_eq!(second.message.message.body(), b"two");
    assert!(!second.message.redelivered);
    queue.settle(vec![second.message], Vec::new(), Vec::new());
    let again = next_delivery(&mut events).await;
    assert_eq!(again.message.message.body(), b"one");
    assert!(again.message.redelivered);
    assert_eq!(delivery_count(&again), Some(1));
    // "one" stays unacked: after a restart it is back, redelivered.
    eventually("two acked", || queue.message_count() == 0).await;
    drop((again, consumer));
    host.shutdown().await;
    drop((queue, vhost, host));

    let host = QuorumHost::open(dir.path()).unwrap();
    let vhost = new_vhost(&host);
    declare(&vhost, "q");
    let queue = vhost.queue("q").unwrap();
    eventually("the unacked message returned after the restart", || {
        queue.message_count() == 1
    })
    .await;
    let (events_tx, mut events) = event_channel();
    queue
        .add_consumer(new_consumer(&queue, "c2", 2, 0, events_tx))
        .unwrap();
    let back = next_delivery(&mut events).await;
    assert_eq!(back.message.message.body(), b"one");
    assert!(back.message.redelivered);

    // Deleting the queue removes its group's data: declared again, it is empty.
    vhost.delete_queue("q", false, false, 1).unwrap();
    eventually("the group's snapshot and log dropped", || {
        !host
            .node()
            .log()
            .wal()
            .expect("a log on disk")
            .groups()
            .contains(&QuorumHost::group_id("/", "q"))
    })
    .await;
    declare(&vhost, "q");
    let queue = vhost.queue("q").unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(queue.message_count(), 0);
    host.shutdown().await;
}

/// A delivery handed over after its consumer's connection went (the connection's event channel
/// closed, its teardown not done yet: a race of the consumer's lookup with the teardown) goes
/// back to the queue, and the consumer takes no more: the next consumer gets the message. It
/// used to stay checked out to the gone consumer for good, a confirmed message nobody got.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_to_a_connection_that_went_goes_back_to_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let host = QuorumHost::open(dir.path()).unwrap();
    let vhost = new_vhost(&host);
    declare(&vhost, "q");
    let queue = vhost.queue("q").unwrap();
    let (gone_tx, gone_rx) = event_channel();
    drop(gone_rx);
    queue
        .add_consumer(new_consumer(&queue, "gone", 1, 10, gone_tx))
        .unwrap();
    queue.publish(message(b"m"), None);
    eventually("the failed hand-over's consumer removed", || {
        queue.consumer_count() == 0
    })
    .await;
    let (events_tx, mut events) = event_channel();
    queue
        .add_consumer(new_consumer(&queue, "next", 2, 10, events_tx))
        .unwrap();
    let got = next_delivery(&mut events).await;
    assert_eq!(got.message.message.body(), b"m");
    host.shutdown().await;
}

/// A policy set on an existing queue reaches its group as a config change in the log; a group
/// recovered after the policy went takes the config of now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_changes_the_groups_config_and_a_restart_catches_up() {
    use warren_broker::policy::{Policy, PolicyKind};
    let dir = tempfile::tempdir().unwrap();
    let host = QuorumHost::open(dir.path()).unwrap();
    let vhost = new_vhost(&host);
    declare(&vhost, "q");
    let queue = vhost.queue("q").unwrap();
    let (events_tx, mut events) = event_channel();
    let confirm = QueueAnswers::new(events_tx);
    for body in [&b"a"[..], b"b", b"c"] {
        queue.publish_confirmed(message(body), None, Some(&confirm));
    }
    confirm.routed();
    next_event(&mut events).await;
    assert_eq!(queue.message_count(), 3);

    let policy = Policy::new(
        PolicyKind::Policy,
        "/",
        "cap",
        "^q$",
        "queues",
        0,
        serde_json::json!({"max-length": 1}),
    )
    .unwrap();
    vhost.set_policy(policy).unwrap();
    eventually("the lower max-length dropped the head", || {
        queue.message_count() == 1
    })
    .await;
    queue.publish(message(b"d"), None);
    eventually("still capped", || queue.message_count() == 1).await;
    host.shutdown().await;
    drop((queue, vhost, host));

    // Back without the policy: the group's logged max-length 1 no longer holds.
    let host = QuorumHost::open(dir.path()).unwrap();
    let vhost = new_vhost(&host);
    declare(&vhost, "q");
    let queue = vhost.queue("q").unwrap();
    for body in [&b"e"[..], b"f"] {
        queue.publish(message(body), None);
    }
    eventually("uncapped after the restart", || queue.message_count() == 3).await;
    host.shutdown().await;
}

/// A consumer cancelled while its client still holds a message is only suspended in the group
/// until that message is settled; a message the group hands it in the moment between (its
/// enqueue committed before the suspension) never reaches its client. That message must not
/// stay checked out to it: another consumer gets it while the first client keeps holding its
/// own (before the fix it waited for that settle, which a forwarded consumer's client may
/// never send — the quorum kill -9 chaos round's stuck message).
#[tokio::test(flavor = "current_thread")]
async fn a_delivery_racing_a_consumers_cancel_goes_to_the_next_consumer() {
    let dir = tempfile::tempdir().unwrap();
    let host = QuorumHost::open(dir.path()).unwrap();
    let vhost = new_vhost(&host);
    declare(&vhost, "q");
    let queue = vhost.queue("q").unwrap();
    let consumer =
        |tag: &str, connection, events_tx| new_consumer(&queue, tag, connection, 10, events_tx);
    let (first_tx, mut first_events) = event_channel();
    queue.add_consumer(consumer("first", 1, first_tx)).unwrap();
    queue.publish(message(b"held"), None);
    let held = next_delivery(&mut first_events).await;
    assert_eq!(held.message.message.body(), b"held");

    // No await in between (one thread): the group sees the enqueue before the cancel, and
    // hands "racing" to the first consumer, which has room, after its client cancelled it.
    queue.publish(message(b"racing"), None);
    assert!(queue.remove_consumer(1, 1, "first").is_some());

    let (second_tx, mut second_events) = event_channel();
    queue
        .add_consumer(consumer("second", 2, second_tx))
        .unwrap();
    let next = next_delivery(&mut second_events).await;
    assert_eq!(next.message.message.body(), b"racing");
    assert!(
        next.message.redelivered,
        "handed to the first consumer once"
    );
    // The first client's message is still its own: acked, the first consumer leaves.
    queue.settle(vec![held.message], Vec::new(), Vec::new());
    queue.settle(vec![next.message], Vec::new(), Vec::new());
    eventually("nothing left checked out", || {
        queue.message_count() == 0 && queue.unacked_count() == 0
    })
    .await;
    drop(first_events);
    host.shutdown().await;
}

/// At-least-once dead-lettering (`x-dead-letter-strategy=at-least-once` with reject-publish):
/// a rejected message whose dead-letter exchange does not exist yet stays held in its group
/// instead of being dropped, and reaches the dead-letter queue once there is one; only then
/// does the group let it go. At most once (the default), the same message is gone at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_least_once_dead_letters_wait_for_a_route_then_go() {
    let dir = tempfile::tempdir().unwrap();
    let host = QuorumHost::open(dir.path()).unwrap();
    let vhost = new_vhost(&host);
    for (name, strategy) in [("alo", "at-least-once"), ("amo", "at-most-once")] {
        let mut arguments = FieldTable::new();
        arguments.insert("x-dead-letter-exchange", FieldValue::string("dlx"));
        arguments.insert("x-dead-letter-strategy", FieldValue::string(strategy));
        arguments.insert("x-overflow", FieldValue::string("reject-publish"));
        declare_with(&vhost, name, arguments);
    }
    let (events_tx, mut events) = event_channel();
    for name in ["alo", "amo"] {
        let queue = vhost.queue(name).unwrap();
        let confirm = QueueAnswers::new(events_tx.clone());
        queue.publish_confirmed(message(b"poison"), None, Some(&confirm));
        confirm.routed();
        eventually("the publish confirmed", || confirm.outcome() == Some(true)).await;
        let consumer = new_consumer(&queue, name, 1, 0, events_tx.clone());
        queue.add_consumer(consumer.clone()).unwrap();
        let d = next_delivery(&mut events).await;
        // basic.reject without requeue.
        queue.settle(Vec::new(), Vec::new(), vec![d.message]);
        eventually("the rejected message left the queue", || {
            queue.message_count() == 0 && queue.unacked_count() == 0
        })
        .await;
        drop(consumer);
    }
    let alo = vhost.queue("alo").unwrap();
    let amo = vhost.queue("amo").unwrap();
    let held = |q: &Queue| QuorumQueue::of(q).unwrap().dead_letters_held();
    eventually("at-least-once holds the message with no route", || {
        held(&alo) == 1
    })
    .await;
    assert_eq!(held(&amo), 0, "at-most-once drops it");

    // A route appears: the held copy is sent again and reaches it; the group lets it go.
    vhost
        .declare_exchange(ExchangeDeclaration {
            name: ShortStr::from("dlx"),
            kind: "fanout".into(),
            passive: false,
            durable: true,
            auto_delete: false,
            internal: false,
            arguments: FieldTable::new(),
        })
        .unwrap();
    let mut arguments = FieldTable::new();
    arguments.insert("x-queue-type", FieldValue::string("classic"));
    vhost
        .declare_queue(
            QueueDeclaration {
                name: ShortStr::from("dlq"),
                passive: false,
                durable: true,
                exclusive: false,
                auto_delete: false,
                arguments,
            },
            1,
        )
        .unwrap();
    vhost
        .bind_queue("dlq", "dlx", ShortStr::from(""), FieldTable::new(), 1)
        .unwrap();
    let dlq = vhost.queue("dlq").unwrap();
    eventually("the held copy reached the dead-letter queue", || {
        dlq.message_count() == 1
    })
    .await;
    eventually("the group let the delivered dead message go", || {
        held(&alo) == 0
    })
    .await;
    // Only the at-least-once queue's copy: the other one's was dropped when it died.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(dlq.message_count(), 1);
    host.shutdown().await;
}
