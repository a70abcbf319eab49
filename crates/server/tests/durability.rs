//! Durability through the whole server, on the store's fault-injecting disk: a publisher
//! confirm for a persistent message is withheld until its fsync completes, and every confirmed
//! message is back, redelivered, after a crash that drops all unsynced writes; on a full
//! disk, unconfirmed publishes are nacked, consumers carry on and publishing resumes; a
//! declare-ok waits for the fsync of its definitions, which pipelined declares share.

mod client;

use bytes::Bytes;
use client::{Client, Incoming};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use warren_broker::Broker;
use warren_codec::*;
use warren_server::ServerConfig;
use warren_store::{Backend, CrashMode, FaultyBackend, Store, StoreOptions};

async fn start_on(disk: Arc<FaultyBackend>) -> u16 {
    start_with_store(disk).await.0
}

/// Starts a broker on `disk`; also returns its store, for tests that look at what it wrote.
async fn start_with_store(disk: Arc<FaultyBackend>) -> (u16, Store) {
    start_on_backend(disk).await
}

async fn start_on_backend(backend: Arc<dyn Backend>) -> (u16, Store) {
    let (store, recovered) = Store::open_with_backend(backend, StoreOptions::default()).unwrap();
    let broker = Broker::new(1 << 30, Some(store.clone()));
    broker.recover(recovered);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(warren_server::run(
        listener,
        broker,
        ServerConfig::default(),
        std::future::pending(),
    ));
    (port, store)
}

/// Reads confirms until the one for delivery tag `last` (confirms may be multiple).
async fn wait_for_confirms(c: &mut Client, last: u64) {
    let mut confirmed = 0;
    while confirmed < last {
        let Incoming::Method(_, Method::BasicAck(ack)) = c.next().await else {
            panic!("expected confirms")
        };
        confirmed = ack.delivery_tag;
    }
}

/// Sends a durable declare of `name` on channel 1 (the answer is the caller's to read).
async fn send_durable_declare(c: &mut Client, name: &str) {
    c.send(
        1,
        QueueDeclare {
            queue: name.into(),
            durable: true,
            ..Default::default()
        },
    )
    .await;
}

