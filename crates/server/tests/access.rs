//! Vhosts, users and permissions through the whole server: connection.open refuses unknown
//! vhosts and users without access (530), every AMQP operation is checked against the user's
//! configure/write/read permissions and topic permissions (403) with RabbitMQ's texts, a
//! deleted vhost closes its connections, vhost limits hold, and users, vhosts and each vhost's
//! durable queues and messages survive a restart.

mod client;

use client::{serve, start_broker, Client, Incoming};
use std::sync::Arc;
use warren_broker::access::{Permission, TopicPermission};
use warren_broker::{Broker, VHostLimits};
use warren_codec::*;
use warren_store::{Backend, CrashMode, FaultyBackend, Store, StoreOptions};

async fn start_on(disk: Arc<FaultyBackend>) -> (u16, Arc<Broker>) {
    let backend: Arc<dyn Backend> = disk;
    let (store, recovered) = Store::open_with_backend(backend, StoreOptions::default()).unwrap();
    let broker = Broker::new(1 << 30, Some(store));
    broker.recover(recovered);
    (serve(broker.clone()).await, broker)
}

fn perm(configure: &str, write: &str, read: &str) -> Permission {
    Permission {
        configure: configure.into(),
        write: write.into(),
        read: read.into(),
    }
}

/// A vhost "v" with user "u" (password "pw"): configure on cfg-*, write on wr-*, read on
/// rd-*, and all three on all-*. Guest gets full permissions there to set things up.
fn restricted_vhost(broker: &Broker) {
    broker.add_vhost("v").unwrap();
    broker.access.put_user("u", Some("pw"), vec![]).unwrap();
    broker
        .access
        .set_permission("v", "u", perm("^(cfg|all)-", "^(wr|all)-", "^(rd|all)-"))
        .unwrap();
    broker
        .access
        .set_permission("v", "guest", Permission::full())
        .unwrap();
}

fn connection_refused(close: Method) -> (u16, String) {
    match close {
        Method::ConnectionClose(c) => (c.reply_code, c.reply_text.to_string()),
        other => panic!("expected connection.close, got {other:?}"),
    }
}

/// The reply to a method on `ch`: Ok for the -ok, Err((code, text)) for channel.close.
async fn reply(c: &mut Client, ch: u16) -> Result<Method, (u16, String)> {
    loop {
        match c.next().await {
            Incoming::Method(got, Method::ChannelClose(close)) if got == ch => {
                c.send(ch, ChannelCloseOk).await;
                return Err((close.reply_code, close.reply_text.to_string()));
            }
            Incoming::Method(got, m) | Incoming::Content(got, m, _, _) if got == ch => {
                return Ok(m)
            }
            _ => {}
        }
    }
}

/// Sends `m` on a fresh channel and returns its reply.
async fn try_method(
    c: &mut Client,
    ch: u16,
    m: impl Into<Method>,
) -> Result<Method, (u16, String)> {
    // Deliveries to consumers on other channels may come first: `reply` skips them.
    c.send(ch, ChannelOpen).await;
    assert!(matches!(reply(c, ch).await, Ok(Method::ChannelOpenOk(_))));
    c.send(ch, m).await;
    reply(c, ch).await
}

fn refused(text: &str) -> Result<Method, (u16, String)> {
    Err((403, format!("ACCESS_REFUSED - {text}")))
}

fn queue_declare(name: &str) -> QueueDeclare {
    QueueDeclare {
        queue: name.into(),
        ..Default::default()
    }
}

fn exchange_declare(name: &str, kind: &str) -> ExchangeDeclare {
    ExchangeDeclare {
        exchange: name.into(),
        exchange_type: kind.into(),
        ..Default::default()
    }
}

