//! Policies as a client sees them over the wire: a policy set on the broker changes what a
//! confirming publisher is told (reject-publish nacks) and where an unroutable mandatory
//! message goes (the policy's alternate exchange: routed, so neither returned nor lost).

mod client;

use client::{start_broker, Client, Incoming};
use serde_json::json;
use warren_broker::{Broker, Policy, PolicyKind};
use warren_codec::*;

fn set_policy(broker: &Broker, name: &str, pattern: &str, definition: serde_json::Value) {
    let policy = Policy::new(PolicyKind::Policy, "/", name, pattern, "all", 0, definition).unwrap();
    broker.vhost("/").unwrap().set_policy(policy).unwrap();
}

async fn confirm_mode(c: &mut Client) {
    c.open_channel(1).await;
    c.send(1, ConfirmSelect { nowait: false }).await;
    assert!(matches!(c.method().await.1, Method::ConfirmSelectOk(_)));
}

#[tokio::test]
async fn reject_publish_policy_nacks_publishes_over_the_limit() {
    let (port, broker) = start_broker().await;
    let mut c = Client::connect(port).await;
    confirm_mode(&mut c).await;
    c.declare_queue(1, "bounded", FieldTable::new()).await;
    set_policy(
        &broker,
        "bound",
        "^bounded$",
        json!({"max-length": 1, "overflow": "reject-publish"}),
    );
    c.publish(1, "", "bounded", b"fits", false).await;
    c.publish(1, "", "bounded", b"over", false).await;
    let Incoming::Method(_, Method::BasicAck(ack)) = c.next().await else {
        panic!("the first publish is confirmed")
    };
    assert_eq!(ack.delivery_tag, 1);
    let Incoming::Method(_, Method::BasicNack(nack)) = c.next().await else {
        panic!("the second is refused")
    };
    assert_eq!(nack.delivery_tag, 2);
    assert_eq!(
        c.declare_queue(1, "bounded", FieldTable::new())
            .await
            .message_count,
        1
    );
}

#[tokio::test]
async fn alternate_exchange_policy_routes_mandatory_unroutables() {
    let (port, broker) = start_broker().await;
    let mut c = Client::connect(port).await;
    confirm_mode(&mut c).await;
    c.declare_queue(1, "caught", FieldTable::new()).await;
    c.send(
        1,
        QueueBind {
            queue: "caught".into(),
            exchange: "amq.fanout".into(),
            ..Default::default()
        },
    )
    .await;
    assert!(matches!(c.method().await.1, Method::QueueBindOk(_)));
    set_policy(
        &broker,
        "ae",
        "^amq\\.direct$",
        json!({"alternate-exchange": "amq.fanout"}),
    );
    c.publish(1, "amq.direct", "nowhere", b"caught", true).await;
    // Acked, not returned first: the alternate exchange routed it.
    let Incoming::Method(_, Method::BasicAck(ack)) = c.next().await else {
        panic!("confirmed without a basic.return")
    };
    assert_eq!(ack.delivery_tag, 1);
    assert_eq!(
        c.declare_queue(1, "caught", FieldTable::new())
            .await
            .message_count,
        1
    );
}
