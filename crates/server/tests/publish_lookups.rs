//! A publishing channel remembers the exchange it last published to and the queue its last
//! publish through the default exchange reached (`warren_broker::versioned_map`). Each change
//! that could make that memory wrong — the exchange deleted, deleted and declared again with
//! another type, its bindings changed, the queue deleted or replaced by a new one of the same
//! name, the user's permission revoked — is made here between two publishes of one channel
//! (from another connection, as an operator would), and the second publish must behave as if
//! nothing had been remembered.

mod client;

use bytes::Bytes;
use client::{start_broker, Client, Incoming};
use warren_broker::access::Permission;
use warren_codec::*;

/// A client with channel 1 open in confirm mode, so every publish is answered (an ack, or a
/// basic.return then an ack, or a channel.close).
async fn publisher(port: u16) -> Client {
    let mut c = Client::connect(port).await;
    c.open_channel(1).await;
    c.send(1, ConfirmSelect { nowait: false }).await;
    assert!(matches!(c.method().await.1, Method::ConfirmSelectOk(_)));
    c
}

/// How the broker answered a mandatory publish on channel 1.
#[derive(Debug, PartialEq)]
enum Answer {
    Routed,
    Returned,
    ChannelClosed(u16, String),
}

async fn publish(c: &mut Client, exchange: &str, key: &str, body: &[u8]) -> Answer {
    c.publish(1, exchange, key, body, true).await;
    match c.next().await {
        Incoming::Method(1, Method::BasicAck(_)) => Answer::Routed,
        Incoming::Content(1, Method::BasicReturn(r), _, _) => {
            assert_eq!((r.reply_code, r.reply_text.as_str()), (312, "NO_ROUTE"));
            let Incoming::Method(1, Method::BasicAck(_)) = c.next().await else {
                panic!("expected the confirm after the return")
            };
            Answer::Returned
        }
        Incoming::Method(1, Method::ChannelClose(close)) => {
            c.send(1, ChannelCloseOk).await;
            Answer::ChannelClosed(close.reply_code, close.reply_text.to_string())
        }
        other => panic!("unexpected answer to a publish: {other:?}"),
    }
}

/// The next message of `queue` (basic.get, no-ack), None when it is empty.
async fn get(c: &mut Client, queue: &str) -> Option<Bytes> {
    c.send(
        1,
        BasicGet {
            queue: queue.into(),
            no_ack: true,
        },
    )
    .await;
    match c.next().await {
        Incoming::Content(1, Method::BasicGetOk(_), _, body) => Some(body),
        Incoming::Method(1, Method::BasicGetEmpty(_)) => None,
        other => panic!("unexpected answer to basic.get: {other:?}"),
    }
}

/// An operator's connection, channel 1, making the changes between two publishes.
struct Admin(Client);

impl Admin {
    async fn connect(port: u16) -> Admin {
        let mut c = Client::connect(port).await;
        c.open_channel(1).await;
        Admin(c)
    }

    async fn call(&mut self, m: impl Into<Method>) -> Method {
        self.0.send(1, m).await;
        self.0.method().await.1
    }

    async fn exchange(&mut self, name: &str, kind: &str) {
        let ok = self
            .call(ExchangeDeclare {
                exchange: name.into(),
                exchange_type: kind.into(),
                ..Default::default()
            })
            .await;
        assert!(matches!(ok, Method::ExchangeDeclareOk(_)), "{ok:?}");
    }

    async fn delete_exchange(&mut self, name: &str) {
        let ok = self
            .call(ExchangeDelete {
                exchange: name.into(),
                ..Default::default()
            })
            .await;
        assert!(matches!(ok, Method::ExchangeDeleteOk(_)), "{ok:?}");
    }

    async fn queue(&mut self, name: &str) {
        self.0.declare_queue(1, name, FieldTable::new()).await;
    }

    async fn delete_queue(&mut self, name: &str) {
        let ok = self
            .call(QueueDelete {
                queue: name.into(),
                ..Default::default()
            })
            .await;
        assert!(matches!(ok, Method::QueueDeleteOk(_)), "{ok:?}");
    }

    async fn bind(&mut self, queue: &str, exchange: &str, key: &str) {
        let ok = self
            .call(QueueBind {
                queue: queue.into(),
                exchange: exchange.into(),
                routing_key: key.into(),
                ..Default::default()
            })
            .await;
        assert!(matches!(ok, Method::QueueBindOk(_)), "{ok:?}");
    }

    async fn unbind(&mut self, queue: &str, exchange: &str, key: &str) {
        let ok = self
            .call(QueueUnbind {
                queue: queue.into(),
                exchange: exchange.into(),
                routing_key: key.into(),
                ..Default::default()
            })
            .await;
        assert!(matches!(ok, Method::QueueUnbindOk(_)), "{ok:?}");
    }
}

#[tokio::test]
async fn a_deleted_exchange_is_not_found_by_the_next_publish() {
    let (port, _broker) = start_broker().await;
    let mut admin = Admin::connect(port).await;
    admin.exchange("x", "direct").await;
    admin.queue("q").await;
    admin.bind("q", "x", "k").await;
    let mut c = publisher(port).await;
    assert_eq!(publish(&mut c, "x", "k", b"one").await, Answer::Routed);
    assert_eq!(get(&mut c, "q").await.as_deref(), Some(&b"one"[..]));

    admin.delete_exchange("x").await;
    assert_eq!(
        publish(&mut c, "x", "k", b"two").await,
        Answer::ChannelClosed(404, "NOT_FOUND - no exchange 'x' in vhost '/'".into())
    );
}

