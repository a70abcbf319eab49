//! basic.publish frames the connection decodes on its fast path (straight from the payload,
//! without the generic `Method`): a malformed or misplaced one closes the connection with the
//! reply code, text and class/method ids the generic path gave, and a well-formed one still
//! routes.

mod client;

use bytes::{BufMut, BytesMut};
use client::{start_broker, Client, Incoming};
use std::time::Duration;
use warren_codec::*;

/// One method frame with this payload, on this channel.
fn method_frame(channel: u16, payload: &[u8]) -> BytesMut {
    let mut out = BytesMut::new();
    out.put_u8(1);
    out.put_u16(channel);
    out.put_u32(payload.len() as u32);
    out.put_slice(payload);
    out.put_u8(FRAME_END);
    out
}

/// The connection.close the broker answers with (generous wait: a loaded CI machine).
async fn connection_close(c: &mut Client) -> ConnectionClose {
    match c.method_or_closed(Duration::from_secs(20)).await {
        Some((0, Method::ConnectionClose(close))) => close,
        other => panic!("expected connection.close, got {other:?}"),
    }
}

fn assert_close(close: &ConnectionClose, code: ReplyCode, text: &str) {
    assert_eq!(close.reply_code, code as u16, "{close:?}");
    assert!(close.reply_text.contains(text), "{close:?}");
    assert_eq!((close.class_id, close.method_id), (60, 40), "{close:?}");
}

#[tokio::test]
async fn a_truncated_publish_is_a_syntax_error() {
    let (port, _broker) = start_broker().await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    // Exchange of 5 bytes, of which one arrives.
    c.send_raw(&method_frame(1, &[0, 60, 0, 40, 0, 0, 5, b'a']))
        .await;
    let close = connection_close(&mut c).await;
    assert_close(&close, ReplyCode::SyntaxError, "payload ends early");
}

#[tokio::test]
async fn a_routing_key_that_is_not_utf8_is_a_syntax_error() {
    let (port, _broker) = start_broker().await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    c.send_raw(&method_frame(1, &[0, 60, 0, 40, 0, 0, 0, 2, 0xff, 0xfe, 0]))
        .await;
    let close = connection_close(&mut c).await;
    assert_close(&close, ReplyCode::SyntaxError, "not UTF-8");
}

#[tokio::test]
async fn a_publish_on_a_channel_never_opened_is_a_channel_error() {
    let (port, _broker) = start_broker().await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    c.publish(2, "", "q", b"x", false).await;
    let close = connection_close(&mut c).await;
    assert_close(&close, ReplyCode::ChannelError, "expected 'channel.open'");
}

/// A client whose frames cross the broker's channel.close (RabbitMQ's Java client on Netty
/// writes close-ok ahead of a method its application issued just before): the late frames
/// are dropped, the connection lives on, and the channel number opens again.
#[tokio::test]
async fn frames_after_the_close_ok_of_a_channel_the_broker_closed_are_dropped() {
    let (port, _broker) = start_broker().await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    c.publish(1, "no-such-exchange", "k", b"refused", false)
        .await;
    let (ch, Method::ChannelClose(close)) = c.method().await else {
        panic!("expected channel.close")
    };
    assert_eq!((ch, close.reply_code), (1, 404), "{close:?}");
    c.send(1, ChannelCloseOk).await;
    let qos = BasicQos {
        prefetch_size: 0,
        prefetch_count: 0,
        global: false,
    };
    c.send(1, qos.clone()).await;
    c.publish(1, "", "late", b"late", false).await;
    c.expect_silence(200).await;
    c.open_channel(1).await;
    c.send(1, qos).await;
    assert!(matches!(c.method().await, (1, Method::BasicQosOk(_))));
    // A number the broker never closed is still a connection error.
    c.publish(2, "", "q", b"x", false).await;
    let close = connection_close(&mut c).await;
    assert_close(&close, ReplyCode::ChannelError, "expected 'channel.open'");
}