/// Guest, connected to "v", declares `queues` and `exchanges` of `kind` there on channel 1.
async fn admin_declares(port: u16, queues: &[&str], exchanges: &[&str], kind: &str) -> Client {
    let mut admin = Client::connect_vhost(port, "guest", "guest", "v")
        .await
        .unwrap();
    admin.open_channel(1).await;
    for q in queues {
        admin.declare_queue(1, q, FieldTable::new()).await;
    }
    for x in exchanges {
        admin.send(1, exchange_declare(x, kind)).await;
        assert!(matches!(
            admin.method().await.1,
            Method::ExchangeDeclareOk(_)
        ));
    }
    admin
}

#[tokio::test]
async fn connection_open_needs_a_vhost_the_user_may_use() {
    let (port, broker) = start_broker().await;
    let err = Client::connect_vhost(port, "guest", "guest", "nope")
        .await
        .err();
    assert_eq!(
        connection_refused(err.expect("refused")),
        (530, "NOT_ALLOWED - vhost nope not found".into())
    );
    broker.add_vhost("other").unwrap();
    let err = Client::connect_vhost(port, "guest", "guest", "other")
        .await
        .err();
    assert_eq!(
        connection_refused(err.expect("refused")),
        (
            530,
            "NOT_ALLOWED - access to vhost 'other' refused for user 'guest'".into()
        )
    );
    broker
        .access
        .set_permission("other", "guest", perm("", "", ""))
        .unwrap();
    // Any permission entry opens the vhost, even one that allows nothing.
    assert!(Client::connect_vhost(port, "guest", "guest", "other")
        .await
        .is_ok());
    // A wrong password is refused before the vhost is looked at.
    let err = Client::connect_vhost(port, "guest", "nope", "other")
        .await
        .err();
    assert_eq!(connection_refused(err.expect("refused")).0, 403);
}

#[tokio::test]
async fn declares_and_deletes_need_configure() {
    let (port, broker) = start_broker().await;
    restricted_vhost(&broker);
    let mut c = Client::connect_vhost(port, "u", "pw", "v").await.unwrap();
    assert!(matches!(
        try_method(&mut c, 1, queue_declare("cfg-q")).await,
        Ok(Method::QueueDeclareOk(_))
    ));
    assert_eq!(
        try_method(&mut c, 2, queue_declare("rd-q")).await,
        refused("access to queue 'rd-q' in vhost 'v' refused for user 'u'")
    );
    assert!(matches!(
        try_method(&mut c, 3, exchange_declare("cfg-x", "direct")).await,
        Ok(Method::ExchangeDeclareOk(_))
    ));
    assert_eq!(
        try_method(&mut c, 4, exchange_declare("wr-x", "direct")).await,
        refused("access to exchange 'wr-x' in vhost 'v' refused for user 'u'")
    );
    let delete = |name: &str| QueueDelete {
        queue: name.into(),
        ..Default::default()
    };
    assert!(matches!(
        try_method(&mut c, 5, delete("cfg-q")).await,
        Ok(Method::QueueDeleteOk(_))
    ));
    assert_eq!(
        try_method(&mut c, 6, delete("wr-q")).await,
        refused("access to queue 'wr-q' in vhost 'v' refused for user 'u'")
    );
    let delete_x = |name: &str| ExchangeDelete {
        exchange: name.into(),
        ..Default::default()
    };
    assert!(matches!(
        try_method(&mut c, 7, delete_x("cfg-x")).await,
        Ok(Method::ExchangeDeleteOk(_))
    ));
    assert_eq!(
        try_method(&mut c, 8, delete_x("rd-x")).await,
        refused("access to exchange 'rd-x' in vhost 'v' refused for user 'u'")
    );
    // A new queue with a dead-letter exchange also needs read on itself and write on it.
    let mut args = FieldTable::new();
    args.insert("x-dead-letter-exchange", FieldValue::string("rd-dlx"));
    let with_dlx = QueueDeclare {
        queue: "all-q".into(),
        arguments: args,
        ..Default::default()
    };
    assert_eq!(
        try_method(&mut c, 9, with_dlx).await,
        refused("access to exchange 'rd-dlx' in vhost 'v' refused for user 'u'")
    );
}