async fn declare_durable(c: &mut Client, name: &str) {
    send_durable_declare(c, name).await;
    assert!(matches!(c.method().await.1, Method::QueueDeclareOk(_)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirm_waits_for_fsync_and_confirmed_messages_survive_a_crash() {
    let disk = Arc::new(FaultyBackend::new(7));
    let port = start_on(disk.clone()).await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    declare_durable(&mut c, "orders").await;
    c.send(1, ConfirmSelect { nowait: false }).await;
    assert!(matches!(c.method().await.1, Method::ConfirmSelectOk(_)));

    // While the disk does not finish an fsync, no confirm may arrive.
    disk.set_stall_syncs(true);
    c.publish_persistent(1, "", "orders", b"first").await;
    c.expect_silence(300).await;
    disk.set_stall_syncs(false);
    let Incoming::Method(_, Method::BasicAck(ack)) = c.next().await else {
        panic!("expected the confirm once the fsync completed")
    };
    assert_eq!(ack.delivery_tag, 1);

    for i in 2..=50u64 {
        c.publish_persistent(1, "", "orders", format!("m{i}").as_bytes())
            .await;
    }
    wait_for_confirms(&mut c, 50).await;

    // Power cut: whatever was not fsync'd is gone. Every confirmed message must be back.
    let after = Arc::new(disk.crash(CrashMode::DropUnsynced));
    let port = start_on(after).await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    declare_durable(&mut c, "orders").await;
    let mut bodies = Vec::new();
    loop {
        c.send(
            1,
            BasicGet {
                queue: "orders".into(),
                no_ack: true,
            },
        )
        .await;
        match c.next().await {
            Incoming::Content(_, Method::BasicGetOk(g), _, body) => {
                assert!(g.redelivered, "recovered messages are marked redelivered");
                bodies.push(body);
            }
            Incoming::Method(_, Method::BasicGetEmpty(_)) => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(bodies.len(), 50);
    assert_eq!(&bodies[0][..], b"first");
    assert_eq!(&bodies[49][..], b"m50");
}

/// Reads the queue out with basic.get (no-ack): bodies and redelivered flags, in order.
async fn get_all(c: &mut Client, queue: &str) -> Vec<(Bytes, bool)> {
    let mut out = Vec::new();
    loop {
        c.send(
            1,
            BasicGet {
                queue: queue.into(),
                no_ack: true,
            },
        )
        .await;
        match c.next().await {
            Incoming::Content(_, Method::BasicGetOk(g), _, body) => out.push((body, g.redelivered)),
            Incoming::Method(_, Method::BasicGetEmpty(_)) => return out,
            other => panic!("unexpected {other:?}"),
        }
    }
}

fn lazy(extra: &[(&str, FieldValue)]) -> FieldTable {
    let mut args = FieldTable::default();
    args.insert(
        "x-queue-mode",
        FieldValue::LongStr(Bytes::from_static(b"lazy")),
    );
    for (k, v) in extra {
        args.insert(*k, v.clone());
    }
    args
}

async fn declare_lazy(c: &mut Client, name: &str, extra: &[(&str, FieldValue)]) -> u32 {
    c.send(
        1,
        QueueDeclare {
            queue: name.into(),
            durable: true,
            arguments: lazy(extra),
            ..Default::default()
        },
    )
    .await;
    let Method::QueueDeclareOk(ok) = c.method().await.1 else {
        panic!("declare-ok expected")
    };
    ok.message_count
}

/// A lazy queue keeps everything on disk only: persistent and transient messages come back
/// in publish order; after a crash only the persistent ones return, redelivered, and a
/// purge of a disk-only queue counts them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lazy_queue_keeps_order_on_disk_and_drops_transient_messages_on_restart() {
    let disk = Arc::new(FaultyBackend::new(11));
    let port = start_on(disk.clone()).await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    declare_lazy(&mut c, "lazy", &[]).await;
    for i in 0..300 {
        let body = format!("m{i}");
        if i % 2 == 0 {
            c.publish_persistent(1, "", "lazy", body.as_bytes()).await;
        } else {
            c.publish(1, "", "lazy", body.as_bytes(), false).await;
        }
    }
    assert_eq!(declare_lazy(&mut c, "lazy", &[]).await, 300);
    let got = get_all(&mut c, "lazy").await;
    let bodies: Vec<String> = got
        .iter()
        .map(|(b, _)| String::from_utf8(b.to_vec()).unwrap())
        .collect();
    let expected: Vec<String> = (0..300).map(|i| format!("m{i}")).collect();
    assert_eq!(bodies, expected);
    assert!(got.iter().all(|(_, redelivered)| !redelivered));

    // Again, with confirms, then a power cut.
    c.send(1, ConfirmSelect { nowait: false }).await;
    assert!(matches!(c.method().await.1, Method::ConfirmSelectOk(_)));
    for i in 0..200u64 {
        let body = format!("n{i}");
        if i % 2 == 0 {
            c.publish_persistent(1, "", "lazy", body.as_bytes()).await;
        } else {
            c.publish(1, "", "lazy", body.as_bytes(), false).await;
        }
    }
    wait_for_confirms(&mut c, 200).await;
    let after = Arc::new(disk.crash(CrashMode::DropUnsynced));
    let port = start_on(after.clone()).await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    assert_eq!(declare_lazy(&mut c, "lazy", &[]).await, 100);
    let got = get_all(&mut c, "lazy").await;
    let bodies: Vec<String> = got
        .iter()
        .map(|(b, _)| String::from_utf8(b.to_vec()).unwrap())
        .collect();
    let expected: Vec<String> = (0..200).step_by(2).map(|i| format!("n{i}")).collect();
    assert_eq!(bodies, expected);
    assert!(got.iter().all(|(_, redelivered)| *redelivered));

    // Purge counts the messages that are on disk only.
    for i in 0..50 {
        c.publish_persistent(1, "", "lazy", format!("p{i}").as_bytes())
            .await;
    }
    assert_eq!(declare_lazy(&mut c, "lazy", &[]).await, 50);
    c.send(
        1,
        QueuePurge {
            queue: "lazy".into(),
            no_wait: false,
        },
    )
    .await;
    let Method::QueuePurgeOk(ok) = c.method().await.1 else {
        panic!("purge-ok expected")
    };
    assert_eq!(ok.message_count, 50);
    assert!(get_all(&mut c, "lazy").await.is_empty());
}

/// x-max-length with drop-head reaches into the disk-only part of a lazy queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lazy_queue_max_length_drops_the_oldest_from_disk() {
    let port = start_on(Arc::new(FaultyBackend::new(12))).await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    let limit = [("x-max-length", FieldValue::I32(5))];
    declare_lazy(&mut c, "bounded", &limit).await;
    for i in 0..20 {
        c.publish_persistent(1, "", "bounded", format!("m{i}").as_bytes())
            .await;
    }
    assert_eq!(declare_lazy(&mut c, "bounded", &limit).await, 5);
    let bodies: Vec<Bytes> = get_all(&mut c, "bounded")
        .await
        .into_iter()
        .map(|(b, _)| b)
        .collect();
    let expected: Vec<Bytes> = (15..20).map(|i| Bytes::from(format!("m{i}"))).collect();
    assert_eq!(bodies, expected);
}

fn long_str(s: &'static str) -> FieldValue {
    FieldValue::LongStr(Bytes::from_static(s.as_bytes()))
}

/// Messages on disk only still expire on time: the expiry timer reads them back and
/// dead-letters them, with no consumer and no publish to notice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paged_messages_expire_and_dead_letter_without_a_consumer() {
    let port = start_on(Arc::new(FaultyBackend::new(13))).await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    declare_durable(&mut c, "dead").await;
    let ttl = [
        ("x-message-ttl", FieldValue::I32(200)),
        ("x-dead-letter-exchange", long_str("")),
        ("x-dead-letter-routing-key", long_str("dead")),
    ];
    declare_lazy(&mut c, "short-lived", &ttl).await;
    for i in 0..10 {
        c.publish_persistent(1, "", "short-lived", format!("m{i}").as_bytes())
            .await;
    }
    assert_eq!(declare_lazy(&mut c, "short-lived", &ttl).await, 10);
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert_eq!(declare_lazy(&mut c, "short-lived", &ttl).await, 0);
    let dead = get_all(&mut c, "dead").await;
    let bodies: Vec<Bytes> = dead.into_iter().map(|(b, _)| b).collect();
    let expected: Vec<Bytes> = (0..10).map(|i| Bytes::from(format!("m{i}"))).collect();
    assert_eq!(bodies, expected);
}

/// A TTL counts from the publish, not from the restart: a message whose time ran out while
/// the broker was down does not come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_counts_from_the_publish_across_a_restart() {
    let disk = Arc::new(FaultyBackend::new(14));
    let port = start_on(disk.clone()).await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    let ttl = [("x-message-ttl", FieldValue::I32(800))];
    declare_lazy(&mut c, "ttl", &ttl).await;
    c.send(1, ConfirmSelect { nowait: false }).await;
    assert!(matches!(c.method().await.1, Method::ConfirmSelectOk(_)));
    c.publish_persistent(1, "", "ttl", b"old").await;
    let Incoming::Method(_, Method::BasicAck(_)) = c.next().await else {
        panic!("expected the confirm")
    };
    // Crash well before it expires; stay down past its TTL.
    let after = Arc::new(disk.crash(CrashMode::DropUnsynced));
    tokio::time::sleep(std::time::Duration::from_millis(1000)).await;
    let port = start_on(after).await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    declare_lazy(&mut c, "ttl", &ttl).await;
    c.publish_persistent(1, "", "ttl", b"young").await;
    let bodies: Vec<Bytes> = get_all(&mut c, "ttl")
        .await
        .into_iter()
        .map(|(b, _)| b)
        .collect();
    assert_eq!(bodies, vec![Bytes::from_static(b"young")]);
}

/// A queue that is not durable pages out too (as transient records): order and counts hold,
/// and a restart leaves nothing of it behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_queue_pages_out_and_leaves_nothing_after_a_restart() {
    let disk = Arc::new(FaultyBackend::new(15));
    let (port, store) = start_with_store(disk.clone()).await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    let declare = QueueDeclare {
        queue: "scratch".into(),
        durable: false,
        arguments: lazy(&[]),
        ..Default::default()
    };
    c.send(1, declare.clone()).await;
    assert!(matches!(c.method().await.1, Method::QueueDeclareOk(_)));
    let records_before = store.stats().records_written;
    for i in 0..200 {
        let body = format!("m{i}");
        if i % 3 == 0 {
            c.publish_persistent(1, "", "scratch", body.as_bytes())
                .await;
        } else {
            c.publish(1, "", "scratch", body.as_bytes(), false).await;
        }
    }
    c.send(1, declare.clone()).await;
    let Method::QueueDeclareOk(ok) = c.method().await.1 else {
        panic!("declare-ok expected")
    };
    assert_eq!(ok.message_count, 200);
    store.flush().unwrap();
    assert!(
        store.stats().records_written >= records_before + 200,
        "the messages went to disk"
    );
    let bodies: Vec<String> = get_all(&mut c, "scratch")
        .await
        .iter()
        .map(|(b, _)| String::from_utf8(b.to_vec()).unwrap())
        .collect();
    let expected: Vec<String> = (0..200).map(|i| format!("m{i}")).collect();
    assert_eq!(bodies, expected);

    for i in 0..50 {
        c.publish_persistent(1, "", "scratch", format!("x{i}").as_bytes())
            .await;
    }
    c.send(1, declare.clone()).await;
    let Method::QueueDeclareOk(ok) = c.method().await.1 else {
        panic!("declare-ok expected")
    };
    assert_eq!(ok.message_count, 50);
    let port = start_on(Arc::new(disk.crash(CrashMode::DropUnsynced))).await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    c.send(1, declare).await;
    let Method::QueueDeclareOk(ok) = c.method().await.1 else {
        panic!("declare-ok expected")
    };
    assert_eq!(
        ok.message_count, 0,
        "a transient queue's messages do not outlive it"
    );
}

