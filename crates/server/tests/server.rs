//! In-process integration tests: the broker runs on port 0 inside the test and a minimal
//! client drives it. Real-client interoperability (pika, Go, PerfTest) lives in tests/interop.

mod client;

use client::{start_broker, Client, Incoming};
use warren_codec::*;

#[tokio::test]
async fn handshake_advertises_capabilities() {
    let (port, _broker) = start_broker().await;
    let c = Client::connect(port).await;
    let Some(FieldValue::Table(caps)) = c.server_properties.get("capabilities") else {
        panic!()
    };
    for cap in [
        "publisher_confirms",
        "basic.nack",
        "consumer_cancel_notify",
        "direct_reply_to",
        "per_consumer_qos",
    ] {
        assert_eq!(caps.get(cap), Some(&FieldValue::Bool(true)), "{cap}");
    }
    assert_eq!(
        c.server_properties.get("product").and_then(|v| v.as_str()),
        Some("Warren")
    );
}

#[tokio::test]
async fn wrong_password_is_refused_with_403() {
    let (port, _broker) = start_broker().await;
    let Err(Method::ConnectionClose(close)) = Client::connect_as(port, "guest", "nope").await
    else {
        panic!("login should fail")
    };
    assert_eq!(close.reply_code, 403);
    assert!(close.reply_text.starts_with("ACCESS_REFUSED"));
}

#[tokio::test]
async fn publish_then_consume_in_order_with_tags() {
    let (port, _broker) = start_broker().await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    let q = c.declare_queue(1, "", FieldTable::new()).await;
    assert!(q.queue.starts_with("amq.gen-"));
    for i in 0..100 {
        c.publish(1, "", &q.queue, format!("m{i}").as_bytes(), false)
            .await;
    }
    c.send(
        1,
        BasicConsume {
            queue: q.queue.clone(),
            no_ack: false,
            ..Default::default()
        },
    )
    .await;
    let Incoming::Method(_, Method::BasicConsumeOk(ok)) = c.next().await else {
        panic!()
    };
    assert!(ok.consumer_tag.starts_with("amq.ctag-"));
    for i in 0..100u64 {
        let Incoming::Content(_, Method::BasicDeliver(d), _, body) = c.next().await else {
            panic!()
        };
        assert_eq!(d.delivery_tag, i + 1);
        assert_eq!(&body[..], format!("m{i}").as_bytes());
    }
    c.send(
        1,
        BasicAck {
            delivery_tag: 100,
            multiple: true,
        },
    )
    .await;
    // Passive: RabbitMQ refuses a non-passive declare of an amq.* (server-named) queue.
    c.send(
        1,
        QueueDeclare {
            queue: q.queue.clone(),
            passive: true,
            ..Default::default()
        },
    )
    .await;
    let Method::QueueDeclareOk(ok) = c.method().await.1 else {
        panic!("expected declare-ok")
    };
    assert_eq!((ok.message_count, ok.consumer_count), (0, 1));
}

#[tokio::test]
async fn channel_error_closes_only_the_channel() {
    let (port, _broker) = start_broker().await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    c.open_channel(2).await;
    c.send(
        1,
        QueueDeclare {
            queue: "missing".into(),
            passive: true,
            ..Default::default()
        },
    )
    .await;
    let (ch, Method::ChannelClose(close)) = c.method().await else {
        panic!()
    };
    assert_eq!(
        (ch, close.reply_code, close.class_id, close.method_id),
        (1, 404, 50, 10)
    );
    c.send(1, ChannelCloseOk).await;
    let ok = c.declare_queue(2, "still-works", FieldTable::new()).await;
    assert_eq!(ok.queue.as_str(), "still-works");
}

#[tokio::test]
async fn mandatory_unroutable_is_returned_before_the_confirm() {
    let (port, _broker) = start_broker().await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    c.send(1, ConfirmSelect { nowait: false }).await;
    assert!(matches!(c.method().await.1, Method::ConfirmSelectOk(_)));
    c.publish(1, "amq.direct", "nowhere", b"lost?", true).await;
    let Incoming::Content(_, Method::BasicReturn(r), _, body) = c.next().await else {
        panic!()
    };
    assert_eq!(
        (r.reply_code, r.reply_text.as_str(), &body[..]),
        (312, "NO_ROUTE", &b"lost?"[..])
    );
    let Incoming::Method(_, Method::BasicAck(ack)) = c.next().await else {
        panic!()
    };
    assert_eq!(ack.delivery_tag, 1);
}

#[tokio::test]
async fn prefetch_bounds_unacked_deliveries() {
    let (port, _broker) = start_broker().await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    let q = c.declare_queue(1, "", FieldTable::new()).await;
    for _ in 0..10 {
        c.publish(1, "", &q.queue, b"x", false).await;
    }
    c.send(
        1,
        BasicQos {
            prefetch_size: 0,
            prefetch_count: 3,
            global: false,
        },
    )
    .await;
    assert!(matches!(c.method().await.1, Method::BasicQosOk(_)));
    c.send(
        1,
        BasicConsume {
            queue: q.queue.clone(),
            ..Default::default()
        },
    )
    .await;
    assert!(matches!(
        c.next().await,
        Incoming::Method(_, Method::BasicConsumeOk(_))
    ));
    for _ in 0..3 {
        assert!(matches!(
            c.next().await,
            Incoming::Content(_, Method::BasicDeliver(_), _, _)
        ));
    }
    c.expect_silence(200).await;
    c.send(
        1,
        BasicAck {
            delivery_tag: 3,
            multiple: true,
        },
    )
    .await;
    for tag in 4..=6 {
        let Incoming::Content(_, Method::BasicDeliver(d), _, _) = c.next().await else {
            panic!()
        };
        assert_eq!(d.delivery_tag, tag);
    }
}

