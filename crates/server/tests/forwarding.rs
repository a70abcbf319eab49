//! Forwarding: two brokers in one process joined by a forwarding link over a loopback TCP
//! socket (made again with `relink` after a test closed it). Broker A serves queue `q`
//! (durable, on a store whose fsyncs the test can stall); broker B holds a remote record for
//! it. A client on B uses `q` as if it were local.

mod client;

use bytes::Bytes;
use client::{Client, Incoming};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use warren_broker::quorum::QuorumHost;
use warren_broker::remote::{self, ForwardLink};
use warren_broker::vhost::QueueDeclaration;
use warren_broker::Broker;
use warren_codec::*;
use warren_server::ServerConfig;
use warren_store::{Backend, FaultyBackend, Store, StoreOptions};

struct Pair {
    a: Arc<Broker>,
    b: Arc<Broker>,
    port_a: u16,
    port_b: u16,
    /// A's store's disk: `set_stall_syncs` holds fsyncs back.
    disk: Arc<FaultyBackend>,
    link_b: Arc<ForwardLink>,
    /// A's quorum data, when `q` is a quorum queue.
    _quorum_dir: Option<tempfile::TempDir>,
}

async fn listen(broker: Arc<Broker>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(warren_server::run(
        listener,
        broker,
        ServerConfig::default(),
        std::future::pending(),
    ));
    port
}

/// A serves durable queue `q`; B forwards to it over a loopback TCP link.
async fn pair() -> Pair {
    pair_of("classic").await
}

/// `pair` with `q` of type `queue_type` (`classic` or `quorum`).
async fn pair_of(queue_type: &'static str) -> Pair {
    let disk = Arc::new(FaultyBackend::new(11));
    let backend: Arc<dyn Backend> = disk.clone();
    let (store, recovered) = Store::open_with_backend(backend, StoreOptions::default()).unwrap();
    let a = Broker::new(1 << 30, Some(store));
    a.recover(recovered);
    let b = Broker::new(1 << 30, None);
    let mut arguments = FieldTable::new();
    let quorum_dir = (queue_type == "quorum").then(|| tempfile::tempdir().unwrap());
    if let Some(dir) = &quorum_dir {
        a.enable_quorum(QuorumHost::open(dir.path()).unwrap());
        arguments.insert("x-queue-type", FieldValue::LongStr("quorum".into()));
    }
    a.vhost("/")
        .unwrap()
        .declare_queue(
            QueueDeclaration {
                name: ShortStr::from("q"),
                passive: false,
                durable: true,
                exclusive: false,
                auto_delete: false,
                arguments: arguments.clone(),
            },
            0,
        )
        .unwrap();

    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (accepted, connected) = tokio::join!(listener.accept(), TcpStream::connect(addr));
    let (stream_a, _) = accepted.unwrap();
    remote::open(stream_a, a.clone());
    let link_b = remote::open(connected.unwrap(), b.clone());
    let peer_a = b.forward_peers().peer("a");
    peer_a.set(link_b.clone());
    b.vhost("/")
        .unwrap()
        .install_remote_queue(
            ShortStr::from("q"),
            true,
            false,
            arguments,
            &peer_a,
            queue_type,
        )
        .unwrap();
    Pair {
        port_a: listen(a.clone()).await,
        port_b: listen(b.clone()).await,
        a,
        b,
        disk,
        link_b,
        _quorum_dir: quorum_dir,
    }
}

/// Joins A and B again over a new loopback link (after `link_b` was closed): B's record of
/// `q` binds itself on it.
async fn relink(pair: &Pair) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (accepted, connected) = tokio::join!(listener.accept(), TcpStream::connect(addr));
    remote::open(accepted.unwrap().0, pair.a.clone());
    let link = remote::open(connected.unwrap(), pair.b.clone());
    pair.b.forward_peers().peer("a").set(link);
}

async fn channel(port: u16) -> Client {
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    c
}

async fn confirm_select(c: &mut Client) {
    c.send(1, ConfirmSelect { nowait: false }).await;
    assert!(matches!(c.method().await.1, Method::ConfirmSelectOk(_)));
}

/// Reads the confirms of publishes `after + 1 ..= last`: how many were acked, and the
/// nacked ones.
async fn confirms_until(c: &mut Client, after: u64, last: u64) -> (u64, Vec<u64>) {
    let (mut acked, mut nacked, mut seen) = (0, Vec::new(), after);
    while seen < last {
        match c.next().await {
            Incoming::Method(_, Method::BasicAck(a)) => {
                acked += if a.multiple { a.delivery_tag - seen } else { 1 };
                seen = a.delivery_tag;
            }
            Incoming::Method(_, Method::BasicNack(n)) => {
                assert!(!n.multiple);
                nacked.push(n.delivery_tag);
                seen = n.delivery_tag;
            }
            other => panic!("expected confirms, got {other:?}"),
        }
    }
    (acked, nacked)
}