/// Batches read back from disk can expire whole: basic.get keeps reading until it finds a
/// live message instead of answering get-empty after the first. (After a restart every
/// recovered message is on disk and no expiry timer has looked at them yet.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_reads_past_paged_batches_that_expired_whole() {
    let disk = Arc::new(FaultyBackend::new(16));
    let port = start_on(disk.clone()).await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    declare_lazy(&mut c, "mostly-expired", &[]).await;
    c.send(1, ConfirmSelect { nowait: false }).await;
    assert!(matches!(c.method().await.1, Method::ConfirmSelectOk(_)));
    // Long enough that none expires before the crash.
    let ttl_ms = 2000;
    let expiring = BasicProperties {
        delivery_mode: Some(2),
        expiration: Some(ttl_ms.to_string().as_str().into()),
        ..Default::default()
    };
    // Three page-in batches' worth, then one that does not expire.
    for i in 0..3000 {
        let body = format!("e{i}");
        c.publish_with(1, "", "mostly-expired", body.as_bytes(), false, &expiring)
            .await;
    }
    c.publish_persistent(1, "", "mostly-expired", b"keep").await;
    wait_for_confirms(&mut c, 3001).await;
    let after = Arc::new(disk.crash(CrashMode::DropUnsynced));
    tokio::time::sleep(std::time::Duration::from_millis(ttl_ms + 200)).await;
    let port = start_on(after).await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    declare_lazy(&mut c, "mostly-expired", &[]).await;
    let got: Vec<Bytes> = get_all(&mut c, "mostly-expired")
        .await
        .into_iter()
        .map(|(b, _)| b)
        .collect();
    assert_eq!(got, vec![Bytes::from_static(b"keep")]);
}