#[tokio::test]
async fn a_publish_before_the_previous_ones_content_is_an_unexpected_frame() {
    let (port, _broker) = start_broker().await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    let publish = [0, 60, 0, 40, 0, 0, 0, 1, b'q', 0];
    c.send_raw(&method_frame(1, &publish)).await;
    c.send_raw(&method_frame(1, &publish)).await;
    let close = connection_close(&mut c).await;
    assert_close(
        &close,
        ReplyCode::UnexpectedFrame,
        "got non content header frame instead (basic.publish)",
    );
}

#[tokio::test]
async fn a_publish_on_channel_zero_is_a_channel_error() {
    let (port, _broker) = start_broker().await;
    let mut c = Client::connect(port).await;
    c.send_raw(&method_frame(0, &[0, 60, 0, 40, 0, 0, 0, 1, b'q', 0]))
        .await;
    let close = connection_close(&mut c).await;
    assert_close(
        &close,
        ReplyCode::ChannelError,
        "unexpected method basic.publish on channel 0",
    );
}

#[tokio::test]
async fn a_well_formed_publish_routes_with_its_flags() {
    let (port, _broker) = start_broker().await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    c.declare_queue(1, "fast-path", FieldTable::new()).await;
    // Mandatory to a key with no queue: returned 312 NO_ROUTE with the publish's names.
    c.publish(1, "", "no-such-queue", b"returned", true).await;
    match c.next().await {
        Incoming::Content(_, method, _, body) => match method {
            Method::BasicReturn(r) => {
                assert_eq!(r.reply_code, 312);
                assert_eq!(r.exchange.as_str(), "");
                assert_eq!(r.routing_key.as_str(), "no-such-queue");
                assert_eq!(&body[..], b"returned");
            }
            other => panic!("expected basic.return, got {other:?}"),
        },
        other => panic!("expected basic.return, got {other:?}"),
    }
    c.publish(1, "amq.direct", "fast-path", b"unrouted", false)
        .await;
    c.publish(1, "", "fast-path", b"routed", false).await;
    c.send(
        1,
        BasicGet {
            queue: "fast-path".into(),
            no_ack: true,
        },
    )
    .await;
    match c.next().await {
        Incoming::Content(_, method, _, body) => match method {
            Method::BasicGetOk(ok) => {
                assert_eq!(&body[..], b"routed");
                assert_eq!(ok.routing_key.as_str(), "fast-path");
                assert_eq!(ok.message_count, 0);
            }
            other => panic!("expected basic.get-ok, got {other:?}"),
        },
        other => panic!("expected basic.get-ok, got {other:?}"),
    }
}

/// Messages taken whole (an empty body too: a publish with no body frame) that a queue keeps
/// (its copy of them, `Message::compacted`) expire and are dead-lettered whole, their
/// bodies as published (RabbitMQ's Java client's `DeadLetterExchange#deadLetterCycle`
/// found an empty one lost here).
#[tokio::test]
async fn kept_messages_empty_or_not_expire_into_the_dead_letter_queue_whole() {
    let (port, _broker) = start_broker().await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    c.declare_queue(1, "dead", FieldTable::new()).await;
    let mut args = FieldTable::new();
    args.insert("x-message-ttl", FieldValue::I32(1));
    args.insert("x-dead-letter-exchange", FieldValue::string(""));
    args.insert("x-dead-letter-routing-key", FieldValue::string("dead"));
    c.declare_queue(1, "expiring", args).await;
    for body in [&b""[..], b"five!"] {
        c.publish(1, "", "expiring", body, false).await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            c.send(
                1,
                BasicGet {
                    queue: "dead".into(),
                    no_ack: true,
                },
            )
            .await;
            match c.next().await {
                Incoming::Content(_, Method::BasicGetOk(_), _, got) => {
                    assert_eq!(&got[..], body);
                    break;
                }
                Incoming::Method(_, Method::BasicGetEmpty(_)) => {
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "never dead-lettered"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                other => panic!("expected basic.get-ok or get-empty, got {other:?}"),
            }
        }
    }
}