async fn consume(c: &mut Client, prefetch: u16, no_ack: bool) -> ShortStr {
    c.send(
        1,
        BasicQos {
            prefetch_size: 0,
            prefetch_count: prefetch,
            global: false,
        },
    )
    .await;
    assert!(matches!(c.method().await.1, Method::BasicQosOk(_)));
    c.send(
        1,
        BasicConsume {
            queue: "q".into(),
            no_ack,
            ..Default::default()
        },
    )
    .await;
    let Method::BasicConsumeOk(ok) = c.method().await.1 else {
        panic!("expected consume-ok")
    };
    ok.consumer_tag
}

/// The next delivery: (delivery tag, redelivered, body, headers).
async fn delivery(c: &mut Client) -> (u64, bool, Bytes, Option<FieldTable>) {
    match c.next().await {
        Incoming::Content(_, Method::BasicDeliver(d), header, body) => {
            let headers = header.properties().unwrap().headers;
            (d.delivery_tag, d.redelivered, body, headers)
        }
        other => panic!("expected a delivery, got {other:?}"),
    }
}

async fn passive_count(c: &mut Client) -> (u32, u32) {
    c.send(
        1,
        QueueDeclare {
            queue: "q".into(),
            passive: true,
            ..Default::default()
        },
    )
    .await;
    let Method::QueueDeclareOk(ok) = c.method().await.1 else {
        panic!("expected declare-ok")
    };
    (ok.message_count, ok.consumer_count)
}

