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

/// How much later than the other node the served node applies each op.
const LAG: Duration = Duration::from_millis(300);

/// A log whose ops the other node applies at once and the served node `LAG` later, in the
/// log's order: the other node answers a declare while the served one does not know it yet
/// (a node behind the log, as a busy cluster node is for a moment).
struct LaggingLog {
    served_proposes: bool,
    other: Weak<Broker>,
    to_served: tokio::sync::mpsc::UnboundedSender<(Vec<u8>, Option<Answer>)>,
    order: Arc<std::sync::Mutex<()>>,
}

type Answer = tokio::sync::oneshot::Sender<Vec<u8>>;

impl Replicator for LaggingLog {
    fn submit(&self, op: Vec<u8>) -> Submitted {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let _in_order = self.order.lock().unwrap();
        let Some(other) = self.other.upgrade() else {
            return Box::pin(async { Err(ReplicationError("log stopped".into())) });
        };
        let applied = other.apply_replicated(&op);
        let (answer, now) = match self.served_proposes {
            true => (Some(tx), None),
            false => (None, Some(tx)),
        };
        let _ = self.to_served.send((op, answer));
        if let Some(now) = now {
            let _ = now.send(applied);
        }
        Box::pin(async move { rx.await.map_err(|_| ReplicationError("log stopped".into())) })
    }
}

/// The served node (behind the log by `LAG`) and the other node, each served on its port.
async fn start_lagging() -> (u16, u16, Arc<Broker>, Arc<Broker>) {
    let (served, other) = (Broker::new(1 << 30, None), Broker::new(1 << 30, None));
    let (to_served, mut arriving) = tokio::sync::mpsc::unbounded_channel();
    let order = Arc::new(std::sync::Mutex::new(()));
    for (node, served_proposes) in [(&served, true), (&other, false)] {
        node.set_replicator(Arc::new(LaggingLog {
            served_proposes,
            other: Arc::downgrade(&other),
            to_served: to_served.clone(),
            order: order.clone(),
        }));
    }
    let behind = Arc::downgrade(&served);
    tokio::spawn(async move {
        while let Some((op, answer)) = arriving.recv().await {
            tokio::time::sleep(LAG).await;
            let Some(served) = behind.upgrade() else {
                return;
            };
            let applied = served.apply_replicated(&op);
            if let Some(answer) = answer {
                let _ = answer.send(applied);
            }
        }
    });
    let served_port = client::serve(served.clone()).await;
    let other_port = client::serve(other.clone()).await;
    (served_port, other_port, served, other)
}

/// What a client on a node behind the log finds of a queue and an exchange another node has
/// just answered declare-ok for: the passive declares, consume and get look again (a read
/// barrier through the log) before they answer 404, where RabbitMQ's metadata would be on
/// every node already.
#[tokio::test]
async fn a_node_behind_the_log_finds_what_another_node_just_declared() {
    let (served_port, other_port, served, _other) = start_lagging().await;
    let mut declaring = Client::connect(other_port).await;
    declaring.open_channel(1).await;
    declaring
        .declare_queue(1, "declared-there", FieldTable::new())
        .await;
    declaring
        .send(
            1,
            ExchangeDeclare {
                exchange: "x-declared-there".into(),
                exchange_type: "topic".into(),
                ..Default::default()
            },
        )
        .await;
    assert!(matches!(
        declaring.method().await,
        (1, Method::ExchangeDeclareOk(_))
    ));

    let mut looking = Client::connect(served_port).await;
    looking.open_channel(1).await;
    let vhost = served.vhost("/").unwrap();
    assert!(
        vhost.queue("declared-there").is_none(),
        "the served node is still behind"
    );
    looking
        .send(
            1,
            QueueDeclare {
                queue: "declared-there".into(),
                passive: true,
                ..Default::default()
            },
        )
        .await;
    match looking.method().await {
        (1, Method::QueueDeclareOk(ok)) => assert_eq!(ok.queue.as_str(), "declared-there"),
        other => panic!("expected declare-ok, got {other:?}"),
    }
    looking
        .send(
            1,
            ExchangeDeclare {
                exchange: "x-declared-there".into(),
                exchange_type: "topic".into(),
                passive: true,
                ..Default::default()
            },
        )
        .await;
    assert!(matches!(
        looking.method().await,
        (1, Method::ExchangeDeclareOk(_))
    ));

    // Declared there again and consumed here at once.
    declaring
        .declare_queue(1, "consumed-here", FieldTable::new())
        .await;
    looking
        .send(
            1,
            BasicConsume {
                queue: "consumed-here".into(),
                consumer_tag: "c".into(),
                ..Default::default()
            },
        )
        .await;
    assert!(matches!(
        looking.method().await,
        (1, Method::BasicConsumeOk(_))
    ));

    // What no node has is still 404, once this node has caught up.
    looking
        .send(
            1,
            QueueDeclare {
                queue: "nowhere".into(),
                passive: true,
                ..Default::default()
            },
        )
        .await;
    match looking.method().await {
        (1, Method::ChannelClose(close)) => {
            assert_eq!(close.reply_code, 404);
            assert_eq!(
                close.reply_text.as_str(),
                "NOT_FOUND - no queue 'nowhere' in vhost '/'"
            );
        }
        other => panic!("expected a 404 channel close, got {other:?}"),
    }
}
