//! Resource alarms seen from connections (RabbitMQ's rules, server/src/throttle.rs): only a
//! connection that publishes during an alarm is blocked and told; consumers carry on; all
//! blocked connections are read again, in order, when the alarms clear.

mod client;

use bytes::Bytes;
use client::{start_broker, Client, Incoming};
use std::time::Duration;
use warren_broker::Alarm;
use warren_codec::*;

async fn consume(c: &mut Client, ch: u16, queue: &str) {
    c.send(
        ch,
        BasicConsume {
            queue: queue.into(),
            consumer_tag: "".into(),
            no_local: false,
            no_ack: false,
            exclusive: false,
            no_wait: false,
            arguments: FieldTable::new(),
        },
    )
    .await;
    assert!(matches!(c.method().await.1, Method::BasicConsumeOk(_)));
}

async fn next_delivery(c: &mut Client) -> (u64, Bytes) {
    match c.next().await {
        Incoming::Content(_, Method::BasicDeliver(d), _, body) => (d.delivery_tag, body),
        other => panic!("expected a delivery, got {other:?}"),
    }
}

#[tokio::test]
async fn only_publishers_are_blocked_and_unblocked_in_order() {
    let (port, broker) = start_broker().await;
    let mut publisher = Client::connect(port).await;
    publisher.open_channel(1).await;
    let q = publisher
        .declare_queue(1, "", FieldTable::new())
        .await
        .queue;
    publisher.publish(1, "", &q, b"before", false).await;

    let mut consumer = Client::connect(port).await;
    consumer.open_channel(1).await;
    // The disk alarm: the memory monitor would clear a memory alarm set by hand as soon as
    // it re-evaluates (nothing is queued here).
    broker.alarms.set(Alarm::Disk, true);
    tokio::time::sleep(Duration::from_millis(50)).await;

    // The consumer declares, consumes and acks through the alarm and is never told.
    consumer
        .declare_queue(1, "alarm.other", FieldTable::new())
        .await;
    consume(&mut consumer, 1, &q).await;
    let (tag, body) = next_delivery(&mut consumer).await;
    assert_eq!(&body[..], b"before");
    consumer
        .send(
            1,
            BasicAck {
                delivery_tag: tag,
                multiple: false,
            },
        )
        .await;

    // The publisher publishes: it is blocked at the publish's content header and told
    // once; that publish waits unrouted (its body unread), as in RabbitMQ.
    publisher.publish(1, "", &q, b"m1", false).await;
    match publisher.method().await {
        (0, Method::ConnectionBlocked(b)) => assert_eq!(b.reason.as_str(), "low on disk"),
        other => panic!("expected connection.blocked, got {other:?}"),
    }
    // What it sends now waits in its socket, unread.
    for i in 2..=5 {
        publisher
            .publish(1, "", &q, format!("m{i}").as_bytes(), false)
            .await;
    }
    publisher
        .send(
            1,
            QueueDeclare {
                queue: "alarm.after".into(),
                passive: false,
                durable: false,
                exclusive: false,
                auto_delete: false,
                no_wait: false,
                arguments: FieldTable::new(),
            },
        )
        .await;
    publisher.expect_silence(200).await;
    consumer.expect_silence(200).await;
    // Another alarm coming and going while blocked sends nothing more.
    broker.alarms.set(Alarm::Memory, true);
    broker.alarms.set(Alarm::Memory, false);
    publisher.expect_silence(200).await;
    consumer.expect_silence(100).await;

    broker.alarms.set(Alarm::Disk, false);
    assert!(matches!(
        publisher.method().await,
        (0, Method::ConnectionUnblocked(_))
    ));
    assert!(matches!(
        publisher.method().await,
        (1, Method::QueueDeclareOk(_))
    ));
    for i in 1..=5 {
        let (_, body) = next_delivery(&mut consumer).await;
        assert_eq!(body, format!("m{i}").as_bytes());
    }
}

#[tokio::test]
async fn a_client_without_the_capability_is_blocked_silently() {
    let (port, broker) = start_broker().await;
    let mut publisher = Client::connect_with(port, "guest", "guest", &[])
        .await
        .unwrap();
    publisher.open_channel(1).await;
    let q = publisher
        .declare_queue(1, "", FieldTable::new())
        .await
        .queue;
    broker.alarms.set(Alarm::Disk, true);
    tokio::time::sleep(Duration::from_millis(50)).await;
    publisher.publish(1, "", &q, b"x", false).await;
    publisher
        .send(
            1,
            QueuePurge {
                queue: q.as_str().into(),
                no_wait: false,
            },
        )
        .await;
    publisher.expect_silence(200).await;
    broker.alarms.set(Alarm::Disk, false);
    match publisher.method().await {
        (1, Method::QueuePurgeOk(ok)) => assert_eq!(ok.message_count, 1),
        other => panic!("expected purge-ok after the alarm, got {other:?}"),
    }
}

/// RabbitMQ suspends heartbeat monitoring while a connection is blocked (we do not read it,
/// so its silence proves nothing) and resumes it on unblocking.
#[tokio::test]
async fn heartbeat_timeouts_wait_while_blocked_and_resume_after() {
    let (port, broker) = start_broker().await;
    let mut publisher = Client::connect_heartbeat(port, 1).await;
    publisher.open_channel(1).await;
    let q = publisher
        .declare_queue(1, "", FieldTable::new())
        .await
        .queue;
    broker.alarms.set(Alarm::Disk, true);
    tokio::time::sleep(Duration::from_millis(50)).await;
    publisher.publish(1, "", &q, b"x", false).await;
    // Silent for 3.5 heartbeat intervals (the limit is two) while blocked: still open.
    let silent = tokio::time::Instant::now();
    loop {
        match publisher.method_or_closed(Duration::from_millis(500)).await {
            Some((0, Method::ConnectionBlocked(_))) | None => {}
            Some(other) => panic!("unexpected {other:?}"),
        }
        if silent.elapsed() > Duration::from_millis(3500) {
            break;
        }
    }
    broker.alarms.set(Alarm::Disk, false);
    // Unblocked, and still silent: the broker now closes it for missed heartbeats.
    let unblocked = tokio::time::Instant::now();
    let mut saw_unblocked = false;
    loop {
        match publisher.method_or_closed(Duration::from_millis(500)).await {
            Some((0, Method::ConnectionUnblocked(_))) => saw_unblocked = true,
            Some(_) | None if publisher.is_closed() => break,
            Some(_) | None => {}
        }
        assert!(
            unblocked.elapsed() < Duration::from_secs(15),
            "not closed for missed heartbeats after unblocking"
        );
    }
    assert!(saw_unblocked);
    assert!(unblocked.elapsed() >= Duration::from_millis(1500));
}