/// Publisher confirms for tags `first..=last`, read until all are settled: (acked, nacked).
/// Panics if that takes longer than `within`.
/// How long a test waits for confirms to settle: in practice milliseconds, but a loaded CI
/// machine may stall a test for seconds; "at once" is shown by the outcome (a nack while the
/// disk is full), not by a tight clock.
const SETTLE_WITHIN: Duration = Duration::from_secs(15);

async fn settle_confirms(
    c: &mut Client,
    first: u64,
    last: u64,
    within: Duration,
) -> (Vec<u64>, Vec<u64>) {
    let mut unsettled: BTreeSet<u64> = (first..=last).collect();
    let (mut acked, mut nacked) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + within;
    while !unsettled.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        let incoming = tokio::time::timeout(left, c.next())
            .await
            .unwrap_or_else(|_| panic!("tags {unsettled:?} unconfirmed after {within:?}"));
        let (tag, multiple, into) = match incoming {
            Incoming::Method(_, Method::BasicAck(a)) => (a.delivery_tag, a.multiple, &mut acked),
            Incoming::Method(_, Method::BasicNack(n)) => (n.delivery_tag, n.multiple, &mut nacked),
            other => panic!("expected confirms, got {other:?}"),
        };
        let settled: Vec<u64> = if multiple {
            unsettled.range(..=tag).copied().collect()
        } else {
            vec![tag]
        };
        for t in settled {
            assert!(unsettled.remove(&t), "tag {t} confirmed twice");
            into.push(t);
        }
    }
    (acked, nacked)
}