#[tokio::test]
async fn passive_declares_need_any_permission() {
    let (port, broker) = start_broker().await;
    restricted_vhost(&broker);
    admin_declares(port, &["rd-p", "none-p"], &[], "direct").await;
    let mut c = Client::connect_vhost(port, "u", "pw", "v").await.unwrap();
    let passive = |name: &str| QueueDeclare {
        queue: name.into(),
        passive: true,
        ..Default::default()
    };
    assert!(matches!(
        try_method(&mut c, 1, passive("rd-p")).await,
        Ok(Method::QueueDeclareOk(_))
    ));
    assert_eq!(
        try_method(&mut c, 2, passive("none-p")).await,
        refused("access to queue 'none-p' in vhost 'v' refused for user 'u'")
    );
    let passive_x = |name: &str| ExchangeDeclare {
        exchange: name.into(),
        passive: true,
        ..Default::default()
    };
    assert_eq!(
        try_method(&mut c, 3, passive_x("amq.direct")).await,
        refused("access to exchange 'amq.direct' in vhost 'v' refused for user 'u'")
    );
}

#[tokio::test]
async fn bindings_need_write_on_the_destination_and_read_on_the_source() {
    let (port, broker) = start_broker().await;
    restricted_vhost(&broker);
    admin_declares(port, &["wr-q", "rd-q"], &["rd-x", "wr-x"], "direct").await;
    let mut c = Client::connect_vhost(port, "u", "pw", "v").await.unwrap();
    let bind = |q: &str, x: &str| QueueBind {
        queue: q.into(),
        exchange: x.into(),
        routing_key: "k".into(),
        ..Default::default()
    };
    assert!(matches!(
        try_method(&mut c, 1, bind("wr-q", "rd-x")).await,
        Ok(Method::QueueBindOk(_))
    ));
    assert_eq!(
        try_method(&mut c, 2, bind("rd-q", "rd-x")).await,
        refused("access to queue 'rd-q' in vhost 'v' refused for user 'u'")
    );
    assert_eq!(
        try_method(&mut c, 3, bind("wr-q", "wr-x")).await,
        refused("access to exchange 'wr-x' in vhost 'v' refused for user 'u'")
    );
    let unbind = QueueUnbind {
        queue: "rd-q".into(),
        exchange: "rd-x".into(),
        routing_key: "k".into(),
        ..Default::default()
    };
    assert_eq!(
        try_method(&mut c, 4, unbind).await,
        refused("access to queue 'rd-q' in vhost 'v' refused for user 'u'")
    );
    let e2e = |dest: &str, src: &str| ExchangeBind {
        destination: dest.into(),
        source: src.into(),
        routing_key: "k".into(),
        ..Default::default()
    };
    assert!(matches!(
        try_method(&mut c, 5, e2e("wr-x", "rd-x")).await,
        Ok(Method::ExchangeBindOk(_))
    ));
    assert_eq!(
        try_method(&mut c, 6, e2e("rd-x", "rd-x")).await,
        refused("access to exchange 'rd-x' in vhost 'v' refused for user 'u'")
    );
}