#[tokio::test]
async fn unacked_messages_are_requeued_as_redelivered_when_the_channel_closes() {
    let (port, _broker) = start_broker().await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    let q = c.declare_queue(1, "", FieldTable::new()).await;
    c.publish(1, "", &q.queue, b"once", false).await;
    c.send(
        1,
        BasicGet {
            queue: q.queue.clone(),
            no_ack: false,
        },
    )
    .await;
    let Incoming::Content(_, Method::BasicGetOk(g), _, _) = c.next().await else {
        panic!()
    };
    assert!(!g.redelivered);
    c.send(
        1,
        ChannelClose {
            reply_code: 200,
            reply_text: "bye".into(),
            class_id: 0,
            method_id: 0,
        },
    )
    .await;
    assert!(matches!(c.method().await.1, Method::ChannelCloseOk(_)));
    c.open_channel(2).await;
    c.send(
        2,
        BasicGet {
            queue: q.queue.clone(),
            no_ack: true,
        },
    )
    .await;
    let Incoming::Content(_, Method::BasicGetOk(g), _, body) = c.next().await else {
        panic!()
    };
    assert!(g.redelivered);
    assert_eq!(&body[..], b"once");
}

#[tokio::test]
async fn oversized_frame_closes_the_connection_with_501() {
    let (port, _broker) = start_broker().await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    c.publish(1, "", "q", &vec![0u8; 300_000], false).await; // frames of 131072 are fine
    let mut big = bytes::BytesMut::new();
    big.extend_from_slice(&[3, 0, 1]);
    big.extend_from_slice(&(1u32 << 20).to_be_bytes());
    c.send_raw(&big).await;
    let (_, Method::ConnectionClose(close)) = c.method().await else {
        panic!()
    };
    assert_eq!(close.reply_code, 501);
}

/// amqp091-go's `ExampleConnection_reconnect` closes its consumer's connection and, on
/// close-ok, reconnects and consumes again: as with RabbitMQ, the consumers are gone by then
/// (an auto-delete queue they left is deleted, not about to be).
#[test]
fn close_ok_comes_after_the_connections_consumers_are_gone() {
    // The broker on a runtime of its own, so that the client reads close-ok while the
    // broker's task goes on (on one runtime the woken client would wait behind it).
    let broker_runtime = tokio::runtime::Runtime::new().unwrap();
    let (port, broker) = broker_runtime.block_on(start_broker());
    let client_runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    client_runtime.block_on(async {
        // Many consumers, so that releasing them takes a while: the queue goes with the last.
        const CONSUMERS: usize = 3_000;
        let mut c = Client::connect(port).await;
        c.open_channel(1).await;
        c.send(
            1,
            QueueDeclare {
                queue: "left".into(),
                auto_delete: true,
                ..Default::default()
            },
        )
        .await;
        assert!(matches!(c.method().await.1, Method::QueueDeclareOk(_)));
        for _ in 0..CONSUMERS {
            let consume = BasicConsume {
                queue: "left".into(),
                ..Default::default()
            };
            c.send(1, consume).await;
        }
        for _ in 0..CONSUMERS {
            let (_, m) = c.method().await;
            assert!(matches!(m, Method::BasicConsumeOk(_)), "{m:?}");
        }
        let close = ConnectionClose {
            reply_code: 200,
            reply_text: "bye".into(),
            class_id: 0,
            method_id: 0,
        };
        c.send(0, close).await;
        assert!(matches!(c.method().await.1, Method::ConnectionCloseOk(_)));
        let vhost = broker.vhost("/").unwrap();
        assert!(
            vhost.queue("left").is_none(),
            "the auto-delete queue outlived close-ok"
        );
    });
}

/// RabbitMQ's Java client on Netty drops a connection after one heartbeat interval without
/// a byte from the server (its read timeout is max(1 s, interval)), so an idle connection
/// must hear from us well within an interval, not only within two.
#[tokio::test]
async fn an_idle_connection_hears_a_heartbeat_well_within_each_interval() {
    let (port, _broker) = start_broker().await;
    let mut c = Client::connect_heartbeat(port, 1).await;
    let mut last = std::time::Instant::now();
    let mut longest = std::time::Duration::ZERO;
    let watched = std::time::Instant::now();
    // Under 2.5 s: we stay silent, and the server gives up on us then.
    while watched.elapsed() < std::time::Duration::from_secs(2) {
        let frame = c.frame().await;
        assert_eq!(frame.kind, FrameKind::Heartbeat, "{frame:?}");
        longest = longest.max(last.elapsed());
        last = std::time::Instant::now();
    }
    assert!(
        longest < std::time::Duration::from_millis(900),
        "{longest:?} without a byte at heartbeat 1 s"
    );
}