/// Publishes persistent `body` until one is confirmed with an ack (the store retries its
/// writes every 100–500 ms), within 20 s (generous: a loaded CI machine); returns that tag.
async fn publish_until_acked(c: &mut Client, queue: &str, next_tag: &mut u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        *next_tag += 1;
        c.publish_persistent(1, "", queue, b"again").await;
        let (acked, _) = settle_confirms(c, *next_tag, *next_tag, SETTLE_WITHIN).await;
        if !acked.is_empty() {
            return *next_tag;
        }
        assert!(Instant::now() < deadline, "publishing did not work again");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn confirm_select(c: &mut Client) {
    c.send(1, ConfirmSelect { nowait: false }).await;
    assert!(matches!(c.method().await.1, Method::ConfirmSelectOk(_)));
}

/// A full disk (docs/STORAGE.md §11): every unconfirmed persistent publish is settled (an ack
/// for what reached the disk, a nack for the rest; within a second in practice), a publish during the
/// outage is nacked at once, a consumer on another connection keeps receiving and acking,
/// and publishing with confirms works again, without a restart, once space returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_nacks_at_once_consumers_keep_working_and_publishing_resumes() {
    let disk = Arc::new(FaultyBackend::new(11));
    let port = start_on(disk.clone()).await;
    let mut publisher = Client::connect(port).await;
    publisher.open_channel(1).await;
    declare_durable(&mut publisher, "work").await;
    confirm_select(&mut publisher).await;
    let mut consumer = Client::connect(port).await;
    consumer.open_channel(1).await;
    consumer
        .send(
            1,
            BasicConsume {
                queue: "work".into(),
                consumer_tag: "c".into(),
                ..Default::default()
            },
        )
        .await;
    assert!(matches!(
        consumer.method().await.1,
        Method::BasicConsumeOk(_)
    ));

    let body = |i: u64| format!("{i:04}{}", "x".repeat(996)).into_bytes();
    for i in 1..=10 {
        publisher.publish_persistent(1, "", "work", &body(i)).await;
    }
    let (acked, _) = settle_confirms(&mut publisher, 1, 10, SETTLE_WITHIN).await;
    assert_eq!(acked.len(), 10);

    disk.set_capacity_bytes(Some(disk.used_bytes() + 20_000));
    for i in 11..=70 {
        publisher.publish_persistent(1, "", "work", &body(i)).await;
    }
    let (acked, nacked) = settle_confirms(&mut publisher, 11, 70, SETTLE_WITHIN).await;
    assert!(
        !nacked.is_empty(),
        "the disk filled up: some publishes fail"
    );
    // While the store cannot write, a persistent publish is nacked at once.
    publisher.publish_persistent(1, "", "work", &body(71)).await;
    let (_, nacked_now) = settle_confirms(&mut publisher, 71, 71, SETTLE_WITHIN).await;
    assert_eq!(nacked_now, vec![71]);

    // The consumer gets every confirmed message (nacked ones may come too: at least
    // once) and acks them: no error, no stop.
    let mut confirmed: BTreeSet<u64> = (1..=10).chain(acked.iter().copied()).collect();
    while !confirmed.is_empty() {
        let Incoming::Content(_, Method::BasicDeliver(d), _, got) = consumer.next().await else {
            panic!("expected a delivery")
        };
        let i: u64 = std::str::from_utf8(&got[..4]).unwrap().parse().unwrap();
        assert!((1..=70).contains(&i), "unknown message {i}");
        confirmed.remove(&i);
        consumer
            .send(
                1,
                BasicAck {
                    delivery_tag: d.delivery_tag,
                    multiple: false,
                },
            )
            .await;
    }

    disk.set_capacity_bytes(None);
    let mut tag = 71;
    publish_until_acked(&mut publisher, "work", &mut tag).await;
}