#[tokio::test]
async fn publish_needs_write_and_consume_get_purge_need_read() {
    let (port, broker) = start_broker().await;
    restricted_vhost(&broker);
    let mut admin = admin_declares(port, &["rd-q", "wr-q"], &["wr-x", "rd-x"], "fanout").await;
    for x in ["wr-x", "rd-x"] {
        admin
            .send(
                1,
                QueueBind {
                    queue: "rd-q".into(),
                    exchange: x.into(),
                    ..Default::default()
                },
            )
            .await;
        assert!(matches!(admin.method().await.1, Method::QueueBindOk(_)));
    }
    let mut c = Client::connect_vhost(port, "u", "pw", "v").await.unwrap();
    c.open_channel(1).await;
    c.send(1, ConfirmSelect { nowait: false }).await;
    assert!(matches!(
        reply(&mut c, 1).await,
        Ok(Method::ConfirmSelectOk(_))
    ));
    c.publish(1, "wr-x", "", b"m", false).await;
    assert!(matches!(reply(&mut c, 1).await, Ok(Method::BasicAck(_))));
    // Again: now from the channel's cache.
    c.publish(1, "wr-x", "", b"m", false).await;
    assert!(matches!(reply(&mut c, 1).await, Ok(Method::BasicAck(_))));
    c.publish(1, "rd-x", "", b"m", false).await;
    assert_eq!(
        reply(&mut c, 1).await,
        refused("access to exchange 'rd-x' in vhost 'v' refused for user 'u'")
    );
    // The default exchange is checked as amq.default.
    c.open_channel(2).await;
    c.publish(2, "", "rd-q", b"m", false).await;
    assert_eq!(
        reply(&mut c, 2).await,
        refused("access to exchange 'amq.default' in vhost 'v' refused for user 'u'")
    );
    let get = |q: &str| BasicGet {
        queue: q.into(),
        no_ack: true,
    };
    assert!(matches!(
        try_method(&mut c, 3, get("rd-q")).await,
        Ok(Method::BasicGetOk(_))
    ));
    assert_eq!(
        try_method(&mut c, 4, get("wr-q")).await,
        refused("access to queue 'wr-q' in vhost 'v' refused for user 'u'")
    );
    let consume = |q: &str| BasicConsume {
        queue: q.into(),
        ..Default::default()
    };
    assert!(matches!(
        try_method(&mut c, 5, consume("rd-q")).await,
        Ok(Method::BasicConsumeOk(_))
    ));
    assert_eq!(
        try_method(&mut c, 6, consume("wr-q")).await,
        refused("access to queue 'wr-q' in vhost 'v' refused for user 'u'")
    );
    let purge = |q: &str| QueuePurge {
        queue: q.into(),
        ..Default::default()
    };
    assert!(matches!(
        try_method(&mut c, 7, purge("rd-q")).await,
        Ok(Method::QueuePurgeOk(_))
    ));
    assert_eq!(
        try_method(&mut c, 8, purge("wr-q")).await,
        refused("access to queue 'wr-q' in vhost 'v' refused for user 'u'")
    );
    // A permission change reaches a channel that cached the grant.
    c.send(9, ChannelOpen).await;
    assert!(matches!(
        reply(&mut c, 9).await,
        Ok(Method::ChannelOpenOk(_))
    ));
    c.publish(9, "wr-x", "", b"m", false).await;
    c.send(9, BasicQos::default()).await;
    assert!(matches!(reply(&mut c, 9).await, Ok(Method::BasicQosOk(_))));
    broker
        .access
        .set_permission("v", "u", perm("", "^nothing$", ".*"))
        .unwrap();
    c.publish(9, "wr-x", "", b"m", false).await;
    assert_eq!(
        reply(&mut c, 9).await,
        refused("access to exchange 'wr-x' in vhost 'v' refused for user 'u'")
    );
}

