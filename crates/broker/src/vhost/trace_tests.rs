//! The firehose (`vhost/trace.rs`) through `VHost::publish` and `VHost::trace_deliver`: the
//! copies' routing keys, headers and bodies as RabbitMQ 3.13's `rabbit_trace` makes them,
//! nothing while tracing is off, and no copy of a copy.

use super::route_tests::{queue, vhost, CONN};
use super::{Publish, PublishScratch, TraceOrigin};
use crate::confirm::ConfirmTo;
use crate::names::TRACE_EXCHANGE;
use crate::{Message, QueuedMessage, VHost};
use bytes::Bytes;
use std::sync::Arc;
use warren_codec::{
    BasicProperties, ContentHeader, FieldTable, FieldValue, ShortStr, BASIC_CLASS_ID,
};

/// The connection `traced_vhost` opens, its name and the channel publishing and consuming.
const ORIGIN: TraceOrigin<'static> = TraceOrigin {
    connection: 9,
    channel: 3,
    user: "alice",
};
const CONNECTION_NAME: &str = "127.0.0.1:5555 -> 127.0.0.1:5672";

/// A vhost with queue `q` bound to amq.direct with key `k`, and queue `firehose` bound to
/// the trace exchange with `#`.
fn traced_vhost() -> Arc<VHost> {
    let v = vhost();
    queue(&v, "q");
    queue(&v, "firehose");
    v.bind_queue("q", "amq.direct", "k".into(), FieldTable::new(), CONN)
        .unwrap();
    v.bind_queue(
        "firehose",
        TRACE_EXCHANGE,
        "#".into(),
        FieldTable::new(),
        CONN,
    )
    .unwrap();
    let (events, _) = crate::event_channel::event_channel();
    v.open_connection(
        ORIGIN.connection,
        ORIGIN.user,
        CONNECTION_NAME.into(),
        events,
    )
    .unwrap();
    v
}

/// A copy's first headers, describing the original, in RabbitMQ's order.
const DESCRIBED: [&str; 4] = ["exchange_name", "routing_keys", "properties", "node"];
/// The headers naming who published or consumed, in RabbitMQ's order.
const WHO: [&str; 4] = ["vhost", "connection", "channel", "user"];

fn publish(v: &VHost, exchange: &str, keys: &[&str], properties: &BasicProperties, body: &str) {
    let exchange = v.exchange(exchange).unwrap();
    let raw = ContentHeader::new(BASIC_CLASS_ID, 0, properties).properties;
    let message = Arc::new(Message::new(
        exchange.name.clone(),
        ShortStr::from(keys[0]),
        properties,
        raw,
        Bytes::copy_from_slice(body.as_bytes()),
    ));
    let publish = Publish {
        exchange: &exchange,
        message: &message,
        routing_keys: keys,
        headers: properties.headers.as_ref(),
        confirm_to: ConfirmTo::Nobody,
        origin: ORIGIN,
    };
    v.publish(publish, &mut PublishScratch::default()).unwrap();
}

fn take(v: &VHost, queue: &str) -> Option<QueuedMessage> {
    v.queue(queue).unwrap().get(true).map(|(m, _)| m)
}

/// The copy's headers (its only property).
fn headers(copy: &QueuedMessage) -> FieldTable {
    let header = ContentHeader {
        class_id: BASIC_CLASS_ID,
        body_size: 0,
        properties: copy.message.properties_bytes(),
    };
    let properties = header.properties().unwrap();
    assert_eq!(
        BasicProperties {
            headers: None,
            ..properties.clone()
        },
        BasicProperties::default(),
        "a copy has no property but its headers"
    );
    properties.headers.unwrap()
}

fn text(s: &str) -> FieldValue {
    FieldValue::string(s)
}

fn keys(table: &FieldTable) -> Vec<&str> {
    table.iter().map(|(k, _)| k.as_str()).collect()
}

#[test]
fn every_vhost_has_the_trace_exchange_topic_durable_and_internal() {
    let v = vhost();
    let x = v.exchange(TRACE_EXCHANGE).unwrap();
    assert_eq!(x.kind.as_str(), "topic");
    assert!(x.durable && x.internal && !x.auto_delete);
    assert!(x.publish_refusal("/").is_some());
    assert!(!v.tracing());
}

#[test]
fn off_nothing_is_copied() {
    let v = traced_vhost();
    publish(&v, "amq.direct", &["k"], &BasicProperties::default(), "b");
    let delivered = take(&v, "q").unwrap();
    v.trace_deliver("q", &delivered, ORIGIN);
    assert!(v.queue("firehose").unwrap().message_count() == 0);
}