/// A transaction whose persistent publish the store could not take fails its commit as
/// RabbitMQ fails a transaction that saw a nack: channel.close 406 "partial tx completion".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_the_store_cannot_write_fails_with_partial_tx_completion() {
    let disk = Arc::new(FaultyBackend::new(12));
    let port = start_on(disk.clone()).await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    declare_durable(&mut c, "txq").await;
    c.send(1, TxSelect).await;
    assert!(matches!(c.method().await.1, Method::TxSelectOk(_)));
    c.publish_persistent(1, "", "txq", b"fits").await;
    c.send(1, TxCommit).await;
    assert!(matches!(c.method().await.1, Method::TxCommitOk(_)));

    disk.set_capacity_bytes(Some(disk.used_bytes()));
    for _ in 0..2 {
        // The first commit's batch fails on the full disk; by the second the store
        // refuses at once. Either way: 406, and the channel is closed.
        c.publish_persistent(1, "", "txq", b"no room").await;
        c.send(1, TxCommit).await;
        let (ch, Method::ChannelClose(close)) = c.method().await else {
            panic!("expected channel.close")
        };
        assert_eq!(ch, 1);
        assert_eq!(close.reply_code, 406);
        assert_eq!(
            close.reply_text.as_str(),
            "PRECONDITION_FAILED - partial tx completion"
        );
        assert_eq!((close.class_id, close.method_id), (90, 20));
        c.send(1, ChannelCloseOk).await;
        c.open_channel(1).await;
        c.send(1, TxSelect).await;
        assert!(matches!(c.method().await.1, Method::TxSelectOk(_)));
    }
}