#[tokio::test]
async fn topic_permissions_limit_routing_keys() {
    let (port, broker) = start_broker().await;
    broker.add_vhost("t").unwrap();
    broker.access.put_user("alice", Some("pw"), vec![]).unwrap();
    broker
        .access
        .set_permission("t", "alice", Permission::full())
        .unwrap();
    broker
        .access
        .set_topic_permission(
            "t",
            "alice",
            TopicPermission {
                exchange: "amq.topic".into(),
                write: "^{username}\\.".into(),
                read: "^public\\.".into(),
            },
        )
        .unwrap();
    let mut c = Client::connect_vhost(port, "alice", "pw", "t")
        .await
        .unwrap();
    c.open_channel(1).await;
    c.declare_queue(1, "q", FieldTable::new()).await;
    c.send(1, ConfirmSelect { nowait: false }).await;
    assert!(matches!(
        reply(&mut c, 1).await,
        Ok(Method::ConfirmSelectOk(_))
    ));
    c.publish(1, "amq.topic", "alice.news", b"m", false).await;
    assert!(matches!(reply(&mut c, 1).await, Ok(Method::BasicAck(_))));
    c.publish(1, "amq.topic", "bob.news", b"m", false).await;
    assert_eq!(
        reply(&mut c, 1).await,
        refused("access to topic 'bob.news' in exchange 'amq.topic' in vhost 't' refused for user 'alice'")
    );
    // Other exchanges are not restricted.
    c.open_channel(2).await;
    c.publish(2, "amq.direct", "bob.news", b"m", false).await;
    c.send(2, BasicQos::default()).await;
    assert!(matches!(reply(&mut c, 2).await, Ok(Method::BasicQosOk(_))));
    let bind = |key: &str| QueueBind {
        queue: "q".into(),
        exchange: "amq.topic".into(),
        routing_key: key.into(),
        ..Default::default()
    };
    assert!(matches!(
        try_method(&mut c, 3, bind("public.#")).await,
        Ok(Method::QueueBindOk(_))
    ));
    assert_eq!(
        try_method(&mut c, 4, bind("secret.#")).await,
        refused("access to topic 'secret.#' in exchange 'amq.topic' in vhost 't' refused for user 'alice'")
    );
}

#[tokio::test]
async fn deleting_a_vhost_closes_its_connections() {
    let (port, broker) = start_broker().await;
    broker.add_vhost("gone").unwrap();
    broker
        .access
        .set_permission("gone", "guest", Permission::full())
        .unwrap();
    let mut c = Client::connect_vhost(port, "guest", "guest", "gone")
        .await
        .unwrap();
    c.open_channel(1).await;
    c.declare_queue(1, "q", FieldTable::new()).await;
    let mut other = Client::connect(port).await;
    assert!(broker.delete_vhost("gone"));
    let Method::ConnectionClose(close) = c.method().await.1 else {
        panic!("expected connection.close")
    };
    assert_eq!(close.reply_code, 320);
    assert_eq!(
        close.reply_text.as_str(),
        "CONNECTION_FORCED - vhost 'gone' is deleted"
    );
    // Connections to other vhosts carry on.
    other.open_channel(1).await;
    let err = Client::connect_vhost(port, "guest", "guest", "gone")
        .await
        .err();
    assert_eq!(connection_refused(err.expect("refused")).0, 530);
}

#[tokio::test]
async fn vhost_limits() {
    let (port, broker) = start_broker().await;
    let v = broker.add_vhost("lim").unwrap();
    broker
        .access
        .set_permission("lim", "guest", Permission::full())
        .unwrap();
    v.set_limits(VHostLimits {
        max_connections: Some(1),
        max_queues: Some(1),
    });
    let mut c = Client::connect_vhost(port, "guest", "guest", "lim")
        .await
        .unwrap();
    let err = Client::connect_vhost(port, "guest", "guest", "lim")
        .await
        .err();
    assert_eq!(
        connection_refused(err.expect("refused")),
        (
            530,
            "NOT_ALLOWED - access to vhost 'lim' refused for user 'guest': connection limit (1) is reached".into()
        )
    );
    assert!(matches!(
        try_method(&mut c, 1, queue_declare("q1")).await,
        Ok(Method::QueueDeclareOk(_))
    ));
    assert_eq!(
        try_method(&mut c, 2, queue_declare("q2")).await,
        Err((
            406,
            "PRECONDITION_FAILED - cannot declare queue 'q2': queue limit in vhost 'lim' (1) is reached"
                .into()
        ))
    );
}