#[test]
fn a_publish_is_copied_with_rabbitmqs_headers() {
    let v = traced_vhost();
    v.set_tracing(true, "rabbit@node1");
    let mut original_headers = FieldTable::new();
    original_headers.insert("CC", FieldValue::Array(vec![text("k")]));
    let properties = BasicProperties {
        content_type: Some("text/plain".into()),
        headers: Some(original_headers.clone()),
        delivery_mode: Some(2),
        priority: Some(5),
        message_id: Some("m1".into()),
        timestamp: Some(1_700_000_000),
        ..BasicProperties::default()
    };
    publish(&v, "amq.direct", &["k", "other"], &properties, "hello");
    let copy = take(&v, "firehose").expect("the publish's copy");
    assert_eq!(copy.message.exchange(), TRACE_EXCHANGE);
    assert_eq!(copy.message.routing_key(), "publish.amq.direct");
    assert_eq!(copy.message.body(), b"hello");
    assert!(!copy.message.persistent, "copies are transient");
    let h = headers(&copy);
    assert_eq!(keys(&h)[..4], DESCRIBED);
    assert_eq!(keys(&h)[4..], [WHO.as_slice(), &["routed_queues"]].concat());
    assert_eq!(h.get("exchange_name"), Some(&text("amq.direct")));
    assert_eq!(
        h.get("routing_keys"),
        Some(&FieldValue::Array(vec![text("k"), text("other")]))
    );
    assert_eq!(h.get("node"), Some(&text("rabbit@node1")));
    assert_eq!(h.get("vhost"), Some(&text("/")));
    assert_eq!(h.get("connection"), Some(&text(CONNECTION_NAME)));
    assert_eq!(h.get("channel"), Some(&FieldValue::I32(3)));
    assert_eq!(h.get("user"), Some(&text("alice")));
    assert_eq!(
        h.get("routed_queues"),
        Some(&FieldValue::Array(vec![text("q")]))
    );
    let Some(FieldValue::Table(props)) = h.get("properties") else {
        panic!("properties is a table: {h:?}");
    };
    // RabbitMQ's fold puts them in reverse field order; integers as signed 32-bit.
    assert_eq!(
        keys(props),
        [
            "timestamp",
            "message_id",
            "priority",
            "delivery_mode",
            "headers",
            "content_type"
        ]
    );
    assert_eq!(
        props.get("timestamp"),
        Some(&FieldValue::I32(1_700_000_000))
    );
    assert_eq!(props.get("priority"), Some(&FieldValue::I32(5)));
    assert_eq!(props.get("delivery_mode"), Some(&FieldValue::I32(2)));
    assert_eq!(
        props.get("headers"),
        Some(&FieldValue::Table(original_headers))
    );
    assert_eq!(props.get("content_type"), Some(&text("text/plain")));
    assert!(take(&v, "firehose").is_none(), "one copy per publish");
}

#[test]
fn an_unroutable_publish_to_the_default_exchange_is_copied_with_no_queues() {
    let v = traced_vhost();
    v.set_tracing(true, "n");
    publish(&v, "", &["nowhere"], &BasicProperties::default(), "x");
    let copy = take(&v, "firehose").unwrap();
    // The default exchange's name is "": RabbitMQ's key is "publish." then.
    assert_eq!(copy.message.routing_key(), "publish.");
    let h = headers(&copy);
    assert_eq!(h.get("exchange_name"), Some(&text("")));
    assert_eq!(h.get("routed_queues"), Some(&FieldValue::Array(vec![])));
}

#[test]
fn a_delivery_is_copied_and_a_copys_delivery_is_not() {
    let v = traced_vhost();
    publish(
        &v,
        "amq.direct",
        &["k"],
        &BasicProperties::default(),
        "body",
    );
    v.set_tracing(true, "n");
    let mut delivered = take(&v, "q").unwrap();
    delivered.redelivered = true;
    // The HTTP API's get: no connection of the vhost's.
    v.trace_deliver("q", &delivered, TraceOrigin::http_api("guest"));
    let copy = take(&v, "firehose").expect("the delivery's copy");
    assert_eq!(copy.message.routing_key(), "deliver.q");
    assert_eq!(copy.message.body(), b"body");
    let h = headers(&copy);
    assert_eq!(keys(&h)[..4], DESCRIBED);
    assert_eq!(keys(&h)[4..], [["redelivered"].as_slice(), &WHO].concat());
    assert_eq!(h.get("redelivered"), Some(&FieldValue::I32(1)));
    assert_eq!(h.get("connection"), Some(&text("HTTP API")));
    assert_eq!(h.get("channel"), Some(&FieldValue::I32(0)));
    assert_eq!(h.get("user"), Some(&text("guest")));
    assert_eq!(
        h.get("routing_keys"),
        Some(&FieldValue::Array(vec![text("k")]))
    );
    assert_eq!(
        h.get("properties"),
        Some(&FieldValue::Table(FieldTable::new()))
    );
    // Consuming the firehose does not feed it.
    v.trace_deliver("firehose", &copy, ORIGIN);
    assert!(take(&v, "firehose").is_none());
}

#[test]
fn off_again_nothing_more_is_copied() {
    let v = traced_vhost();
    v.set_tracing(true, "n");
    v.set_tracing(false, "n");
    assert!(!v.tracing());
    publish(&v, "amq.direct", &["k"], &BasicProperties::default(), "b");
    assert!(take(&v, "q").is_some());
    assert!(take(&v, "firehose").is_none());
}
