//! A broker whose definitions changes go through a replicator, as in a cluster: the AMQP
//! methods that change definitions wait for the change, answer as they do on a single node,
//! and the frames a client pipelined behind them are handled after them, in order. The
//! replicator here is an in-process log that applies every op (after a delay) to the
//! proposing broker and to a second one standing for another node.

mod client;

use client::{Client, Incoming};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::net::TcpListener;
use warren_broker::{Broker, ReplicationError, Replicator, Submitted};
use warren_codec::*;
use warren_server::ServerConfig;

/// Applies each op, one at a time in submission order, to the proposer then the other node.
struct DelayedLog {
    proposer: Weak<Broker>,
    other: Arc<Broker>,
    order: Arc<tokio::sync::Mutex<()>>,
}

impl Replicator for DelayedLog {
    fn submit(&self, op: Vec<u8>) -> Submitted {
        let (proposer, other, order) = (
            self.proposer.clone(),
            self.other.clone(),
            self.order.clone(),
        );
        // Queued for the log at once, so submissions keep their order.
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let _in_order = order.lock().await;
            tokio::time::sleep(Duration::from_millis(30)).await;
            let Some(proposer) = proposer.upgrade() else {
                return;
            };
            let result = proposer.apply_replicated(&op);
            other.apply_replicated(&op);
            let _ = tx.send(result);
        });
        Box::pin(async move { rx.await.map_err(|_| ReplicationError("log stopped".into())) })
    }
}

/// The served broker (with the replicator) and the other node.
async fn start() -> (u16, Arc<Broker>, Arc<Broker>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let broker = Broker::new(1 << 30, None);
    let other = Broker::new(1 << 30, None);
    broker.set_replicator(Arc::new(DelayedLog {
        proposer: Arc::downgrade(&broker),
        other: other.clone(),
        order: Arc::default(),
    }));
    tokio::spawn(warren_server::run(
        listener,
        broker.clone(),
        ServerConfig::default(),
        std::future::pending(),
    ));
    (port, broker, other)
}

#[tokio::test]
async fn pipelined_declares_bind_and_publish_are_answered_in_order() {
    let (port, broker, other) = start().await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    // All sent before any answer: the publish must find the binding made.
    c.send(
        1,
        ExchangeDeclare {
            exchange: "x".into(),
            exchange_type: "direct".into(),
            ..Default::default()
        },
    )
    .await;
    c.send(
        1,
        QueueDeclare {
            queue: "q".into(),
            ..Default::default()
        },
    )
    .await;
    c.send(
        1,
        QueueBind {
            queue: "q".into(),
            exchange: "x".into(),
            routing_key: "k".into(),
            ..Default::default()
        },
    )
    .await;
    c.publish(1, "x", "k", b"routed", false).await;
    c.send(
        1,
        BasicGet {
            queue: "q".into(),
            no_ack: true,
        },
    )
    .await;
    assert!(matches!(
        c.method().await,
        (1, Method::ExchangeDeclareOk(_))
    ));
    match c.method().await {
        (1, Method::QueueDeclareOk(ok)) => assert_eq!(ok.queue.as_str(), "q"),
        other => panic!("expected declare-ok, got {other:?}"),
    }
    assert!(matches!(c.method().await, (1, Method::QueueBindOk(_))));
    match c.next().await {
        Incoming::Content(1, Method::BasicGetOk(_), _, body) => assert_eq!(&body[..], b"routed"),
        _ => panic!("the message published after the bind is routed"),
    }
    for node in [&broker, &other] {
        let vhost = node.vhost("/").unwrap();
        assert!(vhost.exchange("x").is_some() && vhost.queue("q").is_some());
        assert_eq!(vhost.exchange("x").unwrap().bindings().len(), 1);
    }
}

#[tokio::test]
async fn a_server_named_queue_has_the_same_name_on_every_node() {
    let (port, _broker, other) = start().await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    let ok = c.declare_queue(1, "", FieldTable::new()).await;
    assert!(ok.queue.starts_with("amq.gen-"), "{}", ok.queue);
    assert!(other.vhost("/").unwrap().queue(&ok.queue).is_some());
    // The empty name means the last declared queue, as on a single node.
    c.send(
        1,
        QueueDelete {
            queue: "".into(),
            ..Default::default()
        },
    )
    .await;
    assert!(matches!(c.method().await, (1, Method::QueueDeleteOk(_))));
    assert!(other.vhost("/").unwrap().queue(&ok.queue).is_none());
}

#[tokio::test]
async fn an_inequivalent_redeclare_closes_the_channel_with_rabbitmqs_text() {
    let (port, _broker, other) = start().await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    c.send(
        1,
        QueueDeclare {
            queue: "durable-q".into(),
            durable: true,
            ..Default::default()
        },
    )
    .await;
    assert!(matches!(c.method().await, (1, Method::QueueDeclareOk(_))));
    c.send(
        1,
        QueueDeclare {
            queue: "durable-q".into(),
            durable: false,
            ..Default::default()
        },
    )
    .await;
    match c.method().await {
        (1, Method::ChannelClose(close)) => {
            assert_eq!(close.reply_code, 406);
            assert_eq!(
                close.reply_text.as_str(),
                "PRECONDITION_FAILED - inequivalent arg 'durable' for queue 'durable-q' in vhost '/': received 'false' but current is 'true'"
            );
            assert_eq!((close.class_id, close.method_id), (50, 10));
        }
        other => panic!("expected channel.close, got {other:?}"),
    }
    assert!(
        other
            .vhost("/")
            .unwrap()
            .queue("durable-q")
            .unwrap()
            .durable
    );
    // The connection goes on.
    c.send(1, ChannelCloseOk).await;
    c.open_channel(2).await;
}

#[tokio::test]
async fn exclusive_queues_are_declared_on_this_node_only() {
    let (port, broker, other) = start().await;
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    c.send(
        1,
        QueueDeclare {
            queue: "mine".into(),
            exclusive: true,
            ..Default::default()
        },
    )
    .await;
    assert!(matches!(c.method().await, (1, Method::QueueDeclareOk(_))));
    c.send(
        1,
        QueueBind {
            queue: "mine".into(),
            exchange: "amq.direct".into(),
            routing_key: "k".into(),
            ..Default::default()
        },
    )
    .await;
    assert!(matches!(c.method().await, (1, Method::QueueBindOk(_))));
    assert!(broker.vhost("/").unwrap().queue("mine").is_some());
    assert!(other.vhost("/").unwrap().queue("mine").is_none());
}