#[tokio::test]
async fn not_found_texts_name_the_vhost() {
    let (port, broker) = start_broker().await;
    broker.add_vhost("named").unwrap();
    broker
        .access
        .set_permission("named", "guest", Permission::full())
        .unwrap();
    let mut c = Client::connect_vhost(port, "guest", "guest", "named")
        .await
        .unwrap();
    let passive = QueueDeclare {
        queue: "missing".into(),
        passive: true,
        ..Default::default()
    };
    assert_eq!(
        try_method(&mut c, 1, passive).await,
        Err((
            404,
            "NOT_FOUND - no queue 'missing' in vhost 'named'".into()
        ))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_vhosts_and_their_queues_survive_a_restart() {
    let disk = Arc::new(FaultyBackend::new(21));
    let (port, broker) = start_on(disk.clone()).await;
    broker.add_vhost("prod").unwrap();
    broker.vhost("prod").unwrap().set_limits(VHostLimits {
        max_connections: Some(5),
        max_queues: None,
    });
    broker
        .access
        .put_user("app", Some("s3cret"), vec!["monitoring".into()])
        .unwrap();
    broker
        .access
        .set_permission("prod", "app", Permission::full())
        .unwrap();
    // The same queue name in two vhosts: two queues, two sets of stored messages.
    for (vhost, user, pass, body) in [
        ("prod", "app", "s3cret", &b"in prod"[..]),
        ("/", "guest", "guest", &b"in root"[..]),
    ] {
        let mut c = Client::connect_vhost(port, user, pass, vhost)
            .await
            .unwrap();
        c.open_channel(1).await;
        c.send(
            1,
            QueueDeclare {
                queue: "orders".into(),
                durable: true,
                ..Default::default()
            },
        )
        .await;
        assert!(matches!(c.method().await.1, Method::QueueDeclareOk(_)));
        c.send(1, ConfirmSelect { nowait: false }).await;
        assert!(matches!(c.method().await.1, Method::ConfirmSelectOk(_)));
        c.publish_persistent(1, "", "orders", body).await;
        assert!(matches!(c.method().await.1, Method::BasicAck(_)));
    }

    let after = Arc::new(disk.crash(CrashMode::DropUnsynced));
    let (port, broker) = start_on(after).await;
    assert_eq!(
        broker.vhost("prod").unwrap().limits().max_connections,
        Some(5)
    );
    assert_eq!(
        broker.access.user("app").unwrap().tags,
        vec!["monitoring".to_owned()]
    );
    for (vhost, user, pass, body) in [
        ("prod", "app", "s3cret", &b"in prod"[..]),
        ("/", "guest", "guest", &b"in root"[..]),
    ] {
        let mut c = Client::connect_vhost(port, user, pass, vhost)
            .await
            .unwrap();
        c.open_channel(1).await;
        c.send(
            1,
            BasicGet {
                queue: "orders".into(),
                no_ack: true,
            },
        )
        .await;
        match c.next().await {
            Incoming::Content(_, Method::BasicGetOk(ok), _, got) => {
                assert_eq!(&got[..], body, "vhost {vhost}");
                assert_eq!(ok.message_count, 0, "one message per vhost");
            }
            other => panic!("expected the stored message in {vhost}, got {other:?}"),
        }
    }
    // Deleting the vhost drops its stored messages: they do not come back after a restart.
    assert!(broker.delete_vhost("prod"));
    broker.add_vhost("prod").unwrap();
    assert!(broker.vhost("prod").unwrap().queue("orders").is_none());
}

#[tokio::test]
async fn deleting_a_user_closes_its_connections() {
    let (port, broker) = start_broker().await;
    restricted_vhost(&broker);
    let mut c = Client::connect_vhost(port, "u", "pw", "v").await.unwrap();
    let mut guest = Client::connect_vhost(port, "guest", "guest", "v")
        .await
        .unwrap();
    // Through the access database, as the HTTP API deletes users.
    assert!(broker.access.delete_user("u"));
    let Method::ConnectionClose(close) = c.method().await.1 else {
        panic!("expected connection.close")
    };
    assert_eq!(
        (close.reply_code, close.reply_text.as_str()),
        (320, "CONNECTION_FORCED - user 'u' is deleted")
    );
    guest.open_channel(1).await;
    assert!(broker.access.permission("v", "u").is_none());
}