/// Polls until `check` holds (the counts cross the link asynchronously).
async fn eventually<F: std::future::Future<Output = bool>>(mut check: impl FnMut() -> F) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check().await {
        assert!(Instant::now() < deadline, "condition not reached in 20 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn a_count(pair: &Pair) -> u32 {
    pair.a
        .vhost("/")
        .unwrap()
        .queue("q")
        .unwrap()
        .message_count()
}

async fn publish_on_a(pair: &Pair, n: usize) {
    let mut c = channel(pair.port_a).await;
    confirm_select(&mut c).await;
    for i in 0..n {
        let mut headers = FieldTable::new();
        headers.insert("n", FieldValue::I64(i as i64));
        let props = BasicProperties {
            headers: Some(headers),
            ..Default::default()
        };
        c.publish_with(1, "", "q", format!("m{i}").as_bytes(), false, &props)
            .await;
    }
    confirms_until(&mut c, 0, n as u64).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publishes_on_b_reach_a_in_order_confirmed_after_a_fsyncs() {
    let pair = pair().await;
    let mut c = channel(pair.port_b).await;
    confirm_select(&mut c).await;

    // A persistent message in a durable queue is confirmed once A's store fsync'd it.
    pair.disk.set_stall_syncs(true);
    c.publish_persistent(1, "", "q", b"m0").await;
    c.expect_silence(300).await;
    pair.disk.set_stall_syncs(false);
    assert_eq!(confirms_until(&mut c, 0, 1).await, (1, vec![]));

    for i in 1..200 {
        c.publish_persistent(1, "", "q", format!("m{i}").as_bytes())
            .await;
    }
    assert_eq!(confirms_until(&mut c, 1, 200).await, (199, vec![]));
    assert_eq!(a_count(&pair), 200);

    let mut on_a = channel(pair.port_a).await;
    consume(&mut on_a, 0, true).await;
    for i in 0..200 {
        let (_, redelivered, body, _) = delivery(&mut on_a).await;
        assert_eq!(&body[..], format!("m{i}").as_bytes());
        assert!(!redelivered);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_on_b_get_a_messages_in_order_with_prefetch_acks_and_requeue() {
    let pair = pair().await;
    publish_on_a(&pair, 30).await;
    let mut c = channel(pair.port_b).await;
    consume(&mut c, 10, false).await;
    for i in 0..10 {
        let (tag, redelivered, body, headers) = delivery(&mut c).await;
        assert_eq!(tag, i + 1);
        assert!(!redelivered);
        assert_eq!(&body[..], format!("m{i}").as_bytes());
        assert_eq!(
            headers.and_then(|h| h.get("n").and_then(FieldValue::as_i64)),
            Some(i as i64),
            "headers cross the link intact"
        );
    }
    // Prefetch 10 holds on A: nothing more until an ack.
    c.expect_silence(300).await;
    c.send(
        1,
        BasicNack {
            delivery_tag: 10,
            multiple: false,
            requeue: true,
        },
    )
    .await;
    c.send(
        1,
        BasicAck {
            delivery_tag: 9,
            multiple: true,
        },
    )
    .await;
    // m9 comes back first (its old place), redelivered; then the rest in order.
    let (_, redelivered, body, _) = delivery(&mut c).await;
    assert_eq!((&body[..], redelivered), (&b"m9"[..], true));
    let mut tag = 0;
    for i in 10..30 {
        let (t, redelivered, body, _) = delivery(&mut c).await;
        assert_eq!(&body[..], format!("m{i}").as_bytes());
        assert!(!redelivered);
        tag = t;
        if i % 5 == 0 {
            c.send(
                1,
                BasicAck {
                    delivery_tag: t,
                    multiple: true,
                },
            )
            .await;
        }
    }
    c.send(
        1,
        BasicAck {
            delivery_tag: tag,
            multiple: true,
        },
    )
    .await;
    eventually(|| async { a_count(&pair) == 0 }).await;
    let queue = pair.a.vhost("/").unwrap().queue("q").unwrap();
    eventually(|| {
        let queue = queue.clone();
        async move { queue.unacked_count() == 0 }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_get_purge_and_declare_ok_counts_on_b() {
    let pair = pair().await;
    publish_on_a(&pair, 5).await;
    let mut c = channel(pair.port_b).await;
    let mut counts = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(20);
    while counts != (5, 0) {
        assert!(Instant::now() < deadline, "declare-ok counts: {counts:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
        counts = passive_count(&mut c).await;
    }

    let get = |no_ack| BasicGet {
        queue: "q".into(),
        no_ack,
    };
    c.send(1, get(false)).await;
    let Incoming::Content(_, Method::BasicGetOk(ok), _, body) = c.next().await else {
        panic!("expected get-ok")
    };
    assert_eq!(
        (&body[..], ok.message_count, ok.redelivered),
        (&b"m0"[..], 4, false)
    );
    // Rejected with requeue: back at the head, redelivered.
    c.send(
        1,
        BasicReject {
            delivery_tag: ok.delivery_tag,
            requeue: true,
        },
    )
    .await;
    c.send(1, get(true)).await;
    let Incoming::Content(_, Method::BasicGetOk(ok), _, body) = c.next().await else {
        panic!("expected get-ok")
    };
    assert_eq!((&body[..], ok.redelivered), (&b"m0"[..], true));
    c.send(1, get(false)).await;
    let Incoming::Content(_, Method::BasicGetOk(ok), _, body) = c.next().await else {
        panic!("expected get-ok")
    };
    assert_eq!(&body[..], b"m1");
    c.send(
        1,
        BasicAck {
            delivery_tag: ok.delivery_tag,
            multiple: false,
        },
    )
    .await;
    eventually(|| async { a_count(&pair) == 3 }).await;

    c.send(
        1,
        QueuePurge {
            queue: "q".into(),
            ..Default::default()
        },
    )
    .await;
    assert!(matches!(c.method().await.1, Method::QueuePurgeOk(_)));
    eventually(|| async { a_count(&pair) == 0 }).await;
    c.send(1, get(false)).await;
    assert!(matches!(c.method().await.1, Method::BasicGetEmpty(_)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_deleted_on_a_cancels_the_consumer_on_b() {
    let pair = pair().await;
    let mut c = channel(pair.port_b).await;
    let tag = consume(&mut c, 10, false).await;
    eventually(|| async {
        pair.a
            .vhost("/")
            .unwrap()
            .queue("q")
            .unwrap()
            .consumer_count()
            == 1
    })
    .await;
    pair.a
        .vhost("/")
        .unwrap()
        .delete_queue("q", false, false, 0)
        .unwrap();
    let Method::BasicCancel(cancel) = c.method().await.1 else {
        panic!("expected basic.cancel")
    };
    assert_eq!(cancel.consumer_tag, tag);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_link_cancels_consumers_nacks_unconfirmed_and_requeues_what_b_held() {
    let pair = pair().await;
    publish_on_a(&pair, 3).await;
    let mut consumer = channel(pair.port_b).await;
    let tag = consume(&mut consumer, 10, false).await;
    let mut held = Vec::new();
    for i in 0..3 {
        let (t, _, body, _) = delivery(&mut consumer).await;
        assert_eq!(&body[..], format!("m{i}").as_bytes());
        held.push(t);
    }
    eventually(|| async { a_count(&pair) == 0 }).await;

    // Publishes A has not fsync'd yet when the link goes.
    let mut publisher = channel(pair.port_b).await;
    confirm_select(&mut publisher).await;
    pair.disk.set_stall_syncs(true);
    for i in 0..5 {
        publisher
            .publish_persistent(1, "", "q", format!("late{i}").as_bytes())
            .await;
    }
    publisher.expect_silence(200).await;
    pair.link_b.close();
    let (acked, nacked) = confirms_until(&mut publisher, 0, 5).await;
    assert_eq!((acked, nacked), (0, vec![1, 2, 3, 4, 5]));

    // A may have handed some late publishes to the consumer before the link went (it
    // delivers before its fsync); then basic.cancel.
    loop {
        match consumer.next().await {
            Incoming::Content(_, Method::BasicDeliver(d), _, body) => {
                assert!(body.starts_with(b"late"), "unexpected {body:?}");
                held.push(d.delivery_tag);
            }
            Incoming::Method(_, Method::BasicCancel(cancel)) => {
                assert_eq!(cancel.consumer_tag, tag);
                break;
            }
            other => {
                pair.disk.set_stall_syncs(false);
                panic!("expected basic.cancel, got {other:?}")
            }
        }
    }
    // Acks of what the client held are no-ops now: the channel stays usable (a round trip
    // that does not name the queue: with its node unreachable, naming it is a 404).
    consumer
        .send(
            1,
            BasicAck {
                delivery_tag: *held.last().unwrap(),
                multiple: true,
            },
        )
        .await;
    consumer
        .send(
            1,
            BasicQos {
                prefetch_size: 0,
                prefetch_count: 5,
                global: false,
            },
        )
        .await;
    assert!(matches!(consumer.method().await.1, Method::BasicQosOk(_)));
    pair.disk.set_stall_syncs(false);

    // A requeued the three (redelivered), ahead of the late publishes it took.
    eventually(|| async { a_count(&pair) >= 3 }).await;
    let mut on_a = channel(pair.port_a).await;
    consume(&mut on_a, 0, true).await;
    for i in 0..3 {
        let (_, redelivered, body, _) = delivery(&mut on_a).await;
        assert_eq!(&body[..], format!("m{i}").as_bytes());
        assert!(redelivered, "m{i} comes back redelivered");
    }
    // Publishing on B after the loss: nacked at once, never left hanging.
    publisher.publish_persistent(1, "", "q", b"after").await;
    assert_eq!(confirms_until(&mut publisher, 5, 6).await, (0, vec![6]));
}

/// A quorum queue served by A: confirmed once A's group committed, consumed and got on B,
/// a requeue redelivered with the group's delivery count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_queue_served_by_a_is_used_through_b() {
    let pair = pair_of("quorum").await;
    let mut c = channel(pair.port_b).await;
    // Redeclared on B as what it is: equivalent.
    let mut arguments = FieldTable::new();
    arguments.insert("x-queue-type", FieldValue::LongStr("quorum".into()));
    c.send(
        1,
        QueueDeclare {
            queue: "q".into(),
            durable: true,
            arguments,
            ..Default::default()
        },
    )
    .await;
    assert!(matches!(c.method().await.1, Method::QueueDeclareOk(_)));
    confirm_select(&mut c).await;
    for i in 0..20 {
        c.publish_persistent(1, "", "q", format!("m{i}").as_bytes())
            .await;
    }
    assert_eq!(confirms_until(&mut c, 0, 20).await, (20, vec![]));
    eventually(|| async { a_count(&pair) == 20 }).await;

    c.send(
        1,
        BasicGet {
            queue: "q".into(),
            no_ack: false,
        },
    )
    .await;
    let Incoming::Content(_, Method::BasicGetOk(ok), _, body) = c.next().await else {
        panic!("expected get-ok")
    };
    assert_eq!(&body[..], b"m0");
    c.send(
        1,
        BasicAck {
            delivery_tag: ok.delivery_tag,
            multiple: false,
        },
    )
    .await;

    let mut consumer = channel(pair.port_b).await;
    consume(&mut consumer, 5, false).await;
    let (tag, redelivered, body, _) = delivery(&mut consumer).await;
    assert_eq!((&body[..], redelivered), (&b"m1"[..], false));
    consumer
        .send(
            1,
            BasicNack {
                delivery_tag: tag,
                multiple: false,
                requeue: true,
            },
        )
        .await;
    // Wherever the group puts it back, it comes again, redelivered and counted.
    let mut seen = Vec::new();
    loop {
        let (tag, redelivered, body, headers) = delivery(&mut consumer).await;
        consumer
            .send(
                1,
                BasicAck {
                    delivery_tag: tag,
                    multiple: false,
                },
            )
            .await;
        if &body[..] == b"m1" {
            assert!(redelivered);
            let count =
                headers.and_then(|h| h.get("x-delivery-count").and_then(FieldValue::as_i64));
            assert_eq!(count, Some(1));
            break;
        }
        seen.push(body);
    }
    let expected: Vec<Bytes> = (2..2 + seen.len())
        .map(|i| Bytes::from(format!("m{i}")))
        .collect();
    assert_eq!(seen, expected, "the others in order");
}

/// A settle goes over the link its delivery came by, or nowhere: after the link to A is lost
/// (A requeues what B's consumer held) and made again, a consumer on B gets the message again
/// under the same id; the first consumer's late nack of its copy must leave that hold alone
/// (over the new link it would name the message the second consumer holds there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_settle_over_a_lost_link_leaves_the_redelivered_copy_alone() {
    let pair = pair().await;
    publish_on_a(&pair, 1).await;
    let mut first = channel(pair.port_b).await;
    let tag = consume(&mut first, 10, false).await;
    let (held, redelivered, body, _) = delivery(&mut first).await;
    assert_eq!((&body[..], redelivered), (&b"m0"[..], false));

    pair.link_b.close();
    match first.next().await {
        Incoming::Method(_, Method::BasicCancel(cancel)) => assert_eq!(cancel.consumer_tag, tag),
        other => panic!("expected basic.cancel, got {other:?}"),
    }
    eventually(|| async { a_count(&pair) == 1 }).await;

    relink(&pair).await;
    let mut second = channel(pair.port_b).await;
    consume(&mut second, 10, false).await;
    let (held_again, redelivered, body, _) = delivery(&mut second).await;
    assert_eq!((&body[..], redelivered), (&b"m0"[..], true));

    // The first consumer's channel requeues its copy, delivered over the lost link.
    first
        .send(
            1,
            BasicNack {
                delivery_tag: held,
                multiple: false,
                requeue: true,
            },
        )
        .await;
    second.expect_silence(2000).await;
    assert_eq!(
        a_count(&pair),
        0,
        "the second consumer's message was requeued"
    );

    // The second consumer's ack settles it: nothing comes back.
    second
        .send(
            1,
            BasicAck {
                delivery_tag: held_again,
                multiple: false,
            },
        )
        .await;
    second.expect_silence(500).await;
    assert_eq!(a_count(&pair), 0);
}

/// A consume, a basic.get and a passive declare on B while its link to A is being made again
/// (A is not held down: a reconnect, or nodes still forming) wait for the link instead of
/// answering 404, and go on once it is up; with A held down by the failure detector they
/// answer 404 at once, as RabbitMQ does for a queue whose home node is down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn methods_on_b_wait_for_a_link_being_made_and_fail_at_once_when_a_is_down() {
    let pair = pair().await;
    publish_on_a(&pair, 2).await;
    pair.link_b.close();
    let mut c = channel(pair.port_b).await;
    c.send(
        1,
        QueueDeclare {
            queue: "q".into(),
            passive: true,
            ..Default::default()
        },
    )
    .await;
    c.send(
        1,
        BasicConsume {
            queue: "q".into(),
            no_ack: true,
            ..Default::default()
        },
    )
    .await;
    // Held, not refused: the channel answers nothing until the link is up.
    c.expect_silence(300).await;
    relink(&pair).await;
    let Method::QueueDeclareOk(ok) = c.method().await.1 else {
        panic!("expected declare-ok once the link is up")
    };
    assert_eq!(ok.queue.as_str(), "q");
    assert!(matches!(c.method().await.1, Method::BasicConsumeOk(_)));
    for i in 0..2 {
        let (_, _, body, _) = delivery(&mut c).await;
        assert_eq!(&body[..], format!("m{i}").as_bytes());
    }

    // Held down: no wait.
    let peer = pair.b.forward_peers().peer("a");
    peer.set_node_down(true);
    peer.current().unwrap().close();
    let mut d = channel(pair.port_b).await;
    let started = Instant::now();
    d.send(
        1,
        BasicGet {
            queue: "q".into(),
            no_ack: true,
        },
    )
    .await;
    let Method::ChannelClose(close) = d.method().await.1 else {
        panic!("expected channel.close")
    };
    assert_eq!(close.reply_code, 404, "{close:?}");
    assert!(
        close.reply_text.contains("is down or inaccessible"),
        "{close:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}