#[tokio::test]
async fn an_exchange_declared_again_routes_by_its_new_type_and_bindings() {
    let (port, _broker) = start_broker().await;
    let mut admin = Admin::connect(port).await;
    admin.exchange("x", "direct").await;
    admin.queue("q1").await;
    admin.queue("q2").await;
    admin.bind("q1", "x", "k").await;
    let mut c = publisher(port).await;
    assert_eq!(publish(&mut c, "x", "k", b"direct").await, Answer::Routed);
    assert_eq!(get(&mut c, "q1").await.as_deref(), Some(&b"direct"[..]));

    admin.delete_exchange("x").await;
    admin.exchange("x", "fanout").await;
    admin.bind("q2", "x", "").await;
    assert_eq!(publish(&mut c, "x", "k", b"fanout").await, Answer::Routed);
    assert_eq!(get(&mut c, "q2").await.as_deref(), Some(&b"fanout"[..]));
    assert_eq!(get(&mut c, "q1").await, None);
}

#[tokio::test]
async fn binding_changes_reach_the_next_publish() {
    let (port, _broker) = start_broker().await;
    let mut admin = Admin::connect(port).await;
    admin.exchange("x", "direct").await;
    admin.queue("q").await;
    let mut c = publisher(port).await;
    assert_eq!(publish(&mut c, "x", "k", b"a").await, Answer::Returned);

    admin.bind("q", "x", "k").await;
    assert_eq!(publish(&mut c, "x", "k", b"b").await, Answer::Routed);
    assert_eq!(get(&mut c, "q").await.as_deref(), Some(&b"b"[..]));

    admin.unbind("q", "x", "k").await;
    assert_eq!(publish(&mut c, "x", "k", b"c").await, Answer::Returned);
    assert_eq!(get(&mut c, "q").await, None);
}

#[tokio::test]
async fn the_default_exchange_reaches_a_queue_declared_again_under_the_same_name() {
    let (port, _broker) = start_broker().await;
    let mut admin = Admin::connect(port).await;
    admin.queue("q").await;
    let mut c = publisher(port).await;
    assert_eq!(publish(&mut c, "", "q", b"first").await, Answer::Routed);
    assert_eq!(get(&mut c, "q").await.as_deref(), Some(&b"first"[..]));

    // Deleted: unroutable.
    admin.delete_queue("q").await;
    assert_eq!(publish(&mut c, "", "q", b"lost").await, Answer::Returned);

    // Declared again: the new queue gets it.
    admin.queue("q").await;
    assert_eq!(publish(&mut c, "", "q", b"second").await, Answer::Routed);
    assert_eq!(get(&mut c, "q").await.as_deref(), Some(&b"second"[..]));

    // Deleted and declared again between two publishes while something still holds the old
    // queue (here the admin's unacknowledged delivery from it): the message must go to the new
    // queue, not to the old one where nobody could ever read it.
    assert_eq!(publish(&mut c, "", "q", b"held").await, Answer::Routed);
    admin
        .0
        .send(
            1,
            BasicGet {
                queue: "q".into(),
                no_ack: false,
            },
        )
        .await;
    assert!(matches!(
        admin.0.next().await,
        Incoming::Content(1, Method::BasicGetOk(_), _, _)
    ));
    admin.delete_queue("q").await;
    admin.queue("q").await;
    assert_eq!(publish(&mut c, "", "q", b"third").await, Answer::Routed);
    assert_eq!(get(&mut c, "q").await.as_deref(), Some(&b"third"[..]));
}

#[tokio::test]
async fn publishes_alternating_between_targets_each_reach_their_own() {
    let (port, _broker) = start_broker().await;
    let mut admin = Admin::connect(port).await;
    admin.queue("q1").await;
    admin.queue("q2").await;
    admin.bind("q2", "amq.direct", "k").await;
    let mut c = publisher(port).await;
    for round in 0..3u8 {
        assert_eq!(publish(&mut c, "", "q1", &[round, 1]).await, Answer::Routed);
        assert_eq!(publish(&mut c, "", "q2", &[round, 2]).await, Answer::Routed);
        assert_eq!(
            publish(&mut c, "amq.direct", "k", &[round, 3]).await,
            Answer::Routed
        );
        assert_eq!(
            publish(&mut c, "", "none", &[round, 4]).await,
            Answer::Returned
        );
    }
    for round in 0..3u8 {
        assert_eq!(get(&mut c, "q1").await.as_deref(), Some(&[round, 1][..]));
    }
    for round in 0..3u8 {
        assert_eq!(get(&mut c, "q2").await.as_deref(), Some(&[round, 2][..]));
        assert_eq!(get(&mut c, "q2").await.as_deref(), Some(&[round, 3][..]));
    }
    assert_eq!(get(&mut c, "q1").await, None);
    assert_eq!(get(&mut c, "q2").await, None);
}

#[tokio::test]
async fn a_revoked_write_permission_refuses_the_next_publish() {
    let (port, broker) = start_broker().await;
    let mut admin = Admin::connect(port).await;
    admin.queue("q").await;
    let mut c = publisher(port).await;
    assert_eq!(publish(&mut c, "", "q", b"allowed").await, Answer::Routed);

    broker
        .access
        .set_permission(
            "/",
            "guest",
            Permission {
                configure: ".*".into(),
                write: "^nothing$".into(),
                read: ".*".into(),
            },
        )
        .unwrap();
    assert_eq!(
        publish(&mut c, "", "q", b"refused").await,
        Answer::ChannelClosed(
            403,
            "ACCESS_REFUSED - access to exchange 'amq.default' in vhost '/' refused for user 'guest'"
                .into()
        )
    );
    assert_eq!(
        get(&mut admin.0, "q").await.as_deref(),
        Some(&b"allowed"[..])
    );
    assert_eq!(get(&mut admin.0, "q").await, None);
}