/// A queue that keeps its messages on disk only (lazy) holds, for a message whose store
/// write failed, only an id: it forgets it at once, so counts stay true and a consumer gets
/// exactly the confirmed messages, in order: no phantom, none lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_queue_forgets_messages_whose_store_write_failed() {
    let disk = Arc::new(FaultyBackend::new(13));
    let port = start_on(disk.clone()).await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    declare_lazy(&mut c, "deep", &[]).await;
    confirm_select(&mut c).await;
    for i in 1..=10u64 {
        c.publish_persistent(1, "", "deep", format!("m{i}").as_bytes())
            .await;
    }
    settle_confirms(&mut c, 1, 10, SETTLE_WITHIN).await;
    disk.set_capacity_bytes(Some(disk.used_bytes() + 3000));
    let big = |i: u64| format!("m{i}:{}", "y".repeat(400)).into_bytes();
    for i in 11..=40u64 {
        c.publish_persistent(1, "", "deep", &big(i)).await;
    }
    let (acked, nacked) = settle_confirms(&mut c, 11, 40, SETTLE_WITHIN).await;
    assert!(!nacked.is_empty());
    let expect = 10 + acked.len() as u32;
    let mut count = 0;
    for _ in 0..500 {
        count = declare_lazy(&mut c, "deep", &[]).await;
        if count == expect {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(count, expect, "message count after the failure");
    disk.set_capacity_bytes(None);
    let got: Vec<Bytes> = get_all(&mut c, "deep")
        .await
        .into_iter()
        .map(|(b, _)| b)
        .collect();
    let mut want: Vec<Bytes> = (1..=10u64).map(|i| Bytes::from(format!("m{i}"))).collect();
    want.extend(acked.iter().map(|i| Bytes::from(big(*i))));
    assert_eq!(got, want);
}

/// `count` durable declares (passive ones to check) of `q0`..: encoded back to back and sent
/// in one write, so the broker reads them together.
async fn send_declares(c: &mut Client, count: usize, passive: bool) {
    let mut frames = bytes::BytesMut::new();
    for i in 0..count {
        let declare = QueueDeclare {
            queue: format!("q{i}").as_str().into(),
            durable: true,
            passive,
            ..Default::default()
        };
        write_method(&mut frames, 1, &Method::QueueDeclare(declare));
    }
    c.send_raw(&frames).await;
    for i in 0..count {
        match c.method().await {
            (1, Method::QueueDeclareOk(ok)) => assert_eq!(ok.queue.as_str(), format!("q{i}")),
            other => panic!("declare of q{i}: {other:?}"),
        }
    }
}

/// Stalls the disk's syncs, then declares `name` durable on channel 1: its declare-ok is held
/// until the syncs resume (`set_stall_syncs(false)`).
async fn declare_durable_with_syncs_stalled(disk: &FaultyBackend, c: &mut Client, name: &str) {
    disk.set_stall_syncs(true);
    send_durable_declare(c, name).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declare_ok_waits_for_the_fsync_and_pipelined_declares_share_one() {
    let disk = Arc::new(FaultyBackend::new(11));
    let port = start_on(disk.clone()).await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    // The first change after a start begins each metadata journal (a file of its own,
    // written and synced before it is renamed into place).
    declare_durable(&mut c, "first").await;

    // While the disk does not finish an fsync, the declare-ok does not come.
    declare_durable_with_syncs_stalled(&disk, &mut c, "held").await;
    c.expect_silence(300).await;
    disk.set_stall_syncs(false);
    assert!(matches!(c.method().await.1, Method::QueueDeclareOk(_)));

    // 200 declares read together: each answered, in order, after fsyncs they share (a sync
    // is one fsync of each metadata journal; one per declare would be 400).
    let syncs_before = disk.sync_count();
    send_declares(&mut c, 200, false).await;
    let syncs = disk.sync_count() - syncs_before;
    assert!(syncs <= 20, "200 pipelined declares took {syncs} fsyncs");

    // Power cut right after the last declare-ok: every queue declared is back.
    let after = Arc::new(disk.crash(CrashMode::DropUnsynced));
    let port = start_on(after).await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    send_declares(&mut c, 200, true).await;
    c.send(
        1,
        QueueDeclare {
            queue: "held".into(),
            durable: true,
            passive: true,
            ..Default::default()
        },
    )
    .await;
    assert!(matches!(c.method().await.1, Method::QueueDeclareOk(_)));
}

/// Output held for a slow fsync does not silence the connection: heartbeats go out ahead of
/// it. Clients give up after about two intervals without a byte (the Java client at 2.25 at
/// heartbeat 1), and under load an fsync can take longer than that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_go_out_while_a_sync_holds_the_answers() {
    let disk = Arc::new(FaultyBackend::new(13));
    let port = start_on(disk.clone()).await;
    let mut c = Client::connect_heartbeat(port, 1).await;
    c.open_channel(1).await;
    declare_durable(&mut c, "first").await;
    declare_durable_with_syncs_stalled(&disk, &mut c, "held").await;
    let stalled = Instant::now();
    let mut kinds = Vec::new();
    while stalled.elapsed() < Duration::from_secs(3) {
        c.send_raw(&HEARTBEAT_FRAME).await;
        match tokio::time::timeout(Duration::from_millis(1500), c.frame()).await {
            Ok(frame) => kinds.push(frame.kind),
            Err(_) => break,
        }
    }
    // Unstalled before any assertion: a test that panicked with a sync stalled would hang
    // in the runtime's shutdown instead of failing.
    disk.set_stall_syncs(false);
    assert!(
        kinds.len() >= 2 && kinds.iter().all(|k| *k == FrameKind::Heartbeat),
        "frames while the sync stalled for {:?}: {kinds:?}",
        stalled.elapsed()
    );
    assert!(matches!(c.method().await.1, Method::QueueDeclareOk(_)));
}

/// A client that never pauses its changes still gets its answers (and its heartbeats): the
/// output a sync holds goes out when that sync ends, not when the client stops sending. With
/// one wait replaced by every new change, a stream of no-wait durable declares held every
/// byte of output back for as long as it lasted, and clients with heartbeats (amqp091-go)
/// closed the connection after ~30 s of silence.
/// A disk whose file syncs take `SLOW_SYNC`: a slow disk's fsync, long enough for the
/// connection to read many more declares meanwhile (what a release build does with a
/// real fsync of a few milliseconds).
struct SlowSyncs(Arc<FaultyBackend>);
struct SlowSyncFile(Arc<dyn warren_store::BackendFile>);
const SLOW_SYNC: Duration = Duration::from_millis(50);

impl Backend for SlowSyncs {
    fn open(
        &self,
        path: &str,
        create: bool,
    ) -> std::io::Result<Arc<dyn warren_store::BackendFile>> {
        Ok(Arc::new(SlowSyncFile(self.0.open(path, create)?)))
    }
    fn create_dir_all(&self, dir: &str) -> std::io::Result<()> {
        self.0.create_dir_all(dir)
    }
    fn list(&self, dir: &str) -> std::io::Result<Vec<String>> {
        self.0.list(dir)
    }
    fn remove(&self, path: &str) -> std::io::Result<()> {
        self.0.remove(path)
    }
    fn rename(&self, from: &str, to: &str) -> std::io::Result<()> {
        self.0.rename(from, to)
    }
    fn sync_dir(&self, dir: &str) -> std::io::Result<()> {
        self.0.sync_dir(dir)
    }
}

impl warren_store::BackendFile for SlowSyncFile {
    fn append(&self, data: &[u8]) -> std::io::Result<()> {
        self.0.append(data)
    }
    fn sync(&self) -> std::io::Result<()> {
        std::thread::sleep(SLOW_SYNC);
        self.0.sync()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.0.read_at(offset, buf)
    }
    fn len_bytes(&self) -> std::io::Result<u64> {
        self.0.len_bytes()
    }
    fn truncate(&self, len_bytes: u64) -> std::io::Result<()> {
        self.0.truncate(len_bytes)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_go_out_while_no_wait_declares_keep_coming() {
    let (port, _store) =
        start_on_backend(Arc::new(SlowSyncs(Arc::new(FaultyBackend::new(12))))).await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    declare_durable(&mut c, "first").await;
    c.send(
        1,
        QueueDeclare {
            queue: "answered".into(),
            durable: true,
            ..Default::default()
        },
    )
    .await;
    let sending_for = Duration::from_secs(3);
    let deadline = Instant::now() + sending_for;
    let mut sent = 0;
    let answer = loop {
        // Only what has already arrived: the client never pauses.
        if let Some(answer) = c.method_or_closed(Duration::ZERO).await {
            break Some(answer);
        }
        if Instant::now() >= deadline {
            break None;
        }
        // Enough in one write that the broker always has more to read.
        let mut frames = bytes::BytesMut::new();
        for _ in 0..1000 {
            let declare = QueueDeclare {
                queue: format!("nw{sent}").as_str().into(),
                durable: true,
                no_wait: true,
                ..Default::default()
            };
            write_method(&mut frames, 1, &Method::QueueDeclare(declare));
            sent += 1;
        }
        c.send_raw(&frames).await;
    };
    match answer {
        Some((1, Method::QueueDeclareOk(ok))) => assert_eq!(ok.queue.as_str(), "answered"),
        other => {
            panic!("no declare-ok in {sending_for:?} of no-wait declares ({sent} sent): {other:?}")
        }
    }
}
